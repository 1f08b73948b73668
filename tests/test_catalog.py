"""rankstream.catalog against the dense path: ListMetrics on the materialised (queries, items)
score matrix with the excluded items masked (itself checked against the peers elsewhere), for
every metric with a form over relevant ranks, k from 1 past the catalog, the tie policies on
quantised embeddings (exact ties built in, and exact arithmetic, so the dense matrix and the
chunks agree bit for bit), with exclusions, chunk sizes 1, 7, 997 and the whole catalog, float32
and float64; shards with uneven offsets summed equal one pass; bad input."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rankstream.core.sizes as sizes
from rankstream import ListMetrics, State
from rankstream.catalog import CatalogMetrics, catalog_metrics, prepare, rank_types, relevant_ranks

pytestmark = pytest.mark.filterwarnings("ignore::rankstream.SwappedInputsWarning")

BASES = ["ndcg", "dcg", "map", "precision", "recall", "hit_rate", "mrr", "f1", "rbp", "err"]
WHOLE = ["r_precision", "auc", "gauc", "ndcg", "map", "mrr"]


def names_for(n: int, ties: str) -> list[str]:
    ks = sorted({1, 10, 100, n, n + 3})
    names = [f"{b}@{k}" for b in BASES for k in ks] + WHOLE
    return [x for x in names if not (ties == "expected" and x.startswith("err"))]


def dense(names, queries, items, relevant, exclude, grades=None, weights=None, **conv):
    """The reference: the materialised matrix, the relevant items' labels, the excluded masked."""
    scores = queries @ items.T
    labels = np.zeros(scores.shape)
    valid = np.ones(scores.shape, bool)
    for i, r in enumerate(relevant):
        labels[i, r] = 1.0 if grades is None else grades[i]
        if exclude is not None:
            valid[i, exclude[i]] = False
    return State(ListMetrics(names, **conv)).update(scores, labels, valid, weights).compute()


def assert_same(got, ref, rtol=1e-9):
    assert set(got) == set(ref)
    for key, value in ref.items():
        if np.isnan(value):
            assert np.isnan(got[key]), key
        else:  # a standard error is the root of a variance: sqrt(1e-16) of rounding where it is 0
            tol = 1e-7 if key.endswith(("_stderr", "_ci_low", "_ci_high")) else 1e-12
            assert got[key] == pytest.approx(value, rel=rtol, abs=tol), key


def quantised(rng, shape, dtype):
    return rng.integers(-2, 3, shape).astype(dtype)


