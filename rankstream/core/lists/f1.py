"""F1 at k: the harmonic mean of precision and recall at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores, ``R``
the number of relevant items of the list and ``h@k = sum_{j <= k} rel_j`` the hits::

    P@k = h@k / k,   R@k = h@k / R,
    F1@k = 2 P@k R@k / (P@k + R@k) = 2 h@k / (k + R)      (0 when h@k = 0)

as ranx's ``f1`` (``P@k`` over ``k`` even for a list shorter than ``k``, trec_eval's precision;
without ``@k``, the whole list: ``k`` is the list's number of items). Relevance, masks, the
``empty`` policy and per-item weights as in :mod:`~rankstream.core.lists.binary`. Cost: the
base's one top-``max(k)`` selection, one cumulative sum, one count of the relevant items.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.lists.base import WHOLE_LIST, Array, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.relevant.ranks import ratio


class F1Kernel(BinaryListKernel):
    """F1@k for every ``k`` in ``top_k`` (``2 h@k / (k + R)``). Args: ``top_k``; the conventions
    of :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "f1"
    order_free_past_end = True

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        ops, hits = sel.ops, self.hits(sel, rel)
        acc = hits.dtype
        size = None
        if self.top_k[-1] >= WHOLE_LIST:  # the whole list: its number of items (tile by tile)
            if sel.in_list is None:
                size = ops.zeros((hits.shape[0],), hits, acc) + float(sel.n)
            else:
                size = ops.row_count(sel.full_valid, acc, sel.ctx.workspace)
        ks = [
            ops.zeros((hits.shape[0],), hits, acc) + float(k) if k < WHOLE_LIST else size for k in self.top_k
        ]
        den = ops.stack(ks, axis=1) + n_rel[:, None]
        return self.divide(sel, 2.0 * hits, den)

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """``2 h@k / (k + R)`` from the relevant ranks (``k`` of the whole list: its ``n``)."""
        hits = self.rank_hits_at_k(ranks, rel)
        ks = np.stack(
            [ranks.n if k >= WHOLE_LIST else np.full(ranks.n.shape, float(k)) for k in self.top_k], 1
        )
        return ratio(2.0 * hits, ks + n_rel[:, None])
