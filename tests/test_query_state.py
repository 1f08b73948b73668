"""Flat items with query ids in the core: ``State.update_queries`` (whole queries per update)
and a ``QueryStream`` driving a ``State`` over a log cut into batches (``"contiguous"``, the
default, on queries in a random order of ids; ``"sorted"``; ``"any"``), against the same kernel
on every query's list padded one query at a time here (numpy and torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_query_modes_ignite import flat_log, grouped_order

from rankstream import ListMetrics, State
from rankstream.core.query_stream import QueryStream

NAMES = ["ndcg@5", "map@10", "mrr@3", "recall@10", "r_precision"]


def padded_numpy(scores, labels, ids):
    queries = sorted(set(ids.tolist()))
    width = max(int((ids == q).sum()) for q in queries)
    s, y, m = (np.zeros((len(queries), width)) for _ in range(3))
    for row, q in enumerate(queries):
        items = np.flatnonzero(ids == q)
        s[row, : len(items)], y[row, : len(items)], m[row, : len(items)] = scores[items], labels[items], 1
    return s, y, m.astype(bool)


def expected(log) -> dict:
    return State(ListMetrics(NAMES)).update(*padded_numpy(*log)).compute()


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-14, err_msg=key)


@pytest.mark.parametrize("array", [np.asarray, torch.from_numpy])
def test_update_queries_groups_whole_queries(array) -> None:
    log = flat_log(seed=21)
    order = np.random.default_rng(0).permutation(log[2].shape[0])  # ids in no order
    scores, labels, ids = (array(np.ascontiguousarray(x[order])) for x in log)
    got = State(ListMetrics(NAMES)).update_queries(scores, labels, ids).compute()
    assert_close(got, expected(log))


@pytest.mark.parametrize("array", [np.asarray, torch.from_numpy])
@pytest.mark.parametrize("mode", ["contiguous", "sorted", "any"])
def test_a_query_stream_drives_a_state_over_cut_batches(mode: str, array) -> None:
    log = flat_log(seed=22)
    scores, labels, ids = log
    if mode != "sorted":
        order = np.random.default_rng(1).permutation(ids.shape[0]) if mode == "any" else grouped_order(ids, 2)
        scores, labels, ids = (array(np.ascontiguousarray(x[order])) for x in (scores, labels, ids))
    state, stream = State(ListMetrics(NAMES)), QueryStream(mode)
    for i in range(0, ids.shape[0], 9):
        ready, kept = stream.feed(ids[i : i + 9], scores[i : i + 9], labels[i : i + 9])
        if ready is not None:
            state.update_queries(ready[1], ready[2], ready[0])
        stream.commit(kept)
    pending = stream.pending()
    assert pending is not None
    state.update_queries(pending[1], pending[2], pending[0])
    assert_close(state.compute(), expected(log))


@pytest.mark.parametrize("array", [np.asarray, torch.from_numpy])
def test_the_default_stream_refuses_a_closed_id_and_keeps_one_id_per_closed_query(array) -> None:
    log = flat_log(seed=23, queries=12)
    scores, labels, ids = (array(np.ascontiguousarray(x)) for x in log)
    stream = QueryStream()
    assert stream.query_mode == "contiguous"
    for i in range(0, 40, 10):
        stream.commit(stream.feed(ids[i : i + 10], scores[i : i + 10], labels[i : i + 10])[1])
    seen = sorted(set(np.asarray(ids[:40]).tolist()))
    open_id = int(np.asarray(ids[39]))
    assert np.asarray(stream.closed_ids()).tolist() == [q for q in seen if q != open_id]
    assert set(np.asarray(stream.pending()[0]).tolist()) == {open_id}
    kept = stream.kept
    with pytest.raises(ValueError, match=rf"query id\(s\) {seen[0]} came again .* query_mode='any'"):
        stream.feed(ids[:1], scores[:1], labels[:1])
    assert stream.kept is kept  # feed is pure: nothing changed
