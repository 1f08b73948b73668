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
:func:`t_two_sided_p`).
"""

from __future__ import annotations

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
