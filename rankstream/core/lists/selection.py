"""One batch as a list metric sees it: the top-``K`` selection (:class:`Selection`), shared by
every metric of a collection, and what it computes once per batch (the ideal ranking, the masked
labels, the ranks' positions) and, under ``ties="expected"``, its tie groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops

__all__ = ["IDEAL_PREFIX_FROM", "Selection", "positions"]

#: ``Selection.ideal(prefix=True)`` cuts the ideal ranking after its last nonzero column from
#: this many ranked items on (whole lists); below it the host read costs more than it saves
IDEAL_PREFIX_FROM = 1024


@dataclass
class Selection:
    """One batch seen by a list metric. ``labels``, ``in_list``, ``item_weights`` are
    ``(B, K)`` over the ranked items (``labels`` 0 where an item is not in the list); the
    ``full_*`` arrays are the batch's ``(B, N)`` ones. ``item_labels`` are the batch's labels
    as given (whatever a masked item holds: read them with ``full_valid``); ``full_labels``,
    0 on items not in the list, is a masked copy made on first use (a full-size temporary:
    the default paths read ``item_labels`` and the mask instead)."""

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
    full_item_weights: Array | None = None
    #: what one metric computed from this batch for others (collections): per batch, never
    #: on a kernel, so kernels stay reentrant
    shared: dict[Any, Any] = field(default_factory=dict)
    has_nan: bool | None = None  # NaN scores among the items (where values were read back)
    nan_rows: Array | None = None  # (B,) rows with NaN scores (where values could not be read back)
    values_ok: bool = False  # labels and weights read back as fine with the ranking (no bad data)
    #: ``ties="expected"``: the tie groups of the selection
    #: (:class:`~rankstream.core.lists.ties.TieGroups`; None under the other policies)
    ties: Any = None

    @property
    def ops(self) -> Ops:
        return self.ctx.ops

    def once(self, key: Any, make: Any) -> Any:
        """``make()``, computed once per batch for every metric that asks with ``key``."""
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]

    @property
    def full_labels(self) -> Array:
        """The batch's ``(B, N)`` labels, 0 on items not in the list (masked once per batch)."""
        if self.full_valid is None:
            return self.item_labels
        return self.once("full_labels", lambda: self.ops.where(self.full_valid, self.item_labels, 0.0))

    def ideal(self, prefix: bool = False) -> tuple[Array, Array | None]:
        """Top-``K`` labels of the items of each list in decreasing order (the ideal ranking),
        0 past the last item, and a (B, K) 0/1 array marking real items (None without a
        mask). One ``topk`` of the labels per batch.

        ``prefix``: where values are read back and ``K`` is large (whole lists), only the
        columns up to the last one where some list holds a nonzero label: every later column
        is 0 in every list, so a sum of gains that vanish at 0 loses nothing, and the gains
        and products of a few hundred columns replace those of ``K`` (one small host read)."""
        return self.once(("ideal", prefix), lambda: self._ideal(prefix))

    def _ideal(self, prefix: bool) -> tuple[Array, Array | None]:
        ops, valid = self.ops, self.full_valid
        if valid is None:
            vals, ok = ops.topk(self.item_labels, self.k)[0], None
        else:  # items not in the list get -inf tile by tile: no masked copy of the labels
            vals = ops.masked_topk(self.item_labels, self.k, valid, self.ctx.workspace)[0]
            ok = vals > float("-inf")
            vals = ops.where(ok, vals, 0.0)
        if prefix and self.ctx.read_back and self.k > IDEAL_PREFIX_FROM:
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
