"""Keras backend: ``keras.ops`` for JAX and TensorFlow; Keras on torch hands torch tensors
to the torch backend (:class:`KerasTorchOps`, with Keras' random numbers).

* JAX and TensorFlow: every method is a ``keras.ops`` call. Their ``top_k`` returns the lower
  index first among equal values (``native_stable``). TensorFlow's ``top_k`` puts NaN at a
  position-dependent place, so ``topk`` there selects with NaN read as +inf (NaN first, as
  torch and JAX rank it; the kernels' NaN check reads the first column). XLA orders +0.0
  above -0.0, so zeros are selected as +0.0 (equal floats are ties on every backend).
* Tracing: under ``jax.jit``, a ``tf.function`` graph or ``torch.compile`` no value can be
  read back. :func:`keras_ops` returns an instance with ``eager=False`` there, and
  ``can_read`` is False, so the kernels take their no-read path. Outside tracing, reading
  back is allowed only for arrays on the CPU (elsewhere it would be a device sync).

``keras`` (and the backend library) is imported when an instance is made, never at module
import time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends import numpy_ops
from rankstream.core.backends.protocol import Array, Ops, Workspace


def is_tracing(x: Any = None) -> bool:
    """Whether the current Keras backend is tracing (``x`` a tensor of the computation)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return isinstance(x, jax.core.Tracer)
    if backend == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    if backend == "torch":
        import torch

        return bool(torch.compiler.is_compiling())
    return False


