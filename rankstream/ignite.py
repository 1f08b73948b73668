"""rankstream metrics as PyTorch-Ignite metrics (``from rankstream.ignite import MAP, NDCG``)."""

from rankstream.adapters.ignite import MAP, NDCG, KernelMetric

__all__ = ["MAP", "NDCG", "KernelMetric"]
