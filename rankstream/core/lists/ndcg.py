"""Normalised discounted cumulative gain at k.

For one list, with ``g(.)`` the gain, ``d(j)`` the discount of rank ``j`` and ``y_(j)`` the
label of the item ranked ``j``-th by the scores::

    DCG@k  = sum_{j <= k} g(y_(j)) * d(j)
    IDCG@k = the same over the labels sorted in decreasing order (the ideal ranking)
    nDCG@k = DCG@k / IDCG@k   (0 when IDCG@k = 0)

Defaults: ``g(y) = 2^y - 1`` (``gain="exp_rank"``; ``"linear_rank"`` is ``g(y) = y``, or any
callable on arrays) and ``d(j) = 1 / log2(j + 1)`` (or any callable of the 1-based rank).
With ``relevance_threshold=t`` (ignite, default 1.0 there) labels below ``t`` count as 0
before the gain; ``None`` uses the labels as they are (keras-rs). A list is relevant when
its best label is ``>= t`` (or ``> 0``); lists without one are skipped or count 0 per the
``empty`` policy.

With per-item weights ``w`` (``weighting="keras_rs"``, keras-rs's convention) every gain is
weighted: ``DCG@k = sum_{j <= k} w_(j) g(y_(j)) d(j)`` and the ideal ranking orders the items
by ``w_i g(y_i)``, so ``IDCG@k`` sums the ``k`` largest ``w_i g(y_i)`` times ``d(j)``. A
callable gain (which need not be monotone in the label) always takes the ideal by gain,
``g(y_i)``, as keras-rs does; the named gains are monotone and keep one ``topk`` of the labels.

With ``ties="expected"`` (scikit-learn's ``ndcg_score`` with ``ignore_ties=False``): the
expectation over every order of the tied items. DCG is linear in the gains at each position,
so ``E[DCG@k] = sum_{j <= k} d(j) G_c(j) / t_c(j)``, ``G_c`` the sum of the (weighted) gains
of the ``t_c`` items of the tie group holding position ``j``; ``IDCG@k`` does not depend on the
scores. The group straddling the selection's end is summed by one comparison pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rankstream.core.backends import Array
from rankstream.core.lists.base import ListKernel, ListOutput, Selection, call_user
from rankstream.core.lists.chance import dcg_terms, share_ideal
from rankstream.core.lists.ties import group_means
from rankstream.core.relevant.moments import clipped, discount_sums, linear_statistic_moments
from rankstream.core.relevant.ranks import ratio

GAIN_NAMES = ("exp_rank", "linear_rank")


def exp_gain(y: Array) -> Array:
    """``2^y - 1``."""
    return 2.0**y - 1.0


def linear_gain(y: Array) -> Array:
    """``y``."""
    return y


class NDCGKernel(ListKernel):
    """nDCG@k for every ``k`` in ``top_k`` from one top-``max(k)`` selection.

    Args: ``top_k``; ``gain`` (``"exp_rank"``, ``"linear_rank"`` or a callable), ``discount``
    (a callable of the 1-based rank, or None); the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords
    (``relevance_threshold`` default 1.0, ignite's)."""

    name = "ndcg"
    ranked_bytes = 48  # measured 41-43: the ideal ranking and the stacked gains

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        gain: str | Callable[[Array], Array] = "exp_rank",
        discount: Callable[[Array], Array] | None = None,
        relevance_threshold: float | None = 1.0,
        **conventions: Any,
    ) -> None:
        super().__init__(top_k, relevance_threshold=relevance_threshold, **conventions)
        if isinstance(gain, str):
            if gain not in GAIN_NAMES:
                raise ValueError(f"gain must be one of {GAIN_NAMES} or a callable, got {gain!r}")
            self.gain_fn: Callable[[Array], Array] = exp_gain if gain == "exp_rank" else linear_gain
        elif callable(gain):
            self.gain_fn = gain
        else:
            raise TypeError(f"gain must be one of {GAIN_NAMES} or a callable, got {gain!r}")
        if discount is not None and not callable(discount):
            raise TypeError(f"discount must be a callable of the 1-based rank or None, got {discount!r}")
        if relevance_threshold is not None and not relevance_threshold >= 0:
            raise ValueError(f"relevance_threshold must be >= 0 or None, got {relevance_threshold!r}")
        self.gain = gain
        self.discount_fn = discount  # None: 1 / log2(rank + 1)

    def _gains(self, sel: Selection, labels: Array) -> Array:
        """Gains of labels, those below the threshold counting as 0."""
        t = self.conventions.relevance_threshold
        labels = labels if t is None else sel.ops.where(labels >= t, labels, 0.0)
        if self.gain == "exp_rank":  # 2^y - 1 with the backend's exp2 (torch: half a pow's time)
            labels = sel.ops.exp2(labels)  # the thresholded copy let go before the subtraction
            return labels - 1.0
        if self.gain == "linear_rank":
            return labels
        return call_user(sel.ops, self.gain_fn, labels)

    def dcg(self, sel: Selection) -> tuple[Array, Array]:
        """``(c, DCG)``: the discounts truncated at every ``k`` ``(K, len(top_k))`` (see
        :meth:`discount_cuts`) and ``DCG@k`` ``(B, len(top_k))`` of the ranking (shared with
        :class:`~rankstream.core.lists.dcg.DCGKernel`)."""
        cuts = self.discount_cuts(sel)
        gains = self._gains(sel, sel.labels)
        if sel.in_list is not None:
            gains = gains * sel.in_list
        if sel.item_weights is not None:
            gains = gains * sel.item_weights
        if sel.ties is not None:  # each position's expected gain: its tie group's mean
            gains = group_means(sel, gains, self.gain_key(), self.item_gain(sel))
        return cuts, sel.ops.matmul(gains, cuts)

    def gain_key(self) -> tuple[Any, ...]:
        """What the comparison pass of ``ties="expected"`` sums for the gains (per batch)."""
        gain = self.gain if isinstance(self.gain, str) else id(self.gain_fn)
        return ("gain", gain, self.conventions.relevance_threshold)

    def item_gain(self, sel: Selection) -> Callable[..., Array]:
        """The (weighted) gain of the batch's items as a function of their labels and item
        weights: what the comparison pass of ``ties="expected"`` sums over the open group."""
        acc = sel.positions.dtype

        def gain(labels: Array, weights: Array | None) -> Array:
            g = self._gains(sel, sel.ops.cast(labels, acc))
            return g if weights is None else g * weights

        return gain

    def discounts(self, sel: Selection) -> Array:
        """The discounts ``(K,)`` of the ranks 1..K."""
        ops, pos = sel.ops, sel.positions
        if self.discount_fn is not None:
            return call_user(ops, self.discount_fn, pos)
        return 1.0 / ops.log2(pos + 1.0)

    def discount_cuts(self, sel: Selection) -> Array:
        """The discounts truncated after every ``k`` ``(K, len(top_k))``: ``gains @ cuts`` is
        ``DCG@k`` at every ``k`` (:meth:`~rankstream.core.lists.base.ListKernel.cut_weights`).
        The default ones are kept by the instance where values are read back (eager, so
        nothing traced is kept)."""
        make = lambda: self.cut_weights(sel, self.discounts(sel))  # noqa: E731
        if self.discount_fn is not None or not sel.ctx.read_back:
            return make()
        pos = sel.positions
        key = (sel.k, pos.dtype, getattr(pos, "device", None))
        return sel.ctx.workspace.get(f"log2_discount_cuts{self.top_k}", key, make)

    def item_gains(self, sel: Selection) -> tuple[Array, Array]:
        """``(g, wg)``: every item's gain and (weighted) gain ``(B, N)``, ``wg`` 0 on items
        not in the list (one full pass over the labels, full-size: the metrics' own paths take
        :meth:`item_gain_rows`)."""
        y = sel.ops.cast(sel.full_labels, sel.positions.dtype)
        g = self._gains(sel, y)
        wg = g if sel.batch_item_weights is None else g * sel.full_item_weights
        if sel.full_valid is not None:
            wg = wg * sel.ops.cast(sel.full_valid, y.dtype)
        return g, wg

    def item_gain_rows(self, sel: Selection, top: bool = True) -> tuple[Array | None, Array, Array, Array]:
        """``(ideal, g_sum, wg_sum, g_in)``: per list, the ``K`` largest (weighted) gains
        ``w_i g(y_i)`` of its items in decreasing order ``(B, K)`` (0 past its last item; None
        unless ``top``), the
        sum of every item's gain ``g(y_i)`` (labels 0 on items not in the list), of the
        weighted gains over its items, and of the gains over its items ``(B,)``. One pass over
        the items by blocks of rows (:meth:`Selection.by_rows`: no full-size temporary where
        values are read back), once per batch."""
        ops, valid = sel.ops, sel.full_valid

        def block(rows: slice) -> tuple[Array | None, Array, Array, Array]:
            g = self._gains(sel, sel.block_labels(rows))
            wg = g if sel.batch_item_weights is None else g * sel.block_item_weights(rows)
            g_sum = ops.sum(g, axis=1)
            if valid is None:
                return ops.topk(wg, sel.k)[0] if top else None, g_sum, ops.sum(wg, axis=1), g_sum
            member = valid[rows]
            g_in = ops.sum(ops.where(member, g, 0.0), axis=1)
            wg = ops.where(member, wg, 0.0)
            if not top:
                return None, g_sum, ops.sum(wg, axis=1), g_in
            best = ops.topk(ops.where(member, wg, float("-inf")), sel.k)[0]
            return ops.where(best > float("-inf"), best, 0.0), g_sum, ops.sum(wg, axis=1), g_in

        key = self.gain_key()
        if not top and (key, True) in sel.shared.item_gains:
            return sel.shared.item_gains[(key, True)]
        return sel.once("item_gains", lambda: sel.by_rows(block), (key, top))

    def list_values(self, sel: Selection) -> ListOutput:
        if self.chance:  # chance's pass of the gains may give the ideal ranking first
            share_ideal(self, sel)
        ops = sel.ops
        named = sel.batch_item_weights is None and isinstance(self.gain, str)
        if (
            named and sel.full_valid is None and sel.ties is None and sel.ctx.read_back
            and sel.labels.shape[0] * sel.k <= sel.ctx.sizes.ndcg_stacked
        ):  # fmt: skip
            return self._stacked(sel)
        cuts, dcg = self.dcg(sel)
        if named:
            # Named gains are monotone: the ideal ranking is one topk of the labels, and a list
            # is relevant when its best label reaches the threshold (keras-rs: a positive gain).
            ideal, ideal_in = sel.ideal(prefix=True)  # (B, L): past L every ideal gain is 0
            ideal_gains = self._gains(sel, ideal)
            if ideal_in is not None:
                ideal_gains = ideal_gains * ideal_in
            top = ideal[:, 0] if ideal_in is None else ideal[:, 0] * ideal_in[:, 0]
            t = self.conventions.relevance_threshold
            relevant = top > 0 if t is None else top >= t
            if ideal_in is not None:
                relevant = relevant & (ideal_in[:, 0] > 0)
            idcg = ops.matmul(ideal_gains, cuts[: ideal_gains.shape[1]])
            return ListOutput(self.divide(sel, dcg, idcg), relevant, ideal_gains[:, 0] + 0.0)
        # One pass over every item's (weighted) gain, items not in the list last; the ideal
        # ranking orders the items by (weighted) gain (a callable gain need not be monotone).
        ideal_gains, g_sum, wg_sum, _ = self.item_gain_rows(sel)
        idcg = ops.matmul(ideal_gains, cuts)
        return ListOutput(self.divide(sel, dcg, idcg), ideal_gains[:, 0] > 0, g_sum, wg_sum)

    # -- over the ranks of the relevant items (rankstream.core.relevant) -------------------
    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: DCG@k is a linear permutation statistic (Hoeffding), divided
        by ``IDCG@k`` (:func:`~rankstream.core.lists.chance_gains.dcg_terms`)."""
        return dcg_terms(self, sel, normalised=True)

    def rank_gains(self, labels: np.ndarray) -> np.ndarray:
        """The gains of host labels (those below the threshold count as 0); a callable gain
        must give 0 at label 0 (the items that are not slots hold label 0)."""
        t = self.conventions.relevance_threshold
        y = labels if t is None else np.where(labels >= t, labels, 0.0)
        if self.gain == "exp_rank":
            return np.exp2(y) - 1.0
        if self.gain == "linear_rank":
            return y
        zero = np.asarray(self.gain_fn(np.zeros(1)), np.float64)
        if np.any(zero != 0.0):
            raise ValueError(
                f"gain must give 0 at label 0 over relevant ranks (the unlisted items hold label 0), "
                f"got gain(0) = {zero.tolist()}"
            )
        return np.broadcast_to(np.asarray(self.gain_fn(y), np.float64), y.shape)

    def rank_discount(self, positions: np.ndarray) -> np.ndarray:
        """The discounts of 1-based host positions (float64)."""
        if self.discount_fn is None:
            return 1.0 / np.log2(positions + 1.0)
        return np.broadcast_to(np.asarray(self.discount_fn(positions), np.float64), positions.shape)

    def rank_dcg(self, ranks: Any, gains: np.ndarray) -> np.ndarray:
        """``DCG@k`` ``(Q, len(top_k))``: ``sum_s g_s d(rank_s)`` over the slots within ``k``;
        under ``ties="expected"`` each slot's mean discount over its tie group's places cut at
        ``k`` (a table of the discounts' cumulative sums up to the deepest such place)."""
        k_max = float(max(self.top_k))
        deepest = np.where(ranks.present, np.minimum(ranks.above + ranks.size, k_max), 0.0)
        table = np.zeros(1)
        if ranks.ties == "expected" and deepest.size:
            top = int(deepest[ranks.size > 1.0].max(initial=0.0))
            table = np.concatenate([[0.0], np.cumsum(self.rank_discount(np.arange(1.0, top + 1.0)))])
        cumulative = lambda m: table[m.astype(np.int64)]  # noqa: E731
        return np.stack(
            [
                ranks.count(gains * ranks.positional(float(k), self.rank_discount, cumulative))
                for k in self.top_k
            ],
            1,
        )

    def from_ranks(self, ranks: Any) -> ListOutput:
        """``nDCG@k`` from the relevant ranks: :meth:`rank_dcg` over ``IDCG@k``, the slots'
        gains in decreasing order at places ``1 .. min(k, M)``."""
        gains = np.where(ranks.present, self.rank_gains(ranks.labels), 0.0)
        dcg = self.rank_dcg(ranks, gains)
        ideal, idcg = self.rank_idcg(gains)
        top = ideal[:, 0] if ideal.shape[1] else np.zeros(ideal.shape[0])
        if isinstance(self.gain, str):
            relevant = ranks.count(ranks.relevant(self.conventions.relevance_threshold)) > 0
        else:
            relevant = top > 0
        return ListOutput(ratio(dcg, idcg), relevant, top + 0.0)

    def rank_idcg(self, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ideal, IDCG@k)``: the slots' gains ``(Q, M)`` in decreasing order (every other item
        holds gain 0) and ``IDCG@k`` ``(Q, len(top_k))``, the ideal gains at places ``1 .. min(k, M)``."""
        ideal = -np.sort(-gains, axis=1)
        places = np.arange(1.0, ideal.shape[1] + 1.0)
        disc = self.rank_discount(places) if places.size else places
        idcg = np.stack([(ideal * np.where(places <= k, disc, 0.0)).sum(axis=1) for k in self.top_k], 1)
        return ideal, idcg

    def rank_chance(self, ranks: Any, normalised: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(E, Var, best)`` of DCG@k (``normalised`` False) or nDCG@k under a random ranking of
        each list's ``N`` items, from the slots' gains (every other item's is 0): Hoeffding's
        linear permutation statistic with the discounts' prefix sums
        (:func:`~rankstream.core.relevant.moments.linear_statistic_moments`); best ``IDCG@k``
        (nDCG: 1 where ``IDCG@k > 0``)."""
        gains = np.where(ranks.present, self.rank_gains(ranks.labels), 0.0)
        kk = clipped(self.top_k, ranks.n)
        d1, d2 = discount_sums(None if self.discount_fn is None else self.rank_discount, kk)
        mean, var = linear_statistic_moments(ranks.count(gains), ranks.count(gains * gains), ranks.n, d1, d2)
        idcg = self.rank_idcg(gains)[1]
        if not normalised:
            return mean, var, idcg
        return ratio(mean, idcg), ratio(var, idcg * idcg), ratio(idcg, idcg)

    def chance_from_ranks(self, ranks: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`chance_moments` over relevant ranks (:meth:`rank_chance`)."""
        return self.rank_chance(ranks, normalised=True)

    def _stacked(self, sel: Selection) -> ListOutput:
        """The named-gain case without a mask or item weights (eager: the batch size is known):
        the ranking's labels and the ideal ones stacked into one ``(2B, K)`` array, so the
        gains and the product with the truncated discounts are one call each."""
        ops = sel.ops
        b = int(sel.labels.shape[0])
        ideal, _ = sel.ideal()
        gains = self._gains(sel, ops.concat([sel.labels, ideal], axis=0))
        cut = ops.matmul(gains, self.discount_cuts(sel))
        top, t = ideal[:, 0], self.conventions.relevance_threshold
        relevant = top > 0 if t is None else top >= t
        ndcg = self.divide(sel, cut[:b], cut[b:])
        return ListOutput(ndcg, relevant, gains[b:, 0] + 0.0)
