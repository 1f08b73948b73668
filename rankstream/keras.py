"""rankstream metrics as Keras 3 metrics (``from rankstream.keras import NDCG, MAP, HitsAtK``).

Drop-ins for ``keras_rs.metrics.NDCG`` and ``keras_rs.metrics.MeanAveragePrecision``, and the
rank-based metrics (Hits@k, MRR, GMR, mean rank, each with its expectation, variance, adjusted
and z forms; ``RankBasedMetrics`` for all of them in one pass), on the torch, JAX and
TensorFlow backends, built on the same core as ``rankstream.ignite``.
"""

from rankstream.adapters.keras import (
    GMR,
    MAP,
    MRR,
    NDCG,
    ArithmeticMeanRank,
    GeometricMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    KernelMetric,
    MeanAveragePrecision,
    RankBasedMetrics,
    default_gain_fn,
    default_rank_discount_fn,
)

__all__ = [
    "GMR",
    "MAP",
    "MRR",
    "NDCG",
    "ArithmeticMeanRank",
    "GeometricMeanRank",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "KernelMetric",
    "MeanAveragePrecision",
    "RankBasedMetrics",
    "default_gain_fn",
    "default_rank_discount_fn",
]
