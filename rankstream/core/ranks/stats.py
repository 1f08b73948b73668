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

* numpy/scipy functions, O(1) per task, for whole arrays of candidate counts
  (:func:`harmonic`, :func:`power_sum`, :func:`log_mean_power`, :func:`mrr_expectation`, ...);
* *streaming forms* written against an array namespace ``xp`` (``numpy``, ``torch`` or
  ``keras.ops``) that use only elementwise ``log``, ``log1p``, ``exp``, ``sqrt``, ``where``,
  ``minimum``, ``maximum`` and Python operators, and return per-task contributions whose sums
  over tasks are the whole state (:func:`mrr_stream_terms`, :func:`gmr_stream_terms`, ...);
* reducers from those sums to the moments (:func:`moments_from_sums`,
  :func:`gmr_moments_from_sums`; the latter is the numpy face of the one elementwise GMR
  reducer :func:`gmr_moments_xp`, which the streamed kernel runs on its own arrays).

Streaming inputs must be float64 for the stated accuracy; they are not validated (they may be
traced by a compiler); validate eagerly with :func:`check_num_candidates` and
:func:`check_weights`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import special

__all__ = [
    "DEFAULT_GMR_ORDER",
    "DIRECT_SUM_BELOW",
    "FLOAT32_GMR_ORDER",
    "GMR_CUMULANT_BOUND",
    "GMR_CUMULANT_RADIUS",
    "MAD_NORMAL_SCALE",
    "MAX_GMR_ORDER",
    "RankBins",
    "check_num_candidates",
    "check_ranks",
    "check_weights",
    "default_gmr_order",
    "gmr_expectation",
    "gmr_log_expectation",
    "gmr_moments_from_sums",
    "gmr_moments_xp",
    "gmr_stream_terms",
    "gmr_variance",
    "harmonic",
    "harmonic2",
    "harmonic2_xp",
    "harmonic_xp",
    "histogram_median_xp",
    "hits_expectation",
    "hits_moments",
    "hits_stream_terms",
    "hits_terms",
    "hits_variance",
    "linear_stream_terms",
    "log_mean_power",
    "log_rank_cumulants",
    "mean_rank_expectation",
    "mean_rank_stream_terms",
    "mean_rank_variance",
    "moments_from_sums",
    "mrr_expectation",
    "mrr_stream_terms",
    "mrr_variance",
    "power_rank_moments",
    "power_sum",
    "power_sum_remainder_bound",
    "rank_bins",
    "rank_moments",
    "rank_terms",
    "reciprocal_rank_moments",
    "reciprocal_rank_terms",
    "state_dtype_name",
    "weighted_mean_moments",
    "zeta_neg",
]

Array = Any

#: below this number of candidates, sums over ``j = 1 .. N`` are taken term by term
DIRECT_SUM_BELOW = 30

_EULER_GAMMA = 0.5772156649015329
_ZETA_2 = math.pi**2 / 6.0

# Taylor coefficients g_j of the entire function G(s) = zeta(s) - 1/(s - 1) at s = 0, so that
# zeta(-a) = -1/(1 + a) + sum_j g_j (-a)^j.  Computed with mpmath at 40 digits; the 25 terms
# kept give zeta(-a) to ~1e-19 absolute for |a| <= 2 (the coefficients fall off faster than
# any geometric series because G is entire).
_ZETA_G = (
    5.0e-1,
    8.106146679532725822e-2,
    -3.178227954292425605e-3,
    -7.851944770424079602e-4,
    1.207004994288350422e-4,
    -1.9408963204560378e-6,
    -1.301146013959624312e-6,
    1.686158263892200698e-7,
    -5.764675979949394416e-9,
    -9.110164892314165709e-10,
    1.497007594190113735e-10,
    -9.40689566566617691e-12,
    -4.092582630415831548e-14,
    6.539904805891015226e-14,
    -6.543968749891919373e-15,
    3.012424871366786795e-16,
    3.988894706311055497e-18,
    -1.858215043378503251e-18,
    1.602885638529224104e-19,
    -7.115582739216006803e-21,
    7.930311915096388794e-24,
    2.655864218698844668e-23,
    -2.395155440936649873e-24,
    1.180327883917824066e-25,
    -2.295584685913845437e-27,
)
# Taylor coefficients of zeta(-a) in a: zeta(-a) = sum_j _ZETA_NEG[j] a^j
_ZETA_NEG = tuple((-1.0) ** j * (g - 1.0) for j, g in enumerate(_ZETA_G))

# B_{2p} / (2p)! for p = 1 .. 6 (Euler-Maclaurin weights)
_BERNOULLI = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730)
_EM_WEIGHT = tuple(b / math.factorial(2 * p) for p, b in enumerate(_BERNOULLI, start=1))
_ZETA_7 = 1.0083492773819228


def _falling_poly(degree: int) -> tuple[float, ...]:
    """Coefficients c_0..c_degree of a (a - 1) ... (a - degree + 1) in powers of a."""
    coef = [1.0]
    for t in range(degree):
        # multiply by (a - t)
        new = [0.0] * (len(coef) + 1)
        for i, c in enumerate(coef):
            new[i + 1] += c
            new[i] -= t * c
        coef = new
    return tuple(coef)


