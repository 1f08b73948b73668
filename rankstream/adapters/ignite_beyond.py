"""The beyond-accuracy metrics as one Ignite metric: :class:`BeyondMetrics`.

It is the Ignite lifecycle (``rankstream.adapters.ignite_metrics.KernelMetric``: the fields as
one flat float64 tensor, one ``idist`` all-reduce SUM in ``compute``, ``state_dict``) over the
core collection with beyond-accuracy names and the catalog's item data. The engine's output is
``(y_pred, y)`` as for every list metric, ``y_pred`` ``(B, N)`` scores whose columns are the
item ids (``y`` is read as any list metric reads it; these metrics do not use it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rankstream.adapters.ignite_metrics import _CPU, KernelMetric, _identity
from rankstream.core.beyond.items import ItemData
from rankstream.core.lists.collection import ListMetrics as CollectionKernel

__all__ = ["BeyondMetrics"]


class BeyondMetrics(KernelMetric):
    """Beyond-accuracy metrics of each batch's top-k lists, e.g.
    ``BeyondMetrics(["coverage@10", "novelty@10", "personalization@10"], items=ItemData(...))``.

    ``compute()`` returns ``{name: value}`` (each name also in ``engine.state.metrics``). The
    names and their definitions: docs/beyond_accuracy.md; accuracy names (``"ndcg@10"``) may be
    mixed in, with the core collection's defaults.

    Args:
        metrics: the names, each with ``@k``.
        items: the catalog's :class:`~rankstream.core.beyond.items.ItemData`.
        output_transform, device: as for every Ignite metric.
        ties: ``"first"`` (the lower item id first) or ``"random"`` (with ``seed``).
        seed: the seed of random tie orders.
        confidence: None or a level: the list-mean metrics also report ``_stderr``,
            ``_ci_low``, ``_ci_high`` and ``_count``.
        prefix: prepended to every name.
    """

    def __init__(
        self,
        metrics: Sequence[str],
        items: ItemData,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        *,
        ties: str = "first",
        seed: int | None = None,
        confidence: float | None = None,
        prefix: str = "",
    ) -> None:
        kernel = CollectionKernel(list(metrics), ties=ties, seed=seed, confidence=confidence, items=items)
        self.metrics, self.items, self.confidence = kernel.metrics, items, confidence
        super().__init__(kernel, output_transform, device, False, prefix)
