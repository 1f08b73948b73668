"""Standard errors, confidence intervals and paired t statistics from streamed sums.

The sampling units are the lists (or tasks). A weighted mean ``m = sum(w v) / sum(w)`` over
``n`` units with weights ``w`` has the linearised (ratio-estimator) variance

    Var(m) ~= n / (n - 1) * sum(w^2 (v - m)^2) / sum(w)^2,

which is ``s^2 / n`` (``s^2`` the sample variance) for unit weights. Expanding the square,
``sum(w^2 (v - m)^2) = S_w2v2 - 2 m S_w2v + m^2 S_w2`` with ``S_w2v2 = sum(w^2 v^2)``,
``S_w2v = sum(w^2 v)`` and ``S_w2 = sum(w^2)``: plain sums, so a state keeps them and they merge
by addition. The derivation and its checks are in ``docs/statistics.md``.

The interval is Student's ``t`` with ``n - 1`` degrees of freedom:
``m +- t_{(1 + level) / 2, n - 1} * se``. It assumes independent units and a mean close to
normal: poor with few units or values piled at 0 or 1.

Every function here is elementwise on ``xp`` (numpy or ``keras.ops``), except the quantiles
and tail probabilities of ``t``, which come from scipy on the host (:func:`t_quantile`,
:func:`t_two_sided_p`). Where the degrees of freedom are a traced value (a Keras ``result()``
under ``jit``), :func:`t_quantile_xp` gives the critical value elementwise on ``xp``: exact
(scipy's, tabulated on the host for the level) up to :data:`T_TABLE_DF` degrees of freedom, the
Cornish-Fisher expansion in ``1 / df`` above.
"""

from __future__ import annotations

import functools
from statistics import NormalDist
from typing import Any

import numpy as np

Array = Any

#: the default confidence level of an interval
DEFAULT_LEVEL = 0.95


def check_level(level: Any, name: str = "confidence") -> float:
    """``level`` as a float in (0, 1); a ``ValueError`` naming ``name`` otherwise."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0.0 < level < 1.0:
        raise ValueError(f"{name} must be a confidence level in (0, 1), e.g. 0.95, got {level!r}")
    return float(level)


def weighted_variance_of_mean(
    n: Array, w_sum: Array, w2_sum: Array, w2v_sum: Array, w2v2_sum: Array, mean: Array, xp: Any = np
) -> Array:
    """``n / (n - 1) * sum(w^2 (v - m)^2) / sum(w)^2`` from the sums (NaN where ``n < 2``).
    The sum of squares is clipped at 0 (cancellation may leave a tiny negative)."""
    ss = w2v2_sum - 2.0 * mean * w2v_sum + mean * mean * w2_sum
    ss = xp.where(ss > 0, ss, 0.0 * ss)
    ok = (n > 1) & (w_sum > 0)
    safe_n = xp.where(ok, n, 2.0 + 0.0 * n)
    safe_w = xp.where(ok, w_sum, 1.0 + 0.0 * w_sum)
    var = safe_n / (safe_n - 1.0) * ss / (safe_w * safe_w)
    return xp.where(ok, var, float("nan") + 0.0 * var)


def t_quantile(level: float, df: Any) -> np.ndarray:
    """The two-sided critical value ``t_{(1 + level) / 2, df}`` (NaN where ``df < 1``)."""
    from scipy import stats

    df = np.asarray(df, dtype=np.float64)
    safe = np.where(df >= 1, df, 1.0)
    return np.where(df >= 1, stats.t.ppf(0.5 + level / 2.0, safe), np.nan)


def t_two_sided_p(t: Any, df: Any) -> np.ndarray:
    """The two-sided p-value ``2 P(T_df > |t|)`` (NaN where ``df < 1`` or ``t`` is NaN)."""
    from scipy import stats

    t = np.asarray(t, dtype=np.float64)
    df = np.asarray(df, dtype=np.float64)
    safe = np.where(df >= 1, df, 1.0)
    return np.where(df >= 1, 2.0 * stats.t.sf(np.abs(t), safe), np.nan)


def interval(mean: Array, stderr: Array, critical: Array) -> tuple[Array, Array]:
    """``(mean - critical * stderr, mean + critical * stderr)``."""
    half = critical * stderr
    return mean - half, mean + half


#: up to this many degrees of freedom :func:`t_quantile_xp` reads scipy's critical values from a
#: table (made once per level on the host); above, the Cornish-Fisher expansion
T_TABLE_DF = 256


@functools.cache
def _t_table(level: float) -> np.ndarray:
    """scipy's two-sided critical values at ``level`` for ``df = 1 .. T_TABLE_DF``."""
    return t_quantile(level, np.arange(1, T_TABLE_DF + 1))


@functools.cache
def _cornish_fisher(level: float) -> tuple[float, ...]:
    """``(z, g1, ..., g5)``: the normal quantile ``z`` of ``(1 + level) / 2`` and the
    coefficients of ``t ~= z + g1 / df + ... + g5 / df^5`` (Abramowitz and Stegun 26.7.5, with
    the fifth term of Fisher and Cornish 1960)."""
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return (
        z,
        (z**3 + z) / 4.0,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96.0,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384.0,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160.0,
        (27 * z**11 + 339 * z**9 + 930 * z**7 - 1782 * z**5 - 765 * z**3 + 17955 * z) / 368640.0,
    )


def _constant(xp: Any, values: Any, like: Array) -> Array:
    """``values`` as an array of ``xp`` in ``like``'s dtype."""
    if xp is np:
        return np.asarray(values, dtype=np.result_type(np.asarray(like).dtype, np.float32))
    return xp.convert_to_tensor(np.asarray(values), dtype=like.dtype)  # JAX without x64: no warning


def t_quantile_xp(level: float, df: Array, xp: Any = np) -> Array:
    """The two-sided critical value ``t_{(1 + level) / 2, df}`` elementwise on ``xp`` (numpy or
    ``keras.ops``), for integer ``df`` that may be a traced value (NaN where ``df < 1``).

    ``df <= T_TABLE_DF`` (256): scipy's value, tabulated on the host once per ``level`` (a
    constant of the computation) and picked by comparing ``df`` with ``1 .. 256``. Above it the
    Cornish-Fisher expansion of the ``t`` quantile in ``1 / df`` around the normal quantile
    ``z``, to the fifth order: ``t ~= z + sum_{i=1}^{5} g_i(z) / df^i``. Its relative error
    against ``scipy.stats.t.ppf`` over ``df = 257 .. 10^6`` is below ``1e-13`` for levels up to
    0.999 and below ``1e-12`` up to 0.9999 (tested over ``df = 1 .. 10^6``); in float32 the
    dtype's rounding (``~6e-8``) dominates."""
    level = check_level(level)
    grid = np.arange(1, T_TABLE_DF + 1, dtype=np.float64)
    table = _constant(xp, _t_table(level), df)
    at = xp.expand_dims(df, -1) == _constant(xp, grid, df)
    tabulated = xp.sum(xp.where(at, table, 0.0 * table), axis=-1)
    z, *g = _cornish_fisher(level)
    safe = xp.where(df >= 1, df, 1.0 + 0.0 * df)
    inv = 1.0 / safe
    series = 0.0 * safe
    for coefficient in reversed(g):  # Horner in 1 / df
        series = (series + coefficient) * inv
    expanded = z + series
    out = xp.where(df <= T_TABLE_DF, tabulated, expanded)
    return xp.where(df >= 1, out, float("nan") + 0.0 * out)
