"""Sampled evaluation, corrected: the math, as functions of the histogram of sampled ranks.

Setting. A catalog of ``n`` items holds one relevant item (the positive) per list; its full rank
``R`` in ``1..n`` counts the ``n - 1`` others. The sampled protocol ranks the positive among ``m``
negatives drawn uniformly without replacement from those ``n - 1``; its sampled rank ``r`` in
``1..m+1`` is one plus the number of drawn negatives ranked above it. Given ``R``, ``R - 1`` of the
``n - 1`` others beat the positive, so ``r - 1`` is hypergeometric::

    P(r | R) = C(R - 1, r - 1) C(n - R, m - r + 1) / C(n - 1, m).

Metrics of one relevant item, as functions ``f(R)`` of the full rank (:func:`metric_values`):
HitRate@k = Recall@k ``[R <= k]``; nDCG@k ``[R <= k] / log2(R + 1)`` (the ideal DCG is 1); MRR
``1 / R`` (= AP with one relevant item) and MRR@k ``[R <= k] / R``; mean rank ``R``.

Estimators of the mean of ``f(R)`` over lists, each the mean over lists of a per-``r`` value
``c_r``, so each is ``sum_r h_r c_r / sum_r h_r`` for the histogram ``h`` of sampled ranks:

* ``sampled``: ``c_r = f(r)`` (the metric applied to the sampled rank, what papers report);
* ``minimal_bias`` (Krichene and Rendle, KDD 2020): ``c`` minimises the squared bias summed over
  every full rank, ``sum_R (sum_r P(r|R) c_r - f(R))^2``: the least squares problem
  ``min ||A c - b||`` with ``A[R, r] = P(r | R)`` (``n x (m + 1)``) and ``b = f(1..n)``;
* ``bias_variance`` (ibid.): ``c`` minimises ``sum_R [bias_R(c)^2 + gamma Var_R(c)]`` with
  ``Var_R(c) = sum_r P(r|R) c_r^2 - (sum_r P(r|R) c_r)^2``; setting the gradient to zero gives
  ``[(1 - gamma) A^T A + gamma diag(A^T 1)] c = A^T b``; ``gamma = 1`` is the posterior mean
  ``E[f(R) | r]`` under a uniform prior on ``R``, ``gamma = 0`` the minimal-bias solution;
* ``fitted`` (in the spirit of Jin et al., AAAI 2021: estimate the distribution of full ranks by
  maximum likelihood, report the metric's expectation under it), in a parametric form: the full
  rank is beta-binomial, ``R - 1 ~ BetaBinomial(n - 1, a, b)``. Hypergeometric thinning keeps the
  family, so then ``r - 1 ~ BetaBinomial(m, a, b)`` with the same ``(a, b)``: the likelihood of
  the histogram is exact in two parameters, fitted by L-BFGS and Newton steps, or its binomial
  limit where that is as likely (:func:`fit_beta_binomial`), and the estimate is
  ``sum_R f(R) BetaBinomial(R - 1; n - 1, a, b)`` (:func:`fitted_values`). A
  non-parametric grid of full ranks fitted by EM was tried and is not offered: its likelihood is
  flat in how the mass sits inside the top ``~n / m`` ranks, and its HitRate@10 swung from 0 to
  0.17 with the iteration count on one data set (``docs/sampled.md``).

Every ``R`` weighs the same in both objectives (the paper's sums over ``R = 1..n``): the
correction does not depend on the model being evaluated. The derivations and the enumerations
that check them are in ``docs/sampled.md``.

Cost. ``A`` is ``n x (m + 1)``; it is never held whole: one pass over blocks of
:data:`BLOCK_ROWS` full ranks (log-space, ``scipy.special.betaln``) accumulates the ``R`` factor
of the QR decomposition of ``[A | B]`` (``B`` one column per metric) and ``A^T 1``:
``O(n (m + F)^2)`` time and ``O((BLOCK_ROWS + m + F) (m + F))`` memory, ``F`` the number of
metric columns, cached per ``(n, m, metrics)`` (:func:`design`). For ``n = 100,000``, ``m = 100``
and the 12 columns of ``ks=(1, 5, 10)`` that is about 2 s of one core, once per process. The
beta-binomial fit is ``O(m)`` per likelihood evaluation and its estimate ``O(n)`` per metric.

Sizes and tolerances are the module constants below (this module is their one place).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: full ranks per block of ``P(r | R)`` in the design pass
BLOCK_ROWS = 4096
#: the beta-binomial fit searches ``ln a`` and ``ln b`` within these bounds
FIT_LOG_BOUNDS = (-14.0, 14.0)
#: Newton steps after the L-BFGS search (the estimate must not move with the histogram's rounding)
FIT_NEWTON_STEPS = 20
#: the bias-variance trade-off's default ``gamma``
DEFAULT_GAMMA = 0.1
#: singular values of ``A`` below this fraction of the largest are dropped by the minimal-bias
#: least squares (its minimum-norm solution: ``A`` is numerically rank deficient for large ``m``)
MINIMAL_BIAS_RCOND = 1e-10
#: the per-list metrics, by name (``k``: the cut-off, None for none)
METRICS = ("hit_rate", "ndcg", "mrr", "ap", "mean_rank")
#: the estimators, in the order they are reported
ESTIMATORS = ("sampled", "minimal_bias", "bias_variance", "fitted")


def check_sizes(num_items: Any, num_negatives: Any) -> tuple[int, int]:
    """``(n, m)`` as ints with ``1 <= m <= n - 1``; a ``ValueError`` naming the argument else."""
    for name, value in (("num_items", num_items), ("num_negatives", num_negatives)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if num_negatives > num_items - 1:
        raise ValueError(
            f"num_negatives must be at most num_items - 1 (the negatives are drawn from the other "
            f"items), got num_negatives={num_negatives!r} with num_items={num_items!r}"
        )
    return int(num_items), int(num_negatives)


def _log_binom(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``ln C(a, b)`` elementwise, ``-inf`` where ``b < 0`` or ``b > a``."""
    from scipy.special import betaln

    ok = (b >= 0) & (b <= a)
    a_ok, b_ok = np.where(ok, a, 1.0), np.where(ok, b, 0.0)
    return np.where(ok, -np.log1p(a_ok) - betaln(a_ok - b_ok + 1.0, b_ok + 1.0), -np.inf)


