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

import numpy as np

from rankstream.core.backends import Array, Ops, get_ops
from rankstream.core.backends import get_ops as ops_of
from rankstream.core.input_warnings import (
    IntegerScoresWarning,
    SwappedInputsWarning,
    looks_swapped,
    warn_integer_scores,
    warn_once,
    warn_swapped_inputs,
)

NEGATIVE_LABELS = ("keep", "mask")

__all__ = [
    "IntegerScoresWarning",
    "SwappedInputsWarning",
    "looks_swapped",
    "warn_integer_scores",
    "warn_once",
    "warn_swapped_inputs",
]


@dataclass
class ListBatch:
    """A validated batch of ranked lists.

    scores: (B, N) floating; labels: (B, N) floating (bool and int labels are cast);
    valid: (B, N) bool or None (False = the item is not in the list);
    weights: (B,) in the accumulation dtype, or None (all ones);
    item_weights: (B, N) per-item weights as given (no copy: any real dtype, cast where read),
    or None (only with ``list_batch(..., item_weights=True)``). They are positive on every item
    of the lists (``valid`` drops the others); read them where ``valid`` is True only.
    """

    ops: Ops
    scores: Array
    labels: Array
    valid: Array | None
    weights: Array | None
    item_weights: Array | None = None

    @property
    def batch_size(self) -> int | None:
        """The number of lists (None when unknown, e.g. a TensorFlow graph's batch axis)."""
        d = self.scores.shape[0]
        return None if d is None else int(d)

    @property
    def list_size(self) -> int:
        return int(self.scores.shape[1])

    def rows(self, rows: slice) -> ListBatch:
        """The lists ``rows`` of the batch (views of its arrays, no copy)."""
        cut = lambda x: None if x is None else x[rows]  # noqa: E731
        return ListBatch(
            self.ops,
            self.scores[rows],
            self.labels[rows],
            cut(self.valid),
            cut(self.weights),
            cut(self.item_weights),
        )


def _shape(x: Any) -> tuple[int | None, ...]:
    """Static shape; an unknown dimension (a TensorFlow graph's batch axis) is None."""
    return tuple(None if d is None else int(d) for d in x.shape)


def known_rank(x: Any, name: str) -> Any:
    """``x``, or a ``ValueError`` naming ``name`` when its rank is unknown at trace time (a
    ``tf.function`` traced with a ``TensorSpec`` of shape None): the layout (one list or a
    batch, per-list or per-item weights) is read from the rank."""
    if x is not None and hasattr(x, "shape") and getattr(x.shape, "rank", 0) is None:
        raise ValueError(
            f"{name} has an unknown rank ({type(x).__name__} of dtype {x.dtype}, traced with shape "
            f"None): give it a known rank, e.g. tf.TensorSpec([None, list_size]) in the input "
            f"signature, or x.set_shape / tf.ensure_shape before the metric"
        )
    return x


def _same_shape(a: tuple[int | None, ...], b: tuple[int | None, ...]) -> bool:
    """Equal shapes, an unknown (None) dimension matching any size."""
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))


