"""numpy backend (float64 everywhere): the functional forms and :class:`~rankstream.State`."""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core import sizes as _sizes
from rankstream.core.backends.protocol import Array, Ops, Workspace


def _row_step(b: int, n: int) -> int:
    """Rows per block of a masked pass over a ``(b, n)`` array: at most ``Sizes.numpy_tile_max``
    values and a ``Sizes.numpy_tile_share``-th of the batch, at least ``Sizes.numpy_tile_min``
    (and one row)."""
    z = _sizes.SIZES
    return max(
        1, min(b, max(min(z.numpy_tile_max, (b * n) // z.numpy_tile_share), z.numpy_tile_min) // max(n, 1))
    )


class NumpyOps(Ops):
    name = "numpy"
    xp = np

    # -- reading back and conversion ------------------------------------------------------
    def can_read(self, x: Array) -> bool:
        return True

    def host(self, arrays: tuple[Any, ...]) -> Ops:
        return self

    def export(self, x: Array) -> Array:
        return x

    def owns(self, x: Any) -> bool:
        return isinstance(x, (np.ndarray, np.generic))

    def host_bools(self, x: Array) -> list[bool]:
        return [bool(v) for v in np.asarray(x).reshape(-1)]

    def to_numpy(self, x: Array) -> np.ndarray:
        return np.asarray(x)

    def asarray(self, x: Any, like: Array = None, dtype: Any = None) -> Array:
        return np.asarray(x, dtype=dtype)

    def cast(self, x: Array, dtype: Any) -> Array:
        return np.asarray(x).astype(dtype, copy=False)

    def acc_dtype(self, x: Array) -> Any:
        return np.float64

    def int_dtype(self) -> Any:
        return np.int64

    # -- dtypes ---------------------------------------------------------------------------
    def dtype_name(self, x: Array) -> str:
        return str(np.asarray(x).dtype)

    # dtype kinds (cheaper than np.issubdtype, which small batches pay for on every update)
    def is_floating(self, x: Array) -> bool:
        return np.asarray(x).dtype.kind == "f"

    def is_bool(self, x: Array) -> bool:
        return np.asarray(x).dtype == np.bool_

    def is_numeric(self, x: Array) -> bool:
        return np.asarray(x).dtype.kind in "biufm"  # bool, ints, floats (timedelta: an int)

    def is_complex(self, x: Array) -> bool:
        return np.asarray(x).dtype.kind == "c"

    # -- creation and shape ---------------------------------------------------------------
    def arange(self, start: int, stop: int, like: Array, dtype: Any) -> Array:
        return np.arange(start, stop, dtype=dtype)

    def zeros(self, shape: tuple[int, ...], like: Array, dtype: Any) -> Array:
        return np.zeros(shape, dtype=dtype)

    def ones_bool(self, like: Array) -> Array:
        return np.ones(like.shape, dtype=bool)

    def reshape(self, x: Array, shape: tuple[int, ...]) -> Array:
        return np.reshape(x, shape)

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return np.stack(xs, axis=axis)

    def concat(self, xs: list[Array], axis: int = 0) -> Array:
        return np.concatenate(xs, axis=axis)

    def ravel_concat(self, xs: list[Array]) -> Array:
        """The arrays flattened and joined into one 1-D array (each array's own ``ravel``: a
        third of ``np.reshape``'s time on the few small fields of a state)."""
        flat = [x.ravel() if isinstance(x, (np.ndarray, np.generic)) else np.ravel(x) for x in xs]
        return np.concatenate(flat)

    # -- selection ------------------------------------------------------------------------
    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        # NaN ranks first, as in torch.topk, so a NaN check can read the first column.
        key = np.where(np.isnan(x), -np.inf, -x)
        n = x.shape[-1]
        if k >= n:
            idx = np.argsort(key, axis=-1, kind="stable")
        else:
            part = np.argpartition(key, k - 1, axis=-1)[..., :k]
            order = np.argsort(np.take_along_axis(key, part, -1), axis=-1, kind="stable")
            idx = np.take_along_axis(part, order, -1)
        return np.take_along_axis(x, idx, -1), idx

    def masked_topk(
        self, x: Array, k: int, valid: Array, ws: Workspace | None = None, cap: int | None = None
    ) -> tuple[Array, Array]:
        """``topk`` of ``x`` with ``-inf`` where ``valid`` is False."""
        return self.topk(np.where(valid, x, -np.inf), k)

    def topk_first(self, scores: Array, k: int, valid: Array | None) -> tuple[Array, Array] | None:
        """Exact stable top-k without a read: a full stable sort (numpy always reads back, so
        this serves only a forced no-read path)."""
        keys = [np.where(np.isnan(scores), np.inf, scores)]
        if valid is not None:
            keys = [np.where(valid, keys[0], -np.inf), valid.astype(np.float64)]
        idx = self.stable_argsort_desc(keys)[:, :k]
        nan_rows = np.isnan(np.take_along_axis(scores, idx[:, :1], -1))[:, 0]
        if valid is not None:
            nan_rows &= np.take_along_axis(valid, idx[:, :1], -1)[:, 0]
        return idx, nan_rows

    def stable_argsort_desc(self, keys: list[Array]) -> Array:
        """Row-wise argsort by ``keys[0]`` descending, ties by ``keys[1]`` descending, ...
        then by index ascending."""
        cols = [-k for k in reversed(keys)]  # np.lexsort sorts ascending by the last key first
        out = np.empty(keys[0].shape, dtype=np.int64)
        for i in range(keys[0].shape[0]):
            out[i] = np.lexsort([c[i] for c in cols])
        return out

    def order_first(self, values: Array, index: Array) -> Array:
        """Row-wise argsort by ``values`` descending, then ``index`` ascending (no NaN among
        the values; each row's indices distinct, in ``[0, 2^31)``): the ``"first"`` order of a
        selection. float32 and float16 values take one sort of int64 keys (:func:`first_keys`),
        others :meth:`stable_argsort_desc`."""
        if values.dtype not in (np.float32, np.float16):
            return self.stable_argsort_desc([values, -np.asarray(index, dtype=np.float64)])
        keys = first_keys(values, index)
        np.invert(keys, out=keys)  # ascending ~key: descending key
        return np.argsort(keys, axis=-1)

    def take_along(self, x: Array, idx: Array) -> Array:
        if x.ndim == 2 and idx.ndim == 2:  # np.take_along_axis's own index building costs more
            if idx.size >= _sizes.SIZES.flat_take and x.flags.c_contiguous:  # flat positions: half the time
                return np.take(x.reshape(-1), idx + np.arange(0, x.size, x.shape[1], dtype=np.int64)[:, None])
            return x[np.arange(x.shape[0])[:, None], idx]
        return np.take_along_axis(x, idx, -1)

    def take(self, x: Array, idx: Array, axis: int, ws: Workspace | None = None) -> Array:
        return np.take(x, idx, axis=axis)

    def lookup(self, table: Array, idx: Array) -> Array:
        return table[idx]

    def set_rows(self, x: Array, rows: Array, values: Array) -> Array:
        x = x.copy()
        x[rows] = values
        return x

    def nonzero(self, x: Array) -> Array:
        return np.nonzero(x)[0]

    def randperm(self, n: int, like: Array, generator: Any) -> Array:
        rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
        return rng.permutation(n)

    def generator(self, seed: Any) -> Any:
        return np.random.default_rng(seed)

    # -- arithmetic -----------------------------------------------------------------------
    def cumsum(self, x: Array, axis: int = -1) -> Array:
        return np.add.accumulate(x, axis=axis)

    def sum(self, x: Array, axis: Any = None) -> Array:
        return np.add.reduce(x, axis=axis)

    def matmul(self, a: Array, b: Array) -> Array:
        return np.matmul(a, b)

    def exp2(self, x: Array) -> Array:
        return np.exp2(x)

    def row_sums(self, x: Array) -> Array:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.sum(x, axis=1)

    def masked_row_sums(self, x: Array, valid: Array, ws: Workspace | None = None) -> Array:
        """Per row, the sum of ``x`` over the items where ``valid`` is True."""
        with np.errstate(invalid="ignore", over="ignore"):
            return np.sum(np.where(valid, x, 0.0), axis=1)

    # elementwise: numpy's own functions
    where, minimum, maximum = (staticmethod(f) for f in (np.where, np.minimum, np.maximum))
    log, log2, isnan, isfinite = (staticmethod(f) for f in (np.log, np.log2, np.isnan, np.isfinite))

    def any(self, x: Array, axis: Any = None) -> Array:
        return np.logical_or.reduce(x, axis=axis)

    def all(self, x: Array, axis: Any = None) -> Array:
        return np.logical_and.reduce(x, axis=axis)

    def amin(self, x: Array) -> Array:
        return np.minimum.reduce(x, axis=None)

    def and_not(self, a: Array, b: Array) -> Array:
        return a & ~b

    # -- counting passes ------------------------------------------------------------------
    def count_relevant(
        self, labels: Array, t: float, strict: bool, valid: Any, dtype: Any, ws: Any = None
    ) -> Array:
        """Per row, the number of valid items with ``label > t`` (``strict``) or
        ``label >= t``."""
        rel = labels > t if strict else labels >= t
        if valid is not None:
            rel = rel & valid
        return np.sum(rel, axis=-1).astype(dtype)

    def count_and_max(
        self, labels: Array, t: float, strict: bool, valid: Any, dtype: Any, ws: Any = None
    ) -> tuple[Array, Array]:
        """:meth:`count_relevant` and, per row, the largest label of all items (masked ones
        too; NaN where a row holds one)."""
        return self.count_relevant(labels, t, strict, valid, dtype, ws), np.max(labels, axis=-1)

    def count_equal(self, labels: Array, t: float, valid: Any, dtype: Any, ws: Any = None) -> Array:
        """Per row, the number of valid items with ``label == t`` (NaN is never equal)."""
        eq = labels == t
        if valid is not None:
            eq = eq & valid
        return np.sum(eq, axis=-1).astype(dtype)

    def row_count(self, cond: Array, acc: Any, ws: Workspace | None = None) -> Array:
        """Per row, the number of True entries of a (B, N) bool array, in ``acc``."""
        return np.count_nonzero(cond, axis=1).astype(acc)

    def compare_counts(
        self, s: Array, t: Array, acc: Any, need: tuple[bool, bool], ws: Workspace | None = None
    ) -> tuple[Array | None, Array | None]:
        """Per row ``(#(s > t), #(s >= t))`` for ``s`` (B, N), ``t`` (B,); only those flagged
        in ``need`` (``None`` otherwise). NaN compares False."""
        tc = t[:, None]
        gt = self.row_count(s > tc, acc) if need[0] else None
        ge = self.row_count(s >= tc, acc) if need[1] else None
        return gt, ge

    def rank_counts(self, scores: Array, t: Array, acc: Any, need: tuple[bool, bool],
                    keep: Array | None = None, drop: Array | None = None, rows: Array | None = None,
                    ws: Workspace | None = None,
                    nan: bool = True) -> tuple[Array | None, Array | None, Array | None]:  # fmt: skip
        """The comparison passes of a rank: per row of ``s``, the scores (``rows`` given: the
        rows ``rows`` of them, in that order) with ``-inf`` where ``keep`` is False or ``drop``
        is True (either or both given), returns ``(#(s > t), #(s >= t), #(s is NaN))`` per
        row, the first two only where flagged in ``need`` (``None`` otherwise), in ``acc``;
        ``t`` has one value per row of the result. NaN compares False (an excluded NaN is
        ``-inf``, not NaN). Rows are taken in blocks of about ``2^20`` values, so the scratch
        stays a small fraction of a large batch. ``nan=False``: no NaN count (``None``)."""
        b = scores.shape[0] if rows is None else rows.shape[0]
        n = scores.shape[1]
        step = _row_step(b, n)
        gt = np.zeros(b, dtype=acc) if need[0] else None
        ge = np.zeros(b, dtype=acc) if need[1] else None
        nans = np.zeros(b, dtype=acc) if nan else None
        for a in range(0, b, step):
            part = slice(a, min(a + step, b))
            pick = part if rows is None else rows[part]
            s = scores[pick]
            if keep is not None:
                s = np.where(keep[pick], s, -np.inf)
            if drop is not None:
                s = np.where(drop[pick], -np.inf, s)
            tc = t[part, None]
            if nans is not None:
                nans[part] = np.count_nonzero(s != s, axis=1)
            if gt is not None:
                gt[part] = np.count_nonzero(s > tc, axis=1)
            if ge is not None:
                ge[part] = np.count_nonzero(s >= tc, axis=1)
        return gt, ge, nans

    def exclude(
        self, scores: Array, keep: Array | None, drop: Array | None = None, ws: Workspace | None = None
    ) -> Array:
        """``scores`` with ``-inf`` where ``keep`` is False or ``drop`` is True."""
        if keep is None:
            return np.where(drop, -np.inf, scores)
        return np.where(keep, scores, -np.inf)

    # -- tie groups -----------------------------------------------------------------------
    def run_bounds(self, new: Array) -> tuple[Array, Array]:
        """For a ``(B, K)`` bool array, True where a run starts (column 0 always is), each
        position's run start and run end (0-based, int64): a cumulative max and a reversed
        cumulative min."""
        k = new.shape[1]
        pos = np.arange(k, dtype=np.int64)
        start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
        last = np.concatenate([new[:, 1:], np.ones_like(new[:, :1])], axis=1)
        end = np.minimum.accumulate(np.where(last, pos, k - 1)[:, ::-1], axis=1)[:, ::-1]
        return start, np.ascontiguousarray(end)

    def tie_sums(
        self, scores: Array, v: Array, valid: Array | None, items: list[Array | None], fn: Any,
        acc: Any, ws: Workspace | None = None, rows: Array | None = None,
    ) -> tuple[Array, Array | None]:  # fmt: skip
        """Per row, over the valid items scored exactly ``v`` (one value per row of the
        result): their count and the sum of ``fn(*items)`` (``fn`` None: no sum; an elementwise
        function, given the tied items' values only), in ``acc``; ``rows`` given: over those
        rows of the arrays, in that order. Rows are taken in blocks of about ``2^20`` values,
        so the scratch is a small fraction of a large batch."""
        n = scores.shape[1]
        b = scores.shape[0] if rows is None else rows.shape[0]
        step = _row_step(b, n)
        count = np.zeros(b, dtype=acc)
        total = None if fn is None else np.zeros(b, dtype=acc)
        for a in range(0, b, step):
            part = slice(a, min(a + step, b))
            pick = part if rows is None else rows[part]
            tie = scores[pick] == v[part, None]
            if valid is not None:
                tie &= valid[pick]
            r, c = np.nonzero(tie)  # the tied items only: fn reads their labels alone
            size = part.stop - part.start
            count[part] = np.bincount(r, minlength=size)
            if total is not None:
                x = fn(*(None if it is None else it[pick][r, c] for it in items))
                total[part] = np.bincount(r, weights=np.broadcast_to(x, r.shape), minlength=size)
        return count, total

    def bincount(self, keys: Array, weights: Array, length: int) -> Array:
        """``(length,)``: per key ``0 .. length - 1`` the sum of ``weights`` ``(M,)`` at the
        integer ``keys`` ``(M,)`` (each within range; a zero weight adds nothing)."""
        return np.bincount(keys, weights=weights, minlength=length).astype(weights.dtype)

    def histogram(self, values: Array, weights: Array, edges: Array) -> Array:
        """``(T, H)``: per row ``t`` of ``values`` ``(T, n)`` and bin ``i``, the sum of
        ``weights`` ``(n,)`` whose values lie in ``[edges[i], edges[i + 1])`` (``H =
        len(edges)`` bins: values below ``edges[0]`` count in the first bin, values from the
        last edge on in the last)."""
        rows, size = int(values.shape[0]), int(edges.shape[0])
        idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, size - 1)
        idx = idx + size * np.arange(rows)[:, None]
        w = np.broadcast_to(weights, values.shape).reshape(-1)
        out = np.bincount(idx.reshape(-1), weights=w, minlength=rows * size)
        return out.reshape(rows, size).astype(weights.dtype)

    def valid_counts(self, valid: Array, acc: Any, ws: Workspace | None = None) -> Array:
        """Per row, the number of True entries of a ``(B, N)`` bool mask, in ``acc`` (as
        :meth:`row_count`). A C-contiguous mask with ``N`` a multiple of 8 is read as its bytes
        eight at a time: each row's ``N / 8`` words summed in runs of 255 (a byte of a sum then
        holds at most 255, no carry), the sums' bytes added up; one read of ``N / 8`` words per
        row instead of a per-item count."""
        words = _packed_words(valid)
        if words is None:
            return self.row_count(valid, acc, ws)
        b, c = int(words.shape[0]), int(words.shape[1])
        runs = np.empty((b, -(-c // 255)), dtype=np.uint64)
        for j, a in enumerate(range(0, c, 255)):
            np.sum(words[:, a : a + 255], axis=1, dtype=np.uint64, out=runs[:, j])
        return runs.view(np.uint8).sum(axis=1, dtype=np.int64).astype(acc)

    def gain_sums(
        self, labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Workspace | None = None
    ) -> tuple[Array, Array]:
        """Per row ``(sum g, sum g^2)`` over the valid items, ``g = 2^y' - 1`` (``exp``) or
        ``g = y'``, ``y' = y`` where ``y >= t`` and 0 below (``t`` None: ``y' = y``), in
        ``dtype``. Masked items count 0 whatever they hold (NaN too)."""
        y = np.asarray(labels, dtype=dtype)
        if t is not None:
            y = np.where(y >= t, y, 0.0)
        with np.errstate(invalid="ignore", over="ignore"):
            g = np.exp2(y) - 1.0 if exp else y
        if valid is not None:
            g = np.where(valid, g, 0.0)
        return np.sum(g, axis=1).astype(dtype), np.sum(g * g, axis=1).astype(dtype)

    def gain_top(
        self, labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Workspace | None = None,
        positive: bool = False,
    ) -> tuple[Array, ...]:  # fmt: skip
        """:meth:`gain_sums` and, per row, the largest ``y'`` (masked items holding 0) and the
        number of items holding it (masked ones too where it is 0); with ``positive`` also the
        number of items with ``y' > 0``; in ``dtype``."""
        y = np.asarray(labels, dtype=dtype)
        if t is not None:
            y = np.where(y >= t, y, 0.0)
        if valid is not None:
            y = np.where(valid, y, 0.0)
        s1, s2 = self.gain_sums(y, exp, None, None, dtype, ws)
        most = np.max(y, axis=1) if y.shape[1] else np.zeros(y.shape[0], dtype=dtype)
        count = np.sum(y == most[:, None], axis=1).astype(dtype)
        out = (s1, s2, most.astype(dtype), count)
        return (*out, np.sum(y > 0, axis=1).astype(dtype)) if positive else out


def _packed_words(valid: Array) -> Array | None:
    """A bool ``(B, N)`` array's bytes as ``(B, N / 8)`` uint64 words (a view), or None where
    it is not C-contiguous bool with ``N`` a multiple of 8."""
    if (
        not isinstance(valid, np.ndarray) or valid.dtype != np.bool_ or valid.ndim != 2
        or valid.shape[1] % 8 or not valid.flags.c_contiguous or valid.size == 0
    ):  # fmt: skip
        return None
    try:
        return valid.view(np.uint8).view(np.uint64)
    except ValueError:
        return None


def first_keys(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """int64 keys ordering float32 (or float16) ``values`` descending, then ``index``
    ascending, as one descending order: each value's bits as an order-preserving int32
    (sign-magnitude to two's complement, -0.0 folded onto +0.0) in the high half, ``-index``
    below it (exact for indices under 2^32). No NaN among the values."""
    bits = (values.astype(np.float32) + np.float32(0.0)).view(np.int32)
    keys = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).astype(np.int64)
    del bits
    keys <<= 32
    keys -= index
    return keys
