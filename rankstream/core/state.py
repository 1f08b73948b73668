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

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from rankstream.core.backends import Ops, get_ops


class NotComputableError(RuntimeError):
    """Raised by ``compute`` when no usable list (or task) has been seen."""


class Kernel(Protocol):
    """The contract of a metric definition (immutable: per-call state is in the context).

    * ``fields``: state field name -> shape; every field is a plain sum.
    * ``batch_sums(ctx, y_pred, y, mask, sample_weight)``: the fields' sums of one batch, on
      the input's device (``ctx`` a :class:`~rankstream.core.backends.Context`, or None for a
      fresh one).
    * ``compute(sums, xp)``: named values from total sums, elementwise on ``xp`` (numpy or
      ``keras.ops``; traceable).
    * ``select(values)``: what the metric reports (an array, or a dict of them; traceable);
      ``finalize(values)``: the same as Python floats (a float, a list ordered by k, a dict).
    * ``check_computable(sums, name)``: raise when the sums give no number.
    * ``runtime(generator=None)``: what an instance owns across updates (workspace, tie
      generator).

    A kernel may add fields (a sum of squared per-list values, of per-list expectations)
    without any adapter change: adapters only move, add and hand back the fields.
    """

    fields: dict[str, tuple[int, ...]]

    def batch_sums(self, ctx: Any, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def compute(self, sums: Mapping[str, Any], xp: Any = np) -> dict[str, Any]: ...

    def select(self, values: Mapping[str, Any]) -> Any: ...

    def finalize(self, values: Mapping[str, Any]) -> Any: ...

    def check_computable(self, sums: Mapping[str, np.ndarray], name: str | None = None) -> None: ...

    def runtime(self, generator: Any = None) -> Any: ...


def check_sums(sums: Mapping[str, Any], name: str, weight: str, unit: str, bad_data: str, what: str) -> None:
    """The shared check of ``compute()``: ``ValueError`` when ``invalid`` units (lists, rows)
    were counted where ``update`` could not raise (accelerators, jit: no device sync), and
    :class:`NotComputableError` naming the metric when the ``weight`` field holds nothing
    (``what``: what it must have seen, and how many were seen)."""
    bad = float(np.asarray(sums.get("invalid", 0.0)))
    if bad > 0:
        raise ValueError(
            f"{name}: {int(bad)} {unit}(s) had {bad_data}; they were left out of the sums. On "
            "accelerators and under jit, update() does not read values back (no device sync), so "
            f"such {unit}s are counted and reported here instead of raising in update(). To find "
            "them, update with the same batches on the CPU or eagerly: update() then raises at the "
            "first bad batch, naming what is bad (for NaN scores: how many, and the first one's row "
            "and item)."
        )
    if not float(np.asarray(sums[weight])) > 0:
        need, seen = what.split(";")
        count = int(np.asarray(sums["count"]))
        raise NotComputableError(f"{name} must have at least one {need} before compute() ({seen}: {count})")


def result(kernel: Kernel, sums: Mapping[str, Any], name: str | None = None) -> Any:
    """The metric from float64 host sums as Python values (raises when not computable)."""
    kernel.check_computable(sums, name=name)
    with np.errstate(all="ignore"):
        values = kernel.compute({k: np.asarray(v, dtype=np.float64) for k, v in sums.items()}, np)
    return kernel.finalize(values)


def field_sizes(fields: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    return {name: math.prod(shape) for name, shape in fields.items()}


def flat_size(fields: Mapping[str, tuple[int, ...]]) -> int:
    return sum(field_sizes(fields).values())


def split_flat(flat: Any, fields: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Views of a flat 1-D array as the named fields (the adapters store one flat tensor,
    so one all-reduce moves the whole state)."""
    out: dict[str, Any] = {}
    start = 0
    for name, shape in fields.items():
        size = math.prod(shape)
        out[name] = flat[start : start + size].reshape(shape)
        start += size
    return out


def zero_sums(ops: Ops, fields: Mapping[Any, tuple[int, ...]], like: Any) -> dict[Any, Any]:
    """Zeros for every field (``like``'s backend and device, its accumulation dtype): the sums
    of a batch of no rows, which no pass needs to read."""
    acc = ops.acc_dtype(like)
    return {name: ops.zeros(shape, like, acc) for name, shape in fields.items()}


def join_flat(ops: Ops, sums: Mapping[str, Any], fields: Mapping[str, tuple[int, ...]]) -> Any:
    """Concatenate field sums (in ``fields`` order) into one flat 1-D array."""
    return ops.ravel_concat([sums[name] for name in fields])


STATE_FORMAT = 1
"""Version of the saved-state layout written by :func:`pack_state`."""


def _plain(value: Any) -> Any:
    """A JSON-like description of a kernel setting (callables by their qualified name, so a
    state saved by one process loads in another)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__name__)}"
    return type(value).__name__


def kernel_config(kernel: Kernel) -> dict[str, Any]:
    """The kernel's public settings (``top_k``, conventions, ...) as plain values."""
    return {
        name: _plain(value)
        for name, value in sorted(vars(kernel).items())
        if not name.startswith("_") and name != "fields"
    }


def pack_state(kernel: Kernel, sums: Mapping[str, Any], metric: str | None = None) -> dict[str, Any]:
    """A saved state: ``{"format", "metric", "config", "fields", "sums"}``. It says what it
    belongs to (the public metric's name, the kernel's settings and the field layout, and the
    layout's version), so :func:`unpack_state` refuses a state of another metric."""
    return {
        "format": STATE_FORMAT,
        "metric": metric or type(kernel).__name__,
        "config": kernel_config(kernel),
        "fields": {name: list(shape) for name, shape in kernel.fields.items()},
        "sums": {name: np.array(sums[name], dtype=np.float64, copy=True) for name in kernel.fields},
    }


def unpack_state(
    kernel: Kernel,
    state: Any,
    metric: str | None = None,
    owner: str = "state",
    state_dtype: Any = "float64",
) -> dict[str, np.ndarray]:
    """Validate a saved state whole and return its sums (float64 copies); nothing is
    assigned, so a caller that raises here leaves its state as it was.

    Accepts what :func:`pack_state` writes: the format version, the metric's name, its
    settings and field layout must match, and every sum must be real (a complex value is a
    ``TypeError``: casting it would drop its imaginary part), have its field's shape and be
    finite in ``state_dtype``, the dtype the caller keeps the state in (``"float32"``: a sum
    such as ``1e300``, finite in float64, would overflow to inf and turn the result into NaN).
    A ``ValueError`` names ``owner``, the field, and says what differs."""
    metric = metric or type(kernel).__name__
    if not isinstance(state, Mapping):
        raise TypeError(f"{owner} must be a mapping from state_dict(), got {type(state).__name__}")
    expected_keys = {"format", "metric", "config", "fields", "sums"}
    if set(state) != expected_keys:
        raise ValueError(
            f"{owner} does not fit {metric}: a saved state has exactly the keys {sorted(expected_keys)}, "
            f"got {sorted(map(str, state))}"
        )
    if state["format"] != STATE_FORMAT:
        raise ValueError(
            f"{owner} does not fit {metric}: it has format {state['format']!r}, this version reads "
            f"format {STATE_FORMAT}"
        )
    if state["metric"] != metric:
        raise ValueError(f"{owner} does not fit {metric}: it was saved by {state['metric']!r}")
    fields = {name: list(shape) for name, shape in kernel.fields.items()}
    saved = state["fields"]
    saved_fields = {str(k): list(v) for k, v in saved.items()} if isinstance(saved, Mapping) else saved
    sums = state["sums"]
    unavailable = statistics_left_out(kernel, saved_fields, sums)
    if unavailable:  # saved without the statistics' sums: they stay unavailable (NaN) until reset
        fields = {name: shape for name, shape in fields.items() if name not in unavailable}
    if saved_fields != fields or not isinstance(sums, Mapping) or set(sums) != set(fields):
        got = sorted(map(str, sums)) if isinstance(sums, Mapping) else type(sums).__name__
        raise ValueError(
            f"{owner} does not fit {metric}: its fields and their shapes are {saved_fields} with sums "
            f"{got}; {metric} has {fields}"
        )
    config = kernel_config(kernel)
    saved_config = dict(state["config"]) if isinstance(state["config"], Mapping) else {}
    if saved_config != config:
        diff = sorted(k for k in set(config) | set(saved_config) if saved_config.get(k) != config.get(k))
        raise ValueError(
            f"{owner} does not fit {metric}: it was saved with other settings: "
            + ", ".join(f"{k}={saved_config.get(k)!r} (here {config.get(k)!r})" for k in diff)
        )
    out = {}
    statistics = statistic_fields(kernel)
    for name, shape in kernel.fields.items():
        if name in unavailable:
            out[name] = np.full(tuple(shape), np.nan)
        elif name in statistics and _all_nan(sums[name], tuple(shape)):
            out[name] = np.full(tuple(shape), np.nan)  # unavailable when saved: still unavailable
        else:
            out[name] = check_field(sums[name], name, tuple(shape), owner, state_dtype)
    if unavailable:
        warnings.warn(
            f"{owner} of {metric} was saved without the sums of its standard error "
            f"({sorted(unavailable)}: a metric without a confidence level): its values load, and its "
            "stderr, ci_low and ci_high are NaN (unavailable, not 0) until reset()",
            StatisticsUnavailableWarning,
            stacklevel=3,
        )
    return out


def _all_nan(value: Any, shape: tuple[int, ...]) -> bool:
    """Whether a saved field is NaN throughout, of ``shape`` (a statistic that was
    unavailable when saved)."""
    try:
        given = np.asarray(_host(value))
        return given.shape == shape and given.dtype.kind == "f" and bool(np.all(np.isnan(given)))
    except (TypeError, ValueError, RuntimeError):
        return False


class StatisticsUnavailableWarning(UserWarning):
    """A state saved without the sums of the standard error was loaded into a metric with a
    confidence level: its statistics are NaN until the metric is reset."""


def statistic_fields(kernel: Kernel) -> frozenset[str]:
    """The fields of ``kernel`` only its statistics read (a state may have been saved
    without them)."""
    return frozenset(getattr(kernel, "statistic_fields", ()))


def statistics_left_out(kernel: Kernel, saved_fields: Any, sums: Any) -> frozenset[str]:
    """The statistic fields of ``kernel`` that a saved state lacks when it has every other
    field of ``kernel`` with its shape (an older state, or one saved without a confidence
    level), else nothing."""
    statistics = statistic_fields(kernel)
    if not statistics or not isinstance(saved_fields, Mapping) or not isinstance(sums, Mapping):
        return frozenset()
    rest = {name: list(shape) for name, shape in kernel.fields.items() if name not in statistics}
    if saved_fields != rest or set(sums) != set(rest):
        return frozenset()
    return statistics


def check_field(
    value: Any, name: str, shape: tuple[int, ...], owner: str, state_dtype: Any = "float64"
) -> np.ndarray:
    """One loaded field sum as a float64 copy, or an error naming ``owner`` and the field: it
    must be real numbers (``TypeError`` for complex ones), of ``shape``, and finite once
    stored in ``state_dtype``."""
    try:
        given = np.asarray(_host(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{owner}: field {name!r} must be numeric, got {value!r}") from exc
    if np.iscomplexobj(given):
        raise TypeError(
            f"{owner}: field {name!r} must hold real sums, got complex dtype {given.dtype} "
            f"({given.tolist()}); a cast would drop the imaginary part"
        )
    try:
        out = np.array(given, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: field {name!r} must be numeric, got {value!r}") from exc
    if out.shape != shape:
        raise ValueError(f"{owner}: field {name!r} must have shape {shape}, got {out.shape}")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{owner}: field {name!r} must be finite, got {out.tolist()}")
    dtype = np.dtype(state_dtype)
    if dtype != np.float64:
        with np.errstate(over="ignore"):
            stored = out.astype(dtype)
        if not np.all(np.isfinite(stored)):
            raise ValueError(
                f"{owner}: field {name!r} holds {out.tolist()}, which overflows the {dtype} state of "
                f"this metric (largest finite value {float(np.finfo(dtype).max):.4g}); load it into "
                f"a metric with a float64 state (state_dtype='float64' where the backend has it)"
            )
    return out


def _host(x: Any) -> Any:
    """A tensor of any framework as something numpy reads (CPU, no grad)."""
    for attr in ("detach", "cpu"):
        if hasattr(x, attr) and callable(getattr(x, attr)):
            x = getattr(x, attr)()
    return np.asarray(x.numpy()) if hasattr(x, "numpy") and callable(x.numpy) else x


class State:
    """Framework-free accumulator of one kernel's fields (numpy float64).

    >>> from rankstream import MAPKernel  # doctest: +SKIP
    >>> st = State(MAPKernel(top_k=[1, 5]))  # doctest: +SKIP
    >>> st.update(scores, labels); st.compute()  # doctest: +SKIP
    """

    def __init__(self, kernel: Kernel, sums: Mapping[str, np.ndarray] | None = None) -> None:
        self.kernel = kernel
        self._runtime = kernel.runtime()
        self.sums: dict[str, np.ndarray] = {
            name: np.zeros(shape, dtype=np.float64) for name, shape in kernel.fields.items()
        }
        if sums is not None:  # what state_dict() wrote, or the raw field sums
            if isinstance(sums, Mapping) and "format" in sums and "sums" in sums:
                self.load_state_dict(sums)
            else:
                self.load(sums)

    def reset(self) -> None:
        for v in self.sums.values():
            v[...] = 0.0

    def update(self, *args: Any, **kwargs: Any) -> State:
        """Add one batch. On error nothing is added."""
        like = args[0] if args else kwargs.get("y_pred")
        ctx = self._runtime.context(like, get_ops(*args, *kwargs.values()))
        batch_sums = self.kernel.batch_sums(ctx, *args, **kwargs)
        converted = {}
        for name in self.kernel.fields:
            converted[name] = np.asarray(ctx.ops.to_numpy(batch_sums[name]), dtype=np.float64)
        for name, value in converted.items():
            self.sums[name] += value
        return self

    def update_queries(self, preds: Any, target: Any, indexes: Any) -> State:
        """Add flat items of whole queries: ``preds`` (scores), ``target`` (labels) and
        ``indexes`` (the query id of each item), each ``(N,)``, grouped into padded lists with a
        mask (:func:`rankstream.core.grouping.group_by_query`, on the input's device). A query
        whose items come in two updates counts as two: for queries that span updates, feed a
        :class:`rankstream.core.query_stream.QueryStream` and update with the items it hands
        back (and with its pending items before ``compute``). On error nothing is added."""
        from rankstream.core.backends.query_groups import group_by_query

        scores, labels, mask, _ = group_by_query(indexes, preds, target)
        return self.update(scores, labels, mask)

    def merge(self, other: State) -> State:
        """A new state holding the field-wise sum of ``self`` and ``other``: states of one
        metric (kernel class) with the same settings (a random tie order's ``seed`` may
        differ); anything else is a ``ValueError`` naming both."""
        if not isinstance(other, State):
            raise TypeError(f"can only merge a State with a State, got {type(other).__name__}")
        if other.kernel.fields != self.kernel.fields:
            raise ValueError(
                f"cannot merge states with different fields: {self.kernel.fields} vs {other.kernel.fields}"
            )
        mine, theirs = type(self.kernel).__name__, type(other.kernel).__name__
        if mine != theirs:
            raise ValueError(
                f"cannot merge a state of {mine} with a state of {theirs}: they are other metrics"
            )
        a, b = _merge_config(self.kernel), _merge_config(other.kernel)
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            raise ValueError(
                f"cannot merge states of {mine} with other settings: "
                + ", ".join(f"{k}={a.get(k)!r} vs {b.get(k)!r}" for k in diff)
            )
        return State(self.kernel, {n: self.sums[n] + other.sums[n] for n in self.sums})

    __add__ = merge

    def compute(self) -> Any:
        return result(self.kernel, self.sums)

    def state_dict(self) -> dict[str, Any]:
        """A snapshot saying what it belongs to (see :func:`pack_state`)."""
        return pack_state(self.kernel, self.sums)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load what :meth:`state_dict` wrote, validated whole before anything is assigned."""
        self.sums = unpack_state(self.kernel, state, owner="state_dict")

    def load(self, sums: Mapping[str, Any]) -> None:
        """Set the raw field sums (``{field: array}``): exactly the kernel's fields, each of its
        shape and finite, checked whole before anything is assigned."""
        if not isinstance(sums, Mapping):
            raise TypeError(f"sums must be a mapping from field name to array, got {type(sums).__name__}")
        if set(sums) != set(self.kernel.fields):
            missing = sorted(set(self.kernel.fields) - set(sums))
            unknown = sorted(map(str, set(sums) - set(self.kernel.fields)))
            raise ValueError(
                f"sums must have exactly the fields {sorted(self.kernel.fields)}: missing fields "
                f"{missing}, unknown fields {unknown}"
            )
        fields = {name: list(shape) for name, shape in self.kernel.fields.items()}
        packed = {
            "format": STATE_FORMAT,
            "metric": type(self.kernel).__name__,
            "config": kernel_config(self.kernel),
            "fields": fields,
            "sums": sums,
        }
        self.sums = unpack_state(self.kernel, packed, owner="sums")


def _merge_config(kernel: Kernel) -> dict[str, Any]:
    """The settings two states must share to be merged: :func:`kernel_config` without the
    random tie order's seed (shards may rank ties with different seeds)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "seed"}
        return value

    return strip(kernel_config(kernel))


def merge(*states: State) -> State:
    """Field-wise sum of any number of states of the same kernel."""
    if not states:
        raise ValueError("merge needs at least one state")
    out = states[0]
    for s in states[1:]:
        out = out.merge(s)
    return out
