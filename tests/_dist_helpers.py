"""Shared machinery of the distributed / checkpoint tests.

* ``CASES``: every Ignite metric under test, by name. Adding a metric is ONE line here
  (a factory, and optionally a naive reference); every distributed and checkpoint test
  then covers it.
* ``make_batch``: random ``(y_pred, y, {"mask", "sample_weight"})`` batches with tied
  scores, graded labels, masked items, lists with no relevant item, fully masked lists.
* ``single_process``: the expected value, one process, no ``idist`` (the independent
  source), and ``naive``: the per-list reference of ``tests/reference.py``.
* ``run_world(n)``: spawns ``n`` gloo processes ONCE per pytest process (cached) through
  ``idist.Parallel`` and runs every distributed scenario in them; each rank writes its
  results to a JSON file, read back here.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from _hang_guard import HANG_GUARD_S

from rankstream.core.ranks.families import RANK_TYPES

import reference as R

N_ITEMS = 12


# ---------------------------------------------------------------------------------------
# Metrics under test
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """An Ignite metric under test. ``reference(scores, labels, masks, weights)`` gives the
    naive value per k (lists of python rows), or is None (then only the single-process run
    is the expected value). ``prepare`` maps a test batch to the metric's input (it is also
    the metric's ``output_transform`` under an Engine; it must be idempotent)."""

    name: str
    factory: Callable[..., Any]
    reference: Callable[..., list[float | None]] | None = None
    prepare: Callable[[tuple], tuple] | None = None

    def metric(self) -> Any:
        """A fresh metric (with ``prepare`` as output_transform)."""
        if self.prepare is None:
            return self.factory()
        return self.factory(output_transform=self.prepare)

    def batch(self, batch: tuple) -> tuple:
        """The metric's input for ``metric.update`` outside an Engine."""
        return batch if self.prepare is None else self.prepare(batch)


def binary_labels(batch: tuple) -> tuple:
    """``y > 0`` as 0/1 labels: the rank-based metrics take binary labels."""
    y_pred, y, extra = batch
    return y_pred, (y > 0).to(y.dtype), extra


def two_sides(batch: tuple) -> tuple:
    """Binary labels for two sides stacked on axis 1 (``(B, 2, N)``; the second side's lists
    reversed), the input of a metric with ``sides=("head", "tail")``; a stacked batch as it is."""
    if batch[0].ndim == 3:
        return batch
    y_pred, y, extra = binary_labels(batch)

    def stack(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x, x.flip(1)], 1)

    extra = {**extra, **({"mask": stack(extra["mask"])} if extra.get("mask") is not None else {})}
    return stack(y_pred), stack(y), extra


def _naive(per_list: Callable[..., float | None], ks: Sequence[int], empty: str, **kw: Any) -> Callable:
    def ref(scores: list, labels: list, masks: list, weights: list) -> list[float | None]:
        return [
            R.mean_over_lists(per_list, scores, labels, k, masks=masks, weights=weights, empty=empty, **kw)
            for k in ks
        ]

    return ref


def _map(**kw: Any) -> Any:
    from rankstream.ignite import MAP

    return MAP(**kw)


def _ndcg(**kw: Any) -> Any:
    from rankstream.ignite import NDCG

    return NDCG(**kw)


def _list_metrics(metrics: list[str], **kw: Any) -> Callable[..., Any]:
    from rankstream.ignite import ListMetrics

    return functools.partial(ListMetrics, metrics, **kw)


def _paired(metrics: list[str], **kw: Any) -> Callable[..., Any]:
    from rankstream.ignite import PairedComparison

    return functools.partial(PairedComparison, metrics, **kw)


def two_rankers(batch: tuple) -> tuple:
    """Two rankers' scores stacked on axis 1 (``(B, 2, N)``): the batch's own and another
    tie-rich ranking of the same items; a stacked batch as it is."""
    if batch[0].ndim == 3:
        return batch
    y_pred, y, extra = batch
    other = (y_pred * 7 + torch.arange(y_pred.shape[1], dtype=y_pred.dtype)) % 5
    return torch.stack([y_pred, other], 1), y, extra


