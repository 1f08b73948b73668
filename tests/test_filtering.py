"""Tests for rankstream.filtering: filtered candidate masks and macro weights.

References: PyKEEN 1.11.1's own filter construction (``create_sparse_positive_filter_`` and its dense
mask, ``filter_scores_``) and ``MacroRankBasedEvaluator`` on bundled datasets, and naive
per-query Python loops written here.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pykeen.constants import TARGET_TO_KEYS
from pykeen.datasets import UMLS, Nations
from pykeen.evaluation import MacroRankBasedEvaluator
from pykeen.evaluation.evaluator import (
    create_dense_positive_mask_,
    create_sparse_positive_filter_,
    filter_scores_,
)
from pykeen.evaluation.ranks import Ranks

from rankstream.filtering import SIDES, FilterIndex, filter_mask, macro_weights

COLUMN = {"head": 0, "relation": 1, "tail": 2}


@pytest.fixture(scope="module", params=["nations", "umls"])
def dataset(request):
    return {"nations": Nations, "umls": UMLS}[request.param]()


def known_of(ds) -> torch.Tensor:
    return torch.cat([ds.training.mapped_triples, ds.validation.mapped_triples, ds.testing.mapped_triples])


def pykeen_candidates(batch: torch.Tensor, known: torch.Tensor, side: str, num_entities: int) -> torch.Tensor:
    """PyKEEN's filter as a candidate mask: its dense positive mask negated, the own answer kept."""
    col = COLUMN[side]
    positives, _ = create_sparse_positive_filter_(hrt_batch=batch, all_pos_triples=known, filter_col=col)
    dense = create_dense_positive_mask_(torch.zeros(batch.shape[0], num_entities), positives)
    out = dense == 0
    out[torch.arange(batch.shape[0]), batch[:, col]] = True
    return out


def naive_mask(queries, known, side: str, width: int) -> np.ndarray:
    """One query at a time: every known triple agreeing on the two query columns removes its answer."""
    col = COLUMN[side]
    a, b = [c for c in range(3) if c != col]
    out = np.ones((len(queries), width), dtype=bool)
    for i, q in enumerate(queries):
        for k in known:
            if k[a] == q[a] and k[b] == q[b]:
                out[i, k[col]] = False
        out[i, q[col]] = True
    return out


@pytest.mark.parametrize("side", ["head", "tail"])
def test_mask_matches_pykeen_filter_on_real_data(dataset, side):
    known = known_of(dataset)
    index = FilterIndex(
        [dataset.training.mapped_triples, dataset.validation.mapped_triples, dataset.testing.mapped_triples],
        num_entities=dataset.num_entities,
    )
    test = dataset.testing.mapped_triples
    expected = pykeen_candidates(test, known, side, dataset.num_entities)
    assert 0 < int((~expected).sum())  # the data really has other known answers to filter
    got_torch = index.mask(test, side)
    assert isinstance(got_torch, torch.Tensor) and got_torch.dtype == torch.bool
    assert torch.equal(got_torch, expected)
    got_numpy = index.mask(test.numpy(), side)
    assert isinstance(got_numpy, np.ndarray) and got_numpy.dtype == np.bool_
    np.testing.assert_array_equal(got_numpy, expected.numpy())
    # the validation triples too (queries from another split, same index)
    valid = dataset.validation.mapped_triples
    assert torch.equal(index.mask(valid, side), pykeen_candidates(valid, known, side, dataset.num_entities))


@pytest.mark.parametrize("side", ["head", "tail"])
def test_mask_is_the_complement_of_pykeen_nan_scores(side):
    """The NaN positions of the filtered scores PyKEEN's evaluation loop builds are our False entries."""
    ds = Nations()
    known, test = known_of(ds), ds.testing.mapped_triples
    col = COLUMN[side]
    scores = torch.randn(test.shape[0], ds.num_entities, generator=torch.Generator().manual_seed(1))
    rows = torch.arange(test.shape[0])
    true_scores = scores[rows, test[:, col]].clone()
    positives, _ = create_sparse_positive_filter_(hrt_batch=test, all_pos_triples=known, filter_col=col)
    filtered = filter_scores_(scores=scores, filter_batch=positives)
    filtered[rows, test[:, col]] = true_scores
    assert torch.equal(filter_mask(test, known, side, ds.num_entities), ~torch.isnan(filtered))


