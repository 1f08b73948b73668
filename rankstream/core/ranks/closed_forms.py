r"""Closed-form moments of rank statistics under random ranking.

Every ranking task ``i`` has ``N_i`` candidates; under random ranking its rank is
``r_i ~ U{1, ..., N_i}`` and tasks are independent.  A weighted mean metric over tasks with
weights ``w_i`` (scaling factors, as in :func:`numpy.average`; ``W = sum_i w_i``) has

.. math::

    E[M] = \sum_i w_i E_i / W, \qquad V[M] = \sum_i w_i^2 V_i / W^2

with the per-task moments (``H_N = sum_{j<=N} 1/j``, ``H2_N = sum_{j<=N} 1/j^2``,
``S_a(N) = sum_{j<=N} j^a``):

=============  =====================  ==================================
f(r)           E_i                    V_i
=============  =====================  ==================================
1/r (MRR)      H_N / N                H2_N / N - (H_N / N)^2
I[r <= k]      p = min(k, N) / N      p (1 - p)
r (mean rank)  (N + 1) / 2            (N^2 - 1) / 12
r^a            S_a(N) / N             S_2a(N) / N - (S_a(N) / N)^2
=============  =====================  ==================================

The geometric mean rank ``GMR = exp(sum_i w_i ln r_i / W)`` is a product of independent
factors ``r_i^{a_i}`` with ``a_i = w_i / W``:

.. math::

    E[GMR] = \exp \sum_i [\ln S_{a_i}(N_i) - \ln N_i]

    V[GMR] = E[GMR]^2 \cdot \operatorname{expm1} \sum_i
             [\ln S_{2 a_i}(N_i) - 2 \ln S_{a_i}(N_i) + \ln N_i]

(the two sums are never exponentiated separately).

Three layers live here:
Here: the per-task moments ``(E_i, V_i)`` as elementwise code on an array namespace ``xp``
(``numpy`` for the closed forms, the streamed kernel's arrays for its per-task terms:
:func:`hits_terms`, :func:`reciprocal_rank_terms`, :func:`rank_terms`), and the exact moments
over tasks on host numpy arrays, validated, O(1) per task (:func:`mrr_expectation`,
:func:`gmr_variance`, ...; power sums by Euler-Maclaurin, :func:`power_sum`).  The streamed
forms (per-task contributions summed in a state, and the moments from those sums) are in
:mod:`~rankstream.core.ranks.streamed_forms`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rankstream.core.ranks.series import (
    _EM_POLY,
    _EM_WEIGHT,
    _ZETA_7,
    DIRECT_SUM_BELOW,
    GMR_CUMULANT_BOUND,
    _const,
    _log_cumulants_asymptotic,
    _log_cumulants_direct,
    _maximum,
    _minimum,
    _zeta_neg_plus_half,
    harmonic,
    harmonic2,
    harmonic2_xp,
    harmonic_xp,
)

__all__ = [
    "check_num_candidates",
    "check_ranks",
    "check_weights",
    "gmr_expectation",
    "gmr_log_expectation",
    "gmr_variance",
    "hits_expectation",
    "hits_terms",
    "hits_variance",
    "log_mean_power",
    "mean_rank_expectation",
    "mean_rank_variance",
    "mrr_expectation",
    "mrr_variance",
    "power_rank_moments",
    "power_sum",
    "power_sum_remainder_bound",
    "rank_terms",
    "reciprocal_rank_terms",
    "weighted_mean_moments",
]

Array = Any


# ==========================================================================================
# validation


def _to_numpy(x: Any) -> np.ndarray:
    """Convert lists, numpy arrays and (duck-typed) torch tensors to numpy."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    elif hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        try:
            x = x.numpy()
        except Exception:  # pragma: no cover - exotic array types
            pass
    return np.asarray(x)


def _describe(x: np.ndarray, max_items: int = 6) -> str:
    flat = x.reshape(-1)
    head = np.array2string(flat[:max_items], separator=", ")
    more = "" if flat.size <= max_items else f" ... ({flat.size} values)"
    return f"shape {x.shape}, dtype {x.dtype}, values {head}{more}"


def _first_bad(arr: np.ndarray, bad: np.ndarray, name: str) -> str:
    """``name[i, j]=value`` for the first True entry of ``bad`` (``name=value`` for scalars)."""
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = "[" + ", ".join(str(i) for i in idx) + "]" if idx else ""
    return f"{name}{where}={float(arr[idx])!r}"


