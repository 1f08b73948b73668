"""Array backends: one :class:`Ops` protocol, implemented completely by each backend module.

* :mod:`~rankstream.core.backends.numpy` (the functional forms, :class:`~rankstream.State`),
* :mod:`~rankstream.core.backends.torch` (the Ignite adapter; torch tensors anywhere),
* :mod:`~rankstream.core.backends.keras_ops` (the Keras adapter on JAX and TensorFlow; Keras on
  torch hands torch tensors to the torch backend).

Kernels, ranking and inputs are written once against :class:`Ops` and receive it in a
:class:`Context` with the rest of what varies per call and per instance: whether values may be
read back to the host, the tie generator, and the instance's :class:`Workspace` (scratch
buffers of a backend's fast paths). Nothing outside this package names a backend, and nothing
here is imported at module import time but numpy: :func:`get_ops` looks at the arrays it is
given and imports lazily.

Conventions shared by every backend:

* ``topk(x, k)`` works on the last axis and returns ``(values, indices)`` sorted by value,
  largest first, NaN first; ``native_stable`` says whether equal values come out lowest index
  first. ``topk_first`` is the exact stable top-k without a host read (or ``None`` where the
  backend's ``topk`` is already stable and ``topk`` serves). ``masked_topk(x, k, valid)`` is
  ``topk`` of ``where(valid, x, -inf)`` and ``masked_row_sums(x, valid)`` the row sums of
  ``where(valid, x, 0)``: on CPU torch both work through row tiles, never a masked copy.
* ``acc_dtype`` is the float type of the per-list arithmetic and the state: float64 where the
  backend and device support it.
* ``xp`` is the elementwise math namespace (``exp``, ``where``, ...) of the backend, for the
  kernels' ``compute(sums, xp)``.
* ``run_bounds(new)`` gives, for a ``(B, K)`` bool array marking where runs start, each
  position's run start and end (0-based ints); ``tie_sums(scores, v, valid, items, fn, acc)``
  is one comparison pass ``scores == v[:, None]`` over the valid items, returning per row the
  count and the sum of ``fn(*item tiles)`` over them (on CPU torch tile by tile: no full-size
  temporary).
* ``host(arrays)`` names the ops that compute one batch of these arrays fastest: the backend
  itself, or for small CPU torch batches the numpy views of them (per-call overhead dominates
  there: a numpy call on a few thousand values costs a fraction of a torch one). ``export``
  turns what those ops computed back into the caller's arrays. Kernels opt in with
  :meth:`Context.on_host`.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rankstream.core import sizes as _sizes
from rankstream.core.backends.protocol import (
    OPS_METHODS,
    Array,
    Ops,
    Workspace,
    host_batches,
    host_batches_enabled,
)
from rankstream.core.sizes import Sizes

__all__ = [
    "OPS_METHODS", "Array", "Context", "Ops", "Runtime", "Workspace", "get_ops", "host_batches",
    "host_batches_enabled", "is_torch", "numpy_ops", "read_back", "torch_ops", "value_bytes",
]  # fmt: skip


@dataclass(frozen=True)
class Context:
    """What a kernel gets besides the batch: the backend's ops, whether values may be read
    back to the host (CPU and eager; else bad data is counted, never raised), the tie
    generator and the instance's workspace."""

    ops: Ops
    read_back: bool = True
    generator: Any = None
    workspace: Workspace = field(default_factory=Workspace)
    #: ``ties="random"`` over blocks of rows of one batch: a one-item list holding the batch's
    #: column permutation once the first block with a tie drew it (the later blocks take it),
    #: so the blocks order ties as the batch in one piece would; None: each selection draws
    perm: list[Any] | None = None
    #: the sizes and memory budgets the core reads (:mod:`rankstream.core.sizes`; the
    #: process's :data:`~rankstream.core.sizes.SIZES` when the context is made)
    sizes: Sizes = field(default_factory=lambda: _sizes.SIZES)
    #: while a batch is evaluated in blocks of rows, the most values a scratch tile of a
    #: block's pass may hold (set by the executor from the whole batch: a block's own
    #: thresholds would let it copy the block whole; handed to the backends as an argument);
    #: None otherwise
    tile_cap: int | None = None

    @classmethod
    def of(
        cls,
        like: Any,
        ops: Ops | None = None,
        *,
        read_back: bool = True,
        generator: Any = None,
        workspace: Workspace | None = None,
    ) -> Context:
        """The context for a batch whose scores are ``like`` (reading back only where
        ``ops.can_read(like)`` and ``read_back``)."""
        ops = ops or get_ops(like)
        read = read_back and _READ_BACK.get() and ops.can_read(like)
        return cls(ops, bool(read), generator, workspace or Workspace())

    def on_host(self, *arrays: Any) -> tuple[Context, tuple[Any, ...]]:
        """``(context, arrays)`` for one batch: this context and the arrays as given, or where
        values are read back and ``ops.host(arrays)`` names other ops for this batch (small CPU
        torch batches: numpy views), the same context on those ops and the arrays as theirs
        (``None`` stays ``None``). Whatever a kernel computes on them goes back to the caller
        through ``ops.export``."""
        if not self.read_back:
            return self, arrays
        ops = self.ops.host(arrays)
        if ops is self.ops:
            return self, arrays
        held = tuple(None if a is None else ops.asarray(a) for a in arrays)
        return Context(ops, True, self.generator, self.workspace, self.perm, self.sizes, self.tile_cap), held


