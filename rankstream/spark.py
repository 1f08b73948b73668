"""rankstream on Spark: evaluate a DataFrame of ranked lists with any core metric.

A metric's state is a bag of sums, so Spark can compute it::

    from rankstream import ListMetrics
    from rankstream.spark import evaluate

    evaluate(df, ["ndcg@10", "map@10", "recall@20"])   # {"ndcg@10": ..., ...}
    evaluate(df, NDCGKernel([5, 10]), weight="w")       # [nDCG@5, nDCG@10]
    evaluate(items, ["mrr@10"], query="user_id", scores="score", labels="clicked")

* Every partition runs the core's vectorised ``batch_sums`` (numpy) on its Arrow record batches
  (``DataFrame.mapInArrow``) and emits ONE row: the partition's sums of the metric's state
  fields, flattened to one ``array<double>``.
* Spark sums those rows element by element (``posexplode``, ``groupBy``, ``sum``: Spark's own
  partial and final aggregation), and the driver runs the metric's ``compute`` on the total.
  The result is what ``State(kernel).update(...).compute()`` gives in one process on the same
  lists (to float rounding), for any number of partitions and record batches.
* The partial sums are a stage's output, not an accumulator: when Spark retries a failed task,
  the retried attempt's row replaces the failed one's, so nothing is counted twice.
* Before the first job on a session, one tiny probe job checks that Spark's Python workers have
  numpy, pyarrow and the driver's rankstream (:class:`SparkWorkerError` says what is missing in
  which Python, and how ``PYSPARK_PYTHON`` / ``spark.pyspark.python`` choose it).

Input shapes:

* one row per query (``query=None``): ``scores`` and ``labels`` are array columns of the same
  length in each row (ragged across rows: each Arrow batch is padded to its longest list with a
  mask), ``mask`` an optional array of booleans (False: not in the list), ``weight`` an optional
  numeric column, one weight per list;
* one row per (query, item) (``query="col"``): ``scores``, ``labels`` and ``mask`` are scalar
  columns; Spark groups the rows by ``query`` (``groupBy`` + ``collect_list`` of structs, sorted
  by ``item`` when given, else by decreasing score and, among equal scores, increasing label:
  the pessimistic tie order, so the result does not depend on the shuffle); ``weight`` must be
  the same on every item of a query.

The metric: a list kernel (``NDCGKernel(10)``), a :class:`~rankstream.ListMetrics`, metric
names (``["ndcg@10", "map"]``, a ``ListMetrics`` under ``conventions``) or the rank report
(:class:`~rankstream.core.ranks.kernel.RankKernel`; ``labels`` is then the true candidate's
index, an integer column, or with one row per item the one item labelled > 0).

``conventions="spark_mllib"`` builds the names with the settings that reproduce
``pyspark.mllib.evaluation.RankingMetrics`` and ``pyspark.ml.evaluation.RankingEvaluator``
(see :func:`spark_mllib_metrics` and docs/spark.md).

:func:`beyond_accuracy` reads a DataFrame of recommendations as ALS's ``recommendForAllUsers``
writes them, or of score rows (arrays of one score per item, or one row per item with
``query`` and ``item``) (coverage, novelty, diversity, personalization, ...;
docs/beyond_accuracy.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from rankstream.adapters.requirements import install_hint, require

try:
    import pyspark
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"rankstream.spark needs pyspark and pyarrow; install them with: {install_hint('spark')}"
    ) from exc

from rankstream.adapters.spark_arrow import Columns, mapper, raise_from_executor
from rankstream.adapters.spark_beyond import beyond_accuracy
from rankstream.adapters.spark_workers import SparkWorkerError, check_workers
from rankstream.core.lists.base import ListKernel
from rankstream.core.lists.collection import ListMetrics
from rankstream.core.ranks.kernel import RankKernel
from rankstream.core.state import State, flat_size, split_flat

require("rankstream.spark", "pyspark", pyspark.__version__, "3.5", "spark", "DataFrame.mapInArrow")

__all__ = [
    "CONVENTIONS",
    "RANKING_EVALUATOR_NAMES",
    "SparkWorkerError",
    "beyond_accuracy",
    "binary_gain",
    "evaluate",
    "evaluate_state",
    "spark_mllib_metrics",
]

#: the ``conventions`` of metric names: rankstream's defaults, or those of Spark's
#: ``RankingMetrics`` / ``RankingEvaluator`` (binary nDCG), or ``RankingMetrics`` given
#: relevance values (graded nDCG, gain ``2^rel - 1``)
CONVENTIONS = ("rankstream", "spark_mllib", "spark_mllib_relevance")

#: ``RankingEvaluator``'s ``metricName`` -> the rankstream name (``{k}``: its ``k`` param);
#: ``RankingMetrics``'s methods: ``precisionAt(k)``, ``recallAt(k)``, ``meanAveragePrecisionAt(k)``,
#: ``meanAveragePrecision``, ``ndcgAt(k)`` are the same five
RANKING_EVALUATOR_NAMES = {
    "precisionAtK": "precision@{k}",
    "recallAtK": "recall@{k}",
    "meanAveragePrecisionAtK": "map@{k}",
    "meanAveragePrecision": "map",
    "ndcgAtK": "ndcg@{k}",
}


def binary_gain(y: Any) -> Any:
    """The gain of Spark's binary nDCG: 1 for a relevant item (``label > 0``), else 0."""
    return (y > 0) * 1.0


