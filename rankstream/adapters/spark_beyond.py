"""Beyond-accuracy metrics of a Spark DataFrame: :func:`beyond_accuracy`.

Three layouts:

* recommendations, as ALS's ``recommendForAllUsers`` writes them: one row per user with an
  array of structs ``(item, rating)`` in rank order (or a plain array of integer item ids);
* score rows, one row per list (``scores=``, ``query=None``): an array of ``N`` scores whose
  positions are the item ids ``0 .. N - 1`` (``rankstream.spark.evaluate``'s list layout), with
  an optional boolean array ``mask``; each partition ranks them with
  :meth:`~rankstream.core.beyond.stream.BeyondAccuracy.update_scores` (the tie policy's order);
* score rows, one row per item (``scores=`` a number, ``query=`` and ``item=`` columns, the
  item column holding the item id): Spark ranks each query's items (a window ordered by score
  descending, then item id ascending: ``ties="first"``), keeps the first ``max(top_k)`` and
  collects their ids in rank order. Rows with ``mask`` False are left out first.

Each partition runs :class:`~rankstream.core.beyond.stream.BeyondAccuracy` on its Arrow record
batches (``mapInArrow``) and emits one row, its flat sums; the driver adds the rows (one per
partition, each O(N) doubles per cut-off) and computes. Every field is a sum, so any
partitioning gives the one-process result. Bad data found on an executor (ids out of range or
repeated, NaN scores, score arrays not of length ``N``) raises a ``ValueError`` on the driver.
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
from pyspark.sql.window import Window

from rankstream.adapters.spark_arrow import SparkInputError, _flat, pad, raise_from_executor, sums_batch
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


def _checked(df: DataFrame, arg: str, name: Any, kinds: tuple[type, ...], array: bool) -> None:
    if not isinstance(name, str) or name not in df.columns:
        raise ValueError(f"{arg}={name!r} is not a column of the DataFrame {df.columns}")
    dtype = df.schema[name].dataType
    inner = dtype.elementType if array and isinstance(dtype, T.ArrayType) else dtype
    if isinstance(dtype, T.ArrayType) != array or not isinstance(inner, kinds):
        want = "an array column" if array else "a column"
        raise TypeError(f"{arg}={name!r} must be {want} of {kinds[0].__name__}, got {dtype.simpleString()}")


def _ranked_items(
    df: DataFrame, scores: str, mask: str | None, query: str, item: str, depth: int
) -> DataFrame:
    """One row per query: ``ids`` its best ``depth`` item ids in rank order (score descending,
    then item id ascending) and ``nan`` whether it holds a NaN score (Spark orders NaN above
    every number, so a NaN is among the kept rows)."""
    _checked(df, "scores", scores, (T.NumericType,), False)
    _checked(df, "item", item, (T.IntegralType,), False)
    if not isinstance(query, str) or query not in df.columns:
        raise ValueError(f"query={query!r} is not a column of the DataFrame {df.columns}")
    if mask is not None:
        _checked(df, "mask", mask, (T.BooleanType,), False)
        df = df.where(F.col(mask))
    order = Window.partitionBy(query).orderBy(F.col(scores).desc(), F.col(item).asc())
    score = F.col(scores).cast("double")
    top = df.select(query, item, score.alias("_s"), F.row_number().over(order).alias("_r"))
    top = top.where(F.col("_r") <= depth)
    grouped = top.groupBy(query).agg(
        F.sort_array(F.collect_list(F.struct("_r", F.col(item).cast("long").alias("_i")))).alias("_l"),
        F.max(F.isnan("_s")).alias("nan"),
    )
    return grouped.select(F.transform("_l", lambda x: x["_i"]).alias("ids"), "nan")


def _score_part(items: ItemData, chosen: Any, ks: Any, ties: str, seed: Any, mask: bool) -> Any:
    """The ``mapInArrow`` function of one row per list: each batch's score arrays (and mask
    arrays) as ``(rows, N)``, ranked by ``update_scores``; one row of sums per partition."""
    n = items.num_items

    def partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = BeyondAccuracy(items, chosen, ks, ties=ties, seed=seed)
        for batch in batches:
            if not batch.num_rows:
                continue
            values, lengths = _flat(batch, "scores")
            if np.any(lengths != n):
                bad = int(lengths[lengths != n][0])
                raise SparkInputError(f"each scores array must hold N = {n} scores (one per item), got {bad}")
            kept = _flat(batch, "mask")[0].reshape(-1, n).astype(bool) if mask else None
            try:
                part.update_scores(values.astype(np.float64).reshape(-1, n), kept)
            except ValueError as exc:
                raise SparkInputError(str(exc)) from exc
        yield sums_batch(np.concatenate([part.state[name].reshape(-1) for name in part.fields]))

    return partition


def _ids_part(items: ItemData, chosen: Any, ks: Any) -> Any:
    """The ``mapInArrow`` function of one array of ids per row (``nan``: a flag per row)."""

    def partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = BeyondAccuracy(items, chosen, ks)
        for batch in batches:
            if not batch.num_rows:
                continue
            if "nan" in batch.schema.names and pc.any(batch.column("nan")).as_py():
                raise SparkInputError("the scores hold NaN (a query's ranking is undefined)")
            try:
                part.update(_batch_ids(batch))
            except ValueError as exc:
                raise SparkInputError(str(exc)) from exc
        yield sums_batch(np.concatenate([part.state[name].reshape(-1) for name in part.fields]))

    return partition


def beyond_accuracy(
    df: DataFrame,
    items: ItemData,
    metrics: Sequence[str] | None = None,
    top_k: int | list[int] = 10,
    *,
    recommendations: str = "recommendations",
    item: str = "item",
    scores: str | None = None,
    mask: str | None = None,
    query: str | None = None,
    ties: str = "first",
    seed: int | None = None,
) -> BeyondAccuracy:
    """The :class:`~rankstream.core.beyond.stream.BeyondAccuracy` of every list of ``df`` (its
    ``compute()`` gives ``{"coverage@10": ..., ...}``; merge it with others). The layouts: the
    module docstring.

    Args:
        df: one row per user (recommendations, or an array of scores), or one row per item.
        items: the catalog's :class:`~rankstream.core.beyond.items.ItemData`.
        metrics, top_k: as :class:`~rankstream.core.beyond.stream.BeyondAccuracy`'s.
        recommendations: the column of arrays, of structs (``item`` their id field) or of ids
            (read when ``scores`` is None).
        item: the id field of the structs; with ``query``, the column of item ids.
        scores: None (recommendations), an array column of ``N`` scores per list, or with
            ``query`` a numeric column (one score per item).
        mask: None or a boolean column (arrays per list, or per item): False leaves an item out.
        query: None (one row per list) or the column naming each item's query.
        ties: one row per list: ``"first"``, ``"random"`` (with ``seed``) or ``"expected"``
            (``update_scores``); one row per item: ``"first"`` only.
        seed: the seed of random tie orders.
    """
    meter = BeyondAccuracy(items, metrics, top_k, ties=ties, seed=seed)
    fields, chosen, ks = meter.fields, meter.metrics, meter.top_k
    if scores is None:
        frame, part = df.select(_ids_column(df, recommendations, item)), _ids_part(items, chosen, ks)
    elif query is None:
        _checked(df, "scores", scores, (T.NumericType,), True)
        cols = [F.col(scores).cast("array<double>").alias("scores")]
        if mask is not None:
            _checked(df, "mask", mask, (T.BooleanType,), True)
            cols.append(F.col(mask).alias("mask"))
        frame, part = df.select(*cols), _score_part(items, chosen, ks, ties, seed, mask is not None)
    else:
        if ties != "first":
            raise ValueError(f"one row per item (query={query!r}) ranks with ties='first', got ties={ties!r}")
        frame = _ranked_items(df, scores, mask, query, item, max(ks))
        part = _ids_part(items, chosen, ks)
    try:
        rows = frame.mapInArrow(part, "sums array<double>").collect()
    except Exception as exc:  # Spark wraps what a worker raised: bad data is a ValueError
        raise_from_executor(exc)
        raise
    total = np.sum([np.asarray(row.sums, dtype=np.float64) for row in rows], axis=0)
    meter.merge(split_flat(total, fields))
    return meter
