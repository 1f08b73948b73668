"""Expected ``RankBasedMetrics`` dicts from PyKEEN's metric classes applied to given ranks.

Shared by the Ignite/core tests (``test_rank_streamed.py``) and the Keras backend suite (which
finds this folder on ``sys.path`` through ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pykeen.metrics import ranking as pk


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
    return {k: float(v) for k, v in out.items()}