def test_batches_equal_whole_and_types_follow_input():
    ds = Nations()
    known, test = known_of(ds), ds.testing.mapped_triples
    index = FilterIndex(known, num_entities=ds.num_entities)
    whole = index.mask(test, "tail")
    parts = torch.cat([index.mask(part, "tail") for part in test.split(37)])
    assert torch.equal(parts, whole)
    # int32 tensors, int32 numpy arrays and plain lists of queries
    assert torch.equal(index.mask(test.int(), "tail"), whole)
    np.testing.assert_array_equal(index.mask(test.numpy().astype(np.int32), "tail"), whole.numpy())
    listed = index.mask(test[:5].tolist(), "tail")
    assert isinstance(listed, np.ndarray)
    np.testing.assert_array_equal(listed, whole[:5].numpy())
    # a numpy-built index answers torch queries and vice versa; parts equal their concatenation
    from_numpy = FilterIndex(known.numpy(), num_entities=ds.num_entities)
    assert torch.equal(from_numpy.mask(test, "head"), index.mask(test, "head"))
    parts_index = FilterIndex([ds.training.mapped_triples.numpy(), ds.validation.mapped_triples, test])
    assert torch.equal(parts_index.mask(test, "head"), index.mask(test, "head"))
    # duplicates in the known triples change nothing
    assert torch.equal(FilterIndex(torch.cat([known, known])).mask(test, "tail"), whole)
    assert index.mask(test[:0], "tail").shape == (0, ds.num_entities)


def test_unknown_queries_and_unseen_entities():
    known = np.array([[0, 0, 1], [0, 0, 2], [3, 1, 2]])
    index = FilterIndex(known, num_entities=6)
    # (0, 0, 4) is not known: its own answer 4 stays a candidate, the known answers 1 and 2 do not
    np.testing.assert_array_equal(index.mask([[0, 0, 4]], "tail"), [[True, False, False, True, True, True]])
    # a relation id with no known triple filters nothing (not an error: a mask never indexes it)
    np.testing.assert_array_equal(index.mask([[0, 7, 4]], "tail"), np.ones((1, 6), dtype=bool))
    np.testing.assert_array_equal(index.mask([[5, 9, 2]], "head"), np.ones((1, 6), dtype=bool))
    # entity 5 appears in no known triple, but num_entities=6 makes it a column, and a valid query id
    np.testing.assert_array_equal(index.mask([[5, 1, 2]], "head"), [[True, True, True, False, True, True]])
    # relation prediction: (h, ?, t)
    np.testing.assert_array_equal(index.mask([[0, 1, 2]], "relation"), [[False, True]])
    assert FilterIndex(known).num_entities == 4 and FilterIndex(known).num_relations == 2


triple_sets = st.integers(1, 7).flatmap(
    lambda e: st.integers(1, 4).flatmap(
        lambda r: st.tuples(
            st.just(e),
            st.just(r),
            st.lists(
                st.tuples(st.integers(0, e - 1), st.integers(0, r - 1), st.integers(0, e - 1)), max_size=40
            ),
            st.lists(
                st.tuples(st.integers(0, e - 1), st.integers(0, r - 1), st.integers(0, e - 1)),
                min_size=0,
                max_size=12,
            ),
        )
    )
)


@settings(max_examples=150, deadline=None)
@given(data=triple_sets, side=st.sampled_from(SIDES), use_torch=st.booleans())
def test_mask_matches_naive_loop(data, side, use_torch):
    num_entities, num_relations, known, queries = data
    width = num_relations if side == "relation" else num_entities
    expected = naive_mask(queries, known, side, width)
    known_arr = np.array(known, dtype=np.int64).reshape(-1, 3)
    query_arr = np.array(queries, dtype=np.int64).reshape(-1, 3)
    if use_torch:
        known_arr, query_arr = torch.from_numpy(known_arr), torch.from_numpy(query_arr)
    index = FilterIndex(known_arr, num_entities=num_entities, num_relations=num_relations)
    got = index.mask(query_arr, side)
    assert isinstance(got, torch.Tensor) == use_torch
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_errors_name_the_argument_and_echo_the_input():
    known = np.array([[0, 0, 1], [1, 1, 2]])
    index = FilterIndex(known, num_entities=3)
    with pytest.raises(ValueError, match=r"side must be one of .*'both'"):
        index.mask(known, "both")
    with pytest.raises(ValueError, match=r"triples must have shape \(n, 3\).*\(3,\)"):
        index.mask(np.array([0, 0, 1]), "tail")
    with pytest.raises(ValueError, match=r"triples must have shape \(n, 3\).*\(2, 2\)"):
        index.mask(torch.zeros(2, 2, dtype=torch.long), "tail")
    with pytest.raises(TypeError, match=r"triples must hold integer ids.*float32"):
        index.mask(torch.zeros(2, 3), "tail")
    with pytest.raises(TypeError, match=r"triples must hold integer ids.*float64"):
        index.mask(np.zeros((2, 3)), "head")
    with pytest.raises(TypeError, match=r"triples must hold integer ids.*bool"):
        index.mask(np.zeros((2, 3), dtype=bool), "head")
    with pytest.raises(ValueError, match=r"triples holds tail id 3 \(row 1: \[0, 0, 3\]\).*num_entities=3"):
        index.mask(np.array([[0, 0, 1], [0, 0, 3]]), "tail")
    with pytest.raises(ValueError, match=r"triples holds head id 7 \(row 0: \[7, 0, 1\]\).*num_entities=3"):
        index.mask(torch.tensor([[7, 0, 1]]), "tail")
    with pytest.raises(ValueError, match=r"triples holds relation id 2 .*num_relations=2"):
        index.mask(np.array([[0, 2, 1]]), "relation")
    with pytest.raises(ValueError, match=r"triples holds negative ids, e.g. row 0: \[0, -1, 1\]"):
        index.mask(np.array([[0, -1, 1]]), "tail")
    with pytest.raises(ValueError, match=r"known_triples holds entity id 2, out of range for num_entities=2"):
        FilterIndex(known, num_entities=2)
    with pytest.raises(ValueError, match=r"known_triples holds relation id 1, out of range.*num_relations=1"):
        FilterIndex(known, num_relations=1)
    with pytest.raises(ValueError, match=r"known_triples is empty"):
        FilterIndex(np.zeros((0, 3), dtype=int))
    with pytest.raises(
        TypeError, match=r"num_entities must be a non-negative int or None; got 2.5 \(float\)"
    ):
        FilterIndex(known, num_entities=2.5)
    with pytest.raises(ValueError, match=r"num_relations must be a non-negative int or None; got -1"):
        FilterIndex(known, num_relations=-1)
    with pytest.raises(TypeError, match=r"known_triples\[1\] must hold integer ids.*float64"):
        FilterIndex([known, np.zeros((1, 3))])
    with pytest.raises(TypeError, match=r"known_triples must be an \(n, 3\) integer array.*str"):
        FilterIndex("triples.tsv")
    with pytest.raises(ValueError, match=r"side must be one of .*got 'tails'"):
        macro_weights(known, "tails")
    # an empty index is fine when sized explicitly
    np.testing.assert_array_equal(
        FilterIndex(np.zeros((0, 3), dtype=int), 2, 1).mask([[0, 0, 1]], "tail"), [[True, True]]
    )


