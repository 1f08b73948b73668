"""Per-list AUC and group AUC (GAUC): the mean of each list's ROC AUC.

For one list with ``P`` relevant items (the positives: ``label > 0``, or ``label >= t`` with
``relevance_threshold=t``) and ``Q`` other items (the negatives), the AUC is the probability that
a relevant item scores above a non-relevant one, ties counting one half (the Mann-Whitney /
midrank form, scikit-learn's ``roc_auc_score`` of the list)::

    AUC = (1 / (P Q)) * sum_{a relevant} sum_{b not relevant} ([s_a > s_b] + 0.5 [s_a = s_b])

defined for lists holding both classes. A list with one class only has no AUC: it is skipped
(``empty="skip"``, the default; TorchRec's ``GAUCMetric`` skips it too) or counted as 0
(``empty="zero"``). Masked items are not in the list.

The metric is the weighted mean of the per-list AUCs over the counted lists,
``sum_i w_i AUC_i / sum_i w_i``:

* ``weight_by_size=False`` (:class:`AUCKernel`, ``"auc"``): ``w_i`` is the list's
  ``sample_weight`` (1 without one): every list counts alike, as TorchRec's ``GAUCMetric``
  (which averages its sessions' AUCs unweighted);
* ``weight_by_size=True`` (:class:`GAUCKernel`, ``"gauc"``): ``w_i`` is the list's
  ``sample_weight`` times its number of items ``n_i`` (the impressions: the DIN paper's
  impression-weighted GAUC, ``sum_i n_i AUC_i / sum_i n_i``).

Per-item weights (``weighting="keras_rs"``) do not enter the AUC of a list; they give each list
its keras-rs weight, as for the binary metrics. The ``ties`` convention does not change the
value: ties are counted one half whatever their order.

Cost: there is no ``k``; every item's place is needed, so the metric sorts every list whole
(one top-``N`` of the scores, i.e. a sort per row) and once more to find where each run of equal
scores starts (one top-``N`` of a ``(B, N)`` key), then a few cumulative sums and gathers over
``(B, N)``, in blocks of rows where values are read back (eager): a block's temporaries stay a
small share of the batch. The base's own selection is only the top 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.base import WHOLE_LIST, ListOutput, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.selection import join_rows, row_slices
from rankstream.core.lists.shared import BatchShared


def midrank_auc(ops: Any, scores: Array, pos: Array, neg: Array) -> tuple[Array, Array, Array]:
    """``(AUC, P, Q)`` per list ``(B,)``: the midrank AUC of ``scores`` ``(B, N)`` with ``pos``
    and ``neg`` ``(B, N)`` 0/1 (in the accumulation dtype; an item that is neither, a masked
    one, counts for nothing wherever it ranks), 0 where ``P Q = 0``.

    With the items sorted by score (any order among equal scores), a relevant item at place
    ``j`` wins against the non-relevant items after its run of equal scores and ties with those
    inside it: ``sum_j pos_j (Q - (Q_gt(j) + Q_ge(j)) / 2)``, ``Q_gt(j)`` the non-relevant
    items scored above it and ``Q_ge(j)`` those scored at least as high. Both are the exclusive
    cumulative count of the non-relevant items read at the start of the run of ``j`` and of the
    next run; the starts are found by one more top-``N`` (of ``start_j * (N + 1 - j)``: the
    starts in increasing place first)."""
    b, n = scores.shape[0], scores.shape[1]
    acc = pos.dtype
    # each temporary is dropped once read for the last time: a block's peak is a few arrays
    vals, idx = ops.topk(scores, n)
    p = ops.take_along(pos, idx)
    q = ops.take_along(neg, idx)
    del idx
    first = ops.zeros((b, 1), p, acc) + 1.0
    start = ops.concat([first, ops.cast(vals[:, 1:] != vals[:, :-1], acc)], axis=1)
    del vals
    run = ops.cumsum(start, axis=1)  # 1..G: the run of each place
    places = ops.arange(1, n + 1, p, acc)
    _, starts = ops.topk(start * (n + 1.0 - places)[None, :] * 1.0, n)  # starts[:, g] = place of run g+1
    del start, _
    g = ops.cast(run, ops.int_dtype()) - 1
    q_before = ops.cumsum(q, axis=1) - q  # non-relevant items at earlier places
    q_total = ops.sum(q, axis=1)
    del q
    q_gt = ops.take_along(q_before, ops.take_along(starts, g))
    last = run[:, -1:]
    nxt = ops.take_along(starts, ops.minimum(g + 1, n - 1))
    del starts, g
    q_ge = ops.where(run < last, ops.take_along(q_before, nxt), q_total[:, None])
    del run, nxt, q_before
    wins = ops.sum(p * (q_total[:, None] - 0.5 * (q_gt + q_ge)), axis=1)
    del q_gt, q_ge
    p_total = ops.sum(p, axis=1)
    pairs = p_total * q_total
    auc = ops.where(pairs > 0, wins / ops.where(pairs > 0, pairs, 1.0), 0.0)
    return auc, p_total, q_total


@dataclass
class AUCOutput(ListOutput):
    """A :class:`ListOutput` with every list's number of items ``(B,)`` (``weight_by_size``;
    None without)."""

    size: Array | None = None


class AUCKernel(BinaryListKernel):
    """The mean of the per-list AUC over the lists holding both classes (see the module
    docstring). Args: ``weight_by_size`` (False: each list weighs its ``sample_weight``; True:
    times its number of items, the impression-weighted GAUC); the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "auc"

    def __init__(self, *, weight_by_size: bool = False, **conventions: Any) -> None:
        super().__init__(WHOLE_LIST, **conventions)  # one value per list, from the whole list
        if not isinstance(weight_by_size, bool):
            raise TypeError(f"weight_by_size must be True or False, got {weight_by_size!r}")
        self.weight_by_size = weight_by_size

    def depth(self, ctx: Context, batch: ListBatch, shared: BatchShared) -> int:
        """1: the metric reads the scores themselves (kept in ``shared``), not the selection."""
        shared.scores = (batch.scores, batch.valid)
        return 1

    def list_values(self, sel: Selection) -> ListOutput:
        ops = sel.ops
        scores = sel.shared.scores[0]
        b, n = int(scores.shape[0]), int(scores.shape[1])
        # where values are read back (eager), large batches go in blocks of rows: the sort and
        # its dozen (rows, N) temporaries of each block stay a small share of the scores
        z = sel.ctx.sizes  # from auc_block_from scores on (eager), sorted in auc_blocks blocks of rows
        step = max(1, b // z.auc_blocks) if sel.ctx.read_back and b * n >= z.auc_block_from else b
        auc, n_pos, n_neg, w_rel = join_rows(ops, [self._block(sel, rows) for rows in row_slices(b, step)])
        return AUCOutput(auc[:, None], (n_pos > 0) & (n_neg > 0), n_pos, w_rel, size=self._sizes(sel))

    def _sizes(self, sel: Selection) -> Array | None:
        """With ``weight_by_size``, every list's number of items ``(B,)`` (None without)."""
        if not self.weight_by_size:
            return None
        ops, acc = sel.ops, sel.positions.dtype
        if sel.full_valid is None:
            return ops.zeros((sel.item_labels.shape[0],), sel.positions, acc) + float(sel.n)
        return ops.valid_counts(sel.full_valid, acc, sel.ctx.workspace)  # from the mask's bytes

    def _block(self, sel: Selection, rows: slice) -> tuple[Array, Array, Array, Array | None]:
        """``(AUC, P, Q, W)`` of the lists ``rows`` (``W``: the relevant items' weight sums
        under per-item weights, else None)."""
        ops, acc = sel.ops, sel.positions.dtype
        scores, valid = sel.shared.scores
        scores = scores[rows]
        rel = self.is_relevant(sel, sel.item_labels[rows])
        if valid is None:
            pos, neg = rel, 1.0 - rel
            key = scores
        else:
            member = ops.cast(valid[rows], acc)
            pos, neg = rel * member, (1.0 - rel) * member
            key = ops.where(valid[rows], scores, float("-inf"))
            del member
        del rel, scores
        w_rel = (
            None if sel.batch_item_weights is None else ops.sum(pos * sel.block_item_weights(rows), axis=1)
        )
        auc, n_pos, n_neg = midrank_auc(ops, key, pos, neg)
        return auc, n_pos, n_neg, w_rel

    def from_ranks(self, ranks: Any) -> ListOutput:
        """The AUC from the relevant ranks, ``P = R`` positives and ``Q = n - R`` negatives:
        a relevant slot (``a`` items above, ``t`` in its tie group, ``r`` relevant among them,
        ``R_-`` relevant above) wins against the ``n - a - t - (R - R_- - r)`` negatives below
        it and ties with the ``t - r`` in its group (one half each)."""
        rel = ranks.relevant(self.conventions.relevance_threshold)
        n_pos = ranks.count(rel)
        n_neg = ranks.n - n_pos
        same, before = ranks.group_sums(rel)
        below = ranks.n[:, None] - ranks.above - ranks.size - (n_pos[:, None] - before - same)
        wins = ranks.count(rel * (below + 0.5 * (ranks.size - same)))
        pairs = n_pos * n_neg
        auc = np.where(pairs > 0, wins / np.where(pairs > 0, pairs, 1.0), 0.0)
        size = ranks.n.copy() if self.weight_by_size else None
        return AUCOutput(auc[:, None], (n_pos > 0) & (n_neg > 0), n_pos, None, size=size)

    def weighed(self, ops: Ops, out: ListOutput, item_weighted: bool) -> ListOutput:
        """The base's; with ``weight_by_size`` each list's weight times its number of items."""
        out = super().weighed(ops, out, item_weighted)
        size = getattr(out, "size", None)
        if size is not None:
            out.weights = size if out.weights is None else out.weights * size
        return out

    def to_python(self, value: Any) -> float:
        """The one value as a Python float."""
        return super().to_python(value)[0]

    def __repr__(self) -> str:
        level = "" if self.confidence is None else f", confidence={self.confidence}"
        return f"{type(self).__name__}(weight_by_size={self.weight_by_size}, {self.conventions}{level})"


class GAUCKernel(AUCKernel):
    """Group AUC: the per-list AUC averaged with each list weighted by its number of items
    (``weight_by_size=True``, the DIN paper's impression weighting); ``weight_by_size=False`` is
    :class:`AUCKernel`. Args as :class:`AUCKernel`."""

    name = "gauc"

    def __init__(self, *, weight_by_size: bool = True, **conventions: Any) -> None:
        super().__init__(weight_by_size=weight_by_size, **conventions)