def _float_array(x: Any, name: str) -> np.ndarray:
    if x is None:
        raise ValueError(f"{name} must be given, got None")
    if getattr(getattr(x, "device", None), "type", None) == "meta":
        raise ValueError(
            f"{name} is a tensor on the 'meta' device (no data): {type(x).__name__} of shape "
            f"{tuple(x.shape)} and dtype {x.dtype}"
        )
    try:
        arr = _to_numpy(x)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:  # ragged, exotic
        raise TypeError(
            f"{name} must be a rectangular array of numbers, got {type(x).__name__} {str(x)[:120]}: {exc}"
        ) from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise ValueError(f"{name} must be numeric, got {_describe(arr)}")
    if arr.dtype.kind == "c":
        raise TypeError(f"{name} must be real, got complex values ({_describe(arr)})")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    arr = arr.astype(np.float64, copy=False)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} must be finite; got {_first_bad(arr, bad, name)} ({_describe(arr)})")
    return arr


def check_num_candidates(num_candidates: Any, name: str = "num_candidates") -> np.ndarray:
    """Return ``num_candidates`` as a float64 array of integers >= 1, or raise ValueError."""
    arr = _float_array(num_candidates, name)
    bad = (arr < 1) | (arr != np.floor(arr))
    if bad.any():
        raise ValueError(f"{name} must be integers >= 1; got {_first_bad(arr, bad, name)} ({_describe(arr)})")
    return arr


def check_weights(
    weights: Any, shape: tuple[int, ...] | None = None, name: str = "weights"
) -> np.ndarray | None:
    """Return ``weights`` as a float64 array of positive values (or None), or raise."""
    if weights is None:
        return None
    arr = _float_array(weights, name)
    if shape is not None and arr.shape != tuple(shape):
        raise ValueError(
            f"{name} must have the same shape as the ranks/num_candidates {tuple(shape)}, "
            f"got {_describe(arr)}"
        )
    bad = arr <= 0
    if bad.any():
        raise ValueError(f"{name} must be positive; got {_first_bad(arr, bad, name)} ({_describe(arr)})")
    return arr


def check_ranks(ranks: Any, num_candidates: Any = None) -> np.ndarray:
    """Return ``ranks`` as float64 (all >= 1 and, if given, <= num_candidates), or raise."""
    arr = _float_array(ranks, "ranks")
    bad = arr < 1
    if bad.any():
        raise ValueError(f"ranks must be >= 1; got {_first_bad(arr, bad, 'ranks')} ({_describe(arr)})")
    if num_candidates is not None:
        n = check_num_candidates(num_candidates)
        if n.shape != arr.shape:
            raise ValueError(
                f"num_candidates must have the same shape as ranks {arr.shape}, got {_describe(n)}"
            )
        bad = arr > n
        if bad.any():
            raise ValueError(
                f"ranks must lie in [1, num_candidates]; got {_first_bad(arr, bad, 'ranks')} > "
                f"{_first_bad(n, bad, 'num_candidates')} (ranks {_describe(arr)})"
            )
    return arr


def _check_a(a: Any, name: str = "a", upper: float = 2.0) -> np.ndarray:
    arr = _float_array(a, name)
    bad = (arr < 0) | (arr > upper)
    if bad.any():
        raise ValueError(
            f"{name} must lie in [0, {upper}]; got {_first_bad(arr, bad, name)} ({_describe(arr)})"
        )
    return arr


