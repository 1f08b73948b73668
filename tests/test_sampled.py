"""Sampled evaluation, corrected (rankstream.core.sampled): every formula against an exhaustive
enumeration of the m-subsets of negatives for small catalogs, scipy's hypergeometric law for
large ones, naive per-list references for the streamed state, and a simulation over a catalog of
100,000 items with exact full ranks counted from the scores."""

from __future__ import annotations

import importlib.util
import itertools
from math import comb
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rankstream.core import sampled as S
from rankstream.core.sampled_state import SampledRanks, report
from rankstream.core.state import NotComputableError

ROOT = Path(__file__).resolve().parent.parent
ESTIMATED = ("sampled", "bias_variance", "fitted")
SMALL = [(2, 1), (5, 1), (5, 4), (7, 3), (8, 2), (9, 5)]


def enumerated_probabilities(n: int, m: int) -> np.ndarray:
    """P(r | R) by listing every m-subset of the n - 1 other items (others 0..R-2 beat the positive)."""
    out = np.zeros((n, m + 1))
    for big_r in range(1, n + 1):
        for subset in itertools.combinations(range(n - 1), m):
            r = 1 + sum(1 for item in subset if item < big_r - 1)
            out[big_r - 1, r - 1] += 1
    return out / comb(n - 1, m)


def f_all(spec: S.MetricSpec, n: int) -> np.ndarray:
    """The metric at every full rank, written out one rank at a time."""
    vals = []
    for big_r in range(1, n + 1):
        inside = spec.k is None or big_r <= spec.k
        v = {"hit_rate": 1.0, "ndcg": 1.0 / np.log2(big_r + 1), "mrr": 1.0 / big_r, "ap": 1.0 / big_r}
        vals.append((v.get(spec.name, float(big_r))) if inside else 0.0)
    return np.array(vals)


@pytest.mark.parametrize(("n", "m"), SMALL)
def test_probabilities_equal_enumeration(n: int, m: int) -> None:
    np.testing.assert_allclose(S.sampled_rank_probabilities(n, m), enumerated_probabilities(n, m), atol=1e-14)


def test_probabilities_large_catalog_match_scipy() -> None:
    n, m = 100_000, 100
    ranks = np.array([1, 2, 57, 1000, 31_415, 99_999, 100_000])
    got = S.sampled_rank_probabilities(n, m, ranks)
    want = stats.hypergeom(n - 1, ranks[:, None] - 1, m).pmf(np.arange(m + 1)[None, :])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)


def _objective(c: np.ndarray, p: np.ndarray, f: np.ndarray, gamma: float) -> float:
    """sum_R [bias_R^2 + gamma Var_R] from the enumerated P(r | R), one R at a time."""
    total = 0.0
    for row, target in zip(p, f, strict=True):
        mean = float(row @ c)
        total += (mean - target) ** 2 + gamma * float(row @ (c - mean) ** 2)
    return total


@pytest.mark.parametrize(("n", "m"), [(5, 1), (7, 3), (9, 5), (12, 4)])
def test_corrections_minimise_their_objectives(n: int, m: int) -> None:
    specs = S.metric_specs((1, 3))
    d = S.design(n, m, specs)
    p = enumerated_probabilities(n, m)
    for gamma in (0.0, 0.1, 0.5, 1.0):
        c = S.bias_variance_values(d, gamma)
        for j, spec in enumerate(specs):
            f = f_all(spec, n)
            here = _objective(c[:, j], p, f, gamma)
            for i in range(m + 1):  # a convex quadratic: zero central differences, no lower neighbour
                e = np.zeros(m + 1)
                e[i] = 1e-4
                up, down = _objective(c[:, j] + e, p, f, gamma), _objective(c[:, j] - e, p, f, gamma)
                assert abs(up - down) / 2e-4 < 1e-7, (gamma, spec, i)
                assert up >= here - 1e-12 and down >= here - 1e-12


