r"""Special sums and series of the rank family: harmonic numbers, ``zeta(-a)``, the
Euler-Maclaurin weights of power sums, and the cumulants of ``ln r`` for ``r ~ U{1..N}``.

Two implementations of the harmonic numbers live here: :func:`harmonic` / :func:`harmonic2`
(scipy's digamma/polygamma, for host numpy arrays: one pass) and :func:`harmonic_xp` /
:func:`harmonic2_xp` (a direct sum below :data:`DIRECT_SUM_BELOW`, an asymptotic series
beyond, written against an array namespace ``xp`` with only ``log``, ``where`` and
arithmetic, so the streamed kernel can run them on its own arrays and under ``jit``).
Both agree to a few units in the last place.

The cumulants of ``ln r`` (:func:`log_rank_cumulants`) feed the GMR's closed-form variance
(:mod:`~rankstream.core.ranks.closed_forms`) and its streamed form
(:mod:`~rankstream.core.ranks.streamed_forms`); :data:`GMR_CUMULANT_BOUND` bounds them (see
:func:`~rankstream.core.ranks.streamed_forms.gmr_moments_from_sums` for the proof).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

__all__ = [
    "DEFAULT_GMR_ORDER",
    "DIRECT_SUM_BELOW",
    "FLOAT32_GMR_ORDER",
    "GMR_CUMULANT_BOUND",
    "GMR_CUMULANT_RADIUS",
    "MAX_GMR_ORDER",
    "harmonic",
    "harmonic2",
    "harmonic2_xp",
    "harmonic_xp",
    "log_rank_cumulants",
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
