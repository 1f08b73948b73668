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


def reference_top(scores, k, exclude):
    """Each row's best k ids by (score descending, id ascending), excluded ids left out (-1 past
    the end): a lexsort of the materialised matrix."""
    ids = np.full((scores.shape[0], k), -1)
    for i, row in enumerate(scores):
        keep = np.setdiff1d(np.arange(row.shape[0]), exclude[i])
        best = keep[np.lexsort((keep, -row[keep]))][:k]
        ids[i, : best.shape[0]] = best
    return ids


def check_ranks(results, world):
    quantised, floats, first = expected()
    d = data()
    b = d["batches"][0]
    scores = b["queries"].astype(np.float64) @ d["items"].T.astype(np.float64)
    for rank, res in enumerate(results):
        assert "error" not in res, (rank, res)
        for k in (4, N_ITEMS + 2):  # top_k_ids over the shards: the one-process lexsort
            want = reference_top(scores, k, b["exclude"])
            np.testing.assert_array_equal(res[f"top_{k}"]["ids"], want)
            got = np.asarray(res[f"top_{k}"]["values"])
            rows = np.arange(scores.shape[0])[:, None]
            np.testing.assert_array_equal(
                got, np.where(want >= 0, scores[rows, np.maximum(want, 0)], -np.inf)
            )
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


def test_top_k_ids_over_many_small_shards_and_a_failure():
    """Shards of one item each near the start of a catalog of 2,000 (their starts share the
    first round's buckets, found apart in the next) and the catalog's rest on the last thread;
    a NaN score on one thread, overlapping shards and a gap raise on every thread."""
    from rankstream.catalog import top_k_ids

    rng = np.random.default_rng(9)
    n = 2000
    items, queries = (
        rng.integers(-2, 3, (n, 2)).astype(np.float64),
        rng.integers(-2, 3, (4, 2)).astype(np.float64),
    )
    exclude = [rng.choice(n, 30, replace=False) for _ in range(4)]
    shards = [(0, 1), (1, 2), (2, 5), (5, 5), (5, n)]
    want = reference_top(queries @ items.T, 9, exclude)

    def run(rank, reduce, bad=False):
        a, b = shards[rank]
        mine = items[a:b] * (np.nan if bad and rank == 2 else 1.0)
        return top_k_ids(queries, 9, items=mine, num_items=n, shard=(a, b), reduce=reduce, exclude=exclude)

    for res in thread_world(len(shards), run):
        assert not isinstance(res, dict), res
        np.testing.assert_array_equal(res[1], want)
    for rank, res in enumerate(thread_world(len(shards), lambda r, red: run(r, red, bad=True))):
        assert res["error"] == "ValueError", res
        assert ("NaN" in res["message"]) if rank == 2 else ("other process" in res["message"]), res
    for bad_shards in ([(0, 60), (50, n)], [(0, 50), (60, n)]):  # an overlap, a gap: every thread raises
        shards[:] = bad_shards
        for res in thread_world(2, run):
            assert res["error"] == "ValueError" and "tile the catalog" in res["message"], res