def _prepare(num_candidates: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
    n = check_num_candidates(num_candidates)
    w = check_weights(weights, shape=n.shape)
    if w is None:
        w = np.ones_like(n)
    return n, w


# ==========================================================================================
# power sums (numpy)


def _mean_power_minus_one_direct(a: np.ndarray, n: np.ndarray) -> np.ndarray:
    """S_a(N)/N - 1 by direct summation of expm1(a ln j) (N < DIRECT_SUM_BELOW)."""
    j = np.arange(1, DIRECT_SUM_BELOW, dtype=np.float64)
    terms = np.expm1(a[..., None] * np.log(j))
    terms = np.where(j <= n[..., None], terms, 0.0)
    return terms.sum(axis=-1) / n


def _mean_power_minus_one_em(a: np.ndarray, n: np.ndarray) -> np.ndarray:
    """S_a(N)/N - 1 by Euler-Maclaurin with P = 3, arranged so no term cancels as a -> 0."""
    ln_n = np.log(n)
    n_a = np.power(n, a)
    # N^a / (a+1) - 1 and N^a - 1: expm1 where they are small, the correctly rounded power
    # where they are not (exp of a large argument would amplify the rounding of a ln N)
    near = a * ln_n < 1.0
    t = np.where(near, np.expm1(a * ln_n - np.log1p(a)), n_a / (1.0 + a) - 1.0)
    n_a_m1 = np.where(near, np.expm1(a * ln_n), n_a - 1.0)
    t = t + (0.5 * n_a_m1 + _zeta_neg_plus_half(a)) / n  # (N^a/2 + zeta(-a)) / N
    inv2 = 1.0 / (n * n)
    scale = n_a * inv2
    for p in range(3):
        poly = np.polynomial.polynomial.polyval(a, _EM_POLY[p])
        t = t + _EM_WEIGHT[p] * poly * scale
        scale = scale * inv2
    return t


def _mean_power_minus_one(a: Any, n: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(S_a(N)/N - 1, N)`` for validated, broadcast ``a`` and ``n``."""
    a_arr = _check_a(a)
    n_arr = check_num_candidates(n, name="n")
    a_arr, n_arr = np.broadcast_arrays(a_arr, n_arr)
    out = np.empty(a_arr.shape, dtype=np.float64)
    small = n_arr < DIRECT_SUM_BELOW
    if small.any():
        out[small] = _mean_power_minus_one_direct(a_arr[small], n_arr[small])
    large = ~small
    if large.any():
        out[large] = _mean_power_minus_one_em(a_arr[large], n_arr[large])
    return out, n_arr


def log_mean_power(a: Any, n: Any) -> np.ndarray:
    r"""``ln E[r^a] = ln(S_a(N) / N)`` for ``r ~ U{1..N}`` and ``0 <= a <= 2``.

    Direct summation of ``expm1(a ln j)`` when ``N < 30``; otherwise Euler-Maclaurin (P = 3,
    see :func:`power_sum`) for ``S_a(N)/N - 1``, evaluated with ``expm1`` and the cancellation-
    free ``zeta(-a) + 1/2``, so the result keeps full *relative* accuracy for tiny ``a`` (as in
    the GMR, where ``a = w_i / W``).  ``a`` and ``n`` broadcast.
    """
    t, _ = _mean_power_minus_one(a, n)
    return np.log1p(t)


def power_sum(a: Any, n: Any) -> np.ndarray:
    r"""Power sums ``S_a(N) = sum_{j=1}^{N} j^a`` for ``0 <= a <= 2`` in O(1).

    For ``N >= 30`` the Euler-Maclaurin form

    .. math::

        S_a(N) = \zeta(-a) + \frac{N^{a+1}}{a+1} + \frac{N^a}{2}
                 + \sum_{p=1}^{3} \frac{B_{2p}}{(2p)!} a(a-1)\cdots(a-2p+2) N^{a-2p+1}

    (exact for ``a = 1, 2``; remainder bounded by :func:`power_sum_remainder_bound`),
    otherwise direct summation.  ``a`` and ``n`` broadcast.
    """
    t, n_arr = _mean_power_minus_one(a, n)
    return n_arr + n_arr * t


def power_sum_remainder_bound(a: Any, n: Any) -> np.ndarray:
    r"""Bound on the Euler-Maclaurin remainder of :func:`power_sum` (0 where summed directly).

    .. math::

        |R_3| \le \frac{2 \zeta(7)}{(2\pi)^7} |a(a-1)\cdots(a-5)| N^{a-6}
    """
    a_arr = _check_a(a)
    n_arr = check_num_candidates(n, name="n")
    a_arr, n_arr = np.broadcast_arrays(a_arr, n_arr)
    prod = np.ones_like(a_arr)
    for t in range(6):
        prod = prod * (a_arr - t)
    bound = 2.0 * _ZETA_7 / (2.0 * math.pi) ** 7 * np.abs(prod) * n_arr ** (a_arr - 6.0)
    return np.where(n_arr < DIRECT_SUM_BELOW, 0.0, bound)


# ==========================================================================================
# per-task moments (xp: numpy for the closed forms, the streamed kernel's arrays for its terms)


def hits_terms(n: Array, k: Any, xp: Any = np) -> tuple[Array, Array]:
    """Per-task ``(E, Var)`` of ``I[r <= k]``: ``p = min(k, N) / N`` and ``p (1 - p)``; ``k`` a
    Python number or a broadcastable array."""
    p = _minimum(xp, _const(n, k), n) / n
    return p, p * (1.0 - p)


def reciprocal_rank_terms(n: Array, xp: Any = np, *, host: bool = False) -> tuple[Array, Array]:
    """Per-task ``(E, Var)`` of ``1/r``: ``H_N / N`` and ``H2_N / N - (H_N / N)^2`` (floored at 0).

    The harmonic numbers come from :func:`~rankstream.core.ranks.series.harmonic_xp` on ``xp``,
    or with ``host`` from scipy (:func:`~rankstream.core.ranks.series.harmonic`: host numpy
    arrays, one pass each)."""
    h, h2 = (harmonic(n), harmonic2(n)) if host else (harmonic_xp(n, xp), harmonic2_xp(n, xp))
    mean = h / n
    var = h2 / n - mean * mean
    return mean, _maximum(xp, var, _const(n, 0.0))


def rank_terms(n: Array, xp: Any = np) -> tuple[Array, Array]:
    """Per-task ``(E, Var)`` of ``r``: ``(N+1)/2`` and ``(N-1)(N+1)/12``."""
    return (n + 1.0) * 0.5, (n - 1.0) * (n + 1.0) / 12.0


def _check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)) or k < 1:
        raise ValueError(f"k must be a number >= 1, got {k!r}")


def power_rank_moments(num_candidates: Any, a: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-task ``E[r^a] = S_a(N)/N`` and ``Var[r^a] = S_2a(N)/N - (S_a(N)/N)^2`` (0<=a<=1)."""
    a_arr, n = np.broadcast_arrays(_check_a(a, upper=1.0), check_num_candidates(num_candidates))
    l1 = log_mean_power(a_arr, n)
    mean = np.exp(l1)
    return mean, mean * mean * np.expm1(_log_variance_ratio(a_arr, n, l1))


# ==========================================================================================
# aggregated moments (numpy)


def weighted_mean_moments(means: Any, variances: Any, weights: Any = None) -> tuple[float, float]:
    """``(sum w_i E_i / W, sum w_i^2 V_i / W^2)`` for independent tasks; unit weights if None."""
    mean = np.asarray(means, dtype=np.float64)
    var = np.asarray(variances, dtype=np.float64)
    if weights is None:
        n = mean.size
        return float(mean.mean()), float(var.sum() / n / n)
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum()
    return float((w * mean).sum() / total), float((w * w * var).sum() / (total * total))


def hits_expectation(num_candidates: Any, k: float = 10, weights: Any = None) -> float:
    """``E[Hits@k] = sum_i w_i min(k, N_i)/N_i / W``."""
    n, w = _prepare(num_candidates, weights)
    _check_k(k)
    return weighted_mean_moments(hits_terms(n, k)[0], np.zeros_like(n), w)[0]


def hits_variance(num_candidates: Any, k: float = 10, weights: Any = None) -> float:
    """``Var[Hits@k] = sum_i w_i^2 p_i (1 - p_i) / W^2``."""
    n, w = _prepare(num_candidates, weights)
    _check_k(k)
    return weighted_mean_moments(*hits_terms(n, k), w)[1]


def mrr_expectation(num_candidates: Any, weights: Any = None) -> float:
    """``E[MRR] = sum_i w_i H_{N_i} / N_i / W``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(harmonic(n) / n, np.zeros_like(n), w)[0]


def mrr_variance(num_candidates: Any, weights: Any = None) -> float:
    """``Var[MRR] = sum_i w_i^2 (H2_{N_i}/N_i - (H_{N_i}/N_i)^2) / W^2``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*reciprocal_rank_terms(n, host=True), w)[1]


def mean_rank_expectation(num_candidates: Any, weights: Any = None) -> float:
    """``E[MR] = sum_i w_i (N_i + 1)/2 / W``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*rank_terms(n), w)[0]


def mean_rank_variance(num_candidates: Any, weights: Any = None) -> float:
    """``Var[MR] = sum_i w_i^2 (N_i^2 - 1)/12 / W^2``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*rank_terms(n), w)[1]