@pytest.mark.parametrize(("n", "m"), [(5, 1), (7, 3), (9, 5)])
def test_bias_and_variance_equal_enumeration(n: int, m: int) -> None:
    specs = S.metric_specs((2,))
    d = S.design(n, m, specs)
    truth = np.stack([f_all(s, n) for s in specs], axis=1)
    for c in (S.sampled_values(specs, m), S.minimal_bias_values(d), S.bias_variance_values(d, 0.3)):
        mean, var, bias = S.estimator_moments(n, m, c, truth)
        for big_r in range(1, n + 1):  # the estimator's value on every subset, averaged
            draws = np.array(
                [
                    c[sum(1 for item in subset if item < big_r - 1)]
                    for subset in itertools.combinations(range(n - 1), m)
                ]
            )
            np.testing.assert_allclose(mean[big_r - 1], draws.mean(axis=0), atol=1e-12)
            np.testing.assert_allclose(var[big_r - 1], draws.var(axis=0), atol=1e-10)
            np.testing.assert_allclose(bias[big_r - 1], draws.mean(axis=0) - truth[big_r - 1], atol=1e-12)


def test_exactly_checkable_cases() -> None:
    specs = S.metric_specs((1, 3))
    # every negative sampled (m = n - 1): r = R, and every estimator is the exact metric
    n = 6
    d = S.design(n, n - 1, specs)
    exact = np.stack([f_all(s, n) for s in specs], axis=1)
    np.testing.assert_allclose(S.minimal_bias_values(d), exact, atol=1e-10)
    np.testing.assert_allclose(S.bias_variance_values(d, 0.4), exact, atol=1e-10)  # no variance at all
    # the mean rank is affine in R, E[r | R] = 1 + m (R - 1) / (n - 1): the minimal-bias
    # estimator is exactly unbiased at every R, c_r = 1 + (r - 1)(n - 1) / m
    n, m = 40, 3
    d = S.design(n, m, specs)
    col = [s.key for s in specs].index("mean_rank")
    np.testing.assert_allclose(
        S.minimal_bias_values(d)[:, col], 1 + np.arange(m + 1) * (n - 1) / m, rtol=1e-9
    )
    # gamma = 1: the posterior mean of f(R) given r under a uniform prior on R
    p = enumerated_probabilities(n, m)
    truth = np.stack([f_all(s, n) for s in specs], axis=1)
    np.testing.assert_allclose(
        S.bias_variance_values(d, 1.0), (p.T @ truth) / p.sum(axis=0)[:, None], rtol=1e-9, atol=1e-14
    )