def _rank_metric(name: str, **kw: Any) -> Callable[[], Any]:
    """Factory of ``rankstream.ignite.<name>``."""
    import rankstream.ignite as rs_ignite

    return functools.partial(getattr(rs_ignite, name), **kw)


def _cases() -> dict[str, Case]:
    cases = [
        Case(
            "map", functools.partial(_map, top_k=[1, 3, 20]), _naive(R.average_precision, [1, 3, 20], "skip")
        ),
        Case(
            "map_all_zero",
            functools.partial(_map, top_k=[2, 5], ignore_zero_hits=False, denominator="all"),
            _naive(R.average_precision, [2, 5], "zero", denominator="all"),
        ),
        Case("ndcg", functools.partial(_ndcg, top_k=[1, 3, 20]), _naive(R.ndcg, [1, 3, 20], "skip")),
        Case(
            "ndcg_linear_zero",
            functools.partial(
                _ndcg,
                top_k=[2, 5],
                gain_function="linear_rank",
                ignore_zero_hits=False,
                relevance_threshold=None,
            ),
            _naive(R.ndcg, [2, 5], "zero", gain=lambda y: y, threshold=None),
        ),
    ]
    # Rank-based metrics (binary labels: each positive ranked against the non-positives).
    # One line per metric.
    rank_based: list[tuple[str, Callable[..., Any]]] = [
        ("hits", _rank_metric("HitsAtK", k=[1, 3])),
        ("mrr", _rank_metric("InverseHarmonicMeanRank")),
        ("gmr", _rank_metric("GMR")),
        ("amr", _rank_metric("ArithmeticMeanRank")),
        ("rank_based", _rank_metric("RankBasedMetrics", ks=[1, 3, 10])),
        ("hits_pessimistic_z", _rank_metric("HitsAtK", k=5, rank_type="pessimistic", output="z")),
    ]
    cases += [Case(name, f, prepare=binary_labels) for name, f in rank_based]
    # PyKEEN's report: every rank type, two sides (stacked) and both
    report = _rank_metric("RankBasedMetrics", ks=[1, 3], rank_type=RANK_TYPES, sides=("head", "tail"))
    cases.append(Case("report", report, prepare=two_sides))
    # With confidence: the standard error, interval and count from the extra sums (all-reduced
    # as the others); the value part is checked against the naive reference.
    cases += [
        Case(
            "ndcg_ci",
            functools.partial(_ndcg, top_k=[1, 3, 20], confidence=0.95),
            _naive(R.ndcg, [1, 3, 20], "skip"),
        ),
        Case("list_metrics_ci", _list_metrics(["ndcg@3", "map@5", "mrr@10"], confidence=0.95)),
        Case("hits_ci", _rank_metric("HitsAtK", k=[1, 3], confidence=0.95), prepare=binary_labels),
        Case("paired", _paired(["ndcg@3", "map@5"], rankers=["model", "other"]), prepare=two_rankers),
    ]
    return {c.name: c for c in cases}


