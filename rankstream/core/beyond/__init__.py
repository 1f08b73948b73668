"""Beyond-accuracy metrics of top-k recommendations: coverage, distributional coverage
(entropy), Gini index, personalization, novelty, ARP, APLT, ACLT and intra-list diversity
(docs/beyond_accuracy.md).

* :class:`ItemData`: the catalog's item data (popularity, long tail, categories, embeddings);
* :class:`BeyondAccuracy`: the metrics streamed from ``(Q, k)`` item ids or dense scores;
* ``ListMetrics(["coverage@10", ...], items=...)``: the same names inside the list metrics'
  collection (:mod:`rankstream.core.beyond.list_kernels`).
"""

from rankstream.core.beyond.items import ItemData
from rankstream.core.beyond.stream import BeyondAccuracy, available_metrics

__all__ = ["BeyondAccuracy", "ItemData", "available_metrics"]
