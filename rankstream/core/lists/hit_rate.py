"""Hit rate at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores::

    HR@k = 1 if sum_{j <= k} rel_j > 0 else 0

(ignite 0.5.5 ``rec_sys.HitRate``, torchmetrics ``RetrievalHitRate``; ``k`` past the end of a
list is clipped to the list, where ignite raises). Relevance, masks, the ``empty`` policy
(ignite's ``ignore_zero_hits``), per-item weights and the cost as in
:mod:`~rankstream.core.lists.binary`: a hit is a nonzero count of the relevant items in the top
``k``.

With ``ties="expected"``: the probability of a hit over the orders of the tied items. With the
group holding position ``k`` at positions ``a..a+t-1`` (``t`` items, ``r`` relevant) and no
relevant item above it, that is the hypergeometric ``1 - C(t - r, m) / C(t, m)``,
``m = k - a + 1`` of its places inside the top ``k`` (1 with a relevant item above it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.lists.base import Array, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import binary_counts, first_relevant_law
from rankstream.core.relevant.moments import miss_chance


class HitRateKernel(BinaryListKernel):
    """HR@k for every ``k`` in ``top_k`` (arguments as every binary list metric's)."""

    name = "hit_rate"
    order_free_past_end = True

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        ops = sel.ops
        if sel.ties is None:
            return ops.minimum(self.hits(sel, rel), 1.0)
        # the probability of a relevant item in the top k; a k reaching every item of the
        # batch's lists holds them all, whatever the order
        first = self.cut(sel, ops.cumsum(self.first_relevant(sel, rel), axis=1))
        return self.past_end(sel, first, lambda: ops.cast(n_rel > 0, first.dtype))

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: a hit with chance ``1 - S(k')`` (Bernoulli: ``Var = h (1 - h)``),
        best 1 where ``R > 0``; at a ``k`` reaching every item a hit wherever ``R > 0`` (read from
        ``R``: the selection, and so ``S``, may be one deep there)."""
        r, n, has = binary_counts(self, sel)
        s = first_relevant_law(self, sel, n, r)[0]
        hit = self.past_end(sel, 1.0 - self.cut(sel, s), lambda: has[:, 0])
        return hit, hit * (1.0 - hit), has + 0.0 * hit

    def chance_from_ranks(self, ranks: Any) -> tuple[Any, Any, Any]:
        """:meth:`chance_moments` over relevant ranks: ``1 - T(k')`` with ``T`` a product of
        ``R`` factors (:func:`~rankstream.core.relevant.moments.miss_chance`)."""
        n, r, kk = self.rank_sizes(ranks)
        hit = 1.0 - miss_chance(kk, n, r)
        return hit, hit * (1.0 - hit), (r[:, None] > 0) + 0.0 * hit

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """1 when a relevant item ranks within ``k``; under ``ties="expected"`` the probability:
        with the first tie group holding a relevant item (``a`` items above it, ``t`` items,
        ``r`` relevant), 1 when it ends within ``k``, 0 when it starts past ``k``, else
        ``1 - C(t - r, m) / C(t, m)`` with ``m = k - a`` of its places within ``k``."""
        if ranks.ties != "expected":
            return np.minimum(self.rank_hits_at_k(ranks, rel), 1.0)
        a, t, r = ranks.first_group(rel)
        out = []
        for k in self.top_k:
            m = np.clip(float(k) - a, 0.0, t)
            miss = np.ones_like(a)  # C(t - r, m) / C(t, m) = prod_{i < r} (t - m - i) / (t - i)
            for i in range(int(np.max(np.where(np.isfinite(a), r, 0.0), initial=0.0))):
                step = np.where(i < r, np.maximum(t - m - i, 0.0) / np.maximum(t - i, 1.0), 1.0)
                miss = miss * step
            out.append(np.where(np.isfinite(a), 1.0 - miss, 0.0))
        return np.stack(out, axis=1)
