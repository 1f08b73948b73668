"""Every list metric's moments under a uniformly random ranking, from what the relevant-ranks
producer holds: each list's size ``N``, its relevant count ``R`` (and for DCG its slots' gains)
and the cut-offs ``k``. Closed forms and prefix sums over the discounts, host float64, ``O(R)``
work per list and ``k``: no ``N``-long row, so a query over a catalog of a million items costs
what a short list costs.

With ``k' = min(k, N)`` (``k`` past the end of a list is clipped to it):

* hits in the top ``k'`` (precision, recall, R-precision): hypergeometric,
  ``E = k' R / N``, ``Var = k' (R / N) (1 - R / N) (N - k') / (N - 1)``;
* hit rate: ``1 - T(k')`` with ``T(k) = C(N - k, R) / C(N, R) = prod_{i < R} (N - k - i) / (N - i)``
  the chance that no relevant item is in the top ``k`` (``R`` factors, not ``k``);
* reciprocal rank: ``E[1 / J; J <= k]`` and ``E[1 / J^2; J <= k]`` of the first relevant rank
  ``J``, ``P(J = j) = C(N - j, R - 1) / C(N, R)``, by a recursion over ``R`` (:func:`first_rank_moments`)
  instead of a sum over ``k'`` ranks;
* AP@k: the falling-factorial ratios ``m_s = R^(s) / N^(s)`` and the harmonic numbers
  ``H_k', H2_k'`` (digamma and trigamma past a few terms);
* DCG@k: Hoeffding's linear permutation statistic over the gains (every item that is not a slot
  has gain 0), ``E = (s1 / N) D1(k')``, ``Var = [D2(k') - D1(k')^2 / N] (s2 - s1^2 / N) / (N - 1)``
  with ``D1, D2`` the prefix sums of the discounts and of their squares (the default
  ``1 / log2(j + 1)`` by Euler-Maclaurin past rank 255, in constant memory; a callable discount
  through one table of ``min(max k, max N)`` prefix sums shared by the batch's lists).

Derivations and the enumerations that check them: ``docs/chance.md`` (the dense forms) and
``docs/catalog.md`` (these forms over relevant ranks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import special

from rankstream.core.relevant.ranks import DIRECT_HARMONIC, harmonic_range, ratio

__all__ = [
    "ap_moments",
    "ap_raw_moments",
    "clipped",
    "discount_sums",
    "first_rank_moments",
    "harmonic2",
    "hits_moments",
    "linear_statistic_moments",
    "miss_chance",
]


def clipped(ks: Sequence[int], n: np.ndarray) -> np.ndarray:
    """``k' = min(k, N)`` ``(Q, len(ks))``."""
    return np.minimum(np.asarray(n, np.float64)[:, None], np.asarray([float(k) for k in ks])[None, :])