def test_blocked_design_equals_whole_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(S, "BLOCK_ROWS", 37)
    n, m = 300, 6
    specs = S.metric_specs((5,))
    d = S.design(n, m, specs)
    a = S.sampled_rank_probabilities(n, m)
    b = np.stack([f_all(s, n) for s in specs], axis=1)
    np.testing.assert_allclose(d.r11.T @ d.r11, a.T @ a, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(d.r11.T @ d.r12, a.T @ b, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(d.mass, a.sum(axis=0), rtol=1e-12)


def beta_binomial(k: int, total: int, a: float, b: float) -> float:
    """C(total, k) B(k + a, total - k + b) / B(a, b), from math's lgamma."""
    from math import exp, lgamma

    def log_beta(x: float, y: float) -> float:
        return lgamma(x) + lgamma(y) - lgamma(x + y)

    return comb(total, k) * exp(log_beta(k + a, total - k + b) - log_beta(a, b))


@pytest.mark.parametrize(("n", "m"), [(5, 1), (7, 3), (9, 5)])
def test_beta_binomial_full_ranks_thin_to_beta_binomial_sampled_ranks(n: int, m: int) -> None:
    p = enumerated_probabilities(n, m)
    for a, b in ((0.3, 2.0), (1.0, 1.0), (4.5, 0.7)):
        full = np.array([beta_binomial(k, n - 1, a, b) for k in range(n)])
        sampled = np.array([beta_binomial(j, m, a, b) for j in range(m + 1)])
        np.testing.assert_allclose(full @ p, sampled, atol=1e-13)
        fit = S.RankFit(a, b, a / (a + b))
        np.testing.assert_allclose(S.full_rank_probabilities(n, fit), full, rtol=1e-10)
        specs = S.metric_specs((2,))
        want = [sum(full[k] * f_all(spec, n)[k] for k in range(n)) for spec in specs]
        np.testing.assert_allclose(S.fitted_values(n, specs, fit), want, rtol=1e-10)


def test_beta_binomial_fit_recovers_its_parameters() -> None:
    m = 20
    for a, b in ((0.3, 2.0), (0.8, 15.0), (2.0, 0.5)):
        h = 10_000.0 * np.array([beta_binomial(j, m, a, b) for j in range(m + 1)])
        got = S.fit_beta_binomial(h)
        np.testing.assert_allclose((got.a, got.b), (a, b), rtol=2e-3)
    # no more dispersed than a binomial: the binomial limit, p the mean relative sampled rank
    h = 10_000.0 * stats.binom.pmf(np.arange(m + 1), m, 0.3)
    got = S.fit_beta_binomial(h)
    assert np.isinf(got.a) and got.p == pytest.approx(0.3, rel=1e-12)
    n = 50
    want = [
        sum(stats.binom.pmf(k, n - 1, got.p) * f_all(spec, n)[k] for k in range(n))
        for spec in S.metric_specs((3,))
    ]
    np.testing.assert_allclose(S.fitted_values(n, S.metric_specs((3,)), got), want, rtol=1e-10)
    # a histogram piled on rank 1: every full rank at the top
    got = S.fit_beta_binomial(np.r_[50.0, np.zeros(m)])
    assert got.p == 0 and S.fitted_values(1000, [S.MetricSpec("hit_rate", 1)], got)[0] == pytest.approx(1.0)


def test_histogram_mean_equals_per_list_reference() -> None:
    rng = np.random.default_rng(1)
    m = 7
    ranks = rng.integers(1, m + 2, size=53)
    c = rng.normal(size=(m + 1, 2))
    h = np.bincount(ranks, minlength=m + 2)[1:]
    got = S.histogram_mean(h, c, 0.9)
    per_list = c[ranks - 1]
    mean = per_list.mean(axis=0)
    se = per_list.std(axis=0, ddof=1) / np.sqrt(len(ranks))
    half = stats.t.ppf(0.95, len(ranks) - 1) * se
    np.testing.assert_allclose(got["value"], mean, rtol=1e-12)
    np.testing.assert_allclose(got["stderr"], se, rtol=1e-10)
    np.testing.assert_allclose(got["ci_low"], mean - half, rtol=1e-10)
    np.testing.assert_allclose(got["ci_high"], mean + half, rtol=1e-10)


def naive_histogram(pos: np.ndarray, neg: np.ndarray, ties: str) -> np.ndarray:
    """Each row's rank over every order of its tied negatives, one row at a time."""
    m = neg.shape[1]
    h = np.zeros(m + 1)
    for s, row in zip(pos, neg, strict=True):
        above, tied = int(sum(x > s for x in row)), int(sum(x == s for x in row))
        if ties == "optimistic":
            h[above] += 1
        elif ties == "pessimistic":
            h[above + tied] += 1
        else:
            for place in range(tied + 1):  # the positive among its tied items: each place alike
                h[above + place] += 1 / (tied + 1)
    return h


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.lists(st.integers(0, 3), min_size=7, max_size=7), min_size=0, max_size=8),
    st.sampled_from(["realistic", "optimistic", "pessimistic"]),
)
def test_tied_scores_and_batch_invariance(m: int, rows: list[list[int]], ties: str) -> None:
    arr = np.array(rows, dtype=np.float64).reshape(-1, 7)[:, : m + 1]
    pos, neg = arr[:, 0], arr[:, 1:]
    whole = SampledRanks(20, m, ks=(1, 2), ties=ties).update(pos, neg)
    np.testing.assert_allclose(whole.histogram, naive_histogram(pos, neg, ties), atol=1e-12)
    split = SampledRanks(20, m, ks=(1, 2), ties=ties)
    other = SampledRanks(20, m, ks=(1, 2), ties=ties)
    half = len(pos) // 2
    split.update(pos[:half], neg[:half])
    other.update(pos[half:], neg[half:])
    np.testing.assert_allclose(split.merge(other).histogram, whole.histogram, atol=1e-12)
    if whole.histogram.sum() > 0:
        a, b = whole.compute(), split.compute()
        assert a.keys() == b.keys()
        np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=1e-9, atol=1e-12)


