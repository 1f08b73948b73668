"""The relevant-ranks producer (rankstream.core.relevant) against the dense path: every kernel
with a ``from_ranks`` form, on small tie-heavy lists with masks, at every k from 1 past the end,
every tie policy; the counts are taken here naively, item by item, from the dense matrix."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankstream import ListMetrics, State
from rankstream.core.lists.collection import make_kernel
from rankstream.core.relevant import RelevantRanks, per_list, rank_sums
from rankstream.core.relevant.values import collection_sums

pytestmark = pytest.mark.filterwarnings("ignore::rankstream.SwappedInputsWarning")

NAMES = [
    "precision",
    "recall",
    "hit_rate",
    "mrr",
    "map",
    "ndcg",
    "dcg",
    "r_precision",
    "f1",
    "err",
    "rbp",
    "auc",
]


def naive_counts(scores, labels, valid):
    """Per list, the slots (items with a nonzero label in the list) and their counts, one
    item at a time."""
    q, n = scores.shape
    rows = []
    for i in range(q):
        slots = []
        for j in range(n):
            if not valid[i, j] or labels[i, j] == 0:
                continue
            above = tied = before = 0
            for o in range(n):
                if o == j or not valid[i, o]:
                    continue
                if scores[i, o] > scores[i, j]:
                    above += 1
                elif scores[i, o] == scores[i, j]:
                    tied += 1
                    before += o < j
            slots.append((above, tied, before, labels[i, j]))
        rows.append(slots)
    m = max([len(r) for r in rows] + [0])
    arr = np.zeros((4, q, m))
    present = np.zeros((q, m), bool)
    for i, slots in enumerate(rows):
        for c, s in enumerate(slots):
            arr[:, i, c] = s
            present[i, c] = True
    return arr, present, valid.sum(axis=1)


def ranks_of(scores, labels, valid, ties="first", generator=None):
    arr, present, n = naive_counts(scores, labels, valid)
    return RelevantRanks(arr[0], arr[1], arr[2], arr[3], n, present, ties=ties, generator=generator)


@st.composite
def lists(draw):
    q = draw(st.integers(1, 4))
    n = draw(st.integers(1, 7))
    scores = np.array(draw(st.lists(st.integers(0, 3), min_size=q * n, max_size=q * n)), float).reshape(q, n)
    labels = np.array(draw(st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=q * n, max_size=q * n)), float)
    valid = np.array(draw(st.lists(st.booleans(), min_size=q * n, max_size=q * n))).reshape(q, n)
    valid[:, 0] |= draw(st.booleans())
    return scores, labels.reshape(q, n), valid


def _kernel(name, k, **conv):
    if name in ("r_precision", "auc"):
        return make_kernel(name, **conv)
    return make_kernel(f"{name}@{k}", **conv)


@settings(max_examples=40, deadline=None)
@given(lists(), st.sampled_from(["first", "expected"]), st.sampled_from(["skip", "zero"]))
def test_every_metric_equals_the_dense_path(data, ties, empty):
    scores, labels, valid = data
    ranks = ranks_of(scores, labels, valid, ties)
    for name in NAMES:
        if name == "err" and ties == "expected":
            continue
        for k in range(1, scores.shape[1] + 2):
            kernel = _kernel(name, k, ties=ties, empty=empty, confidence=0.9)
            dense = State(kernel).update(scores, labels, valid).sums
            mine = rank_sums(kernel, ranks)
            for field, value in dense.items():
                np.testing.assert_allclose(
                    mine[field], value, rtol=1e-9, atol=1e-12, err_msg=f"{name}@{k} {field}"
                )


def test_graded_thresholds_and_options():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, (6, 9)).astype(float)
    labels = rng.choice([0, 0, 0.5, 1, 2, 4], (6, 9))
    valid = rng.random((6, 9)) > 0.2
    for ties in ("first", "expected"):
        ranks = ranks_of(scores, labels, valid, ties)
        kernels = [
            make_kernel("ndcg@5", ties=ties, relevance_threshold=None, gain="linear_rank"),
            make_kernel("ndcg@3", ties=ties, relevance_threshold=2.0),
            make_kernel("dcg@4", ties=ties, discount=lambda r: 1.0 / r),
            make_kernel("precision@4", ties=ties, denominator="valid", relevance_threshold=2.0),
            make_kernel("map@3", ties=ties, denominator="all"),
            make_kernel("rbp@4", ties=ties, graded=True, residual=True, p=0.6),
            make_kernel("gauc", ties=ties, relevance_threshold=1.0),
            make_kernel("ndcg@6", ties=ties, gain=lambda y: y * y, relevance_threshold=None),
        ]
        weights = rng.random(6) + 0.1
        for kernel in kernels:
            dense = State(kernel).update(scores, labels, valid, weights).sums
            mine = rank_sums(kernel, ranks, weights)
            for field, value in dense.items():
                np.testing.assert_allclose(
                    mine[field], value, rtol=1e-9, atol=1e-12, err_msg=f"{kernel} {field}"
                )


def test_collection_sums_and_compute_equal_list_metrics():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 3, (8, 12)).astype(float)
    labels = (rng.random((8, 12)) < 0.3).astype(float)
    names = ["ndcg@10", "recall@5", "mrr", "map@3", "hit_rate@1"]
    coll = ListMetrics(names, ties="expected", confidence=0.95, empty="zero")
    dense = State(coll).update(scores, labels)
    mine = State(
        coll, collection_sums(coll, ranks_of(scores, labels, np.ones_like(labels, bool), "expected"))
    )
    for key, value in dense.compute().items():
        assert mine.compute()[key] == pytest.approx(value, rel=1e-9, abs=1e-12)


def test_random_ties_are_one_of_the_orders():
    """Under ties="random" each draw is the metric of one order of the tied items: the set of
    values over every permutation of each list's columns (with ties="first") holds it."""
    scores = np.array([[1.0, 1.0, 1.0, 0.0, 1.0]])
    labels = np.array([[1.0, 0.0, 2.0, 1.0, 0.0]])
    valid = np.ones_like(labels, bool)
    kernel = make_kernel("ndcg@3", relevance_threshold=None)
    possible = set()
    for perm in itertools.permutations(range(5)):
        p = list(perm)
        possible.add(round(float(per_list(kernel, ranks_of(scores[:, p], labels[:, p], valid))[0, 0]), 12))
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(60):
        v = per_list(
            make_kernel("ndcg@3", ties="random", relevance_threshold=None),
            ranks_of(scores, labels, valid, "random", rng),
        )
        seen.add(round(float(v[0, 0]), 12))
    assert seen <= possible and len(seen) > 1
    # and on average the expectation over the orders (ties="expected"), within a few standard errors
    draws = [
        float(
            per_list(make_kernel("map@4", ties="random"), ranks_of(scores, labels, valid, "random", rng))[
                0, 0
            ]
        )
        for _ in range(1500)
    ]
    expected = float(
        per_list(make_kernel("map@4", ties="expected"), ranks_of(scores, labels, valid, "expected"))[0, 0]
    )
    assert abs(np.mean(draws) - expected) < 4 * np.std(draws) / np.sqrt(len(draws))
