"""Tie groups of a selection, and the expected list metrics over every order of the tied items.

With ``ties="expected"`` a list metric is the exact expectation over all orderings of each group
of equal scores (McSherry & Najork, ECIR 2008), every order of a group equally likely. Only the
groups inside the top ``k`` and the one group straddling position ``k`` matter: the items ranked
above a group are the same in every order, and so are the group's positions.

The structure (:class:`TieGroups`, made once per batch by :func:`tie_groups`) comes from the
``(B, K)`` selection: a group starts where the score or the list membership changes between
adjacent positions (masked items, ranked last, never share a group with an item of the list).
For each position: its group's start and end within the selection. The group holding position
``K`` may go on past the selection; its full size and relevant count (or gain sum) come from one
comparison pass of the batch's scores with that group's score (``Ops.tie_sums``, tile by tile on
the CPU: no full-size temporary), done once per batch and quantity (:meth:`Selection.once`).
Every smaller ``k`` falls inside the selection, where its straddling group is either complete
or is that same last group.

Per position ``j`` (1-based) of group ``c`` (positions ``a_c .. a_c + t_c - 1``, ``t_c`` items
of which ``r_c`` relevant, ``R_{c-1}`` relevant items ranked above it, ``i = j - a_c``):

* a linear metric (DCG, precision, recall, R-precision) reads the group's mean per position:
  ``E[g_(j)] = G_c / t_c`` with ``G_c`` the group's (weighted) gain or relevance sum;
* the probability that the first relevant item is at ``j`` (hit rate: its sum up to ``k``;
  reciprocal rank: its sum divided by ``j``) is nonzero only in the first group holding a
  relevant item (``R_{c-1} = 0 < r_c``), where it is
  ``prod_{l < i} (t_c - r_c - l) / (t_c - l) * r_c / (t_c - i)``;
* average precision's term at ``j``, ``E[rel_(j) * #relevant in 1..j] / j``, is
  ``(W_c / t_c) * (R_{c-1} + 1 + i * (r_c - 1) / (t_c - 1)) / j`` (the last fraction 0 when
  ``t_c = 1``), ``W_c = r_c``, or with per-item weights the group's sum of ``w * rel``.

The derivations and the enumerations that check them are in ``docs/ties.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rankstream.core.backends import Array, Context

__all__ = ["TieGroups", "average_precision_terms", "first_relevant", "group_means", "tie_groups"]


@dataclass
class TieGroups:
    """The tie groups of a ``(B, K)`` selection (see the module docstring).

    Attributes:
        start: ``(B, K)`` ints, the first position (0-based) of each position's group.
        end: ``(B, K)`` ints, its last position within the selection.
        offset: ``(B, K)`` floats, the position's place in its group (``j - start``), made
            when read (one array fewer held while the metrics that need no offset run).
        size: ``(B, K)`` floats, the group's size within the selection (made when read).
        open: ``(B, K)`` bool, positions of a group that may go on past the selection (the
            last group of a list whose item at ``K`` is in the list, when ``K < N``); None
            when the selection holds every item.
        boundary: ``(B,)`` the score at position ``K`` (the open group's score).
        scores: the batch's ``(B, N)`` scores (the comparison pass reads them).
        rows: the rows the comparison pass reads (None: all; those whose item at ``K`` ties
            with the next one, where that is known).
    """

    start: Array
    end: Array
    open: Array | None
    boundary: Array
    scores: Array
    rows: Array | None = None
    ops: Any = None
    acc: Any = None

    @property
    def size(self) -> Array:
        """``(B, K)`` floats, each position's group's size within the selection."""
        return self.ops.cast(self.end - self.start, self.acc) + 1.0

    @property
    def offset(self) -> Array:
        """``(B, K)`` floats, each position's place in its group."""
        k = int(self.start.shape[1])
        pos = self.ops.arange(0, k, self.size, self.acc)
        return pos[None, :] - self.ops.cast(self.start, self.acc)


def tie_groups(
    ctx: Context, values: Array, in_list: Array | None, scores: Array, n: int, acc: Any,
    extends: Array | None = None, extend_rows: Array | None = None,
) -> TieGroups:  # fmt: skip
    """The tie groups of a selection whose items have the scores ``values`` ``(B, K)``
    (``in_list``: 1.0 where a position holds an item of the list, None: all do). ``extends``
    ``(B,)`` and ``extend_rows``: the rows whose group at ``K`` goes on past the selection and
    their indices, where they are known (:class:`~rankstream.core.topk.Ranked`)."""
    ops = ctx.ops
    k = int(values.shape[1])
    differ = values[:, 1:] != values[:, :-1]
    if in_list is not None:
        differ = differ | (in_list[:, 1:] != in_list[:, :-1])
    first = ops.ones_bool(values[:, :1])
    start, end = ops.run_bounds(ops.concat([first, differ], axis=1))
    del differ, first
    is_open = None
    if k < n and (extend_rows is None or int(extend_rows.shape[0]) > 0):
        is_open = end == k - 1
        if in_list is not None:
            is_open = is_open & (in_list[:, -1:] > 0)
        if extends is not None:
            is_open = is_open & extends[:, None]
    boundary = values[:, -1]
    if extend_rows is not None and is_open is not None:
        boundary = ops.take(boundary, extend_rows, axis=0)
    return TieGroups(
        start=start, end=end, open=is_open, boundary=boundary, scores=scores,
        rows=extend_rows, ops=ops, acc=acc,
    )  # fmt: skip


def group_sums(
    sel: Any, x: Array, key: Any, item_fn: Callable[..., Array] | None
) -> tuple[Array, Array, Array]:
    """``(t, s, before)`` ``(B, K)``: for each position, its group's full size ``t``, the
    group's sum ``s`` of the per-position ``x`` (the open group's over all its items: ``item_fn``
    of the batch's labels and item weights, summed by the comparison pass, kept per batch under
    ``key``) and the sum of ``x`` over the positions above the group."""
    ops, tg = sel.ops, sel.ties
    if tg.open is not None:  # the comparison pass first: its tiles come before the sums' arrays
        count, total = sel.once("tie_sums", lambda: _pass(sel, item_fn), key)
    c = ops.cumsum(x, axis=1)
    s = ops.take_along(c, tg.end)
    c = c - x  # the sums over the positions above each one
    before = ops.take_along(c, tg.start)
    del c
    s = s - before
    t = tg.size
    if tg.open is not None:  # the open group's positions: its full size and sum
        if tg.rows is not None:  # the pass read those rows: back to one value per row
            zeros = ops.zeros((int(x.shape[0]),), x, x.dtype)
            count = ops.set_rows(zeros, tg.rows, count)
            total = None if total is None else ops.set_rows(zeros, tg.rows, total)
        t = ops.where(tg.open, count[:, None], t)
        s = ops.where(tg.open, total[:, None], s)
    return t, s, before


def _pass(sel: Any, item_fn: Callable[..., Array] | None) -> tuple[Array, Array | None]:
    tg = sel.ties
    items = [sel.item_labels, sel.batch_item_weights]  # read on tied items of the lists only
    acc = sel.positions.dtype
    return sel.ops.tie_sums(
        tg.scores, tg.boundary, sel.full_valid, items, item_fn, acc, sel.ctx.workspace, rows=tg.rows
    )


def group_means(sel: Any, x: Array, key: Any, item_fn: Callable[..., Array]) -> Array:
    """The expectation of the per-position ``x`` ``(B, K)`` over the orders of the tied items:
    its group's mean at every position."""
    t, s, _ = group_sums(sel, x, key, item_fn)
    return s / t


def first_relevant(sel: Any, rel: Array, key: Any, item_fn: Callable[..., Array]) -> Array:
    """``(B, K)``: the probability that the first relevant item of the list is at each position,
    over the orders of the tied items (``rel`` the 0/1 relevance of the selection in any order
    among ties; ``item_fn`` the 0/1 relevance of the batch's items)."""
    ops, tg = sel.ops, sel.ties
    t, r, before = group_sums(sel, rel, key, item_fn)
    i = tg.offset
    first = ops.cast((before == 0.0) & (r > 0.0), rel.dtype)  # the first group holding a relevant item
    # log of the l-th factor (t - r - l) / (t - l) of "no relevant item in the first i places";
    # factors past t - r are 0, handled by the indicator below, so their log is kept finite
    u = (ops.log(ops.maximum(t - r - i, 1.0)) - ops.log(t - i)) * first
    none_before = ops.xp.exp(ops.cumsum(u, axis=1) - u) * ops.cast(i <= t - r, rel.dtype)
    return first * none_before * r / (t - i)


def average_precision_terms(
    sel: Any, rel: Array, wrel: Array | None, keys: tuple[Any, Any], fns: tuple[Callable[..., Array], Any]
) -> Array:
    """``(B, K)``: average precision's expected term at each position,
    ``E[w_(j) rel_(j) * #relevant in 1..j] / j`` (``wrel`` the per-position ``w * rel`` with
    per-item weights, else None and ``w = 1``)."""
    ops, tg = sel.ops, sel.ties
    t, r, before = group_sums(sel, rel, keys[0], fns[0])
    w = r if wrel is None else group_sums(sel, wrel, keys[1], fns[1])[1]
    q = ops.where(t > 1.0, (r - 1.0) / ops.maximum(t - 1.0, 1.0), 0.0)
    return (w / t) * (before + 1.0 + tg.offset * q) / sel.positions