def _describe(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        shape = "unknown" if getattr(x.shape, "rank", 0) is None else _shape(x)
        return f"{type(x).__name__} of shape {shape} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:200]


def static_list_size(y_pred: Any, axis_name: str = "num_items") -> int:
    """The static size of ``y_pred``'s axis 1, or a ``ValueError`` when it is only known at run
    time (a traced axis of size None): cut-offs, sorts and per-size tables are built for it."""
    n = _shape(y_pred)[1]
    if n is None:
        raise ValueError(
            f"y_pred's {axis_name} (axis 1) must be known when traced, got shape {_shape(y_pred)}: "
            f"give it a static size, e.g. tf.TensorSpec([None, list_size]) or padded batches"
        )
    return n


def as_array(ops: Ops, x: Any, name: str, like: Any = None) -> Array:
    """``x`` as an array of ``ops``'s backend: tensors of that backend pass through; numpy
    arrays and python lists given beside torch tensors are converted (onto ``like``'s device),
    so mixed numpy/torch inputs work. Complex, string, object and ragged inputs are a
    ``TypeError`` naming ``name``."""
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    if getattr(getattr(x, "device", None), "type", None) == "meta":
        raise ValueError(f"{name} is a tensor on the 'meta' device (no data): {_describe(x)}")
    if hasattr(x, "shape") and hasattr(x, "dtype") and ops.owns(x):
        x = known_rank(x, name)
    else:
        try:
            host = ops_of(x).to_numpy(x) if hasattr(x, "shape") and hasattr(x, "dtype") else x
            host = np.asarray(host)
        except Exception as exc:
            raise TypeError(f"{name} must be array-like, got {_describe(x)}: {exc}") from exc
        if host.dtype == object or host.dtype.kind in "USV":
            given = _describe(x) if hasattr(x, "dtype") else f"{_describe(x)} (numpy dtype {host.dtype})"
            raise TypeError(f"{name} must hold numbers, got {given}")
        if host.dtype.kind == "c":
            raise TypeError(f"{name} must be real, got complex dtype {host.dtype}")
        try:
            x = ops.asarray(host, like)
        except Exception as exc:
            raise TypeError(f"{name} must be array-like, got {_describe(x)}: {exc}") from exc
    if ops.is_complex(x):
        raise TypeError(f"{name} must be real, got complex dtype {ops.dtype_name(x)}")
    return x


#: the keys of an update's input: its two arrays, and the options its third element may hold
ARRAY_KEYS = ("y_pred", "y")
OPTION_KEYS = ("mask", "sample_weight")


def unpack_output(output: Any, options: tuple[str, ...] = OPTION_KEYS) -> tuple[Any, Any, Any, Any]:
    """Read ``(y_pred, y)``, ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping
    with keys ``y_pred``, ``y`` and optionally ``mask``, ``sample_weight``.

    ``options``: the keys the caller's metric takes beside ``y_pred`` and ``y`` (what the
    messages list); those outside :data:`OPTION_KEYS` it reads itself, and takes out of
    ``output`` before (the Ignite metrics' query ids, ``indexes``).

    Returns ``(y_pred, y, mask, sample_weight)``.
    """
    extra: Mapping[str, Any] = {}
    if isinstance(output, Mapping):
        missing = [k for k in ARRAY_KEYS if k not in output]
        if missing:
            raise ValueError(
                f"output mapping must have keys {' and '.join(map(repr, ARRAY_KEYS))}, missing {missing}; "
                f"got keys {sorted(output)}"
            )
        unknown = sorted(set(output) - {*ARRAY_KEYS, *options})
        if unknown:
            raise ValueError(
                f"output mapping has unknown keys {unknown}; allowed: {', '.join((*ARRAY_KEYS, *options))}"
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
                f"the third element of output must be a dict with any of the keys {', '.join(options)}, "
                f"got {_describe(extra)}"
            )
        unknown = sorted(set(extra) - set(options))
        if unknown:
            raise ValueError(f"output kwargs have unknown keys {unknown}; allowed: {', '.join(options)}")
    else:
        raise ValueError(
            "output must be (y_pred, y) or (y_pred, y, {"
            + ", ".join(f"{k!r}: ..." for k in options)
            + f"}}), got a sequence of length {len(output)}"
        )
    return y_pred, y, extra.get("mask"), extra.get("sample_weight")


def list_batch(
    y_pred: Any,
    y: Any,
    mask: Any = None,
    sample_weight: Any = None,
    ops: Ops | None = None,
    *,
    item_weights: bool = False,
    negative_labels: str = "keep",
    read_back: bool = True,
) -> ListBatch:
    """Validate and normalise one batch of lists: ``y_pred`` and ``y`` of shape
    ``(batch, num_items)``; ``mask`` bool of the same shape (False drops the item);
    ``sample_weight`` a scalar or one non-negative weight per list, shape ``(batch,)``.

    Checks here are on shapes and dtypes only (no device reads); NaN scores and negative
    weights are checked by the kernels in the same single device read as the tie check.

    Two opt-in conventions (keras-rs's; the defaults leave everything above unchanged):

    * ``negative_labels="mask"``: an item labelled ``< 0`` is padding (dropped as if masked).
      ``"keep"`` (default) leaves labels as they are.
    * ``item_weights=True``: ``sample_weight`` may also be per item, ``(batch, num_items)``
      (returned as ``item_weights``, 0 on dropped items); a scalar or ``(batch,)`` weight stays
      per list. An item (or list) whose weight is ``<= 0`` or NaN is dropped, as keras-rs
      does, so such weights never raise; per-list weights come back clipped to ``>= 0``.
    """
    if negative_labels not in NEGATIVE_LABELS:
        raise ValueError(f"negative_labels must be one of {NEGATIVE_LABELS}, got {negative_labels!r}")
    ops = ops or get_ops(y_pred, y, mask, sample_weight)
    y_pred = as_array(ops, y_pred, "y_pred")
    y = as_array(ops, y, "y", y_pred)
    if len(y_pred.shape) != 2:
        raise ValueError(f"y_pred must be 2-D (batch, num_items), got shape {_shape(y_pred)}")
    if static_list_size(y_pred) == 0 and _shape(y_pred)[0] != 0:  # no list at all is a no-op
        raise ValueError(f"y_pred must have at least one item per list, got shape {_shape(y_pred)}")
    if not _same_shape(_shape(y), _shape(y_pred)):
        raise ValueError(
            f"y_pred and y must have the same shape, got y_pred {_shape(y_pred)} and y {_shape(y)}"
        )
    if ops.is_bool(y_pred) or not ops.is_numeric(y_pred):
        raise TypeError(f"y_pred must hold real scores, got dtype {ops.dtype_name(y_pred)}")
    if not ops.is_floating(y_pred):
        warn_integer_scores(ops, y_pred)
        y_pred = ops.cast(y_pred, ops.acc_dtype(y_pred))
    if not ops.is_numeric(y):
        raise TypeError(f"y must be numeric or bool, got dtype {ops.dtype_name(y)}")
    if not ops.is_floating(y):
        y = ops.cast(y, y_pred.dtype)
    if mask is not None:
        mask = as_array(ops, mask, "mask", y_pred)
        if not _same_shape(_shape(mask), _shape(y_pred)):
            raise ValueError(f"mask must have the shape of y_pred {_shape(y_pred)}, got {_shape(mask)}")
        if not ops.is_bool(mask):
            raise TypeError(
                f"mask must be a bool array (True = keep the item), got dtype {ops.dtype_name(mask)}"
            )
    weights, per_item = _sample_weights(ops, sample_weight, y_pred, item_weights)
    mask = _dropped_items(ops, y_pred, y, mask, weights, per_item, item_weights, negative_labels, read_back)
    if item_weights and weights is not None:
        weights = ops.where(weights > 0, weights, 0.0)  # False for NaN too
    return ListBatch(ops=ops, scores=y_pred, labels=y, valid=mask, weights=weights, item_weights=per_item)


def _sample_weights(ops: Ops, sample_weight: Any, y_pred: Array, item_weights: bool) -> tuple[Any, Any]:
    """``(per-list weights, per-item weights)`` of :func:`list_batch` from ``sample_weight``
    (a scalar or ``(batch,)``: per list; with ``item_weights`` also ``(batch, num_items)``: per
    item, as given); either None."""
    weights = None
    per_item = None
    if sample_weight is not None:
        w = as_array(ops, sample_weight, "sample_weight", y_pred)
        if ops.is_bool(w) or not ops.is_numeric(w):
            raise TypeError(f"sample_weight must be numeric, got dtype {ops.dtype_name(w)}")
        shape = _shape(w)
        b = _shape(y_pred)[0]
        acc = ops.acc_dtype(y_pred)
        if shape == ():
            w = ops.zeros((b,), y_pred, acc) + ops.cast(w, acc)
        elif item_weights and len(shape) == 2:
            if not _same_shape(shape, _shape(y_pred)):
                raise ValueError(
                    "per-item sample_weight must have the shape of y_pred (batch, num_items) = "
                    f"{_shape(y_pred)}, got shape {shape}"
                )
            per_item = w  # as given: read where valid, cast where read (no full-size copy)
        elif not _same_shape(shape, (b,)):
            raise ValueError(
                f"sample_weight must be a scalar or have shape (batch,) = ({b},)"
                + (f" or (batch, num_items) = {_shape(y_pred)}" if item_weights else "")
                + f", got shape {shape}"
            )
        if per_item is None:
            weights = ops.cast(w, acc)
    return weights, per_item


def _dropped_items(
    ops: Ops, y_pred: Array, y: Array, mask: Any, weights: Any, per_item: Any, item_weights: bool,
    negative_labels: str, read_back: bool,
) -> Any:  # fmt: skip
    """The mask of :func:`list_batch` with keras-rs's drops: padding labels
    (``negative_labels="mask"``), lists of weight ``<= 0`` or NaN and items of per-item weight
    ``<= 0`` or NaN (``item_weights``); None where nothing is masked."""
    if negative_labels == "mask":
        # Padding: every label not >= 0 (negative, -inf and NaN, as keras-rs's `labels >= 0`).
        # One cheap read where reading is free: a smallest label >= 0 and a finite sum (no NaN)
        # mean no padding, and then no mask (a bool per label) is built.
        if not ops.is_bool(y):
            clean = read_back and ops.can_read(y)
            if clean and 0 not in _shape(y):
                clean = ops.host_bools((ops.amin(y) >= 0) & ops.isfinite(ops.sum(y)))[0]
            if not clean:
                keep = y >= 0
                mask = keep if mask is None else mask & keep
    if item_weights and weights is not None:
        keep = weights > 0  # False for NaN too
        mask = (ops.ones_bool(y_pred) if mask is None else mask) & keep[:, None]
    if per_item is not None:
        # Items of weight <= 0 or NaN are dropped. One cheap read where reading is free: a
        # smallest weight > 0 (NaN propagates) means none is, and then no mask is built.
        clean = read_back and ops.can_read(per_item)
        if clean and 0 not in _shape(per_item):
            clean = ops.host_bools(ops.amin(per_item) > 0)[0]
        if not clean:
            keep = per_item > 0  # False for NaN too
            mask = keep if mask is None else mask & keep
    return mask


def check_positive_ints(value: Any, name: str) -> list[int]:
    """``value`` as a sorted list of positive ints (an int or a non-empty list)."""
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, (list, tuple)) or len(items) == 0:
        raise ValueError(f"{name} must be a positive int or a non-empty list of them, got {value!r}")
    for k in items:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"{name} must be a positive int or a non-empty list of them, got {value!r}")
    return sorted(items)