def x64_enabled() -> bool:
    """Whether the backend computes in float64 (JAX only with ``jax_enable_x64``)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return bool(jax.config.jax_enable_x64)
    return True


class KerasOps(Ops):
    """``keras.ops`` implementation of the kernels' operations (see the module docstring)."""

    name = "keras"

    def __init__(self, eager: bool = True) -> None:
        import keras

        self.keras = keras
        self.k = keras.ops
        self.backend = keras.backend.backend()
        self.eager = eager
        self.native_stable = True  # JAX's and TensorFlow's top_k: lower index first
        self._float = "float64" if x64_enabled() else "float32"

    @property
    def xp(self) -> Any:  # type: ignore[override]
        """``keras.ops``: the elementwise namespace of ``compute``."""
        return self.k

    # -- reading back ------------------------------------------------------------------
    def can_read(self, x: Array) -> bool:
        if not self.eager or is_tracing(x):
            return False
        if self.backend == "jax":
            devices = x.devices() if hasattr(x, "devices") else ()
            return all(d.platform == "cpu" for d in devices)
        device = getattr(x, "device", "") or ""
        return "GPU" not in device and "TPU" not in device

    def host(self, arrays: tuple[Any, ...]) -> Ops:
        # JAX and TensorFlow: eager Keras metrics run small batches seldom enough (a compiled
        # step is the common path) that a numpy detour is not worth a second code path
        return self

    def export(self, x: Array) -> Array:
        return x

    def host_bools(self, x: Array) -> list[bool]:
        return [bool(v) for v in np.asarray(self.k.convert_to_numpy(x)).reshape(-1)]

    def to_numpy(self, x: Array) -> np.ndarray:
        return np.asarray(self.k.convert_to_numpy(x))

    def owns(self, x: Any) -> bool:
        """Whether ``x`` is a tensor of the Keras backend (or a Keras variable)."""
        if isinstance(x, self.keras.Variable):
            return True
        if self.backend == "jax":
            import jax

            return isinstance(x, jax.Array)
        if self.backend == "tensorflow":
            import tensorflow as tf

            return bool(tf.is_tensor(x))
        return False  # pragma: no cover - only JAX and TensorFlow reach here

    # -- creation / conversion -----------------------------------------------------------
    def _dtype(self, dtype: Any) -> Any:
        return None if dtype is None else self.keras.backend.standardize_dtype(dtype)

    def acc_dtype(self, x: Array) -> Any:
        return self._float

    def int_dtype(self) -> Any:
        return "int32"  # JAX has no int64 without x64; indices stay far below 2^31

    def reshape(self, x: Array, shape: tuple[int, ...]) -> Array:
        return self.k.reshape(x, shape)

    def asarray(self, x: Any, like: Array = None, dtype: Any = None) -> Array:
        return self.k.convert_to_tensor(x, dtype=self._dtype(dtype))

    def cast(self, x: Array, dtype: Any) -> Array:
        return self.k.cast(x, self._dtype(dtype))

    def arange(self, start: int, stop: int, like: Array, dtype: Any) -> Array:
        return self.k.arange(start, stop, dtype=self._dtype(dtype))

    def zeros(self, shape: tuple[Any, ...], like: Array, dtype: Any) -> Array:
        if any(d is None for d in shape):  # an unknown (graph) batch axis: take it from `like`
            dyn = self.k.shape(like)
            shape = tuple(dyn[i] if d is None else d for i, d in enumerate(shape))
        return self.k.zeros(shape, dtype=self._dtype(dtype))

    def ones_bool(self, like: Array) -> Array:
        return self.k.ones_like(like, dtype="bool")

    # -- selection -----------------------------------------------------------------------
    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        if not self.is_floating(x):
            return self._kept(self.k.top_k(x, k, sorted=True))
        # Equal floats are ties on every backend (lower index first): XLA's top_k (JAX, and
        # TensorFlow with jit_compile) orders +0.0 above -0.0, so zeros are selected as +0.0
        # (a `where`, not `x + 0.0`, which XLA simplifies away).
        key = self.k.where(self.k.equal(x, 0.0), self.k.zeros_like(x), x)
        if self.backend == "tensorflow":
            # TF's top_k places NaN anywhere (it depends on the position); the kernels want
            # NaN first, as torch and JAX rank it, so the selection sees NaN as +inf.
            key = self.k.where(self.k.isnan(x), float("inf"), key)
        vals, idx = self._kept(self.k.top_k(key, k, sorted=True))
        if self.backend == "tensorflow":
            vals = self.k.take_along_axis(x, idx, axis=-1)
        return vals, idx

    def _kept(self, top: tuple[Array, Array]) -> tuple[Array, Array]:
        """``top_k``'s outputs behind an optimisation barrier on JAX. XLA on the CPU lowers a
        top-k to its fast TopK kernel only when every use of the values and indices reads all
        ``k`` columns; a narrower slice (the NaN check's first column) is folded into the
        selection and turns it into a full stable sort of every row (measured: 75 ms instead
        of 1.6 ms for 512 x 1,000 at k=10). The barrier keeps such slices out of the pattern."""
        if self.backend != "jax":
            return top
        import jax

        return tuple(jax.lax.optimization_barrier(tuple(top)))

    def masked_topk(
        self, x: Array, k: int, valid: Array, ws: Workspace | None = None, cap: int | None = None
    ) -> tuple[Array, Array]:
        """``topk`` of ``x`` with ``-inf`` where ``valid`` is False."""
        return self.topk(self.k.where(valid, x, float("-inf")), k)

    def topk_first(self, scores: Array, k: int, valid: Array | None) -> tuple[Array, Array]:
        """``topk`` is stable already (lower index first): masked items get -inf (a valid item
        scored -inf may then rank after a masked one: both are -inf)."""
        if valid is not None:
            scores = self.k.where(valid, scores, float("-inf"))
        vals, idx = self.topk(scores, k)
        return idx, self.k.isnan(vals[:, 0])

    def stable_argsort_desc(self, keys: list[Array]) -> Array:
        # Only called on the eager read-back path (rows showing a tie), so numpy is fine.
        order = numpy_ops().stable_argsort_desc([self.to_numpy(key) for key in keys])
        return self.k.convert_to_tensor(order.astype(np.int32))

    def order_first(self, values: Array, index: Array) -> Array:
        # as stable_argsort_desc: only on the eager read-back path (rows showing a tie)
        order = numpy_ops().order_first(self.to_numpy(values), self.to_numpy(index))
        return self.k.convert_to_tensor(order.astype(np.int32))

    def take_along(self, x: Array, idx: Array) -> Array:
        return self.k.take_along_axis(x, idx, axis=-1)

    def take(self, x: Array, idx: Array, axis: int, ws: Workspace | None = None) -> Array:
        return self.k.take(x, idx, axis=axis)

    def lookup(self, table: Array, idx: Array) -> Array:
        return self.k.take(table, idx)

    def set_rows(self, x: Array, rows: Array, values: Array) -> Array:
        rows = self.k.cast(rows, "int32")[:, None]
        return self.k.scatter_update(x, rows, self.k.cast(values, x.dtype))

    def nonzero(self, x: Array) -> Array:
        return self.k.nonzero(x)[0]

    def randperm(self, n: int, like: Array, generator: Any) -> Array:
        """A uniformly random permutation of ``0..n-1``; ``generator`` a Keras
        ``SeedGenerator`` (works under ``jit``), an int seed or None."""
        return self.k.argsort(self.keras.random.uniform((n,), seed=generator))

    def generator(self, seed: Any) -> Any:
        return self.keras.random.SeedGenerator(seed)

    # -- arithmetic ----------------------------------------------------------------------
    def cumsum(self, x: Array, axis: int = -1) -> Array:
        return self.k.cumsum(x, axis=axis)

    def matmul(self, a: Array, b: Array) -> Array:
        return self.k.matmul(a, b)

    def exp2(self, x: Array) -> Array:
        # not keras.ops.exp2: on TensorFlow it takes 2 as float32 whatever x's dtype (float64 fails)
        return 2.0**x

    def sum(self, x: Array, axis: Any = None) -> Array:
        return self.k.sum(x, axis=axis)

    def row_sums(self, x: Array) -> Array:
        return self.k.sum(x, axis=1)

    def masked_row_sums(self, x: Array, valid: Array, ws: Workspace | None = None) -> Array:
        """Per row, the sum of ``x`` over the items where ``valid`` is True."""
        return self.k.sum(self.k.where(valid, x, self.k.zeros_like(x)), axis=1)

    def where(self, c: Array, a: Any, b: Any) -> Array:
        return self.k.where(c, a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        return self.k.minimum(a, b)

    def maximum(self, a: Any, b: Any) -> Array:
        return self.k.maximum(a, b)

    def log(self, x: Array) -> Array:
        return self.k.log(x)

    def log2(self, x: Array) -> Array:
        return self.k.log2(x)

    def isnan(self, x: Array) -> Array:
        return self.k.isnan(x)

    def any(self, x: Array, axis: Any = None) -> Array:
        return self.k.any(x, axis=axis)

    def all(self, x: Array, axis: Any = None) -> Array:
        return self.k.all(x, axis=axis)

    def amin(self, x: Array) -> Array:
        return self.k.min(x)

    def isfinite(self, x: Array) -> Array:
        return self.k.isfinite(x)

    def and_not(self, a: Array, b: Array) -> Array:
        return self.k.logical_and(a, self.k.logical_not(b))

    def count_relevant(
        self, labels: Array, t: float, strict: bool, valid: Any, dtype: Any, ws: Any = None
    ) -> Array:
        rel = labels > t if strict else labels >= t
        if valid is not None:
            rel = self.k.logical_and(rel, valid)
        return self.k.sum(self.k.cast(rel, self._dtype(dtype)), axis=-1)

    def count_and_max(
        self, labels: Array, t: float, strict: bool, valid: Any, dtype: Any, ws: Any = None
    ) -> tuple[Array, Array]:
        return self.count_relevant(labels, t, strict, valid, dtype, ws), self.k.max(labels, axis=-1)

    def count_equal(self, labels: Array, t: float, valid: Any, dtype: Any, ws: Any = None) -> Array:
        eq = labels == t
        if valid is not None:
            eq = self.k.logical_and(eq, valid)
        return self.k.sum(self.k.cast(eq, self._dtype(dtype)), axis=-1)

    def row_count(self, cond: Array, acc: Any, ws: Workspace | None = None) -> Array:
        return self.k.sum(self.k.cast(cond, self._dtype(acc)), axis=1)

    def compare_counts(
        self, s: Array, t: Array, acc: Any, need: tuple[bool, bool], ws: Workspace | None = None
    ) -> tuple[Array | None, Array | None]:
        tc = t[:, None]
        gt = self.row_count(self.k.greater(s, tc), acc) if need[0] else None
        ge = self.row_count(self.k.greater_equal(s, tc), acc) if need[1] else None
        return gt, ge

    def rank_counts(self, scores: Array, t: Array, acc: Any, need: tuple[bool, bool],
                    keep: Array | None = None, drop: Array | None = None, rows: Array | None = None,
                    ws: Workspace | None = None,
                    nan: bool = True) -> tuple[Array | None, Array | None, Array | None]:  # fmt: skip
        """As :meth:`rankstream.core.backends.numpy.NumpyOps.rank_counts`, in whole-array
        ``keras.ops`` (traceable; XLA fuses the passes)."""
        k = self.k
        if rows is not None:
            scores = k.take(scores, rows, axis=0)
            keep = None if keep is None else k.take(keep, rows, axis=0)
            drop = None if drop is None else k.take(drop, rows, axis=0)
        s = scores if keep is None else self.exclude(scores, keep)
        s = s if drop is None else self.exclude(s, None, drop)
        gt, ge = self.compare_counts(s, t, acc, need)
        return gt, ge, self.row_count(k.isnan(s), acc) if nan else None

    def exclude(
        self, scores: Array, keep: Array | None, drop: Array | None = None, ws: Workspace | None = None
    ) -> Array:
        if keep is None:
            return self.k.where(drop, float("-inf"), scores)
        return self.k.where(keep, scores, float("-inf"))

    # -- tie groups -----------------------------------------------------------------------
    def run_bounds(self, new: Array) -> tuple[Array, Array]:
        """See :meth:`rankstream.core.backends.numpy.NumpyOps.run_bounds`. A cumulative max
        (and min) by doubling: ``ceil(log2 K)`` shifted ``maximum`` passes over the small
        ``(B, K)`` array, static shapes (it traces; ``keras.ops`` has no cumulative max)."""
        k = self.k
        width = int(new.shape[1])
        pos = k.arange(width, dtype="int32")[None, :]
        start = k.where(new, pos, 0)
        last = k.concatenate([new[:, 1:], k.ones_like(new[:, :1])], axis=1)
        end = k.where(last, pos, width - 1)
        step = 1
        while step < width:
            start = k.maximum(start, k.pad(start[:, :-step], ((0, 0), (step, 0))))
            end = k.minimum(end, k.pad(end[:, step:], ((0, 0), (0, step)), constant_values=width - 1))
            step *= 2
        return start, end

    def tie_sums(
        self, scores: Array, v: Array, valid: Array | None, items: list[Array | None], fn: Any,
        acc: Any, ws: Workspace | None = None, rows: Array | None = None,
    ) -> tuple[Array, Array | None]:  # fmt: skip
        """See :meth:`rankstream.core.backends.numpy.NumpyOps.tie_sums`: whole-array
        ``keras.ops`` (XLA fuses the comparison, ``fn`` and the sums under ``jit``)."""
        k, dt = self.k, self._dtype(acc)
        if rows is not None:
            scores = k.take(scores, rows, axis=0)
            valid = None if valid is None else k.take(valid, rows, axis=0)
            items = [None if it is None else k.take(it, rows, axis=0) for it in items]
        tie = k.equal(scores, v[:, None])
        if valid is not None:
            tie = k.logical_and(tie, valid)
        count = k.sum(k.cast(tie, dt), axis=1)
        if fn is None:
            return count, None
        x = k.cast(fn(*items), dt)
        return count, k.sum(k.where(tie, x, k.zeros_like(x)), axis=1)

    def bincount(self, keys: Array, weights: Array, length: int) -> Array:
        """``(length,)``: per key the sum of ``weights`` ``(M,)`` at the integer ``keys``
        ``(M,)`` (each within range): ``segment_sum`` with the static length, so it traces."""
        return self.k.segment_sum(weights, self.k.cast(keys, "int32"), num_segments=length)

    def histogram(self, values: Array, weights: Array, edges: Array) -> Array:
        """``(T, H)``: per row of ``values`` ``(T, n)`` and bin ``i``, the sum of ``weights``
        ``(n,)`` with values in ``[edges[i], edges[i + 1])`` (the outer bins open-ended): static
        shapes, so it traces."""
        k = self.k
        rows, size = int(values.shape[0]), int(edges.shape[0])
        v = k.reshape(k.cast(values, edges.dtype), (-1,))
        idx = k.reshape(k.clip(k.searchsorted(edges, v, side="right") - 1, 0, size - 1), (rows, -1))
        idx = k.cast(idx, "int32") + k.arange(rows, dtype="int32")[:, None] * size
        w = k.reshape(k.broadcast_to(weights[None, :], k.shape(idx)), (-1,))
        out = k.segment_sum(w, k.reshape(idx, (-1,)), num_segments=rows * size)
        return k.reshape(out, (rows, size))

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return self.k.stack(xs, axis=axis)

    def concat(self, xs: list[Array], axis: int = 0) -> Array:
        return self.k.concatenate(xs, axis=axis)

    def ravel_concat(self, xs: list[Array]) -> Array:
        return self.k.concatenate([self.k.reshape(x, (-1,)) for x in xs])

    # -- dtypes --------------------------------------------------------------------------
    def dtype_name(self, x: Array) -> str:
        return self.keras.backend.standardize_dtype(x.dtype)

    def is_floating(self, x: Array) -> bool:
        return "float" in self.dtype_name(x)

    def is_bool(self, x: Array) -> bool:
        return self.dtype_name(x) == "bool"

    def is_numeric(self, x: Array) -> bool:
        name = self.dtype_name(x)
        return name == "bool" or "int" in name or "float" in name

    def is_complex(self, x: Array) -> bool:
        return "complex" in self.dtype_name(x)

    def valid_counts(self, valid: Array, acc: Any, ws: Workspace | None = None) -> Array:
        """Per row, the number of True entries of a ``(B, N)`` bool mask (:meth:`row_count`)."""
        return self.row_count(valid, acc, ws)

    def gain_sums(
        self, labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Workspace | None = None
    ) -> tuple[Array, Array]:
        """Per row ``(sum g, sum g^2)`` over the valid items, ``g = 2^y' - 1`` (``exp``) or
        ``g = y'``, ``y' = y`` where ``y >= t`` and 0 below (``t`` None: ``y' = y``), in whole
        arrays (traceable)."""
        k = self.k
        y = k.cast(labels, self._dtype(dtype))
        if t is not None:
            y = k.where(y >= t, y, 0.0)
        g = self.exp2(y) - 1.0 if exp else y
        if valid is not None:
            g = k.where(valid, g, 0.0)
        return k.sum(g, axis=1), k.sum(g * g, axis=1)

    def gain_top(
        self, labels: Array, exp: bool, t: float | None, valid: Any, dtype: Any, ws: Workspace | None = None,
        positive: bool = False,
    ) -> tuple[Array, ...]:  # fmt: skip
        """:meth:`gain_sums` and, per row, the largest ``y'`` (masked items holding 0) and the
        number of items holding it (masked ones too where it is 0); with ``positive`` also the
        number of items with ``y' > 0``; in whole arrays."""
        k = self.k
        y = k.cast(labels, self._dtype(dtype))
        if t is not None:
            y = k.where(y >= t, y, 0.0)
        if valid is not None:
            y = k.where(valid, y, 0.0)
        s1, s2 = self.gain_sums(y, exp, None, None, dtype, ws)
        most = k.max(y, axis=1)
        count = k.sum(k.cast(k.equal(y, most[:, None]), y.dtype), axis=1)
        out = (s1, s2, most, count)
        return (*out, k.sum(k.cast(y > 0, y.dtype), axis=1)) if positive else out


def _keras_torch_ops() -> type:
    from rankstream.core.backends.torch import TorchOps

    class KerasTorchOps(TorchOps):
        """Keras on torch: the torch backend (Keras tensors are torch tensors), with random
        numbers from a Keras ``SeedGenerator`` (its state is a tracked variable) and no read
        back while ``torch.compile`` traces."""

        name = "keras"
        backend = "torch"

        def __init__(self, eager: bool = True) -> None:
            import keras

            self.keras = keras
            self.eager = eager

        @property
        def xp(self) -> Any:  # type: ignore[override]
            return self.keras.ops

        def can_read(self, x: Array) -> bool:
            return self.eager and not is_tracing(x) and super().can_read(x)

        def randperm(self, n: int, like: Array, generator: Any) -> Array:
            k = self.keras.ops
            return k.argsort(self.keras.random.uniform((n,), seed=generator)).to(like.device)

        def generator(self, seed: Any) -> Any:
            return self.keras.random.SeedGenerator(seed)

    return KerasTorchOps


_CACHE: dict[tuple[str, bool], Ops] = {}


def keras_ops(like: Array = None) -> Ops:
    """The ops for the current Keras backend, with ``eager=False`` while tracing ``like``."""
    import keras

    backend = keras.backend.backend()
    eager = not is_tracing(like)
    ops = _CACHE.get((backend, eager))
    if ops is None:
        cls = _keras_torch_ops() if backend == "torch" else KerasOps
        ops = _CACHE[(backend, eager)] = cls(eager=eager)
    return ops
