"""Recall at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores and
``R`` the number of relevant items of the list::

    R@k = (1 / R) * sum_{j <= k} rel_j        (0 when R = 0)

(trec_eval ``recall_k``, torchmetrics ``RetrievalRecall``, keras-rs ``RecallAtK``). Relevance,
masks, the ``empty`` policy and per-item weights as in
:mod:`~rankstream.core.lists.precision`. Cost: one top-``max(k)`` selection, one cumulative
sum, one count of the relevant items.
"""

from __future__ import annotations

from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.precision import BinaryListKernel


class RecallKernel(BinaryListKernel):
    """R@k for every ``k`` in ``top_k``. Args: ``top_k``; the conventions of
    :class:`~rankstream.core.lists.base.ListConventions` as keywords."""

    name = "recall"

    def list_values(self, sel: Selection) -> ListOutput:
        rel, n_rel, w_rel = self.ranked_relevance(sel)
        hits = self.cut(sel, sel.ops.cumsum(rel, axis=1))
        return ListOutput(self.divide(sel, hits, n_rel[:, None]), n_rel > 0, n_rel, w_rel)
