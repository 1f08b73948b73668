"""Recall at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores and
``R`` the number of relevant items of the list::

    R@k = (1 / R) * sum_{j <= k} rel_j        (0 when R = 0)

(trec_eval ``recall_k``, torchmetrics ``RetrievalRecall``, keras-rs ``RecallAtK``). Relevance,
masks, the ``empty`` policy, per-item weights and the cost as in
:mod:`~rankstream.core.lists.binary`.

With ``ties="expected"``: ``E[R@k] = (1 / R) sum_{j <= k} r_c(j) / t_c(j)`` (see
:mod:`~rankstream.core.lists.precision`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.lists.base import Array, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import binary_counts, clipped_ks, hits_terms
from rankstream.core.relevant.moments import hits_moments
from rankstream.core.relevant.ranks import ratio


class RecallKernel(BinaryListKernel):
    """R@k for every ``k`` in ``top_k``: the hits over ``R`` (0 for a list without a relevant
    item). Args: ``top_k``; the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "recall"
    order_free_past_end = True

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        return self.divide(sel, self.hits(sel, rel), n_rel[:, None])

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: the hits in the top ``k'`` are hypergeometric, over ``Z = R``;
        best ``min(R, k') / R``."""
        r, n, _ = binary_counts(self, sel)
        kk = clipped_ks(self, sel, n)
        return hits_terms(sel, kk, n, r, r[:, None] + 0.0 * kk)

    def chance_from_ranks(self, ranks: Any) -> tuple[Any, Any, Any]:
        """:meth:`chance_moments` over relevant ranks: the hypergeometric hits over ``R``."""
        n, r, kk = self.rank_sizes(ranks)
        mean, var = hits_moments(kk, n, r)
        z = r[:, None] + 0.0 * kk
        return ratio(mean, z), ratio(var, z * z), ratio(np.minimum(z, kk), z)

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """``hits@k / R`` from the relevant ranks."""
        return ratio(self.rank_hits_at_k(ranks, rel), n_rel[:, None])
