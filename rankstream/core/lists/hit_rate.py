"""Hit rate at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores::

    HR@k = 1 if sum_{j <= k} rel_j > 0 else 0

(ignite 0.5.5 ``rec_sys.HitRate``, torchmetrics ``RetrievalHitRate``; ``k`` past the end of a
list is clipped to the list, where ignite raises). Relevance, masks, the ``empty`` policy
(ignite's ``ignore_zero_hits``), per-item weights and the cost as in
:mod:`~rankstream.core.lists.binary`: a hit is a nonzero count of the relevant items in the top
``k``.
"""

from __future__ import annotations

from rankstream.core.lists.base import Array, Selection
from rankstream.core.lists.binary import BinaryListKernel


class HitRateKernel(BinaryListKernel):
    """HR@k for every ``k`` in ``top_k`` (arguments as every binary list metric's)."""

    name = "hit_rate"

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        return sel.ops.minimum(self.hits(sel, rel), 1.0)
