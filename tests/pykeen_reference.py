"""Expected ``RankBasedMetrics`` dicts from PyKEEN's metric classes applied to given ranks, and
the naive ranks themselves (python loops over candidates, ties counted exactly).

Shared by the Ignite/core tests (``test_rank_streamed.py``) and the Keras backend suite (which
finds this folder on ``sys.path`` through ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pykeen.metrics import ranking as pk
from scipy import special


def pykeen_metrics(
    ranks: np.ndarray, num_candidates: np.ndarray, weights: np.ndarray, ks: Sequence[int]
) -> dict:
    """Every key of ``RankBasedMetrics`` (value, expectation, variance, adjusted and z forms of
    Hits@k for each ``k``, MRR, GMR and the arithmetic mean rank; ``adjusted_arithmetic_mean_rank``
    and ``count``) over the tasks of positive weight, as floats."""
    ranks, nc, w = (np.asarray(a) for a in (ranks, num_candidates, weights))
    keep = w > 0
    ranks, nc, w = ranks[keep].astype(float), nc[keep].astype(np.int64), w[keep].astype(float)
    weights = None if np.all(w == 1.0) else w
    out = {}

    def add(key, base, adjusted, z, adjusted_key=None):
        out[key] = base(ranks, nc, weights)
        out[f"expected_{key}"] = base.expected_value(nc, weights=weights)
        out[f"variance_{key}"] = base.variance(nc, weights=weights)
        out[adjusted_key or f"adjusted_{key}"] = adjusted(ranks, nc, weights)
        out[f"z_{key}"] = z(ranks, nc, weights)

    for k in ks:
        add(f"hits_at_{k}", pk.HitsAtK(k), pk.AdjustedHitsAtK(k=k), pk.ZHitsAtK(k=k))
    add(
        "inverse_harmonic_mean_rank",
        pk.InverseHarmonicMeanRank(),
        pk.AdjustedInverseHarmonicMeanRank(),
        pk.ZInverseHarmonicMeanRank(),
    )
    add(
        "geometric_mean_rank",
        pk.GeometricMeanRank(),
        pk.AdjustedGeometricMeanRankIndex(),
        pk.ZGeometricMeanRank(),
        "adjusted_geometric_mean_rank_index",
    )
    add(
        "arithmetic_mean_rank",
        pk.ArithmeticMeanRank(),
        pk.AdjustedArithmeticMeanRankIndex(),
        pk.ZArithmeticMeanRank(),
        "adjusted_arithmetic_mean_rank_index",
    )
    out["adjusted_arithmetic_mean_rank"] = pk.AdjustedArithmeticMeanRank()(ranks, nc, weights)
    out["count"] = float(keep.sum())
    out.update(pykeen_extras(ranks, nc, weights))
    return {k: float(v) for k, v in out.items()}


def pykeen_extras(ranks: np.ndarray, nc: np.ndarray, weights: np.ndarray | None) -> dict:
    """PyKEEN's dispersion, median and inverse metrics of the given ranks (weights None or
    positive). PyKEEN's rank variance and standard deviation ignore weights and its weighted
    MAD drops the normal-consistency scale of its unweighted one: with weights, those come from
    numpy's weighted average and PyKEEN's weighted MAD divided by ``ndtri(3/4)`` (scipy)."""
    out = {
        "median_rank": pk.MedianRank()(ranks, nc, weights),
        "inverse_median_rank": pk.InverseMedianRank()(ranks, nc, weights),
        "harmonic_mean_rank": pk.HarmonicMeanRank()(ranks, nc, weights),
        "inverse_arithmetic_mean_rank": pk.InverseArithmeticMeanRank()(ranks, nc, weights),
        "inverse_geometric_mean_rank": pk.InverseGeometricMeanRank()(ranks, nc, weights),
        "median_rank_error_bound": 0.0,  # every rank below the histogram's exact limit
        "median_absolute_deviation_error_bound": 0.0,
    }
    if weights is None:
        out["variance"] = pk.Variance()(ranks, nc)
        out["standard_deviation"] = pk.StandardDeviation()(ranks, nc)
        out["median_absolute_deviation"] = pk.MedianAbsoluteDeviation()(ranks, nc)
    else:
        mean = np.average(ranks, weights=weights)
        out["variance"] = np.average((ranks - mean) ** 2, weights=weights)
        out["standard_deviation"] = np.sqrt(out["variance"])
        mad = pk.MedianAbsoluteDeviation()(ranks, nc, weights)
        out["median_absolute_deviation"] = mad / special.ndtri(0.75)
    return out


def naive_tasks(scores, y, mask=None, weights=None):
    """[(optimistic, pessimistic, N, w)] task by task: python loops over candidates."""
    scores = np.asarray(scores, dtype=np.float64)
    b, n = scores.shape
    y = np.asarray(y)
    out = []
    for i in range(b):
        valid = [True] * n if mask is None else [bool(v) for v in mask[i]]
        w = 1.0 if weights is None else float(weights[i])
        if y.ndim == 1:
            targets = [int(y[i])]
        else:
            targets = [j for j in range(n) if valid[j] and y[i, j] == 1]
        for t in targets:
            st_ = scores[i, t]
            better = equal = count = 0
            for j in range(n):
                # the other candidates: valid, not the task itself, not another positive
                other = j != t if y.ndim == 1 else y[i, j] != 1
                if valid[j] and other:
                    count += 1
                    if scores[i, j] > st_:
                        better += 1
                    elif scores[i, j] == st_:
                        equal += 1
            out.append((1 + better, 1 + better + equal, count + 1, w))
    return out


def naive_rank(task, rank_type):
    o, p = task[0], task[1]
    return {"optimistic": o, "pessimistic": p, "realistic": (o + p) / 2}[rank_type]


def pykeen_reference(tasks, rank_type, ks):
    """The dict of RankBasedMetrics computed by PyKEEN's classes on the naive ranks."""
    ranks = np.array([naive_rank(t, rank_type) for t in tasks], dtype=float)
    nc = np.array([t[2] for t in tasks], dtype=np.int64)
    w = np.array([t[3] for t in tasks], dtype=float)
    return pykeen_metrics(ranks, nc, w, ks)


def pykeen_report(tasks: dict, ks: Sequence[int], prefix: str = "") -> dict:
    """PyKEEN's flat report keys ``{prefix}{side}.{rank_type}.{metric}`` of naive tasks per side
    (``{side: [(optimistic, pessimistic, N, w)]}``) and of all sides together (``both``)."""
    tasks = {**tasks, "both": [t for side_tasks in tasks.values() for t in side_tasks]}
    out = {}
    for side, side_tasks in tasks.items():
        o, p, nc, w = (np.array(c, dtype=float) for c in zip(*side_tasks, strict=True))
        types = {"optimistic": o, "realistic": (o + p) / 2, "pessimistic": p}
        for rank_type, ranks in types.items():
            values = pykeen_metrics(ranks, nc, w, ks)
            out.update({f"{prefix}{side}.{rank_type}.{key}": v for key, v in values.items()})
    return out