CASES = _cases()
PADDING_CASES = ("map", "ndcg")  # the DistributedSampler scenario (lists with a relevant item)


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------
def make_batch(seed: int, size: int, *, usable: bool = True, weighted: bool = True) -> tuple:
    """One batch ``(y_pred, y, {"mask": m, "sample_weight": w})``.

    Scores are small integers (many ties), labels graded 0..3 (about a third relevant),
    ~20% of items masked, a few lists with no relevant item and, for ``size >= 4``, one
    fully masked list. ``usable=False``: no list holds a relevant unmasked item (half the
    lists fully masked, the rest all-zero labels)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 6, (size, N_ITEMS), generator=g).to(torch.float64)
    labels = torch.randint(1, 4, (size, N_ITEMS), generator=g).to(torch.float64)
    labels = labels * (torch.rand(size, N_ITEMS, generator=g) < 0.35)
    mask = torch.rand(size, N_ITEMS, generator=g) > 0.2
    if size >= 3:
        labels[1] = 0.0  # a list with no relevant item
    if size >= 4:
        mask[2] = False  # a fully masked list
    if not usable:
        labels[::2] = 0.0
        mask[1::2] = False
    if weighted:
        weight = torch.tensor([0.5, 1.0, 2.0, 1.5])[torch.randint(0, 4, (size,), generator=g)].to(
            torch.float64
        )
    else:
        weight = torch.ones(size, dtype=torch.float64)
    return scores, labels, {"mask": mask, "sample_weight": weight}


def rows(batches: Sequence[tuple]) -> tuple[list, list, list, list]:
    """Python rows ``(scores, labels, masks, weights)`` of all the batches, concatenated."""
    s: list = []
    y: list = []
    m: list = []
    w: list = []
    for scores, labels, extra in batches:
        s += scores.tolist()
        y += labels.tolist()
        m += extra["mask"].tolist()
        w += extra["sample_weight"].tolist()
    return s, y, m, w


def single_process(name: str, batches: Sequence[tuple], *, concat: bool = False) -> Any:
    """The metric over ``batches`` in this process (world of one): the expected value.
    ``concat=True`` feeds all the lists as ONE batch (a different split of the same data)."""
    case = CASES[name]
    metric = case.metric()
    metric.reset()
    if concat and batches:
        metric.update(case.batch(concat_batches(batches)))
    else:
        for b in batches:
            metric.update(case.batch(b))
    return metric.compute()


def concat_batches(batches: Sequence[tuple]) -> tuple:
    return (
        torch.cat([b[0] for b in batches]),
        torch.cat([b[1] for b in batches]),
        {k: torch.cat([b[2][k] for b in batches]) for k in ("mask", "sample_weight")},
    )


def naive(name: str, batches: Sequence[tuple]) -> list[float | None] | None:
    ref = CASES[name].reference
    return None if ref is None else ref(*rows(batches))


def padding_dataset(n: int, seed: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` lists, each with at least one relevant item, of clearly different AP / nDCG."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(n, N_ITEMS, generator=g, dtype=torch.float64)
    labels = (torch.rand(n, N_ITEMS, generator=g) < 0.25).to(torch.float64) * 2.0
    labels[:, 0] = 2.0  # at least one relevant item per list
    scores[: n // 2, 0] = 2.0  # half the lists rank it first (AP 1), half do not
    return scores, labels


# ---------------------------------------------------------------------------------------
# Worlds: the shards of every scenario
# ---------------------------------------------------------------------------------------
def world_config(world: int) -> dict[str, Any]:
    """Uneven shards: different numbers of batches and batch sizes per rank; in the world
    of 3, rank 1 has NO batch and rank 2 only lists with no usable item."""
    if world == 2:
        shards = [
            [make_batch(1, 6), make_batch(2, 2), make_batch(3, 9)],
            [make_batch(4, 4), make_batch(5, 1, weighted=False)],
        ]
        extra = [make_batch(6, 3), None]
        cut = [2, 1]  # mid-epoch checkpoint after this many iterations
    elif world == 3:
        shards = [
            [make_batch(11, 5), make_batch(12, 3), make_batch(13, 7)],
            [],
            [make_batch(14, 4, usable=False), make_batch(15, 2, usable=False)],
        ]
        extra = [None, make_batch(16, 2), make_batch(17, 1, usable=False)]
        cut = None
    else:
        raise ValueError(world)
    return {"world": world, "shards": shards, "extra": extra, "cut": cut, "padding_n": 7, "padding_bs": 2}


def close(a: Any, b: Any, tol: float = 1e-12) -> bool:
    """Metric results equal to float precision: floats, lists by k, or dicts of those."""
    if a is None or b is None:
        return False
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(close(a[k], b[k], tol) for k in a)
        )
    return bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def run_world(world: int) -> dict[str, Any]:
    """Spawn ``world`` gloo processes (``idist.Parallel``), run every scenario, return
    ``{"config": ..., "ranks": [result of rank 0, rank 1, ...]}``. Cached: one spawn per
    world size per pytest process."""
    import ignite.distributed as idist

    cfg = world_config(world)
    with tempfile.TemporaryDirectory() as out:
        with idist.Parallel(
            backend="gloo",
            nproc_per_node=world,
            master_addr="127.0.0.1",
            master_port=free_port(),
            timeout=datetime.timedelta(seconds=HANG_GUARD_S),  # a deadlocked collective fails the test
        ) as parallel:
            parallel.run(worker, cfg, out)
        ranks = []
        for r in range(world):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    return {"config": cfg, "ranks": ranks}


# ---------------------------------------------------------------------------------------
# What every rank runs
# ---------------------------------------------------------------------------------------
def _attempt(fn: Callable[[], Any]) -> Any:
    """The value, or ``{"error": type name, "message": ...}``."""
    try:
        return fn()
    except Exception as exc:  # reported to the parent, which asserts on it
        return {"error": type(exc).__name__, "message": str(exc)[:300]}


def engine_result(metrics: dict[str, Any], name: str, metric: Any) -> Any:
    """What ``compute()`` returns, read back from ``engine.state.metrics``: a metric with
    quantities (a confidence level) writes ``name`` (the value) and ``f"{name}_{q}"``."""
    quantities = getattr(metric.kernel, "quantities", ())
    if not quantities or isinstance(metrics[name], dict):
        return metrics[name]
    return {"value": metrics[name], **{q: metrics[f"{name}_{q}"] for q in quantities}}


def worker(local_rank: int, cfg: dict[str, Any], out: str) -> None:
    import ignite.distributed as idist
    import torch.distributed as dist
    from ignite.engine import DeterministicEngine, Engine, Events
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from rankstream import State
    from rankstream.distributed import (
        all_reduce_state,
        batch_padding_weights,
        real_sample_count,
    )

    torch.set_num_threads(1)
    rank, world = idist.get_rank(), idist.get_world_size()
    assert world == cfg["world"], (world, cfg["world"])
    shard = cfg["shards"][rank]
    names = list(CASES)
    res: dict[str, Any] = {"rank": rank, "world": world}

    # A. An evaluator Engine per rank, uneven shards. A rank with no batch cannot run an
    #    Engine; it still takes part in every metric's all-reduce, in the same order.
    metrics = {n: CASES[n].metric() for n in names}
    if shard:
        evaluator = Engine(lambda engine, batch: batch)
        for n, m in metrics.items():
            m.attach(evaluator, n)
        state = evaluator.run(shard)
        res["engine"] = {n: engine_result(state.metrics, n, m) for n, m in metrics.items()}
    else:
        res["engine"] = {}
        for n, m in metrics.items():
            m.reset()
            res["engine"][n] = m.compute()

    # B. Lifecycle (ignite PR #2803): compute twice, then update after compute.
    res["lifecycle"] = {}
    for n in names:
        m = CASES[n].metric()
        m.reset()
        for b in shard:
            m.update(CASES[n].batch(b))
        local_before = m.state_sums()
        first = m.compute()
        second = m.compute()
        local_after = m.state_sums()
        untouched = all(bool((local_before[k] == local_after[k]).all()) for k in local_before)
        if cfg["extra"][rank] is not None:
            m.update(CASES[n].batch(cfg["extra"][rank]))
        third = m.compute()
        res["lifecycle"][n] = {"first": first, "second": second, "third": third, "local_untouched": untouched}

    # C. No usable list on any rank: every rank raises, none hangs.
    res["nothing"] = {}
    for n in names:
        m = CASES[n].metric()
        m.reset()
        res["nothing"][n] = _attempt(m.compute)

    # D. DistributedSampler pads the data with duplicates; weights 0 drop them.
    scores, labels = padding_dataset(cfg["padding_n"])
    ds = TensorDataset(scores, labels)
    sampler = DistributedSampler(ds, shuffle=True, seed=7)
    loader = DataLoader(ds, batch_size=cfg["padding_bs"], sampler=sampler)

    def plain_step(engine: Engine, batch: Any) -> Any:
        return batch[0], batch[1]

    def weighted_step(engine: Engine, batch: Any) -> Any:
        i = (engine.state.iteration - 1) % engine.state.epoch_length
        w = batch_padding_weights(loader.sampler, i, loader.batch_size)
        return batch[0], batch[1], {"sample_weight": w}

    res["padding"] = {"real": real_sample_count(sampler), "num_samples": len(sampler)}
    for label, step in (("plain", plain_step), ("weighted", weighted_step)):
        ev = Engine(step)
        for n in PADDING_CASES:
            CASES[n].metric().attach(ev, n)
        res["padding"][label] = ev.run(loader).metrics

    # E. torch.distributed recipe on core States: all_reduce_state (gloo).
    res["all_reduce_state"] = {}
    for n in names:
        st = State(CASES[n].metric().kernel)
        for y_pred, y, extra in map(CASES[n].batch, shard):
            st.update(y_pred, y, extra["mask"], extra["sample_weight"])
        local = {k: v.copy() for k, v in st.sums.items()}
        total = all_reduce_state(st)
        again = all_reduce_state(st)
        untouched = all(bool((local[k] == st.sums[k]).all()) for k in local)
        res["all_reduce_state"][n] = {
            "value": _attempt(total.compute),
            "again": _attempt(again.compute),
            "local_untouched": untouched,
        }
    if world >= 3:  # a subgroup: ranks 0 and 1 only (new_group is collective over all ranks)
        group = dist.new_group([0, 1])
        res["subgroup"] = {}
        if rank in (0, 1):
            for n in names:
                st = State(CASES[n].metric().kernel)
                for y_pred, y, extra in map(CASES[n].batch, shard):
                    st.update(y_pred, y, extra["mask"], extra["sample_weight"])
                res["subgroup"][n] = _attempt(all_reduce_state(st, group=group).compute)

    # F. Mid-epoch checkpoint and resume (every rank needs >= 2 batches).
    if cfg["cut"] is not None:
        metric_file = os.path.join(out, "metrics.pt")
        engine_file = os.path.join(out, f"engine{rank}.pt")
        ev = DeterministicEngine(lambda engine, batch: batch)
        first_metrics = {n: CASES[n].metric() for n in names}
        for n, m in first_metrics.items():
            m.attach(ev, n)
        ev.add_event_handler(Events.ITERATION_COMPLETED(once=cfg["cut"][rank]), lambda e: e.terminate())
        ev.run(shard)
        assert not ev.state.metrics, "terminated mid-epoch: no metric may have been computed"
        saved = {n: m.state_dict() for n, m in first_metrics.items()}  # collective (all_gather)
        if rank == 0:
            torch.save(saved, metric_file)
        torch.save(ev.state_dict(), engine_file)
        idist.barrier()
        # "Restart": fresh engine and metrics, state read back from the files.
        ev2 = DeterministicEngine(lambda engine, batch: batch)
        resumed = {n: CASES[n].metric() for n in names}
        for n, m in resumed.items():
            m.attach(ev2, n)
        ev2.load_state_dict(torch.load(engine_file, weights_only=False))
        loaded = torch.load(metric_file, weights_only=True)
        for n, m in resumed.items():
            m.load_state_dict(loaded[n])  # kept through the EPOCH_STARTED of the resume
        seen: list[int] = []
        ev2.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(e.state.iteration))
        ran = ev2.run(shard).metrics
        res["checkpoint"] = {
            "metrics": {n: engine_result(ran, n, m) for n, m in resumed.items()},
            "iterations": seen,
        }

    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
