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

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Ops, Workspace, numpy_ops
from rankstream.core.inputs import _describe, unpack_rank_inputs, unpack_ranking_inputs


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

    def masked_topk(self, x: Array, k: int, valid: Array, ws: Workspace | None = None) -> tuple[Array, Array]:
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

    def row_count(self, cond: Array, acc: Any, ws: Workspace | None = None) -> Array:
        return self.k.sum(self.k.cast(cond, self._dtype(acc)), axis=1)

    def compare_counts(
        self, s: Array, t: Array, acc: Any, need: tuple[bool, bool], ws: Workspace | None = None
    ) -> tuple[Array | None, Array | None]:
        tc = t[:, None]
        gt = self.row_count(self.k.greater(s, tc), acc) if need[0] else None
        ge = self.row_count(self.k.greater_equal(s, tc), acc) if need[1] else None
        return gt, ge

    def rank_counts(
        self,
        scores: Array,
        t: Array,
        acc: Any,
        need: tuple[bool, bool],
        keep: Array | None = None,
        drop: Array | None = None,
        rows: Array | None = None,
        ws: Workspace | None = None,
    ) -> tuple[Array | None, Array | None, Array]:
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
        return gt, ge, self.row_count(k.isnan(s), acc)

    def exclude(
        self, scores: Array, keep: Array | None, drop: Array | None = None, ws: Workspace | None = None
    ) -> Array:
        if keep is None:
            return self.k.where(drop, float("-inf"), scores)
        return self.k.where(keep, scores, float("-inf"))

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


# ------------------------------------------------------------------------------------------
# conversion of what a Keras user passes, and running kernel code inside a Keras step


def _dtype_name(x: Any) -> str:
    """The dtype of ``x`` as a name (``"float32"``, ``"complex64"``, ``"string"``, ...)."""
    if isinstance(x, (np.ndarray, np.generic)):
        return str(x.dtype)
    try:
        return _keras().backend.standardize_dtype(x.dtype)
    except Exception:  # a dtype Keras has no name for
        return str(getattr(x.dtype, "name", x.dtype))


def _is_number_dtype(name: str) -> bool:
    return name == "bool" or name.startswith(("int", "uint", "float", "bfloat"))


def checked_tensor(x: Any, name: str) -> Any:
    """``x`` as a tensor of the Keras backend, or a ``TypeError`` naming ``name`` for what a
    cast would silently corrupt: complex values (the imaginary part would be dropped), strings
    and objects, ragged python lists, and torch tensors on the ``meta`` device (no data:
    Keras would read uninitialised memory)."""
    if getattr(x, "is_meta", False) is True:
        raise TypeError(
            f"{name} is a torch tensor on the 'meta' device (shape {tuple(x.shape)}, no data); "
            "pass a tensor holding values (e.g. on the CPU or an accelerator)"
        )
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise TypeError(
                f"{name} must be a tensor or a rectangular array of numbers, got {_describe(x)}: {exc}"
            ) from exc
    dtype = _dtype_name(x)
    if "complex" in dtype:
        raise TypeError(
            f"{name} must hold real numbers, got complex dtype {dtype} (a cast would drop the "
            "imaginary part); pass the real part explicitly if that is what you mean"
        )
    if not _is_number_dtype(dtype):
        raise TypeError(f"{name} must hold numbers (bool, int or float), got dtype {dtype}: {_describe(x)}")
    return _k().convert_to_tensor(x)


def float64_numpy(x: Any) -> np.ndarray:
    """A tensor or variable as a float64 numpy array (a host read)."""
    k = _k()
    return np.asarray(k.convert_to_numpy(k.convert_to_tensor(x)), dtype=np.float64)


def symbolic() -> bool:
    """Whether Keras is only inferring shapes (``compute_output_spec``, as in the symbolic build
    of compiled metrics on every backend): there is no data then, and the state exists from
    construction, so an update adds nothing (binary labels could not be traced anyway)."""
    try:
        from keras.src.backend import in_symbolic_scope
    except ImportError:  # pragma: no cover - a Keras without it
        return False
    return bool(in_symbolic_scope())


