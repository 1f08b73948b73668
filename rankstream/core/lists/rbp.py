"""Rank-biased precision (Moffat and Zobel, TOIS 2008) with persistence ``p``, and its residual.

For one list with ``r_j`` the gain of the item ranked ``j``-th by the scores::

    RBP@k = (1 - p) * sum_{j <= k} r_j p^(j - 1)
    residual@k = p^min(k, n)                  (n: the list's number of items)

``r_j`` is the binary relevance (``label > 0``, or ``label >= t`` with ``relevance_threshold=t``;
ir_measures' ``RBP(rel=t, p=...)``, ranx's ``rbp`` on binary judgments) or, with
``graded=True``, the label of a relevant item and 0 otherwise (ranx's ``rbp`` on graded
judgments, which sums the grades as they are). ``p`` defaults to 0.8 (ir_measures').

``k`` truncates the ranking (the user stops at ``k``); without ``@k`` (the default ``top_k``)
the whole list is read. The residual is what the items the metric did not see could still add
with gains of at most 1 (Moffat and Zobel's residual, ``(1 - p) sum_{j > d} p^(j - 1) = p^d``
for a ranking read to depth ``d``): every item of a list is judged here, so it is ``p^d`` with
``d = min(k, n)``. It is reported as the quantity ``residual`` (its mean over the lists, weighted
as the value) with ``residual=True`` (off by default: the value alone, one field less):
``RBP`` lies in ``[value, value + residual]`` for binary gains. ir_measures
computes the residual in its trectools provider and returns the value alone.

Relevance, masks, the ``empty`` policy and per-item weights as in
:mod:`~rankstream.core.lists.binary`. Cost: the base's one top-``max(k)`` selection and one
``(B, K) @ (K, len(top_k))`` product.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.lists.base import WHOLE_LIST, Array, ListField, ListOutput, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.ties import group_means


@dataclass
class RBPOutput(ListOutput):
    """A :class:`ListOutput` with the residual ``(B, len(top_k))`` of every list."""

    residual: Array = None


def _residual_of(out: ListOutput) -> Array:
    return out.residual


class RBPKernel(BinaryListKernel):
    """RBP@k for every ``k`` in ``top_k`` (default: the whole list), with its residual. Args:
    ``top_k``; ``p`` (the persistence, in (0, 1), default 0.8); ``graded`` (False: binary gains;
    True: the labels of the relevant items); ``residual`` (True: report the mean residual as the
    quantity ``"residual"``); the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "rbp"

    def __init__(
        self,
        top_k: int | list[int] = WHOLE_LIST,
        *,
        p: float = 0.8,
        graded: bool = False,
        residual: bool = False,
        **conventions: Any,
    ) -> None:
        super().__init__(top_k, **conventions)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p < 1:
            raise ValueError(f"p must be a number in (0, 1), got {p!r}")
        if not isinstance(graded, bool):
            raise TypeError(f"graded must be True or False, got {graded!r}")
        if not isinstance(residual, bool):
            raise TypeError(f"residual must be True or False, got {residual!r}")
        self.p, self.graded, self.residual = float(p), graded, residual

    @property
    def quantities(self) -> tuple[str, ...]:
        """``("residual",)`` with ``residual=True``, then the interval's with a ``confidence``
        level."""
        return ("residual", *super().quantities) if self.residual else super().quantities

    def list_fields(self) -> dict[str, ListField]:
        """The base's fields and, with ``residual=True``, ``residual_sum`` (the weighted sum of
        the residuals, per ``k``)."""
        fields = super().list_fields()
        if self.residual:
            fields["residual_sum"] = ListField((len(self.top_k),), _residual_of)
        return fields

    def list_values(self, sel: Selection) -> ListOutput:
        ops = sel.ops
        rel, n_rel, w_rel = self.ranked_relevance(sel)
        if self.graded:  # linear in the gains: under ties="expected" each position's group mean
            gains = rel * sel.labels
            if sel.ties is not None:
                graded = lambda labels, weights: self.is_relevant(sel, labels) * labels  # noqa: E731
                key = ("rbp_graded", self.conventions.relevance_threshold)
                gains = group_means(sel, gains, key, graded)
        else:
            gains = self.expected_relevance(sel, rel)
        log_p = math.log2(self.p)
        weights = (1.0 - self.p) * ops.exp2((sel.positions - 1.0) * log_p)
        rbp = ops.matmul(gains, self.cut_weights(sel, weights))
        if not self.residual:
            return ListOutput(rbp, n_rel > 0, n_rel, w_rel)
        acc = rbp.dtype
        if sel.in_list is None:
            size = ops.zeros((rbp.shape[0],), rbp, acc) + float(sel.n)
        else:
            size = ops.row_count(sel.full_valid, acc, sel.ctx.workspace)  # tile by tile
        depth = ops.stack([ops.minimum(size, float(min(k, sel.n))) for k in self.top_k], axis=1)
        return RBPOutput(rbp, n_rel > 0, n_rel, w_rel, residual=ops.exp2(depth * log_p))

    def from_ranks(self, ranks: Any) -> ListOutput:
        """``RBP@k = sum_s r_s w(rank_s)`` over the slots within ``k``, ``w(j) = (1 - p) p^(j -
        1)`` (under ``ties="expected"`` its mean over the tie group's places, from
        ``sum_{j <= m} w(j) = 1 - p^m``); the residual ``p^min(k, n)``."""
        rel = ranks.relevant(self.conventions.relevance_threshold)
        n_rel = ranks.count(rel)
        gains = rel * ranks.labels if self.graded else rel
        p = self.p
        weight = lambda j: (1.0 - p) * np.exp2((j - 1.0) * math.log2(p))  # noqa: E731
        cumulative = lambda m: -np.expm1(m * math.log(p))  # noqa: E731
        rbp = np.stack(
            [ranks.count(gains * ranks.positional(float(k), weight, cumulative)) for k in self.top_k], 1
        )
        if not self.residual:
            return ListOutput(rbp, n_rel > 0, n_rel, None)
        depth = np.stack([np.minimum(ranks.n, float(k)) for k in self.top_k], axis=1)
        return RBPOutput(rbp, n_rel > 0, n_rel, None, residual=np.exp2(depth * math.log2(p)))

    def compute(self, sums: Mapping[str, Any], xp: Any = np) -> dict[str, Array]:
        """The base's results and, with ``residual=True``, ``residual``:
        ``residual_sum / weight_sum`` (0 before any list; NaN while ``invalid`` lists were
        counted)."""
        out = super().compute(sums, xp)
        if not self.residual:
            return out
        w = sums["weight_sum"]
        r = sums["residual_sum"]
        residual = xp.where(w > 0, r / xp.where(w > 0, w, 1.0), 0.0 * r)
        out["residual"] = xp.where(sums["invalid"] > 0, float("nan"), residual)
        return out

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", p={self.p}, graded={self.graded}, residual={self.residual})"
