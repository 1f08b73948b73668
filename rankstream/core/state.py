"""A metric's state: a small fixed set of named fields, each a plain SUM.

Every kernel declares ``fields`` (name -> shape). From "state is a bag of sums" follow,
with no code per metric:

* ``merge`` adds field by field, ``reset`` is zeros, the empty state is the identity;
* distributed aggregation is an all-reduce SUM of the fields (or ``merge`` in any
  map-reduce engine), checkpointing is the fields;
* any split of the data into batches, in any order, on any number of workers, gives the
  same result.

:class:`State` is the framework-free accumulator (numpy float64 fields, any array input);
the Ignite and Keras adapters hold the same fields as tensors / variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from rankstream.core.ops import NUMPY, Ops


class NotComputableError(RuntimeError):
    """Raised by ``compute`` when no usable list (or task) has been seen."""


class Kernel(Protocol):
    """What a metric definition provides to the state and to the adapters."""

    fields: dict[str, tuple[int, ...]]

    def batch_sums(self, ops: Ops, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Field sums of one batch (arrays of the field shapes, on the input's device)."""

    def compute(self, sums: Mapping[str, Any], ops: Ops) -> Any:
        """The metric from total sums (elementwise arithmetic only, any backend)."""

    def check_computable(self, sums: Mapping[str, np.ndarray]) -> None:
        """Raise :class:`NotComputableError` when the sums hold no usable list."""

    def finalize(self, value: Any) -> Any:
        """Python-level result (a float, a list ordered by k, or a dict)."""


def field_sizes(fields: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    return {name: int(np.prod(shape, dtype=np.int64)) for name, shape in fields.items()}


def flat_size(fields: Mapping[str, tuple[int, ...]]) -> int:
    return sum(field_sizes(fields).values())


def split_flat(flat: Any, fields: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Views of a flat 1-D array as the named fields (the adapters store one flat tensor,
    so one all-reduce moves the whole state)."""
    out: dict[str, Any] = {}
    start = 0
    for name, shape in fields.items():
        size = int(np.prod(shape, dtype=np.int64))
        out[name] = flat[start : start + size].reshape(shape)
        start += size
    return out


def join_flat(ops: Ops, sums: Mapping[str, Any], fields: Mapping[str, tuple[int, ...]]) -> Any:
    """Concatenate field sums (in ``fields`` order) into one flat 1-D array."""
    parts = [sums[name].reshape(-1) for name in fields]
    return ops.concat(parts)


class State:
    """Framework-free accumulator of one kernel's fields (numpy float64).

    >>> from rankstream import MAPKernel  # doctest: +SKIP
    >>> st = State(MAPKernel(top_k=[1, 5]))  # doctest: +SKIP
    >>> st.update(scores, labels); st.compute()  # doctest: +SKIP
    """

    def __init__(self, kernel: Kernel, sums: Mapping[str, np.ndarray] | None = None) -> None:
        self.kernel = kernel
        self.sums: dict[str, np.ndarray] = {
            name: np.zeros(shape, dtype=np.float64) for name, shape in kernel.fields.items()
        }
        if sums is not None:
            self.load(sums)

    def reset(self) -> None:
        for v in self.sums.values():
            v[...] = 0.0

    def update(self, *args: Any, **kwargs: Any) -> State:
        """Add one batch. On error nothing is added."""
        batch_sums = self.kernel.batch_sums(None, *args, **kwargs)
        converted = {}
        for name in self.kernel.fields:
            ops = _ops_of(batch_sums[name])
            converted[name] = np.asarray(ops.to_numpy(batch_sums[name]), dtype=np.float64)
        for name, value in converted.items():
            self.sums[name] += value
        return self

    def merge(self, other: State) -> State:
        """A new state holding the field-wise sum of ``self`` and ``other``."""
        if other.kernel.fields != self.kernel.fields:
            raise ValueError(
                f"cannot merge states with different fields: {self.kernel.fields} vs {other.kernel.fields}"
            )
        return State(self.kernel, {n: self.sums[n] + other.sums[n] for n in self.sums})

    __add__ = merge

    def compute(self) -> Any:
        self.kernel.check_computable(self.sums)
        return self.kernel.finalize(self.kernel.compute(self.sums, NUMPY))

    def state_dict(self) -> dict[str, np.ndarray]:
        return {n: v.copy() for n, v in self.sums.items()}

    def load(self, sums: Mapping[str, Any]) -> None:
        missing = set(self.kernel.fields) - set(sums)
        if missing:
            raise ValueError(f"state is missing fields {sorted(missing)}; got {sorted(sums)}")
        for name, shape in self.kernel.fields.items():
            value = np.asarray(sums[name], dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"field {name!r} must have shape {shape}, got {value.shape}")
            self.sums[name] = value.copy()


def merge(*states: State) -> State:
    """Field-wise sum of any number of states of the same kernel."""
    if not states:
        raise ValueError("merge needs at least one state")
    out = states[0]
    for s in states[1:]:
        out = out.merge(s)
    return out


def _ops_of(x: Any) -> Ops:
    from rankstream.core.ops import get_ops

    return get_ops(x)
