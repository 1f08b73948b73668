"""The base of the list metrics of binary relevance (precision, recall, hit rate, reciprocal
rank, R-precision, MAP): an item is relevant when ``label > 0`` or, with
``relevance_threshold=t`` (``t > 0``), when ``label >= t``; masked items are not in the list.

Most of them are a function of the ranked relevance ``rel_j`` ``(B, K)`` and the number of
relevant items ``R`` of each list (:meth:`BinaryListKernel.binary_values`); the lists without a
relevant item are skipped or counted per the ``empty`` policy, and per-item weights give each
list its keras-rs weight from ``W = sum_i w_i rel_i`` (they do not enter the per-list values).
Cost: the base's one top-``max(k)`` selection, one count of the relevant items, and a
cumulative sum or two over the selection.

With ``ties="expected"`` each value is its expectation over every order of the tied items
(:mod:`~rankstream.core.lists.ties`): precision, recall and R-precision read each position's
group mean of the relevance (:meth:`BinaryListKernel.expected_relevance`), hit rate and
reciprocal rank the probability that the first relevant item sits at each position
(:meth:`BinaryListKernel.first_relevant`); the group straddling the selection's end is counted
by one comparison pass over the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rankstream.core.backends import Array, Context
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.base import ListKernel, ListOutput, Selection
from rankstream.core.lists.shared import BatchShared
from rankstream.core.lists.ties import first_relevant, group_means
from rankstream.core.relevant.moments import clipped

if TYPE_CHECKING:
    from rankstream.core.relevant.ranks import RelevantRanks


class BinaryListKernel(ListKernel):
    """A list metric of binary relevance: ``label > 0``, or ``label >= relevance_threshold > 0``.

    Args: ``top_k``; the conventions of :class:`~rankstream.core.lists.conventions.ListConventions`
    as keywords; a subclass declares its own options before them."""

    def __init__(self, top_k: int | list[int] = 10, **conventions: Any) -> None:
        super().__init__(top_k, **conventions)
        if (t := self.conventions.relevance_threshold) is not None and not t > 0:
            raise ValueError(f"relevance_threshold must be > 0 or None (label > 0), got {t!r}")

    def ranked_relevance(self, sel: Selection) -> tuple[Array, Array, Array | None]:
        """``(rel, R, W)``: the 0/1 relevance ``(B, K)`` of the ranked items (0 past the list's
        items), ``R`` per list and, with per-item weights, ``W = sum_i w_i rel_i`` (else None)."""
        w_rel = None if sel.batch_item_weights is None else self.weighted_relevance(sel)[0]
        return self.is_relevant(sel, sel.labels), self.count_relevant(sel), w_rel

    def weighted_relevance(self, sel: Selection, top: bool = False) -> tuple[Array, Array | None]:
        """``(W, top)`` with per-item weights: ``W = sum_i w_i rel_i`` per list ``(B,)`` and, with
        ``top``, the ``K`` largest ``w_i rel_i`` of each list in decreasing order ``(B, K)``
        (else None). One pass over the items by blocks of rows (:meth:`Selection.by_rows`),
        once per batch."""
        ops, t = sel.ops, self.conventions.relevance_threshold

        def block(rows: slice) -> tuple[Array, Array | None]:
            labels = sel.item_labels[rows]
            rel = labels > 0 if t is None else labels >= t  # NaN: False
            if sel.full_valid is not None:
                rel = rel & sel.full_valid[rows]
            w_items = ops.where(rel, ops.cast(sel.batch_item_weights[rows], sel.positions.dtype), 0.0)
            return ops.sum(w_items, axis=1), ops.topk(w_items, sel.k)[0] if top else None

        if not top and (t, True) in sel.shared.weighted_relevance:
            return sel.shared.weighted_relevance[(t, True)]
        return sel.once("weighted_relevance", lambda: sel.by_rows(block), (t, top))

    #: the values read only the hits at each ``k`` (precision, recall, hit rate, F1): at a ``k``
    #: reaching every item of the batch's lists the hits are ``R`` whatever the order, so such a
    #: metric ranks nothing when every ``k`` does (:meth:`depth`)
    order_free_past_end = False

    def depth(self, ctx: Context, batch: ListBatch, shared: BatchShared) -> int:
        """The largest ``k``; 1 for a metric that reads only the hits where every ``k`` reaches
        past the lists' end (the whole list: the hits are the relevant count, no ranking)."""
        if self.order_free_past_end and self.top_k[0] >= batch.list_size:
            return 1
        return super().depth(ctx, batch, shared)

    def hits(self, sel: Selection, rel: Array) -> Array:
        """The relevant items among the top ``k`` ``(B, len(top_k))``, at every ``k`` (their
        expected number under ``ties="expected"``); at a ``k`` reaching every item of the
        batch's lists, the relevant count ``R``."""
        cum = sel.ops.cumsum(self.expected_relevance(sel, rel), axis=1)
        return self.past_end(sel, self.cut(sel, cum), lambda: self.count_relevant(sel))

    def past_end(self, sel: Selection, values: Array, whole: Any) -> Array:
        """``values`` ``(B, len(top_k))`` with the columns of every ``k`` reaching all the items
        of the batch's lists (``k >= N``) replaced by ``whole()`` ``(B,)``: the value of the
        whole list, whatever the order. A metric that reads only the hits selects one place
        where every ``k`` does (:meth:`depth`), so its values there come from the whole list."""
        if self.top_k[-1] < sel.n:
            return values
        full = whole()
        return sel.ops.stack([full if k >= sel.n else values[:, i] for i, k in enumerate(self.top_k)], axis=1)

    def relevance_key(self) -> tuple[str, Any]:
        """What the comparison pass of ``ties="expected"`` sums for the relevance (per batch)."""
        return ("relevant", self.conventions.relevance_threshold)

    def item_relevance(self, sel: Selection) -> Any:
        """The 0/1 relevance of the batch's items as a function of their labels (and item
        weights): what the comparison pass of ``ties="expected"`` sums over the open group."""
        return lambda labels, weights: self.is_relevant(sel, labels)

    def expected_relevance(self, sel: Selection, rel: Array) -> Array:
        """``rel`` ``(B, K)`` as it is, or under ``ties="expected"`` each position's expected
        relevance (its tie group's mean)."""
        if sel.ties is None:
            return rel
        return group_means(sel, rel, self.relevance_key(), self.item_relevance(sel))

    def first_relevant(self, sel: Selection, rel: Array) -> Array:
        """``(B, K)``: 1 at the first relevant position of each list (0 elsewhere), or under
        ``ties="expected"`` the probability that the first relevant item is at each position."""
        ops = sel.ops
        if sel.ties is None:
            return ops.where(ops.cumsum(rel, axis=1) == 1.0, rel, 0.0)
        return first_relevant(sel, rel, self.relevance_key(), self.item_relevance(sel))

    def list_values(self, sel: Selection) -> ListOutput:
        rel, n_rel, w_rel = self.ranked_relevance(sel)
        return ListOutput(self.binary_values(sel, rel, n_rel), n_rel > 0, n_rel, w_rel)

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        """Per-list values ``(B, len(top_k))`` from the ranked relevance ``rel`` ``(B, K)`` and
        ``R`` ``(B,)``."""
        raise NotImplementedError

    # -- over the ranks of the relevant items (rankstream.core.relevant) -------------------
    def from_ranks(self, ranks: RelevantRanks) -> ListOutput:
        """The per-list output from the relevant items' ranks (:meth:`rank_values`): the
        relevance of each slot (the threshold), ``R`` per list."""
        rel = ranks.relevant(self.conventions.relevance_threshold)
        n_rel = ranks.count(rel)
        return ListOutput(self.rank_values(ranks, rel, n_rel), n_rel > 0, n_rel, None)

    def rank_sizes(self, ranks: RelevantRanks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(N, R, k')`` of the lists of ``ranks`` for the moments under a random ranking
        (:meth:`chance_from_ranks`, :mod:`~rankstream.core.relevant.moments`): the list sizes,
        the relevant counts (the threshold) and ``k' = min(k, N)`` ``(Q, len(top_k))``."""
        r = ranks.count(ranks.relevant(self.conventions.relevance_threshold))
        return ranks.n, r, clipped(self.top_k, ranks.n)

    def rank_values(self, ranks: RelevantRanks, rel: np.ndarray, n_rel: np.ndarray) -> np.ndarray:
        """Per-list values ``(Q, len(top_k))`` from the slots' relevance ``rel`` ``(Q, M)`` and
        ``R`` ``(Q,)`` (the dense :meth:`binary_values`' counterpart)."""
        raise NotImplementedError

    def rank_hits(self, ranks: RelevantRanks, rel: np.ndarray, k: Any) -> np.ndarray:
        """The relevant items within the top ``k`` per list ``(Q,)`` (``k`` a number or ``(Q,
        1)``): ``sum_s rel_s [rank_s <= k]``, under ``ties="expected"`` each slot's share of its
        tie group's places within ``k``, ``clip(k - above, 0, t) / t``."""
        return ranks.count(rel * ranks.in_top(k))

    def rank_hits_at_k(self, ranks: RelevantRanks, rel: np.ndarray) -> np.ndarray:
        """:meth:`rank_hits` at every ``k`` ``(Q, len(top_k))``."""
        return np.stack([self.rank_hits(ranks, rel, float(k)) for k in self.top_k], axis=1)