def log_sampled_rank_probabilities(num_items: int, num_negatives: int, full_ranks: Any) -> np.ndarray:
    """``ln P(r | R)`` for ``R`` in ``full_ranks`` (rows) and ``r = 1..m+1`` (columns), float64:
    ``ln C(R-1, r-1) + ln C(n-R, m-r+1) - ln C(n-1, m)`` (``-inf`` off the support), the last
    term taken as the row's log-sum-exp."""
    n, m = check_sizes(num_items, num_negatives)
    big_r = np.asarray(full_ranks, dtype=np.float64).reshape(-1, 1)
    if big_r.size and (big_r.min() < 1 or big_r.max() > n):
        raise ValueError(f"full_ranks must lie in 1..num_items={n}, got {big_r.min():g}..{big_r.max():g}")
    j = np.arange(m + 1, dtype=np.float64).reshape(1, -1)  # j = r - 1 sampled negatives above
    log_p = _log_binom(big_r - 1.0, j) + _log_binom(n - big_r, m - j)
    # the row's own log-sum, not ln C(n-1, m): the same in exact arithmetic (Vandermonde), and it
    # takes out the rounding common to the row (rows sum to 1 to ~1e-15, not ~1e-10, at n = 1e5)
    from scipy.special import logsumexp

    return log_p - logsumexp(log_p, axis=1, keepdims=True)


def sampled_rank_probabilities(num_items: int, num_negatives: int, full_ranks: Any = None) -> np.ndarray:
    """``P(r | R)``, rows ``R`` (``full_ranks``, default ``1..n``), columns ``r = 1..m+1``. The
    whole matrix: for small ``n`` (tests, docs); :func:`design` streams it in blocks."""
    if full_ranks is None:
        full_ranks = np.arange(1, int(num_items) + 1)
    return np.exp(log_sampled_rank_probabilities(num_items, num_negatives, full_ranks))


