"""Chance-adjusted list metrics (``chance=True``): per list the expectation, variance and best
value of every list metric under a uniformly random ranking of the list's items, streamed as
sums, and the ``expected``, ``adjusted`` and ``z`` they give.

Independent references: exhaustive enumeration of every ordering of each list's valid items
(lists of up to 8 items, graded labels, masks, weights), each ordering scored by the naive
one-list-at-a-time functions of ``tests/reference.py``; the rank metrics'
``RankBasedMetrics`` for lists with one relevant item (a rank task); Monte Carlo over random
permutations for lists of 20,000 items; then batch and merge invariance, an Ignite ``Engine``
run, ``ListMetrics`` and the functional forms."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream import (
    DCGKernel,
    HitRateKernel,
    MAPKernel,
    NDCGKernel,
    PrecisionKernel,
    RecallKernel,
    ReciprocalRankKernel,
    RPrecisionKernel,
    State,
    merge,
)
from rankstream import ListMetrics as CoreListMetrics
from rankstream.core.backends import read_back
from rankstream.core.functional import map_at_k, ndcg_at_k
from rankstream.ignite import NDCG, ListMetrics, MeanReciprocalRank, RankBasedMetrics

import reference as ref

KS = [1, 2, 3, 5, 8, 10]
CHANCE_FIELDS = ("chance_expected_sum", "chance_variance_sum", "chance_best_sum")


def lin(y):
    return y


#: (kernel class, kernel options, the reference's per-list function, its options)
CASES = {
    "map_min": (MAPKernel, {}, ref.average_precision, {}),
    "map_all_t2": (MAPKernel, {"denominator": "all", "relevance_threshold": 2.0}, ref.average_precision,
                   {"denominator": "all", "threshold": 2.0}),
    "ndcg_exp_t1": (NDCGKernel, {}, ref.ndcg, {"threshold": 1.0}),
    "ndcg_lin_none": (NDCGKernel, {"gain": "linear_rank", "relevance_threshold": None}, ref.ndcg,
                      {"gain": lin, "threshold": None}),
    "ndcg_callable_t2": (NDCGKernel, {"gain": lambda y: y * y, "relevance_threshold": 2.0}, ref.ndcg,
                         {"gain": lambda y: y * y, "threshold": 2.0}),
    "dcg": (DCGKernel, {}, ref.dcg, {}),
    "dcg_t2_binary": (DCGKernel, {"relevance_threshold": 2.0}, ref.dcg, {"threshold": 2.0}),
    "ndcg_exp_t2_binary": (NDCGKernel, {"relevance_threshold": 2.0}, ref.ndcg, {"threshold": 2.0}),
    "dcg_lin_negative": (DCGKernel, {"gain": "linear_rank"}, ref.dcg, {"gain": lin}),
    "ndcg_exp_negative": (NDCGKernel, {"relevance_threshold": None}, ref.ndcg, {"threshold": None}),
    "dcg_discount": (DCGKernel, {"discount": lambda j: 1.0 / j, "relevance_threshold": 1.0}, ref.dcg,
                     {"discount": lambda j: 1.0 / j, "threshold": 1.0}),
    "precision_k": (PrecisionKernel, {}, ref.precision, {}),
    "precision_valid_t2": (PrecisionKernel, {"denominator": "valid", "relevance_threshold": 2.0},
                           ref.precision, {"denominator": "valid", "threshold": 2.0}),
    "recall": (RecallKernel, {}, ref.recall, {}),
    "hit_rate": (HitRateKernel, {}, ref.hit_rate, {}),
    "hit_rate_t2": (HitRateKernel, {"relevance_threshold": 2.0}, ref.hit_rate, {"threshold": 2.0}),
    "mrr": (ReciprocalRankKernel, {}, ref.reciprocal_rank, {}),
    "r_precision": (RPrecisionKernel, {}, ref.r_precision, {}),
}  # fmt: skip


def lists(seed: int = 0, b: int = 9, n: int = 8):
    """Graded labels 0..2 (some lists without a relevant item), masks (one list of a single
    item, one with every item masked), per-list weights (one 0)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, size=(b, n)).astype(float) * (rng.random((b, n)) < 0.6)
    labels[0] = 0.0
    labels[1] = [2, 2, 2, 2, 2, 2, 2, 2]  # every item relevant: every ranking is the best one
    mask = rng.random((b, n)) < 0.8
    mask[1] = True
    mask[2] = [True] + [False] * (n - 1)
    mask[3] = False
    weights = rng.uniform(0.3, 2.0, size=b)
    weights[4] = 0.0
    scores = rng.normal(size=(b, n))
    return scores, labels, mask, weights


