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
(traced results: ``jit``, accelerators) :func:`rankstream.core.uncertainty.t_quantile_xp`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rankstream.core.ranks.families import STAT_WEIGHT_FIELD
from rankstream.core.uncertainty import (
    T_TABLE_DF,
    interval,
    t_quantile,
    t_quantile_xp,
    weighted_variance_of_mean,
)

__all__ = ["EXACT_DF", "STATISTICS", "check_saved_statistics", "mean_statistics", "t_critical"]

Array = Any

#: the statistics reported beside each mean: ``<key>_stderr``, ``<key>_ci_low``, ``<key>_ci_high``
STATISTICS: tuple[str, ...] = ("stderr", "ci_low", "ci_high")
#: degrees of freedom up to which the traced critical value is scipy's, tabulated
EXACT_DF = T_TABLE_DF


def t_critical(level: float, df: Array, xp: Any = np) -> Array:
    """The two-sided critical value ``t_{(1 + level) / 2, df}``, NaN where ``df < 1``: scipy's
    on numpy (:func:`rankstream.core.uncertainty.t_quantile`); elementwise and traceable on
    ``keras.ops`` (:func:`rankstream.core.uncertainty.t_quantile_xp`: a table up to
    ``EXACT_DF`` degrees of freedom, the Cornish-Fisher expansion beyond)."""
    if xp is np:
        return t_quantile(level, df)
    return t_quantile_xp(level, df, xp)


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
    of a saved state) hold the sums of the standard errors where ``kernel`` keeps none (load it
    into a metric with a confidence level). A state saved without them loads into a metric
    that keeps them, with its statistics unavailable (NaN, and a warning:
    :func:`~rankstream.core.state.unpack_state`); anything else is left to the state's own
    checks."""
    if not isinstance(saved_fields, Mapping):
        return
    saved = any(str(name).endswith(STAT_WEIGHT_FIELD) for name in saved_fields)
    kept = any(name.endswith(STAT_WEIGHT_FIELD) for name in kernel.fields)
    if saved and not kept:
        raise ValueError(
            f"{owner} does not fit {metric}: it was saved with the sums of the standard errors "
            f"(by a metric with a confidence level); load it into a metric with confidence set"
        )
