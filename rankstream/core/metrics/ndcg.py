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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rankstream.core.metrics.lists import ListKernel, Selection
from rankstream.core.ops import Array

GAIN_NAMES = ("exp_rank", "linear_rank")


def exp_gain(y: Array) -> Array:
    """``2^y - 1``."""
    return 2.0**y - 1.0


def linear_gain(y: Array) -> Array:
    """``y``."""
    return y


def log2_discount(rank: Array) -> Array:
    """``1 / log2(rank + 1)`` for 1-based ranks (numpy or torch arrays; the kernel's default
    discount computes the same with the batch's own ops, whatever the backend)."""
    from rankstream.core.ops import get_ops

    return 1.0 / get_ops(rank).log2(rank + 1.0)


class NDCGKernel(ListKernel):
    """nDCG@k for every ``k`` in ``top_k`` from one top-``max(k)`` selection."""

    name = "ndcg"

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        gain: str | Callable[[Array], Array] = "exp_rank",
        discount: Callable[[Array], Array] | None = None,
        relevance_threshold: float | None = 1.0,
        empty: str = "skip",
        ties: str = "first",
        seed: Any = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        generator: Any = None,
    ) -> None:
        super().__init__(
            top_k,
            empty=empty,
            ties=ties,
            seed=seed,
            weighting=weighting,
            negative_labels=negative_labels,
            generator=generator,
        )
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
        self.relevance_threshold = relevance_threshold

    def _relevance(self, sel: Selection, labels: Array) -> Array:
        t = self.relevance_threshold
        if t is None:
            return labels
        return sel.ops.where(labels >= t, labels, 0.0)

    def _gains(self, sel: Selection, labels: Array, in_list: Array | None) -> Array:
        g = self.gain_fn(self._relevance(sel, labels))
        return g if in_list is None else g * in_list

    def has_relevant(self, sel: Selection) -> Array:
        if "ideal_gains" in sel.cache:
            return sel.cache["ideal_gains"][:, 0] > 0
        ideal, ideal_in_list = sel.cache["ideal"]
        top = ideal[:, 0]
        t = self.relevance_threshold
        rel = top > 0 if t is None else top >= t
        if ideal_in_list is not None:
            rel = rel & (ideal_in_list[:, 0] > 0)
        return rel

    def _ideal_by_gains(self, sel: Selection) -> bool:
        # A callable gain need not be monotone in the label: the ideal ranking orders the
        # items by gain. The named gains are monotone, so one topk of the labels does.
        return sel.full_item_weights is not None or not isinstance(self.gain, str)

    def list_relevance(self, sel: Selection) -> tuple[Array, Array]:
        ops = sel.ops
        if "gain_sum" in sel.cache:  # the full pass of values() computed the sums
            g_sum, wg_sum = sel.cache["gain_sum"], sel.cache["weighted_gain_sum"]
            rel_pos = g_sum > 0
            plw = ops.where(rel_pos, wg_sum / ops.where(rel_pos, g_sum, 1.0), 0.0)
            return rel_pos, plw if sel.weights is None else plw * sel.weights
        # Named gains are 0 at label 0 (so on masked items) and monotone: the list has
        # relevance iff its best label has a positive gain, and sum W R / sum R is the
        # list's constant weight.
        ideal, ideal_in_list = sel.cache["ideal"]
        top_in = None if ideal_in_list is None else ideal_in_list[:, :1]
        rel_pos = self._gains(sel, ideal[:, :1], top_in)[:, 0] > 0
        w = 1.0 if sel.weights is None else sel.weights
        return rel_pos, ops.where(rel_pos, w, 0.0 * ideal[:, 0])

    def values(self, sel: Selection) -> Array:
        ops = sel.ops
        if self.discount_fn is None:
            disc = 1.0 / ops.log2(sel.positions + 1.0)
        else:
            disc = self.discount_fn(sel.positions)
        gains = self._gains(sel, sel.labels, sel.in_list)
        if sel.item_weights is not None:
            gains = gains * sel.item_weights
        dcg = self._cut(sel, ops.cumsum(gains * disc, axis=1))
        if self._ideal_by_gains(sel):
            # One full pass: every item's (weighted) gain, masked items weighted 0, and the
            # ideal ranking as the top-K of those (keras-rs's ideal ordering).
            acc = sel.positions.dtype
            y = ops.cast(sel.full_labels, acc)
            if sel.full_valid is not None:
                y = ops.where(sel.full_valid, y, 0.0)
            g = self.gain_fn(self._relevance(sel, y))
            if sel.full_item_weights is not None:
                wg = g * sel.full_item_weights
            elif sel.full_valid is not None:
                wg = g * ops.cast(sel.full_valid, acc)
            else:
                wg = g
            if sel.full_valid is None:
                ideal_gains = ops.topk(wg, sel.k)[0]
            else:  # items not in the list rank after every item of it (gains may be < 0)
                ideal_gains = ops.topk(ops.where(sel.full_valid, wg, float("-inf")), sel.k)[0]
                ideal_gains = ops.where(ideal_gains > float("-inf"), ideal_gains, 0.0)
            sel.cache["ideal_gains"] = ideal_gains
            sel.cache["gain_sum"] = ops.sum(g, axis=1)
            sel.cache["weighted_gain_sum"] = ops.sum(wg, axis=1)
            idcg = self._cut(sel, ops.cumsum(ideal_gains * disc, axis=1))
        else:
            ideal, ideal_in_list = sel.cache["ideal"] = sel.ideal()
            idcg = self._cut(sel, ops.cumsum(self._gains(sel, ideal, ideal_in_list) * disc, axis=1))
        ok = idcg > 0
        return ops.where(ok, dcg / ops.where(ok, idcg, 1.0), 0.0)

    def __repr__(self) -> str:
        return (
            f"NDCGKernel(top_k={self.top_k}, gain={self.gain!r}, relevance_threshold="
            f"{self.relevance_threshold!r}, empty={self.empty!r}, ties={self.ties!r})"
        )
