"""The one place that normalises and validates a batch.

Every adapter and the functional API call :func:`list_batch` for list metrics (MAP, nDCG)
and :func:`unpack_output` to read an engine's output. Errors are ``ValueError`` or
``TypeError`` naming the argument and echoing what was received; nothing here mutates any
metric state, so a failed update leaves the state exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rankstream.core.ops import Array, Ops, get_ops


@dataclass
class ListBatch:
    """A validated batch of ranked lists.

    scores: (B, N) floating; labels: (B, N) floating (bool and int labels are cast);
    valid: (B, N) bool or None (False = the item is not in the list);
    weights: (B,) in the accumulation dtype, or None (all ones).
    """

    ops: Ops
    scores: Array
    labels: Array
    valid: Array | None
    weights: Array | None

    @property
    def batch_size(self) -> int:
        return int(self.scores.shape[0])

    @property
    def list_size(self) -> int:
        return int(self.scores.shape[1])


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _describe(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{type(x).__name__} of shape {_shape(x)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:200]


def as_array(ops: Ops, x: Any, name: str) -> Array:
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    try:
        return ops.asarray(x)
    except Exception as exc:
        raise TypeError(f"{name} must be array-like, got {_describe(x)}: {exc}") from exc


def unpack_output(output: Any) -> tuple[Any, Any, Any, Any]:
    """Read ``(y_pred, y)``, ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping
    with keys ``y_pred``, ``y`` and optionally ``mask``, ``sample_weight``.

    Returns ``(y_pred, y, mask, sample_weight)``.
    """
    extra: Mapping[str, Any] = {}
    if isinstance(output, Mapping):
        missing = [k for k in ("y_pred", "y") if k not in output]
        if missing:
            raise ValueError(
                f"output mapping must have keys 'y_pred' and 'y', missing {missing}; "
                f"got keys {sorted(output)}"
            )
        unknown = sorted(set(output) - {"y_pred", "y", "mask", "sample_weight"})
        if unknown:
            raise ValueError(
                f"output mapping has unknown keys {unknown}; allowed: y_pred, y, mask, sample_weight"
            )
        return output["y_pred"], output["y"], output.get("mask"), output.get("sample_weight")
    if not isinstance(output, Sequence) or isinstance(output, (str, bytes)):
        raise TypeError(f"output must be a tuple (y_pred, y[, kwargs]) or a mapping, got {_describe(output)}")
    if len(output) == 2:
        y_pred, y = output
    elif len(output) == 3:
        y_pred, y, extra = output
        if not isinstance(extra, Mapping):
            raise TypeError(
                "the third element of output must be a dict with keys 'mask' and/or "
                f"'sample_weight', got {_describe(extra)}"
            )
        unknown = sorted(set(extra) - {"mask", "sample_weight"})
        if unknown:
            raise ValueError(f"output kwargs have unknown keys {unknown}; allowed: mask, sample_weight")
    else:
        raise ValueError(
            "output must be (y_pred, y) or (y_pred, y, {'mask': ..., 'sample_weight': ...}), "
            f"got a sequence of length {len(output)}"
        )
    return y_pred, y, extra.get("mask"), extra.get("sample_weight")


def list_batch(
    y_pred: Any,
    y: Any,
    mask: Any = None,
    sample_weight: Any = None,
    ops: Ops | None = None,
) -> ListBatch:
    """Validate and normalise one batch of lists: ``y_pred`` and ``y`` of shape
    ``(batch, num_items)``; ``mask`` bool of the same shape (False drops the item);
    ``sample_weight`` a scalar or one non-negative weight per list, shape ``(batch,)``.

    Checks here are on shapes and dtypes only (no device reads); NaN scores and negative
    weights are checked by the kernels in the same single device read as the tie check.
    """
    ops = ops or get_ops(y_pred, y)
    y_pred = as_array(ops, y_pred, "y_pred")
    y = as_array(ops, y, "y")
    if len(y_pred.shape) != 2:
        raise ValueError(f"y_pred must be 2-D (batch, num_items), got shape {_shape(y_pred)}")
    if _shape(y) != _shape(y_pred):
        raise ValueError(
            f"y_pred and y must have the same shape, got y_pred {_shape(y_pred)} and y {_shape(y)}"
        )
    if ops.is_bool(y_pred) or not ops.is_numeric(y_pred):
        raise TypeError(f"y_pred must hold real scores, got dtype {ops.dtype_name(y_pred)}")
    if not ops.is_floating(y_pred):
        y_pred = ops.cast(y_pred, ops.acc_dtype(y_pred))
    if not ops.is_numeric(y):
        raise TypeError(f"y must be numeric or bool, got dtype {ops.dtype_name(y)}")
    if not ops.is_floating(y):
        y = ops.cast(y, y_pred.dtype)
    if mask is not None:
        mask = as_array(ops, mask, "mask")
        if _shape(mask) != _shape(y_pred):
            raise ValueError(f"mask must have the shape of y_pred {_shape(y_pred)}, got {_shape(mask)}")
        if not ops.is_bool(mask):
            raise TypeError(
                f"mask must be a bool array (True = keep the item), got dtype {ops.dtype_name(mask)}"
            )
    weights = None
    if sample_weight is not None:
        w = as_array(ops, sample_weight, "sample_weight")
        if ops.is_bool(w) or not ops.is_numeric(w):
            raise TypeError(f"sample_weight must be numeric, got dtype {ops.dtype_name(w)}")
        shape = _shape(w)
        b = _shape(y_pred)[0]
        if shape == ():
            w = ops.zeros((b,), y_pred, ops.acc_dtype(y_pred)) + ops.cast(w, ops.acc_dtype(y_pred))
        elif shape != (b,):
            raise ValueError(
                f"sample_weight must be a scalar or have shape (batch,) = ({b},), got shape {shape}"
            )
        weights = ops.cast(w, ops.acc_dtype(y_pred))
    return ListBatch(ops=ops, scores=y_pred, labels=y, valid=mask, weights=weights)


def check_positive_ints(value: Any, name: str) -> list[int]:
    """``value`` as a sorted list of positive ints (an int or a non-empty list)."""
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, (list, tuple)) or len(items) == 0:
        raise ValueError(f"{name} must be a positive int or a non-empty list of them, got {value!r}")
    for k in items:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"{name} must be a positive int or a non-empty list of them, got {value!r}")
    return sorted(items)