# (a)_{2p-1} = a (a-1) ... (a-2p+2) as polynomials in a, for p = 1 .. 6
_EM_POLY = tuple(_falling_poly(2 * p - 1) for p in range(1, len(_EM_WEIGHT) + 1))

# ------------------------------------------------------------------------------------------
# The GMR cumulant majorant (see gmr_moments_from_sums for the proof).
#: radius rho of the disk on which the bound B holds: |kappa_m(N)| <= B m! rho^(-m), m >= 2
GMR_CUMULANT_RADIUS = 0.5


def _cumulant_bound_constant() -> float:
    rho = GMR_CUMULANT_RADIUS
    # N <= 99: support of ln r has length l = ln N <= ln 99; t = rho l / 2 < pi / 2
    t = rho * math.log(99.0) / 2.0
    b_strip = t - math.log(math.cos(t)) + math.pi / 2.0
    # N >= 100: comparison with the integral of x^z over [0, 1]
    zeta_15 = 2.612375348685488
    delta = (1.0 + rho) * 100.0 ** (rho - 1.0) * (rho * zeta_15 / 2.0 + 1.0 + 1.0 / (1.0 - rho))
    b_riemann = -math.log(1.0 - rho) - math.log(1.0 - delta)
    return math.ceil(max(b_strip, b_riemann) * 100.0) / 100.0


#: B in |kappa_m(N)| <= B m! 2^m (all N >= 1, all m >= 2); 3.62
GMR_CUMULANT_BOUND = _cumulant_bound_constant()
#: largest supported order (limited by the tabulated zeta coefficients)
MAX_GMR_ORDER = 20
#: default number of cumulant sums kept by the GMR streaming form (float64 state)
DEFAULT_GMR_ORDER = MAX_GMR_ORDER
#: the order for float32 state: the sums hold ``w^m`` up to ``w^(M+1)``, which at ``M = 20``
#: leave float32 (max 3.4e38) for task weights above about 68; at ``M = 8`` the state holds
#: weights from about 1e-4 to 1.9e4 (within float32's normal range).  Its truncation error is
#: about ``n^-8 / 9`` for ``n`` equally weighted tasks (below float32's 6e-8 from 7 tasks on)
#: and is reported as the bound.
FLOAT32_GMR_ORDER = 8
_STATE_DTYPES = ("float64", "float32", "float16", "bfloat16")


def state_dtype_name(dtype: Any) -> str:
    """The name (``"float64"``, ``"float32"``, ``"float16"``, ``"bfloat16"``) of a state dtype
    given as a string or a numpy / torch / keras / TensorFlow dtype; ``ValueError`` otherwise."""
    if isinstance(dtype, str):
        name = dtype
    else:
        name = getattr(dtype, "name", None)
        if not isinstance(name, str):
            try:
                name = np.dtype(dtype).name
            except TypeError:
                name = str(dtype)  # torch.float32 -> "torch.float32"
    name = name.rsplit(".", 1)[-1]
    if name not in _STATE_DTYPES:
        raise ValueError(f"state_dtype must be a floating dtype among {_STATE_DTYPES}, got {dtype!r}")
    return name


def default_gmr_order(state_dtype: Any = "float64") -> int:
    """The GMR streaming order for a state dtype: :data:`DEFAULT_GMR_ORDER` (20) for float64,
    :data:`FLOAT32_GMR_ORDER` (8) for float32 (and narrower) state."""
    return DEFAULT_GMR_ORDER if state_dtype_name(state_dtype) == "float64" else FLOAT32_GMR_ORDER


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
# special sums (numpy / scipy)


def harmonic(n: Any) -> np.ndarray:
    r"""Harmonic numbers ``H_N = sum_{j<=N} 1/j = digamma(N + 1) + euler_gamma``."""
    n = np.asarray(n, dtype=np.float64)
    return special.digamma(n + 1.0) + _EULER_GAMMA


def harmonic2(n: Any) -> np.ndarray:
    r"""Second-order harmonic numbers ``H2_N = sum_{j<=N} 1/j^2 = pi^2/6 - polygamma(1, N+1)``."""
    n = np.asarray(n, dtype=np.float64)
    return _ZETA_2 - special.polygamma(1, n + 1.0)


def zeta_neg(a: Array) -> Array:
    r"""Riemann ``zeta(-a)`` for ``0 <= a <= 2``, elementwise (arithmetic only, any array type).

    Uses ``zeta(-a) = -1/(1 + a) + sum_j g_j (-a)^j`` where ``G(s) = zeta(s) - 1/(s - 1)`` is
    entire (25 tabulated Taylor coefficients, error below 1e-19).  Unlike
    ``scipy.special.zeta(-a)`` this keeps ``zeta(-a) + 1/2`` accurate in relative terms as
    ``a -> 0`` (see :func:`_zeta_neg_plus_half`).
    """
    return _zeta_neg_plus_half(a) - 0.5


def _zeta_neg_plus_half(a: Array) -> Array:
    """``zeta(-a) + 1/2 = a / (1 + a) + sum_{j>=1} g_j (-a)^j`` without cancellation."""
    acc = a * 0.0
    for g in reversed(_ZETA_G[1:]):
        acc = (acc + g) * (-a)
    return a / (1.0 + a) + acc


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
# cumulants of ln r (xp-generic)


def _const(like: Array, value: Any) -> Array:
    """An array shaped (and typed) like ``like`` filled with ``value`` (broadcasts)."""
    return like * 0.0 + value