@dataclass(frozen=True)
class MetricSpec:
    """One metric of one relevant item: ``name`` in :data:`METRICS` and its cut-off ``k``."""

    name: str
    k: int | None = None

    @property
    def key(self) -> str:
        """``"ndcg@10"``, ``"mrr"``."""
        return self.name if self.k is None else f"{self.name}@{self.k}"


def metric_values(spec: MetricSpec, ranks: Any) -> np.ndarray:
    """``f(R)`` of one relevant item at rank ``R`` (float64): ``[R <= k]`` (hit_rate),
    ``[R <= k] / log2(R + 1)`` (ndcg), ``[R <= k] / R`` (mrr; ap is ``1 / R``), ``R`` (mean_rank);
    no cut-off where ``k`` is None."""
    r = np.asarray(ranks, dtype=np.float64)
    inside = np.ones_like(r) if spec.k is None else (r <= spec.k).astype(np.float64)
    if spec.name == "hit_rate":
        return inside
    if spec.name == "ndcg":
        return inside / np.log2(r + 1.0)
    if spec.name in ("mrr", "ap"):
        return inside / r
    if spec.name == "mean_rank":
        return r * inside
    raise ValueError(f"metric must be one of {METRICS}, got {spec.name!r}")


def metric_specs(ks: Sequence[int]) -> tuple[MetricSpec, ...]:
    """Every metric reported for the cut-offs ``ks``: hit_rate@k, ndcg@k, mrr@k per ``k``, then
    mrr, ap and mean_rank."""
    per_k = tuple(MetricSpec(name, int(k)) for k in ks for name in ("hit_rate", "ndcg", "mrr"))
    return (*per_k, MetricSpec("mrr"), MetricSpec("ap"), MetricSpec("mean_rank"))


@dataclass(frozen=True)
class Design:
    """What the corrections need of ``A = P(r | R)`` over ``R = 1..n`` for metric columns
    ``specs``: ``r11`` and ``r12`` (the ``R`` factor of ``[A | B]``'s QR: ``A^T A = r11^T r11``,
    ``A^T B = r11^T r12``) and ``mass = A^T 1`` (``(m + 1,)``)."""

    num_items: int
    num_negatives: int
    specs: tuple[MetricSpec, ...]
    r11: np.ndarray
    r12: np.ndarray
    mass: np.ndarray


def design(num_items: int, num_negatives: int, specs: tuple[MetricSpec, ...]) -> Design:
    """One pass over ``R = 1..n`` in blocks of :data:`BLOCK_ROWS` (a state computes it once, on
    its first report, and keeps it: :attr:`~rankstream.core.sampled_state.SampledRanks.design`): the
    QR ``R`` factor of ``[A | B]`` updated block by block (``qr([R_prev; block])``) and
    ``A^T 1``."""
    n, m = check_sizes(num_items, num_negatives)
    width = m + 1 + len(specs)
    factor = np.zeros((0, width))
    mass = np.zeros(m + 1)
    for start in range(1, n + 1, BLOCK_ROWS):
        ranks = np.arange(start, min(n, start + BLOCK_ROWS - 1) + 1)
        block = np.empty((ranks.size, width))
        block[:, : m + 1] = np.exp(log_sampled_rank_probabilities(n, m, ranks))
        for j, spec in enumerate(specs):
            block[:, m + 1 + j] = metric_values(spec, ranks)
        mass += block[:, : m + 1].sum(axis=0)
        factor = np.linalg.qr(np.vstack([factor, block]), mode="r")
    if factor.shape[0] < width:  # fewer rows than columns: pad the factor with zero rows
        factor = np.vstack([factor, np.zeros((width - factor.shape[0], width))])
    return Design(n, m, specs, factor[: m + 1, : m + 1], factor[: m + 1, m + 1 :], mass)


