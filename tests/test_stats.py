"""Tests for rankstream.core.ranks.stats: closed forms, streaming forms, and the GMR error bound.

Reference values come from exhaustive enumeration (itertools.product over all rank vectors),
exact rational sums (fractions), math.fsum over all ranks, or mpmath at 40 digits; never from
the code under test.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankstream.core.ranks import stats as S

torch = pytest.importorskip("torch")

mp.mp.dps = 40


# ------------------------------------------------------------------------------------------
# independent references


def mp_power_sum_em(a: float, n: int, terms: int = 12) -> mp.mpf:
    """S_a(N) from Euler-Maclaurin with many terms, in 40-digit arithmetic (for large N)."""
    a = mp.mpf(a)
    nn = mp.mpf(n)
    s = mp.zeta(-a) + nn ** (a + 1) / (a + 1) + nn**a / 2
    falling = a
    for p in range(1, terms + 1):
        s += mp.bernoulli(2 * p) / mp.factorial(2 * p) * falling * nn ** (a - 2 * p + 1)
        falling *= (a - 2 * p + 1) * (a - 2 * p)
    return s


def mp_power_sum_direct(a: float, n: int) -> mp.mpf:
    a = mp.mpf(a)
    return mp.fsum(mp.power(j, a) for j in range(1, n + 1))


def mp_log_cumulants(n: int, order: int) -> list[mp.mpf]:
    """Cumulants of ln r, r ~ U{1..N}: centred moments summed exactly (small N) or the Taylor
    coefficients of ln(S_a(N)/N) with S from a 12-term Euler-Maclaurin form (large N)."""
    if n <= 1000:
        logs = [mp.log(j) for j in range(1, n + 1)]
        mean = mp.fsum(logs) / n
        mom = [mp.fsum((x - mean) ** m for x in logs) / n for m in range(order + 1)]
        kappa = [None, mean]
        for m in range(2, order + 1):
            k = mom[m]
            for j in range(2, m - 1):
                k -= mp.binomial(m - 1, j - 1) * kappa[j] * mom[m - j]
            kappa.append(k)
        return kappa[1:]
    coef = mp.taylor(lambda a: mp.log(mp_power_sum_em(a, n) / n), 0, order)
    return [coef[m] * mp.factorial(m) for m in range(1, order + 1)]


def enumerate_moments(ns, weights, value):
    """Exact E and Var of value(ranks) over all rank vectors (each equally likely)."""
    values = [value(r, weights) for r in itertools.product(*[range(1, n + 1) for n in ns])]
    if isinstance(values[0], Fraction):
        count = len(values)
        mean = sum(values, Fraction(0)) / count
        var = sum(((v - mean) ** 2 for v in values), Fraction(0)) / count
        return float(mean), float(var)
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return mean, var


def _w(weights, i):
    return Fraction(1) if weights is None else Fraction(weights[i])


def hits_value(k):
    def value(r, weights):
        tot = sum(_w(weights, i) for i in range(len(r)))
        return sum(_w(weights, i) * (1 if x <= k else 0) for i, x in enumerate(r)) / tot

    return value


def mrr_value(r, weights):
    tot = sum(_w(weights, i) for i in range(len(r)))
    return sum(_w(weights, i) * Fraction(1, x) for i, x in enumerate(r)) / tot


def mr_value(r, weights):
    tot = sum(_w(weights, i) for i in range(len(r)))
    return sum(_w(weights, i) * x for i, x in enumerate(r)) / tot


def gmr_value(r, weights):
    w = [1.0] * len(r) if weights is None else [float(x) for x in weights]
    return math.exp(math.fsum(wi * math.log(x) for wi, x in zip(w, r, strict=True)) / math.fsum(w))


ENUM_CASES = [
    ([1, 2, 3], None),
    ([4, 4, 5], None),
    ([2, 7, 1, 3], None),
    ([3, 5, 6], [1, 2, 0.5]),
    ([2, 3, 4, 2], [0.25, 3, 1, 1.5]),
    ([9, 31], [2, 1]),  # crosses the direct/Euler-Maclaurin switch at 30
    ([33], None),
]


# ------------------------------------------------------------------------------------------
# harmonic numbers


@pytest.mark.parametrize("xp", ["numpy", "torch"])
def test_harmonic_small_exact(xp):
    ns = np.arange(1, 121, dtype=np.float64)
    h = [float(sum(Fraction(1, j) for j in range(1, n + 1))) for n in range(1, 121)]
    h2 = [float(sum(Fraction(1, j * j) for j in range(1, n + 1))) for n in range(1, 121)]
    np.testing.assert_allclose(S.harmonic(ns), h, rtol=2e-15)
    np.testing.assert_allclose(S.harmonic2(ns), h2, rtol=2e-15)
    if xp == "numpy":
        got, got2 = S.harmonic_xp(ns, np), S.harmonic2_xp(ns, np)
    else:
        t = torch.tensor(ns, dtype=torch.float64)
        got, got2 = S.harmonic_xp(t, torch).numpy(), S.harmonic2_xp(t, torch).numpy()
    np.testing.assert_allclose(got, h, rtol=2e-15)
    np.testing.assert_allclose(got2, h2, rtol=2e-15)


@pytest.mark.parametrize("n", [10**5, 10**6, 10**7, 123_456_789, 10**9])
def test_harmonic_large(n):
    href = float(mp.harmonic(n))
    h2ref = float(mp.zeta(2) - mp.zeta(2, n + 1))
    if n <= 10**6:  # plain exact summation where cheap
        j = np.arange(1, n + 1, dtype=np.float64)
        assert math.fsum(1.0 / j) == pytest.approx(href, rel=1e-15)
        assert math.fsum(1.0 / (j * j)) == pytest.approx(h2ref, rel=1e-15)
    arr = np.array([float(n)])
    for got in (S.harmonic(arr)[0], S.harmonic_xp(arr, np)[0]):
        assert got == pytest.approx(href, rel=1e-15)
    for got in (S.harmonic2(arr)[0], S.harmonic2_xp(arr, np)[0]):
        assert got == pytest.approx(h2ref, rel=1e-15)


# ------------------------------------------------------------------------------------------
# zeta and power sums


@pytest.mark.parametrize("a", [0.0, 1e-12, 1e-6, 0.01, 0.3, 0.5, 1.0, 1.37, 1.9, 2.0])
def test_zeta_neg(a):
    ref = mp.zeta(-a)
    assert float(S.zeta_neg(np.float64(a))) == pytest.approx(float(ref), abs=2e-16)
    # zeta(-a) + 1/2 keeps relative accuracy as a -> 0
    if a > 0:
        assert float(S._zeta_neg_plus_half(np.float64(a))) == pytest.approx(float(ref + 0.5), rel=1e-15)


A_GRID = [1e-9, 1e-4, 0.01, 0.25, 0.5, 1.0, 4.0 / 3.0, 1.75, 2.0]


def test_power_sum_small_exact():
    ns = np.arange(1, 61)
    for a in A_GRID:
        ref = [math.fsum(float(j) ** a for j in range(1, n + 1)) for n in ns]
        np.testing.assert_allclose(S.power_sum(a, ns), ref, rtol=3e-15)
    # exact integers for a = 1, 2 (Euler-Maclaurin terminates)
    n = np.array([30, 31, 1000, 10**6], dtype=np.float64)
    np.testing.assert_allclose(S.power_sum(1.0, n), n * (n + 1) / 2, rtol=1e-15)
    np.testing.assert_allclose(S.power_sum(2.0, n), n * (n + 1) * (2 * n + 1) / 6, rtol=1e-15)


@pytest.mark.parametrize("n", [10**5, 10**6])
def test_log_mean_power_vs_fsum(n):
    j = np.arange(1, n + 1, dtype=np.float64)
    lj = np.log(j)
    for a in A_GRID:
        ref = math.log1p(math.fsum(np.expm1(a * lj)) / n)
        assert S.log_mean_power(a, n) == pytest.approx(ref, rel=3e-15)


@pytest.mark.parametrize("n", [10**7, 10**8, 987_654_321, 10**9])
def test_power_sum_large_vs_mpmath(n):
    for a in A_GRID:
        ref = mp_power_sum_em(a, n)
        assert S.power_sum(a, n) == pytest.approx(float(ref), rel=3e-15)
        assert S.log_mean_power(a, n) == pytest.approx(float(mp.log(ref / n)), rel=3e-15)


def test_power_sum_remainder_bound():
    # the 3-term Euler-Maclaurin form (MATH.md), in high precision, is within the bound
    for n in (30, 31, 45, 100):
        for a in (1e-3, 0.2, 0.5, 0.9, 1.5, 1.99):
            aa = mp.mpf(a)
            nn = mp.mpf(n)
            em3 = mp.zeta(-aa) + nn ** (aa + 1) / (aa + 1) + nn**aa / 2
            falling = aa
            for p in range(1, 4):
                em3 += mp.bernoulli(2 * p) / mp.factorial(2 * p) * falling * nn ** (aa - 2 * p + 1)
                falling *= (aa - 2 * p + 1) * (aa - 2 * p)
            err = abs(em3 - mp_power_sum_direct(a, n))
            bound = float(S.power_sum_remainder_bound(a, n))
            assert 0 < float(err) <= bound
    assert S.power_sum_remainder_bound(0.5, 29) == 0.0  # summed directly
    assert S.power_sum_remainder_bound(1.0, 50) == 0.0  # exact
    assert S.power_sum_remainder_bound(2.0, 50) == 0.0


# ------------------------------------------------------------------------------------------
# cumulants of ln r


@pytest.mark.parametrize("n", [1, 2, 3, 10, 29, 30, 31, 45, 100, 1000, 10**6, 10**9])
def test_log_rank_cumulants(n):
    order = 12
    ref = mp_log_cumulants(n, order)
    arr = np.array([float(n)])
    got_np = [float(x[0]) for x in S.log_rank_cumulants(arr, order, np)]
    got_t = [float(x[0]) for x in S.log_rank_cumulants(torch.tensor(arr), order, torch)]
    for m, (r, g, gt) in enumerate(zip(ref, got_np, got_t, strict=True), start=1):
        # accurate relative to the natural scale (m-1)! of the m-th cumulant
        scale = max(abs(float(r)), math.factorial(m - 1))
        assert abs(g - float(r)) <= 2e-14 * scale, (n, m, g, float(r))
        assert abs(gt - g) <= 2e-14 * scale


def test_log_rank_cumulants_limit():
    # N -> inf: cumulants of ln(r/N) tend to those of ln U, (-1)^m (m-1)!
    # with corrections of order (ln N)^m / N
    n = 1e9
    kappa = S.log_rank_cumulants(np.array([n]), 8, np)
    assert abs(float(kappa[0][0]) - (math.log(n) - 1)) <= math.log(n) / n
    for m in range(2, 9):
        lim = (-1) ** m * math.factorial(m - 1)
        assert abs(float(kappa[m - 1][0]) - lim) <= math.log(n) ** m / n


def test_cumulant_majorant():
    """|kappa_m(N)| <= B m! 2^m, the estimate behind the GMR error bound."""
    b = S.GMR_CUMULANT_BOUND
    # recompute B from the two estimates of the proof
    t = 0.5 * math.log(99) / 2
    b_strip = t - math.log(math.cos(t)) + math.pi / 2
    delta = 1.5 * 100**-0.5 * (0.5 * float(mp.zeta(1.5)) / 2 + 1 + 2)
    b_riemann = math.log(2) - math.log(1 - delta)
    assert b >= max(b_strip, b_riemann)
    assert b < 3.7
    n = np.unique(np.concatenate([np.arange(1, 2001), np.geomspace(2000, 1e9, 300).round()]))
    kappa = S.log_rank_cumulants(n, S.MAX_GMR_ORDER, np)
    for m in range(2, S.MAX_GMR_ORDER + 1):
        assert np.all(np.abs(kappa[m - 1]) <= b * math.factorial(m) * 2.0**m)
    # N = 1 has no spread at all
    assert all(float(k[0]) == 0.0 for k in kappa)


# ------------------------------------------------------------------------------------------
# moments against exhaustive enumeration


@pytest.mark.parametrize(("ns", "weights"), ENUM_CASES)
def test_linear_moments_enumeration(ns, weights):
    for k in (1, 2, 3, 10):
        e, v = enumerate_moments(ns, weights, hits_value(k))
        assert S.hits_expectation(ns, k=k, weights=weights) == pytest.approx(e, rel=1e-14)
        assert S.hits_variance(ns, k=k, weights=weights) == pytest.approx(v, rel=1e-14, abs=1e-300)
    e, v = enumerate_moments(ns, weights, mrr_value)
    assert S.mrr_expectation(ns, weights) == pytest.approx(e, rel=1e-14)
    assert S.mrr_variance(ns, weights) == pytest.approx(v, rel=1e-13)
    e, v = enumerate_moments(ns, weights, mr_value)
    assert S.mean_rank_expectation(ns, weights) == pytest.approx(e, rel=1e-14)
    assert S.mean_rank_variance(ns, weights) == pytest.approx(v, rel=1e-14)


@pytest.mark.parametrize(("ns", "weights"), ENUM_CASES)
def test_gmr_moments_enumeration(ns, weights):
    e, v = enumerate_moments(ns, weights, gmr_value)
    assert S.gmr_expectation(ns, weights) == pytest.approx(e, rel=1e-13)
    assert S.gmr_variance(ns, weights) == pytest.approx(v, rel=1e-11)


def test_gmr_single_task_is_the_rank():
    # one task: GMR = r, so E = (N+1)/2 and Var = (N^2-1)/12 exactly; E = exp(ln E) carries
    # the conditioning of exp, about |ln E| ulps
    for n in (1, 2, 29, 30, 1000, 10**6, 10**9):
        assert S.gmr_expectation([n]) == pytest.approx((n + 1) / 2, rel=5e-15)
        assert S.gmr_variance([n], [3.5]) == pytest.approx((n * n - 1) / 12, rel=1e-14, abs=0)


@pytest.mark.parametrize(("n", "m"), [(10**5, 10**5), (10**6, 2000), (777, 20_000)])
def test_gmr_many_equal_tasks_vs_fsum(n, m):
    """m tasks with N candidates: ln E = m ln E[r^(1/m)], Var via a two-pass exact sum."""
    a = 1.0 / m
    lj = np.log(np.arange(1, n + 1, dtype=np.float64))
    x = np.expm1(a * lj)
    t = math.fsum(x) / n  # E[r^a] - 1
    dev = x - t
    ratio = math.fsum(dev * dev) / n / (1 + t) ** 2  # Var[r^a] / E[r^a]^2
    log_e = m * math.log1p(t)
    e_ref = math.exp(log_e)
    var_ref = math.exp(2 * log_e) * math.expm1(m * math.log1p(ratio))
    ns = np.full(m, n)
    assert S.gmr_expectation(ns) == pytest.approx(e_ref, rel=1e-13)
    assert S.gmr_variance(ns) == pytest.approx(var_ref, rel=1e-11)
    # weights are scaling factors: scaling all of them changes nothing
    assert S.gmr_variance(ns, np.full(m, 7.0)) == pytest.approx(var_ref, rel=1e-11)


def test_gmr_two_tasks_large_n_vs_mpmath():
    n1, n2, w1, w2 = 10**9, 54321, 1.0, 3.0
    a1, a2 = w1 / (w1 + w2), w2 / (w1 + w2)
    l1 = mp.log(mp_power_sum_em(a1, n1) / n1) + mp.log(mp_power_sum_em(a2, n2) / n2)
    l2 = mp.log(mp_power_sum_em(2 * a1, n1) / n1) + mp.log(mp_power_sum_em(2 * a2, n2) / n2)
    e_ref = mp.exp(l1)
    var_ref = mp.exp(l2) - e_ref**2
    assert S.gmr_expectation([n1, n2], [w1, w2]) == pytest.approx(float(e_ref), rel=1e-14)
    assert S.gmr_variance([n1, n2], [w1, w2]) == pytest.approx(float(var_ref), rel=1e-13)


@pytest.mark.parametrize("n", [2, 29, 31, 1000, 10**6, 10**9])
def test_log_variance_ratio_vs_mpmath(n):
    """ln E[r^2a] - 2 ln E[r^a], on both sides of the series/direct switch at a = 0.02."""
    for a in (1e-7, 1e-4, 0.005, 0.0199, 0.0201, 0.3, 1.0):

        def s(x):
            return mp_power_sum_direct(x, n) if n <= 1000 else mp_power_sum_em(x, n)

        ref = float(mp.log(s(2 * a) * n / s(a) ** 2))
        e, v = S.power_rank_moments([n], a)
        got = math.log1p(v[0] / e[0] ** 2)
        assert got == pytest.approx(ref, rel=1e-12), (n, a)


def test_power_rank_moments():
    for n in (1, 5, 40):
        for a in (0.1, 0.5, 1.0):
            vals = [float(j) ** a for j in range(1, n + 1)]
            mean = math.fsum(vals) / n
            var = math.fsum((v - mean) ** 2 for v in vals) / n
            e, v = S.power_rank_moments([n], a)
            assert e[0] == pytest.approx(mean, rel=1e-14)
            assert v[0] == pytest.approx(var, rel=1e-12, abs=1e-300)


# ------------------------------------------------------------------------------------------
# streaming forms


def _random_tasks(rng, m, nmax=1e9, weighted=True):
    n = np.floor(np.exp(rng.uniform(0, math.log(nmax), m)))
    n[: min(m, 40)] = np.arange(1, min(m, 40) + 1)  # every small N, across the switch at 30
    w = rng.uniform(0.1, 4.0, m) if weighted else None
    return n, w


def _summed(terms):
    return {k: np.asarray(v, dtype=np.float64).sum() for k, v in terms.items()}


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_linear_streams_match_closed_forms(weighted, backend):
    rng = np.random.default_rng(11)
    n, w = _random_tasks(rng, 3000, weighted=weighted)
    if backend == "numpy":
        xp, nn, ww = np, n, w
    else:
        xp, nn = torch, torch.tensor(n, dtype=torch.float64)
        ww = None if w is None else torch.tensor(w, dtype=torch.float64)

    def as_np(d):
        return {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in d.items()}

    cases = [
        (S.mrr_stream_terms(nn, ww, xp), S.mrr_expectation(n, w), S.mrr_variance(n, w)),
        (
            S.mean_rank_stream_terms(nn, ww, xp),
            S.mean_rank_expectation(n, w),
            S.mean_rank_variance(n, w),
        ),
        (
            S.hits_stream_terms(nn, ww, xp, k=3),
            S.hits_expectation(n, 3, w),
            S.hits_variance(n, 3, w),
        ),
    ]
    for terms, e, v in cases:
        terms = as_np(terms)
        assert all(t.shape == n.shape for t in terms.values())
        got_e, got_v = S.moments_from_sums(_summed(terms))
        assert got_e == pytest.approx(e, rel=1e-13)
        assert got_v == pytest.approx(v, rel=1e-13)


def test_hits_terms_with_k_vector():
    n = np.array([1.0, 5.0, 50.0])[:, None]
    ks = np.array([1, 3, 10])
    mean, var = S.hits_terms(n, ks, np)
    expected = np.minimum(ks, n) / n
    np.testing.assert_array_equal(mean, expected)
    np.testing.assert_array_equal(var, expected * (1 - expected))


def test_streams_with_keras_ops():
    """On whichever Keras backend this process has: float64 terms where the backend keeps
    float64 (torch, TensorFlow; Keras on torch computes ``maximum`` in float32, so the terms
    must not use it); on JAX without x64, float32 terms with the GMR series of a float32 state
    (``FLOAT32_GMR_ORDER`` terms, whose higher cumulants lose digits to cancellation in float32)."""
    keras = pytest.importorskip("keras")
    ops = keras.ops
    n = np.array([1.0, 2, 7, 29, 30, 31, 999, 1e6, 1e9])
    w = np.linspace(0.5, 2.0, n.size)
    n_t, w_t = ops.convert_to_tensor(n), ops.convert_to_tensor(w)
    dtype = keras.backend.standardize_dtype(n_t.dtype)
    x64 = dtype == "float64"
    order = S.DEFAULT_GMR_ORDER if x64 else S.FLOAT32_GMR_ORDER
    fns = (S.mrr_stream_terms, S.mean_rank_stream_terms, functools.partial(S.gmr_stream_terms, order=order))
    for fn in fns:
        got = fn(n_t, w_t, ops)
        ref = fn(n, w, np)
        for key in ref:
            assert keras.backend.standardize_dtype(got[key].dtype) == dtype
            np.testing.assert_allclose(
                np.asarray(got[key]),
                ref[key],
                rtol=1e-14 if x64 else (1e-3 if fn is fns[-1] else 1e-6),
                atol=0,
            )


def test_streaming_is_batch_invariant():
    rng = np.random.default_rng(3)
    n, w = _random_tasks(rng, 1000)
    whole = _summed(S.gmr_stream_terms(n, w, np))
    parts = [S.gmr_stream_terms(n[i : i + 77], w[i : i + 77], np) for i in range(0, n.size, 77)]
    merged = {k: math.fsum(float(np.sum(p[k])) for p in parts) for k in whole}
    a, b = S.gmr_moments_from_sums(whole), S.gmr_moments_from_sums(merged)
    np.testing.assert_allclose(a[:2], b[:2], rtol=1e-13)


# ------------------------------------------------------------------------------------------
# GMR streaming: accuracy and an honest error bound

FP_SLACK = 1e-12  # floating-point rounding, which the bound does not cover


def _stream_vs_exact(n, w, order):
    e_ref, v_ref = S.gmr_expectation(n, w), S.gmr_variance(n, w)
    e, v, bound = S.gmr_moments_from_sums(_summed(S.gmr_stream_terms(n, w, np, order=order)))
    err_e = abs(e / e_ref - 1)
    err_v = abs(v / v_ref - 1) if v_ref > 0 else abs(v)
    return max(err_e, err_v), bound


@pytest.mark.parametrize("m", [300, 1000, 20_000])
@pytest.mark.parametrize("weighted", [False, True])
def test_gmr_stream_many_tasks(m, weighted):
    rng = np.random.default_rng(m)
    n, w = _random_tasks(rng, m, weighted=weighted)
    err, bound = _stream_vs_exact(n, w, S.DEFAULT_GMR_ORDER)
    assert bound < 1e-13  # the bound certifies full accuracy with a few hundred tasks
    assert err <= bound + FP_SLACK


def test_gmr_stream_degrades_with_few_tasks():
    rng = np.random.default_rng(5)
    # a handful of large tasks: the truncated series is visibly off, the bound says so
    n = np.array([10**6, 10**7, 10**8, 10**9], dtype=np.float64)
    err, bound = _stream_vs_exact(n, None, 4)
    assert err > 1e-4
    assert err <= bound
    # one task holding most of the weight: no convergence guarantee at all
    n, w = _random_tasks(rng, 50)
    n[-1], w[-1] = 1000.0, 10 * w.sum()
    err, bound = _stream_vs_exact(n, w, S.DEFAULT_GMR_ORDER)
    assert math.isinf(bound)
    # the bound shrinks as tasks are added
    bounds = []
    for m in (10, 30, 100, 300, 1000):
        n, w = _random_tasks(np.random.default_rng(m), m, nmax=1e6)
        err, bound = _stream_vs_exact(n, w, 8)
        assert err <= bound + FP_SLACK
        bounds.append(bound)
    assert all(b1 > b2 for b1, b2 in itertools.pairwise(bounds))
    assert bounds[0] > 1e-3 and bounds[-1] < 1e-12


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 60),
    order=st.integers(2, 14),
    log_nmax=st.floats(0.0, math.log(1e9)),
    weighted=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_gmr_stream_bound_is_honest(m, order, log_nmax, weighted, seed):
    rng = np.random.default_rng(seed)
    n = np.floor(np.exp(rng.uniform(0, log_nmax, m)))
    w = rng.uniform(0.1, 4.0, m) if weighted else None
    err, bound = _stream_vs_exact(n, w, order)
    assert err <= bound + FP_SLACK


def test_gmr_stream_all_single_candidate():
    n = np.ones(5)
    e, v, bound = S.gmr_moments_from_sums(_summed(S.gmr_stream_terms(n, None, np)))
    assert (e, v, bound) == (1.0, 0.0, 0.0)


def test_gmr_stream_torch_matches_numpy():
    rng = np.random.default_rng(8)
    n, w = _random_tasks(rng, 500)
    a = S.gmr_stream_terms(n, w, np)
    b = S.gmr_stream_terms(torch.tensor(n), torch.tensor(w), torch)
    assert set(a) == {
        "weight",
        "tail",
        *(f"cumulant_{m}" for m in range(1, S.DEFAULT_GMR_ORDER + 1)),
    }
    for key in a:
        assert b[key].dtype == torch.float64
        np.testing.assert_allclose(b[key].numpy(), a[key], rtol=1e-12, atol=1e-13 * np.abs(a[key]).max())


# ------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ([3, 0, 2], "num_candidates"),
        ([3, 2.5], "num_candidates"),
        ([3, float("nan")], "num_candidates"),
        ([], "num_candidates"),
        (["a", "b"], "num_candidates"),
    ],
)
def test_bad_num_candidates(bad, needle):
    with pytest.raises(ValueError, match=needle):
        S.mrr_expectation(bad)


def test_bad_weights_and_shapes():
    with pytest.raises(ValueError, match=r"weights must be positive; got weights\[1\]=0.0"):
        S.gmr_expectation([3, 4], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"weights must be positive; got weights\[0\]=-1.0"):
        S.hits_variance([3, 4], 2, [-1.0, 2.0])
    with pytest.raises(ValueError, match=r"weights must have the same shape .*\(2,\).*shape \(3,\)"):
        S.mrr_variance([3, 4], [1.0, 2.0, 3.0])


def test_bad_ranks():
    with pytest.raises(ValueError, match=r"ranks must lie in \[1, num_candidates\]; got ranks\[1\]=5.0"):
        S.check_ranks([1, 5], [3, 4])
    with pytest.raises(ValueError, match=r"ranks must be >= 1; got ranks\[0\]=0.0"):
        S.check_ranks([0, 1])
    with pytest.raises(ValueError, match=r"num_candidates must have the same shape as ranks"):
        S.check_ranks([1, 1], [3, 4, 5])


def test_bad_other_arguments():
    with pytest.raises(ValueError, match=r"a must lie in \[0, 2.0\]; got a=2.5"):
        S.power_sum(2.5, 10)
    with pytest.raises(ValueError, match="k must be a number >= 1, got 0"):
        S.hits_expectation([3], k=0)
    with pytest.raises(ValueError, match="order must be an int"):
        S.gmr_stream_terms(np.array([3.0]), None, np, order=0)
    with pytest.raises(ValueError, match="sums must contain 'weight', 'tail'"):
        S.gmr_moments_from_sums({"weight": 1.0})
    with pytest.raises(ValueError, match="non-contiguous"):
        S.gmr_moments_from_sums({"weight": 1.0, "tail": 0.0, "cumulant_1": 0.0, "cumulant_3": 0.0})
    with pytest.raises(ValueError, match=r"sums\['weight'\] must be positive"):
        S.moments_from_sums({"weight": 0.0, "mean": 0.0, "var": 0.0})