# up to this a the variance term ln S_2a - 2 ln S_a + ln N is summed as a cumulant series
_SERIES_A = 0.02
_SERIES_MAX_ORDER = 20
# smallest spread of ln r over tasks with N >= 2 (N = 2: (ln 2)^2 / 4)
_MIN_LOG_VARIANCE = math.log(2.0) ** 2 / 4.0


def _series_order(a_max: float) -> int:
    """Fewest cumulants with truncation below 1e-17 of the leading term, for all a <= a_max.

    The tail after order M is at most ``B (4a)^(M+1) / (1 - 4a)`` (GMR cumulant bound) and
    the leading term ``kappa_2 a^2 >= (ln 2)^2 / 4 * a^2``; their ratio grows with ``a``.
    """
    q = 4.0 * a_max
    target = 1e-17 * _MIN_LOG_VARIANCE * a_max**2
    for order in range(2, _SERIES_MAX_ORDER + 1):
        if GMR_CUMULANT_BOUND * q ** (order + 1) / (1.0 - q) <= target:
            return order
    return _SERIES_MAX_ORDER


def _log_variance_ratio(a: np.ndarray, n: np.ndarray, l1: np.ndarray) -> np.ndarray:
    """``ln E[r^2a] - 2 ln E[r^a]`` (= ln(1 + Var[r^a]/E[r^a]^2)), given ``l1 = ln E[r^a]``.

    For ``a <= 0.02`` the difference is taken as ``sum_{m=2}^{M} (2^m - 2) kappa_m a^m / m!``
    with ``M <= 20`` chosen so the truncation, at most ``B (4a)^(M+1) / (1 - 4a)`` by the bound
    in :func:`gmr_moments_from_sums`, stays below 1e-17 of the sum; this avoids the
    cancellation of the two logarithms.  Otherwise directly (relative error about
    ``1e-16 * 2 ln N / (a Var[ln r])``).
    """
    out = np.empty(a.shape, dtype=np.float64)
    small = a <= _SERIES_A
    if small.any():
        a_s, n_s = a[small], n[small]
        order = _series_order(float(a_s.max()))
        kappa = np.empty((order, a_s.size))
        few = n_s < DIRECT_SUM_BELOW
        if few.any():
            kappa[:, few] = _log_cumulants_direct(n_s[few], order, np)
        if (~few).any():
            kappa[:, ~few] = _log_cumulants_asymptotic(n_s[~few], order, np)
        acc = np.zeros_like(a_s)
        for m in range(order, 1, -1):
            acc = (acc + (2.0**m - 2.0) / math.factorial(m) * kappa[m - 1]) * a_s
        out[small] = acc * a_s
    big = ~small
    if big.any():
        out[big] = log_mean_power(2.0 * a[big], n[big]) - 2.0 * l1[big]
    return np.maximum(out, 0.0)


