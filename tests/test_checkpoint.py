"""Checkpoints of the Ignite metrics: ``state_dict()`` / ``load_state_dict()`` round trips
mid-epoch for every metric, an ``Engine`` resumed from an ignite ``Checkpoint`` mid-epoch,
and the same on 2 gloo processes.

Expected value: the uninterrupted single-process run over the same batches.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from _dist_helpers import CASES, close, engine_result, make_batch, run_world, single_process
from ignite.engine import DeterministicEngine, Engine, Events
from ignite.handlers import Checkpoint, DiskSaver

from rankstream.ignite import MAP, NDCG

NAMES = list(CASES)
BATCHES = [make_batch(100 + i, size) for i, size in enumerate([5, 3, 8, 1, 6, 4])]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cut", [0, 1, 3, 6])
def test_state_dict_round_trip_mid_stream(name: str, cut: int, tmp_path) -> None:
    expected = single_process(name, BATCHES)
    case = CASES[name]
    first = case.metric()
    first.reset()
    for b in BATCHES[:cut]:
        first.update(case.batch(b))
    path = tmp_path / "metric.pt"
    torch.save(first.state_dict(), path)
    resumed = case.metric()
    resumed.reset()
    resumed.load_state_dict(torch.load(path, weights_only=True))  # tensors only: a safe load
    for k, v in first.state_sums().items():
        assert np.array_equal(resumed.state_sums()[k], v)
    for b in BATCHES[cut:]:
        resumed.update(case.batch(b))
    assert close(resumed.compute(), expected)
    assert resumed.compute() == resumed.compute()


def _evaluator(names: list[str]) -> tuple[DeterministicEngine, dict]:
    ev = DeterministicEngine(lambda engine, batch: batch)
    metrics = {n: CASES[n].metric() for n in names}
    for n, m in metrics.items():
        m.attach(ev, n)
    return ev, metrics


def _checkpoint_and_stop(ev: Engine, metrics: dict, event, dirname) -> Checkpoint:
    ckpt = Checkpoint(
        {"evaluator": ev, **metrics}, DiskSaver(str(dirname), require_empty=False), n_saved=None
    )
    ev.add_event_handler(event, ckpt)
    ev.add_event_handler(event, lambda e: e.terminate())
    return ckpt


@pytest.mark.parametrize("cut", [1, 4, 5])
def test_engine_resumed_mid_epoch_from_a_checkpoint(cut: int, tmp_path) -> None:
    """An evaluation interrupted after ``cut`` of 6 batches, saved by ignite's Checkpoint
    handler, resumed by a fresh Engine and fresh metrics: the uninterrupted numbers."""
    ev, metrics = _evaluator(NAMES)
    ckpt = _checkpoint_and_stop(ev, metrics, Events.ITERATION_COMPLETED(once=cut), tmp_path)
    ev.run(BATCHES)
    assert ev.state.metrics == {}  # interrupted mid-epoch: nothing computed yet
    path = os.path.join(tmp_path, ckpt.last_checkpoint)

    ev2, metrics2 = _evaluator(NAMES)
    saved = torch.load(path, weights_only=False)
    # A plain load: the metrics keep a loaded state through the EPOCH_STARTED that ignite
    # fires again when it resumes mid-epoch.
    Checkpoint.load_objects({"evaluator": ev2, **metrics2}, saved)
    seen: list[int] = []
    ev2.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.iteration))
    state = ev2.run(BATCHES)
    assert seen == list(range(cut + 1, len(BATCHES) + 1))  # only the batches not seen before
    for n in NAMES:
        assert close(engine_result(state.metrics, n, metrics2[n]), single_process(n, BATCHES)), n


def test_a_fresh_epoch_after_a_resumed_one_starts_from_zero(tmp_path) -> None:
    cut = 3
    ev, metrics = _evaluator(["map"])
    ckpt = _checkpoint_and_stop(ev, metrics, Events.ITERATION_COMPLETED(once=cut), tmp_path)
    ev.run(BATCHES)
    saved = torch.load(os.path.join(tmp_path, ckpt.last_checkpoint), weights_only=False)
    ev2, metrics2 = _evaluator(["map"])
    Checkpoint.load_objects({"evaluator": ev2, "map": metrics2["map"]}, saved)
    epochs: list = []
    ev2.add_event_handler(Events.EPOCH_COMPLETED, lambda e: epochs.append(e.state.metrics["map"]))
    ev2.run(BATCHES, max_epochs=2)
    assert close(epochs[0], single_process("map", BATCHES))  # resumed epoch: uninterrupted result
    assert close(epochs[1], single_process("map", BATCHES))  # next epoch: reset, not doubled


def test_resume_at_an_epoch_boundary_starts_the_next_epoch_from_zero(tmp_path) -> None:
    ev, metrics = _evaluator(["map", "ndcg"])
    ckpt = _checkpoint_and_stop(ev, metrics, Events.EPOCH_COMPLETED(once=1), tmp_path)
    ev.run(BATCHES, max_epochs=2)
    saved = torch.load(os.path.join(tmp_path, ckpt.last_checkpoint), weights_only=False)
    ev2, metrics2 = _evaluator(["map", "ndcg"])
    Checkpoint.load_objects({"evaluator": ev2, **metrics2}, saved)
    state = ev2.run(BATCHES, max_epochs=2)
    assert state.epoch == 2
    for n in ("map", "ndcg"):
        assert close(state.metrics[n], single_process(n, BATCHES))  # epoch 2 alone, not doubled


def test_load_state_dict_copies_and_checks_the_state() -> None:
    src = CASES["map"].metric()
    src.reset()
    src.update(BATCHES[0])
    sd = src.state_dict()
    snapshot = sd["__metric_state_per_rank"][0]["_sums"].clone()
    dst = CASES["map"].metric()
    dst.load_state_dict(sd)
    dst.update(BATCHES[1])
    assert torch.equal(sd["__metric_state_per_rank"][0]["_sums"], snapshot)
    with pytest.raises(ValueError, match="shape"):
        MAP(top_k=[1, 3, 5]).load_state_dict(MAP(top_k=[1, 3]).state_dict())
    with pytest.raises(ValueError, match="does not fit"):
        NDCG(top_k=[1, 3]).load_state_dict({"__metric_state_per_rank": [{"_sums": torch.zeros(2)}]})


def test_state_dict_is_a_snapshot() -> None:
    m = CASES["map"].metric()
    m.reset()
    m.update(BATCHES[0])
    sd = m.state_dict()
    snapshot = sd["__metric_state_per_rank"][0]["_sums"].clone()
    m.update(BATCHES[1])
    assert torch.equal(sd["__metric_state_per_rank"][0]["_sums"], snapshot)


@pytest.mark.parametrize("name", NAMES)
def test_distributed_checkpoint_mid_epoch_on_two_gloo_processes(name: str) -> None:
    """2 ranks stop mid-epoch (after 2 and 1 of their 3 and 2 batches); the gathered metric
    state_dict is saved by rank 0, every rank saves its engine state; fresh engines and
    metrics on both ranks load them and finish the epoch: the single-process numbers."""
    out = run_world(2)
    cfg = out["config"]
    expected = single_process(name, [b for shard in cfg["shards"] for b in shard])
    for r, res in enumerate(out["ranks"]):
        assert close(res["checkpoint"]["metrics"][name], expected)
        shard_len = len(cfg["shards"][r])
        assert res["checkpoint"]["iterations"] == list(range(cfg["cut"][r] + 1, shard_len + 1))
