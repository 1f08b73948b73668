"""Metric definitions (kernels): per-list values -> state field sums."""

from rankstream.core.lists.base import ListKernel
from rankstream.core.lists.collection import ListMetrics
from rankstream.core.lists.dcg import DCGKernel
from rankstream.core.lists.hit_rate import HitRateKernel
from rankstream.core.lists.map import MAPKernel
from rankstream.core.lists.ndcg import NDCGKernel
from rankstream.core.lists.precision import PrecisionKernel
from rankstream.core.lists.r_precision import RPrecisionKernel
from rankstream.core.lists.recall import RecallKernel
from rankstream.core.lists.reciprocal_rank import ReciprocalRankKernel

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