def enumerated(per_list, kw, labels, valid, k):
    """``(value, E, Var, best)`` of one list over every ordering of its valid items (each
    distinct arrangement of their labels is equally likely), scored by the reference; None for
    a list the reference gives None (no relevant item)."""
    items = [i for i in range(len(labels)) if valid[i]]
    if not items:
        return None
    values = []
    for arrangement in set(itertools.permutations([labels[i] for i in items])):
        scores = [float(len(items) - j) for j in range(len(items))]  # ranked in this order
        v = per_list(scores, list(arrangement), k, **kw)
        if v is None:
            return None
        values.append(v)
    values = np.array(values, dtype=np.float64)
    mean = math.fsum(values) / len(values)
    var = math.fsum((values - mean) ** 2) / len(values)
    return mean, var, float(values.max())


def reference_terms(case, labels, mask, weights, empty, ks):
    """Per counted list: ``(w, value, [(E, Var, best) per k])`` from the enumeration."""
    _, _, per_list, kw = CASES[case]
    out = []
    for b in range(len(labels)):
        if not mask[b].any():
            continue
        order = [i for i in range(labels.shape[1]) if mask[b, i]]
        # the list's own value under the given scores (ties broken by index, as the kernel)
        terms = []
        for k in ks:
            t = enumerated(per_list, kw, labels[b], mask[b], k)
            terms.append(t if t is not None else (0.0, 0.0, 0.0))
        if enumerated(per_list, kw, labels[b], mask[b], ks[0]) is None and empty == "skip":
            continue
        out.append((b, order, terms))
    return out


#: every case under both empty policies, but negative labels under "skip" only (a list of negative
#: labels alone has a negative DCG in the kernel, None in the reference)
POLICIES = [(c, e) for c in sorted(CASES) for e in ("skip", "zero") if not ("negative" in c and e == "zero")]