def list_values_ok(
    ops: Ops,
    labels: Array,
    weights: Array | None,
    item_weights: Array | None,
    valid: Array | None = None,
    ws: Any = None,
) -> Array:
    """A 0-d bool, True when :func:`check_list_values` finds nothing bad in these values (labels
    0 on items not in the list): read back with the ranking's tie check, it spares the update a
    second read. False may be a false alarm (a sum of finite labels or weights overflowing); the
    full check decides then. ``item_weights`` as :class:`ListBatch` holds them (read where
    ``valid``): a finite sum of them over the lists' items (row sums tile by tile under a mask,
    no full-size temporary) means no ``+inf`` among them."""
    ok = ops.isfinite(ops.sum(labels))
    if weights is not None:
        ok = ok & ops.all(ops.isfinite(weights) & (weights >= 0))
    if item_weights is not None:
        rows = item_weights if valid is None else ops.masked_row_sums(item_weights, valid, ws)
        ok = ok & ops.isfinite(ops.sum(rows))
    return ok


def nan_summary(nan: np.ndarray, item: str = "item") -> str:
    """``"3 NaN scores (first at row 4, item 2 of a (16, 8) batch)"``: how many of the bool
    array ``nan`` are True and where the first is (row-major), or ``"NaN scores"`` if none."""
    count = int(np.count_nonzero(nan))
    if count == 0:
        return "NaN scores"
    first = [int(i) for i in np.unravel_index(int(np.argmax(nan.reshape(-1))), nan.shape)]
    at = (
        f"row {first[0]}, {item} {first[1]}"
        if nan.ndim == 2
        else f"{item} {first[0]}"
        if nan.ndim == 1
        else f"index {tuple(first)}"
    )
    return f"{count} NaN score{'s' if count != 1 else ''} (first at {at} of a {tuple(nan.shape)} batch)"