def test_weighted_lists_equal_per_list_references() -> None:
    """Weighted lists (sample weights): the ``sampled`` estimator's value, standard error and t
    interval against the weighted mean and the ratio estimator's variance written per list;
    integer weights give the value of the replicated lists; weight 0 is a list left out (every
    key, the fitted estimate included)."""
    rng = np.random.default_rng(3)
    m, n = 6, 60
    ranks = rng.integers(1, m + 2, size=41)
    w = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], size=41)
    got = SampledRanks(n, m, ks=(2,), confidence=0.9).update(ranks, weights=w).compute()
    ndcg = np.where(ranks <= 2, 1 / np.log2(ranks + 1), 0.0)
    mean = np.sum(w * ndcg) / w.sum()
    k = np.count_nonzero(w)
    se = np.sqrt(k / (k - 1) * np.sum(w**2 * (ndcg - mean) ** 2)) / w.sum()
    half = stats.t.ppf(0.95, k - 1) * se
    assert got["ndcg@2_sampled"] == pytest.approx(mean, rel=1e-12)
    assert got["ndcg@2_sampled_stderr"] == pytest.approx(se, rel=1e-10)
    assert got["ndcg@2_sampled_ci_low"] == pytest.approx(mean - half, rel=1e-10)
    assert got["count"] == pytest.approx(w.sum())
    integer = np.where(w == 0.5, 1.0, w)
    replicated = SampledRanks(n, m, ks=(2,)).update(np.repeat(ranks, integer.astype(int))).compute()
    weighted = SampledRanks(n, m, ks=(2,)).update(ranks, weights=integer).compute()
    for key in ("ndcg@2_sampled", "mrr_bias_variance", "hit_rate@2_minimal_bias", "mrr_fitted"):
        assert weighted[key] == pytest.approx(replicated[key], rel=1e-7, abs=1e-9), key
    kept = SampledRanks(n, m, ks=(2,), confidence=0.9).update(ranks[w > 0], weights=w[w > 0]).compute()
    assert got.keys() == kept.keys()
    np.testing.assert_allclose([got[key] for key in got], [kept[key] for key in got], rtol=1e-9, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 2), min_size=4, max_size=4), st.sampled_from([0.0, 0.25, 1.0, 2.0])
        ),
        max_size=8,
    ),
    st.sampled_from(["realistic", "optimistic", "pessimistic"]),
)
def test_weighted_tied_scores_merge(rows: list, ties: str) -> None:
    """Tie-heavy weighted lists: the weighted histogram is the naive per-row one times the
    weights (and its squares times the squared weights); any split merged is the whole."""
    arr = np.array([r for r, _ in rows], dtype=np.float64).reshape(-1, 4)
    w = np.array([x for _, x in rows], dtype=np.float64)
    pos, neg = arr[:, 0], arr[:, 1:]
    whole = SampledRanks(12, 3, ks=(1,), ties=ties, confidence=0.9).update(pos, neg, weights=w)
    want = sum(
        (x * naive_histogram(p[None], q[None], ties) for p, q, x in zip(pos, neg, w, strict=True)),
        np.zeros(4),
    )
    want2 = sum(
        (x * x * naive_histogram(p[None], q[None], ties) for p, q, x in zip(pos, neg, w, strict=True)),
        np.zeros(4),
    )
    np.testing.assert_allclose(whole.histogram, want, atol=1e-12)
    np.testing.assert_allclose(whole.squares, want2, atol=1e-12)
    assert whole.lists == np.count_nonzero(w)
    half = len(w) // 2
    split = SampledRanks(12, 3, ks=(1,), ties=ties, confidence=0.9).update(
        pos[:half], neg[:half], weights=w[:half]
    )
    split.merge(SampledRanks(12, 3, ks=(1,), ties=ties).update(pos[half:], neg[half:], weights=w[half:]))
    np.testing.assert_allclose(split.histogram, whole.histogram, atol=1e-12)
    assert split.lists == whole.lists
    if whole.histogram.sum() > 0:
        a, b = whole.compute(), split.compute()
        np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=1e-9, atol=1e-12)


