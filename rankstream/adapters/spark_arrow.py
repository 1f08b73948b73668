"""The executor side of :mod:`rankstream.spark`: Arrow record batches to padded numpy arrays,
and one partition's sums.

Everything here runs inside Spark's Python workers (``mapInArrow``) and imports pyarrow and
numpy only: no pyspark, so it is as cheap to ship as the core it calls. A batch of lists of
ragged length is padded to the batch's longest list with a mask, from the Arrow list offsets
(``list_value_length`` and one flat copy of the values): no Python loop over rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankstream.core.state import State

#: the prefix of every error raised on an executor, so the driver can find it in Spark's
#: wrapped exception and raise it again as the ``ValueError`` it was
ERROR_MARK = "rankstream.spark:"


def raise_from_executor(exc: Exception) -> None:
    """On the driver: raise the ``ValueError`` an executor raised on bad data (Spark wraps it,
    the message holds :data:`ERROR_MARK`), if it was one."""
    found = re.search(re.escape(ERROR_MARK) + r" ?(.*)", str(exc))
    if found:
        raise ValueError(f"{ERROR_MARK} {found.group(1).strip()}") from exc


class SparkInputError(ValueError):
    """Bad data found on an executor (the message starts with :data:`ERROR_MARK`)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{ERROR_MARK} {message}")


@dataclass(frozen=True)
class Columns:
    """Where one list's parts are in a record batch (the names of the columns ``mapInArrow``
    gets) and how the labels read: ``rank_labels`` for the rank report (the true candidate's
    index per list: an integer column, or, from one row per item, the one item labelled > 0)."""

    scores: str
    labels: str
    mask: str | None = None
    weight: str | None = None
    weight_max: str | None = None  # one row per item: the query's largest weight (must equal weight)
    rank_labels: bool = False
    labels_are_lists: bool = True