def _maximum(xp: Any, a: Array, b: Any) -> Array:
    """``max(a, b)`` elementwise in ``a``'s dtype. numpy's ``maximum``; elsewhere a ``where``, as
    Keras on torch computes ``maximum`` of float64 tensors in floatx (float32)."""
    if xp is np:
        return np.maximum(a, b)
    return xp.where(a < b, xp.full_like(a, float(b)) if isinstance(b, (int, float)) else b, a)


def _minimum(xp: Any, a: Array, b: Any) -> Array:
    """``min(a, b)`` elementwise in ``a``'s dtype (see :func:`_maximum`)."""
    if xp is np:
        return np.minimum(a, b)
    return xp.where(b < a, xp.full_like(a, float(b)) if isinstance(b, (int, float)) else b, a)


def _log_cumulants_direct(n: Array, order: int, xp: Any) -> list[Array]:
    """Cumulants of ln r for N < DIRECT_SUM_BELOW by summation of centred moments."""
    zero = _const(n, 0.0)
    total = zero
    for j in range(2, DIRECT_SUM_BELOW):
        total = total + xp.where(n >= j, _const(n, math.log(j)), zero)
    mean = total / n
    # centred moments mu_m, m = 2..order; the j = 1 term (ln 1 = 0) is always present
    d1 = -mean
    mom = [None, None]
    powers = [d1 * d1]
    for _ in range(3, order + 1):
        powers.append(powers[-1] * d1)
    acc = list(powers)
    for j in range(2, DIRECT_SUM_BELOW):
        d = _const(n, math.log(j)) - mean
        p = d * d
        for idx in range(order - 1):
            acc[idx] = acc[idx] + xp.where(n >= j, p, zero)
            p = p * d
    for idx in range(order - 1):
        mom.append(acc[idx] / n)
    # cumulants from centred moments: kappa_m = mu_m - sum_{k=2}^{m-2} C(m-1, k-1) kappa_k mu_{m-k}
    kappa = [None, mean]
    for m in range(2, order + 1):
        k_m = mom[m]
        for k in range(2, m - 1):
            k_m = k_m - math.comb(m - 1, k - 1) * kappa[k] * mom[m - k]
        kappa.append(k_m)
    return kappa[1:]


def _log_cumulants_asymptotic(n: Array, order: int, xp: Any) -> list[Array]:
    """Cumulants of ln r from the Euler-Maclaurin form of ln E[r^a] (accurate for N >= 30).

    ln E[r^a] = a ln N - ln(1 + a) + ln(1 + (1 + a) c(a)) with
    c(a) = 1/(2N) + sum_{p<=6} B_2p/(2p)! (a)_{2p-1} N^{-2p} + zeta(-a) N^{-a} / N.
    """
    ln_n = xp.log(n)
    inv = 1.0 / n
    inv2 = inv * inv
    # e_k = (-ln N)^k / k!
    e = [_const(n, 1.0)]
    for k in range(1, order + 1):
        e.append(e[-1] * (-ln_n) / k)
    c = []
    for m in range(order + 1):
        s = _ZETA_NEG[m] * e[0]
        for j in range(m):
            s = s + _ZETA_NEG[j] * e[m - j]
        c.append(s * inv)
    c[0] = c[0] + 0.5 * inv  # exactly cancels zeta(0) / N
    scale = inv2
    for weight, poly in zip(_EM_WEIGHT, _EM_POLY, strict=True):
        for m, coef in enumerate(poly):
            if coef != 0.0 and m <= order:
                c[m] = c[m] + (weight * coef) * scale
        scale = scale * inv2
    # d(a) = (1 + a) c(a), with d_0 = 0 analytically
    d = [None] + [c[m] + c[m - 1] for m in range(1, order + 1)]
    # f(a) = ln(1 + d(a)):  m f_m = m d_m - sum_{k=1}^{m-1} k f_k d_{m-k}
    f = [None]
    for m in range(1, order + 1):
        s = d[m]
        for k in range(1, m):
            s = s - (k / m) * f[k] * d[m - k]
        f.append(s)
    kappa = [ln_n - 1.0 + f[1]]
    for m in range(2, order + 1):
        kappa.append(f[m] * float(math.factorial(m)) + (-1.0) ** m * float(math.factorial(m - 1)))
    return kappa


