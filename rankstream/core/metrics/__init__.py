"""Metric definitions (kernels): per-list values -> state field sums."""

from rankstream.core.metrics.collection import ListMetrics
from rankstream.core.metrics.dcg import DCGKernel
from rankstream.core.metrics.hit_rate import HitRateKernel
from rankstream.core.metrics.lists import ListKernel
from rankstream.core.metrics.map import MAPKernel
from rankstream.core.metrics.ndcg import NDCGKernel
from rankstream.core.metrics.precision import PrecisionKernel
from rankstream.core.metrics.r_precision import RPrecisionKernel
from rankstream.core.metrics.recall import RecallKernel
from rankstream.core.metrics.reciprocal_rank import ReciprocalRankKernel

__all__ = [
    "DCGKernel",
    "HitRateKernel",
    "ListKernel",
    "ListMetrics",
    "MAPKernel",
    "NDCGKernel",
    "PrecisionKernel",
    "RPrecisionKernel",
    "RecallKernel",
    "ReciprocalRankKernel",
]
