"""Map-reduce of rankstream metrics over shards, outside any framework.

A rankstream state is a bag of sums, so the metric over a whole dataset is the metric of
the field-wise sum of the states of its shards. Here each shard is processed in its own
process (``concurrent.futures.ProcessPoolExecutor``; Spark, Ray, Dask or a batch scheduler
work the same way):

* map:    each worker reads ONE shard, streams it in batches into a
          ``State(kernel)`` per metric and returns ``state.state_dict()`` (a small dict of
          float64 numpy arrays: a few numbers per metric, never the predictions);
* reduce: ``merge(State(kernel, sums_1), State(kernel, sums_2), ...)`` and ``compute()``.

The shards are uneven (sizes 0 to 900 lists, one without any usable list) and the result
equals the single-process pass over all the data. numpy only: no torch needed.

Run: ``python examples/mapreduce_shards.py``.
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from rankstream import MAPKernel, NDCGKernel, State, merge

N_ITEMS = 50
# (seed, number of lists, usable): shard 2 is empty, shard 4 has no relevant item at all.
SHARDS = [(0, 900, True), (1, 37, True), (2, 0, True), (3, 412, True), (4, 64, False), (5, 250, True)]


def kernels() -> dict[str, Any]:
    """The metrics, as core kernels (ignite's conventions: AP over min(R, k), nDCG gain
    2^y - 1 with labels below 1 counted 0, lists without a relevant item skipped)."""
    return {"MAP": MAPKernel(top_k=[1, 5, 10]), "nDCG": NDCGKernel(top_k=[1, 5, 10])}


def read_shard(seed: int, n_lists: int, usable: bool = True) -> tuple[np.ndarray, ...]:
    """Stands for reading one shard file: scores, graded labels, a candidate mask and a
    weight per list."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(n_lists, N_ITEMS)).round(1)  # rounding makes ties
    labels = rng.integers(1, 4, size=(n_lists, N_ITEMS)) * (rng.random((n_lists, N_ITEMS)) < 0.1)
    labels = labels.astype(np.float64)
    mask = rng.random((n_lists, N_ITEMS)) > 0.1
    weights = rng.choice([0.5, 1.0, 2.0], size=n_lists)
    if not usable:
        labels[:] = 0.0
    return scores, labels, mask, weights


def map_shard(shard: tuple[int, int, bool], batch_size: int = 128) -> dict[str, dict[str, np.ndarray]]:
    """MAP step: one shard -> the field sums of every metric (picklable plain data)."""
    states = {name: State(kernel) for name, kernel in kernels().items()}
    scores, labels, mask, weights = read_shard(*shard)
    for start in range(0, len(scores), batch_size):
        sl = slice(start, start + batch_size)
        for st in states.values():
            st.update(scores[sl], labels[sl], mask[sl], weights[sl])
    return {name: st.state_dict() for name, st in states.items()}


def reduce_states(results: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, State]:
    """REDUCE step: merge the shards' sums metric by metric (any order, any grouping)."""
    ks = kernels()
    return {name: merge(*(State(kernel, r[name]) for r in results)) for name, kernel in ks.items()}


def map_reduce(shards: list[tuple[int, int, bool]], max_workers: int = 2) -> dict[str, State]:
    # "spawn": portable, and safe in a parent that has threads (torch, a test runner).
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max_workers, mp_context=ctx) as pool:
        results = list(pool.map(map_shard, shards))
    return reduce_states(results)


def single_process(shards: list[tuple[int, int, bool]]) -> dict[str, State]:
    """The reference: one state per metric, every list of every shard, one big batch."""
    data = [read_shard(*s) for s in shards]
    scores, labels, mask, weights = (np.concatenate([d[i] for d in data]) for i in range(4))
    states = {name: State(kernel) for name, kernel in kernels().items()}
    for st in states.values():
        st.update(scores, labels, mask, weights)
    return states


def main() -> int:
    reduced = map_reduce(SHARDS)
    reference = single_process(SHARDS)
    print(f"{len(SHARDS)} shards of {[s[1] for s in SHARDS]} lists, mapped on 2 processes")
    ok = True
    for name in kernels():
        got, want = reduced[name].compute(), reference[name].compute()
        print(f"map-reduce     {name}@[1, 5, 10]: [{', '.join(f'{v:.12f}' for v in got)}]")
        print(f"single process {name}@[1, 5, 10]: [{', '.join(f'{v:.12f}' for v in want)}]")
        ok = ok and bool(np.allclose(got, want, rtol=0, atol=1e-12))
    print("OK: map-reduce == single process" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
