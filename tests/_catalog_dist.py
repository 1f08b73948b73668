"""The catalog's distributed scenarios, run by real gloo processes (``idist.Parallel``, spawned
once per world size) and by threads in one process (a SUM over threads through a barrier).

Every rank builds the same data from a seed (quantised embeddings: exact ties and exact
arithmetic, so the dense matrix and every chunk agree bit for bit), runs the scenarios and
writes its results to a JSON file that the test reads back; the expected values are computed in
the test process, without any process group.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _hang_guard import HANG_GUARD_S

NAMES = ["ndcg@10", "recall@20", "mrr", "map@50", "precision@5", "hit_rate@3", "auc"]
N_ITEMS = 120
#: each world's shards (start, stop) of the catalog: uneven, one of them empty in the world of 3
SHARDS = {2: [(0, 37), (37, N_ITEMS)], 3: [(0, 50), (50, 50), (50, N_ITEMS)]}
#: each world's query split: rank -> rows of the batch (rank 1 of 3 holds none)
QUERY_SPLIT = {2: [range(0, 7), range(7, 11)], 3: [range(0, 3), range(3, 3), range(3, 11)]}
CONV = {"ties": "expected", "confidence": 0.95, "relevance_threshold": None}


def data(seed: int = 5) -> dict[str, Any]:
    """Items, two batches of queries with relevant ids, grades and exclusions, and a float case."""
    rng = np.random.default_rng(seed)
    items = rng.integers(-2, 3, (N_ITEMS, 3)).astype(np.float32)
    batches = []
    for q in (11, 6):
        queries = rng.integers(-2, 3, (q, 3)).astype(np.float32)
        relevant = [rng.choice(N_ITEMS, rng.integers(0, 6), replace=False) for _ in range(q)]
        relevant[0] = np.array([36, 37, 49, 50, 119])  # at every cut of the shards
        grades = [rng.integers(1, 4, len(r)).astype(float) for r in relevant]
        exclude = [np.setdiff1d(rng.choice(N_ITEMS, 15), r) for r in relevant]
        batches.append({"queries": queries, "relevant": relevant, "grades": grades, "exclude": exclude})
    floats = rng.standard_normal((N_ITEMS, 16)), rng.standard_normal((9, 16))
    float_relevant = [rng.choice(N_ITEMS, 4, replace=False) for _ in range(9)]
    return {"items": items, "batches": batches, "floats": floats, "float_relevant": float_relevant}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    return float(x)


def _attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # reported to the test, which asserts on it
        return {"error": type(exc).__name__, "message": str(exc)[:300]}


def scenarios(rank: int, world: int, reduce: Callable[[np.ndarray], np.ndarray]) -> dict[str, Any]:
    """What every rank computes: the catalog split (two batches, quantised; one float batch),
    the failure of one rank's scorer, and a sharded callable scorer."""
    from rankstream.catalog import CatalogMetrics, top_k_ids

    d = data()
    start, stop = SHARDS[world][rank]
    out: dict[str, Any] = {}
    cm = CatalogMetrics(
        NAMES, d["items"][start:stop], shard=(start, stop), num_items=N_ITEMS, reduce=reduce,
        chunk_size=7, **CONV,
    )  # fmt: skip
    for b in d["batches"]:
        cm.update(b["queries"], b["relevant"], grades=b["grades"], exclude=b["exclude"])
    out["catalog_split"] = _jsonable(cm.compute())
    items, queries = d["floats"]
    fm = CatalogMetrics(NAMES, items[start:stop], shard=(start, stop), num_items=N_ITEMS, reduce=reduce)
    out["float_split"] = _jsonable(fm.update(queries, d["float_relevant"]).compute())

    table = torch.from_numpy(d["items"])

    def score(qs: Any, ids: Any) -> Any:  # global ids of this rank's shard
        assert bool(((ids >= start) & (ids < stop)).all()), "scored an item of another shard"
        return torch.as_tensor(qs) @ table[ids].T

    b = d["batches"][0]
    sm = CatalogMetrics(
        NAMES, score=score, num_items=N_ITEMS, shard=(start, stop), reduce=reduce, chunk_size=5, **CONV
    )
    sm.update(torch.from_numpy(b["queries"]), b["relevant"], grades=b["grades"], exclude=b["exclude"])
    out["callable_split"] = _jsonable(sm.compute())
    # each rank's best k per query merged over the shards (ties by the lower id), k past the catalog
    for k in (4, N_ITEMS + 2):
        values, ids = top_k_ids(
            b["queries"], k, items=d["items"][start:stop], num_items=N_ITEMS, shard=(start, stop),
            reduce=reduce, exclude=b["exclude"], chunk_size=6,
        )  # fmt: skip
        out[f"top_{k}"] = {"values": values.tolist(), "ids": ids.tolist()}

    def nan_on_last(qs: Any, ids: Any) -> Any:  # the last rank's shard scores NaN
        s = torch.as_tensor(qs) @ table[ids].T
        return s * float("nan") if rank == world - 1 else s

    bad = CatalogMetrics(NAMES, score=nan_on_last, num_items=N_ITEMS, shard=(start, stop), reduce=reduce)
    out["failure"] = _attempt(lambda: bad.update(torch.from_numpy(b["queries"]), b["relevant"]))
    out["failure_state"] = float(sum(np.abs(v).sum() for v in bad.state.sums.values()))

    def nan_in_chunks(qs: Any, ids: Any) -> Any:  # the last rank's chunks (4 items) score NaN
        s = torch.as_tensor(qs) @ table[ids].T
        chunk = ids.numel() == 4 and bool((ids.diff() == 1).all())
        return s * float("nan") if rank == world - 1 and chunk else s

    bad = CatalogMetrics(
        NAMES, score=nan_in_chunks, num_items=N_ITEMS, shard=(start, stop), reduce=reduce, chunk_size=4
    )
    out["chunk_failure"] = _attempt(lambda: bad.update(torch.from_numpy(b["queries"]), b["relevant"]))
    return out