@st.composite
def catalogs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n, q, d = draw(st.integers(1, 30)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    items, queries = quantised(rng, (n, d), dtype), quantised(rng, (q, d), dtype)
    relevant = [rng.choice(n, rng.integers(0, min(n, 4) + 1), replace=False) for _ in range(q)]
    exclude = [np.setdiff1d(rng.choice(n, rng.integers(0, n + 1)), r) for r in relevant]
    graded = draw(st.booleans())
    grades = [rng.integers(1, 4, len(r)).astype(float) for r in relevant] if graded else None
    return items, queries, relevant, exclude, grades


@settings(max_examples=30, deadline=None)
@given(
    catalogs(),
    st.sampled_from(["first", "expected"]),
    st.sampled_from(["skip", "zero"]),
    st.sampled_from([1, 7, 997, None]),
)
def test_equals_the_dense_path_on_small_catalogs(data, ties, empty, chunk):
    items, queries, relevant, exclude, grades = data
    n = items.shape[0]
    names = names_for(n, ties)
    conv = dict(ties=ties, empty=empty, confidence=0.9, relevance_threshold=None)
    try:
        ref = dense(names, queries, items, relevant, exclude, grades, **conv)
    except Exception as exc:  # no usable list: the catalog path raises the same
        with pytest.raises(type(exc)):
            catalog_metrics(
                names, queries, relevant, items, exclude=exclude, grades=grades, chunk_size=chunk, **conv
            )
        return
    got = catalog_metrics(
        names, queries, relevant, items, exclude=exclude, grades=grades, chunk_size=chunk, **conv
    )
    assert_same(got, ref)


@pytest.mark.parametrize("ties", ["first", "expected"])
@pytest.mark.parametrize("chunk", [7, 997, None])
def test_mid_size_catalog_with_ties_and_exclusions(ties, chunk):
    rng = np.random.default_rng(11)
    n, q = 2500, 12
    items, queries = quantised(rng, (n, 4), np.float32), quantised(rng, (q, 4), np.float32)
    relevant = [rng.choice(n, rng.integers(1, 9), replace=False) for _ in range(q)]
    exclude = [np.setdiff1d(rng.choice(n, 40), r) for r in relevant]
    names = names_for(n, ties)
    weights = rng.random(q) + 0.5
    ref = dense(names, queries, items, relevant, exclude, weights=weights, ties=ties, confidence=0.95)
    cm = CatalogMetrics(names, items, ties=ties, confidence=0.95, chunk_size=chunk)
    cm.update(queries[:5], relevant[:5], exclude=exclude[:5], sample_weight=weights[:5])
    cm.update(torch.from_numpy(queries[5:]), relevant[5:], exclude=exclude[5:], sample_weight=weights[5:])
    assert_same(cm.compute(), ref)


def test_float_embeddings_dot_and_cosine():
    rng = np.random.default_rng(2)
    items, queries = rng.standard_normal((500, 8)), rng.standard_normal((6, 8))
    relevant = [rng.choice(500, 3, replace=False) for _ in range(6)]
    names = ["ndcg@10", "recall@100", "mrr", "map@500"]
    assert_same(
        catalog_metrics(names, queries, relevant, items, chunk_size=64),
        dense(names, queries, items, relevant, None),
    )
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    got = catalog_metrics(names, queries, relevant, items, similarity="cosine", chunk_size=64)
    assert_same(got, dense(names, unit(queries), unit(items), relevant, None), rtol=1e-7)


def test_shards_with_uneven_offsets_sum_to_one_pass():
    rng = np.random.default_rng(4)
    n = 300
    items, queries = quantised(rng, (n, 3), np.float32), quantised(rng, (9, 3), np.float32)
    relevant = [rng.choice(n, 4, replace=False) for _ in range(9)]
    exclude = [np.setdiff1d(rng.choice(n, 30), r) for r in relevant]
    batch = prepare(queries, relevant, items=items, exclude=exclude)
    whole = batch.ranks(batch.count(chunk=n))
    bounds = [0, 13, 14, 200, n]
    parts = [batch.count(a, b, chunk=5) for a, b in itertools.pairwise(bounds)]
    total = parts[3].merge(parts[1]).merge(parts[0]).merge(parts[2])  # any order
    sharded = batch.ranks(total)
    for field in ("above", "tied", "tied_before", "labels", "n"):
        np.testing.assert_array_equal(getattr(sharded, field), getattr(whole, field))
    with pytest.raises(ValueError, match="add every shard"):
        batch.ranks(parts[0])


def test_rank_types_are_pykeens_counts():
    rng = np.random.default_rng(6)
    items, queries = quantised(rng, (40, 2), np.float64), quantised(rng, (5, 2), np.float64)
    relevant = [rng.choice(40, 2, replace=False) for _ in range(5)]
    exclude = [np.setdiff1d(rng.choice(40, 6), r) for r in relevant]
    r = rank_types(relevant_ranks(queries, relevant, items=items, exclude=exclude, chunk_size=3))
    scores = queries @ items.T
    expected = {"optimistic": [], "pessimistic": []}
    for i, rel in enumerate(relevant):
        keep = np.setdiff1d(np.arange(40), exclude[i])
        for item in rel:
            s = scores[i, keep]
            expected["optimistic"].append((s > scores[i, item]).sum() + 1)
            expected["pessimistic"].append((s >= scores[i, item]).sum())
    for key in ("optimistic", "pessimistic"):
        assert sorted(r[key].tolist()) == sorted(map(float, expected[key]))
    np.testing.assert_allclose(r["realistic"], (r["optimistic"] + r["pessimistic"]) / 2)


def test_callable_scorer_equals_embeddings_and_merge():
    rng = np.random.default_rng(8)
    items, queries = quantised(rng, (120, 3), np.float32), quantised(rng, (8, 3), np.float32)
    relevant = [rng.choice(120, 3, replace=False) for _ in range(8)]
    table = torch.from_numpy(items)
    score = lambda qs, ids: qs @ table[ids].T  # noqa: E731
    names = ["ndcg@10", "mrr", "recall@50"]
    a = CatalogMetrics(names, score=score, num_items=120, chunk_size=11, ties="expected")
    a.update(torch.from_numpy(queries[:3]), relevant[:3])
    b = CatalogMetrics(names, score=score, num_items=120, chunk_size=11, ties="expected")
    b.update(torch.from_numpy(queries[3:]), relevant[3:])
    assert_same(a.merge(b).compute(), dense(names, queries, items, relevant, None, ties="expected"))


def _metric():
    rng = np.random.default_rng(1)
    items = quantised(rng, (50, 2), np.float32)
    cm = CatalogMetrics(["ndcg@5", "mrr"], items, chunk_size=8)
    cm.update(quantised(rng, (2, 2), np.float32), [[1, 2], [3]])
    return cm, items


@pytest.mark.parametrize(
    ("relevant", "kw", "match"),
    [
        ([[1, 50]], {}, "item id 50 .*out of range"),
        ([[3, 3]], {}, "repeats item id 3"),
        ([[3]], {"exclude": [[3, 4]]}, "exclude holds item 3 of query 0"),
        ([[3.5]], {}, "integer item ids"),
        ([[3]], {"exclude": [[70]]}, "exclude holds item id 70"),
        ([[3]], {"grades": [[0.0]]}, "grades must be finite and > 0"),
    ],
)
def test_bad_input_names_the_argument_and_leaves_the_state(relevant, kw, match):
    cm, _ = _metric()
    before = {k: v.copy() for k, v in cm.state.sums.items()}
    with pytest.raises((ValueError, TypeError), match=match):
        cm.update(np.ones((1, 2), np.float32), relevant, **kw)
    for k, v in cm.state.sums.items():
        np.testing.assert_array_equal(v, before[k])


def test_bad_scores_and_scorers():
    nan_items = np.ones((20, 2), np.float32)
    nan_items[13, 0] = np.nan
    cm = CatalogMetrics(["mrr"], nan_items, chunk_size=4)
    with pytest.raises(
        ValueError, match=r"items \[12, 16\) hold 1 NaN value\(s\), the first for query 0 and item 13"
    ):
        cm.update(np.ones((1, 2), np.float32), [[2]])
    assert cm.state.sums["mrr__count"] == 0
    wrong = CatalogMetrics(["mrr"], score=lambda q, ids: torch.zeros(len(ids), 2), num_items=10)
    with pytest.raises(ValueError, match=r"score must return shape \(2, 4\).*got Tensor of shape \(4, 2\)"):
        wrong.update(torch.zeros(2, 1), [[1], [2, 5]])
    ints = CatalogMetrics(
        ["mrr"], score=lambda q, ids: torch.zeros(q.shape[0], len(ids), dtype=torch.long), num_items=10
    )
    with pytest.raises(TypeError, match="score must return a float tensor"):
        ints.update(torch.zeros(2, 1), [[1], [2]])
    # a scorer whose score of an item depends on the chunk beyond rounding
    drift = CatalogMetrics(
        ["mrr"],
        score=lambda q, ids: (ids.double() + len(ids))[None, :].repeat(q.shape[0], 1),
        num_items=10,
        chunk_size=3,
    )
    with pytest.raises(ValueError, match="must not depend on the other items"):
        drift.update(torch.zeros(1, 1), [[4]])
    with pytest.raises(ValueError, match="exactly one"):
        CatalogMetrics(["mrr"])
    with pytest.raises(ValueError, match="no moments under a random ranking"):
        CatalogMetrics(["f1@3"], nan_items, chance=True)


def test_empty_batch_is_a_no_op_and_reset():
    cm, _ = _metric()
    before = cm.compute()
    cm.update(np.ones((0, 2), np.float32), [])
    assert cm.compute() == before
    cm.reset()
    assert all(float(np.sum(v)) == 0 for v in cm.state.sums.values())


def test_filter_index_exclusions_equal_the_filtered_mask():
    from rankstream.filtering import FilterIndex

    rng = np.random.default_rng(9)
    known = np.stack([rng.integers(0, 30, 200), rng.integers(0, 3, 200), rng.integers(0, 30, 200)], 1)
    index = FilterIndex(known, num_entities=30, num_relations=3)
    test = known[:12]
    items, queries = quantised(rng, (30, 3), np.float32), quantised(rng, (12, 3), np.float32)
    relevant = test[:, 2:3]
    mask = index.mask(test, "tail")
    names = ["mrr", "hit_rate@3", "ndcg@10"]
    got = catalog_metrics(names, queries, relevant, items, exclude=(index, test, "tail"), chunk_size=7)
    scores = queries @ items.T
    labels = np.zeros(scores.shape)
    labels[np.arange(12), test[:, 2]] = 1.0
    assert_same(got, State(ListMetrics(names)).update(scores, labels, mask).compute())


@pytest.mark.parametrize(
    "cost, flag_bytes", [(0, 4 << 20), (10**9, 4 << 20), (10**9, 5 * 40), (300, 11 * 40)]
)
def test_candidate_and_slot_by_slot_counting_agree(monkeypatch, cost, flag_bytes):
    """A block of rows' lowest slots are counted dense and the rest candidate by candidate: force
    every slot to candidates (cost 0), every slot dense, two dense slots (flags of five edges fit)
    with three by candidates, and blocks of one row each with its own split (the cost model's),
    on data with ties and exclusions."""
    rng = np.random.default_rng(12)
    n = 400
    items, queries = quantised(rng, (n, 3), np.float32), quantised(rng, (7, 3), np.float32)
    relevant = [rng.choice(n, 5, replace=False) for _ in range(7)]
    exclude = [np.setdiff1d(rng.choice(n, 50), r) for r in relevant]
    names = ["ndcg@20", "map@400", "mrr", "auc", "recall@3"]
    ref = dense(names, queries, items, relevant, exclude, ties="expected")
    z = replace(sizes.SIZES, catalog_candidate_cost=cost, catalog_flag_bytes=flag_bytes)
    monkeypatch.setattr(sizes, "SIZES", z)
    got = catalog_metrics(names, queries, relevant, items, exclude=exclude, chunk_size=33, ties="expected")
    assert_same(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_slot_by_slot_in_row_blocks(monkeypatch, dtype):
    """The dense way takes the rows a block at a time (blocks of 3 over 8 queries: a short last
    block); tie-heavy quantised scores put several scores in a band (found by a scan of those
    rows' flags)."""
    rng = np.random.default_rng(13)
    n = 300
    items, queries = quantised(rng, (n, 2), dtype), quantised(rng, (8, 2), dtype)
    relevant = [rng.choice(n, rng.integers(1, 7), replace=False) for _ in range(8)]
    exclude = [np.setdiff1d(rng.choice(n, 40), r) for r in relevant]
    names = ["ndcg@20", "map@300", "mrr", "auc", "recall@3", "precision@1"]
    z = replace(
        sizes.SIZES,
        catalog_candidate_cost=10**9,
        catalog_flag_bytes=3 * 13 * 48,
        catalog_flag_bytes_per_score=99,
    )
    monkeypatch.setattr(sizes, "SIZES", z)  # rows of 48 padded bytes, 13 edges: blocks of 3 rows
    for ties in ("first", "expected"):
        ref = dense(names, queries, items, relevant, exclude, ties=ties)
        got = catalog_metrics(names, queries, relevant, items, exclude=exclude, chunk_size=41, ties=ties)
        assert_same(got, ref)


def test_random_ties_over_a_catalog():
    """ties="random": without ties it is "first"; with ties, the per-list values drawn over many
    batches average to the tie expectation (within four standard errors)."""
    from rankstream.core.lists.collection import make_kernel
    from rankstream.core.relevant import per_list

    rng = np.random.default_rng(13)
    items, queries = rng.standard_normal((60, 4)), rng.standard_normal((3, 4))
    relevant = [rng.choice(60, 3, replace=False) for _ in range(3)]
    names = ["ndcg@5", "map@10", "mrr"]
    first = catalog_metrics(names, queries, relevant, items)
    assert_same(catalog_metrics(names, queries, relevant, items, ties="random", seed=3), first)
    items = quantised(rng, (40, 1), np.float64)  # one dimension: a handful of scores, large tie groups
    queries = np.ones((2, 1))
    relevant = [[0, 1, 2], [5, 9]]
    kernel = make_kernel("map@8", ties="random")
    gen = np.random.default_rng(0)
    counted = relevant_ranks(queries, relevant, items=items, ties="random", generator=gen)
    draws = np.stack([per_list(kernel, counted.with_ties("random", gen))[:, 0] for _ in range(400)])
    expected = per_list(make_kernel("map@8", ties="expected"), counted.with_ties("expected"))[:, 0]
    spread = draws.std(axis=0) / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - expected) <= 4 * spread + 1e-12)


