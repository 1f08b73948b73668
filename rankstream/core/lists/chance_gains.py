"""The DCG and nDCG part of :mod:`rankstream.core.lists.chance`: each list's sums of gains
(:class:`_Gains`, :func:`share_gain_pass`), its ideal DCG (:func:`share_ideal`,
:func:`_ideal_dcg`) and the moments of DCG and nDCG under a uniformly random ranking
(:func:`dcg_terms`, what the DCG and nDCG kernels' hooks return), with the row-tile helpers
both parts read. The formulas and the enumerations that check them are in ``docs/chance.md``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rankstream.core.backends import Array
from rankstream.core.lists.selection import Selection

__all__ = ["list_sizes", "share_gain_pass", "share_ideal"]


def _tile_values(sel: Selection, width: int) -> int:
    """The most values one row tile holds (:func:`_row_tiles`): ``max(min(chance_tile_values,
    B * width / chance_share), width)`` (:class:`~rankstream.core.sizes.Sizes`)."""
    z = sel.ctx.sizes
    return max(min(z.chance_tile_values, (int(sel.labels.shape[0]) * width) // z.chance_share), width)


def _row_tiles(sel: Selection, width: int) -> list[slice] | None:
    """Row slices covering the batch with at most :func:`_tile_values` values each, where
    values are read back (eager, shapes known); None elsewhere (a ``jit`` trace, an
    accelerator: one pass)."""
    if not sel.ctx.read_back:
        return None
    b = int(sel.labels.shape[0])
    step = max(_tile_values(sel, width) // max(width, 1), 1)
    if step >= b:
        return None
    return [slice(a, min(a + step, b)) for a in range(0, b, step)]


def _block_items(sel: Selection, width: int) -> int:
    """The most nonzero items one block of :class:`_Gains` gathers from whole row tiles: a
    ``Sizes.chance_block_share`` of a row tile's values (:func:`_tile_values`), at least one row."""
    return max(_tile_values(sel, width) // sel.ctx.sizes.chance_block_share, width)


def _by_rows(
    sel: Selection, width: int, fn: Callable[..., tuple[Array, ...]], *arrays: Array
) -> tuple[Array, ...]:
    """``fn(*arrays)`` (each array with the batch's rows first, None passed through), row tile
    by row tile (:func:`_row_tiles`), the results joined along the rows."""
    tiles = _row_tiles(sel, width)
    if tiles is None:
        return fn(*arrays)
    parts = [fn(*(None if a is None else a[r] for a in arrays)) for r in tiles]
    return tuple(sel.ops.concat([p[i] for p in parts], axis=0) for i in range(len(parts[0])))


def list_sizes(sel: Selection) -> Array:
    """``N`` per list ``(B,)``: the items in the list (one count of the mask, once per batch)."""
    ops, acc = sel.ops, sel.positions.dtype
    if sel.full_valid is None:
        return ops.cast(sel.labels[:, 0], acc) * 0.0 + float(sel.n)  # no static batch size needed
    return sel.once("list_sizes", lambda: ops.valid_counts(sel.full_valid, acc, sel.ctx.workspace))


def _clipped_ks(sel: Selection, ks: tuple[int, ...], n: Array) -> Array:
    """``k' = min(k, N)`` ``(B, len(ks))``."""
    ops = sel.ops
    kv = ops.asarray([float(k) for k in ks], sel.positions, sel.positions.dtype)
    return ops.minimum(n[:, None], kv[None, :])


def _prefix_table(sel: Selection, terms: Array) -> Array:
    """``(K + 1,)``: 0, then the cumulative sums of ``terms`` ``(K,)``: entry ``j`` is the sum
    over the ranks ``1..j``."""
    ops = sel.ops
    zero = ops.zeros((1,), terms, terms.dtype)
    return ops.concat([zero, ops.cumsum(terms, axis=0)], axis=0)


def _at(sel: Selection, table: Array, idx: Array) -> Array:
    """``table[idx]`` for float indices ``idx`` holding whole numbers."""
    ops = sel.ops
    return ops.lookup(table, ops.cast(idx + 0.5, ops.int_dtype()))


def _divide(sel: Selection, num: Array, den: Array) -> Array:
    ops = sel.ops
    pos = den > 0
    return ops.where(pos, num / ops.where(pos, den, 1.0), 0.0 * num)


class _Gains:
    """The items of a batch with a nonzero gain (named gains: ``g(0) = 0``), found where values
    are read back: per list, the count of those items, ``sum x``, ``sum x^2`` and the ``K``
    largest (weighted) gains ``x``. The labels are read row tile by row tile (:func:`_row_tiles`):
    a comparison with the threshold, the mask's ``and`` and a ``nonzero``, the gains computed on
    the nonzero items only. Those items are then taken by blocks of whole tiles of at most
    :func:`_block_items` items (one tile where it holds more): per list, their sums and count,
    and a scatter into a ``(rows, most)`` array for a ``topk`` (``most`` the block's largest
    count). Memory: a block's items (about five 8-byte values each, one at a time) and
    ``(B, K)``; nothing grows with the batch's nonzero items."""

    def __init__(self, kernel: Any, sel: Selection) -> None:
        ops = sel.ops
        self.sel, self.b = sel, int(sel.item_labels.shape[0])
        n = int(sel.item_labels.shape[1])
        budget = _block_items(sel, n)
        blocks: list[tuple[Array, ...]] = []
        parts: list[tuple[Array, Array]] = []
        held, start = 0, 0  # the items gathered (fewer than ``budget``) and their first row
        for r in _row_tiles(sel, n) or [slice(0, self.b)]:
            row, g = self._nonzero(kernel, r)
            if parts and held + int(g.shape[0]) > budget:
                blocks.append(self._block(parts, r.start - start))
                held, start = 0, r.start
            parts.append((row if r.start == start else row + (r.start - start), g))
            held += int(g.shape[0])
            del row, g
            if held >= budget:
                blocks.append(self._block(parts, r.stop - start))
                held, start = 0, r.stop
        if parts or start < self.b:
            blocks.append(self._block(parts, self.b - start))
        joined = zip(*blocks, strict=True)
        out = blocks[0] if len(blocks) == 1 else [ops.concat(list(x), axis=0) for x in joined]
        self.count, self.s1, self.s2, self._top, self._negative = out

    def _nonzero(self, kernel: Any, r: slice) -> tuple[Array, Array]:
        """The items of the rows ``r`` with a nonzero gain, row by row: their rows (from
        ``r.start``, integers) and (weighted) gains in the accumulation dtype."""
        sel, ops = self.sel, self.sel.ops
        y = sel.item_labels[r]
        t = kernel.conventions.relevance_threshold
        cond = y != 0 if t is None else y >= t if t > 0 else y > 0  # where g(y) may be nonzero
        if sel.full_valid is not None:
            cond = cond & sel.full_valid[r]
        flat = ops.nonzero(ops.reshape(cond, (-1,)))
        g = kernel._gains(sel, ops.cast(ops.lookup(ops.reshape(y, (-1,)), flat), sel.positions.dtype))
        if sel.batch_item_weights is not None:
            w = ops.lookup(ops.reshape(sel.batch_item_weights[r], (-1,)), flat)
            g = g * ops.cast(w, sel.positions.dtype)
        return flat // int(y.shape[1]), g

    def _block(self, parts: list[tuple[Array, Array]], rows_in: int) -> tuple[Array, ...]:
        """Per list of a block of ``rows_in`` rows, from its nonzero items ``parts`` (rows from
        the block's first, gains; the list is emptied): the count, ``sum x``, ``sum x^2``, the
        ``K`` largest gains ``(rows_in, K)`` (0 past the nonzero ones) and whether one is
        negative."""
        sel, ops, acc, k = self.sel, self.sel.ops, self.sel.positions.dtype, self.sel.k
        row = parts[0][0] if len(parts) == 1 else ops.concat([p[0] for p in parts], axis=0)
        g = parts[0][1] if len(parts) == 1 else ops.concat([p[1] for p in parts], axis=0)
        parts.clear()  # each name is dropped once read: at most five nonzero-sized arrays at once
        edges = ops.arange(0, rows_in, sel.positions, ops.int_dtype())
        count = ops.histogram(row[None, :], g * 0.0 + 1.0, edges)[0]
        s1, s2 = ops.histogram(row[None, :], g, edges)[0], ops.histogram(row[None, :], g * g, edges)[0]
        most = int(np.max(ops.to_numpy(count))) if rows_in else 0
        if most == 0:
            top = ops.zeros((rows_in, k), sel.positions, acc)
            return count, s1, s2, top, top[:, 0] < 0.0
        # each item's slot in a (rows_in, most) array: its row's offset plus its place
        offset = edges * most - ops.cast(ops.cumsum(count, axis=0) - count, ops.int_dtype())
        slot = ops.lookup(offset, row) + ops.arange(0, int(g.shape[0]), sel.positions, ops.int_dtype())
        del row
        dense = ops.set_rows(ops.zeros((rows_in * most,), g, acc), slot, g)
        del slot, g
        dense = ops.reshape(dense, (rows_in, most))
        top = ops.topk(dense, min(k, most))[0]
        if most < k:
            top = ops.concat([top, ops.zeros((rows_in, k - most), top, acc)], axis=1)
        return count, s1, s2, top, ops.any(dense < 0.0, axis=1)

    def negative(self) -> bool:
        """Whether some item has a negative gain (a negative label kept): the padding of
        :meth:`ideal` (zeros) then does not stand for the items of gain 0 (one small read)."""
        ops = self.sel.ops
        return bool(self.b) and ops.host_bools(ops.any(self._negative))[0]

    def ideal(self, k: int) -> Array:
        """The ``k <= K`` largest gains of each list ``(B, min(k, most))`` (0 past its nonzero
        ones; ``most`` the largest count of nonzero gains in a list, ``(B, 1)`` zeros where it
        is 0), from the tiles' ``topk``."""
        sel, ops, b = self.sel, self.sel.ops, self.b
        most = int(np.max(ops.to_numpy(self.count))) if b else 0
        if most == 0:
            return ops.zeros((b, 1), sel.positions, sel.positions.dtype)
        return self._top[:, : min(k, most)]


def _sparse(kernel: Any, sel: Selection) -> bool:
    """Whether the nonzero gains serve (:class:`_Gains`): values read back (eager: their count is
    data-dependent) and a named gain (``g(0) = 0``)."""
    return sel.ctx.read_back and isinstance(kernel.gain, str)


def _dense_gain_sums(kernel: Any, sel: Selection) -> tuple[Array, Array]:
    """``(sum x, sum x^2)`` ``(B,)`` over each list's items, ``x`` the item's gain (times its
    weight under per-item weights): one pass over the labels, row tile by row tile (a callable
    gain, whose ``g(0)`` need not be 0, or a ``jit`` trace)."""
    ops, acc = sel.ops, sel.positions.dtype

    def tile(labels: Array, valid: Array | None, w: Array | None) -> tuple[Array, Array]:
        x = kernel._gains(sel, ops.cast(labels, acc))
        if w is not None:  # the weights as given: the mask below zeroes the items out of the list
            x = x * ops.cast(w, acc)
        if valid is not None:
            x = ops.where(valid, x, 0.0)
        return ops.sum(x, axis=1), ops.sum(x * x, axis=1)

    return _by_rows(sel, sel.n, tile, sel.item_labels, sel.full_valid, sel.batch_item_weights)


def _named_gain_sums(kernel: Any, sel: Selection, top: bool = False) -> tuple[Array, ...] | None:
    """``(sum x, sum x^2, y_max, c_max)`` ``(B,)`` for a named gain without item weights where
    values are read back: one pass over the labels, tile by tile (``Ops.gain_sums``: the gain
    of every item computed in a workspace tile and summed there, masked items filled with 0),
    cheaper than finding the nonzero gains (measured: 0.3-0.5x their time at 1,024 x 20,000
    with 5% of the labels nonzero, 0.05x with every label graded); with ``top``
    (``Ops.gain_top``, DCG) in the same pass each list's largest label ``y_max`` (after the
    threshold, masked items 0) and the number ``c_max`` of items holding it, else those two
    None. Kept per batch by gain and threshold: a later ask with ``top`` makes the pass
    again with them. None elsewhere."""
    if not _sparse(kernel, sel) or sel.batch_item_weights is not None:
        return None
    key = (kernel.gain, kernel.conventions.relevance_threshold)
    held = sel.shared.gain_sums.get(key)
    if held is None or (top and held[2] is None):
        pass_ = sel.ops.gain_top if top else sel.ops.gain_sums
        out = pass_(
            sel.item_labels, kernel.gain == "exp_rank", kernel.conventions.relevance_threshold,
            sel.full_valid, sel.positions.dtype, sel.ctx.workspace,
        )  # fmt: skip
        held = sel.shared.gain_sums[key] = (*out, None, None) if len(out) == 2 else tuple(out)
    return held


def _looks_graded(kernel: Any, sel: Selection) -> bool:
    """Whether the ranked labels ``(B, K)`` show two relevant labels (one small read): the
    labels are graded, and the counts of binary relevance (:func:`_one_label`) cannot serve."""
    ops, t = sel.ops, kernel.conventions.relevance_threshold
    seen = sel.labels
    eligible = seen > 0.0 if t is None else seen >= t
    if seen.shape[0] == 0 or not ops.host_bools(ops.any(eligible))[0]:
        return False
    v = -ops.amin(-ops.where(eligible, seen, float("-inf")))
    return ops.host_bools(ops.any(eligible & (seen != v)))[0]


def share_gain_pass(kernel: Any, sel: Selection) -> None:
    """DCG with ``chance=True``, before the kernel counts its relevant items: where the pass
    of the named gains serves (:func:`_named_gain_sums`) and the relevant items are those with
    ``y' > 0`` (threshold None or ``> 0``), one pass (``Ops.gain_top`` with ``positive``) gives
    the sums of gains, each list's largest label and its count, and the count of relevant
    items, kept for the kernel (``("relevant", t)``): the count pass the kernel would make is
    folded into the pass of the gains. Nothing where the count is already kept (a collection).
    Where the ranked labels show one relevant label (binary relevance, most likely) and the
    counts of :func:`_one_label` serve, the kernel's count pass instead takes each list's
    largest label on the way (``Ops.count_and_max``, kept as ``("label_max",)``): what
    :func:`_one_label` needs to know that no label above the one seen hides past the top
    ``K``, without a pass of its own."""
    t = kernel.conventions.relevance_threshold
    if not _sparse(kernel, sel) or sel.batch_item_weights is not None or (t is not None and t <= 0):
        return
    key = (kernel.gain, t)
    if t in sel.shared.relevant or sel.shared.gain_sums.get(key) is not None:
        return
    if not _looks_graded(kernel, sel) and _counted_gains(kernel, sel):
        count, most = sel.ops.count_and_max(
            sel.item_labels, 0.0 if t is None else t, t is None, sel.full_valid, sel.positions.dtype,
            sel.ctx.workspace,
        )  # fmt: skip
        sel.shared.relevant[t], sel.shared.label_max = count, most
        return
    out = sel.ops.gain_top(
        sel.item_labels, kernel.gain == "exp_rank", t, sel.full_valid, sel.positions.dtype, sel.ctx.workspace,
        positive=True,
    )  # fmt: skip
    sel.shared.gain_sums[key] = tuple(out[:4])
    sel.shared.relevant[t] = out[4]


def _closed_flag(kernel: Any, sel: Selection) -> list[bool | None]:
    """What the instance learnt from its last batch of this gain, threshold and ``K`` (nDCG):
    ``[True]`` where every list held at least ``K`` items of its largest label (``> 0``),
    ``[False]`` where one did not, ``[None]`` before any batch (kept in its workspace)."""
    role = f"chance_closed:{kernel.gain}:{kernel.conventions.relevance_threshold}"
    return sel.ctx.workspace.get(role, (sel.k, sel.n), lambda: [None])


def _all_closed(sel: Selection, summed: tuple[Array, ...]) -> bool:
    """Whether every list holds at least ``K`` items of its largest label ``y_max > 0``: its
    ideal ranking's ``K`` labels are all ``y_max`` (one small read)."""
    ops, most, count = sel.ops, summed[2], summed[3]
    return bool(most.shape[0]) and ops.host_bools(ops.all((count >= float(sel.k)) & (most > 0.0)))[0]


def _learning(kernel: Any, sel: Selection) -> bool:
    """nDCG before its first batch (:func:`_closed_flag`): the pass of the gains also finds the
    largest labels, to learn whether the next batch may skip the kernel's ``topk``."""
    return _closed_flag(kernel, sel)[0] is None


def share_ideal(kernel: Any, sel: Selection) -> None:
    """nDCG with ``chance=True``, before the kernel takes its ideal ranking (a ``topk`` of the
    labels): where the instance's last batch had every list's top ``K`` labels equal to its
    largest label (:func:`_closed_flag`), the pass of the gains chance needs is made first, with
    each list's largest label ``y_max`` and its count (``Ops.gain_top``); where every list of
    this batch holds at least ``K`` items of ``y_max > 0`` its ideal ranking is ``K`` times
    ``y_max`` (every item a real one), kept for the kernel (``("ideal", prefix)``: no ``topk``
    of the labels). Else the kernel takes its ``topk`` as without chance, and the instance
    learns it for the next batch. The first batch learns it from the pass chance makes after
    the kernel (three more operations per tile there), or from the counts of binary relevance
    (every list closed where each holds at least ``K`` relevant items)."""
    if not _sparse(kernel, sel) or sel.batch_item_weights is not None:
        return
    if sel.shared.ideal:
        return
    flag = _closed_flag(kernel, sel)
    if not flag[0]:
        return
    summed = _named_gain_sums(kernel, sel, True)
    flag[0] = _all_closed(sel, summed)
    if not flag[0]:
        return
    ops, acc = sel.ops, sel.positions.dtype
    ideal = ops.zeros((int(summed[2].shape[0]), sel.k), sel.positions, acc) + summed[2][:, None]
    kept = (ideal, None if sel.full_valid is None else ideal * 0.0 + 1.0)
    sel.shared.ideal[True] = sel.shared.ideal[False] = kept


def _ideal_from_top(kernel: Any, sel: Selection, summed: tuple[Array, ...], kk: Array, table: Array) -> Array:
    """DCG's ``IDCG@k`` ``(B, len(top_k))`` from the pass of the gains (named gains, no item
    weights), a ``topk`` of the labels only for the lists it leaves open. A list is closed
    where its top ``k'`` items all hold its largest label ``y_max`` (``c_max >= k'`` at the
    largest ``k``, and ``y_max > 0`` under a mask, whose items hold 0 in the pass):
    ``IDCG@k = g(y_max) D1(k')``; or where its items of positive gain share one gain
    (``s1^2 = c s2``, :func:`_equal_gains` list by list): ``(s1 / c) D1(min(c, k'))``. The
    open lists (few where lists hold ``max k`` or more items of their top grade) are gathered
    a few rows at a time and take the ``topk`` of their labels; past half the batch, one
    ``topk`` of every list (the ideal ranking nDCG takes)."""
    ops = sel.ops
    s1, s2, most, count = summed
    d1 = _at(sel, table, kk)
    closed = count >= kk[:, -1]
    if sel.full_valid is not None:
        closed = closed & (most > 0.0)
    idcg = kernel._gains(sel, most)[:, None] * d1
    t = kernel.conventions.relevance_threshold
    if t is None or t > 0:  # one positive gain per list: its c items first
        c = kernel.count_relevant(sel)
        equal = ops.where(c > 0, (s1 * s1 == c * s2) & (s1 > 0.0), s2 == 0.0)
        first = _divide(sel, s1, c)[:, None] * _at(sel, table, ops.minimum(c[:, None], kk))
        idcg = ops.where(closed[:, None], idcg, first)
        closed = closed | equal
    rows = np.flatnonzero(~np.asarray(ops.to_numpy(closed), dtype=bool))
    b = int(closed.shape[0])
    if rows.size == 0:
        return idcg
    if 2 * rows.size > b:
        return ops.where(closed[:, None], idcg, _ideal_dcg(kernel, sel, None, False))
    cuts, acc = kernel.discount_cuts(sel), sel.positions.dtype
    step = max(sel.ctx.sizes.chance_tile_values // max(sel.n, 1), 1)
    parts = []
    for a in range(0, rows.size, step):
        idx = ops.asarray(rows[a : a + step].tolist(), sel.item_labels, ops.int_dtype())
        labels = ops.take(sel.item_labels, idx, 0)
        if sel.full_valid is None:
            top = ops.cast(ops.topk(labels, sel.k)[0], acc)
            gains = kernel._gains(sel, top)
        else:
            vals = ops.masked_topk(
                labels, sel.k, ops.take(sel.full_valid, idx, 0), sel.ctx.workspace, cap=sel.ctx.tile_cap
            )[0]
            ok = vals > float("-inf")
            gains = kernel._gains(sel, ops.cast(ops.where(ok, vals, 0.0), acc)) * ops.cast(ok, acc)
        parts.append(ops.matmul(gains, cuts))
    index = ops.asarray(rows.tolist(), sel.item_labels, ops.int_dtype())
    return ops.set_rows(idcg, index, ops.concat(parts, axis=0) if len(parts) > 1 else parts[0])


def _ideal_dcg(kernel: Any, sel: Selection, gains: _Gains | None, normalised: bool) -> Array:
    """``IDCG@k`` ``(B, len(top_k))`` as the kernel reads it: named gains without item weights
    where the kernel has it (nDCG: the shared ``topk`` of the labels), else from the nonzero
    gains where every gain is ``>= 0``, else a ``topk`` of every item's (weighted) gain
    (``normalised``: nDCG, whose shared ideal ranking serves even where the gains were found)."""
    ops = sel.ops
    cuts = kernel.discount_cuts(sel)
    conv = kernel.conventions
    named = sel.batch_item_weights is None and isinstance(kernel.gain, str)
    if named and (normalised or gains is None):
        cached = False in sel.shared.ideal and True not in sel.shared.ideal
        ideal, ideal_in = sel.ideal(prefix=not cached)  # the one the kernel took
        top = kernel._gains(sel, ideal)
        if ideal_in is not None:
            top = top * ideal_in
        return ops.matmul(top, cuts[: top.shape[1]])
    if gains is not None and (conv.relevance_threshold is not None or not gains.negative()):
        top = gains.ideal(sel.k)
        return ops.matmul(top, cuts[: top.shape[1]])
    _, wg = kernel.item_gains(sel)
    if sel.full_valid is not None:
        top = ops.topk(ops.where(sel.full_valid, wg, float("-inf")), sel.k)[0]
        top = ops.where(top > float("-inf"), top, 0.0)
    else:
        top = ops.topk(wg, sel.k)[0]
    return ops.matmul(top, cuts)


def _counted_gains(kernel: Any, sel: Selection) -> bool:
    """Whether the sums of gains may be read without a pass over the batch's gains: sparse
    gains (:func:`_sparse`), no item weights, and every item of a nonzero gain relevant (a
    threshold ``> 0``, or negative labels masked)."""
    conv = kernel.conventions
    t = conv.relevance_threshold
    if not _sparse(kernel, sel) or sel.batch_item_weights is not None:
        return False
    return (t is not None and t > 0) or (t is None and conv.negative_labels == "mask")


def _from_ideal(kernel: Any, sel: Selection) -> tuple[Array, Array] | None:
    """``(sum x, sum x^2)`` read from the ideal ranking the kernel already took (nDCG: the top
    ``K`` labels of every list) where it holds every nonzero gain of every list: a list whose
    ideal ends on a gain of 0, or an ideal cut before ``K`` (every later label 0), or the whole
    list. No pass over the batch (one small host read); None elsewhere."""
    ops = sel.ops
    if not _counted_gains(kernel, sel):
        return None
    kept = [sel.shared.ideal[key] for key in (True, False) if key in sel.shared.ideal]
    if not kept:
        return None
    ideal, ideal_in = kept[0]
    g = kernel._gains(sel, ideal)
    if ideal_in is not None:
        g = g * ideal_in
    if int(ideal.shape[1]) >= sel.k and sel.k < sel.n:  # else every nonzero gain is in it
        if not ops.host_bools(ops.all(g[:, -1] == 0.0))[0]:
            return None
    return ops.sum(g, axis=1), ops.sum(g * g, axis=1)


def _one_label(kernel: Any, sel: Selection) -> tuple[float, Array] | None:
    """Binary relevance, found by counting: ``(v, c)`` where every item of a nonzero gain has
    the one label ``v`` (``c`` per list: their count), else None. Where values are read back, a
    named gain, no item weights, a threshold ``> 0`` or negative labels masked; ``v`` is the
    largest label of the ideal ranking the kernel read (nDCG) or of the ranked labels (DCG). Two
    counting passes (one shared with the kernel's count of relevant items, one more for DCG)
    and a few host reads, where the nonzero gains would cost a ``nonzero`` of the batch."""
    ops, t = sel.ops, kernel.conventions.relevance_threshold
    if not _counted_gains(kernel, sel):
        return None
    kept = [sel.shared.ideal[key][0] for key in (True, False) if key in sel.shared.ideal]
    seen = kept[0] if kept else None
    whole = seen is not None  # the ideal ranking: the batch's largest label is in it
    seen = sel.labels if seen is None else seen
    eligible = seen > 0.0 if t is None else seen >= t
    if seen.shape[0] == 0 or not ops.host_bools(ops.any(eligible))[0]:
        return None
    v = float(np.asarray(ops.to_numpy(-ops.amin(-ops.where(eligible, seen, float("-inf"))))).reshape(-1)[0])
    # two relevant labels seen, in the ideal or the ranking: graded, no counting pass
    graded = ops.any(eligible & (seen != v))
    if whole:
        ranked = sel.labels
        graded = graded | ops.any((ranked > 0.0 if t is None else ranked >= t) & (ranked != v))
    if ops.host_bools(graded)[0]:
        return None
    acc, ws = sel.positions.dtype, sel.ctx.workspace
    labels, valid = sel.item_labels, sel.full_valid
    count = kernel.count_relevant(sel)  # nonzero gains: label >= t (> 0)
    if whole and t is not None and v == t:  # every label >= t is <= v (the batch's largest)
        return v, count
    at_v = sel.once("relevant", lambda: ops.count_relevant(labels, v, False, valid, acc, ws), v)
    same = at_v == count
    if not whole:  # and no label above v: every list's largest label (masked items too) at
        # most v where the kernel's count pass took them (share_gain_pass), else a count
        most = sel.shared.label_max
        if most is None or not ops.host_bools(ops.all(most <= v))[0]:
            same = same & (ops.count_relevant(labels, v, True, valid, acc, ws) == 0)
    return (v, count) if ops.host_bools(ops.all(same))[0] else None


def _equal_gains(kernel: Any, sel: Selection, s1: Array, s2: Array) -> Array | None:
    """DCG's ``IDCG@k`` without a ``topk`` where every list's items of positive gain share one
    gain: ``c`` per list (the kernel's count of relevant items, ``label > 0`` or ``>= t > 0``:
    the items of positive gain of a named gain) where ``s1^2 = c s2`` with ``s1 > 0`` (``s2 = 0``
    where ``c = 0``) in every list, else None. By Cauchy-Schwarz the equality holds exactly when
    the ``c`` positive gains are equal and no gain is negative, so the ideal ranking puts the
    ``c`` items of gain ``s1 / c`` first: ``IDCG@k = (s1 / c) D1(min(c, k'))``. Exact sums
    (whole gains) meet it; a rounded one falls back to the ``topk``."""
    t = kernel.conventions.relevance_threshold
    if t is not None and t <= 0:
        return None
    ops = sel.ops
    c = kernel.count_relevant(sel)
    ok = ops.where(c > 0, (s1 * s1 == c * s2) & (s1 > 0.0), s2 == 0.0)
    return c if ops.host_bools(ops.all(ok))[0] else None


def dcg_terms(kernel: Any, sel: Selection, normalised: bool) -> tuple[Array, Array, Array]:
    """``(E, Var, best)`` of DCG@k (``normalised`` False: the DCG kernel's hook) or of nDCG@k
    (True: divided by ``IDCG@k``, its square and itself), from the sums of gains (Hoeffding's
    linear permutation statistic; see :mod:`~rankstream.core.lists.chance`)."""
    ops = sel.ops
    n = list_sizes(sel)
    kk = _clipped_ks(sel, kernel.top_k, n)
    d = kernel.discounts(sel)
    table = _prefix_table(sel, d)
    d1, d2 = _at(sel, table, kk), _at(sel, _prefix_table(sel, d * d), kk)
    key = (kernel.gain, kernel.conventions.relevance_threshold)
    read = _from_ideal(kernel, sel) if normalised else None
    held = sel.shared.gain_sums.get(key)  # made with the kernel's count (DCG)
    counted = read is None and held is not None and held[2] is not None
    one = None if read is not None or counted else sel.once("one_label", lambda: _one_label(kernel, sel), key)
    gains = summed = None
    if normalised and (read is not None or one is not None) and _learning(kernel, sel):
        # nDCG's first batch: every list closed where each holds >= K relevant items of one label
        closed = one is not None and bool(one[1].shape[0])
        closed = closed and one[0] > 0 and ops.host_bools(ops.all(one[1] >= float(sel.k)))[0]
        _closed_flag(kernel, sel)[0] = closed
    if read is not None:
        s1, s2 = read
    elif one is not None:  # binary relevance: every nonzero gain is g(v)
        g = kernel._gains(sel, ops.asarray([one[0]], sel.positions, sel.positions.dtype))
        s1, s2 = g * one[1], g * g * one[1]
    elif (summed := _named_gain_sums(kernel, sel, not normalised or _learning(kernel, sel))) is not None:
        s1, s2 = summed[:2]
        if normalised and summed[2] is not None:
            _closed_flag(kernel, sel)[0] = _all_closed(sel, summed)
    else:
        gains = sel.once("nonzero_gains", lambda: _Gains(kernel, sel), key) if _sparse(kernel, sel) else None
        s1, s2 = (gains.s1, gains.s2) if gains is not None else _dense_gain_sums(kernel, sel)
    mean_x = _divide(sel, s1, n)
    ss = ops.maximum(s2 - mean_x * s1, 0.0)  # sum (x - mean)^2
    mean = mean_x[:, None] * d1
    var = ops.maximum(d2 - _divide(sel, d1 * d1, n[:, None] + 0.0 * kk), 0.0)
    var = var * _divide(sel, ss, n - 1.0)[:, None]
    if one is not None and not normalised:  # the c items of gain g(v) first
        idcg = g[:, None] * _at(sel, table, ops.minimum(one[1][:, None], kk))
    elif not normalised and summed is not None and (equal := _equal_gains(kernel, sel, s1, s2)) is not None:
        idcg = _divide(sel, s1, equal)[:, None] * _at(sel, table, ops.minimum(equal[:, None], kk))
    elif not normalised and summed is not None:
        idcg = _ideal_from_top(kernel, sel, summed, kk, table)
    else:
        idcg = _ideal_dcg(kernel, sel, gains, normalised)
    if not normalised:
        return mean, var, idcg
    return _divide(sel, mean, idcg), _divide(sel, var, idcg * idcg), _divide(sel, idcg, idcg)
