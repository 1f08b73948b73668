"""chance=True over a whole catalog against the dense path: ListMetrics(..., chance=True) on the
materialised (queries, items) score matrix with each query's excluded items masked (its chance
terms are checked against the enumeration of every ordering in tests/test_chance.py), for every
metric with moments under a random ranking, k from 1 past the catalog, the tie policies,
exclusions, grades and thresholds; a catalog of 200,000 items (k past 255 ranks, the discounts'
Euler-Maclaurin sums; the first relevant rank's recursion over R); lists of 10^7 items against
direct sums, and the memory of the moments not growing with the list."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_catalog import assert_same, catalogs, dense, quantised

from rankstream import ListMetrics
from rankstream.catalog import CatalogMetrics, catalog_metrics
from rankstream.core.relevant import RelevantRanks, collection_sums

pytestmark = pytest.mark.filterwarnings("ignore::rankstream.SwappedInputsWarning")

CHANCE_BASES = ["ndcg", "dcg", "map", "precision", "recall", "hit_rate", "mrr"]


def chance_names(n: int) -> list[str]:
    ks = sorted({1, 2, 10, n, n + 3})
    return [f"{b}@{k}" for b in CHANCE_BASES for k in ks] + ["r_precision", "mrr", "ndcg", "map"]


@settings(max_examples=30, deadline=None)
@given(
    catalogs(),
    st.sampled_from(["first", "expected"]),
    st.sampled_from(["skip", "zero"]),
    st.sampled_from([None, 2.0]),
    st.sampled_from([{}, {"precision": {"denominator": "valid"}, "map": {"denominator": "all"}}]),
    st.booleans(),
)
def test_chance_equals_the_dense_path_on_small_catalogs(data, ties, empty, threshold, defaults, confidence):
    items, queries, relevant, exclude, grades = data
    names = chance_names(items.shape[0])
    conv = dict(
        ties=ties, empty=empty, relevance_threshold=threshold, defaults=defaults, chance=True,
        confidence=0.9 if confidence else None,
    )  # fmt: skip
    try:
        ref = dense(names, queries, items, relevant, exclude, grades, **conv)
    except Exception as exc:  # no usable list: the catalog path raises the same
        with pytest.raises(type(exc)):
            catalog_metrics(names, queries, relevant, items, exclude=exclude, grades=grades, **conv)
        return
    got = catalog_metrics(
        names, queries, relevant, items, exclude=exclude, grades=grades, chunk_size=7, **conv
    )
    assert_same(got, ref)


def test_every_item_relevant_leaves_nothing_to_adjust():
    """A catalog whose items are all relevant to the query: every ordering gives the same value,
    so the expectation is the value itself (MRR's exactly 1, not 1 + 2^-52) and the adjusted
    index (v - E) / (max - E) is 0/0, NaN, as on the dense path (hypothesis found this)."""
    items = np.array([[0, 0], [1, 2], [-2, -2], [2, 2]], np.float32)
    queries = np.array([[-1, -1]], np.float32)
    relevant, exclude = [np.array([0, 2, 3, 1])], [np.array([], dtype=np.int64)]
    names = chance_names(4)
    conv = dict(ties="first", chance=True)
    ref = dense(names, queries, items, relevant, exclude, None, **conv)
    got = catalog_metrics(names, queries, relevant, items, exclude=exclude, chunk_size=7, **conv)
    assert np.isnan(ref["mrr_adjusted"]) and ref["mrr_expected"] == 1.0
    assert_same(got, ref)


def test_chance_with_weights_batches_and_random_ties():
    """List weights, two batches merged into one state, a callable discount and gain, and
    ``ties="random"``, whose chance terms (the expectation) do not depend on the draw."""
    rng = np.random.default_rng(5)
    n, q = 40, 9
    items, queries = quantised(rng, (n, 2), np.float64), quantised(rng, (q, 2), np.float64)
    relevant = [rng.choice(n, rng.integers(0, 6), replace=False) for _ in range(q)]
    exclude = [np.setdiff1d(rng.choice(n, 8), r) for r in relevant]
    grades = [rng.integers(1, 5, len(r)).astype(float) for r in relevant]
    weights = rng.random(q) + 0.25
    defaults = {"ndcg": {"gain": lambda y: 3.0 * y, "discount": lambda j: 1.0 / j}}
    names = chance_names(n)
    ref = dense(names, queries, items, relevant, exclude, grades, weights, defaults=defaults, chance=True)
    cm = CatalogMetrics(names, items, defaults=defaults, chance=True, chunk_size=11)
    for rows in (slice(0, 4), slice(4, q)):
        cm.update(
            queries[rows],
            relevant[rows],
            exclude=exclude[rows],
            grades=grades[rows],
            sample_weight=weights[rows],
        )
    assert_same(cm.compute(), ref)
    drawn = CatalogMetrics(names, items, defaults=defaults, chance=True, ties="random", seed=2)
    drawn.update(queries, relevant, exclude=exclude, grades=grades, sample_weight=weights)
    got = drawn.compute()
    assert_same({k: v for k, v in got.items() if k.endswith("_expected")},
                {k: v for k, v in ref.items() if k.endswith("_expected")})  # fmt: skip


def test_chance_on_a_large_catalog_equals_the_dense_path():
    """200,000 items, k up to past the catalog: the discounts' sums past rank 255, the first
    relevant rank's law over 200,000 ranks, every relevant count from 1 to 20."""
    rng = np.random.default_rng(7)
    n = 200_000
    items = quantised(rng, (n, 2), np.float32)
    queries = quantised(rng, (3, 2), np.float32)
    relevant = [rng.choice(n, r, replace=False) for r in (1, 4, 20)]
    exclude = [np.setdiff1d(rng.choice(n, 5_000), r) for r in relevant]
    grades = [rng.integers(1, 4, len(r)).astype(float) for r in relevant]
    names = [f"{b}@{k}" for b in CHANCE_BASES for k in (10, 1000, n + 1)] + ["r_precision"]
    ref = dense(names, queries, items, relevant, exclude, grades, chance=True, empty="zero")
    got = catalog_metrics(
        names, queries, relevant, items, exclude=exclude, grades=grades, chance=True, empty="zero"
    )
    assert_same(got, ref)


def test_moments_of_long_lists_need_no_row_of_the_list():
    """Lists of 10^7 items (and one of 10^12), k past the end: the expected values against
    direct sums written here (R = 1: MRR ``H_k / N``, hit rate ``k / N``; nDCG ``D1(k) / N``),
    and the moments' peak memory (numpy's, traced) far below one row of the list."""
    big = 10**7
    names = ["mrr@20000000", "hit_rate@5000", "ndcg@20000000", "dcg@300", "map@20000000", "precision@7"]
    collection = ListMetrics(names, chance=True, relevance_threshold=None)
    q = 64
    labels = np.zeros((q, 10))
    labels[:, 0] = 1.0
    labels[1:, 1:] = 2.0  # list 0: one relevant item; the others 10, graded
    n = np.full(q, float(big))
    n[-1] = 1e12
    ranks = RelevantRanks(np.zeros((q, 10)), np.zeros((q, 10)), np.zeros((q, 10)), labels, n)
    collection_sums(collection, ranks)  # warm: scipy's first calls
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        sums = collection_sums(collection, ranks.with_ties("first"))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20 < 8 * big  # under 2 MiB; one float64 row of a list: 80 MB
    assert all(np.all(np.isfinite(v)) for v in sums.values())
    one = RelevantRanks(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), [float(big)])
    got = collection_sums(collection, one)
    expected = lambda name: float(got[f"{name.replace('@', '_')}__chance_expected_sum"][0])  # noqa: E731
    harmonic = float(np.sum(1.0 / np.arange(1.0, big + 1.0)))  # pairwise: relative error ~1e-15
    d1 = float(np.sum(1.0 / np.log2(np.arange(2.0, big + 2.0))))
    assert expected("mrr@20000000") == pytest.approx(harmonic / big, rel=1e-12)
    assert expected("hit_rate@5000") == pytest.approx(5000 / big, rel=1e-12)
    assert expected("ndcg@20000000") == pytest.approx(d1 / big, rel=1e-11)  # IDCG = 1
    assert expected("dcg@300") == pytest.approx(
        math.fsum(1.0 / np.log2(np.arange(2.0, 302.0))) / big, rel=1e-12
    )
    assert expected("map@20000000") == pytest.approx(harmonic / big, rel=1e-12)  # AP = 1 / rank
    assert expected("precision@7") == pytest.approx(1.0 / big, rel=1e-12)


def test_ignite_catalog_metrics_with_chance_through_an_engine():
    """rankstream.ignite.CatalogMetrics(chance=True) against rankstream.ignite.ListMetrics(chance=True)
    on the materialised matrix, through an Engine (its defaults: ignite's conventions)."""
    from test_catalog_ignite import data, dense_batches, run

    from rankstream.ignite import CatalogMetrics as IgniteCatalog
    from rankstream.ignite import ListMetrics as IgniteLists

    names = ["ndcg@10", "recall@20", "mrr", "map@5", "precision@100", "hit_rate@10", "r_precision"]
    items, batches = data(seed=8)
    outputs = [(q, r, {"exclude": e}) for q, r, e in batches]
    got = run(IgniteCatalog(names, items, chunk_size=13, chance=True), outputs)
    want = run(IgniteLists(names, chance=True), list(dense_batches(items, batches)))
    assert set(got) == set(want) and any(key.endswith("_adjusted") for key in want)
    assert np.isnan(want["precision@100_adjusted"])  # k past every list: a random ranking is the best
    assert_same({k: v for k, v in got.items() if k != "m"}, {k: v for k, v in want.items() if k != "m"})
