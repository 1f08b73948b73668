"""`make bench-spark`: rankstream on Spark against Spark's RankingMetrics and RankingEvaluator.

A log of ``--queries`` queries (1,000,000 by default) x ``--candidates`` candidates (100) is
written as Parquet and read by a local session (``local[2]``). On it, in one run:

* rankstream: ``evaluate(df, names, conventions="spark_mllib")`` with five metrics (nDCG, MAP,
  precision, recall, MRR) at three k (1, 5, 10): 15 values from ONE pass over the data;
* Spark's ``pyspark.mllib.evaluation.RankingMetrics`` as its documentation shows it: an RDD of
  (predicted ids, relevant ids) pairs from the DataFrame, then ``precisionAt``, ``recallAt``,
  ``meanAveragePrecisionAt`` and ``ndcgAt`` at 1, 5 and 10 (12 values; each call is one Spark
  job over the pairs, which travel through Python: the RDD API);
* Spark's ``pyspark.ml.evaluation.RankingEvaluator`` (the same JVM code on the DataFrame, no
  Python) for the same 12 values, one pass each: the fastest thing Spark offers;
* the in-process core: ``State(ListMetrics(...)).update`` on the same lists as numpy arrays,
  on one core, for the cost per query that Spark adds.

The shared values are checked equal (1e-9). Prints one markdown table (RankingMetrics takes about
20 minutes at the default size on two cores). ``--queries 50000`` for a
quick run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

KS = (1, 5, 10)
OURS = [f"{m}@{k}" for m in ("ndcg", "map", "precision", "recall", "mrr") for k in KS]
RANKING_METRICS_CALLS = {
    "precisionAtK": "precisionAt",
    "recallAtK": "recallAt",
    "meanAveragePrecisionAtK": "meanAveragePrecisionAt",
    "ndcgAtK": "ndcgAt",
}
EVALUATOR = [
    (metric, k) for metric in ("precisionAtK", "recallAtK", "meanAveragePrecisionAtK", "ndcgAtK") for k in KS
]


def chunk_arrays(rng: np.random.Generator, rows: int, candidates: int) -> tuple[np.ndarray, ...]:
    """Scores (2 decimals: some ties), clicks, and Spark's view: ids by decreasing score (ties:
    the earlier first) and the clicked ids."""
    relevance = rng.normal(size=(rows, candidates))
    scores = np.round(relevance + rng.normal(scale=1.5, size=relevance.shape), 2)
    labels = (rng.random(relevance.shape) < 0.02 * np.exp(relevance)).astype(np.float64)
    order = np.argsort(-scores, axis=1, kind="stable").astype(np.float64)
    return scores, labels, order


def lists(values: np.ndarray, keep: np.ndarray | None = None) -> pa.ListArray:
    keep = np.ones(values.shape, bool) if keep is None else keep
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[keep]))


def write_log(path: str, queries: int, candidates: int, chunk: int = 50_000) -> None:
    rng = np.random.default_rng(0)
    ids = np.arange(candidates, dtype=np.float64)
    writer = None
    for start in range(0, queries, chunk):
        scores, labels, order = chunk_arrays(rng, min(chunk, queries - start), candidates)
        table = pa.table(
            {
                "scores": lists(scores),
                "labels": lists(labels),
                "prediction": lists(order),
                "truth": lists(np.broadcast_to(ids, labels.shape), labels > 0),
            }
        )
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def core_seconds_per_query(kernel, candidates: int, queries: int = 100_000, batch: int = 10_000) -> float:
    """The in-process core on the same kind of lists, one thread: seconds per query."""
    from rankstream import State

    rng = np.random.default_rng(1)
    batches = [chunk_arrays(rng, batch, candidates)[:2] for _ in range(max(1, queries // batch))]
    state = State(kernel)
    state.update(*batches[0])  # warm-up
    t0 = time.perf_counter()
    for scores, labels in batches:
        state.update(scores, labels)
    return (time.perf_counter() - t0) / (len(batches) * batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--dir", default=None, help="where to write the Parquet log (a temp dir by default)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.evaluation import RankingEvaluator
    from pyspark.mllib.evaluation import RankingMetrics
    from pyspark.sql import SparkSession

    import rankstream
    from rankstream.spark import RANKING_EVALUATOR_NAMES, evaluate, spark_mllib_metrics

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(args.dir or tmp, "bench_log.parquet")
        t0 = time.perf_counter()
        write_log(path, args.queries, args.candidates)
        written = time.perf_counter() - t0
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("rankstream-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "4g")
            .config("spark.executorEnv.PYTHONPATH", os.path.dirname(os.path.dirname(rankstream.__file__)))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            df = spark.read.parquet(path)
            evaluate(df.limit(1000), OURS[:1], conventions="spark_mllib")  # start the Python workers
            t0 = time.perf_counter()
            ours = evaluate(df, OURS, conventions="spark_mllib")
            t_ours = time.perf_counter() - t0
            theirs = {}
            t0 = time.perf_counter()
            for metric, k in EVALUATOR:
                evaluator = RankingEvaluator(
                    predictionCol="prediction", labelCol="truth", metricName=metric, k=k
                )
                theirs[RANKING_EVALUATOR_NAMES[metric].format(k=k)] = evaluator.evaluate(df)
            t_spark = time.perf_counter() - t0
            mllib = {}
            t0 = time.perf_counter()
            metrics = RankingMetrics(df.select("prediction", "truth").rdd.map(tuple))
            for metric, k in EVALUATOR:
                value = getattr(metrics, RANKING_METRICS_CALLS[metric])(k)
                mllib[RANKING_EVALUATOR_NAMES[metric].format(k=k)] = value
            t_mllib = time.perf_counter() - t0
        finally:
            spark.stop()
    for name, value in [*theirs.items(), *mllib.items()]:
        assert abs(ours[name] - value) <= 1e-9, (name, ours[name], value)
    per_query_core = core_seconds_per_query(spark_mllib_metrics(OURS), args.candidates)
    n = args.queries
    print(f"{n:,} queries x {args.candidates} candidates, local[2] (Parquet written in {written:.0f} s); "
          f"the {len(theirs)} values both compute are equal to 1e-9\n")  # fmt: skip
    core_s = per_query_core * n
    rows = [
        ("RankingMetrics (RDD API), 4 metrics x 3 k", len(mllib), t_mllib),
        ("RankingEvaluator, 4 metrics x 3 k", len(theirs), t_spark),
        ("rankstream.spark, ListMetrics (5 metrics x 3 k)", len(ours), t_ours),
    ]
    print("| run | values | seconds | us / query | RankingMetrics / this | RankingEvaluator / this |")
    print("|---|---|---|---|---|---|")
    for run, values, seconds in rows:
        print(f"| {run} | {values} | {seconds:.1f} | {1e6 * seconds / n:.2f} | {t_mllib / seconds:.2f}x "
              f"| {t_spark / seconds:.2f}x |")  # fmt: skip
    print(f"| in-process core (numpy, one thread), the same | {len(ours)} | {core_s:.1f} (est.) "
          f"| {1e6 * per_query_core:.2f} | | |")  # fmt: skip
    overhead = t_ours / (per_query_core * n)
    print(f"\nSpark's cost per query over the in-process core: {overhead:.2f}x "
          "(local[2]: two cores against one, plus Parquet reading and the Arrow transfer)")  # fmt: skip


if __name__ == "__main__":
    main()
