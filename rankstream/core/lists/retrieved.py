"""The list kernels of torchmetrics' convention where it has no core option: items scored
``<= 0`` are not retrieved (torchmetrics >= 1.7.4) in recall and MAP (the table's torchmetrics
presentation of those rows, :class:`~rankstream.core.lists.table.RetrievalPresentation`, names
them; the torchmetrics adapter runs them).

The adapter hands these kernels (and the core's precision and reciprocal rank, with
``relevance_threshold=2``) labels coded per item as ``0`` (not relevant), ``1`` (relevant, not
retrieved: scored ``<= 0``) or ``2`` (relevant and retrieved). Items scored ``<= 0`` rank after
every positive score, so coding their relevance away is exactly torchmetrics' ``where(preds > 0,
target, 0)`` before its top-k. With ``nonpositive_retrieved=True`` every relevant item is coded 2.

* recall: ``hits@k / R`` with the hits the retrieved relevant items (``label >= 2``) among the
  top ``k`` and ``R`` every relevant item of the query (``label > 0``), as
  ``retrieval_recall`` divides by ``target.sum()``;
* MAP: ``AP@k = (1 / h@k) sum_{j <= k} rel_j P@j`` over the retrieved relevant items, ``h@k``
  their number in the top ``k`` (0 when there is none): ``retrieval_average_precision`` averages
  the precision at the positions of the relevant items it retrieved.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends import Array
from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.map import MAPKernel
from rankstream.core.lists.recall import RecallKernel
from rankstream.core.relevant.ranks import ratio

#: the coded label of a relevant item that is retrieved (scored > 0)
RETRIEVED = 2.0


class RetrievedRecallKernel(RecallKernel):
    """R@k = (retrieved relevant items in the top ``k``, ``label >= 2``) / (relevant items,
    ``label > 0``). Args as :class:`~rankstream.core.lists.recall.RecallKernel`."""

    name = "retrieved_recall"

    def __init__(self, top_k: int | list[int] = 10, **conventions: Any) -> None:
        super().__init__(top_k, **conventions)

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        ops = sel.ops
        every = sel.once(
            "relevant",
            lambda: ops.count_relevant(
                sel.item_labels, 0.0, True, sel.full_valid, sel.positions.dtype, sel.ctx.workspace
            ),
            None,
        )
        return self.divide(sel, self.hits(sel, rel), every[:, None])

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """The same from the relevant ranks: the retrieved hits over every relevant slot."""
        return ratio(self.rank_hits_at_k(ranks, rel), ranks.count(ranks.relevant(None))[:, None])


class RetrievedMAPKernel(MAPKernel):
    """AP@k over the retrieved relevant items (``label >= 2``), divided by their number in the
    top ``k``. Args as :class:`~rankstream.core.lists.map.MAPKernel` (ties ``"first"``)."""

    name = "retrieved_map"

    def __init__(self, top_k: int | list[int] = 10, **conventions: Any) -> None:
        super().__init__(top_k, **conventions)

    def list_values(self, sel: Selection) -> ListOutput:
        ops = sel.ops
        rel = self.is_relevant(sel, sel.labels)
        hits = ops.cumsum(rel, axis=1)
        terms = hits / sel.positions * rel
        sum_prec = self.cut(sel, ops.cumsum(terms, axis=1))
        n_hits = self.cut(sel, hits)
        n_rel = self.count_relevant(sel)
        return ListOutput(self.divide(sel, sum_prec, n_hits), n_rel > 0, n_rel, None)

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """The same from the relevant ranks (``ties="first"``): the retrieved slots in rank
        order, ``sum_s rel_s i_s / r_s`` over ``r_s <= k`` divided by their number there."""
        order = ranks.by_rank()
        rank = np.take_along_axis(ranks.rank, order, axis=1)
        rel_s = np.take_along_axis(rel, order, axis=1)
        terms = rel_s * np.cumsum(rel_s, axis=1) / rank
        inside = [rank <= k for k in self.top_k]
        sums = np.stack([np.where(i, terms, 0.0).sum(axis=1) for i in inside], axis=1)
        return ratio(sums, np.stack([(rel_s * i).sum(axis=1) for i in inside], axis=1))