@pytest.mark.parametrize(("case", "empty"), POLICIES)
def test_each_lists_moments_equal_the_enumeration_of_every_ordering(case, empty):
    cls, options, _, _ = CASES[case]
    scores, labels, mask, weights = lists(seed=len(case))
    if "negative" in case:  # labels below 0 kept: negative gains (only lists with a relevant item)
        labels = labels - (np.random.default_rng(1).random(labels.shape) < 0.3)
    ks = KS if cls is not RPrecisionKernel else [None]
    kernel = (
        cls(**options, empty=empty, chance=True)
        if ks == [None]
        else cls(ks, **options, empty=empty, chance=True)
    )
    rows = reference_terms(case, labels, mask, weights, empty, ks)
    counted = {b for b, _, _ in rows}
    for b in range(len(labels)):  # one list per batch: its own terms
        sums = kernel.batch_sums(
            None, scores[b : b + 1], labels[b : b + 1], mask[b : b + 1], weights[b : b + 1]
        )
        if b not in counted:
            for f in CHANCE_FIELDS:
                assert np.all(np.asarray(sums[f]) == 0.0), (b, f)
            continue
        (terms,) = [t for r, _, t in rows if r == b]
        e, v, best = (np.array([t[i] for t in terms]) for i in range(3))
        w = weights[b]
        np.testing.assert_allclose(sums["chance_expected_sum"], w * e, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(sums["chance_variance_sum"], w * w * v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(sums["chance_best_sum"], w * best, rtol=1e-12, atol=1e-12)
    # the whole batch: the sums over its counted lists
    sums = kernel.batch_sums(None, scores, labels, mask, weights)
    for i, f in enumerate(CHANCE_FIELDS):
        power = 2 if i == 1 else 1
        want = sum(weights[b] ** power * np.array([t[i] for t in terms]) for b, _, terms in rows)
        np.testing.assert_allclose(sums[f], want, rtol=1e-12, atol=1e-12)


def test_the_adjusted_index_and_z_equal_the_enumeration_aggregated_by_hand():
    """Several lists, unequal weights: ``E = sum w E_i / W``, ``M_best = sum w b_i / W``,
    ``adjusted = (M - E) / (M_best - E)``, ``z = (M - E) / sqrt(sum w^2 Var_i / W^2)``, ``M``
    the reference's weighted mean."""
    scores, labels, mask, weights = lists(seed=3)
    labels[1] = [2, 0, 1, 0, 2, 0, 0, 1]  # not every item relevant: the index is defined
    for case in ("map_min", "ndcg_exp_t1", "mrr", "precision_valid_t2", "r_precision"):
        cls, options, per_list, kw = CASES[case]
        ks = [3, 5] if cls is not RPrecisionKernel else [None]
        kernel = cls(**options, chance=True) if ks == [None] else cls(ks, **options, chance=True)
        got = State(kernel).update(scores, labels, mask=mask, sample_weight=weights).compute()
        got = {q: np.atleast_1d(v) for q, v in got.items()}
        rows = reference_terms(case, labels, mask, weights, "skip", ks)
        for j, k in enumerate(ks):
            w = np.array([weights[b] for b, _, _ in rows])
            e, v, best = (np.array([t[j][i] for _, _, t in rows]) for i in range(3))
            m = ref.mean_over_lists(per_list, scores, labels, k, masks=mask, weights=weights, **kw)
            big_e, big_best = w @ e / w.sum(), w @ best / w.sum()
            sd = math.sqrt((w * w) @ v) / w.sum()
            assert got["value"][j] == pytest.approx(m, rel=1e-12)
            assert got["expected"][j] == pytest.approx(big_e, rel=1e-12)
            assert got["adjusted"][j] == pytest.approx((m - big_e) / (big_best - big_e), rel=1e-10)
            assert got["z"][j] == pytest.approx((m - big_e) / sd, rel=1e-10)


def test_ideal_and_random_rankings_give_adjusted_1_and_expected_0_on_average():
    """At the ideal ranking the adjusted index is 1; averaged over many random rankings of the
    same lists it is near 0 (the mean of (M - E) is 0 exactly: checked with the z-score's
    scale)."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, size=(40, 30)).astype(float) * (rng.random((40, 30)) < 0.3)
    labels[:, 0] = 2.0  # every list relevant
    for cls in (NDCGKernel, MAPKernel, PrecisionKernel, RecallKernel, HitRateKernel, ReciprocalRankKernel):
        kernel = cls([5, 10], chance=True)
        best = State(kernel).update(labels + 0.001 * np.arange(30)[::-1], labels).compute()
        np.testing.assert_allclose(best["adjusted"], 1.0, rtol=1e-12)


def test_one_relevant_item_per_list_is_a_rank_task_rank_based_metrics_agree():
    """A list with one relevant item among ``N`` is a rank task: its reciprocal rank, hit and
    their moments under random ranking are those of the rank ``r ~ U{1..N}`` that
    ``RankBasedMetrics`` streams (inverse harmonic mean rank, hits@k: expected, adjusted, z)."""
    rng = np.random.default_rng(7)
    b, n = 60, 12
    scores = rng.normal(size=(b, n)).round(1)  # ties: the rank metrics count them exactly
    scores = rng.permutation(n * b).reshape(b, n).astype(float)  # no ties: one rank type
    target = rng.integers(0, n, size=b)
    labels = np.zeros((b, n))
    labels[np.arange(b), target] = 1.0
    ks = [1, 3, 5]
    ranks = RankBasedMetrics(ks=ks, rank_type="optimistic")
    ranks.update((torch.as_tensor(scores), torch.as_tensor(target)))
    got_ranks = ranks.compute()
    mrr = State(ReciprocalRankKernel(n, chance=True)).update(scores, labels).compute()
    assert mrr["value"][0] == pytest.approx(got_ranks["inverse_harmonic_mean_rank"], rel=1e-12)
    assert mrr["expected"][0] == pytest.approx(got_ranks["expected_inverse_harmonic_mean_rank"], rel=1e-12)
    assert mrr["adjusted"][0] == pytest.approx(got_ranks["adjusted_inverse_harmonic_mean_rank"], rel=1e-10)
    assert mrr["z"][0] == pytest.approx(got_ranks["z_inverse_harmonic_mean_rank"], rel=1e-10)
    hits = State(HitRateKernel(ks, chance=True)).update(scores, labels).compute()
    for j, k in enumerate(ks):
        assert hits["value"][j] == pytest.approx(got_ranks[f"hits_at_{k}"], rel=1e-12)
        assert hits["expected"][j] == pytest.approx(got_ranks[f"expected_hits_at_{k}"], rel=1e-12)
        assert hits["adjusted"][j] == pytest.approx(got_ranks[f"adjusted_hits_at_{k}"], rel=1e-10)
        assert hits["z"][j] == pytest.approx(got_ranks[f"z_hits_at_{k}"], rel=1e-10)


def per_item_weighted_dcg(arrangement, k, normalised):
    """DCG@k (nDCG@k) of one ordering of ``(label, item weight)`` pairs as keras-rs weighs it:
    ``sum_{j <= k} w_(j) g(y_(j)) d(j)``, the ideal ordering by ``w g``; DCG divided by the
    list's weight ``sum w g / sum g``."""
    x = [w * (2.0**y - 1.0) for y, w in arrangement]
    d = [1.0 / math.log2(j + 2) for j in range(len(x))]
    dcg = sum(xi * di for xi, di in zip(x[:k], d, strict=False))
    idcg = sum(xi * di for xi, di in zip(sorted(x, reverse=True)[:k], d, strict=False))
    if normalised:
        return dcg / idcg if idcg > 0 else 0.0
    g = sum(2.0**y - 1.0 for y, _ in arrangement)
    return dcg / (sum(x) / g)


@pytest.mark.parametrize("cls", [NDCGKernel, DCGKernel])
def test_per_item_weights_weigh_the_gains_of_the_linear_statistic(cls):
    """keras-rs weighting with per-item weights: every gain is weighted (nDCG, DCG), DCG is
    divided by the list weight: the moments over every ordering of the (label, weight) pairs."""
    rng = np.random.default_rng(11)
    b, n = 5, 7
    labels = rng.integers(0, 3, size=(b, n)).astype(float)
    labels[:, 0] = 2.0
    item_w = rng.choice([0.5, 1.0, 2.0, 3.0], size=(b, n))
    ks = [1, 3, 7]
    kernel = cls(ks, relevance_threshold=None, weighting="keras_rs", chance=True)
    for r in range(b):
        pairs = list(zip(labels[r], item_w[r], strict=True))
        sums = kernel.batch_sums(None, rng.normal(size=(1, n)), labels[r : r + 1], None, item_w[r : r + 1])
        w = float(sums["weight_sum"])
        for j, k in enumerate(ks):
            values = np.array(
                [per_item_weighted_dcg(p, k, cls is NDCGKernel) for p in itertools.permutations(pairs)]
            )
            assert sums["chance_expected_sum"][j] == pytest.approx(w * values.mean(), rel=1e-12)
            assert sums["chance_variance_sum"][j] == pytest.approx(w * w * values.var(), rel=1e-10, abs=1e-14)
            assert sums["chance_best_sum"][j] == pytest.approx(w * values.max(), rel=1e-12)


def test_map_with_per_item_weights_is_refused_with_the_shape_and_the_state_kept():
    kernel = MAPKernel(3, weighting="keras_rs", chance=True)
    state = State(kernel).update(np.array([[0.3, 0.1, 0.2]]), np.array([[1.0, 0.0, 1.0]]))
    before = {f: np.copy(v) for f, v in state.sums.items()}
    with pytest.raises(ValueError, match=r"chance=True for MAP .*per-item weights.*\(1, 3\)"):
        state.update(np.array([[0.3, 0.1, 0.2]]), np.array([[1.0, 0.0, 1.0]]), sample_weight=np.ones((1, 3)))
    for f, v in state.sums.items():
        np.testing.assert_array_equal(v, before[f])


def test_a_bad_chance_argument_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"chance must be a bool, got 'yes'"):
        NDCGKernel(5, chance="yes")
    with pytest.raises(TypeError, match=r"chance must be a bool, got 1"):
        CoreListMetrics(["ndcg@5"], chance=1)
    with pytest.raises(ValueError, match="chance applies to metrics given by name"):
        CoreListMetrics({"m": MAPKernel(3)}, chance=True)


def test_option_off_keeps_the_fields_results_and_settings():
    for cls in (NDCGKernel, MAPKernel, RPrecisionKernel):
        plain, on = cls(), cls(chance=True)
        assert not set(plain.fields) & set(CHANCE_FIELDS)
        assert set(on.fields) - set(plain.fields) == set(CHANCE_FIELDS)
        assert plain.quantities == () and on.quantities == ("expected", "adjusted", "z")
        assert cls(confidence=0.9, chance=True).quantities == (
            "stderr",
            "ci_low",
            "ci_high",
            "count",
            "expected",
            "adjusted",
            "z",
        )
        assert vars(plain).keys() == vars(on).keys() and plain.chance is False


def batches(seed, n_batches=4, b=13, n=9):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        scores = rng.integers(0, 4, size=(b, n)).astype(float)  # exact ties
        labels = rng.integers(0, 3, size=(b, n)).astype(float) * (rng.random((b, n)) < 0.5)
        mask = rng.random((b, n)) < 0.85
        weights = rng.integers(1, 4, size=b).astype(float)
        out.append((scores, labels, mask, weights))
    return out


@pytest.mark.parametrize("cls", [NDCGKernel, DCGKernel, MAPKernel, PrecisionKernel, RecallKernel,
                                 HitRateKernel, ReciprocalRankKernel])  # fmt: skip
def test_batches_merges_and_one_batch_give_the_same_result(cls):
    data = batches(seed=3)
    kernel = cls([1, 4, 20], chance=True, confidence=0.9)
    one = State(kernel).update(*(np.concatenate([d[i] for d in data]) for i in range(2)),
                               mask=np.concatenate([d[2] for d in data]),
                               sample_weight=np.concatenate([d[3] for d in data])).compute()  # fmt: skip
    streamed = State(kernel)
    parts = []
    for s, y, m, w in data:
        streamed.update(s, y, mask=m, sample_weight=w)
        parts.append(State(kernel).update(s, y, mask=m, sample_weight=w))
    for got in (streamed.compute(), merge(*reversed(parts)).compute()):
        for q, v in one.items():
            np.testing.assert_allclose(got[q], v, rtol=1e-12, atol=1e-13, err_msg=q)


def test_ignite_engine_and_list_metrics_report_every_quantity():
    data = batches(seed=4, n_batches=3)
    engine = Engine(lambda e, batch: batch)
    NDCG([3, 5], chance=True).attach(engine, "ndcg")
    MeanReciprocalRank(5, chance=True, confidence=0.9).attach(engine, "mrr")
    ListMetrics(["ndcg@3", "map@5", "rprec"], chance=True).attach(engine, "lm")
    feed = [(torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m),
             "sample_weight": torch.from_numpy(w)}) for s, y, m, w in data]  # fmt: skip
    got = engine.run(feed).metrics
    scores, labels, mask, weights = (np.concatenate([d[i] for d in data]) for i in range(4))

    def core(kernel):
        return State(kernel).update(scores, labels, mask=mask, sample_weight=weights).compute()

    want = core(NDCGKernel([3, 5], chance=True))
    for q in ("expected", "adjusted", "z"):
        np.testing.assert_allclose(got[f"ndcg_{q}"], want[q], rtol=1e-12)
    want = core(ReciprocalRankKernel(5, chance=True, confidence=0.9))
    for q in ("stderr", "count", "expected", "adjusted", "z"):
        np.testing.assert_allclose(got[f"mrr_{q}"], want[q], rtol=1e-12)
    for name, kernel in {"ndcg@3": NDCGKernel(3, chance=True), "map@5": MAPKernel(5, chance=True),
                         "rprec": RPrecisionKernel(chance=True)}.items():  # fmt: skip
        want = core(kernel)
        for q in ("value", "expected", "adjusted", "z"):
            key = name if q == "value" else f"{name}_{q}"
            np.testing.assert_allclose(got[key], want[q], rtol=1e-12, err_msg=key)