def spark_mllib_metrics(metrics: Sequence[str], *, relevance: bool = False) -> ListMetrics:
    """A :class:`~rankstream.ListMetrics` of ``metrics`` (names) under Spark MLlib's conventions.

    With ``pred`` the items in decreasing score (ties: earlier first) and ``lab`` the items with a
    label > 0, these equal ``RankingMetrics`` on ``(pred, lab)`` (``relevance=False``, and
    ``RankingEvaluator``) or on ``(pred, lab, rel)`` with ``lab`` in decreasing relevance and
    ``rel`` the labels (``relevance=True``):

    * every list counts, a list without a relevant item as 0 (``empty="zero"``; Spark logs
      "Empty ground truth set");
    * relevant means ``label > 0`` (``relevance_threshold=None`` for every metric);
    * ``precision@k = hits@k / k`` (``denominator="k"``, also for a list shorter than k);
    * ``map@k``: ``sum_{j <= k} rel_j P@j / min(R, k)``; ``map`` (no k): ``/ R``;
    * ``ndcg@k``: ``DCG@k / IDCG@k`` with discount ``1 / log(j + 1)`` and gain 1 for a relevant
      item (:func:`binary_gain`), or ``2^rel - 1`` with ``relevance=True``;
    * ``recall@k = hits@k / R``.

    Names Spark lacks (``mrr``, ``hit_rate``, ``dcg``, ``r_precision``) take the same
    ``empty`` and relevance settings."""
    if isinstance(metrics, str) or not isinstance(metrics, Sequence):
        raise TypeError(f"metrics must be a list of metric names, got {metrics!r}")
    defaults = {
        "precision": {"denominator": "k"},
        "map": {"denominator": "min"},
        "ndcg": {"gain": "exp_rank" if relevance else binary_gain},
    }
    return ListMetrics(list(metrics), defaults, empty="zero", relevance_threshold=None)


def _kernel(metric: Any, conventions: str) -> Any:
    if conventions not in CONVENTIONS:
        raise ValueError(f"conventions must be one of {CONVENTIONS}, got {conventions!r}")
    if isinstance(metric, str):
        metric = [metric]
    if isinstance(metric, Sequence) and all(isinstance(m, str) for m in metric):
        if conventions == "rankstream":
            return ListMetrics(list(metric))
        return spark_mllib_metrics(metric, relevance=conventions == "spark_mllib_relevance")
    if conventions != "rankstream":
        raise ValueError(
            f"conventions={conventions!r} builds metrics from names (e.g. ['ndcg@10', 'map']); a "
            f"kernel carries its own settings, got {metric!r}"
        )
    if isinstance(metric, RankKernel):
        if metric.sides is not None:
            raise ValueError(
                f"rankstream.spark evaluates a rank report without sides, got sides={metric.sides!r}"
            )
        return metric
    if isinstance(metric, (ListKernel, ListMetrics)):
        return metric
    if all(hasattr(metric, a) for a in ("fields", "batch_sums", "compute", "finalize", "runtime")):
        return metric  # any other core kernel reading (scores, labels, mask, weight) batches
    raise TypeError(
        f"metric must be a list kernel, a ListMetrics, metric names or a RankKernel, got {metric!r}"
    )