_READ_BACK: contextvars.ContextVar[bool] = contextvars.ContextVar("rankstream_read_back", default=True)


@contextlib.contextmanager
def read_back(enabled: bool) -> Iterator[None]:
    """Within the block, ``read_back(False)`` makes every update take the path of an
    accelerator or a ``jit`` trace even on the CPU: no value is read back, bad data is counted
    into the state instead of raised (``compute()`` raises then). For tests and for checking
    that path; ``True`` (the default) reads back wherever that is free."""
    token = _READ_BACK.set(bool(enabled))
    try:
        yield
    finally:
        _READ_BACK.reset(token)


class Runtime:
    """What one metric instance owns across its updates: its :class:`Workspace` and its tie
    generator (made once per backend from ``seed`` when ``random_ties``, or the one given, e.g.
    a Keras ``SeedGenerator``). :meth:`context` makes the :class:`Context` of one update."""

    def __init__(self, random_ties: bool = False, seed: Any = None, generator: Any = None) -> None:
        self.random_ties = random_ties
        self.seed = seed
        self.given = generator
        self.workspace = Workspace()
        self._generators: dict[str, Any] = {}

    def generator(self, ops: Ops) -> Any:
        if not self.random_ties:
            return None
        if self.given is not None:
            return self.given
        if ops.name not in self._generators:
            self._generators[ops.name] = ops.generator(self.seed)
        return self._generators[ops.name]

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        ops = ops or get_ops(like)
        read = _READ_BACK.get() and ops.can_read(like)
        return Context(ops, bool(read), self.generator(ops), self.workspace)


def value_bytes(ops: Ops, x: Array) -> int:
    """Bytes of one value of the numeric array ``x`` (its dtype's bits over 8: ``float32`` 4,
    ``bfloat16`` 2), read off :meth:`Ops.dtype_name`."""
    return int(re.sub(r"\D", "", ops.dtype_name(x))) // 8


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


_CACHE: dict[str, Ops] = {}


def numpy_ops() -> Ops:
    ops = _CACHE.get("numpy")
    if ops is None:
        from rankstream.core.backends.numpy import NumpyOps

        ops = _CACHE["numpy"] = NumpyOps()
    return ops


def torch_ops() -> Ops:
    ops = _CACHE.get("torch")
    if ops is None:
        from rankstream.core.backends.torch import TorchOps

        ops = _CACHE["torch"] = TorchOps()
    return ops


def get_ops(*arrays: Any) -> Ops:
    """torch when any of ``arrays`` is a torch tensor (the others are converted to it: torch
    in, torch out), else numpy (lists, scalars and numpy arrays)."""
    if any(a is not None and is_torch(a) for a in arrays):
        return torch_ops()
    return numpy_ops()