def test_functional_forms_report_the_batch_mean_with_its_chance_quantities():
    scores, labels, mask, _ = batches(seed=5, n_batches=1)[0]
    got = ndcg_at_k(scores, labels, 3, mask=mask, chance=True)
    want = State(NDCGKernel(3, chance=True)).update(scores, labels, mask=mask).compute()
    assert set(got) == {"value", "expected", "adjusted", "z"}
    for q in got:
        assert got[q] == pytest.approx(want[q][0], rel=1e-12)
    assert set(map_at_k(scores, labels, [1, 3], chance=True, confidence=0.9)) == set(
        MAPKernel(chance=True, confidence=0.9).quantities
    ) | {"value"}
    with pytest.raises(ValueError, match="return_counted goes with per-list values, not with chance"):
        map_at_k(scores, labels, 3, chance=True, return_counted=True)


def test_monte_carlo_over_random_permutations_of_large_lists_agrees_with_expected():
    """Lists of 20,000 items (one with 5,000 masked): the mean over 2,000 uniformly random
    rankings (i.i.d. random scores, one ranking per row) is within 4 standard errors of
    ``expected`` for every metric and ``k``."""
    rng = np.random.default_rng(2024)
    n, rows, chunk = 20_000, 2_000, 250
    names = [f"{m}@{k}" for m in ("ndcg", "dcg", "map", "precision", "recall", "hit_rate", "mrr")
             for k in (1, 5, 10, 20)] + ["rprec"]  # fmt: skip
    for r_count, masked, graded in ((200, 0, False), (40, 5_000, True)):
        labels = np.zeros(n)
        labels[rng.choice(n, r_count, replace=False)] = rng.integers(1, 4, r_count) if graded else 1.0
        mask = np.ones(n, dtype=bool)
        mask[rng.choice(n, masked, replace=False)] = False
        metric = CoreListMetrics(names, confidence=0.95, chance=True)
        state = State(metric)
        tiled = torch.as_tensor(np.tile(labels, (chunk, 1)), dtype=torch.float32)
        valid = None if not masked else torch.as_tensor(np.tile(mask, (chunk, 1)))
        for _ in range(rows // chunk):
            scores = torch.rand(chunk, n, generator=torch.Generator().manual_seed(int(rng.integers(2**31))))
            state.update(scores, tiled, mask=valid)
        got = state.compute()
        for name in names:
            gap = abs(got[name] - got[f"{name}_expected"])
            assert gap <= 4 * got[f"{name}_stderr"], (r_count, name, got[name], got[f"{name}_expected"])


@pytest.mark.parametrize("labels_kind", ["graded", "binary"])
def test_the_path_of_a_jit_trace_gives_the_eager_sums(labels_kind):
    """Without reading values back (an accelerator, a ``jit`` trace: one dense pass over the
    gains, no row tiles) the chance sums are those of the eager path (nonzero gains, counts)."""
    data = batches(seed=6, n_batches=1)[0]
    scores, labels, mask, weights = data
    if labels_kind == "binary":
        labels = (labels > 0).astype(float)
    for kernel in (NDCGKernel([1, 4], chance=True), DCGKernel([2, 9], relevance_threshold=1.0, chance=True),
                   HitRateKernel([1, 3], chance=True), ReciprocalRankKernel([2, 30], chance=True),
                   MAPKernel([3], chance=True)):  # fmt: skip
        eager = kernel.batch_sums(None, scores, labels, mask, weights)
        with read_back(False):
            traced = kernel.batch_sums(None, scores, labels, mask, weights)
        for f in CHANCE_FIELDS:
            np.testing.assert_allclose(traced[f], eager[f], rtol=1e-12, atol=1e-14, err_msg=f)


@pytest.mark.parametrize("path", ["ideal", "counts", "nonzero", "dense"])
@pytest.mark.parametrize("case", ["ndcg_exp_t1", "ndcg_exp_t2_binary", "dcg_t2_binary", "dcg"])
def test_every_way_to_the_sums_of_gains_equals_the_enumeration(monkeypatch, case, path):
    """The sums of gains come from the ideal ranking the kernel took, from counts (binary
    relevance), from the nonzero gains, or from one dense pass: each path on its own, against
    the enumeration (lists of 8 items, ``k`` up to 5: the ideal is not the whole list)."""
    from rankstream.core.lists import chance_gains as chance

    off = lambda *a: None  # noqa: E731
    if path != "ideal":
        monkeypatch.setattr(chance, "_from_ideal", off)
    if path not in ("ideal", "counts"):
        monkeypatch.setattr(chance, "_one_label", off)
    if path == "dense":
        monkeypatch.setattr(chance, "_sparse", lambda kernel, sel: False)
    monkeypatch.setattr(sys.modules[__name__], "KS", [1, 2, 5])
    test_each_lists_moments_equal_the_enumeration_of_every_ordering(case, "zero")


def test_checkpoints_carry_the_chance_fields_and_a_state_without_them_is_refused():
    data = batches(seed=8, n_batches=2)
    src = MeanReciprocalRank([3, 10], chance=True)
    for s, y, m, _ in data:
        src.update((torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}))
    dst = MeanReciprocalRank([3, 10], chance=True)
    dst.load_state_dict(src.state_dict())
    assert dst.compute() == src.compute()
    with pytest.raises(
        ValueError, match=r"state_dict does not fit MeanReciprocalRank with fields .*'chance_"
    ):
        dst.load_state_dict(MeanReciprocalRank([3, 10]).state_dict())
    plain = State(MAPKernel(3)).update(data[0][0], data[0][1])
    with pytest.raises(ValueError, match=r"its fields and their shapes are .*'chance_expected_sum'"):
        State(MAPKernel(3, chance=True)).load_state_dict(plain.state_dict())