def _column(df: DataFrame, arg: str, name: Any) -> T.DataType:
    if not isinstance(name, str):
        raise TypeError(f"{arg} must be a column name (str), got {name!r}")
    types = {f.name: f.dataType for f in df.schema.fields}
    if name not in types:
        raise ValueError(f"{arg}={name!r} is not a column of the DataFrame; its columns are {df.columns}")
    return types[name]


def _check_type(arg: str, name: str, dtype: T.DataType, want: str, array: bool) -> None:
    kinds = {
        "numeric": (T.NumericType,),
        "integer": (T.IntegralType,),
        "boolean": (T.BooleanType,),
    }[want]
    inner = dtype.elementType if array and isinstance(dtype, T.ArrayType) else dtype
    ok = isinstance(dtype, T.ArrayType) == array and isinstance(inner, kinds)
    if not ok:
        shape = f"an array of {want} values" if array else f"a {want} column"
        raise TypeError(f"{arg}={name!r} must be {shape}, got {dtype.simpleString()}")


def _lists(
    df: DataFrame,
    rank: bool,
    scores: str,
    labels: str,
    mask: str | None,
    weight: str | None,
    query: str | None,
    item: str | None,
) -> tuple[DataFrame, Columns]:
    """The DataFrame of one row per list and where its parts are, after checking the columns
    (no Spark job runs here)."""
    args = {"scores": scores, "labels": labels, "mask": mask, "weight": weight, "query": query, "item": item}
    dtypes = {arg: _column(df, arg, name) for arg, name in args.items() if name is not None}
    by_list = query is None
    if by_list and item is not None:
        raise ValueError(f"item={item!r} orders the items of a query: it needs query (one row per item)")
    _check_type("scores", scores, dtypes["scores"], "numeric", by_list)
    if rank and by_list:
        _check_type("labels", labels, dtypes["labels"], "integer", False)
    else:
        _check_type("labels", labels, dtypes["labels"], "numeric", by_list)
    if mask is not None:
        _check_type("mask", mask, dtypes["mask"], "boolean", by_list)
    if weight is not None:
        _check_type("weight", weight, dtypes["weight"], "numeric", False)
    if by_list:
        cols = Columns(scores, labels, mask, weight, rank_labels=rank, labels_are_lists=not rank)
        return df.select(*[c for c in (scores, labels, mask, weight) if c is not None]), cols
    # one row per item: group by query, items sorted (by item, else score down and label up)
    key = [F.col(item)] if item is not None else [-F.col(scores), F.col(labels)]
    parts = [k.alias(f"_k{i}") for i, k in enumerate(key)]
    parts += [F.col(scores).alias("_s"), F.col(labels).cast("double").alias("_y")]
    if mask is not None:
        parts.append(F.col(mask).alias("_m"))
    aggs = [F.array_sort(F.collect_list(F.struct(*parts))).alias("_items")]
    if weight is not None:
        aggs += [F.min(weight).cast("double").alias("_w"), F.max(weight).cast("double").alias("_wmax")]
    grouped = df.groupBy(query).agg(*aggs)
    out = [F.col("_items._s").alias("_s"), F.col("_items._y").alias("_y")]
    if mask is not None:
        out.append(F.col("_items._m").alias("_m"))
    if weight is not None:
        out += [F.col("_w"), F.col("_wmax")]
    cols = Columns(
        "_s",
        "_y",
        "_m" if mask is not None else None,
        "_w" if weight is not None else None,
        weight_max="_wmax" if weight is not None else None,
        rank_labels=rank,
    )
    return grouped.select(*out), cols