def test_bad_input_errors_leave_state() -> None:
    s = SampledRanks(30, 4, ks=3)
    s.update(np.array([1, 2, 5]))
    before = s.histogram.copy()
    bad_ranks = ([0, 1], [6], [1.5], [np.nan], [[1, 2]], ["a"])
    for bad in bad_ranks:
        with pytest.raises((ValueError, TypeError), match="ranks"):
            s.update(np.array(bad) if bad != ["a"] else bad)
    with pytest.raises(ValueError, match="neg_scores"):
        s.update(np.zeros(3), np.zeros((3, 5)))
    with pytest.raises(ValueError, match="NaN"):
        s.update(np.zeros(2), np.array([[0, 1, 2, np.nan], [0, 0, 0, 0]]))
    for weights, match in (([1.0, -1.0, 1.0], ">= 0"), ([np.nan, 1, 1], "finite"), ([1.0, 1.0], "shape")):
        with pytest.raises(ValueError, match=f"weights.*{match}"):
            s.update(np.array([1, 2, 3]), weights=np.array(weights))
    np.testing.assert_array_equal(s.histogram, before)
    assert s.lists == 3 and np.array_equal(s.squares, before)
    s.update(np.array([], dtype=int))  # empty batch: a no-op
    s.update(np.zeros(0), np.zeros((0, 4)))
    np.testing.assert_array_equal(s.histogram, before)
    for kwargs, name in (
        ({"num_items": 5, "num_negatives": 5}, "num_negatives"),
        ({"num_items": 0, "num_negatives": 1}, "num_items"),
        ({"num_items": 9, "num_negatives": 2, "gamma": 1.5}, "gamma"),
        ({"num_items": 9, "num_negatives": 2, "ties": "random"}, "ties"),
        ({"num_items": 9, "num_negatives": 2, "ks": [0]}, "ks"),
        ({"num_items": 9, "num_negatives": 2, "confidence": 95}, "confidence"),
    ):
        with pytest.raises(ValueError, match=name):
            SampledRanks(**kwargs)
    with pytest.raises(ValueError, match="merge"):
        s.merge(SampledRanks(31, 4))
    with pytest.raises(NotComputableError):
        SampledRanks(30, 4).compute()


def test_report_keys_and_pykeen_function() -> None:
    from rankstream.pykeen import sampled_rank_metrics

    ranks = np.array([1, 1, 2, 4, 5, 3])
    out = sampled_rank_metrics(ranks, num_items=50, num_negatives=4, ks=(1, 3), confidence=0.95)
    assert out["count"] == 6
    # the sampled estimator is the metric of the sampled rank, as a per-list mean
    assert out["ndcg@3_sampled"] == pytest.approx(np.mean([(r <= 3) / np.log2(r + 1) for r in ranks]))
    assert out["mean_rank_sampled"] == pytest.approx(ranks.mean())
    assert out["ap_fitted"] == pytest.approx(out["mrr_fitted"])
    for metric in ("hit_rate@1", "ndcg@3", "mrr@3", "mrr", "ap", "mean_rank"):
        for est in S.ESTIMATORS:
            assert f"{metric}_{est}" in out
        assert f"{metric}_bias_variance_ci_low" in out and f"{metric}_fitted_stderr" not in out


