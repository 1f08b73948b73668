"""The torch backend's tiles and scratch buffers: the tiles of its counting passes over a
batch (each at most ``Sizes.tile`` values and an eighth of the array; :mod:`rankstream.core.sizes`),
the workspace buffers they are written into, and the tiled pass of the gains' sums
(:func:`gain_stats`). Read by :mod:`rankstream.core.backends.torch` only."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from rankstream.core import sizes as _sizes
from rankstream.core.backends.protocol import Array, Workspace


def _count_dtype(n: int) -> Any:
    # 0/1 values summed in float32 are exact while a row total stays below 2^24.
    return torch.float32 if n < (1 << 24) else torch.float64


def _list_budget(b: int, n: int) -> int:
    """Values per tile of a list metric's counting pass over a ``(b, n)`` batch (see
    ``Sizes.list_share``)."""
    bn, z = b * n, _sizes.SIZES
    return min(z.tile, max(bn // z.list_share, min(z.list_tile, max(bn // 8, z.count_tile))))


def _tiles(
    b: int, n: int, share: int = 8, smallest: int | None = None, budget: int | None = None
) -> list[tuple[slice, slice]]:
    """``(rows, columns)`` slices covering a ``(b, n)`` array in row-major tiles of at most
    ``min(Sizes.tile, b * n / share)`` values (at least ``smallest``, ``Sizes.min_tile`` by
    default), or of ``budget`` values where given: whole rows where a row fits, else runs of one
    row's columns."""
    z = _sizes.SIZES
    return _tiles_of(b, n, share, z.min_tile if smallest is None else smallest, budget, z.tile)