def test_the_expectation_is_the_tie_expected_metric_with_every_score_equal() -> None:
    """The free cross-check: under a random ranking each list's expected value is the metric
    with ``ties="expected"`` when every item ties (one group holding the whole list), for every
    metric with moments, several k, graded labels and a mask."""
    from rankstream.core.lists.chance import CHANCE_METRICS
    from rankstream.core.lists.collection import ListMetrics as Collection

    rng = np.random.default_rng(17)
    b, n = 30, 9
    labels = rng.integers(0, 4, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.5)
    labels[:, 0] = np.maximum(labels[:, 0], 1.0)  # a relevant item in every list
    valid = rng.random((b, n)) < 0.85
    valid[:, 0] = True
    random_scores, constant = rng.normal(size=(b, n)), np.zeros((b, n))
    names = [f"{m}@{k}" for m in CHANCE_METRICS if m != "r_precision" for k in (1, 3, 9)] + ["r_precision"]
    chance = Collection(names, chance=True).members
    tied = Collection(names, ties="expected").members
    for name in names:
        kernel = chance[name]
        with np.errstate(all="ignore"):  # as batch_sums runs it (0 * log 0 terms of the survival)
            out = kernel.evaluate(kernel.context(random_scores), random_scores, labels, valid)
        expected = np.asarray(out.expected)
        want = tied[name].per_list(constant, labels, valid)[0]
        np.testing.assert_allclose(expected, want, rtol=1e-12, atol=1e-13, err_msg=name)