def _flat(batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(values, lengths)`` of a list column: the flat values of every row, in row order, and
    each row's length. A null list, or a null inside one, is a :class:`SparkInputError`."""
    column = batch.column(name)
    if column.null_count:
        raise SparkInputError(
            f"column {name!r} holds {column.null_count} null array(s); give every row an array"
        )
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = column.flatten()  # the values of the (possibly sliced) rows only
    if flat.null_count:
        raise SparkInputError(f"column {name!r} holds {flat.null_count} null element(s) inside its arrays")
    return flat.to_numpy(zero_copy_only=False), lengths


def _scalar(batch: pa.RecordBatch, name: str) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        raise SparkInputError(f"column {name!r} holds {column.null_count} null value(s)")
    return column.to_numpy(zero_copy_only=False)


def pad(values: np.ndarray, lengths: np.ndarray, width: int, fill: Any) -> np.ndarray:
    """``(rows, width)``: row ``i`` holds its ``lengths[i]`` values, then ``fill``."""
    rows = lengths.shape[0]
    if rows and int(lengths.min()) == width:  # every list is as long as the longest: a view
        return values.reshape(rows, width)
    out = np.full((rows, width), fill, dtype=values.dtype)
    out[np.arange(width)[None, :] < lengths[:, None]] = values
    return out


def _check_rows(bad: np.ndarray, message: Callable[[int, int], str]) -> None:
    """A :class:`SparkInputError` with ``message(rows, first)`` where any row is flagged in the
    bool array ``bad`` (``rows`` flagged, ``first`` the first of them)."""
    rows = np.flatnonzero(bad)
    if rows.size:
        raise SparkInputError(message(int(rows.size), int(rows[0])))


def _rank_labels(labels: np.ndarray, mask: np.ndarray | None, cols: Columns) -> np.ndarray:
    """The rank report's labels: the true candidate's index per list (an integer column, or
    from one row per item the one item labelled > 0)."""
    if not cols.labels_are_lists:
        if not np.issubdtype(labels.dtype, np.integer):
            raise SparkInputError(
                f"column {cols.labels!r} must hold the true candidate's index (integers), got {labels.dtype}"
            )
        return labels
    positive = labels > 0 if mask is None else (labels > 0) & mask
    count = positive.sum(axis=1)
    _check_rows(
        count != 1,
        lambda n, i: (
            f"the rank report reads one true item per query, labelled > 0 in column "
            f"{cols.labels!r}; {n} query(ies) have another number, the first has {int(count[i])}"
        ),
    )
    return positive.argmax(axis=1)


def _weight(batch: pa.RecordBatch, cols: Columns) -> np.ndarray | None:
    """One weight per list, or None; with one row per item the same on every item of a query."""
    if cols.weight is None:
        return None
    weight = _scalar(batch, cols.weight).astype(np.float64, copy=False)
    if cols.weight_max is not None:
        top = _scalar(batch, cols.weight_max).astype(np.float64, copy=False)
        _check_rows(
            top != weight,
            lambda n, i: (
                f"column {cols.weight!r} is one weight per query: it must be the same on every "
                f"item of a query; {n} query(ies) differ, one has weights from "
                f"{float(weight[i])!r} to {float(top[i])!r}"
            ),
        )
    return weight


def batch_arrays(batch: pa.RecordBatch, cols: Columns) -> tuple[Any, ...] | None:
    """``(scores, labels, mask, weight)`` of one record batch as the core reads them
    (``(lists, width)`` arrays, ``mask`` None when every list is full and no mask column is
    given), or None when the batch holds no item."""
    scores, lengths = _flat(batch, cols.scores)
    if lengths.shape[0] == 0 or int(lengths.max()) == 0:
        return None
    width = int(lengths.max())

    def same_lengths(name: str, other: np.ndarray) -> None:
        _check_rows(
            other != lengths,
            lambda n, i: (
                f"columns {cols.scores!r} and {name!r} must hold arrays of the same length in "
                f"every row; {n} row(s) differ, the first has {int(lengths[i])} scores and "
                f"{int(other[i])} {name!r} values"
            ),
        )

    full = int(lengths.min()) == width
    mask = None if full else np.arange(width)[None, :] < lengths[:, None]
    if cols.mask is not None:
        given, mask_lengths = _flat(batch, cols.mask)
        same_lengths(cols.mask, mask_lengths)
        if given.dtype != np.bool_:
            raise SparkInputError(f"column {cols.mask!r} must hold arrays of booleans, got {given.dtype}")
        given = pad(given, lengths, width, False)
        mask = given if mask is None else mask & given
    if cols.labels_are_lists:
        labels, label_lengths = _flat(batch, cols.labels)
        same_lengths(cols.labels, label_lengths)
        labels = pad(labels.astype(np.float64, copy=False), lengths, width, 0.0)
    else:
        labels = _scalar(batch, cols.labels)
    if cols.rank_labels:
        labels = _rank_labels(labels, mask, cols)
    return pad(scores, lengths, width, 0.0), labels, mask, _weight(batch, cols)


def partition_sums(kernel: Any, cols: Columns, batches: Iterator[pa.RecordBatch]) -> np.ndarray:
    """The flat sums (fields in the kernel's order) of one partition's record batches: one
    :class:`~rankstream.core.state.State` per partition, updated once per batch (the core's
    vectorised ``batch_sums`` on numpy). A partition without a list gives zeros."""
    state = State(kernel)
    for batch in batches:
        arrays = batch_arrays(batch, cols)
        if arrays is None:
            continue
        scores, labels, mask, weight = arrays
        try:
            state.update(scores, labels, mask=mask, sample_weight=weight)
        except (ValueError, TypeError) as exc:
            raise SparkInputError(f"{type(exc).__name__}: {exc}") from exc
    return np.concatenate([state.sums[name].reshape(-1) for name in kernel.fields])


def sums_batch(flat: np.ndarray) -> pa.RecordBatch:
    """One record batch of one row: the flat sums as one ``array<double>`` (a kernel may have
    thousands of sums: the rank report with its median histogram per rank type)."""
    values = pa.array(np.asarray(flat, dtype=np.float64))
    sums = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)
    return pa.RecordBatch.from_arrays([sums], names=["sums"])


def mapper(kernel: Any, cols: Columns) -> Any:
    """The ``mapInArrow`` function: one row of sums per partition (zeros for an empty one)."""

    def sums_of_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield sums_batch(partition_sums(kernel, cols, batches))

    return sums_of_partition
