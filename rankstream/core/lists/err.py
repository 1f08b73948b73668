"""Expected reciprocal rank at k (Chapelle, Metzler, Zhang and Grinspan, CIKM 2009).

For one list with ``g_j`` the grade (label) of the item ranked ``j``-th by the scores and a
stated maximum grade ``g_max`` (``max_grade``)::

    R_j = (2^{g_j} - 1) / 2^{g_max}                    (the chance the user stops at j)
    ERR@k = sum_{j <= k} (R_j / j) * prod_{i < j} (1 - R_i)

Defaults as ir_measures' ``ERR@k`` (its gdeval provider, the TREC Web track's ``gdeval.pl``):
``g_max = 4``. Grades are clipped to ``[0, g_max]``: a label below 0 (or below
``relevance_threshold=t``, when given) counts as 0, as gdeval drops judgments ``<= 0``; a label
above ``g_max`` counts as ``g_max`` (gdeval refuses such a qrels file; clipping keeps
``R_j < 1``, so the running product never reaches 0 and ``log2(1 - R_j)`` stays finite). Grades
need not be integers. A list is relevant when it holds a label ``> 0`` (``>= t``); lists without
one score 0 and are skipped or counted per the ``empty`` policy (gdeval reports only topics with a
relevant judgment). Per-item weights (``weighting="keras_rs"``) do not enter the per-list value;
they give each list its weight as for the binary metrics.

The product is read as ``2^{cumsum(log2(1 - R))}`` (exclusive cumulative sum): no cumulative
product is needed. Cost: the base's one top-``max(k)`` selection, two cumulative sums, one count
of the relevant items.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.binary import BinaryListKernel


class ERRKernel(BinaryListKernel):
    """ERR@k for every ``k`` in ``top_k``. Args: ``top_k``; ``max_grade`` (``g_max``, default 4
    as gdeval; labels above it count as ``g_max``); the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords
    (``relevance_threshold=t``: labels below ``t`` count as 0)."""

    name = "err"
    ranked_bytes = 72  # measured 68: the stopping probabilities and their running product

    def __init__(self, top_k: int | list[int] = 10, *, max_grade: float = 4.0, **conventions: Any) -> None:
        super().__init__(top_k, **conventions)
        if isinstance(max_grade, bool) or not isinstance(max_grade, (int, float)):
            raise TypeError(f"max_grade must be a positive number, got {max_grade!r}")
        if not (math.isfinite(max_grade) and 0 < max_grade <= 64):
            raise ValueError(f"max_grade must be a number in (0, 64], got {max_grade!r}")
        self.max_grade = float(max_grade)
        if self.conventions.ties == "expected":  # ERR is a product along the ranking: no group mean
            raise ValueError(
                "ERR has no exact tie-expected form here (its value is a product along the ranking, "
                "so the mean over the orders of tied items is not a group mean): use ties='first' "
                "or ties='random', got ties='expected'"
            )

    def list_values(self, sel: Selection) -> ListOutput:
        ops = sel.ops
        _, n_rel, w_rel = self.ranked_relevance(sel)
        g = sel.labels
        t = self.conventions.relevance_threshold
        if t is not None:
            g = ops.where(g >= t, g, 0.0)
        g = ops.minimum(ops.maximum(g, 0.0), self.max_grade)
        stop = (ops.exp2(g) - 1.0) / 2.0**self.max_grade
        stay = ops.log2(1.0 - stop)
        reached = ops.exp2(ops.cumsum(stay, axis=1) - stay)  # prod_{i < j} (1 - R_i)
        err = self.cut(sel, ops.cumsum(stop * reached / sel.positions, axis=1))
        return ListOutput(err, n_rel > 0, n_rel, w_rel)

    def from_ranks(self, ranks: Any) -> ListOutput:
        """``ERR@k`` from the relevant ranks: the slots in rank order (the other items have grade
        0 and stop no one), ``sum_s (R_s / r_s) prod_{s' before s} (1 - R_s')`` over ``r_s <= k``."""
        rel = ranks.relevant(self.conventions.relevance_threshold)
        n_rel = ranks.count(rel)
        t = self.conventions.relevance_threshold
        g = ranks.labels if t is None else np.where(ranks.labels >= t, ranks.labels, 0.0)
        g = np.where(ranks.present, np.clip(g, 0.0, self.max_grade), 0.0)
        order = ranks.by_rank()
        rank = np.take_along_axis(ranks.rank, order, axis=1)
        stop = (np.exp2(np.take_along_axis(g, order, axis=1)) - 1.0) / 2.0**self.max_grade
        stay = np.log2(1.0 - stop)
        reached = np.exp2(np.cumsum(stay, axis=1) - stay)
        terms = stop * reached / rank
        err = np.stack([np.where(rank <= k, terms, 0.0).sum(axis=1) for k in self.top_k], axis=1)
        return ListOutput(err, n_rel > 0, n_rel, None)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", max_grade={self.max_grade})"