def evaluate_state(
    df: DataFrame,
    metric: Any,
    *,
    scores: str = "scores",
    labels: str = "labels",
    mask: str | None = None,
    weight: str | None = None,
    query: str | None = None,
    item: str | None = None,
    conventions: str = "rankstream",
) -> State:
    """The :class:`~rankstream.State` of ``metric`` over every list of ``df``: the sums of each
    partition (``mapInArrow``, the core on Arrow batches) summed by Spark (one job: the partition
    sums, then their element-wise sum; with ``query``, the grouping's shuffle first). Merge it
    with other states, save it (``state_dict()``) or ``compute()`` it. Arguments as
    :func:`evaluate`."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"df must be a pyspark.sql.DataFrame, got {type(df).__name__}")
    kernel = _kernel(metric, conventions)
    lists, cols = _lists(df, isinstance(kernel, RankKernel), scores, labels, mask, weight, query, item)
    check_workers(df.sparkSession)  # once per session: can its Python workers run the job?
    partials = lists.mapInArrow(mapper(kernel, cols), "sums array<double>")  # one row per partition
    # Spark sums the rows element by element: partial sums per partition, then one per element
    total = partials.select(F.posexplode("sums").alias("i", "v")).groupBy("i").agg(F.sum("v").alias("v"))
    try:
        rows = total.collect()
    except Exception as exc:  # Spark wraps what a worker raised; bad data is a ValueError
        raise_from_executor(exc)
        raise
    flat = np.zeros(flat_size(kernel.fields), dtype=np.float64)  # no partition: every sum 0
    for row in rows:
        flat[row["i"]] = row["v"]
    return State(kernel, split_flat(flat, kernel.fields))


def evaluate(df: DataFrame, metric: Any, **columns: Any) -> Any:
    """``metric`` over every list of ``df``, as ``State(kernel).compute()`` gives it.

    Args:
        df: a Spark DataFrame, one row per list (``query=None``) or one row per item.
        metric: a list kernel, a :class:`~rankstream.ListMetrics`, a metric name or list of
            names (``"ndcg@10"``, ...: a ``ListMetrics`` under ``conventions``), or a
            :class:`~rankstream.core.ranks.kernel.RankKernel` (the rank report, without sides).
        scores: the scores' column (an array per list, or a number per item).
        labels: the labels' column (likewise); for the rank report, one row per list: the true
            candidate's index (an integer column); one row per item: the true item is the one
            labelled > 0.
        mask: None, or a boolean column (arrays per list, or per item): False leaves an item out
            of its list.
        weight: None, or a numeric column: one weight per list (with ``query``, equal on every
            item of the query).
        query: None (one row per list), or the column naming each item's query (Spark groups
            the items of each query into one list).
        item: with ``query``, the column ordering the items of a query (ties under
            ``ties="first"`` rank the smaller first); None: decreasing score, then increasing label.
        conventions: for metric names, ``"rankstream"`` (the core's defaults), ``"spark_mllib"``
            (``RankingMetrics`` / ``RankingEvaluator``, binary nDCG) or
            ``"spark_mllib_relevance"`` (``RankingMetrics`` with relevance values); see
            :func:`spark_mllib_metrics`.

    Raises ``ValueError`` for a missing column or bad data found on an executor (the message
    names it; Spark retries the task first), ``TypeError`` for a column of the wrong type,
    :class:`SparkWorkerError` when Spark's Python workers lack numpy, pyarrow or rankstream (or
    run another rankstream version, or do not start; checked once per session, before the first
    job), and :class:`~rankstream.NotComputableError` when no list counts."""
    try:  # a wrong argument is reported as evaluate()'s, not evaluate_state()'s
        inspect.signature(evaluate).bind(df, metric, **columns)
    except TypeError as exc:
        raise TypeError(f"evaluate(): {exc}") from None
    return evaluate_state(df, metric, **columns).compute()


# evaluate takes evaluate_state's arguments, named once there (its explicit signature)
evaluate.__signature__ = inspect.signature(evaluate_state).replace(  # type: ignore[attr-defined]
    return_annotation="Any"
)