def hits_moments(kk: np.ndarray, n: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the relevant items in the top ``k'`` (hypergeometric) ``(Q, len(k))``:
    ``k' p`` and ``k' p (1 - p) (N - k') / (N - 1)``, ``p = R / N`` (0 for ``N <= 1``)."""
    p = ratio(r, n)[:, None]
    mean = kk * p
    return mean, ratio(kk * p * (1.0 - p) * (n[:, None] - kk), (n - 1.0)[:, None] + 0.0 * kk)


def miss_chance(kk: np.ndarray, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``T(k') = prod_{i < R} (N - k' - i) / (N - i)``: the chance that a random ranking holds
    no relevant item in its top ``k'`` ``(Q, len(k))`` (1 where ``R = 0``)."""
    out = np.ones(kk.shape)
    nn, rr = n[:, None], r[:, None]
    for i in range(int(r.max(initial=0.0))):
        step = np.maximum(nn - kk - i, 0.0) / np.maximum(nn - i, 1.0)
        out = out * np.where(i < rr, step, 1.0)
    return out


def harmonic2(k: np.ndarray) -> np.ndarray:
    """``H2_k = sum_{j <= k} 1 / j^2`` elementwise (``k >= 0`` whole): term by term for short
    ranges, ``pi^2 / 6 - trigamma(k + 1)`` past them."""
    k = np.asarray(k, np.float64)
    out = np.zeros(k.shape)
    long = k > DIRECT_HARMONIC
    if long.any():
        out[long] = np.pi**2 / 6.0 - special.polygamma(1, k[long] + 1.0)
    j = np.arange(1.0, DIRECT_HARMONIC + 1.0)
    short = ~long
    if short.any():
        out[short] = np.where(j <= k[short][..., None], 1.0 / (j * j), 0.0).sum(axis=-1)
    return out


def first_rank_moments(kk: np.ndarray, n: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(E[1 / J; J <= k'], E[1 / J^2; J <= k'])`` ``(Q, len(k))`` of the first relevant rank
    ``J`` of a random ranking (0 where ``R = 0``), with ``P(J = j) = C(N - j, R - 1) / C(N, R)``.

    ``F_r = sum_{j <= k} C(m_r - j, r) / j`` with ``m_r = N - R + 1 + r`` (every term past
    ``k* = min(k', N - R + 1)`` is 0) satisfies, through ``C(m - j, r) = (m - j) / r C(m - 1 - j,
    r - 1)`` and the hockey-stick sum, for ``G_r = F_r / C(m_r, r)``:
    ``G_0 = H_{k*}``, ``G_r = G_{r-1} - (N - R + 1) / (r m_r) (1 - T_r)`` with
    ``T_r = prod_{i <= r} (N - R - k* + i) / (N - R + i)``; and with ``1 / j^2``:
    ``G2_0 = H2_{k*}``, ``G2_r = G2_{r-1} - G_{r-1} / m_r``. Then
    ``E[1 / J] = G_{R-1} R / (N - R + 1)`` (likewise ``G2``): ``R`` steps, not ``k'`` terms."""
    nn, rr = n[:, None] + 0.0 * kk, r[:, None] + 0.0 * kk
    has = (rr > 0) & (nn >= rr)
    free = np.where(has, nn - rr, 0.0)  # N - R
    ks = np.where(has, np.minimum(kk, free + 1.0), 0.0)  # k*
    g = harmonic_range(np.ones(ks.shape), ks)
    g2 = harmonic2(ks)
    t = np.ones(kk.shape)
    for step in range(1, int(r.max(initial=0.0))):
        on = has & (step < rr)
        m = free + 1.0 + step
        t = t * np.maximum(free - ks + step, 0.0) / (free + step)
        g_next = g - (free + 1.0) / (step * m) * (1.0 - t)
        g2 = np.where(on, g2 - g / m, g2)
        g = np.where(on, g_next, g)
    scale = np.where(has, rr / (free + 1.0), 0.0)
    # every item relevant (N = R): J = 1 surely, both moments exactly 1 (the recursion's last
    # rounding would leave 1 + 2^-52, and a chance-adjusted value (v - E) / (1 - E) of 1, not 0/0)
    sure = has & (free == 0.0)
    return np.where(sure, 1.0, g * scale), np.where(sure, 1.0, g2 * scale)


def _falling(x: np.ndarray, s: int) -> np.ndarray:
    out = np.asarray(x, np.float64).copy()
    for i in range(1, s):
        out = out * (x - float(i))
    return out


def ap_moments(kk: np.ndarray, n: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(E[W], Var[W])`` of ``W_k = sum_{i <= j <= k'} X_i X_j / j`` (AP@k's numerator) from
    ``m_s = R^(s) / N^(s)`` and ``H_k', H2_k'`` (the formulas of ``docs/chance.md``)."""
    h1 = harmonic_range(np.ones(kk.shape), kk)
    h2 = harmonic2(kk)
    m = [ratio(_falling(r, s), _falling(n, s))[:, None] for s in range(1, 5)]
    mean, second = ap_raw_moments(m, kk, h1, h2)
    return mean, np.maximum(second - mean * mean, 0.0)


def ap_raw_moments(m: Sequence[Any], kk: Any, h1: Any, h2: Any) -> tuple[Any, Any]:
    """``(E[W_k], E[W_k^2])`` of AP@k's numerator from the falling-factorial ratios
    ``m = (m_1, m_2, m_3, m_4)``, ``k'`` and ``H_k', H2_k'``: arithmetic operators alone, so
    the dense path's arrays (any backend) and the host arrays here share it:
    ``E[W] = m1 H + m2 (k - H)``, ``E[W^2] = m1 H2 + m2 (2 H^2 + 3 H - 5 H2)
    + m3 (2k H + 5k - 5 H^2 - 9 H + 7 H2) + m4 (k^2 - 2k H - 5k + 3 H^2 + 6 H - 3 H2)``."""
    mean = m[0] * h1 + m[1] * (kk - h1)
    second = (
        m[0] * h2
        + m[1] * (2.0 * h1 * h1 + 3.0 * h1 - 5.0 * h2)
        + m[2] * (2.0 * kk * h1 + 5.0 * kk - 5.0 * h1 * h1 - 9.0 * h1 + 7.0 * h2)
        + m[3] * (kk * kk - 2.0 * kk * h1 - 5.0 * kk + 3.0 * h1 * h1 + 6.0 * h1 - 3.0 * h2)
    )
    return mean, second


#: the default discount's sums are taken term by term up to this rank, by Euler-Maclaurin past it
DIRECT_DISCOUNTS = 256


def _log_power_sums(top: np.ndarray, a: float) -> np.ndarray:
    """``sum_{i = A + 1}^{top} ln(i)^-a`` (``A`` = :data:`DIRECT_DISCOUNTS`, ``top > A``, ``a`` 1 or
    2) by Euler-Maclaurin: the integral (``li``, and ``li(x) - x / ln x`` for ``a = 2``, through
    ``Ei(ln x)``), the ends' half terms and the corrections ``f1 / 12 - f3 / 720`` with the
    derivatives ``f1 = -a u^(-a-1) / x`` and ``f3 = -a (2 u^(-a-1) + 3 (a + 1) u^(-a-2) + (a + 1)
    (a + 2) u^(-a-3)) / x^3``, ``u = ln x`` (the next term is below 1e-19 from ``A = 256`` on)."""
    lo = np.asarray(DIRECT_DISCOUNTS + 1.0)

    def integral(x: np.ndarray) -> np.ndarray:
        li = special.expi(np.log(x))
        return li if a == 1 else li - x / np.log(x)

    def f(x: np.ndarray) -> np.ndarray:
        return np.log(x) ** -a

    def f1(x: np.ndarray) -> np.ndarray:
        return -a * np.log(x) ** (-a - 1) / x

    def f3(x: np.ndarray) -> np.ndarray:
        u = np.log(x)
        return (
            -a * (2 * u ** (-a - 1) + 3 * (a + 1) * u ** (-a - 2) + (a + 1) * (a + 2) * u ** (-a - 3)) / x**3
        )

    return (
        integral(top) - integral(lo) + (f(top) + f(lo)) / 2.0
        + (f1(top) - f1(lo)) / 12.0 - (f3(top) - f3(lo)) / 720.0
    )  # fmt: skip


def _log2_discount_sums(kk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``D1, D2`` of ``1 / log2(j + 1)`` at every ``k'``: a table below
    :data:`DIRECT_DISCOUNTS`, Euler-Maclaurin over ``ln(i)^-1`` and ``ln(i)^-2`` (``i = j + 1``)
    past it (no table longer than the threshold, whatever ``k'``)."""
    d = 1.0 / np.log2(np.arange(2.0, DIRECT_DISCOUNTS + 1.0))  # ranks 1 .. A - 1: i = 2 .. A
    t1, t2 = np.concatenate([[0.0], np.cumsum(d)]), np.concatenate([[0.0], np.cumsum(d * d)])
    idx = np.minimum(kk, DIRECT_DISCOUNTS - 1.0).astype(np.int64)
    out1, out2 = t1[idx], t2[idx]
    far = kk >= DIRECT_DISCOUNTS
    if far.any():
        top = kk[far] + 1.0  # ranks A .. k': the sum over i = A + 1 .. k' + 1 of ln(2)^a / ln(i)^a
        out1[far] = t1[-1] + np.log(2.0) * _log_power_sums(top, 1)
        out2[far] = t2[-1] + np.log(2.0) ** 2 * _log_power_sums(top, 2)
    return out1, out2


def discount_sums(
    discount: Callable[[np.ndarray], np.ndarray] | None, kk: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(D1(k'), D2(k'))``: the sums of the first ``k'`` discounts and of their squares
    (``discount`` None: ``1 / log2(j + 1)``, :func:`_log2_discount_sums`, constant memory; a
    callable: one table of its prefix sums up to the deepest ``k'``, shared by the lists)."""
    if discount is None:
        return _log2_discount_sums(kk)
    top = int(kk.max(initial=0.0))
    d = np.broadcast_to(np.asarray(discount(np.arange(1.0, top + 1.0)), np.float64), (top,))
    d1, d2 = np.concatenate([[0.0], np.cumsum(d)]), np.concatenate([[0.0], np.cumsum(d * d)])
    idx = kk.astype(np.int64)
    return d1[idx], d2[idx]


def linear_statistic_moments(
    s1: np.ndarray, s2: np.ndarray, n: np.ndarray, d1: np.ndarray, d2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of ``sum_{j <= k'} x_(j) d_j`` under a random order of the list's
    ``N`` gains ``x`` of sum ``s1`` and sum of squares ``s2`` (Hoeffding):
    ``(s1 / N) D1`` and ``[D2 - D1^2 / N] (s2 - s1^2 / N) / (N - 1)``."""
    mean_x = ratio(s1, n)
    spread = np.maximum(s2 - mean_x * s1, 0.0)
    var = np.maximum(d2 - ratio(d1 * d1, n[:, None] + 0.0 * d1), 0.0) * ratio(spread, n - 1.0)[:, None]
    return mean_x[:, None] * d1, var
