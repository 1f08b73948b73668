"""The few array operations the kernels need, for numpy, torch and keras.ops.

Kernels are written once against :class:`Ops`; each backend maps these methods onto its
own library. Nothing here imports torch or keras at module import time: :func:`get_ops`
looks at the array it is given and imports lazily.

Conventions shared by every backend:

* ``topk(x, k)`` works on the last axis and returns ``(values, indices)`` sorted by value,
  largest first. ``native_stable`` says whether equal values come out lowest index first
  (JAX's and TensorFlow's top-k promise this; torch's and numpy's do not).
* ``eager`` says whether a value can be read back on the host (to raise an error or take a
  data-dependent branch). Under ``jit`` tracing it is ``False`` and the kernels skip those
  branches.
* ``acc_dtype`` is the float type the per-list arithmetic and the state use: float64 where
  the backend and device support it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any


class Ops:
    """Interface: one instance per backend (and accumulation dtype)."""

    name = "abstract"
    native_stable = False
    eager = True

    def can_read(self, x: Array) -> bool:
        """Whether reading a value of ``x`` back on the host is cheap (no device sync) and
        possible (not tracing). Kernels raise on bad data right away when it is; otherwise
        they count it into the state and ``compute()`` raises."""
        return self.eager

    def owns(self, x: Any) -> bool:
        """Whether ``x`` is already an array of this backend (others are converted)."""
        return True

    def is_complex(self, x: Array) -> bool:
        return "complex" in self.dtype_name(x)

    def all(self, x: Array) -> Array:
        return ~self.any(~x)

    def isfinite(self, x: Array) -> Array:
        return ~(self.isnan(x) | (x == float("inf")) | (x == float("-inf")))

    # -- creation / conversion -------------------------------------------------------
    def acc_dtype(self, x: Array) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def asarray(self, x: Any, like: Array, dtype: Any = None) -> Array:  # pragma: no cover
        raise NotImplementedError

    def to_numpy(self, x: Array) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class NumpyOps(Ops):
    """numpy backend (float64 everywhere); used by the functional API and the plain state."""

    name = "numpy"

    def acc_dtype(self, x: Array) -> Any:
        return np.float64

    def owns(self, x: Any) -> bool:
        return isinstance(x, (np.ndarray, np.generic))

    def is_complex(self, x: Array) -> bool:
        return np.asarray(x).dtype.kind == "c"

    def all(self, x: Array) -> Array:
        return np.all(x)

    def isfinite(self, x: Array) -> Array:
        return np.isfinite(x)

    def asarray(self, x: Any, like: Array = None, dtype: Any = None) -> Array:
        return np.asarray(x, dtype=dtype)

    def to_numpy(self, x: Array) -> np.ndarray:
        return np.asarray(x)

    def cast(self, x: Array, dtype: Any) -> Array:
        return np.asarray(x).astype(dtype, copy=False)

    def arange(self, start: int, stop: int, like: Array, dtype: Any) -> Array:
        return np.arange(start, stop, dtype=dtype)

    def zeros(self, shape: tuple[int, ...], like: Array, dtype: Any) -> Array:
        return np.zeros(shape, dtype=dtype)

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

    def stable_argsort_desc(self, keys: list[Array]) -> Array:
        """Row-wise argsort by ``keys[0]`` descending, ties by ``keys[1]`` descending, ...
        then by index ascending."""
        # np.lexsort sorts ascending by the last key first.
        cols = [-k for k in reversed(keys)]
        out = np.empty(keys[0].shape, dtype=np.int64)
        for i in range(keys[0].shape[0]):
            out[i] = np.lexsort([c[i] for c in cols])
        return out

    def take_along(self, x: Array, idx: Array) -> Array:
        return np.take_along_axis(x, idx, -1)

    def take(self, x: Array, idx: Array, axis: int) -> Array:
        return np.take(x, idx, axis=axis)

    def lookup(self, table: Array, idx: Array) -> Array:
        """``table[idx]`` for a 1-D table and an index array of any shape."""
        return table[idx]

    def set_rows(self, x: Array, rows: Array, values: Array) -> Array:
        x = x.copy()
        x[rows] = values
        return x

    def nonzero(self, x: Array) -> Array:
        return np.nonzero(x)[0]

    def cumsum(self, x: Array, axis: int = -1) -> Array:
        return np.cumsum(x, axis=axis)

    def sum(self, x: Array, axis: Any = None) -> Array:
        return np.sum(x, axis=axis)

    def where(self, c: Array, a: Any, b: Any) -> Array:
        return np.where(c, a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        return np.minimum(a, b)

    def maximum(self, a: Any, b: Any) -> Array:
        return np.maximum(a, b)

    def log2(self, x: Array) -> Array:
        return np.log2(x)

    def isnan(self, x: Array) -> Array:
        return np.isnan(x)

    def any(self, x: Array, axis: Any = None) -> Array:
        return np.any(x, axis=axis)

    def ones_bool(self, like: Array) -> Array:
        return np.ones(like.shape, dtype=bool)

    def count_relevant(
        self, labels: Array, threshold: float, strict: bool, valid: Array | None, dtype: Any
    ) -> Array:
        """Per row, the number of valid items with ``label > threshold`` (``strict``) or
        ``label >= threshold``."""
        rel = labels > threshold if strict else labels >= threshold
        if valid is not None:
            rel = rel & valid
        return np.sum(rel, axis=-1).astype(dtype)

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return np.stack(xs, axis=axis)

    def concat(self, xs: list[Array], axis: int = 0) -> Array:
        return np.concatenate(xs, axis=axis)

    def host_bools(self, x: Array) -> list[bool]:
        return [bool(v) for v in np.asarray(x).reshape(-1)]

    def randperm(self, n: int, like: Array, generator: Any) -> Array:
        rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
        return rng.permutation(n)

    def is_floating(self, x: Array) -> bool:
        return np.issubdtype(np.asarray(x).dtype, np.floating)

    def is_bool(self, x: Array) -> bool:
        return np.asarray(x).dtype == np.bool_

    def is_numeric(self, x: Array) -> bool:
        dt = np.asarray(x).dtype
        return (np.issubdtype(dt, np.number) and dt.kind != "c") or dt == np.bool_

    def dtype_name(self, x: Array) -> str:
        return str(np.asarray(x).dtype)


class TorchOps(NumpyOps):
    """torch backend: everything stays on the input's device; float64 accumulation except
    on devices without float64 (MPS), where float32 is used."""

    name = "torch"

    def __init__(self) -> None:
        import threading

        import torch

        self.torch = torch
        self._local = threading.local()

    def acc_dtype(self, x: Array) -> Any:
        dev = getattr(x, "device", None)
        if dev is not None and dev.type == "mps":
            return self.torch.float32
        return self.torch.float64

    def can_read(self, x: Array) -> bool:
        return getattr(x, "device", None) is None or x.device.type == "cpu"

    def owns(self, x: Any) -> bool:
        return isinstance(x, self.torch.Tensor)

    def is_complex(self, x: Array) -> bool:
        return bool(x.is_complex())

    def all(self, x: Array) -> Array:
        return self.torch.all(x)

    def isfinite(self, x: Array) -> Array:
        return self.torch.isfinite(x)

    def topk_first_packed(self, scores: Array, k: int, valid: Array | None) -> tuple[Array, Array] | None:
        """Exact top-``k`` with ties broken by index (earlier first) and masked items last,
        in ONE ``topk`` and no host read: each score is mapped to an order-preserving int32
        (sign-magnitude to two's complement, with -0.0 folded onto +0.0) and packed with the
        inverted column index into an int64 key. Returns ``(indices, nan_rows)``; NaN maps
        above +inf, as ``torch.topk`` orders it. ``None`` when the scores are not a float
        type of at most 32 bits (float64 keeps the read-back path)."""
        torch = self.torch
        if scores.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return None
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

    def asarray(self, x: Any, like: Array = None, dtype: Any = None) -> Array:
        device = like.device if like is not None and hasattr(like, "device") else None
        if isinstance(x, np.ndarray) and x.dtype == np.bool_:
            return self.torch.as_tensor(x.copy(), device=device)
        if isinstance(dtype, type) and issubclass(dtype, np.generic):
            dtype = {np.float64: self.torch.float64, np.float32: self.torch.float32}[dtype]
        return self.torch.as_tensor(x, dtype=dtype, device=device)

    def to_numpy(self, x: Array) -> np.ndarray:
        if isinstance(x, self.torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x)

    def cast(self, x: Array, dtype: Any) -> Array:
        return x.to(dtype)

    def arange(self, start: int, stop: int, like: Array, dtype: Any) -> Array:
        return self.torch.arange(start, stop, device=like.device, dtype=dtype)

    def zeros(self, shape: tuple[int, ...], like: Array, dtype: Any) -> Array:
        return self.torch.zeros(shape, device=like.device, dtype=dtype)

    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        return self.torch.topk(x, k, dim=-1, largest=True, sorted=True)

    def stable_argsort_desc(self, keys: list[Array]) -> Array:
        torch = self.torch
        # Sort by the least significant key first; stable sorts keep the earlier order
        # (and so the index order) among equal values.
        order = None
        for key in reversed(keys):
            k = key if order is None else torch.gather(key, -1, order)
            o = torch.sort(k, dim=-1, descending=True, stable=True).indices
            order = o if order is None else torch.gather(order, -1, o)
        return order

    def take_along(self, x: Array, idx: Array) -> Array:
        return self.torch.gather(x, -1, idx)

    def take(self, x: Array, idx: Array, axis: int) -> Array:
        return self.torch.index_select(x, axis, idx)

    def set_rows(self, x: Array, rows: Array, values: Array) -> Array:
        x = x.clone()
        x[rows] = values
        return x

    def nonzero(self, x: Array) -> Array:
        return self.torch.nonzero(x, as_tuple=True)[0]

    def cumsum(self, x: Array, axis: int = -1) -> Array:
        return self.torch.cumsum(x, dim=axis)

    def sum(self, x: Array, axis: Any = None) -> Array:
        return self.torch.sum(x) if axis is None else self.torch.sum(x, dim=axis)

    def where(self, c: Array, a: Any, b: Any) -> Array:
        return self.torch.where(c, a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        torch = self.torch
        if not isinstance(b, torch.Tensor):
            return torch.clamp(a, max=b)
        if not isinstance(a, torch.Tensor):
            return torch.clamp(b, max=a)
        return torch.minimum(a, b)

    def maximum(self, a: Any, b: Any) -> Array:
        torch = self.torch
        if not isinstance(b, torch.Tensor):
            return torch.clamp(a, min=b)
        if not isinstance(a, torch.Tensor):
            return torch.clamp(b, min=a)
        return torch.maximum(a, b)

    def log2(self, x: Array) -> Array:
        return self.torch.log2(x)

    def isnan(self, x: Array) -> Array:
        return self.torch.isnan(x)

    def any(self, x: Array, axis: Any = None) -> Array:
        return self.torch.any(x) if axis is None else self.torch.any(x, dim=axis)

    def ones_bool(self, like: Array) -> Array:
        return self.torch.ones(like.shape, dtype=self.torch.bool, device=like.device)

    def count_relevant(
        self, labels: Array, threshold: float, strict: bool, valid: Array | None, dtype: Any
    ) -> Array:
        """Per row, the number of valid items with ``label > threshold`` (``strict``) or
        ``label >= threshold``.

        On CPU a bool compare-and-count of a large array is several times slower than float
        arithmetic on a reused buffer (fresh large temporaries pay page faults), so the
        indicator is built as ``ceil(clamp(d, 0, 1))``, which is exactly ``[d > 0]`` for
        any float ``d``, in a scratch buffer kept between calls (one, the size of the
        labels)."""
        torch = self.torch
        if labels.device.type != "cpu":
            rel = labels > threshold if strict else labels >= threshold
            if valid is not None:
                rel = rel & valid
            return rel.sum(dim=-1, dtype=dtype)
        buf = self._scratch(labels)
        if strict and threshold == 0:
            torch.clamp(labels, 0.0, 1.0, out=buf)
        else:
            if strict:
                torch.sub(labels, threshold, out=buf)  # label > t  <=>  label - t > 0
            else:
                torch.sub(threshold, labels, out=buf)  # label >= t <=>  not (t - label > 0)
            buf.clamp_(0.0, 1.0)
        buf.ceil_()
        if not strict:
            buf.neg_().add_(1.0)
        if valid is not None:
            buf.mul_(valid)
        # Sum in the buffer's dtype (exact for counts below 2^24 in float32; a casting
        # sum to float64 is an order of magnitude slower on CPU), then cast the (B,) result.
        if labels.shape[-1] >= 2**24 and buf.dtype not in (torch.float64,):
            buf = buf.double()
        return buf.sum(dim=-1).to(dtype)

    def _scratch(self, like: Array) -> Array:
        """A buffer of ``like``'s shape, reused between calls of the same thread (one per
        thread: two metrics updated from two threads never share it)."""
        cache = getattr(self._local, "buf", None)
        if cache is None or cache.shape != like.shape or cache.dtype != like.dtype:
            cache = self.torch.empty_like(like, memory_format=self.torch.contiguous_format)
            self._local.buf = cache
        return cache

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return self.torch.stack(xs, dim=axis)

    def concat(self, xs: list[Array], axis: int = 0) -> Array:
        return self.torch.cat(xs, dim=axis)

    def host_bools(self, x: Array) -> list[bool]:
        return [bool(v) for v in x.reshape(-1).tolist()]

    def randperm(self, n: int, like: Array, generator: Any) -> Array:
        torch = self.torch
        if not isinstance(generator, torch.Generator):
            seed = generator
            generator = torch.Generator(device="cpu")
            if seed is None:
                generator.seed()
            else:
                generator.manual_seed(int(seed))
        return torch.randperm(n, generator=generator).to(like.device)

    def is_floating(self, x: Array) -> bool:
        return x.is_floating_point()

    def is_bool(self, x: Array) -> bool:
        return x.dtype == self.torch.bool

    def is_numeric(self, x: Array) -> bool:
        return not x.is_complex()

    def dtype_name(self, x: Array) -> str:
        return str(x.dtype).replace("torch.", "")


NUMPY = NumpyOps()
_TORCH: TorchOps | None = None


def torch_ops() -> TorchOps:
    global _TORCH
    if _TORCH is None:
        _TORCH = TorchOps()
    return _TORCH


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def get_ops(*arrays: Any) -> Ops:
    """torch when any of ``arrays`` is a torch tensor (the others are converted to it: torch
    in, torch out), else numpy (lists, scalars and numpy arrays)."""
    if any(a is not None and is_torch(a) for a in arrays):
        return torch_ops()
    return NUMPY
