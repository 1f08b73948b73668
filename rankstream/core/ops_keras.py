"""The kernels' array operations on ``keras.ops`` (the Keras adapter's backend).

One :class:`KerasOps` serves the three Keras backends:

* JAX and TensorFlow: every method is a ``keras.ops`` call. Their ``top_k`` returns the lower
  index first among equal values, so ``native_stable`` is set; ``topk`` selects zeros as +0.0
  (XLA's ``top_k`` ranks +0.0 above -0.0: equal floats must be ties, lower index first).
  TensorFlow's ``top_k`` puts NaN at a position-dependent place, so ``topk`` there selects
  with NaN read as +inf (NaN first, as torch and JAX rank it; the kernels' NaN check reads
  the first column).
* torch: Keras tensors are torch tensors, so the methods of :class:`~rankstream.core.ops.TorchOps`
  (faster on CPU: the scratch-buffer relevant count, the packed-key stable top-k) are used
  directly; only random numbers go through ``keras.random`` (a ``SeedGenerator``).

Tracing: under ``jax.jit``, a ``tf.function`` graph or ``torch.compile`` no value can be read
back. :func:`keras_ops` returns an instance with ``eager=False`` there, and ``can_read`` is
False, so the kernels take their no-read path (no tie re-rank by host branch, no NaN raise:
bad lists are counted into the state instead). Outside tracing, reading back is allowed only
for arrays on the CPU (elsewhere it would be a device sync).

``keras`` (and the backend library) is imported when an instance is made, never at module
import time, like the rest of the core.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.ops import NUMPY, Array, Ops, torch_ops

# TorchOps methods used as they are on the torch backend.
_TORCH_METHODS = (
    "acc_dtype",
    "asarray",
    "to_numpy",
    "cast",
    "arange",
    "zeros",
    "topk",
    "topk_first_packed",
    "stable_argsort_desc",
    "take_along",
    "take",
    "lookup",
    "set_rows",
    "nonzero",
    "cumsum",
    "sum",
    "where",
    "minimum",
    "maximum",
    "log2",
    "isnan",
    "any",
    "ones_bool",
    "count_relevant",
    "stack",
    "concat",
    "host_bools",
    "is_floating",
    "is_bool",
    "is_numeric",
    "dtype_name",
    "owns",
    "is_complex",
    "all",
    "isfinite",
)


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
        self.native_stable = self.backend in ("jax", "tensorflow")
        self._float = "float64" if x64_enabled() else "float32"
        if self.backend == "torch":
            torch = torch_ops()
            for method in _TORCH_METHODS:
                if hasattr(torch, method):
                    setattr(self, method, getattr(torch, method))
            self._torch = torch

    # -- reading back ------------------------------------------------------------------
    def can_read(self, x: Array) -> bool:
        if not self.eager or is_tracing(x):
            return False
        if self.backend == "torch":
            return self._torch.can_read(x)
        if self.backend == "jax":
            devices = x.devices() if hasattr(x, "devices") else ()
            return all(d.platform == "cpu" for d in devices)
        device = getattr(x, "device", "") or ""
        return "GPU" not in device and "TPU" not in device

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
        return False  # pragma: no cover - torch uses TorchOps.owns

    # -- creation / conversion -----------------------------------------------------------
    def _dtype(self, dtype: Any) -> Any:
        return None if dtype is None else self.keras.backend.standardize_dtype(dtype)

    def acc_dtype(self, x: Array) -> Any:
        return self._float

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
            return self.k.top_k(x, k, sorted=True)
        # Equal floats are ties on every backend (lower index first): XLA's top_k (JAX, and
        # TensorFlow with jit_compile) orders +0.0 above -0.0, so zeros are selected as +0.0
        # (a `where`, not `x + 0.0`, which XLA simplifies away).
        key = self.k.where(self.k.equal(x, 0.0), self.k.zeros_like(x), x)
        if self.backend == "tensorflow":
            # TF's top_k places NaN anywhere (it depends on the position); the kernels want
            # NaN first, as torch and JAX rank it, so the selection sees NaN as +inf.
            key = self.k.where(self.k.isnan(x), float("inf"), key)
        vals, idx = self.k.top_k(key, k, sorted=True)
        if self.backend == "tensorflow":
            vals = self.k.take_along_axis(x, idx, axis=-1)
        return vals, idx

    def stable_argsort_desc(self, keys: list[Array]) -> Array:
        # Only called on the eager read-back path (rows showing a tie), so numpy is fine.
        order = NUMPY.stable_argsort_desc([self.to_numpy(key) for key in keys])
        return self.k.convert_to_tensor(order.astype(np.int32))

    def take_along(self, x: Array, idx: Array) -> Array:
        return self.k.take_along_axis(x, idx, axis=-1)

    def take(self, x: Array, idx: Array, axis: int) -> Array:
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

    # -- arithmetic ----------------------------------------------------------------------
    def cumsum(self, x: Array, axis: int = -1) -> Array:
        return self.k.cumsum(x, axis=axis)

    def sum(self, x: Array, axis: Any = None) -> Array:
        return self.k.sum(x, axis=axis)

    def where(self, c: Array, a: Any, b: Any) -> Array:
        return self.k.where(c, a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        return self.k.minimum(a, b)

    def maximum(self, a: Any, b: Any) -> Array:
        return self.k.maximum(a, b)

    def log2(self, x: Array) -> Array:
        return self.k.log2(x)

    def isnan(self, x: Array) -> Array:
        return self.k.isnan(x)

    def any(self, x: Array, axis: Any = None) -> Array:
        return self.k.any(x, axis=axis)

    def all(self, x: Array, axis: Any = None) -> Array:
        return self.k.all(x, axis=axis)

    def isfinite(self, x: Array) -> Array:
        return self.k.isfinite(x)

    def count_relevant(
        self, labels: Array, threshold: float, strict: bool, valid: Array | None, dtype: Any
    ) -> Array:
        rel = labels > threshold if strict else labels >= threshold
        if valid is not None:
            rel = self.k.logical_and(rel, valid)
        return self.k.sum(self.k.cast(rel, self._dtype(dtype)), axis=-1)

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return self.k.stack(xs, axis=axis)

    def concat(self, xs: list[Array], axis: int = 0) -> Array:
        return self.k.concatenate(xs, axis=axis)

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


_CACHE: dict[bool, KerasOps] = {}


def keras_ops(like: Array = None) -> KerasOps:
    """The ops for the current Keras backend, with ``eager=False`` while tracing ``like``."""
    eager = not is_tracing(like)
    ops = _CACHE.get(eager)
    if ops is None or ops.backend != _backend():
        ops = _CACHE[eager] = KerasOps(eager=eager)
    return ops


def _backend() -> str:
    import keras

    return keras.backend.backend()
