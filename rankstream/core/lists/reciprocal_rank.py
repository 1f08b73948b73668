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

from typing import Any

import numpy as np

from rankstream.core.lists.base import Array, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import binary_counts, first_relevant_law
from rankstream.core.relevant.moments import first_rank_moments
from rankstream.core.relevant.ranks import harmonic_range


class ReciprocalRankKernel(BinaryListKernel):
    """RR@k for every ``k`` in ``top_k``. Args: ``top_k``; the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "reciprocal_rank"
    ranked_bytes = 40  # measured 35-36: the first relevant position and its running sum

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        first = self.first_relevant(sel, rel)  # 1 at the first relevant item (its probability)
        first = first / sel.positions  # rebound: one (B, K) array let go before the next
        return self.cut(sel, sel.ops.cumsum(first, axis=1))

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: ``E[RR@k] = sum_{j <= k'} P(j) / j`` and its second moment
        with ``1 / j^2``, ``P(j)`` the chance the first relevant item is at ``j``; best 1
        where ``R > 0``."""
        r, n, has = binary_counts(self, sel)
        _, p, width = first_relevant_law(self, sel, n, r)
        ops, inv = sel.ops, 1.0 / sel.positions
        mean = ops.matmul(p, self.cut_weights(sel, inv)[:width])
        second = ops.matmul(p, self.cut_weights(sel, inv * inv)[:width])
        return mean, ops.maximum(second - mean * mean, 0.0), has + 0.0 * mean

    def chance_from_ranks(self, ranks: Any) -> tuple[Any, Any, Any]:
        """:meth:`chance_moments` over relevant ranks: ``E[1 / J]`` and ``E[1 / J^2]`` within
        ``k'`` by a recursion over ``R`` (:func:`~rankstream.core.relevant.moments.first_rank_moments`)."""
        n, r, kk = self.rank_sizes(ranks)
        mean, second = first_rank_moments(kk, n, r)
        return mean, np.maximum(second - mean * mean, 0.0), (r[:, None] > 0) + 0.0 * mean

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """``1 / j*`` of the best ranked relevant slot if ``j* <= k``; under ``ties="expected"``
        ``sum_i P_i / (a + 1 + i)`` over the places of the first tie group holding a relevant
        item (``a`` above, ``t`` items, ``r`` relevant) within ``k``, ``P_i = C(t - 1 - i, r -
        1) / C(t, r)`` the chance that its first relevant item sits at its ``i``-th place
        (``r = 1``: ``(H_{min(a + t, k)} - H_a) / t``)."""
        if ranks.ties != "expected":
            best = np.min(np.where(rel > 0, ranks.rank, np.inf), axis=1, initial=np.inf)
            return np.stack([np.where(best <= k, 1.0 / best, 0.0) for k in self.top_k], axis=1)
        a, t, r = ranks.first_group(rel)
        return np.stack([first_place_mean(a, t, r, float(k)) for k in self.top_k], axis=1)


def first_place_mean(a: Any, t: Any, r: Any, k: float) -> Any:
    """``E[1 / rank]`` of the first of ``r`` relevant items placed at random among the ``t``
    places ``a + 1 .. a + t``, counting only places within ``k`` (0 where ``a`` is inf)."""
    found = np.isfinite(a) & (a < k)
    out = np.zeros(a.shape)
    one = found & (r == 1.0)
    if one.any():
        out[one] = harmonic_range(a[one] + 1.0, np.minimum(a[one] + t[one], k)) / t[one]
    many = np.nonzero(found & (r > 1.0))[0]
    for q in many:  # rare: several relevant items in one tie group (O(min(t, k)) terms each)
        places = np.arange(min(t[q] - r[q] + 1.0, k - a[q]))
        # P_0 = r / t, P_{i+1} = P_i (t - i - r) / (t - 1 - i)
        steps = (t[q] - places[:-1] - r[q]) / (t[q] - 1.0 - places[:-1])
        p = (r[q] / t[q]) * np.concatenate([[1.0], np.cumprod(steps)])
        out[q] = float(np.sum(p / (a[q] + 1.0 + places)))
    return out
