"""The catalog's counting engine in its corners, against the materialised matrix: exact edges once
a slot's chunk is known, the fused comparisons (``x <= hi`` as ``x < next(hi)``) beside infinite
scores and padding slots, NaN found where every slot is dense, and the dense and candidate ways
on tie-heavy scores (references: ListMetrics over the whole matrix, float64 comparisons); each
in numpy's passes and in the compiled pass (numba), which must be installed here."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rankstream.core.sizes as sizes
from rankstream import ListMetrics, State
from rankstream.catalog import CatalogMetrics
from rankstream.core.backends.catalog import fused
from rankstream.core.backends.catalog.comparisons import edges_in, exact_edges

pytestmark = pytest.mark.filterwarnings("ignore::rankstream.SwappedInputsWarning")

NAMES = ["ndcg@3", "map@20", "mrr", "auc", "recall@2", "precision@1"]
#: the engine's regimes: every slot by candidates, every slot dense, the cost model with flags
#: for a few rows of a few edges (blocks of one to three rows, each with its own split)
REGIMES = {
    "candidates": dict(catalog_fused=False, catalog_candidate_cost=0),
    "dense": dict(catalog_fused=False, catalog_candidate_cost=10**9),
    "split": dict(catalog_fused=False, catalog_flag_bytes=3 * 5 * 48, catalog_flag_bytes_per_score=99),
    # the compiled pass: every slot by candidates, every slot dense, the cost model; tiles of a
    # few scores (a row read in pieces) and room for one kept score (chunks counted again)
    "fused candidates": dict(catalog_fused_dense_cost=10**9, catalog_fused_tile=5, catalog_fused_kept=1),
    "fused dense": dict(catalog_fused_dense_cost=-1.0, catalog_fused_tile=3, catalog_fused_kept=1),
    "fused split": dict(catalog_fused_dense_cost=0.2, catalog_fused_kept=2),
}


def test_the_compiled_pass_is_installed_here():
    """The fused regimes below test numba's kernel, not numpy's passes in its place."""
    assert fused.available(), "numba is not installed: pip install rankstream[fast] (the dev extra has it)"


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float64]))
def test_exact_edges_are_sorted_and_classify_as_the_exact_scores(seed, dtype):
    """Each slot's narrowed edges keep its exact score inside (``lo' <= t <= hi'``), stay sorted,
    and a value of the dtype below ``lo'`` is below ``t`` and one above ``hi'`` above it (float64
    comparisons with ``t``), with slots close enough that their bands overlap."""
    rng = np.random.default_rng(seed)
    q, m = 3, 6
    t = np.sort(rng.integers(-4, 5, (q, m)) * 0.25 + rng.choice([0.0, 1e-7], (q, m)), axis=1)
    band = np.full(q, 0.3)
    pad = np.zeros((q, m), bool)
    pad[0, 4:] = True
    key = np.where(pad, np.inf, t)
    lo, hi = edges_in(np.dtype(dtype), key - band[:, None], key + band[:, None], pad)
    exact = t.astype(dtype).astype(np.float64)  # the chunk's score: near t'
    known = rng.random((q, m)) < 0.6
    got_lo, got_hi = exact_edges(lo, hi, np.where(known & ~pad, exact, np.nan))
    assert np.all(got_lo[:, 1:] >= got_lo[:, :-1]) and np.all(got_hi[:, 1:] >= got_hi[:, :-1])
    assert np.all(got_lo <= got_hi)
    grid = np.unique(np.concatenate([got_lo.ravel(), got_hi.ravel(), exact.ravel()]).astype(dtype))
    grid = np.concatenate([grid, np.nextafter(grid, dtype(np.inf)), np.nextafter(grid, dtype(-np.inf))])
    for r, j in zip(*np.nonzero(~pad), strict=True):
        truth = exact[r, j] if known[r, j] else t[r, j]
        if known[r, j]:
            assert got_lo[r, j] <= truth <= got_hi[r, j]
        assert np.all(grid[grid < got_lo[r, j]].astype(np.float64) < truth)
        assert np.all(grid[grid > got_hi[r, j]].astype(np.float64) > truth)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float64]))
def test_the_compiled_pass_narrows_edges_as_exact_edges_does(seed, dtype):
    """The compiled pass's narrowing of a row's edges (its slots' exact scores read from the chunk,
    some known from earlier chunks, some in other dtypes' chunks: rounded, so left banded) equals
    numpy's :func:`exact_edges` on the same exact scores, with overlapping bands and exact scores
    out of the approximate order (as rounding leaves them)."""
    rng = np.random.default_rng(seed)
    q, m, width, a = 4, 6, 12, 100
    t = np.sort(rng.integers(-4, 5, (q, m)) * 0.25, axis=1)
    pad = np.zeros((q, m), bool)
    pad[0, 3:] = True
    key = np.where(pad, np.inf, t)
    band_lo, band_hi = edges_in(np.dtype(dtype), key - 0.3, key + 0.3, pad)
    exact = np.where(rng.random((q, m)) < 0.4, t + rng.choice([-0.2, 0.0, 0.2], (q, m)), np.nan)
    exact[rng.random((q, m)) < 0.2] = 0.1 + 1e-12  # not a value of float32: left banded there
    exact[pad] = np.nan
    ids = np.full((q, m), -1)
    x = np.zeros((q, width), dtype)
    for r in range(q):
        here = rng.permutation(width)[:m]
        for j in range(m):
            if not pad[r, j] and np.isnan(exact[r, j]) and rng.random() < 0.5:  # in this chunk
                ids[r, j] = a + here[j]
                x[r, here[j]] = t[r, j] + rng.choice([-0.2, 0.0, 0.2])
            elif not pad[r, j]:
                ids[r, j] = rng.choice([5, 500])  # another chunk's item
    run = fused.kernels()
    lo, hi, got = band_lo.copy(), band_hi.copy(), exact.copy()
    for r in range(q):
        run._known(x, r, a, ids, band_lo, band_hi, lo, hi, got, np.empty(m, dtype))
    chunk_own = (ids >= a) & (ids < a + width)
    want = exact.copy()
    rows, cols = np.nonzero(chunk_own)
    want[rows, cols] = x[rows, ids[rows, cols] - a]
    np.testing.assert_array_equal(got, want)
    ref_lo, ref_hi = exact_edges(band_lo, band_hi, want)
    fresh = chunk_own.any(axis=1)  # rows without a slot in the chunk keep their edges
    np.testing.assert_array_equal(lo[fresh], ref_lo[fresh])
    np.testing.assert_array_equal(hi[fresh], ref_hi[fresh])
    np.testing.assert_array_equal(lo[~fresh], band_lo[~fresh])


def _reference(scores, relevant, exclude, ties):
    labels = np.zeros(scores.shape)
    valid = np.ones(scores.shape, bool)
    for i, r in enumerate(relevant):
        labels[i, r] = 1.0
        valid[i, exclude[i]] = False
    return State(ListMetrics(NAMES, ties=ties)).update(scores, labels, valid).compute()


def _assert_same(got, ref):
    assert set(got) == set(ref)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key


@pytest.mark.parametrize("regime", sorted(REGIMES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_infinite_scores_padding_and_ties_in_every_regime(monkeypatch, regime, dtype):
    """A score table of few values with ``+inf`` and ``-inf`` among them (a relevant item's own
    score ``+inf`` too: its band's upper edge is ``+inf``), lists of 0 to 5 relevant items
    (padding slots), exclusions, chunks of 7: equal to ListMetrics over the table, both tie
    conventions."""
    rng = np.random.default_rng(21)
    q, n = 9, 90
    table = rng.integers(-3, 4, (q, n)).astype(np.float64)
    table[rng.random((q, n)) < 0.05] = np.inf
    table[rng.random((q, n)) < 0.05] = -np.inf
    relevant = [rng.choice(n, rng.integers(0, 6), replace=False) for _ in range(q)]
    table[0, relevant[1][:1]] = np.inf
    table[1, relevant[1][:1]] = np.inf
    exclude = [np.setdiff1d(rng.choice(n, 12), r) for r in relevant]
    scores = torch.from_numpy(table).to(dtype)
    score = lambda qs, ids: scores[qs[:, 0].long()][:, ids]  # noqa: E731
    monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, **REGIMES[regime]))
    rows = torch.arange(q, dtype=dtype)[:, None]
    for ties in ("first", "expected"):
        cm = CatalogMetrics(NAMES, score=score, num_items=n, chunk_size=7, ties=ties)
        got = cm.update(rows, relevant, exclude=exclude).compute()
        _assert_same(got, _reference(scores.double().numpy(), relevant, exclude, ties))


def test_without_numba_the_counts_come_from_numpys_passes(monkeypatch):
    """numba missing (its import fails): no compiled pass, and the catalog's numbers are the
    materialised matrix's all the same."""
    import sys

    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "rankstream.core.backends.catalog.fused_kernels", raising=False)
    fused.kernels.cache_clear()
    try:
        assert not fused.available()
        rng = np.random.default_rng(5)
        items = rng.integers(-2, 3, (40, 2)).astype(np.float32)
        queries = rng.integers(-2, 3, (4, 2)).astype(np.float32)
        relevant = [[0, 7], [3], [12, 30, 31], [39]]
        got = CatalogMetrics(NAMES, items, chunk_size=6).update(queries, relevant).compute()
        _assert_same(got, _reference((queries @ items.T).astype(np.float64), relevant, [[]] * 4, "first"))
    finally:
        fused.kernels.cache_clear()


@pytest.mark.parametrize("regime", ["dense", "candidates", "fused dense", "fused candidates"])
def test_nan_found_in_every_regime(monkeypatch, regime):
    """A NaN score raises (naming its query and item) whether its block has a candidate plane or
    every slot is dense (found by the block's maximum), and leaves the state untouched."""
    monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, **REGIMES[regime]))
    items = np.ones((30, 2), np.float32)
    items[17, 1] = np.nan
    cm = CatalogMetrics(["mrr"], items, chunk_size=8)
    message = r"items \[16, 24\) hold 3 NaN value\(s\), the first for query 0 and item 17"
    with pytest.raises(ValueError, match=message):
        cm.update(np.ones((3, 2), np.float32), [[2, 5], [1], [3, 9, 20]])
    assert cm.state.sums["mrr__count"] == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(sorted(REGIMES)), st.sampled_from([1, 5, 16]))