@functools.lru_cache(maxsize=256)
def _tiles_of(
    b: int, n: int, share: int, smallest: int, budget: int | None, tile: int
) -> list[tuple[slice, slice]]:
    """:func:`_tiles` at the sizes given. Kept per shape (an update asks for the same tiles in
    each of its passes; callers only read the list)."""
    if budget is None:
        budget = max(min(tile, (b * n) // share), smallest)
    if n <= budget:
        step = budget // n
        return [(slice(a, min(a + step, b)), slice(0, n)) for a in range(0, b, step)]
    return [(slice(a, a + 1), slice(c, min(c + budget, n))) for a in range(b) for c in range(0, n, budget)]


def _row_step(b: int, n: int, share: int = 8) -> int:
    """Rows per tile of a pass that needs whole rows (a ``topk``): at most
    ``min(Sizes.tile, b * n / share)`` values, at least one row."""
    return max(min(_sizes.SIZES.tile, (b * n) // share) // n, 1)


def _times_mask(buf: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``buf`` times the bool mask ``valid`` of its shape, in place: items where ``valid`` is
    False set to 0 (``-0.0`` for a negative value), exact for finite values (a NaN or infinity
    times 0 is NaN). The product reads the mask's bytes; torch converts them to ``buf``'s dtype
    first, so it goes by pieces of ``Sizes.mask_piece`` values (the conversion's copy stays
    small and in cache): at 32 x 20,000 about a quarter of the time of a ``where`` with 0."""
    flat, mask = buf.view(-1), valid.reshape(-1).view(torch.uint8)
    piece = _sizes.SIZES.mask_piece
    for a in range(0, int(flat.shape[0]), piece):
        flat[a : a + piece].mul_(mask[a : a + piece])
    return buf


def _tile_buffers(
    ws: Workspace, b: int, n: int, dtype: Any, share: int = 8, budget: int | None = None,
    smallest: int | None = None,
) -> Iterator[tuple[slice, slice, torch.Tensor]]:  # fmt: skip
    """For each tile of :func:`_tiles`: its row and column slices and a workspace buffer of its
    shape in ``dtype`` (for 0/1 values, summed per row)."""
    tiles = _tiles(b, n, share, smallest, budget)
    first = (tiles[0][0].stop - tiles[0][0].start) * (tiles[0][1].stop - tiles[0][1].start)
    flat = _buffer(ws, "count", (first,), dtype)  # the first tile is the largest: views of one buffer
    for r, c in tiles:
        h, w = r.stop - r.start, c.stop - c.start
        yield r, c, flat[: h * w].view(h, w)


def _buffer(ws: Workspace, role: str, shape: tuple[int, ...], dtype: Any) -> torch.Tensor:
    """A CPU buffer of the workspace, one per role and dtype: it grows to the largest size asked
    for, smaller requests get a view of its start. Passes that never overlap share the role
    ``"count"`` (one tile of scratch for all of them)."""
    size = int(np.prod(shape, dtype=np.int64))
    role = f"{role}:{dtype}"
    held = ws.get(role, dtype, lambda: torch.empty(size, dtype=dtype))
    if held.numel() < size:  # the smaller one let go first: never both held
        del held
        ws.put(role, dtype, None)
        held = ws.put(role, dtype, torch.empty(size, dtype=dtype))
    return held[:size].view(shape)


def _bound(a: Any, b: Any, side: str) -> Array:
    """``minimum`` (``side="max"``: clamp from above) or ``maximum`` of tensors or numbers."""
    if not isinstance(b, torch.Tensor):
        return torch.clamp(a, **{side: b})
    if not isinstance(a, torch.Tensor):
        return torch.clamp(b, **{side: a})
    return (torch.minimum if side == "max" else torch.maximum)(a, b)


def _cpu(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu"


def _np_float(dtype: Any) -> Any:
    """The numpy float type of a torch float dtype (float32 or float64)."""
    return np.float32 if dtype == torch.float32 else np.float64


def gain_stats(
    labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Any, top: bool,
    positive: bool = False,
) -> tuple[Array, ...]:  # fmt: skip
    """The passes of ``TorchOps.gain_sums`` and ``gain_top``: the plain ops on small or
    non-CPU labels, else :func:`_tiled_gain_sums` (again with the ``where`` where a masked
    NaN or infinity shows, and in ``dtype`` where the labels' float gains overflow)."""
    if not _cpu(labels) or ws is None or labels.numel() < _sizes.SIZES.small:
        y = labels.to(dtype)
        if t is not None:
            y = torch.where(y >= t, y, 0.0)
        if valid is not None:
            y = torch.where(valid, y, 0.0)
        g = torch.exp2(y) - 1.0 if exp else y
        out = [g.sum(dim=1), (g * g).sum(dim=1), None, None]
        if top:
            out[2] = y.amax(dim=1)
            out[3] = (y == out[2][:, None]).sum(dim=1).to(dtype)
        return (*out, (y > 0).sum(dim=1).to(dtype)) if positive else tuple(out)
    work = labels.dtype if labels.dtype in (torch.float32, torch.float64) else dtype
    out = _tiled_gain_sums(labels, exp, t, valid, dtype, work, ws, top, positive, valid is not None)
    if valid is not None and not bool(torch.isfinite(out[1]).all()):  # a masked NaN or inf
        out = _tiled_gain_sums(labels, exp, t, valid, dtype, work, ws, top, positive)
    if work != dtype and not bool(torch.isfinite(out[1]).all()):
        out = _tiled_gain_sums(labels, exp, t, valid, dtype, dtype, ws, top, positive)
    return out


def _tiled_gain_sums(
    labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, work: Any, ws: Workspace,
    top: bool = False, positive: bool = False, product: bool = False,
) -> tuple[Array, ...]:  # fmt: skip
    """The pass of ``TorchOps.gain_top``. With ``product`` the masked items are zeroed by a
    product with the mask (:func:`_times_mask`), exact where they hold finite labels; a
    masked NaN or infinity turns the sums of squares non-finite there, and the caller makes
    the pass again with the ``where``."""
    b, n = int(labels.shape[0]), int(labels.shape[1])
    gain_tile = _sizes.SIZES.gain_tile
    step, width = max(gain_tile // n, 1), min(n, gain_tile)
    # per column run and row, in the tiles' dtype (each written once by a reduction): the
    # sums, the largest y' and its count, the count of y' > 0; summed over the runs after
    runs = -(-n // width)
    acc = torch.empty((5, runs, b), dtype=work)
    s1w, s2w, mw, cw, pw = acc
    gain = _buffer(ws, "count", (step, width), work)  # one tile, viewed per tile
    hit = _buffer(ws, "gain", (step, width), work) if top or positive else None
    same = labels.dtype == work
    below = None if t is None else float(np.nextafter(_np_float(work)(t), _np_float(work)(-np.inf)))
    zero = torch.zeros((), dtype=work)
    for a in range(0, b, step):
        r = slice(a, min(a + step, b))
        for q, j in enumerate(range(0, n, width)):
            c = slice(j, min(j + width, n))
            h, w = r.stop - r.start, c.stop - c.start
            g, y = gain[:h, :w], labels[r, c]
            src = y if same else g.copy_(y)
            if below is not None:  # y' = y where y > the float below t (y >= t), else 0
                torch.threshold(src, below, 0.0, out=g)
                src = g
            if valid is not None and product:  # x * 1 = x, x * 0 = 0 (+-0) for finite x
                if src is not g:
                    g.copy_(src)
                src = _times_mask(g, valid[r, c])
            elif valid is not None:
                torch.where(valid[r, c], src, zero, out=g)
                src = g
            if top:
                torch.amax(src, dim=1, out=mw[q, r])
                torch.sum(torch.eq(src, mw[q, r, None], out=hit[:h, :w]), dim=1, out=cw[q, r])
            if positive:
                torch.sum(torch.gt(src, 0.0, out=hit[:h, :w]), dim=1, out=pw[q, r])
            if exp:
                torch.exp2(src, out=g)
                g.sub_(1.0)
                src = g
            torch.sum(src, dim=1, out=s1w[q, r])
            torch.mul(src, src, out=g)
            torch.sum(g, dim=1, out=s2w[q, r])
    s1, s2 = s1w.sum(dim=0, dtype=dtype), s2w.sum(dim=0, dtype=dtype)
    if not top:
        return s1, s2, None, None
    most = mw.amax(dim=0)
    count = (cw * (mw == most)).sum(dim=0, dtype=dtype)
    out = (s1, s2, most.to(dtype), count)
    return (*out, pw.sum(dim=0, dtype=dtype)) if positive else out


def tiled_rank_counts(
    scores: Array, t: Array, acc: Any, need: tuple[bool, bool], keep: Array | None, drop: Array | None,
    rows: Array | None, ws: Workspace, nan: bool,
) -> tuple[Array | None, Array | None, Array | None]:  # fmt: skip
    """The CPU pass of ``TorchOps.rank_counts``, tile by tile: the rows (gathered when ``rows``
    is given) with ``-inf`` on the excluded candidates, then their NaN test and each comparison
    as 0/1 floats summed per row; the scratch is two tiles, never a copy of the scores."""

    n = int(scores.shape[1])
    b = int(scores.shape[0]) if rows is None else int(rows.shape[0])
    cd = _count_dtype(n)
    if keep is None and drop is None and len(_tiles(b, n, 16)) == 1:
        # one tile holds the batch: its comparisons straight into one buffer (no per-tile
        # slicing and accumulation: a few calls fewer for each of a rank update's passes)
        buf = _buffer(ws, "count", (b, n), cd)
        if rows is not None:  # (t is given for these rows already)
            held = _buffer(ws, "tile_scores", (b, n), scores.dtype)
            scores = torch.index_select(scores, 0, rows, out=held)
        out = []
        for flag, cmp in ((nan, torch.ne), *zip(need, (torch.gt, torch.ge), strict=True)):
            if not flag:
                out.append(None)
                continue
            cmp(scores, scores if cmp is torch.ne else t[:, None], out=buf)
            out.append(buf.sum(dim=1).to(acc))
        return out[1], out[2], out[0]
    fill = torch.full((), float("-inf"), dtype=scores.dtype)
    nans = torch.zeros(b, dtype=cd) if nan else None
    counts = [torch.zeros(b, dtype=cd) if flag else None for flag in need]
    cmps = (torch.gt, torch.ge)
    # two tiles (the scores' and the 0/1 counts'), each a sixteenth of the batch at most
    for r, c, buf in _tile_buffers(ws, b, n, cd, share=16):
        held = None
        if rows is not None or keep is not None or drop is not None:
            held = _buffer(ws, "tile_scores", tuple(buf.shape), scores.dtype)
        if rows is None:
            s = scores[r, c]
            k = None if keep is None else keep[r, c]
            d = None if drop is None else drop[r, c]
        else:
            idx = rows[r]
            s = torch.index_select(scores[:, c], 0, idx, out=held)
            k = None if keep is None else torch.index_select(keep[:, c], 0, idx)
            d = None if drop is None else torch.index_select(drop[:, c], 0, idx)
        if k is not None:
            s = torch.where(k, s, fill, out=held)
        if d is not None:
            s = torch.where(d, fill, s, out=held)
        if nans is not None:
            torch.ne(s, s, out=buf)  # NaN
            nans[r] += buf.sum(dim=1)
        for j in (0, 1):
            if need[j]:
                cmps[j](s, t[r, None], out=buf)
                counts[j][r] += buf.sum(dim=1)
    return (
        None if counts[0] is None else counts[0].to(acc),
        None if counts[1] is None else counts[1].to(acc),
        None if nans is None else nans.to(acc),
    )
