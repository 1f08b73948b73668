"""Flat items with query ids in the core: ``State.update_queries`` (whole queries per update)
and a ``QueryStream`` driving a ``State`` over a log cut into batches (``"sorted"``, ``"any"``),
against the same kernel on every query's list padded one query at a time here (numpy and torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_query_modes_ignite import flat_log

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


@pytest.mark.parametrize("mode", ["sorted", "any"])
def test_a_query_stream_drives_a_state_over_cut_batches(mode: str) -> None:
    log = flat_log(seed=22)
    scores, labels, ids = log
    if mode == "any":
        order = np.random.default_rng(1).permutation(ids.shape[0])
        scores, labels, ids = scores[order], labels[order], ids[order]
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