def test_input_forms_agree():
    """relevant as lists, a padded array (-1) or a torch tensor; exclude as lists, CSR or a scipy
    sparse matrix: one result."""
    import scipy.sparse

    rng = np.random.default_rng(14)
    items, queries = quantised(rng, (80, 3), np.float32), quantised(rng, (4, 3), np.float32)
    relevant = [np.array([3, 7]), np.array([1]), np.array([], np.int64), np.array([10, 20, 30])]
    grades = [np.array([1.0, 2.0]), np.array([3.0]), np.array([]), np.array([1.0, 1.0, 2.0])]
    exclude = [np.array([4, 5]), np.array([], np.int64), np.array([0]), np.array([11, 12, 13])]
    padded = np.full((4, 3), -1)
    padded_grades = np.zeros((4, 3))
    for i, (r, g) in enumerate(zip(relevant, grades, strict=True)):
        padded[i, : len(r)], padded_grades[i, : len(g)] = r, g
    indptr = np.concatenate([[0], np.cumsum([len(e) for e in exclude])])
    indices = np.concatenate(exclude)
    sparse = scipy.sparse.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(4, 80))
    names = ["ndcg@5", "mrr", "recall@10"]
    ref = catalog_metrics(names, queries, relevant, items, grades=grades, exclude=exclude, empty="zero")
    forms = [
        dict(relevant=padded, grades=padded_grades, exclude=(indptr, indices)),
        dict(relevant=torch.from_numpy(padded), grades=torch.from_numpy(padded_grades), exclude=sparse),
    ]
    for form in forms:
        rel = form.pop("relevant")
        assert_same(catalog_metrics(names, queries, rel, items, empty="zero", **form), ref)


