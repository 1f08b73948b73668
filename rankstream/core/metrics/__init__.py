"""Metric definitions (kernels): per-list values -> state field sums."""

from rankstream.core.metrics.lists import ListKernel
from rankstream.core.metrics.map import MAPKernel
from rankstream.core.metrics.ndcg import NDCGKernel

__all__ = ["ListKernel", "MAPKernel", "NDCGKernel"]