def test_metrics_without_moments_refuse_chance_naming_those_with_them() -> None:
    from rankstream.core.lists.collection import ListMetrics as Collection

    for name in ("f1@3", "err@3", "rbp", "auc", "gauc"):
        with pytest.raises(ValueError, match=r"chance=True: \w+Kernel has no moments .*'ndcg', 'dcg'"):
            Collection([name], chance=True)


@pytest.mark.parametrize("case", ["ndcg_exp_t1", "ndcg_lin_none", "dcg"])
def test_the_nonzero_gains_path_still_equals_the_enumeration(monkeypatch, case):
    """With the one tiled pass of the named gains turned off, the sums come from the nonzero
    gains (the path per-item weights take): against the enumeration."""
    from rankstream.core.lists import chance_gains as chance

    off = lambda *a: None  # noqa: E731
    for name in ("_from_ideal", "_one_label", "_named_gain_sums"):
        monkeypatch.setattr(chance, name, off)
    monkeypatch.setattr(sys.modules[__name__], "KS", [1, 2, 5])
    test_each_lists_moments_equal_the_enumeration_of_every_ordering(case, "zero")


def _ops_of(kind):
    from rankstream.core.backends import Workspace, numpy_ops, torch_ops

    ops = torch_ops() if kind == "torch" else numpy_ops()
    conv = torch.as_tensor if kind == "torch" else np.asarray
    out = lambda x: np.asarray(x.numpy() if kind == "torch" else x, dtype=np.float64)  # noqa: E731
    return ops, conv, out, Workspace(), torch.float32 if kind == "torch" else np.float32


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_valid_counts_from_the_masks_bytes_equal_the_row_sums(kind):
    """The per-row count of a mask read as packed bytes: a full mask whose runs of 255 words
    fill every byte (255), random masks with a shorter last run, a width not a multiple of 8,
    a row slice and a column slice (not contiguous): each against numpy's row sums."""
    ops, conv, out, ws, acc = _ops_of(kind)
    rng = np.random.default_rng(5)
    full = np.ones((40, 8 * 255 * 2 + 16), dtype=bool)
    ragged = np.arange(2056)[None, :] < rng.integers(0, 2057, 33)[:, None]
    noise = rng.random((17, 4099)) < 0.3
    wide = rng.random((20, 8 * 600)) < 0.9
    for m in (full, ragged, noise, wide, wide[3:], wide[:, 5:], ragged[:, :2048]):
        np.testing.assert_array_equal(out(ops.valid_counts(conv(m), acc, ws)), m.sum(axis=1))


