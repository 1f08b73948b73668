"""Mean average precision at k.

For one list with binary relevance ``rel_j`` of the item at rank ``j``::

    AP@k = (1 / Z) * sum_{j <= k} rel_j * P@j,    P@j = (1 / j) * sum_{i <= j} rel_i

and ``MAP@k`` is the (weighted) mean of ``AP@k`` over the counted lists. The denominator
``Z`` is a convention:

* ``denominator="min"``: ``Z = min(R, k)`` with ``R`` the number of relevant items of the
  list (ignite's ``rec_sys.MAP``; an AP of 1 is reachable at every k);
* ``denominator="all"``: ``Z = R`` (keras-rs ``MeanAveragePrecision``, scikit-learn's
  ``average_precision_score`` at ``k = num_items``).

An item is relevant when ``label > 0`` (ignite) or, with ``relevance_threshold=t``, when
``label >= t`` (keras-rs uses ``t = 1``). Lists with ``R = 0`` have ``AP = 0`` and are
skipped or counted per the ``empty`` policy.

With per-item weights ``w`` (``weighting="keras_rs"`` and a ``(batch, num_items)``
``sample_weight``, keras-rs's convention), ``P@j`` stays unweighted and
``AP@k = (1 / Z) * sum_{j <= k} w_(j) rel_j * P@j`` with ``Z = sum_i w_i rel_i`` (``"all"``)
or, for ``"min"``, the sum of the ``k`` largest ``w_i rel_i`` (the best reachable numerator;
``min(R, k)`` for unit weights).

With ``ties="expected"``: the expectation over every order of the tied items. ``Z`` does not
depend on the order, and at position ``j``, the ``i``-th place (0-based) of a group of ``t``
items with ``r`` relevant (``W`` their sum of ``w * rel``; ``W = r`` without item weights) and
``R_-`` relevant items above it, ``E[w_(j) rel_(j) P@j] = (W / t)(R_- + 1 + i (r - 1) / (t - 1)) / j``
(the item at ``j`` is each of the group's with probability ``1 / t``; each of the ``i`` places
before it then holds one of the other ``r - 1`` relevant items with probability
``(r - 1) / (t - 1)``). Summed over a group's places up to ``k`` this is MATH.md's closed form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends import Array
from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import ap_terms, binary_counts, clipped_ks
from rankstream.core.lists.ties import average_precision_terms
from rankstream.core.relevant.moments import ap_moments
from rankstream.core.relevant.ranks import harmonic_range, ratio

DENOMINATORS = ("min", "all")


class MAPKernel(BinaryListKernel):
    """MAP@k for every ``k`` in ``top_k`` from one top-``max(k)`` selection.

    Args: ``top_k``; ``denominator`` (``"min"`` or ``"all"``); the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords (``relevance_threshold``
    default None: ``label > 0``)."""

    name = "map"

    def __init__(self, top_k: int | list[int] = 10, *, denominator: str = "min", **conventions: Any) -> None:
        super().__init__(top_k, **conventions)
        if denominator not in DENOMINATORS:
            raise ValueError(f"denominator must be one of {DENOMINATORS}, got {denominator!r}")
        self.denominator = denominator

    def list_values(self, sel: Selection) -> ListOutput:
        ops = sel.ops
        rel = self.is_relevant(sel, sel.labels)  # 0 on positions past the list's items
        if sel.ties is not None:  # each position's expected term over the orders of the tied items
            hits = self.expected_terms(sel, rel)
        else:
            hits = ops.cumsum(rel, axis=1) / sel.positions  # precision at each position
            hits = hits * rel if sel.item_weights is None else hits * rel * sel.item_weights
        del rel  # each (B, K) array let go once read: a narrow list's selection is most of an update's memory
        hits = ops.cumsum(hits, axis=1)
        sum_prec = self.cut(sel, hits)
        del hits
        n_rel = self.count_relevant(sel)  # R
        w_rel = None
        if sel.batch_item_weights is not None:
            w_rel, top = self.weighted_relevance(sel, top=self.denominator == "min")
            if self.denominator == "min":  # the best numerator reachable in the top k
                denom = self.cut(sel, ops.cumsum(top, axis=1))
            else:
                denom = w_rel[:, None]
        elif self.denominator == "min":
            denom = ops.stack([ops.minimum(n_rel, float(k)) for k in self.top_k], axis=1)
        else:
            denom = n_rel[:, None]
        return ListOutput(self.divide(sel, sum_prec, denom), n_rel > 0, n_rel, w_rel)

    def expected_terms(self, sel: Selection, rel: Array) -> Array:
        """``(B, K)``: ``E[w_(j) rel_(j) P@j]`` at each position over the orders of the tied
        items (:func:`~rankstream.core.lists.ties.average_precision_terms`)."""
        t = self.conventions.relevance_threshold
        wrel = None if sel.item_weights is None else rel * sel.item_weights
        weighted = lambda labels, weights: self.is_relevant(sel, labels) * weights  # noqa: E731
        keys = (self.relevance_key(), ("weighted_relevant", t))
        return average_precision_terms(sel, rel, wrel, keys, (self.item_relevance(sel), weighted))

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: ``E[W_k]`` and ``E[W_k^2]`` of ``AP@k = W_k / Z`` from the
        falling-factorial ratios of ``R`` and ``N`` (:func:`~rankstream.core.lists.chance.ap_terms`)."""
        r, n, _ = binary_counts(self, sel)
        return ap_terms(self, sel, clipped_ks(self, sel, n), n, r)

    def chance_from_ranks(self, ranks: Any) -> tuple[Any, Any, Any]:
        """:meth:`chance_moments` over relevant ranks
        (:func:`~rankstream.core.relevant.moments.ap_moments`)."""
        n, r, kk = self.rank_sizes(ranks)
        mean, var = ap_moments(kk, n, r)
        rr = r[:, None] + 0.0 * kk
        z = (
            np.minimum(rr, np.asarray([float(k) for k in self.top_k])[None, :])
            if self.denominator == "min"
            else rr
        )
        return ratio(mean, z), ratio(var, z * z), ratio(np.minimum(rr, kk), z)

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """``AP@k`` from the relevant ranks: ``(1 / Z) sum_s rel_s [r_s <= k] i_s / r_s`` with
        ``i_s`` the relevant slots ranked at or above ``s``; under ``ties="expected"`` per tie
        group with a relevant item (``r`` relevant of ``t``, places ``a = above + 1 .. b =
        min(above + t, k)``, ``R_-`` relevant items above it, ``q = (r - 1) / (t - 1)``)
        ``(r / t) [(R_- + 1 - a q)(H_b - H_{a - 1}) + q (b - a + 1)]`` (MATH.md), per slot with
        ``r`` replaced by its own relevance."""
        if ranks.ties != "expected":
            order = ranks.by_rank()
            rank = np.take_along_axis(ranks.rank, order, axis=1)
            rel_s = np.take_along_axis(rel, order, axis=1)
            terms = rel_s * np.cumsum(rel_s, axis=1) / rank
            sums = [np.where(rank <= k, terms, 0.0).sum(axis=1) for k in self.top_k]
        else:
            same, before = ranks.group_sums(rel)
            t = ranks.size
            q = np.where(t > 1.0, (same - 1.0) / np.maximum(t - 1.0, 1.0), 0.0)
            a = ranks.above + 1.0
            sums = []
            for k in self.top_k:
                b = np.minimum(ranks.above + t, float(k))
                inside = (rel > 0) & (b >= a)
                h = np.where(inside, harmonic_range(np.where(inside, a, 1.0), np.where(inside, b, 0.0)), 0.0)
                term = ((before + 1.0 - a * q) * h + q * (b - a + 1.0)) / t
                sums.append(np.where(inside, term, 0.0).sum(axis=1))
        if self.denominator == "min":
            den = np.stack([np.minimum(n_rel, float(k)) for k in self.top_k], axis=1)
        else:
            den = n_rel[:, None]
        return ratio(np.stack(sums, axis=1), den)