def unconverted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run as plain Python inside a TensorFlow graph: AutoGraph would otherwise rewrite
    every function the kernel calls, its numpy code too (about 3 s to trace one update of
    ``RankBasedMetrics``, 0.2 s without); the kernels have no data-dependent Python control
    flow to convert."""
    if _keras().backend.backend() != "tensorflow":
        return fn
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def _keras() -> Any:
    import keras

    return keras


def _k() -> Any:
    import keras

    return keras.ops


STATE_DTYPES = ("float64", "float32")


def resolve_state_dtype(state_dtype: str | None) -> str:
    """The state dtype a metric gets: ``state_dtype``, or (None) float64 where the backend has
    it (not JAX without x64, not torch on MPS) and compensated float32 elsewhere. Asking for
    float64 where it is not available is an error, not a silent float32."""
    has64 = x64_enabled() and not (
        _keras().backend.backend() == "torch" and _k().zeros(()).device.type == "mps"
    )
    if state_dtype is None:
        return "float64" if has64 else "float32"
    if state_dtype not in STATE_DTYPES:
        raise ValueError(f"state_dtype must be 'float64', 'float32' or None, got {state_dtype!r}")
    if state_dtype == "float64" and not has64:
        raise ValueError(
            f"state_dtype='float64' is not available on the {_keras().backend.backend()} backend here "
            "(JAX needs jax_enable_x64, e.g. JAX_ENABLE_X64=1; torch's MPS has no float64); "
            "use state_dtype=None or 'float32' (compensated float32)"
        )
    return state_dtype


def read_sums(totals: list[Any], compensations: list[Any]) -> list[np.ndarray]:
    """Float64 numpy values of state variables, ``total - compensation`` when compensated
    (in float64: float32 would round the difference again)."""
    if not compensations:
        return [float64_numpy(t) for t in totals]
    return [float64_numpy(t) - float64_numpy(c) for t, c in zip(totals, compensations, strict=True)]


def write_sums(values: list[np.ndarray], totals: list[Any], compensations: list[Any]) -> None:
    """Assign float64 ``values`` to state variables; a float32 compensation keeps what the
    float32 rounding of each value lost."""
    for i, value in enumerate(values):
        total = value.astype(totals[i].dtype)
        totals[i].assign(total)
        if compensations:  # total - compensation: the float64 value, to float32's precision twice
            compensations[i].assign((total.astype(np.float64) - value).astype(totals[i].dtype))


def total_tensors(totals: list[Any], compensations: list[Any]) -> list[Any]:
    """State variables as tensors, ``total - compensation`` when compensated."""
    k = _k()
    if not compensations:
        return [k.convert_to_tensor(t) for t in totals]
    return [
        k.subtract(k.convert_to_tensor(t), k.convert_to_tensor(c))
        for t, c in zip(totals, compensations, strict=True)
    ]


def add_to(total: Any, x: Any, compensation: Any = None) -> None:
    """``total += x`` for a variable; with a float32 ``compensation`` variable, Kahan's
    compensated addition (the compensation keeps what the float32 addition lost)."""
    k = _k()
    x = k.cast(k.reshape(x, total.shape), total.dtype)
    if compensation is None:
        total.assign_add(x)
        return
    t = k.convert_to_tensor(total)
    y = k.subtract(x, compensation)
    new = k.add(t, y)
    compensation.assign(k.subtract(k.subtract(new, t), y))
    total.assign(new)


def keras_inputs(
    y_true: Any, y_pred: Any, sample_weight: Any, dtype: Any, ranks: bool
) -> tuple[Any, Any, Any, Any]:
    """A Keras metric's arguments as tensors of the backend (complex, string, ragged and
    ``meta`` inputs refused naming the argument; scores, weights and list labels cast to
    ``dtype``, a mask to bool) in the layout of the kernel's inputs: keras-rs's list layout
    (:func:`~rankstream.core.inputs.unpack_ranking_inputs`) or rank targets
    (:func:`~rankstream.core.inputs.unpack_rank_inputs`).

    Rank metrics with named sides take mappings ``{side: ...}`` for ``y_pred``, ``y_true`` (the
    same keys) and ``sample_weight`` (None or some of them): the result is then
    ``({side: {"y_pred", "y", "mask", "sample_weight"}}, None, None, None)``."""
    if ranks and isinstance(y_pred, Mapping):
        return _side_inputs(y_true, y_pred, sample_weight, dtype), None, None, None
    keras, k = _keras(), _k()
    labels = None if ranks else dtype

    def tensor(x: Any, dtype: Any, name: str) -> Any:
        if x is None:
            return None
        x = checked_tensor(x, name)
        if dtype == "bool":
            return x if keras.backend.standardize_dtype(x.dtype) == "bool" else k.not_equal(x, 0)
        return x if dtype is None else k.cast(x, dtype)

    if isinstance(y_true, Mapping):
        y_true = {
            key: tensor(value, "bool" if key == "mask" else labels, f'y_true["{key}"]')
            for key, value in y_true.items()
        }
    else:
        y_true = tensor(y_true, labels, "y_true")
    y_pred = tensor(y_pred, dtype, "y_pred")
    sample_weight = tensor(sample_weight, dtype, "sample_weight")
    unpack = unpack_rank_inputs if ranks else unpack_ranking_inputs
    return unpack(y_true, y_pred, sample_weight)


def _side_inputs(y_true: Any, y_pred: Mapping[str, Any], sample_weight: Any, dtype: Any) -> dict[str, Any]:
    """:func:`keras_inputs` of each side of a mapping of sides."""
    weights = {} if sample_weight is None else sample_weight
    if not isinstance(y_true, Mapping) or set(y_true) != set(y_pred) or not isinstance(weights, Mapping):
        got = sorted(y_true) if isinstance(y_true, Mapping) else type(y_true).__name__
        raise ValueError(
            f"y_pred is a mapping of sides {sorted(y_pred)}: y_true must be a mapping with the same "
            f"keys (got {got}) and sample_weight None or a mapping of sides (got {type(weights).__name__})"
        )
    keys = ("y_pred", "y", "mask", "sample_weight")
    return {
        side: dict(
            zip(keys, keras_inputs(y_true[side], y_pred[side], weights.get(side), dtype, True), strict=True)
        )
        for side in y_pred
    }


# The core names the labels ``y``; Keras calls them ``y_true``.
_CORE_Y = re.compile(r"\by\b")


def in_keras_terms(exc: Exception) -> Exception:
    """A core ``ValueError``/``TypeError`` with the argument named as the Keras user wrote it
    (``y`` -> ``y_true``), or ``exc`` itself."""
    if type(exc) not in (ValueError, TypeError) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return exc
    message = _CORE_Y.sub("y_true", exc.args[0])
    return exc if message == exc.args[0] else type(exc)(message)


def seed_generator(shuffle_ties: bool, seed: Any) -> Any:
    """The Keras ``SeedGenerator`` of shuffled ties (None without shuffling)."""
    keras = _keras()
    if not isinstance(shuffle_ties, bool):
        raise TypeError(f"shuffle_ties must be a bool, got {shuffle_ties!r}")
    if isinstance(seed, keras.random.SeedGenerator):
        return seed if shuffle_ties else None
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int, a keras.random.SeedGenerator or None, got {seed!r}")
    return keras.random.SeedGenerator(seed) if shuffle_ties else None


def serialize(value: Any) -> Any:
    """A metric setting as Keras config (callables serialized; a generator is not config)."""
    keras = _keras()
    if isinstance(value, keras.random.SeedGenerator):
        return None  # a generator is not config: a reloaded metric draws a fresh stream
    return keras.saving.serialize_keras_object(value) if callable(value) else value


def deserialize_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A metric's config with its serialized callables (gain, discount) deserialized."""
    de = _keras().saving.deserialize_keras_object
    return {k: de(v) if isinstance(v, dict) and "class_name" in v else v for k, v in config.items()}