def test_ignite_compute_all_reduces_the_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes holding the same shard (idist's all_reduce doubling the tensor): the
    report is that of the doubled histogram, and the local state is left as it was."""
    import ignite.distributed as idist
    import torch

    from rankstream.ignite import SampledRankMetrics

    reduced = []

    def all_reduce(t: torch.Tensor, op: str = "SUM", **kw: object) -> torch.Tensor:
        reduced.append(op)
        return t * 2

    metric = SampledRankMetrics(30, 4, ks=(2,))
    metric.update(torch.tensor([1, 1, 3, 5]))
    monkeypatch.setattr(idist, "get_world_size", lambda: 2)
    monkeypatch.setattr(idist, "all_reduce", all_reduce)
    got = metric.compute()
    assert reduced == ["SUM"] and got["count"] == 8
    want = report(2 * np.array([2.0, 0, 1, 0, 1]), 30, (2,))
    assert got["mrr_fitted"] == pytest.approx(want["mrr_fitted"], rel=1e-9)
    np.testing.assert_array_equal(metric._hist.numpy()[:5], [2, 0, 1, 0, 1])


def test_ignite_engine_run() -> None:
    import torch
    from ignite.engine import Engine
    from ignite.exceptions import NotComputableError as IgniteNotComputable

    from rankstream.ignite import SampledRankMetrics

    rng = np.random.default_rng(5)
    m = 6
    pos, neg = rng.integers(0, 4, size=40).astype(float), rng.integers(0, 4, size=(40, m)).astype(float)
    batches = [(torch.as_tensor(pos[i : i + 16]), torch.as_tensor(neg[i : i + 16])) for i in range(0, 40, 16)]
    engine = Engine(lambda e, b: b)
    SampledRankMetrics(25, m, ks=(2,), confidence=0.9, ties="pessimistic").attach(engine, "sampled")
    got = engine.run(batches).metrics
    h = naive_histogram(pos, neg, "pessimistic")
    want = report(h, 25, (2,), confidence=0.9)
    for key in (
        "ndcg@2_sampled",
        "ndcg@2_bias_variance",
        "mrr_fitted",
        "hit_rate@2_minimal_bias_ci_high",
        "count",
    ):
        assert got[key] == pytest.approx(want[key], rel=1e-9)
    weights = rng.choice([0.0, 1.0, 2.5], size=40)
    weighted = SampledRankMetrics(25, m, confidence=0.9, ties="pessimistic")
    weighted.update((torch.as_tensor(pos[:20]), torch.as_tensor(neg[:20]), torch.as_tensor(weights[:20])))
    weighted.update({"pos_scores": pos[20:], "neg_scores": neg[20:], "weights": weights[20:]})
    core = SampledRanks(25, m, confidence=0.9, ties="pessimistic").update(pos, neg, weights=weights)
    assert weighted.compute()["mrr_sampled_ci_high"] == pytest.approx(core.compute()["mrr_sampled_ci_high"])
    with pytest.raises(ValueError, match="dict"):
        weighted.update({"ranks": [1], "pos_scores": [1.0]})
    metric = SampledRankMetrics(25, m, ties="pessimistic")
    metric.update((torch.as_tensor(pos), torch.as_tensor(neg)))
    restored = SampledRankMetrics(25, m)
    restored.load_state_dict(metric.state_dict())  # a checkpoint carries the histogram
    np.testing.assert_allclose(restored.compute()["mrr_fitted"], want["mrr_fitted"], rtol=1e-9)
    empty = SampledRankMetrics(25, m)
    with pytest.raises(IgniteNotComputable):
        empty.compute()
    with pytest.raises(ValueError, match="ranks"):
        empty.update(torch.tensor([0, 1]))


def load_example():
    """examples/sampled_correction.py as a module (the simulation on the whole-catalog path)."""
    spec = importlib.util.spec_from_file_location(
        "sampled_correction", ROOT / "examples" / "sampled_correction.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def naive_metrics(queries: np.ndarray, rel: np.ndarray, items: np.ndarray) -> dict[str, float]:
    """HitRate@10, nDCG@10, MRR from the full score matrix, the relevant item's rank counted as
    the items scoring above it (no ties: continuous scores)."""
    ranks = []
    for lo in range(0, len(rel), 100):  # 100 users' rows of the score matrix at a time
        scores = queries[lo : lo + 100] @ items.T
        pos = scores[np.arange(scores.shape[0]), rel[lo : lo + 100]]
        ranks.append(1 + (scores > pos[:, None]).sum(axis=1))
    r = np.concatenate(ranks).astype(np.float64)
    return {
        "hit_rate@10": np.mean(r <= 10),
        "ndcg@10": np.mean((r <= 10) / np.log2(r + 1)),
        "mrr": np.mean(1 / r),
    }


def test_simulation_on_the_catalog_path_corrections_restore_the_ordering() -> None:
    """Two embedding models over a 100,000-item catalog (300 users each): the exact metric from
    rankstream.catalog (checked against the naive score matrix), the sampled metric at m = 100
    inverting their order, and the corrections."""
    ex = load_example()
    items = ex.catalog(0)
    models = {"sharp_top": (1.0, 1.5), "good_middle": (2.0, 0.5)}
    got = {}
    for seed, (name, (mu, sigma)) in enumerate(models.items()):
        exact, state = ex.simulate(items, mu, sigma, 300, seed + 1)
        got[name] = (exact, state.compute())
        queries, rel = ex.users(items, mu, sigma, 300, seed + 1)
        naive = naive_metrics(queries, rel, items)
        for key in naive:
            # float32 dot products summed in another order can swap a near-tie: a rank off by one
            assert exact[key] == pytest.approx(naive[key], rel=1e-4, abs=1e-9), (name, key)
    for key in ("hit_rate@10", "ndcg@10"):
        exact = {name: e[key] for name, (e, _) in got.items()}
        est = {name: {e: r[f"{key}_{e}"] for e in ESTIMATED} for name, (_, r) in got.items()}
        # the inversion: the exact metric prefers the model with the better top ranks ...
        assert exact["sharp_top"] > exact["good_middle"]
        assert est["sharp_top"]["sampled"] < est["good_middle"]["sampled"]
        # ... the fitted distribution of full ranks restores it
        assert est["sharp_top"]["fitted"] > est["good_middle"]["fitted"]
        for name in models:
            off = {e: abs(est[name][e] - exact[name]) for e in ESTIMATED}
            assert off["bias_variance"] < off["sampled"] and off["fitted"] < off["sampled"], (name, key, off)