def nan_scores_error(
    ops: Ops, scores: Array, valid: Array | None, among: str, item: str = "item", name: str = "y_pred"
) -> ValueError:
    """The ``ValueError`` of NaN ``scores`` among the items ``valid`` (None: every item) of a
    batch, saying how many and where the first is (:func:`nan_summary`; ``among`` follows the
    count). Built on the error path only, once a check riding on an existing read found a NaN:
    it reads the batch back."""
    nan = np.isnan(np.asarray(ops.to_numpy(scores)))
    if valid is not None:
        nan &= np.asarray(ops.to_numpy(valid), dtype=bool)
    summary = nan_summary(nan, item).replace(" (", f" {among} (", 1) if among else nan_summary(nan, item)
    return ValueError(f"{name} contains {summary}; NaN scores are not ranked")


def check_list_values(sel: Any, batch: ListBatch, negative_labels: str = "keep") -> Array | None:
    """The value checks of a list batch (``sel`` a list metric's selection), which need the
    values: where they can be read back (``sel.ctx.read_back``) bad data raises
    ``ValueError`` naming the argument and ``None`` is returned; elsewhere nothing is read and
    the ``(B,)`` bool rows holding bad data are returned, for the caller to leave out of the
    sums and count.

    Bad data: NaN scores among a list's items; a per-list weight that is negative, NaN or
    infinite; a per-item weight of +inf; a NaN or infinite label on an item of the list (under
    ``negative_labels="mask"`` NaN and -inf labels are padding already). ``batch``: the whole
    batch ``sel`` selects from (or a block of rows of), where an error says NaN scores are."""
    ops = sel.ops
    w = sel.weights
    labels = sel.full_labels  # 0 on items not in the list
    if sel.nan_rows is None:  # the values were read back by the ranking: raise now
        if sel.has_nan:
            raise nan_scores_error(batch.ops, batch.scores, batch.valid, "among the items in the lists")
        if sel.values_ok:  # list_values_ok read True with the ranking's read: nothing is bad
            return None
        checks = [~ops.isfinite(ops.sum(labels))]  # cheap: a non-finite label makes it non-finite
        if w is not None:
            checks.append(ops.any(~ops.isfinite(w) | (w < 0)))
        if sel.batch_item_weights is not None:
            checks.append(ops.any(sel.full_item_weights == float("inf")))
        flags = ops.host_bools(ops.stack(checks))
        if flags[0] and ops.host_bools(ops.any(~ops.isfinite(labels)))[0]:
            bad = ops.to_numpy(labels)
            bad = bad[~np.isfinite(bad)]
            note = " (labels < 0, NaN and -inf are padding here)" if negative_labels == "mask" else ""
            raise ValueError(
                f"y must hold finite labels on the items of the lists, got {bad[:8].tolist()}{note}"
            )
        if w is not None and flags[1]:
            raise ValueError(
                "sample_weight must be finite and non-negative, got "
                f"{ops.to_numpy(w)[:8].tolist()}{'...' if w.shape[0] > 8 else ''}"
            )
        if sel.batch_item_weights is not None and flags[-1]:
            raise ValueError("sample_weight must be finite, got +inf among the per-item weights")
        return None
    bad_rows = ops.any(~ops.isfinite(labels), axis=1)
    if w is not None:
        bad_rows = bad_rows | ~ops.isfinite(w) | (w < 0)
    if sel.full_item_weights is not None:
        bad_rows = bad_rows | ops.any(sel.full_item_weights == float("inf"), axis=1)
    return sel.nan_rows | bad_rows


