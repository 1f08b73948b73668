"""One batch as a list metric sees it: the top-``K`` selection (:class:`Selection`), shared by
every metric of a collection, and what it computes once per batch (the ideal ranking, the masked
labels, the ranks' positions) and, under ``ties="expected"``, its tie groups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops
from rankstream.core.lists.shared import BatchShared

__all__ = ["Selection", "join_rows", "positions", "row_slices"]


@dataclass
class Selection:
    """One batch seen by a list metric. ``labels``, ``in_list``, ``item_weights`` are
    ``(B, K)`` over the ranked items (``labels`` 0 where an item is not in the list); the
    ``full_*`` arrays are the batch's ``(B, N)`` ones. ``item_labels`` are the batch's labels
    as given (whatever a masked item holds: read them with ``full_valid``); ``full_labels``,
    0 on items not in the list, is a masked copy made on first use (a full-size temporary:
    the default paths read ``item_labels`` and the mask instead). Likewise ``batch_item_weights``
    are the per-item weights as given and ``full_item_weights`` their masked copy in the
    accumulation dtype; the eager paths read them by blocks of rows (:meth:`by_rows`,
    :meth:`block_labels`, :meth:`block_item_weights`)."""

    ctx: Context
    k: int  # K = min(max(top_k), list size)
    labels: Array
    in_list: Array | None  # 1.0 where the ranked position holds an item of the list (None: all)
    positions: Array  # 1..K, shape (K,), in the accumulation dtype
    weights: Array | None  # (B,) per-list weights or None
    n: int
    item_labels: Array
    full_valid: Array | None
    item_weights: Array | None = None
    #: the batch's ``(B, N)`` per-item weights as given (any real dtype; read where ``full_valid``)
    batch_item_weights: Array | None = None
    #: what one metric computed from this batch for others (collections): per batch, never
    #: on a kernel, so kernels stay reentrant (named fields, :class:`BatchShared`)
    shared: BatchShared = field(default_factory=BatchShared)
    has_nan: bool | None = None  # NaN scores among the items (where values were read back)
    nan_rows: Array | None = None  # (B,) rows with NaN scores (where values could not be read back)
    values_ok: bool = False  # labels and weights read back as fine with the ranking (no bad data)
    #: ``ties="expected"``: the tie groups of the selection
    #: (:class:`~rankstream.core.lists.ties.TieGroups`; None under the other policies)
    ties: Any = None
    #: ``(B, K)`` the ranked items' column indices (item ids), in rank order, kept where a
    #: kernel reads them (its ``depth`` set ``shared.ranked_ids``); else None
    indices: Array | None = None

    @property
    def ops(self) -> Ops:
        return self.ctx.ops

    def once(self, name: str, make: Any, key: Any = None) -> Any:
        """Field ``name`` of :attr:`shared` (at ``key``), computed once per batch for every
        metric that asks (:meth:`BatchShared.once`)."""
        return self.shared.once(name, make, key)

    @property
    def full_labels(self) -> Array:
        """The batch's ``(B, N)`` labels, 0 on items not in the list (masked once per batch)."""
        if self.full_valid is None:
            return self.item_labels
        return self.once("full_labels", lambda: self.ops.where(self.full_valid, self.item_labels, 0.0))

    @property
    def full_item_weights(self) -> Array | None:
        """The batch's ``(B, N)`` per-item weights in the accumulation dtype, 0 on items not in
        the list (a full-size copy made once per batch, on first use; None without per-item
        weights)."""
        if self.batch_item_weights is None:
            return None
        return self.once("full_item_weights", lambda: self._weights_of(slice(None)))

    def _weights_of(self, rows: slice) -> Array:
        w = self.ops.cast(self.batch_item_weights[rows], self.positions.dtype)
        return w if self.full_valid is None else self.ops.where(self.full_valid[rows], w, 0.0)

    def row_blocks(self) -> list[slice]:
        """The blocks of rows of the per-row passes over every item (:meth:`by_rows`): one
        block (every row) where values are not read back or the batch is small."""
        if not self.ctx.read_back:  # traced: the batch size may be unknown
            return [slice(None)]
        b, n = int(self.item_labels.shape[0]), self.n
        z = self.ctx.sizes
        if b * n < z.row_blocks_from:
            return [slice(None)]
        return row_slices(b, max(1, min(b * n // z.row_block_share, z.row_block_max) // n))

    def by_rows(self, fn: Any) -> tuple[Any, ...]:
        """``fn(rows)`` (a tuple of per-row arrays, each ``(len(rows), ...)`` or None) over the
        blocks of :meth:`row_blocks`, joined along the rows: the temporaries of a pass over
        every item are those of one block."""
        return join_rows(self.ops, [fn(rows) for rows in self.row_blocks()])

    def block_labels(self, rows: slice) -> Array:
        """The labels of the rows ``rows`` in the accumulation dtype, 0 on items not in the list."""
        y = self.ops.cast(self.item_labels[rows], self.positions.dtype)
        return y if self.full_valid is None else self.ops.where(self.full_valid[rows], y, 0.0)

    def block_item_weights(self, rows: slice) -> Array:
        """The per-item weights of the rows ``rows`` in the accumulation dtype, 0 on items not
        in the list (the rows of :attr:`full_item_weights`, without the full-size copy)."""
        if self.shared.full_item_weights is not None:
            return self.shared.full_item_weights[rows]
        return self._weights_of(rows)

    def ideal(self, prefix: bool = False) -> tuple[Array, Array | None]:
        """Top-``K`` labels of the items of each list in decreasing order (the ideal ranking),
        0 past the last item, and a (B, K) 0/1 array marking real items (None without a
        mask). One ``topk`` of the labels per batch.

        ``prefix``: where values are read back and ``K`` is large (whole lists), only the
        columns up to the last one where some list holds a nonzero label: every later column
        is 0 in every list, so a sum of gains that vanish at 0 loses nothing, and the gains
        and products of a few hundred columns replace those of ``K`` (one small host read)."""
        return self.once("ideal", lambda: self._ideal(prefix), prefix)

    def _ideal(self, prefix: bool) -> tuple[Array, Array | None]:
        ops, valid = self.ops, self.full_valid
        if valid is None:
            vals, ok = ops.topk(self.item_labels, self.k)[0], None
        else:  # items not in the list get -inf tile by tile: no masked copy of the labels
            vals = ops.masked_topk(
                self.item_labels, self.k, valid, self.ctx.workspace, cap=self.ctx.tile_cap
            )[0]
            ok = vals > float("-inf")
            vals = ops.where(ok, vals, 0.0)
        if prefix and self.ctx.read_back and self.k > self.ctx.sizes.ideal_prefix_from:
            nonzero = np.flatnonzero(ops.to_numpy(ops.any(vals != 0, axis=0)))
            cut = int(nonzero[-1]) + 1 if nonzero.size else 1
            if cut < self.k:
                vals = vals[:, :cut]
                ok = None if ok is None else ok[:, :cut]
        acc = self.positions.dtype
        return ops.cast(vals, acc), None if ok is None else ops.cast(ok, acc)


def positions(ctx: Context, k: int, like: Array, dtype: Any) -> Array:
    """``1..k`` as a ``(k,)`` array in ``dtype``; kept in the instance's workspace where values
    are read back (eager: nothing traced is ever kept)."""
    make = lambda: ctx.ops.arange(1, k + 1, like, dtype)  # noqa: E731
    if not ctx.read_back:
        return make()
    return ctx.workspace.get("positions", (k, dtype, getattr(like, "device", None)), make)


def row_slices(b: int, step: int) -> list[slice]:
    """``b`` rows in consecutive slices of ``step`` rows (the last one shorter)."""
    return [slice(a, min(a + step, b)) for a in range(0, b, step)]


def join_rows(ops: Ops, parts: list[Sequence[Array | None]]) -> tuple[Array | None, ...]:
    """Blocks of per-row arrays (each part a sequence of ``(rows, ...)`` arrays or None, in the
    same places) joined along the rows: one concatenation per array (the one part as it is)."""
    if len(parts) == 1:
        return tuple(parts[0])
    return tuple(
        None if parts[0][i] is None else ops.concat([p[i] for p in parts], axis=0)
        for i in range(len(parts[0]))
    )