def _naive_gain_sums(labels, exp, t, mask):
    """Per row, ``(sum g, sum g^2)`` item by item in float64."""
    s1, s2 = [], []
    for y_row, m_row in zip(labels, mask, strict=True):
        a = b = 0.0
        for y, m in zip(y_row.tolist(), m_row.tolist(), strict=True):
            if not m:
                continue
            y = y if t is None or y >= t else 0.0
            g = 2.0**y - 1.0 if exp else y
            a, b = a + g, b + g * g
        s1.append(a)
        s2.append(b)
    return np.array(s1), np.array(s2)


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("exp", [True, False])
@pytest.mark.parametrize("t", [1.0, 0.5, None])
def test_the_sums_of_named_gains_equal_an_item_by_item_sum(kind, exp, t):
    """``Ops.gain_sums``: graded, fractional and negative labels, NaN on masked items, rows
    split into tiles and a row longer than one tile (split into columns), against a plain
    Python sum per item."""
    ops, conv, out, ws, acc = _ops_of(kind)
    rng = np.random.default_rng(11)
    for b, n in ((70, 2_000), (2, 140_000)):
        labels = rng.choice([0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.5, -1.0], size=(b, n)).astype(np.float32)
        mask = rng.random((b, n)) < 0.8
        labels[~mask & (rng.random((b, n)) < 0.5)] = np.nan
        want = _naive_gain_sums(labels.astype(np.float64), exp, t, mask)
        for m in (conv(mask), None):
            y = labels if m is not None else np.where(mask, labels, 0.0)
            got = ops.gain_sums(conv(y), exp, t, m, acc, ws)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(out(g), w, rtol=1e-5, atol=1e-3)