def query_split(rank: int, world: int) -> dict[str, Any]:
    """Queries split over processes, the whole catalog on each: the states all-reduced."""
    from rankstream.catalog import CatalogMetrics
    from rankstream.distributed import all_reduce_state

    d = data()
    b = d["batches"][0]
    rows = list(QUERY_SPLIT[world][rank])
    cm = CatalogMetrics(NAMES, d["items"], chunk_size=9, **CONV)
    cm.update(
        b["queries"][rows], [b["relevant"][i] for i in rows], grades=[b["grades"][i] for i in rows],
        exclude=[b["exclude"][i] for i in rows],
    )  # fmt: skip
    return _jsonable(all_reduce_state(cm.state).compute())


def ignite_query_split(rank: int, world: int) -> dict[str, Any]:
    """rankstream.ignite.CatalogMetrics through an Engine per rank over its queries (a rank with
    none computes a fresh metric, as ignite requires); ``compute`` all-reduces (idist SUM)."""
    from ignite.engine import Engine

    from rankstream.ignite import CatalogMetrics

    d = data()
    b = d["batches"][0]
    rows = list(QUERY_SPLIT[world][rank])
    metric = CatalogMetrics(NAMES, d["items"], chunk_size=6, ties=CONV["ties"], confidence=CONV["confidence"])
    outputs = [
        (b["queries"][part], [b["relevant"][i] for i in part], {"exclude": [b["exclude"][i] for i in part],
         "grades": [b["grades"][i] for i in part]})
        for part in (rows[:2], rows[2:]) if part
    ]  # fmt: skip
    if not outputs:
        metric.reset()
        return _jsonable(metric.compute())
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "catalog")
    metrics = engine.run(outputs).metrics
    return _jsonable({k: v for k, v in metrics.items() if k != "catalog"})


def worker(local_rank: int, world: int, out: str) -> None:
    import ignite.distributed as idist

    from rankstream.distributed import sum_over_processes

    torch.set_num_threads(1)
    rank = idist.get_rank()
    res = scenarios(rank, world, sum_over_processes())
    res["query_split"] = query_split(rank, world)
    res["ignite"] = _attempt(lambda: ignite_query_split(rank, world))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


@functools.cache
def run_world(world: int) -> list[dict[str, Any]]:
    """Spawn ``world`` gloo processes once; every rank's results."""
    import ignite.distributed as idist
    from _dist_helpers import free_port

    with tempfile.TemporaryDirectory() as out:
        with idist.Parallel(
            backend="gloo", nproc_per_node=world, master_addr="127.0.0.1", master_port=free_port(),
            timeout=datetime.timedelta(seconds=HANG_GUARD_S),
        ) as parallel:  # fmt: skip
            parallel.run(worker, world, out)
        ranks = []
        for r in range(world):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    return ranks


def thread_world(world: int, fn: Callable[[int, Callable], Any]) -> list[Any]:
    """``fn(rank, reduce)`` on ``world`` threads whose ``reduce`` sums over the threads."""
    barrier = threading.Barrier(world, timeout=HANG_GUARD_S)
    slots: list[Any] = [None] * world
    results: list[Any] = [None] * world

    def reducer(rank: int) -> Callable[[np.ndarray], np.ndarray]:
        def reduce(x: np.ndarray) -> np.ndarray:
            slots[rank] = np.array(x, np.float64)
            barrier.wait()
            total = np.sum(slots, axis=0)
            barrier.wait()
            return total

        return reduce

    def run(rank: int) -> None:
        results[rank] = _attempt(lambda: fn(rank, reducer(rank)))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