@pytest.mark.parametrize("side", ["head", "tail", "relation"])
def test_macro_weights_match_pykeen_and_a_counter(dataset, side):
    test = dataset.testing.mapped_triples
    expected = MacroRankBasedEvaluator._calculate_weights([test[:, TARGET_TO_KEYS[side]].numpy()])
    got_np = macro_weights(test.numpy(), side)
    assert got_np.dtype == np.float64 and got_np.shape == (test.shape[0],)
    np.testing.assert_array_equal(got_np, expected)
    got_t = macro_weights(test, side)
    assert isinstance(got_t, torch.Tensor) and got_t.dtype == torch.float64
    np.testing.assert_array_equal(got_t.numpy(), expected)
    assert macro_weights(test, side, dtype=torch.float32).dtype == torch.float32
    # a plain reference: 1 / count of the query key
    a, b = TARGET_TO_KEYS[side]
    keys = [(int(x[a]), int(x[b])) for x in test]
    counts = Counter(keys)
    np.testing.assert_array_equal(got_np, [1.0 / counts[k] for k in keys])
    assert (got_np < 1).any()  # some query keys repeat, so the weights are not all one
    # each distinct query weighs one in total
    assert got_np.sum() == pytest.approx(len(counts))


def test_macro_weights_reproduce_pykeen_macro_evaluator():
    """The macro evaluator's weighted Hits@10 and MRR equal np.average under our weights."""
    ds = Nations()
    known, test = known_of(ds), ds.testing.mapped_triples
    generator = torch.Generator().manual_seed(3)
    evaluator = MacroRankBasedEvaluator()
    ranks = {}
    for side in ("head", "tail"):
        col = COLUMN[side]
        scores = torch.randn(test.shape[0], ds.num_entities, generator=generator)
        rows = torch.arange(test.shape[0])
        true_scores = scores[rows, test[:, col]].clone()
        positives, _ = create_sparse_positive_filter_(hrt_batch=test, all_pos_triples=known, filter_col=col)
        filtered = filter_scores_(scores=scores, filter_batch=positives)
        filtered[rows, test[:, col]] = true_scores
        for part, part_scores, part_true in zip(
            test.split(50), filtered.split(50), true_scores.split(50), strict=True
        ):
            evaluator.process_scores_(part, side, part_scores, part_true.unsqueeze(1))
        ranks[side] = Ranks.from_scores(true_scores.unsqueeze(1), filtered).realistic.numpy()
    flat = evaluator.finalize().to_flat_dict()
    for side in ("head", "tail"):
        w = macro_weights(test.numpy(), side)
        assert flat[f"{side}.realistic.hits_at_10"] == pytest.approx(np.average(ranks[side] <= 10, weights=w))
        assert flat[f"{side}.realistic.inverse_harmonic_mean_rank"] == pytest.approx(
            np.average(1.0 / ranks[side], weights=w)
        )
    both_w = np.concatenate([macro_weights(test, s).numpy() for s in ("head", "tail")])
    both_r = np.concatenate([ranks["head"], ranks["tail"]])
    assert flat["both.realistic.arithmetic_mean_rank"] == pytest.approx(np.average(both_r, weights=both_w))