def log_rank_cumulants(n: Array, order: int = DEFAULT_GMR_ORDER, xp: Any = np) -> list[Array]:
    r"""Cumulants ``kappa_1 .. kappa_order`` of ``ln r`` for ``r ~ U{1..N}``, elementwise.

    ``kappa_m`` is the m-th Taylor coefficient (times m!) of the cumulant generating function
    ``K_N(a) = ln E[r^a] = ln(S_a(N) / N)``.  For ``N < 30`` they come from centred moments
    summed term by term (an unrolled loop over ``j``); otherwise from the Euler-Maclaurin form

    .. math::

        K_N(a) = a \ln N - \ln(1 + a) + \ln\bigl(1 + (1 + a) c_N(a)\bigr),\quad
        c_N(a) = \frac{1}{2N} + \sum_{p=1}^{6} \frac{B_{2p}}{(2p)!} (a)_{2p-1} N^{-2p}
                 + \frac{\zeta(-a) N^{-a}}{N},

    whose series in ``a`` is taken exactly (``kappa_m -> (-1)^m (m-1)!``, the cumulants of
    ``ln U``, as ``N -> inf``; the large-N part is centred on ``ln N`` so nothing cancels).
    Written against ``xp`` with only ``log``/``where`` and arithmetic; returns a list of arrays.
    """
    if not isinstance(order, int) or not 1 <= order <= MAX_GMR_ORDER:
        raise ValueError(f"order must be an int in [1, {MAX_GMR_ORDER}], got {order!r}")
    # the direct branch needs order >= 2 internally
    work = max(order, 2)
    direct = _log_cumulants_direct(n, work, xp)
    # keep the asymptotic branch away from tiny N (it is discarded there anyway)
    n_big = _maximum(xp, n, _const(n, float(DIRECT_SUM_BELOW)))
    asym = _log_cumulants_asymptotic(n_big, work, xp)
    small = n < DIRECT_SUM_BELOW
    return [xp.where(small, direct[m], asym[m]) for m in range(order)]


# ==========================================================================================
# per-task moments (numpy)


def hits_moments(num_candidates: Any, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-task ``E`` and ``Var`` of ``I[r <= k]``: ``p = min(k, N)/N`` and ``p (1 - p)``."""
    n = check_num_candidates(num_candidates)
    _check_k(k)
    p = np.minimum(float(k), n) / n
    return p, p * (1.0 - p)


def _check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)) or k < 1:
        raise ValueError(f"k must be a number >= 1, got {k!r}")


def reciprocal_rank_moments(num_candidates: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-task ``E[1/r] = H_N / N`` and ``Var[1/r] = H2_N / N - (H_N / N)^2``."""
    n = check_num_candidates(num_candidates)
    mean = harmonic(n) / n
    var = harmonic2(n) / n - mean * mean
    return mean, np.maximum(var, 0.0)


def rank_moments(num_candidates: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-task ``E[r] = (N + 1)/2`` and ``Var[r] = (N^2 - 1)/12``."""
    n = check_num_candidates(num_candidates)
    return 0.5 * (n + 1.0), (n - 1.0) * (n + 1.0) / 12.0


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
    return weighted_mean_moments(hits_moments(n, k)[0], np.zeros_like(n), w)[0]


def hits_variance(num_candidates: Any, k: float = 10, weights: Any = None) -> float:
    """``Var[Hits@k] = sum_i w_i^2 p_i (1 - p_i) / W^2``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*hits_moments(n, k), w)[1]


def mrr_expectation(num_candidates: Any, weights: Any = None) -> float:
    """``E[MRR] = sum_i w_i H_{N_i} / N_i / W``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(harmonic(n) / n, np.zeros_like(n), w)[0]


def mrr_variance(num_candidates: Any, weights: Any = None) -> float:
    """``Var[MRR] = sum_i w_i^2 (H2_{N_i}/N_i - (H_{N_i}/N_i)^2) / W^2``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*reciprocal_rank_moments(n), w)[1]