def _gmr_parts(num_candidates: Any, weights: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, w = _prepare(num_candidates, weights)
    a = w / w.sum()
    return n, a, log_mean_power(a, n)


def gmr_log_expectation(num_candidates: Any, weights: Any = None) -> float:
    r"""``ln E[GMR] = sum_i [ln S_{a_i}(N_i) - ln N_i]`` with ``a_i = w_i / W``."""
    _, _, l1 = _gmr_parts(num_candidates, weights)
    return float(np.sum(l1))


def gmr_expectation(num_candidates: Any, weights: Any = None) -> float:
    r"""``E[GMR] = exp(sum_i [ln S_{a_i}(N_i) - ln N_i])``, ``a_i = w_i / W`` (O(1) per task)."""
    return math.exp(gmr_log_expectation(num_candidates, weights))


def gmr_variance(num_candidates: Any, weights: Any = None) -> float:
    r"""``Var[GMR] = E^2 expm1(sum_i [ln S_{2a_i}(N_i) - 2 ln S_{a_i}(N_i) + ln N_i])``.

    Each summand is ``ln(1 + Var[r_i^a]/E[r_i^a]^2) >= 0``; for small ``a_i`` it is evaluated as
    a cumulant series (see :func:`_log_variance_ratio`) so it keeps relative accuracy.
    """
    n, a, l1 = _gmr_parts(num_candidates, weights)
    log_e = float(np.sum(l1))
    v = float(np.sum(_log_variance_ratio(a, n, l1)))
    return math.exp(2.0 * log_e) * math.expm1(v)