def check_k(k: Any, name: str = "k", allow_none: bool = True, hint: str = "") -> int | None:
    """A positive int (or None, the whole list, when ``allow_none``), else ``ValueError``
    (with ``hint`` appended)."""
    if k is None and allow_none:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        what = "a positive int or None (the whole list)" if allow_none else "a positive int"
        raise ValueError(f"{name} must be {what}, got {k!r}{hint}")
    return k


@dataclass
class RankBatch:
    """A validated batch: ``scores`` (B, N) floating; exactly one of ``target`` (B,) ints and
    ``labels`` (B, N); ``valid`` (B, N) bool or None; ``weights`` (B,) acc dtype or None."""

    ops: Ops
    scores: Array
    target: Array | None
    labels: Array | None
    valid: Array | None
    weights: Array | None


def rank_batch(
    y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ops: Ops | None = None
) -> RankBatch:
    """Check shapes and dtypes (no device read; values are checked in :func:`task_ranks`)."""
    ops = ops or get_ops(y_pred, y, mask, sample_weight)
    y_pred = as_array(ops, y_pred, "y_pred")
    y = as_array(ops, y, "y", y_pred)
    if len(y_pred.shape) != 2:
        raise ValueError(f"y_pred must be 2-D (batch, num_candidates), got shape {_shape(y_pred)}")
    if ops.is_bool(y_pred) or not ops.is_numeric(y_pred):
        raise TypeError(f"y_pred must hold real scores, got dtype {ops.dtype_name(y_pred)}")
    if not ops.is_floating(y_pred):
        y_pred = ops.cast(y_pred, ops.acc_dtype(y_pred))
    b, n = _shape(y_pred)[0], static_list_size(y_pred, "num_candidates")
    if n == 0 and b != 0:  # no row at all is a no-op
        raise ValueError(f"y_pred must have at least one candidate per row, got shape {_shape(y_pred)}")
    target = labels = None
    if _shape(y) == (b,):
        if ops.is_bool(y) or ops.is_floating(y) or not ops.is_numeric(y):
            raise TypeError(
                "y of shape (batch,) must hold integer indices of the true candidates, got dtype "
                f"{ops.dtype_name(y)} (for binary labels pass y of shape (batch, num_candidates))"
            )
        target = y
    elif _shape(y) == (b, n):
        if not ops.is_numeric(y):
            raise TypeError(f"y labels must be bool or numeric 0/1, got dtype {ops.dtype_name(y)}")
        labels = y
    else:
        raise ValueError(
            "y must be the indices of the true candidates, shape (batch,) = "
            f"({b},), or binary labels of the shape of y_pred {(b, n)}; got {_describe(y)}"
        )
    if mask is not None:
        mask = as_array(ops, mask, "mask", y_pred)
        if _shape(mask) != (b, n):
            raise ValueError(f"mask must have the shape of y_pred {(b, n)}, got {_shape(mask)}")
        if not ops.is_bool(mask):
            raise TypeError(
                "mask must be a bool array (True = the item is a candidate), got dtype "
                f"{ops.dtype_name(mask)}"
            )
    weights = None
    if sample_weight is not None:
        w = as_array(ops, sample_weight, "sample_weight", y_pred)
        if ops.is_bool(w) or not ops.is_numeric(w):
            raise TypeError(f"sample_weight must be numeric, got dtype {ops.dtype_name(w)}")
        acc = ops.acc_dtype(y_pred)
        if _shape(w) == ():
            w = ops.zeros((b,), y_pred, acc) + ops.cast(w, acc)
        elif _shape(w) != (b,):
            raise ValueError(
                f"sample_weight must be a scalar or have shape (batch,) = ({b},), got shape {_shape(w)}"
            )
        weights = ops.cast(w, acc)
    return RankBatch(ops=ops, scores=y_pred, target=target, labels=labels, valid=mask, weights=weights)
