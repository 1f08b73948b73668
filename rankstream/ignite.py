"""rankstream metrics as PyTorch-Ignite metrics (``from rankstream.ignite import MAP, NDCG``)."""

from rankstream.adapters.ignite import (
    GMR,
    MAP,
    MRR,
    NDCG,
    ArithmeticMeanRank,
    GeometricMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    KernelMetric,
    RankBasedMetrics,
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
    "RankBasedMetrics",
]
