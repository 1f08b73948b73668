"""The beyond-accuracy metrics as one Keras metric: :class:`BeyondMetrics`.

The Keras lifecycle (``rankstream.adapters.keras_lifecycle.KernelMetric``: one variable per
field with ``aggregation="sum"``, ``state_dict``) over the core collection with beyond-accuracy
names. ``update_state(y_true, y_pred)`` takes keras-rs's list layout: ``y_pred`` ``(B, N)``
scores whose columns are the item ids. Nothing is read back to the host: the top-k ids come
from ``keras.ops.top_k`` (the lower id first among ties), the per-item counts are summed
variables added to by one weighted histogram (``segment_sum``, static length ``len(top_k) *
N``), the per-list means summed scalars, so the metric runs inside compiled steps
(``jit_compile=True`` on JAX and TensorFlow; on torch the compiled model as Keras runs it by
default) as well as eagerly. ``rankstream.keras.ListMetrics(..., items=)`` takes the same names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from rankstream.adapters.keras_lifecycle import KernelMetric
from rankstream.core.beyond.items import ItemData
from rankstream.core.lists.collection import ListMetrics as ListMetricsKernel

__all__ = ["BeyondMetrics"]


@keras.saving.register_keras_serializable(package="rankstream")
class BeyondMetrics(KernelMetric):
    """Beyond-accuracy metrics of each batch's top-k lists, e.g.
    ``BeyondMetrics(["coverage@10", "novelty@10"], items=ItemData(...))``: ``result()`` is
    ``{name: value}``, each a key of the logs (after ``prefix``).

    Args:
        metrics: the names, each with ``@k`` (docs/beyond_accuracy.md).
        items: the catalog's :class:`~rankstream.core.beyond.items.ItemData`.
        name, dtype: as for every Keras metric.
        ties: ``"first"`` (the lower item id first, default) or ``"random"`` (with ``seed``).
        seed: an int or None, the seed of random tie orders.
        confidence: None or a level: the list-mean metrics also report ``_stderr``,
            ``_ci_low``, ``_ci_high`` and ``_count``.
        state_dtype: ``"float64"``, ``"float32"`` (compensated) or None.
        prefix: prepended to every name.
    """

    _config = ("metrics", "ties", "seed", "prefix")

    def __init__(
        self,
        metrics: Sequence[str],
        items: ItemData,
        name: str | None = "beyond_metrics",
        dtype: Any = None,
        *,
        ties: str = "first",
        seed: int | None = None,
        confidence: float | None = None,
        state_dtype: str | None = None,
        prefix: str = "",
    ) -> None:
        self.metrics, self.items, self.ties, self.seed = list(metrics), items, ties, seed
        self.confidence = confidence
        kernel = ListMetricsKernel(self.metrics, ties=ties, seed=seed, confidence=confidence, items=items)
        generator = keras.random.SeedGenerator(seed) if ties == "random" else None
        super().__init__(kernel, name, dtype, generator, state_dtype, prefix)
