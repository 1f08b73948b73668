"""rankstream metrics as Keras 3 metrics (``from rankstream.keras import NDCG, MAP``).

Drop-ins for ``keras_rs.metrics.NDCG`` and ``keras_rs.metrics.MeanAveragePrecision`` on the
torch, JAX and TensorFlow backends, built on the same core as ``rankstream.ignite``.
"""

from rankstream.adapters.keras import (
    MAP,
    NDCG,
    KernelMetric,
    MeanAveragePrecision,
    default_gain_fn,
    default_rank_discount_fn,
)

__all__ = [
    "MAP",
    "NDCG",
    "KernelMetric",
    "MeanAveragePrecision",
    "default_gain_fn",
    "default_rank_discount_fn",
]
