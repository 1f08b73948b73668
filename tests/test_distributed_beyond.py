"""Two gloo processes equal one: the Ignite BeyondMetrics under ``idist.Parallel`` (uneven
shards, one of them with an empty batch) reports on every rank what the core BeyondAccuracy
reports over all the rows in one process (the top ids of tied integer scores, lower id first)."""

from __future__ import annotations

import datetime
import json
import os
import tempfile

import numpy as np
import pytest
import torch
from _dist_helpers import free_port
from _hang_guard import HANG_GUARD_S

from rankstream.core.beyond import BeyondAccuracy, ItemData

pytest.importorskip("ignite.distributed", reason="pytorch-ignite is the distributed adapter's peer")

N, K = 10, 3
NAMES = ["coverage", "entropy", "gini", "personalization", "novelty", "aplt", "diversity", "ild"]
SHARDS = [[4, 4, 2], [0, 5]]  # batch sizes per rank: uneven, and an empty batch on rank 1


def make_items() -> ItemData:
    rng = np.random.default_rng(3)
    return ItemData(
        popularity=rng.integers(0, 30, N),
        num_users=40,
        tail_max_popularity=10,
        categories=rng.integers(0, 3, N),
        embeddings=rng.normal(size=(N, 4)),
    )


def make_scores() -> np.ndarray:
    rows = sum(sum(s) for s in SHARDS)
    return np.random.default_rng(4).integers(0, 4, (rows, N)).astype(np.float64)  # ties everywhere


def worker(local_rank: int, out: str) -> None:
    import ignite.distributed as idist
    from ignite.engine import Engine

    from rankstream.adapters.ignite_beyond import BeyondMetrics

    torch.set_num_threads(1)
    rank = idist.get_rank()
    scores = torch.as_tensor(make_scores())
    start = sum(SHARDS[0]) if rank == 1 else 0
    batches = []
    for size in SHARDS[rank]:
        batches.append((scores[start : start + size], torch.zeros(size, N)))
        start += size
    metric = BeyondMetrics([f"{m}@{K}" for m in NAMES], items=make_items())
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "beyond")
    state = engine.run(batches, max_epochs=1)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({k: float(v) for k, v in state.metrics["beyond"].items()}, f)


def test_two_gloo_processes_equal_one():
    import ignite.distributed as idist

    with tempfile.TemporaryDirectory() as out:
        with idist.Parallel(
            backend="gloo",
            nproc_per_node=2,
            master_addr="127.0.0.1",
            master_port=free_port(),
            timeout=datetime.timedelta(seconds=HANG_GUARD_S),
        ) as parallel:
            parallel.run(worker, out)
        ranks = []
        for r in range(2):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    ref = BeyondAccuracy(make_items(), NAMES, top_k=K)
    ref.update(np.argsort(-make_scores(), axis=1, kind="stable")[:, :K])
    want = ref.compute()
    for r, got in enumerate(ranks):
        assert sorted(got) == sorted(want), r
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=1e-12, err_msg=f"rank {r} {key}")
