"""Reciprocal rank at k (MRR@k is its mean over the lists).

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores::

    RR@k = 1 / j*  with j* the rank of the first relevant item, if j* <= k; else 0

(list-wise, as keras-rs ``MeanReciprocalRank``, torchmetrics ``RetrievalMRR`` with ``top_k``,
trec_eval ``recip_rank`` / ir_measures ``RR@k``; not PyKEEN's per-positive
``InverseHarmonicMeanRank``). Computed as ``sum_{j <= k} first_j / j`` where ``first_j`` marks
the position whose cumulative relevance first reaches 1. Relevance, masks, the ``empty`` policy
and per-item weights as in :mod:`~rankstream.core.lists.precision`. Cost: one
top-``max(k)`` selection, two cumulative sums, one count of the relevant items.

With ``ties="expected"``: ``E[RR@k] = sum_{j <= k} P(first relevant item at j) / j`` over the
orders of the tied items; only the first group holding a relevant item (``t`` items, ``r``
relevant, from position ``a``) has a first relevant item, at its ``i``-th place (0-based) with
probability ``C(t - 1 - i, r - 1) / C(t, r)`` (for one relevant item, ``(H_{a+t-1} - H_{a-1}) / t``).
"""

from __future__ import annotations

from rankstream.core.lists.base import Array, Selection
from rankstream.core.lists.binary import BinaryListKernel


class ReciprocalRankKernel(BinaryListKernel):
    """RR@k for every ``k`` in ``top_k``. Args: ``top_k``; the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "reciprocal_rank"
    ranked_bytes = 40  # measured 35-36: the first relevant position and its running sum

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        first = self.first_relevant(sel, rel)  # 1 at the first relevant item (its probability)
        first = first / sel.positions  # rebound: one (B, K) array let go before the next
        return self.cut(sel, sel.ops.cumsum(first, axis=1))
