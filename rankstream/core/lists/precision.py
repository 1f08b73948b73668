"""Precision at k.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores::

    P@k = (1 / Z) * sum_{j <= k} rel_j

with ``Z`` a convention: ``denominator="k"``, ``Z = k`` (trec_eval ``P@k``, torchmetrics
``RetrievalPrecision``; a list shorter than ``k`` cannot reach 1) or ``denominator="valid"``,
``Z = min(k, n)`` with ``n`` the number of items of the list (keras-rs ``PrecisionAtK``).

An item is relevant when ``label > 0`` or, with ``relevance_threshold=t`` (``t > 0``), when
``label >= t``; masked items are not in the list. Lists with no relevant item have ``P@k = 0``
and are skipped or counted per the ``empty`` policy. Per-item weights (``weighting="keras_rs"``)
do not enter the per-list value; they give each list its weight as keras-rs does, from
``sum_i w_i rel_i / sum_i rel_i``. Cost: the base's one top-``max(k)`` selection, one cumulative
sum, one count of the relevant items.

With ``ties="expected"``: ``E[P@k] = (1 / Z) sum_{j <= k} r_c(j) / t_c(j)``, each position's tie
group's relevant share (``t_c`` items, ``r_c`` relevant), i.e.
``(R_{c*-1} + (k - T_{c*-1}) r_{c*} / t_{c*}) / Z`` with ``c*`` the group holding position ``k``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.lists.base import Array, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import binary_counts, clipped_ks, hits_terms
from rankstream.core.relevant.moments import hits_moments
from rankstream.core.relevant.ranks import ratio


class PrecisionKernel(BinaryListKernel):
    """P@k for every ``k`` in ``top_k``. Args: ``top_k``; ``denominator`` (``"k"`` or
    ``"valid"``); the conventions of :class:`~rankstream.core.lists.conventions.ListConventions`."""

    name = "precision"

    @property
    def order_free_past_end(self) -> bool:  # type: ignore[override]
        """Over ``k``: the hits alone (over the list's items, ``"valid"``, it reads the ranking)."""
        return self.denominator == "k"

    def __init__(self, top_k: int | list[int] = 10, *, denominator: str = "k", **conventions: Any) -> None:
        super().__init__(top_k, **conventions)
        if denominator not in ("k", "valid"):
            raise ValueError(f"denominator must be 'k' or 'valid', got {denominator!r}")
        self.denominator = denominator

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        ops, hits = sel.ops, self.hits(sel, rel)
        if self.denominator == "k":
            den = ops.asarray([float(k) for k in self.top_k], like=hits, dtype=hits.dtype)
        else:  # min(k, n): the list's items within the top k (masked items rank last)
            listed = sel.positions[None, :] if sel.in_list is None else ops.cumsum(sel.in_list, axis=1)
            den = self.cut(sel, listed)
        return self.divide(sel, hits, den)

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: the hits in the top ``k'`` are hypergeometric, over ``Z = k``
        (or ``k' = min(k, N)``, ``"valid"``); best ``min(R, k') / Z``."""
        r, n, _ = binary_counts(self, sel)
        kk = clipped_ks(self, sel, n)
        if self.denominator == "k":
            z = sel.ops.asarray([float(k) for k in self.top_k], kk, kk.dtype)[None, :] + 0.0 * kk
        else:
            z = kk
        return hits_terms(sel, kk, n, r, z)

    def chance_from_ranks(self, ranks: Any) -> tuple[Any, Any, Any]:
        """:meth:`chance_moments` over relevant ranks (host closed forms in ``N``, ``R``, ``k'``)."""
        n, r, kk = self.rank_sizes(ranks)
        z = np.asarray([float(k) for k in self.top_k])[None, :] + 0.0 * kk if self.denominator == "k" else kk
        mean, var = hits_moments(kk, n, r)
        return ratio(mean, z), ratio(var, z * z), ratio(np.minimum(r[:, None], kk), z)

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """``hits@k / k``, or over ``min(k, n)`` (``"valid"``), from the relevant ranks."""
        hits = self.rank_hits_at_k(ranks, rel)
        ks = np.asarray([float(k) for k in self.top_k])[None, :]
        den = ks if self.denominator == "k" else np.minimum(ks, ranks.n[:, None])
        return ratio(hits, den)