def as_result(value: Any, dtype: Any, prefix: str = "") -> Any:
    """A kernel's selected value as a Keras ``result()``: a dict of scalars (``prefix`` on
    every key), a vector, or a scalar (a one-element vector too), cast to ``dtype``."""
    k = _k()
    if isinstance(value, Mapping):
        return {f"{prefix}{key}": k.cast(v, dtype) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        value = k.stack([k.convert_to_tensor(v) for v in value])
    if tuple(value.shape) == (1,):
        value = k.reshape(value, ())
    return k.cast(value, dtype)


def check_gain_args(gain_fn: Any, rank_discount_fn: Any, gain_names: tuple[str, ...]) -> None:
    """keras-rs's ``gain_fn`` (a callable or one of ``gain_names``) and ``rank_discount_fn``
    (a callable), else ``TypeError`` / ``ValueError`` naming the argument."""
    if not callable(rank_discount_fn):
        raise TypeError(f"rank_discount_fn must be a callable of the rank, got {rank_discount_fn!r}")
    if not (callable(gain_fn) or gain_fn in gain_names):
        kind = ValueError if isinstance(gain_fn, str) else TypeError
        raise kind(f"gain_fn must be a callable or one of {gain_names}, got {gain_fn!r}")


def list_metric_name(name: str | None, short: str, k: int | None) -> str:
    """A list metric's name: ``name``, else ``short@k`` (``short`` for the whole list), so a
    progress bar says what it shows."""
    if name is not None:
        return name
    return short if k is None else f"{short}@{k}"


def state_variables(
    metric: Any, fields: Mapping[str, Any], dtype: str, compensated: bool
) -> tuple[list, list]:
    """A metric's state: one zero ``aggregation="sum"`` variable per field, and (``compensated``)
    one ``<field>_compensation`` variable per field (else no compensation variables)."""
    add = metric.add_variable
    totals = [add(shape, "zeros", dtype, aggregation="sum", name=f) for f, shape in fields.items()]
    if not compensated:
        return totals, []
    names = [(f"{f}_compensation", shape) for f, shape in fields.items()]
    return totals, [add(shape, "zeros", dtype, aggregation="sum", name=f) for f, shape in names]


def batch_sums(kernel: Any, runtime: Any, gen: Any, y_pred: Any, *batch: Any) -> dict[str, Any] | None:
    """``kernel.batch_sums`` of one batch (an error names the arguments as Keras users write
    them), with the ``SeedGenerator`` ``gen`` rolled back when it raises or when the batch has
    no list (None then: nothing to add, and the random stream does not advance)."""
    seed_state = None if gen is None else _k().copy(gen.state.value)
    like = next(iter(y_pred.values()))["y_pred"] if isinstance(y_pred, Mapping) else y_pred
    try:
        ctx = runtime.context(like, keras_ops(like))
        sums = unconverted(kernel.batch_sums)(ctx, y_pred, *batch)
    except Exception as exc:
        if seed_state is not None:
            gen.state.assign(seed_state)
        renamed = in_keras_terms(exc)
        if renamed is exc:
            raise
        raise renamed from exc
    if like.shape[0] == 0 and not isinstance(y_pred, Mapping):
        if seed_state is not None:
            gen.state.assign(seed_state)
        return None
    return sums


def keras_rs_conventions(shuffle_ties: bool) -> dict[str, str]:
    """The list conventions of keras-rs: shuffled (or first-index) ties, per-item weights and
    list weights collapsed as ``get_list_weights`` does, labels below 0 (and NaN) as padding."""
    return {"ties": "random" if shuffle_ties else "first", "weighting": "keras_rs", "negative_labels": "mask"}