def check_gamma(gamma: Any) -> float:
    """``gamma`` as a float in ``[0, 1]`` (where the trade-off's objective is convex)."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


def minimal_bias_values(d: Design) -> np.ndarray:
    """``c`` of the minimal-bias estimator, ``(m + 1, F)``: the minimum-norm least squares
    solution of ``r11 c = r12`` (that of ``min ||A c - b||``), singular values below
    :data:`MINIMAL_BIAS_RCOND` times the largest dropped."""
    u, s, vt = np.linalg.svd(d.r11)
    keep = s > MINIMAL_BIAS_RCOND * s[0]
    return vt[keep].T @ ((u[:, keep].T @ d.r12) / s[keep, None])


def bias_variance_values(d: Design, gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """``c`` of the bias-variance estimator, ``(m + 1, F)``: the solution of
    ``[(1 - gamma) A^T A + gamma diag(A^T 1)] c = A^T b``; ``gamma = 0`` is
    :func:`minimal_bias_values`."""
    gamma = check_gamma(gamma)
    if gamma == 0.0:
        return minimal_bias_values(d)
    from scipy.linalg import solve

    gram = (1.0 - gamma) * (d.r11.T @ d.r11) + gamma * np.diag(d.mass)
    return solve(gram, d.r11.T @ d.r12, assume_a="pos")


def sampled_values(specs: Sequence[MetricSpec], num_negatives: int) -> np.ndarray:
    """``c_r = f(r)`` for ``r = 1..m+1``: the uncorrected sampled metric, ``(m + 1, F)``."""
    r = np.arange(1, int(num_negatives) + 2)
    return np.stack([metric_values(spec, r) for spec in specs], axis=1)


def estimator_moments(
    num_items: int, num_negatives: int, values: Any, truth: Any = None
) -> tuple[np.ndarray, ...]:
    """``(E[c_r | R], Var[c_r | R])`` for every full rank ``R = 1..n`` (rows), each column of
    ``values`` (``(m + 1, F)``); with ``truth`` (``(n, F)``, ``f(R)``) also the bias
    ``E[c_r | R] - f(R)``. Whole matrices: for small ``n``."""
    p = sampled_rank_probabilities(num_items, num_negatives)
    c = np.asarray(values, dtype=np.float64).reshape(p.shape[1], -1)
    mean = p @ c
    var = p @ (c * c) - mean * mean
    if truth is None:
        return mean, var
    return mean, var, mean - np.asarray(truth, dtype=np.float64).reshape(mean.shape)


def histogram_mean(
    histogram: Any,
    values: Any,
    confidence: float | None = None,
    squares: Any = None,
    lists: float | None = None,
) -> dict[str, np.ndarray]:
    """The weighted mean over lists of ``c_{r_i}`` from the histogram ``h`` of sampled ranks
    (sums of list weights): ``sum_r h_r c_r / W`` (``W = sum h``), per column of ``values``
    (``(m + 1, F)``). With a ``confidence`` level, also the ratio estimator's standard error
    ``stderr = sqrt(n / (n - 1) sum_r h2_r (c_r - mean)^2) / W`` (``h2 = squares``, the histogram
    of squared weights; ``n = lists``; unit weights by default: ``h2 = h``, ``n = W``, the
    sample standard deviation of the per-list values over ``sqrt(n)``), Student's ``t`` interval
    ``ci_low``, ``ci_high`` with ``n - 1`` degrees of freedom, and ``count`` (``W``). The
    interval is for the estimator's sampling variance only, not for its bias."""
    h = np.asarray(histogram, dtype=np.float64)
    c = np.asarray(values, dtype=np.float64)
    h2 = h if squares is None else np.asarray(squares, dtype=np.float64)
    total = h.sum()
    n = np.float64(total if lists is None else lists)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (h @ c) / total
    out = {"value": mean}
    if confidence is not None:
        from rankstream.core.uncertainty import interval, t_quantile

        with np.errstate(invalid="ignore", divide="ignore"):
            ss = h2 @ (c - mean) ** 2
            var = np.where(n > 1, n / (n - 1.0) * ss / (total * total), np.nan)
        stderr = np.sqrt(np.maximum(var, 0.0))
        low, high = interval(mean, stderr, t_quantile(confidence, n - 1.0))
        out.update(stderr=stderr, ci_low=low, ci_high=high, count=np.full_like(mean, total))
    return out


