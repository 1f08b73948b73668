r"""The standard error and Student-t interval of each rank-based mean, from the kernel's sums.

For a weighted mean over tasks ``m = sum(w v) / sum(w)`` (``v = f(r)`` the family's per-task
value: ``I[r <= k]``, ``1/r``, ``ln r``, ``r``), the ratio-estimator variance

    Var(m) ~= n / (n - 1) * sum(w^2 (v - m)^2) / sum(w)^2

comes from ``sum(w^2 v^2)``, ``sum(w^2 v)``, ``sum(w^2)`` and ``n`` (the tasks of positive
weight) by :func:`rankstream.core.uncertainty.weighted_variance_of_mean`; the interval is
``m +- t_{(1 + level) / 2, n - 1} * se``. The geometric mean rank is ``exp`` of the mean of
``ln r``: its standard error is that of the mean log rank (the log scale), its interval that of
the mean log rank mapped back by ``exp`` (the rank scale; asymmetric around the GMR).

The critical value :func:`t_critical` is scipy's on the host (numpy), and on ``keras.ops``
(traced results: ``jit``, accelerators) a lookup of scipy's values for ``n - 1 <= 1000`` and
beyond that the Cornish-Fisher expansion of ``t`` in ``1 / (n - 1)`` to the fourth order
(Abramowitz and Stegun 26.7.5; its error there is below 1e-15 relative).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rankstream.core.ranks.families import STAT_WEIGHT_FIELD
from rankstream.core.uncertainty import interval, t_quantile, weighted_variance_of_mean

__all__ = ["EXACT_DF", "STATISTICS", "check_saved_statistics", "mean_statistics", "t_critical"]

Array = Any

#: the statistics reported beside each mean: ``<key>_stderr``, ``<key>_ci_low``, ``<key>_ci_high``
STATISTICS: tuple[str, ...] = ("stderr", "ci_low", "ci_high")
#: degrees of freedom up to which the traced critical value is scipy's, tabulated
EXACT_DF = 1000


@functools.cache
def _traced_constants(level: float) -> tuple[np.ndarray, tuple[float, ...]]:
    """scipy's ``t_{(1 + level) / 2, df}`` for ``df = 1..EXACT_DF``, and the coefficients
    ``(z, g_1(z), .., g_4(z))`` of the Cornish-Fisher expansion (``z`` the normal quantile)."""
    from scipy import stats

    table = t_quantile(level, np.arange(1, EXACT_DF + 1, dtype=np.float64))
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    g = (
        z,
        (z**3 + z) / 4.0,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96.0,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384.0,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160.0,
    )
    return table, g


def t_critical(level: float, df: Array, xp: Any = np) -> Array:
    """The two-sided critical value ``t_{(1 + level) / 2, df}``, NaN where ``df < 1``: scipy's
    on numpy (:func:`rankstream.core.uncertainty.t_quantile`); elementwise and traceable on
    ``keras.ops`` (a table for ``df <= EXACT_DF``, the Cornish-Fisher expansion beyond)."""
    if xp is np:
        return t_quantile(level, df)
    table, g = _traced_constants(level)
    # tensors, not Python floats, beside df in maximum/clip/where (Keras on torch would
    # otherwise give float32)
    one = xp.ones_like(df)
    index = xp.cast(xp.minimum(xp.maximum(df, one), EXACT_DF * one) - one, "int32")
    exact = xp.take(xp.convert_to_tensor(table, dtype=df.dtype), index)
    inv = one / xp.maximum(df, one)
    series = g[0] + inv * (g[1] + inv * (g[2] + inv * (g[3] + inv * g[4])))
    return xp.where(df >= one, xp.where(df <= EXACT_DF * one, exact, series), math.nan * one)


def mean_statistics(
    mean: Array,
    count: Array,
    weight: Array,
    weight_sq: Array,
    w2v: Array,
    w2v2: Array,
    critical: Array,
    finish: Any,
    xp: Any = np,
) -> tuple[Array, Array, Array]:
    """``(stderr, ci_low, ci_high)`` of the weighted mean ``mean`` of ``v`` from the sums
    ``count``, ``weight = sum w``, ``weight_sq = sum w^2``, ``w2v = sum w^2 v``,
    ``w2v2 = sum w^2 v^2``; the interval's bounds mapped by ``finish(x, xp)`` (``exp`` for the
    GMR: the standard error stays on the scale of ``v``). NaN with fewer than two tasks."""
    variance = weighted_variance_of_mean(count, weight, weight_sq, w2v, w2v2, mean, xp)
    stderr = xp.sqrt(variance)
    low, high = interval(mean, stderr, critical)
    return stderr, finish(low, xp), finish(high, xp)


def check_saved_statistics(kernel: Any, saved_fields: Any, metric: str, owner: str = "state") -> None:
    """A ``ValueError`` when a saved state's fields (``saved_fields``, the ``"fields"`` entry
    of a saved state) lack the sums of the standard errors that ``kernel`` keeps (a state
    saved without ``confidence``: its statistics cannot be recovered), or hold them where
    ``kernel`` keeps none; anything else is left to the state's own checks."""
    if not isinstance(saved_fields, Mapping):
        return
    saved = any(str(name).endswith(STAT_WEIGHT_FIELD) for name in saved_fields)
    kept = any(name.endswith(STAT_WEIGHT_FIELD) for name in kernel.fields)
    if kept and not saved:
        raise ValueError(
            f"{owner} does not fit {metric}: it was saved without the sums of the standard errors "
            f"(by a metric without confidence), so its statistics are unavailable; load it into a "
            f"metric with confidence=None, or evaluate again with confidence={kernel.confidence!r}"
        )
    if saved and not kept:
        raise ValueError(
            f"{owner} does not fit {metric}: it was saved with the sums of the standard errors "
            f"(by a metric with a confidence level); load it into a metric with confidence set"
        )
