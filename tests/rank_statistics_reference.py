"""The standard errors and intervals of the rank-based means, computed task by task from naive
ranks (``pykeen_reference.naive_tasks``): scipy's ``sem`` and ``t.interval`` for unit weights,
and for weighted tasks the linearised (ratio-estimator) variance written out over the per-task
values, ``n / (n - 1) * sum_i w_i^2 (v_i - m)^2 / (sum_i w_i)^2``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from pykeen_reference import naive_rank


def per_task_values(tasks, rank_type: str, ks: Sequence[int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``({key: per-task values}, weights)`` of the tasks of positive weight: ``I[r <= k]``,
    ``1 / r``, ``ln r`` (the GMR's log scale) and ``r`` under each family's key."""
    kept = [t for t in tasks if t[3] > 0]
    r = np.array([naive_rank(t, rank_type) for t in kept], dtype=np.float64)
    w = np.array([t[3] for t in kept], dtype=np.float64)
    values = {f"hits_at_{k}": (r <= k).astype(np.float64) for k in ks}
    values["inverse_harmonic_mean_rank"] = 1.0 / r
    values["geometric_mean_rank"] = np.log(r)
    values["arithmetic_mean_rank"] = r
    return values, w


def weighted_stderr(v: np.ndarray, w: np.ndarray) -> float:
    """The ratio estimator's standard error of ``sum w v / sum w``, over the tasks."""
    n = v.size
    m = np.sum(w * v) / np.sum(w)
    return float(np.sqrt(n / (n - 1) * np.sum((w * (v - m)) ** 2) / np.sum(w) ** 2))


def expected_statistics(tasks, rank_type: str, ks: Sequence[int], level: float) -> dict[str, float]:
    """``{key_stderr, key_ci_low, key_ci_high}`` of every family's key: scipy's ``sem`` and
    ``t.interval`` with unit weights, the weighted formula otherwise; the GMR's stderr on the
    log scale and its interval mapped back by ``exp``."""
    values, w = per_task_values(tasks, rank_type, ks)
    out: dict[str, float] = {}
    for key, v in values.items():
        if np.all(w == 1.0):
            mean, se = float(np.mean(v)), float(stats.sem(v))
        else:
            mean, se = float(np.sum(w * v) / np.sum(w)), weighted_stderr(v, w)
        if se == 0.0:  # scipy's interval is NaN for a zero scale; the interval is the mean
            low = high = mean
        else:
            low, high = stats.t.interval(level, v.size - 1, loc=mean, scale=se)
        if key == "geometric_mean_rank":
            low, high = np.exp(low), np.exp(high)
        out.update({f"{key}_stderr": se, f"{key}_ci_low": float(low), f"{key}_ci_high": float(high)})
    return out
