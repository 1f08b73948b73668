"""The whole catalog over several processes: the catalog split (each process counts its shard,
uneven shards, one empty; the relevant items' scores come from the process holding each item;
the counts are summed before the metric) and the queries split (the states' sums all-reduced),
on 2 and 3 real gloo processes and on threads, against the dense path in this process
(ListMetrics on the materialised matrix with the excluded items masked) and one process's
CatalogMetrics. A failure on one process raises on every process."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _catalog_dist import CONV, N_ITEMS, NAMES, SHARDS, data, run_world, scenarios, thread_world

from rankstream import ListMetrics, State
from rankstream.catalog import CatalogMetrics

pytestmark = pytest.mark.filterwarnings("ignore::rankstream.SwappedInputsWarning")


def dense(batches, items, defaults=None, **conv):
    """ListMetrics on the materialised matrices of the batches, excluded items masked."""
    state = State(ListMetrics(NAMES, defaults, **conv))
    for b in batches:
        scores = b["queries"].astype(np.float64) @ items.T.astype(np.float64)
        labels = np.zeros(scores.shape)
        valid = np.ones(scores.shape, bool)
        for i, r in enumerate(b["relevant"]):
            labels[i, r] = b["grades"][i] if b.get("grades") is not None else 1.0
            if b.get("exclude") is not None:
                valid[i, b["exclude"][i]] = False
        state.update(scores, labels, valid)
    return state.compute()


def assert_close(got, ref, rtol=1e-9):
    assert set(got) == set(ref)
    for key, value in ref.items():
        tol = 1e-7 if key.endswith(("_stderr", "_ci_low", "_ci_high")) else 1e-12
        assert got[key] == pytest.approx(value, rel=rtol, abs=tol), key


def expected():
    d = data()
    quantised = dense(d["batches"], d["items"], **CONV)
    items, queries = d["floats"]
    floats = CatalogMetrics(NAMES, items).update(queries, d["float_relevant"]).compute()
    first = dense(d["batches"][:1], d["items"], **CONV)
    return quantised, floats, first


def ignite_expected():
    """rankstream.ignite.ListMetrics's defaults on the materialised matrix of the first batch."""
    from rankstream.adapters.ignite_lists import PEER_DEFAULTS

    d = data()
    b = d["batches"][0]
    return dense([b], d["items"], PEER_DEFAULTS, ties=CONV["ties"], confidence=CONV["confidence"])


def check_ranks(results, world):
    quantised, floats, first = expected()
    for rank, res in enumerate(results):
        assert "error" not in res, (rank, res)
        assert_close(res["catalog_split"], quantised)
        assert_close(res["float_split"], floats, rtol=1e-6)
        assert_close(res["callable_split"], first)
        # the last rank's scorer gives NaN: every rank raises (none hangs), state untouched
        failure = res["failure"]
        assert failure["error"] == "ValueError", failure
        mine = rank == world - 1
        assert ("NaN" in failure["message"]) if mine else ("other process" in failure["message"])
        assert res["failure_state"] == 0.0
        chunk = res["chunk_failure"]
        assert chunk["error"] == "ValueError", chunk
        assert ("NaN" in chunk["message"]) if mine else ("other process" in chunk["message"])


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_processes_equal_one_process(world):
    results = run_world(world)
    check_ranks(results, world)
    quantised_first = expected()[2]
    for res in results:  # queries split: the states all-reduced, and the Ignite metric's idist SUM
        assert_close(res["query_split"], quantised_first)
        assert "error" not in res["ignite"], res["ignite"]
        ignite = res["ignite"]
        assert_close(ignite, ignite_expected())


def test_threads_equal_one_process():
    world = 3
    results = thread_world(world, lambda rank, reduce: scenarios(rank, world, reduce))
    check_ranks(results, world)


def test_one_process_equals_the_dense_path_and_shards_must_cover_the_catalog():
    d = data()
    b = d["batches"][0]
    one = CatalogMetrics(NAMES, d["items"], chunk_size=4, **CONV)
    one.update(b["queries"], b["relevant"], grades=b["grades"], exclude=b["exclude"])
    assert_close(one.compute(), dense([b], d["items"], **CONV))

    # overlapping shards: an item held twice is an error on every process
    overlap = [(0, 60), (50, N_ITEMS)]

    def run(rank, reduce):
        start, stop = overlap[rank]
        cm = CatalogMetrics(
            NAMES, d["items"][start:stop], shard=(start, stop), num_items=N_ITEMS, reduce=reduce
        )
        return cm.update(b["queries"], b["relevant"])

    for res in thread_world(2, run):
        assert res["error"] == "ValueError" and "shards" in res["message"], res
    with pytest.raises(ValueError, match="shard's 37 embeddings"):
        CatalogMetrics(NAMES, d["items"], shard=SHARDS[2][0], num_items=N_ITEMS, reduce=lambda x: x)
    with pytest.raises(ValueError, match="num_items"):
        CatalogMetrics(NAMES, d["items"][:37], shard=(0, 37), reduce=lambda x: x)
    with pytest.raises(ValueError, match="shard"):
        CatalogMetrics(NAMES, d["items"][:37], shard=(40, 3), num_items=N_ITEMS, reduce=lambda x: x)


def test_sum_over_processes_outside_a_group_is_the_identity():
    from rankstream.distributed import sum_over_processes

    x = np.arange(5.0)
    np.testing.assert_array_equal(sum_over_processes()(x), x)
    assert torch.distributed.is_available()