def mean_rank_expectation(num_candidates: Any, weights: Any = None) -> float:
    """``E[MR] = sum_i w_i (N_i + 1)/2 / W``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*rank_moments(n), w)[0]


def mean_rank_variance(num_candidates: Any, weights: Any = None) -> float:
    """``Var[MR] = sum_i w_i^2 (N_i^2 - 1)/12 / W^2``."""
    n, w = _prepare(num_candidates, weights)
    return weighted_mean_moments(*rank_moments(n), w)[1]


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


# ==========================================================================================
# streaming forms (xp)


def harmonic_xp(n: Array, xp: Any) -> Array:
    """``H_N`` elementwise with ``xp``: direct sum for ``N < 30``, asymptotic series beyond.

    ``H_N = ln N + gamma + 1/(2N) - 1/(12N^2) + 1/(120N^4) - 1/(252N^6) + 1/(240N^8)
    - 1/(132N^10)`` (next term below 1e-17 for N >= 30).
    """
    zero = _const(n, 0.0)
    exact = zero
    for j in range(1, DIRECT_SUM_BELOW):
        exact = exact + xp.where(n >= j, _const(n, 1.0 / j), zero)
    nb = _maximum(xp, n, _const(n, float(DIRECT_SUM_BELOW)))
    x = 1.0 / (nb * nb)
    tail = x * (-1.0 / 12 + x * (1.0 / 120 + x * (-1.0 / 252 + x * (1.0 / 240 - x / 132))))
    asym = xp.log(nb) + _EULER_GAMMA + 0.5 / nb + tail
    return xp.where(n < DIRECT_SUM_BELOW, exact, asym)


def harmonic2_xp(n: Array, xp: Any) -> Array:
    """``H2_N`` elementwise with ``xp``: direct sum for ``N < 30``, asymptotic beyond.

    ``H2_N = pi^2/6 - [1/N - 1/(2N^2) + 1/(6N^3) - 1/(30N^5) + 1/(42N^7) - 1/(30N^9)
    + 5/(66N^11)]``.
    """
    zero = _const(n, 0.0)
    exact = zero
    for j in range(1, DIRECT_SUM_BELOW):
        exact = exact + xp.where(n >= j, _const(n, 1.0 / (j * j)), zero)
    nb = _maximum(xp, n, _const(n, float(DIRECT_SUM_BELOW)))
    inv = 1.0 / nb
    x = inv * inv
    tail = inv * (
        1.0
        + inv * (-0.5 + inv * (1.0 / 6 + x * (-1.0 / 30 + x * (1.0 / 42 + x * (-1.0 / 30 + x * 5.0 / 66)))))
    )
    asym = _ZETA_2 - tail
    return xp.where(n < DIRECT_SUM_BELOW, exact, asym)


def hits_terms(n: Array, k: Any, xp: Any) -> tuple[Array, Array]:
    """Per-task ``(E, Var)`` of ``I[r <= k]``; ``k`` a Python number or broadcastable array."""
    p = _minimum(xp, _const(n, k), n) / n
    return p, p * (1.0 - p)


def reciprocal_rank_terms(n: Array, xp: Any) -> tuple[Array, Array]:
    """Per-task ``(E, Var)`` of ``1/r``: ``H_N/N`` and ``H2_N/N - (H_N/N)^2``."""
    mean = harmonic_xp(n, xp) / n
    var = harmonic2_xp(n, xp) / n - mean * mean
    return mean, _maximum(xp, var, _const(n, 0.0))


def rank_terms(n: Array, xp: Any) -> tuple[Array, Array]:
    """Per-task ``(E, Var)`` of ``r``: ``(N+1)/2`` and ``(N-1)(N+1)/12``."""
    return (n + 1.0) * 0.5, (n - 1.0) * (n + 1.0) / 12.0


def _weights_like(n: Array, w: Array | None) -> Array:
    return _const(n, 1.0) if w is None else w


def linear_stream_terms(mean: Array, var: Array, w: Array | None) -> dict[str, Array]:
    """State contributions of a weighted mean metric: ``weight``, ``mean``, ``var``.

    ``{"weight": w, "mean": w E_i, "var": w^2 V_i}``; summed over tasks they give
    ``E = mean / weight`` and ``Var = var / weight^2`` (:func:`moments_from_sums`).
    """
    w = _weights_like(mean, w)
    return {"weight": w, "mean": w * mean, "var": w * w * var}


def hits_stream_terms(n: Array, w: Array | None, xp: Any, k: Any = 10) -> dict[str, Array]:
    """Streaming contributions for ``E``/``Var`` of Hits@k (keys ``weight``, ``mean``, ``var``)."""
    return linear_stream_terms(*hits_terms(n, k, xp), w)


def mrr_stream_terms(n: Array, w: Array | None, xp: Any) -> dict[str, Array]:
    """Streaming contributions for ``E``/``Var`` of the MRR (keys ``weight``, ``mean``, ``var``)."""
    return linear_stream_terms(*reciprocal_rank_terms(n, xp), w)


def mean_rank_stream_terms(n: Array, w: Array | None, xp: Any) -> dict[str, Array]:
    """Streaming contributions for ``E``/``Var`` of the mean rank (keys as for the MRR)."""
    return linear_stream_terms(*rank_terms(n, xp), w)


def moments_from_sums(sums: Mapping[str, Any]) -> tuple[float, float]:
    """``(E, Var) = (sum mean / sum weight, sum var / (sum weight)^2)`` from summed terms."""
    for key in ("weight", "mean", "var"):
        if key not in sums:
            raise ValueError(f"sums must contain {key!r}; got keys {sorted(sums)}")
    total = float(np.asarray(sums["weight"], dtype=np.float64))
    if not total > 0:
        raise ValueError(f"sums['weight'] must be positive (no tasks seen?), got {total}")
    mean = float(np.asarray(sums["mean"], dtype=np.float64)) / total
    var = float(np.asarray(sums["var"], dtype=np.float64)) / (total * total)
    return mean, var


def gmr_stream_terms(n: Array, w: Array | None, xp: Any, order: int = DEFAULT_GMR_ORDER) -> dict[str, Array]:
    r"""Per-task contributions to the GMR state (a truncated cumulant series), all shape ``n``.

    ``sum_i ln E[r_i^{a_i}] = sum_m F_m / (m! W^m)`` with ``F_m = sum_i w_i^m kappa_m(N_i)``
    (:func:`log_rank_cumulants`), so the state is a set of plain sums over tasks:

    * ``"weight"``: ``w_i`` (sums to ``W``);
    * ``"cumulant_m"`` for ``m = 1 .. order``: ``w_i^m kappa_m(N_i)`` (sums to ``F_m``);
    * ``"tail"``: ``w_i^(order+1)`` for tasks with ``N_i > 1`` (0 otherwise), for the bound.

    Weights are raised to the power ``order + 1``: keep them below ~1e300^(1/(order+1)).
    Reduce the summed state with :func:`gmr_moments_from_sums`.
    """
    if not isinstance(order, int) or not 1 <= order <= MAX_GMR_ORDER:
        raise ValueError(f"order must be an int in [1, {MAX_GMR_ORDER}], got {order!r}")
    w = _weights_like(n, w)
    kappa = log_rank_cumulants(n, order, xp)
    out = {"weight": w}
    wp = w
    for m in range(1, order + 1):
        out[f"cumulant_{m}"] = wp * kappa[m - 1]
        wp = wp * w
    out["tail"] = xp.where(n > 1, wp, _const(n, 0.0))
    return out


def gmr_moments_from_sums(sums: Mapping[str, Any]) -> tuple[float, float, float]:
    r"""``(E[GMR], Var[GMR], error_bound)`` from the summed :func:`gmr_stream_terms`.

    With ``W = sums["weight"]``, ``F_m = sums["cumulant_m"]`` (m = 1..M) and
    ``T = sums["tail"]``:

    .. math::

        \ln E \approx \Lambda = \sum_{m=1}^{M} \frac{F_m}{m! W^m},\qquad
        \ln(1 + V/E^2) \approx \Upsilon = \sum_{m=2}^{M} \frac{(2^m - 2) F_m}{m! W^m},

        E \approx e^{\Lambda},\qquad V \approx e^{2\Lambda} \operatorname{expm1}(\Upsilon).

    **Error bound.**  ``error_bound`` bounds the relative truncation error of *both* returned
    values, ``|E_stream / E - 1|`` and ``|Var_stream / Var - 1|`` (floating-point rounding,
    ~1e-13 relative in the tests, is not included); it is ``inf`` when the series is not known
    to converge.  Proof: for every ``N >= 1`` and ``m >= 2``,
    ``|kappa_m(N)| <= B m! 2^m`` with ``B = 3.62`` (:data:`GMR_CUMULANT_BOUND`), by Cauchy's
    estimate on the disk ``|z| <= 1/2`` of an analytic branch ``phi`` of ``ln E[r^z]`` minus a
    linear term, using ``|phi| <= B`` there:

    * ``N <= 99``: ``X = ln r`` lies in ``[0, l]``, ``l = ln N``; with ``t = l/4 < pi/2``,
      ``w = E[exp(z (X - l/2))]`` has ``Re w >= e^-t cos t > 0`` and ``|w| <= e^t``, so
      ``|ln w| <= t - ln cos t + pi/2 <= 3.62``;
    * ``N >= 100``: ``E[(r/N)^z] = 1/(1+z) + c`` where ``c`` compares the Riemann sum with
      ``int_0^1 x^z dx``; cell by cell ``|c| <= N^(rho-1) (rho zeta(1+rho)/2 + 1 + 1/(1-rho))``,
      (``rho = 1/2``), so ``delta = |(1+z) c| <= 0.548`` and, as ``|ln(1+u)| <= -ln(1-|u|)``,
      ``|ln E[(r/N)^z]| <= ln 2 - ln(1 - delta) <= 1.49``.

    Hence with ``a_i = w_i / W`` the neglected tail of ``sum_i K_i(a_i)`` is at most
    ``B sum_i (2 a_i)^(M+1) / (1 - 2 a_i)``, and that of ``Upsilon`` (terms ``(2^m - 2)
    kappa_m a^m / m!``) at most ``B sum_i (4 a_i)^(M+1) / (1 - 4 a_i)``.  With
    ``Q_c = c^(M+1) T / W^(M+1)`` and ``q_c = Q_c^(1/(M+1)) >= c max_i a_i`` (tasks with
    ``N_i = 1`` have no cumulants and are left out of ``T``):

    .. math::

        \varepsilon_\Lambda = \frac{B Q_2}{1 - q_2},\qquad
        \varepsilon_\Upsilon = \frac{B Q_4}{1 - q_4}\quad(\text{inf unless } q < 1),

    ``|E_s/E - 1| <= expm1(eps_L)`` and ``Var`` lies in
    ``[e^{2(L - eps_L)} expm1(max(U - eps_U, 0)), e^{2(L + eps_L)} expm1(U + eps_U)]``.

    For ``m`` equally weighted tasks this is about ``B m (2/m)^(M+1)`` for ``E`` and
    ``B 4^(M+1) m^(1-M) / Var[ln r]`` for ``Var``: with ``M = 12`` already below 1e-15 from
    a few hundred tasks on, but useless (or ``inf``) for a handful of tasks, or when one task
    carries a large share of the weight (``a_i >= 1/4``); use the exact
    :func:`gmr_expectation` / :func:`gmr_variance` there.
    """
    orders = []
    m = 1
    while f"cumulant_{m}" in sums:
        orders.append(m)
        m += 1
    if not orders or "weight" not in sums or "tail" not in sums:
        raise ValueError(
            "sums must contain 'weight', 'tail' and 'cumulant_1' .. 'cumulant_M' "
            f"(from gmr_stream_terms); got keys {sorted(sums)}"
        )
    order = orders[-1]
    extra = sorted(
        k for k in sums if k.startswith("cumulant_") and k not in {f"cumulant_{i}" for i in orders}
    )
    if extra:
        raise ValueError(f"sums has non-contiguous cumulant keys {extra}; expected 1..{order}")
    total = float(np.asarray(sums["weight"], dtype=np.float64))
    if not total > 0:
        raise ValueError(f"sums['weight'] must be positive (no tasks seen?), got {total}")
    coefficients = [
        np.float64(float(np.asarray(sums[f"cumulant_{i}"], dtype=np.float64)) / math.factorial(i))
        for i in orders
    ]
    tail = np.float64(float(np.asarray(sums["tail"], dtype=np.float64)))
    with np.errstate(all="ignore"):
        expectation, variance, bound = gmr_moments_xp(np.float64(total), coefficients, tail, np)
    return float(expectation), float(variance), float(bound)


def gmr_moments_xp(
    total: Array, coefficients: Sequence[Array], tail: Array, xp: Any
) -> tuple[Array, Array, Array]:
    r"""The GMR reducer of :func:`gmr_moments_from_sums` as elementwise array code.

    ``total`` is ``W``, ``coefficients[m - 1]`` the Taylor coefficient ``F_m / m!`` (m = 1..M)
    and ``tail`` the summed ``"tail"`` term; returns ``(E[GMR], Var[GMR], error_bound)`` as
    arrays of ``xp`` (``numpy`` or ``keras.ops``; see :func:`gmr_moments_from_sums` for the
    formulas and the bound).  Arithmetic, ``exp``, ``expm1``, ``power``, ``maximum``,
    ``isinf`` and ``where`` only, every branch computed and chosen with ``where``, so it
    traces under ``jit`` / ``tf.function``.  No validation (numpy callers wrap it in
    ``np.errstate``: the discarded branches may overflow).

    The series are evaluated by Horner's rule in ``1/W`` (``(((c_M / W + c_{M-1}) / W + ...)
    + c_1) / W``): no power ``W^m`` or ``W^-m`` is formed, so nothing over- or underflows
    before the terms themselves do (which matters for float32 state).
    """
    order = len(coefficients)
    log_e: Any = 0.0
    upsilon: Any = 0.0
    for m in range(order, 0, -1):
        c = coefficients[m - 1]
        log_e = (log_e + c) / total
        upsilon = (upsilon + (2.0**m - 2.0) * c if m >= 2 else upsilon) / total
    upsilon = _maximum(xp, upsilon, 0.0)
    expectation = xp.exp(log_e)
    variance = xp.exp(2.0 * log_e) * xp.expm1(upsilon)

    # truncation bounds: Q_c = c^(M+1) T / W^(M+1), q_c = Q_c^(1/(M+1))
    base = tail
    for _ in range(order + 1):
        base = base / total

    def eps(c: float) -> Array:
        q_sum = c ** (order + 1) * base
        q_max = xp.power(_maximum(xp, q_sum, 0.0), 1.0 / (order + 1))
        bounded = GMR_CUMULANT_BOUND * q_sum / xp.where(q_max < 1.0, 1.0 - q_max, 1.0)
        return xp.where(base <= 0.0, 0.0, xp.where(q_max < 1.0, bounded, math.inf))

    eps_l, eps_u = eps(2.0), eps(4.0)
    rel_e = xp.expm1(eps_l)
    positive = upsilon > 0.0
    den = xp.where(positive, xp.expm1(upsilon), 1.0)
    hi = xp.expm1(2.0 * eps_l) + xp.exp(2.0 * eps_l) * (xp.expm1(upsilon + eps_u) / den - 1.0)
    lo = 1.0 - xp.exp(-2.0 * eps_l) * xp.expm1(_maximum(xp, upsilon - eps_u, 0.0)) / den
    bound = _maximum(xp, rel_e, xp.where(positive, _maximum(xp, hi, lo), math.inf))
    bound = xp.where(xp.isinf(eps_l) | xp.isinf(eps_u) | xp.isinf(variance), math.inf, bound)
    bound = xp.where((eps_l == 0.0) & (eps_u == 0.0), 0.0, bound)
    return expectation, variance, bound


# ==========================================================================================
# the median rank and the median absolute deviation, streamed as a bounded histogram

#: ``Phi^{-1}(3/4)``: the median absolute deviation of a normal distribution in units of its
#: standard deviation; a MAD divided by it estimates the standard deviation (scipy's
#: ``median_abs_deviation(..., scale="normal")``, the form PyKEEN reports)
MAD_NORMAL_SCALE = 0.6744897501960817


class RankBins:
    """The bins of a rank histogram (host float64 arrays of length ``H``).

    Bin ``i`` holds the ranks in ``[edges[i], edges[i + 1])`` (the last bin is open above).
    Ranks are multiples of 1/2 (realistic ranks are half-integers), so the values a bin can
    hold are ``low[i], low[i] + 1/2, ..., high[i]``; ``mid`` is the middle of that range, the
    value reported for the bin, and ``high - low`` is 0 for a bin of one possible value
    (every bin below the exact limit)."""

    def __init__(self, edges: np.ndarray) -> None:
        self.edges = edges
        self.low = edges
        self.high = np.append(edges[1:] - 0.5, math.inf)
        self.mid = np.append((edges[:-1] + edges[1:] - 0.5) / 2.0, edges[-1])

    def __len__(self) -> int:
        return int(self.edges.shape[0])


def rank_bins(exact: int = 1024, per_octave: int = 64, top: float = 2.0**31) -> RankBins:
    """Histogram bins for ranks: one bin per half-integer from 1 up to ``exact`` (ranks below
    ``exact`` are kept exactly), then log-spaced edges ``exact * 2^(j / per_octave)`` rounded
    up to half-integers (a bin's relative width is at most about ``2^(1 / per_octave) - 1``,
    1.09% for 64 per octave) up to ``top``; ranks from ``top`` on share the last bin (its
    values are unbounded: an error bound of ``inf`` where the median falls there)."""
    if isinstance(exact, bool) or not isinstance(exact, int) or exact < 1:
        raise ValueError(f"the exact limit of the rank histogram must be an int >= 1, got {exact!r}")
    if isinstance(per_octave, bool) or not isinstance(per_octave, int) or not 1 <= per_octave <= 1024:
        raise ValueError(f"bins per octave must be an int in [1, 1024], got {per_octave!r}")
    exact_edges = np.arange(2, 2 * exact + 1, dtype=np.float64) / 2.0
    steps = np.arange(1, math.ceil(per_octave * math.log2(max(top / exact, 2.0))) + 1)
    log_edges = np.ceil(2.0 * exact * np.exp2(steps / per_octave)) / 2.0
    edges = np.unique(np.concatenate([exact_edges, log_edges[log_edges > exact]]))
    return RankBins(edges)


def _weighted_median_np(values: np.ndarray, weights: np.ndarray, sort: bool) -> float:
    """:func:`_weighted_median_xp` on the host, in few numpy calls (the same arithmetic)."""
    if sort:
        order = np.argsort(values, kind="stable")
        values, weights = values[order], weights[order]
    c = np.cumsum(weights)
    cdf = c / (c[-1] if c[-1] > 0.0 else 1.0)
    j = min(int(np.searchsorted(cdf, 0.5)), cdf.size - 1)  # the first cdf >= 1/2
    if cdf[j] == 0.5:
        after = np.flatnonzero(c > c[j])
        if after.size:
            return (values[j] + values[after[0]]) / 2.0
    return float(values[j])


def _weighted_median_xp(values: Array, weights: Array, sort: bool, xp: Any) -> Array:
    """PyKEEN's weighted median (``pykeen.metrics.utils.weighted_median``: the first value at
    which the normalised cumulative weight reaches 1/2, the mean of it and the next value when
    it is exactly 1/2) of ``values`` with ``weights`` (1-D; zero weights are no values), as
    traceable ``xp`` code (``numpy`` or ``keras.ops``). ``sort``: whether ``values`` must be
    ordered first (bins are ordered already)."""
    if sort:
        order = xp.argsort(values)
        values, weights = xp.take(values, order), xp.take(weights, order)
    c = xp.cumsum(weights)
    total = c[-1]
    cdf = c / xp.where(total > 0.0, total, 1.0)
    j = xp.argmax(xp.cast(cdf >= 0.5, "int32") if xp is not np else cdf >= 0.5)
    c_j = xp.take(c, j)
    after = c > c_j
    nxt = xp.argmax(xp.cast(after, "int32") if xp is not np else after)
    v_j = xp.take(values, j)
    at_half = (xp.take(cdf, j) == 0.5) & xp.any(after)
    return xp.where(at_half, (v_j + xp.take(values, nxt)) / 2.0, v_j)


def histogram_median_xp(hist: Array, bins: RankBins, xp: Any) -> tuple[Array, Array, Array, Array]:
    r"""Median rank and median absolute deviation of a rank histogram, with error bounds.

    Returns ``(median, median_bound, mad, mad_bound)`` (absolute bounds, in ranks; 0 while
    every rank that matters lies below the exact limit of ``bins``). Each rank is represented
    by the middle of its bin; the true value of every rank lies in its bin's
    ``[low, high]``, and a weighted median is non-decreasing in every value, so the true
    median lies between the medians of the lows and of the highs: those give the bound. The
    deviations ``|r - median|`` are bounded per bin the same way (the distance between the
    bin's range and the median's range, and the largest distance), giving the MAD's bound.

    The MAD is PyKEEN's unweighted form, ``median(|r - median(r)|) / Phi^{-1}(3/4)``
    (:data:`MAD_NORMAL_SCALE`; with weights, weighted medians). Traceable ``xp`` code
    (``numpy`` or ``keras.ops``: three sorts of ``H`` values)."""

    def const(x: np.ndarray) -> Array:
        return x if xp is np else xp.cast(xp.convert_to_tensor(x), hist.dtype)

    low, high, mid = const(bins.low), const(bins.high), const(bins.mid)
    if xp is np:  # on the host only the bins holding ranks matter (a traced shape is fixed)
        held = np.flatnonzero(hist > 0.0) if np.any(hist > 0.0) else np.arange(1)
        hist, low, high, mid = hist[held], low[held], high[held], mid[held]

        def weighted_median(values: Array, sort: bool) -> Array:
            return np.float64(_weighted_median_np(values, hist, sort))

    else:

        def weighted_median(values: Array, sort: bool) -> Array:
            return _weighted_median_xp(values, hist, sort, xp)

    median = weighted_median(mid, False)
    if xp is np and np.array_equal(low, high):  # every held bin holds one rank: all exact
        mad = weighted_median(np.abs(mid - median), True)
        return median, np.float64(0.0), mad / MAD_NORMAL_SCALE, np.float64(0.0)
    m_low = weighted_median(low, False)
    m_high = weighted_median(high, False)
    dev = xp.abs(mid - median)
    mad = weighted_median(dev, True)
    dev_low = _maximum(xp, _maximum(xp, low - m_high, m_low - high), 0.0)
    dev_high = _maximum(xp, high - m_low, m_high - low)
    mad_low = weighted_median(dev_low, True)
    mad_high = weighted_median(dev_high, True)
    median_bound = _maximum(xp, median - m_low, m_high - median)
    mad_bound = _maximum(xp, mad - mad_low, mad_high - mad)
    return median, median_bound, mad / MAD_NORMAL_SCALE, mad_bound / MAD_NORMAL_SCALE