def _reference_top(scores, k, exclude=None):
    """Each row's best k ids by (score descending, id ascending), excluded items left out."""
    out = []
    for i, row in enumerate(scores):
        ids = np.arange(row.shape[0])
        if exclude is not None:
            ids = np.setdiff1d(ids, exclude[i])
        order = ids[np.lexsort((ids, -row[ids]))][:k]
        out.append(np.concatenate([order, -np.ones(k - len(order), np.int64)]))
    return np.stack(out)


@pytest.mark.parametrize("chunk", [1, 7, 997])
def test_top_k_ids_with_ties_and_exclusions(chunk):
    from rankstream.catalog import top_k_ids

    rng = np.random.default_rng(15)
    items, queries = quantised(rng, (300, 2), np.float32), quantised(rng, (6, 2), np.float32)
    exclude = [rng.choice(300, 20, replace=False) for _ in range(6)]
    for k in (1, 10, 299, 310):
        scores, ids = top_k_ids(queries, k, items=items, exclude=exclude, chunk_size=chunk)
        np.testing.assert_array_equal(ids, _reference_top(queries @ items.T, k, exclude))
        assert np.all(np.isneginf(scores[ids < 0]))


def test_top_k_ids_equal_faiss():
    faiss = pytest.importorskip("faiss", reason="faiss-cpu is the peer for exact inner-product search")
    from rankstream.catalog import top_k_ids

    rng = np.random.default_rng(16)
    items = rng.standard_normal((2000, 16)).astype(np.float32)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    index = faiss.IndexFlatIP(16)
    index.add(items)
    peer_scores, peer_ids = index.search(queries, 50)
    scores, ids = top_k_ids(queries, 50, items=items, chunk_size=333)
    np.testing.assert_array_equal(ids, peer_ids)
    np.testing.assert_allclose(scores, peer_scores, rtol=1e-5, atol=1e-5)