def _beta_binomial_loss(t: np.ndarray, h: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The negative mean log-likelihood of ``h`` under ``BetaBinomial(m, e^t0, e^t1)``, its
    gradient and Hessian in ``t``: with ``S = m + a + b`` and ``psi`` the digamma function,
    ``d/da ln p_j = psi(j + a) - psi(S) - psi(a) + psi(a + b)`` (``b``: ``m - j + b``, ``b``),
    second derivatives with the trigamma function, and the chain rule ``d/dt = a d/da``."""
    from scipy.special import betaln, digamma, polygamma

    a, b = np.exp(t)
    m = h.size - 1
    j = np.arange(m + 1)
    w = h / h.sum()
    s = m + a + b
    log_p = -np.log1p(m) - betaln(m - j + 1.0, j + 1.0) + betaln(j + a, m - j + b) - betaln(a, b)
    ga = digamma(j + a) - digamma(s) - digamma(a) + digamma(a + b)
    gb = digamma(m - j + b) - digamma(s) - digamma(b) + digamma(a + b)
    t1 = polygamma(1, a + b) - polygamma(1, s)
    haa = polygamma(1, j + a) - polygamma(1, a) + t1
    hbb = polygamma(1, m - j + b) - polygamma(1, b) + t1
    g = np.array([a * (w @ ga), b * (w @ gb)])
    hess = np.array([[a * a * (w @ haa) + g[0], a * b * t1], [a * b * t1, b * b * (w @ hbb) + g[1]]])
    seen = w > 0
    return -float(w[seen] @ log_p[seen]), -g, -hess


@dataclass(frozen=True)
class RankFit:
    """The fitted distribution of full ranks: ``R - 1 ~ BetaBinomial(n - 1, a, b)``, or, where
    the likelihood is highest in the binomial limit (``a, b -> inf`` with ``a / (a + b) = p``: a
    histogram no more dispersed than a binomial one), ``R - 1 ~ Binomial(n - 1, p)``, written
    ``a = b = inf``. ``p = a / (a + b)``, the mean relative rank."""

    a: float
    b: float
    p: float


def fit_beta_binomial(histogram: Any) -> RankFit:
    """The maximiser of ``sum_r h_r ln BetaBinomial(r - 1; m, a, b)`` for the histogram ``h``
    of sampled ranks (``m + 1`` counts): L-BFGS over ``(ln a, ln b)`` within
    :data:`FIT_LOG_BOUNDS` from ``a = b = 1`` (the uniform distribution of full ranks), then
    projected Newton steps (:func:`_newton_polish`), so that the estimate does not move with the
    rounding of the histogram. The binomial limit ``p = sum_r h_r (r - 1) / (m N)`` (closed
    form) is taken where its likelihood is at least the fit's: the supremum is then at infinity,
    where an optimiser stops anywhere along a flat ridge (this covers a histogram piled on one
    end: ``p = 0`` puts every full rank at 1)."""
    from scipy.optimize import minimize
    from scipy.stats import binom

    h = np.asarray(histogram, dtype=np.float64)
    fit = minimize(
        lambda t: _beta_binomial_loss(t, h)[:2],
        np.zeros(2),
        jac=True,
        method="L-BFGS-B",
        bounds=[FIT_LOG_BOUNDS] * 2,
    )
    a, b = _newton_polish(fit.x, h)
    m = h.size - 1
    w = h / h.sum()
    p = float(np.clip(w @ np.arange(m + 1) / m, 0.0, 1.0))
    seen = w > 0
    binomial_loss = -float(w[seen] @ binom.logpmf(np.arange(m + 1)[seen], m, p))
    if binomial_loss <= _beta_binomial_loss(np.log([a, b]), h)[0]:
        return RankFit(math.inf, math.inf, p)
    return RankFit(a, b, a / (a + b))


def _newton_polish(t: np.ndarray, h: np.ndarray) -> tuple[float, float]:
    """Projected Newton steps from ``t`` (``(ln a, ln b)``): a coordinate at a bound of
    :data:`FIT_LOG_BOUNDS` whose gradient pushes outwards stays there, the others take a Newton
    step; a step is kept if it lowers the loss or the free gradient (the loss is flat to
    rounding near the optimum), at most :data:`FIT_NEWTON_STEPS`, until a step below 1e-13."""
    lo, hi = FIT_LOG_BOUNDS
    loss, grad, hess = _beta_binomial_loss(t, h)
    for _ in range(FIT_NEWTON_STEPS):
        free = ~(((t <= lo) & (grad > 0)) | ((t >= hi) & (grad < 0)))
        if not free.any():
            break
        step = np.zeros(2)
        try:
            step[free] = np.linalg.solve(hess[np.ix_(free, free)], grad[free])
        except np.linalg.LinAlgError:
            break
        trial = np.clip(t - step, lo, hi)
        got = _beta_binomial_loss(trial, h)
        if not np.all(np.isfinite(got[1])):
            break
        if not (got[0] < loss or np.max(np.abs(got[1][free])) < np.max(np.abs(grad[free]))):
            break
        t, (loss, grad, hess) = trial, got
        if np.max(np.abs(step)) < 1e-13:
            break
    a, b = np.exp(t)
    return float(a), float(b)


def full_rank_probabilities(num_items: int, fit: RankFit) -> np.ndarray:
    """``P(R)`` for ``R = 1..n`` under the fitted distribution (:class:`RankFit`)."""
    from scipy.stats import betabinom, binom

    k, n1 = np.arange(int(num_items)), int(num_items) - 1
    if math.isinf(fit.a):
        return binom.pmf(k, n1, fit.p)
    return betabinom.pmf(k, n1, fit.a, fit.b)


def fitted_values(num_items: int, specs: Sequence[MetricSpec], fit: RankFit) -> np.ndarray:
    """``E[f(R)]`` under :func:`full_rank_probabilities`, one per metric (``O(n)`` each)."""
    p = full_rank_probabilities(num_items, fit)
    ranks = np.arange(1, int(num_items) + 1)
    return np.array([p @ metric_values(spec, ranks) for spec in specs])


def estimates(
    histogram: Any,
    num_items: int,
    specs: tuple[MetricSpec, ...],
    gamma: float = DEFAULT_GAMMA,
    confidence: float | None = None,
    squares: Any = None,
    lists: float | None = None,
    prepared: Design | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every estimator of every metric from the histogram of sampled ranks ``h`` (``m + 1``
    sums of list weights; ``squares`` and ``lists`` as in :func:`histogram_mean`):
    ``{metric key: {estimator: {"value": ..., [stderr, ci_low, ci_high, count]}}}``.
    ``fitted`` never has an interval (its sampling distribution is not a plain mean's); with
    weights it maximises the weighted log-likelihood. ``prepared``: the :func:`design` of these
    arguments, computed once by the caller (else computed here)."""
    h = np.asarray(histogram, dtype=np.float64)
    m = h.size - 1
    d = prepared if prepared is not None else design(int(num_items), m, tuple(specs))
    per_estimator = {
        "sampled": histogram_mean(h, sampled_values(specs, m), confidence, squares, lists),
        "minimal_bias": histogram_mean(h, minimal_bias_values(d), confidence, squares, lists),
        "bias_variance": histogram_mean(h, bias_variance_values(d, gamma), confidence, squares, lists),
    }
    fitted = fitted_values(num_items, specs, fit_beta_binomial(h))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for j, spec in enumerate(specs):
        row = {name: {q: float(v[j]) for q, v in got.items()} for name, got in per_estimator.items()}
        row["fitted"] = {"value": float(fitted[j])}
        out[spec.key] = row
    return out
