"""Framework-free aggregation: ``merge`` of core states and the map-reduce example
(``examples/mapreduce_shards.py``: ``concurrent.futures`` processes over uneven shards).

Expected values: one ``State`` over all the data in this process, and the naive per-list
references of ``tests/reference.py``.
"""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest
from _examples import printed_numbers, run_example

from rankstream import MAPKernel, NDCGKernel, State, merge

import reference as R

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import mapreduce_shards as ex  # noqa: E402

SHARDS = [(10, 120, True), (11, 0, True), (12, 7, False), (13, 301, True), (14, 1, True)]


def _close(a, b) -> bool:
    return np.allclose(a, b, rtol=0, atol=1e-12)


def _naive(name: str, shards: list) -> list[float | None]:
    data = [ex.read_shard(*s) for s in shards]
    scores, labels, mask, weights = (np.concatenate([d[i] for d in data]).tolist() for i in range(4))
    per_list = R.average_precision if name == "MAP" else R.ndcg
    return [R.mean_over_lists(per_list, scores, labels, k, masks=mask, weights=weights) for k in (1, 5, 10)]


def test_map_reduce_over_processes_equals_single_process() -> None:
    reduced = ex.map_reduce(SHARDS, max_workers=2)
    reference = ex.single_process(SHARDS)
    for name in ex.kernels():
        got = reduced[name].compute()
        assert _close(got, reference[name].compute())
        assert _close(got, _naive(name, SHARDS))
        for field, total in reference[name].sums.items():
            assert _close(reduced[name].sums[field], total), field


def test_reduce_is_order_and_grouping_free() -> None:
    results = [ex.map_shard(s, batch_size=b) for s, b in zip(SHARDS, (5, 64, 3, 128, 1), strict=True)]
    flat = ex.reduce_states(results)
    backwards = ex.reduce_states(results[::-1])
    # tree reduction: ((0 + 1) + (2 + 3)) + 4, shard states rebuilt from pickled sums
    ks = ex.kernels()
    for name, kernel in ks.items():
        states = [State(kernel, pickle.loads(pickle.dumps(r[name]))) for r in results]
        tree = merge(merge(states[0], states[1]), merge(states[2], states[3]), states[4])
        want = flat[name].compute()
        assert _close(backwards[name].compute(), want)
        assert _close(tree.compute(), want)
        assert _close((states[4] + states[0] + states[3] + states[2] + states[1]).compute(), want)


def test_merge_identity_copy_and_errors() -> None:
    scores, labels, mask, weights = ex.read_shard(20, 30)
    a = State(MAPKernel([1, 5]))
    a.update(scores, labels, mask, weights)
    empty = State(MAPKernel([1, 5]))
    for merged in (merge(a, empty), merge(empty, a), merge(a)):
        assert merged.compute() == a.compute()
    m = merge(a, empty)
    m.sums["count"] += 1.0  # the merged state is a new one
    assert float(a.sums["count"]) == float(m.sums["count"]) - 1.0
    # a whole State pickles (what a map step can return instead of its state_dict)
    assert pickle.loads(pickle.dumps(a)).compute() == a.compute()
    with pytest.raises(ValueError, match="different fields"):
        merge(a, State(NDCGKernel([1, 5, 10])))
    with pytest.raises(ValueError, match="at least one"):
        merge()


def test_example_script_prints_matching_numbers() -> None:
    proc = run_example("mapreduce_shards.py")

    def numbers(prefix: str) -> list[float]:
        return printed_numbers(proc.stdout, prefix)

    for name in ("MAP", "nDCG"):
        single = numbers(f"single process {name}")
        assert _close(numbers(f"map-reduce     {name}"), single)
        assert _close(single, _naive(name, ex.SHARDS))
    assert "OK: map-reduce == single process" in proc.stdout