def test_regimes_agree_on_tie_heavy_embeddings(seed, regime, chunk):
    """Quantised embeddings (many exact ties, bands holding several scores), every regime and chunk
    size: the same as the materialised matrix, ties "expected" (ties counted, and their order)."""
    rng = np.random.default_rng(seed)
    q, n = int(rng.integers(1, 6)), int(rng.integers(5, 40))
    items = rng.integers(-2, 3, (n, 2)).astype(np.float32)
    queries = rng.integers(-2, 3, (q, 2)).astype(np.float32)
    relevant = [rng.choice(n, rng.integers(1, min(n, 6) + 1), replace=False) for _ in range(q)]
    exclude = [np.setdiff1d(rng.choice(n, rng.integers(0, n)), r) for r in relevant]
    scores = (queries @ items.T).astype(np.float64)
    z = replace(sizes.SIZES, **REGIMES[regime])
    old, sizes.SIZES = sizes.SIZES, z
    try:
        cm = CatalogMetrics(NAMES, items, chunk_size=chunk, ties="expected")
        try:
            ref = _reference(scores, relevant, exclude, "expected")
        except Exception as exc:  # no usable list (all excluded or relevant): the same error
            with pytest.raises(type(exc)):
                cm.update(queries, relevant, exclude=exclude).compute()
            return
        got = cm.update(queries, relevant, exclude=exclude).compute()
    finally:
        sizes.SIZES = old
    _assert_same(got, ref)
