"""Hit rate at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores::

    HR@k = 1 if sum_{j <= k} rel_j > 0 else 0

(ignite 0.5.5 ``rec_sys.HitRate``, torchmetrics ``RetrievalHitRate``; ``k`` past the end of a
list is clipped to the list, where ignite raises). Relevance, masks, the ``empty`` policy
(ignite's ``ignore_zero_hits``) and per-item weights as in
:mod:`~rankstream.core.lists.precision`. Cost: one top-``max(k)`` selection, one cumulative
sum, one count of the relevant items.
"""

from __future__ import annotations

from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.precision import BinaryListKernel


class HitRateKernel(BinaryListKernel):
    """HR@k for every ``k`` in ``top_k``. Args: ``top_k``; the conventions of
    :class:`~rankstream.core.lists.base.ListConventions` as keywords."""

    name = "hit_rate"

    def list_values(self, sel: Selection) -> ListOutput:
        rel, n_rel, w_rel = self.ranked_relevance(sel)
        hits = self.cut(sel, sel.ops.cumsum(rel, axis=1))
        return ListOutput(sel.ops.minimum(hits, 1.0), n_rel > 0, n_rel, w_rel)
