"""Beyond-accuracy metrics of a Spark DataFrame of recommendations: :func:`beyond_accuracy`.

The input is what ALS's ``recommendForAllUsers`` writes: one row per user with an array of
structs ``(item, rating)`` in rank order (or a plain array of integer item ids). Each partition
runs :class:`~rankstream.core.beyond.stream.BeyondAccuracy` on its Arrow record batches
(``mapInArrow``: the arrays padded with -1 to the batch's longest) and emits one row, its flat
sums; the driver adds the rows (one per partition, each O(N) doubles per cut-off) and computes.
Every field is a sum, so any partitioning gives the one-process result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rankstream.adapters.spark_arrow import pad, sums_batch
from rankstream.core.beyond.items import ItemData
from rankstream.core.beyond.stream import BeyondAccuracy
from rankstream.core.state import split_flat

__all__ = ["beyond_accuracy"]


def _ids_column(df: DataFrame, recommendations: str, item: str) -> Any:
    """The recommendations as an ``array<long>`` column of item ids."""
    if recommendations not in df.columns:
        raise ValueError(f"recommendations={recommendations!r} is not a column of the DataFrame {df.columns}")
    dtype = df.schema[recommendations].dataType
    element = dtype.elementType if isinstance(dtype, T.ArrayType) else None
    if isinstance(element, T.StructType) and item in element.fieldNames():
        column = F.transform(F.col(recommendations), lambda x: x[item])
    elif isinstance(element, (T.IntegerType, T.LongType, T.ShortType)):
        column = F.col(recommendations)
    else:
        raise TypeError(
            f"column {recommendations!r} must be an array of integer item ids or of structs with the "
            f"field {item!r} (ALS's recommendForAllUsers), got {dtype.simpleString()}"
        )
    return column.cast("array<long>").alias("ids")


def _batch_ids(batch: pa.RecordBatch) -> np.ndarray:
    """One record batch's arrays as ``(rows, longest)`` ids, -1 past each array's end (a null
    array is an empty list)."""
    column = batch.column(0)
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":  # null ids inside an array: not an item
        raise ValueError("the recommendations hold null item ids inside their arrays")
    width = int(lengths.max()) if lengths.size else 0
    return pad(values.astype(np.int64), lengths.astype(np.int64), width, -1)


def beyond_accuracy(
    df: DataFrame,
    items: ItemData,
    metrics: Sequence[str] | None = None,
    top_k: int | list[int] = 10,
    *,
    recommendations: str = "recommendations",
    item: str = "item",
) -> BeyondAccuracy:
    """The :class:`~rankstream.core.beyond.stream.BeyondAccuracy` of every row's list of
    recommendations (its ``compute()`` gives ``{"coverage@10": ..., ...}``; merge it with others).

    Args:
        df: one row per user.
        items: the catalog's :class:`~rankstream.core.beyond.items.ItemData`.
        metrics, top_k: as :class:`~rankstream.core.beyond.stream.BeyondAccuracy`'s.
        recommendations: the column of arrays, of structs (``item`` their id field) or of ids.
        item: the id field of the structs.
    """
    meter = BeyondAccuracy(items, metrics, top_k)
    fields = meter.fields
    ids = df.select(_ids_column(df, recommendations, item))
    chosen, ks = meter.metrics, meter.top_k

    def partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = BeyondAccuracy(items, chosen, ks)
        for batch in batches:
            if batch.num_rows:
                part.update(_batch_ids(batch))
        state = part.state
        yield sums_batch(np.concatenate([state[name].reshape(-1) for name in fields]))

    rows = ids.mapInArrow(partition, "sums array<double>").collect()
    total = np.sum([np.asarray(row.sums, dtype=np.float64) for row in rows], axis=0)
    meter.merge(split_flat(total, fields))
    return meter