def test_float32_gains_past_the_float32_range_are_summed_in_the_accumulator():
    """A float32 label of 130 under ``2^y - 1`` overflows float32: the tiled pass sums that
    batch again in float64 (the sums stay finite, as the item-by-item sum)."""
    from rankstream.core.backends import Workspace, torch_ops

    labels = np.zeros((8, 20_000), dtype=np.float32)
    labels[:, :3] = [130.0, 2.0, 1.0]
    got = torch_ops().gain_sums(torch.as_tensor(labels), True, 1.0, None, torch.float64, Workspace())
    want = _naive_gain_sums(labels[:, :3].astype(np.float64), True, 1.0, np.ones((8, 3), dtype=bool))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)


@pytest.mark.parametrize("mixed", [False, True])
def test_dcg_best_from_equal_positive_gains_or_the_topk_equals_the_ideal_dcg(monkeypatch, mixed):
    """DCG's best value without a ``topk`` where each list's positive gains are equal (a grade
    per list, lists of 10,000 items through the tiled pass), and with the ``topk`` where one list
    holds two grades and another a negative label: ``chance_best_sum`` against the sum of
    each list's ideal DCG (the reference ranking the labels themselves)."""
    from rankstream.core.lists import chance_gains as chance

    seen = []
    real = chance._equal_gains
    monkeypatch.setattr(chance, "_equal_gains", lambda *a: seen.append(real(*a)) or seen[-1])
    rng = np.random.default_rng(8)
    b, n, ks = 8, 10_000, [1, 5, 20]
    labels = np.where(rng.random((b, n)) < 0.002, (np.arange(b) % 3 + 1.0)[:, None], 0.0)
    labels[:, 0] = np.arange(b) % 3 + 1.0  # a relevant item in every list
    if mixed:
        labels[0, 1], labels[1, 2] = -1.0, 4.0
    scores = rng.random((b, n))
    sums = DCGKernel(ks, chance=True).batch_sums(
        None, torch.as_tensor(scores, dtype=torch.float32), torch.as_tensor(labels, dtype=torch.float32)
    )
    want = [sum(ref.dcg(row, row, k) for row in labels.tolist()) for k in ks]
    np.testing.assert_allclose(np.asarray(sums["chance_best_sum"]), want, rtol=1e-6)
    assert len(seen) == 1 and (seen[0] is None) == mixed