def test_edges_in_a_chunks_dtype_compare_as_float64():
    """``x < lo`` and ``x <= hi`` with float64 edges give the same flags as ``x < up(lo)`` and
    ``x <= down(hi)`` in float32 (:func:`edges_in`), at and beside every edge, the infinities and
    edges beyond float32's range included; padding edges are ``+inf``."""
    from rankstream.core.backends.catalog.comparisons import edges_in

    rng = np.random.default_rng(21)
    e = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200), [0.0, 1e300, -1e300]])
    with np.errstate(over="ignore"):  # edges beyond float32's range round to infinity
        e = np.concatenate([e, [np.inf, -np.inf], e.astype(np.float32).astype(np.float64)])
        near = e.astype(np.float32)
    lo, hi = e[None, :], e[None, :]
    x = np.concatenate(
        [near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, -np.float32(np.inf))]
    )
    x = np.concatenate([x, np.float32([np.inf, -np.inf, 0.0, 3.4e38, -3.4e38])])
    up, down = edges_in(np.dtype(np.float32), lo, hi, np.zeros(lo.shape, bool))
    assert up.dtype == down.dtype == np.float32
    x64 = x.astype(np.float64)[:, None]
    np.testing.assert_array_equal(x[:, None] < up, x64 < lo)
    np.testing.assert_array_equal(x[:, None] <= down, x64 <= hi)
    pad = np.zeros(lo.shape, bool)
    pad[0, :3] = True
    up, down = edges_in(np.dtype(np.float32), lo, hi, pad)
    assert np.isposinf(up[0, :3]).all() and np.isposinf(down[0, :3]).all()


@pytest.mark.parametrize("width", [1, 7, 8, 9, 2040, 2041, 4096, 70_001])
def test_true_counts_of_flag_words(width):
    """The flags' true bytes counted as 64-bit words in groups (:func:`_true_counts`) equal
    numpy's count, for widths in one and several groups, all true and all false included."""
    from rankstream.core.backends.catalog.comparisons import _layout, _true_counts

    rng = np.random.default_rng(width)
    groups, span, padded = _layout(width)
    flags = np.zeros((3, 4, padded), dtype=bool)
    flags[:, :, :width] = rng.random((3, 4, width)) < rng.random((3, 4, 1))
    flags[0, 0, :width], flags[0, 1, :width] = True, False
    sums = flags.view(np.int64).reshape(3, 4, groups, span).sum(-1)
    np.testing.assert_array_equal(_true_counts(sums), np.count_nonzero(flags, axis=-1))
