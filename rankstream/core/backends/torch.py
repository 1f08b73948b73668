"""torch backend: everything stays on the input's device; float64 accumulation except on
devices without float64 (MPS), where float32 is used.

CPU fast paths (measured): a bool compare-and-count of a large array is several times slower
than float arithmetic, and fresh 80 MB temporaries pay page faults on every batch, so the
counting passes write 0/1 floats into buffers of the instance's :class:`Workspace` and reduce
them per row. They work through the array in tiles of rows (:func:`_tiles`:
at most ``Sizes.tile`` values and an eighth of the array), so a pass holds a small fraction of its
input in scratch memory whatever the batch size. On accelerators the plain ops are used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rankstream.core import sizes as _sizes
from rankstream.core.backends.protocol import Array, Ops, Workspace, host_batches_enabled
from rankstream.core.backends.torch_host import TorchHostOps
from rankstream.core.backends.torch_tiles import (
    _bound,
    _buffer,
    _count_dtype,
    _cpu,
    _list_budget,
    _tile_buffers,
    _tiles,
    _times_mask,
    gain_stats,
    tiled_rank_counts,
)

_NUMPY_TO_TORCH = {np.float64: torch.float64, np.float32: torch.float32, np.int64: torch.int64}


class _TorchMath:
    """The elementwise namespace of ``compute`` on torch tensors (names as numpy's)."""

    exp, expm1, sqrt, log, abs = torch.exp, torch.expm1, torch.sqrt, torch.log, torch.abs
    isinf, isnan, where, signbit = torch.isinf, torch.isnan, torch.where, torch.signbit

    @staticmethod
    def maximum(a: Any, b: Any) -> Array:
        return _bound(a, b, "min")

    @staticmethod
    def minimum(a: Any, b: Any) -> Array:
        return _bound(a, b, "max")

    @staticmethod
    def power(a: Any, b: Any) -> Array:
        return torch.pow(a, b)


#: torch dtypes with a numpy twin (a view, no copy)
_HOST_DTYPES = frozenset(
    {torch.float16, torch.float32, torch.float64, torch.bool, torch.uint8}
    | {torch.int8, torch.int16, torch.int32, torch.int64}
)


def _host_ready(x: Any) -> bool:
    """Whether ``x`` can be handed to numpy as it is: None, a number, a numpy array, or a dense
    CPU tensor of a dtype numpy has."""
    if isinstance(x, torch.Tensor):
        return x.device.type == "cpu" and x.layout == torch.strided and x.dtype in _HOST_DTYPES
    return x is None or isinstance(x, (np.ndarray, np.generic, int, float))


class TorchOps(Ops):
    name = "torch"
    xp = _TorchMath

    # -- reading back and conversion ------------------------------------------------------
    def can_read(self, x: Array) -> bool:
        dev = getattr(x, "device", None)
        return not isinstance(dev, torch.device) or dev.type == "cpu"

    def host(self, arrays: tuple[Any, ...]) -> Ops:
        """Numpy views of the batch (:class:`TorchHostOps`) when every array is on the CPU and
        the scores are at most ``Sizes.host`` values, outside ``torch.compile`` (and unless
        :func:`~rankstream.core.backends.host_batches` turned it off); else these ops."""
        scores = arrays[0] if arrays else None
        if (
            not isinstance(scores, torch.Tensor)
            or scores.numel() > _sizes.SIZES.host
            or not host_batches_enabled()
            or not all(_host_ready(a) for a in arrays)
            or torch.compiler.is_compiling()
        ):
            return self
        ops = self.__dict__.get("_host_ops")
        if ops is None:
            ops = self._host_ops = TorchHostOps(self)
        return ops

    def export(self, x: Array) -> Array:
        return x

    def owns(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor)

    def host_bools(self, x: Array) -> list[bool]:
        return [bool(v) for v in x.reshape(-1).tolist()]

    def to_numpy(self, x: Array) -> np.ndarray:
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            # numpy has no bfloat16: its values as float32 (exact, every bfloat16 is one)
            return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
        return np.asarray(x)

    def asarray(self, x: Any, like: Array = None, dtype: Any = None) -> Array:
        device = like.device if like is not None and hasattr(like, "device") else None
        if isinstance(dtype, type) and issubclass(dtype, np.generic):
            dtype = _NUMPY_TO_TORCH[dtype]
        if isinstance(x, np.ndarray) and x.dtype == np.bool_:
            x = x.copy()
        return torch.as_tensor(x, dtype=dtype, device=device)

    def cast(self, x: Array, dtype: Any) -> Array:
        return x.to(dtype)

    def acc_dtype(self, x: Array) -> Any:
        dev = getattr(x, "device", None)
        return torch.float32 if dev is not None and dev.type == "mps" else torch.float64

    def int_dtype(self) -> Any:
        return torch.int64

    # -- dtypes ---------------------------------------------------------------------------
    def dtype_name(self, x: Array) -> str:
        return str(x.dtype).replace("torch.", "")

    def is_floating(self, x: Array) -> bool:
        return x.is_floating_point()

    def is_bool(self, x: Array) -> bool:
        return x.dtype == torch.bool

    def is_numeric(self, x: Array) -> bool:
        return not x.is_complex()

    def is_complex(self, x: Array) -> bool:
        return bool(x.is_complex())

    # -- creation and shape ---------------------------------------------------------------
    def arange(self, start: int, stop: int, like: Array, dtype: Any) -> Array:
        return torch.arange(start, stop, device=like.device, dtype=dtype)

    def zeros(self, shape: tuple[int, ...], like: Array, dtype: Any) -> Array:
        return torch.zeros(shape, device=like.device, dtype=dtype)

    def ones_bool(self, like: Array) -> Array:
        return torch.ones(like.shape, dtype=torch.bool, device=like.device)

    def reshape(self, x: Array, shape: tuple[int, ...]) -> Array:
        return x.reshape(shape)

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return torch.stack(xs, dim=axis)

    def concat(self, xs: list[Array], axis: int = 0) -> Array:
        return torch.cat(xs, dim=axis)

    def ravel_concat(self, xs: list[Array]) -> Array:
        """The tensors flattened and joined into one 1-D tensor (one call for scalars and
        vectors, the usual state fields)."""
        if all(x.dim() <= 1 for x in xs):
            return torch.hstack(xs)
        return torch.cat([x.reshape(-1) for x in xs])

    # -- selection ------------------------------------------------------------------------
    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        return torch.topk(x, k, dim=-1, largest=True, sorted=True)

    def topk_first(self, scores: Array, k: int, valid: Array | None) -> tuple[Array, Array] | None:
        """Exact top-``k`` with ties broken by index (earlier first) and masked items last,
        in ONE ``topk`` and no host read: each score is mapped to an order-preserving int32
        (sign-magnitude to two's complement, with -0.0 folded onto +0.0) and packed with the
        inverted column index into an int64 key. Returns ``(indices, nan_rows)``; NaN maps
        above +inf, as ``torch.topk`` orders it. ``None`` when the scores are not a float
        type of at most 32 bits (float64 takes a full stable sort)."""
        if scores.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return self._sorted_first(scores, k, valid)
        n = scores.shape[-1]
        x = scores.to(torch.float32) + 0.0  # -0.0 + 0.0 == +0.0
        bits = x.view(torch.int32)
        ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        inv_index = (n - 1) - torch.arange(n, device=scores.device, dtype=torch.int64)
        key = (ordered.to(torch.int64) << 32) | inv_index
        if valid is not None:
            key = torch.where(valid, key, torch.iinfo(torch.int64).min)
        top = torch.topk(key, k, dim=-1, largest=True, sorted=True)
        nan_rows = torch.isnan(torch.gather(x, -1, top.indices[:, :1]))[:, 0]
        if valid is not None:
            nan_rows = nan_rows & torch.gather(valid, -1, top.indices[:, :1])[:, 0]
        return top.indices, nan_rows

    def masked_topk(
        self, x: Array, k: int, valid: Array, ws: Workspace | None = None, cap: int | None = None
    ) -> tuple[Array, Array]:
        """``topk`` of ``x`` with ``-inf`` where ``valid`` is False. On CPU, tile by tile of
        whole rows (an eighth of the batch at most, less in narrow lists; see
        ``Sizes.tiled_topk``): each tile masked into
        a workspace buffer and ranked there, so the scratch is one tile, never a masked copy
        of ``x``; the rows' results are those of one ``topk`` of the whole masked array."""
        fill = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
        b, n = int(x.shape[0]), int(x.shape[1])
        z = _sizes.SIZES
        if k <= 2:
            step = max(min(z.tile, (b * n) // 8, max((b * n) // z.topk_share, z.min_tile)) // n, 1)
        elif 256 * k > n:  # a narrow list: its selection is a large share of the scores
            step = max(_list_budget(b, n) // n, 1)
        else:
            step = max(min(z.tile, (b * n) // 8) // n, 1)
        small = x.numel() < z.tiled_topk
        if cap is not None and x.numel() > cap:  # a block of a batch (``Context.tile_cap``)
            step, small = max(min(step, cap // n), 1), False
        if not _cpu(x) or ws is None or small or step >= b:
            return self.topk(torch.where(valid, x, fill), k)
        vals = torch.empty((b, k), dtype=x.dtype)
        idx = torch.empty((b, k), dtype=torch.int64)
        for a in range(0, b, step):
            r = slice(a, min(a + step, b))
            buf = _buffer(ws, "count", (r.stop - r.start, n), x.dtype)
            torch.where(valid[r], x[r], fill, out=buf)
            v, i = torch.topk(buf, k, dim=-1, largest=True, sorted=True)
            vals[r], idx[r] = v, i
        return vals, idx

    def _sorted_first(self, scores: Array, k: int, valid: Array | None) -> tuple[Array, Array]:
        s = torch.where(torch.isnan(scores), float("inf"), scores) + 0.0
        keys = [s] if valid is None else [torch.where(valid, s, float("-inf")), valid.to(s.dtype)]
        idx = self.stable_argsort_desc(keys)[:, :k]
        nan_rows = torch.isnan(torch.gather(scores, -1, idx[:, :1]))[:, 0]
        if valid is not None:
            nan_rows = nan_rows & torch.gather(valid, -1, idx[:, :1])[:, 0]
        return idx, nan_rows

    def stable_argsort_desc(self, keys: list[Array]) -> Array:
        # Sort by the least significant key first; stable sorts keep the earlier order
        # (and so the index order) among equal values.
        order = None
        for key in reversed(keys):
            k = key if order is None else torch.gather(key, -1, order)
            o = torch.sort(k, dim=-1, descending=True, stable=True).indices
            order = o if order is None else torch.gather(order, -1, o)
        return order

    def order_first(self, values: Array, index: Array) -> Array:
        """Row-wise argsort by ``values`` descending, then ``index`` ascending (no NaN; each
        row's indices distinct, in ``[0, 2^31)``): one sort of int64 keys for float types of
        at most 32 bits (the value's order-preserving int32 bits above ``-index``, as
        :meth:`topk_first` packs them; keys are distinct, so any sort is exact), else
        :meth:`stable_argsort_desc`."""
        if values.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return self.stable_argsort_desc([values, -index.to(torch.float64)])
        bits = (values.to(torch.float32) + 0.0).view(torch.int32)
        keys = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)
        del bits
        keys.bitwise_left_shift_(32).sub_(index)
        return torch.sort(keys, dim=-1, descending=True).indices

    def take_along(self, x: Array, idx: Array) -> Array:
        return torch.gather(x, -1, idx)

    def take(self, x: Array, idx: Array, axis: int, ws: Workspace | None = None) -> Array:
        if ws is None or not _cpu(x):
            return torch.index_select(x, axis, idx)
        shape = list(x.shape)
        shape[axis] = int(idx.shape[0])
        return torch.index_select(x, axis, idx, out=_buffer(ws, f"take{axis}", tuple(shape), x.dtype))

    def lookup(self, table: Array, idx: Array) -> Array:
        return table[idx]

    def set_rows(self, x: Array, rows: Array, values: Array) -> Array:
        x = x.clone()
        x[rows] = values
        return x

    def nonzero(self, x: Array) -> Array:
        return torch.nonzero(x, as_tuple=True)[0]

    def randperm(self, n: int, like: Array, generator: Any) -> Array:
        if not isinstance(generator, torch.Generator):
            generator = self.generator(generator)
        return torch.randperm(n, generator=generator).to(like.device)

    def generator(self, seed: Any) -> Any:
        g = torch.Generator(device="cpu")
        if seed is None:
            g.seed()
        else:
            g.manual_seed(int(seed))
        return g

    # -- arithmetic -----------------------------------------------------------------------
    def cumsum(self, x: Array, axis: int = -1) -> Array:
        return torch.cumsum(x, dim=axis)

    def sum(self, x: Array, axis: Any = None) -> Array:
        return torch.sum(x) if axis is None else torch.sum(x, dim=axis)

    def matmul(self, a: Array, b: Array) -> Array:
        return torch.matmul(a, b)

    def exp2(self, x: Array) -> Array:
        return torch.exp2(x)  # about twice as fast as torch.pow(2.0, x) on the CPU

    def row_sums(self, x: Array) -> Array:
        return torch.sum(x, dim=1)

    def masked_row_sums(self, x: Array, valid: Array, ws: Workspace | None = None) -> Array:
        """Per row, the sum of ``x`` over the items where ``valid`` is True (in ``x``'s dtype).
        On CPU tile by tile (:func:`_tiles`, an eighth of the batch at most) through the
        counting passes' workspace tile, never a masked copy of ``x``."""
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        if not _cpu(x) or ws is None or x.numel() < _sizes.SIZES.small:
            return torch.where(valid, x, zero).sum(dim=1)
        b, n = int(x.shape[0]), int(x.shape[1])
        out = torch.zeros(b, dtype=x.dtype)
        for r, c in _tiles(b, n, budget=_list_budget(b, n)):
            buf = _buffer(ws, "count", (r.stop - r.start, c.stop - c.start), x.dtype)
            torch.where(valid[r, c], x[r, c], zero, out=buf)
            out[r] += buf.sum(dim=1)
        return out

    def where(self, c: Array, a: Any, b: Any) -> Array:
        return torch.where(c, a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        return _bound(a, b, "max")

    def maximum(self, a: Any, b: Any) -> Array:
        return _bound(a, b, "min")

    log, log2, isnan, isfinite = (
        staticmethod(f) for f in (torch.log, torch.log2, torch.isnan, torch.isfinite)
    )

    def any(self, x: Array, axis: Any = None) -> Array:
        return torch.any(x) if axis is None else torch.any(x, dim=axis)

    def all(self, x: Array, axis: Any = None) -> Array:
        return torch.all(x) if axis is None else torch.all(x, dim=axis)

    def amin(self, x: Array) -> Array:
        return torch.amin(x)

    def and_not(self, a: Array, b: Array) -> Array:
        return a > b  # one pass on bool tensors: a & ~b

    # -- counting passes ------------------------------------------------------------------
    def count_relevant(
        self, labels: Array, t: float, strict: bool, valid: Any, dtype: Any, ws: Any = None
    ) -> Array:
        """Per row, the number of valid items with ``label > t`` (``strict``) or
        ``label >= t``. On CPU the comparison writes 0/1 floats into a workspace tile (a
        float sum is several times faster than a bool one; NaN compares False), summed exactly
        (float32 below 2^24 items). Small inputs take the plain ops (fewer calls)."""
        return self._count_compared(labels, torch.gt if strict else torch.ge, t, valid, dtype, ws)

    def count_and_max(
        self, labels: Array, t: float, strict: bool, valid: Any, dtype: Any, ws: Any = None
    ) -> tuple[Array, Array]:
        """:meth:`count_relevant` and, per row, the largest label of ALL items (masked ones
        too; NaN where a row holds one), in the labels' dtype. On CPU the row maxima are taken
        on each tile the count reads, still in cache (tiles of ``Sizes.gain_tile`` values: the
        labels' tile and the count's fit in a core's cache; measured at 1,024 x 20,000 on one
        thread, the ``amax`` adds a sixth to the count there, where a second pass or tiles of
        2^18 values and more add two thirds)."""
        out = self._count_compared(labels, torch.gt if strict else torch.ge, t, valid, dtype, ws, True)
        return out[0], out[1]

    def count_equal(self, labels: Array, t: float, valid: Any, dtype: Any, ws: Any = None) -> Array:
        """Per row, the number of valid items with ``label == t`` (NaN is never equal), as
        :meth:`count_relevant` counts."""
        return self._count_compared(labels, torch.eq, t, valid, dtype, ws, smallest=_sizes.SIZES.min_tile)

    def _count_compared(
        self, labels: Array, cmp: Any, t: float, valid: Any, dtype: Any, ws: Any, with_max: bool = False,
        smallest: int | None = None,
    ) -> Any:  # fmt: skip
        if labels.device.type != "cpu" or ws is None or labels.numel() < _sizes.SIZES.small_count:
            rel = cmp(labels, t)
            if valid is not None:
                rel = rel & valid
            count = rel.sum(dim=-1, dtype=dtype)
            return (count, labels.amax(dim=-1)) if with_max else count
        b, n = labels.shape
        cd = _count_dtype(int(n))
        budget = _sizes.SIZES.gain_tile if with_max else (_list_budget(b, n) if smallest is None else None)
        if len(_tiles(b, n, smallest=smallest, budget=budget)) == 1:  # one tile holds the batch
            buf = cmp(labels, t, out=_buffer(ws, "count", (b, n), cd))
            if valid is not None:  # 0/1 times the mask: exact
                _times_mask(buf, valid)
            count = buf.sum(dim=1).to(dtype)
            return (count, labels.amax(dim=1)) if with_max else count
        out = torch.zeros(b, dtype=cd)
        # each row's first label to start from (any dtype; the row's maximum includes it)
        most = labels[:, 0].clone() if with_max else None
        for r, c, buf in _tile_buffers(ws, b, n, cd, budget=budget, smallest=smallest):
            y = labels[r, c]
            cmp(y, t, out=buf)
            if valid is not None:  # 0/1 times the mask: exact
                _times_mask(buf, valid[r, c])
            if c.stop - c.start == n:  # whole rows: their results written in place (no
                # temporaries: with the maxima at 1,024 x 20,000, 0.7x the time of adding each
                # tile's); the tile's labels are still in cache for the maxima, NaN propagates
                torch.sum(buf, dim=1, out=out[r])
                if most is not None:
                    torch.amax(y, dim=1, out=most[r])
                continue
            out[r] += buf.sum(dim=1)
            if most is not None:
                torch.maximum(most[r], y.amax(dim=1), out=most[r])
        return (out.to(dtype), most) if with_max else out.to(dtype)

    def row_count(self, cond: Array, acc: Any, ws: Workspace | None = None) -> Array:
        """Per row, the number of True entries of a (B, N) bool array, in ``acc``."""
        if not _cpu(cond) or ws is None:
            return cond.sum(dim=1).to(acc)
        b, n = cond.shape
        cd = _count_dtype(int(n))
        if len(_tiles(b, n)) == 1:  # one tile holds the batch: no per-tile accumulation
            return _buffer(ws, "count", (b, n), cd).copy_(cond).sum(dim=1).to(acc)
        out = torch.zeros(b, dtype=cd)
        for r, c, buf in _tile_buffers(ws, b, n, cd):
            buf.copy_(cond[r, c])
            out[r] += buf.sum(dim=1)
        return out.to(acc)

    def compare_counts(
        self, s: Array, t: Array, acc: Any, need: tuple[bool, bool], ws: Workspace | None = None
    ) -> tuple[Array | None, Array | None]:
        """Per row ``(#(s > t), #(s >= t))`` for ``s`` (B, N), ``t`` (B,); only those flagged
        in ``need``. NaN compares False. On CPU each comparison is written as 0/1 floats into
        a workspace tile and summed per row."""
        gt, ge, _ = self.rank_counts(s, t, acc, need, ws=ws)
        return gt, ge

    def rank_counts(self, scores: Array, t: Array, acc: Any, need: tuple[bool, bool],
                    keep: Array | None = None, drop: Array | None = None, rows: Array | None = None,
                    ws: Workspace | None = None,
                    nan: bool = True) -> tuple[Array | None, Array | None, Array | None]:  # fmt: skip
        """See :meth:`rankstream.core.backends.numpy.NumpyOps.rank_counts`. On CPU, tile by
        tile: the rows (gathered when ``rows`` is given) with ``-inf`` on the excluded
        candidates, then their NaN test and each comparison as 0/1 floats summed per row: the
        scratch is two tiles, never a copy of the scores."""
        if not _cpu(scores) or ws is None or scores.numel() < _sizes.SIZES.small_count:  # tiny: the plain ops
            if rows is not None:
                scores = torch.index_select(scores, 0, rows)
                keep = None if keep is None else torch.index_select(keep, 0, rows)
                drop = None if drop is None else torch.index_select(drop, 0, rows)
            s = scores if keep is None else self.exclude(scores, keep)
            s = s if drop is None else self.exclude(s, None, drop)
            tc = t[:, None]
            gt = (s > tc).sum(dim=1).to(acc) if need[0] else None
            ge = (s >= tc).sum(dim=1).to(acc) if need[1] else None
            return gt, ge, torch.isnan(s).sum(dim=1).to(acc) if nan else None
        return tiled_rank_counts(scores, t, acc, need, keep, drop, rows, ws, nan)

    def exclude(
        self, scores: Array, keep: Array | None, drop: Array | None = None, ws: Workspace | None = None
    ) -> Array:
        """``scores`` with ``-inf`` where ``keep`` is False or ``drop`` is True (into a
        workspace buffer on CPU)."""
        fill = torch.full((), float("-inf"), dtype=scores.dtype, device=scores.device)
        if not _cpu(scores) or ws is None:
            return torch.where(drop, fill, scores) if keep is None else torch.where(keep, scores, fill)
        out = _buffer(ws, "scores", tuple(scores.shape), scores.dtype)
        if keep is None:
            return torch.where(drop, fill, scores, out=out)
        return torch.where(keep, scores, fill, out=out)

    # -- tie groups -----------------------------------------------------------------------
    def run_bounds(self, new: Array) -> tuple[Array, Array]:
        """See :meth:`rankstream.core.backends.numpy.NumpyOps.run_bounds`: ``torch.cummax``
        forwards and on the flipped array."""
        k = int(new.shape[1])
        pos = torch.arange(k, device=new.device, dtype=torch.int64)
        start = torch.cummax(torch.where(new, pos, 0), dim=1).values
        last = torch.cat([new[:, 1:], torch.ones_like(new[:, :1])], dim=1)
        back = torch.flip(torch.where(last, (k - 1) - pos, 0), dims=[1])
        end = (k - 1) - torch.flip(torch.cummax(back, dim=1).values, dims=[1])
        return start, end

    def tie_sums(
        self, scores: Array, v: Array, valid: Array | None, items: list[Array | None], fn: Any,
        acc: Any, ws: Workspace | None = None, rows: Array | None = None,
    ) -> tuple[Array, Array | None]:  # fmt: skip
        """See :meth:`rankstream.core.backends.numpy.NumpyOps.tie_sums`. On CPU tile by tile
        (:func:`_tiles`, a 64th of the batch at most; the rows gathered per tile): the
        comparison of each tile, then ``fn`` of its tied items only, never a full-size
        temporary."""
        n = int(scores.shape[1])
        b = int(scores.shape[0]) if rows is None else int(rows.shape[0])
        if not _cpu(scores) or ws is None or b * n < _sizes.SIZES.small:
            tiles = [(slice(0, b), slice(0, n))]
        else:  # small tiles: a tile's tied items' indices (16 bytes each) stay small if all tie
            tiles = _tiles(b, n, share=64, smallest=_sizes.SIZES.tie_tile)
        count = torch.zeros(b, dtype=acc, device=scores.device)
        total = None if fn is None else torch.zeros(b, dtype=acc, device=scores.device)

        def tile(x: Array, r: slice, c: slice) -> Array:
            return x[r, c] if rows is None else torch.index_select(x[:, c], 0, rows[r])

        for r, c in tiles:
            tie = tile(scores, r, c) == v[r, None]
            if valid is not None:
                tie &= tile(valid, r, c)
            i, j = torch.nonzero(tie, as_tuple=True)  # the tied items only: fn reads their labels alone
            part = count[r]
            part.index_add_(0, i, torch.ones_like(i, dtype=acc))
            if total is not None:
                x = fn(*(None if it is None else tile(it, r, c)[i, j] for it in items))
                total[r].index_add_(0, i, torch.broadcast_to(torch.as_tensor(x, dtype=acc), i.shape))
        return count, total

    def bincount(self, keys: Array, weights: Array, length: int) -> Array:
        """``(length,)``: per key the sum of ``weights`` ``(M,)`` at the integer ``keys``
        ``(M,)`` (each within range): one ``index_add_``."""
        out = torch.zeros(length, dtype=weights.dtype, device=weights.device)
        return out.index_add_(0, keys.to(torch.int64), weights)

    def histogram(self, values: Array, weights: Array, edges: Array) -> Array:
        """``(T, H)``: per row of ``values`` ``(T, n)`` and bin ``i``, the sum of ``weights``
        ``(n,)`` with values in ``[edges[i], edges[i + 1])`` (``H = len(edges)``; below
        ``edges[0]``: the first bin, from the last edge on: the last). One search, one add."""
        rows, size = int(values.shape[0]), int(edges.shape[0])
        v = values.to(edges.dtype).contiguous()
        idx = (torch.searchsorted(edges, v, right=True) - 1).clamp_(0, size - 1)
        idx += size * torch.arange(rows, device=idx.device)[:, None]
        out = torch.zeros(rows * size, dtype=weights.dtype, device=weights.device)
        out.index_add_(0, idx.reshape(-1), weights.expand(rows, -1).reshape(-1))
        return out.reshape(rows, size)

    def valid_counts(self, valid: Array, acc: Any, ws: Workspace | None = None) -> Array:
        """Per row, the number of True entries of a ``(B, N)`` bool mask, in ``acc`` (as
        :meth:`row_count`). On CPU a contiguous mask with ``N`` a multiple of 8 is read as its
        bytes eight at a time (torch's bools are the bytes 0 and 1): each row's ``N / 8`` int64
        words summed in runs of 255 (a byte of a sum then holds at most 255, no carry), the
        sums' bytes added up; one read of the mask, no per-item conversion."""
        if not _cpu(valid) or ws is None or valid.dtype != torch.bool or valid.dim() != 2:
            return self.row_count(valid, acc, ws)
        b, n = int(valid.shape[0]), int(valid.shape[1])
        if n % 8 or not valid.is_contiguous() or valid.numel() < _sizes.SIZES.small:
            return self.row_count(valid, acc, ws)
        try:
            words = valid.view(torch.uint8).view(torch.int64)
        except RuntimeError:  # a view not aligned on 8 bytes
            return self.row_count(valid, acc, ws)
        c = n // 8
        runs = torch.empty((b, -(-c // 255)), dtype=torch.int64)
        for j, a in enumerate(range(0, c, 255)):
            torch.sum(words[:, a : a + 255], dim=1, out=runs[:, j])
        return runs.view(torch.uint8).sum(dim=1, dtype=torch.int64).to(acc)

    def gain_sums(
        self, labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Workspace | None = None
    ) -> tuple[Array, Array]:
        """Per row ``(sum g, sum g^2)`` over the valid items, ``g = 2^y' - 1`` (``exp``) or
        ``g = y'``, ``y' = y`` where ``y >= t`` and 0 below (``t`` None: ``y' = y``), in
        ``dtype``; masked items count 0 whatever they hold (NaN too). On CPU one pass tile by
        tile (``Sizes.gain_tile`` values, in cache) in a workspace tile of the labels' float
        dtype: ``y'`` in one ``threshold`` (``y > t^-``, ``t^-`` the float below ``t``), the
        masked items set to 0, the gain in place, then the row sums (pairwise, exact for whole
        gains below 2^24 per row in float32), added up across tiles in ``dtype``. float32
        labels whose gains overflow float32 (``2^y`` from ``y = 128``) are summed again in
        ``dtype``."""
        s1, s2, _, _ = gain_stats(labels, exp, t, valid, dtype, ws, False)
        return s1, s2

    def gain_top(
        self, labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Workspace | None = None,
        positive: bool = False,
    ) -> tuple[Array, ...]:  # fmt: skip
        """:meth:`gain_sums` and, per row, the largest ``y'`` (masked items holding 0) and the
        number of items holding it (masked ones too where it is 0), in ``dtype``; with
        ``positive`` also the number of items with ``y' > 0`` (the count of relevant items
        for ``t`` None or ``t > 0``). In the same pass: three more operations on each tile (a
        row ``amax``, an ``eq`` against it, a row sum) before the gain, two for ``positive``."""
        return gain_stats(labels, exp, t, valid, dtype, ws, True, positive)


__all__ = ["TorchHostOps", "TorchOps"]
