"""Offline evaluation of a recommendation log on Spark: rankstream next to Spark's RankingMetrics.

A synthetic log of ``--queries`` queries (1,000,000 by default), each with 10 to ``--candidates``
candidates, their scores and clicks, is written as Parquet; a local Spark session (``local[2]``,
with its progress bar) reads it and evaluates it twice:

* ``rankstream.spark.evaluate(df, names, conventions="spark_mllib")``: one pass over the data,
  every metric from the same partition sums; equal to
* ``pyspark.mllib.evaluation.RankingMetrics`` on the same log (the ranked item ids and the clicked
  ids), one Spark job per metric and k;

then rankstream's own report (its defaults: lists without a click skipped, MRR and hit rate
too) with standard errors. Run ``python examples/spark_offline.py --queries 20000`` for a quick
look; on a cluster see docs/spark.md (``spark-submit --py-files``).
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
SPARK_NAMES = [f"{m}@{k}" for m in ("precision", "recall", "map", "ndcg") for k in KS] + ["map"]


def ragged(values: np.ndarray, keep: np.ndarray) -> pa.ListArray:
    """The kept entries of each row of ``values`` as a list array (row-major order)."""
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[keep]))


def write_log(path: str, queries: int, candidates: int, seed: int = 0, chunk: int = 100_000) -> None:
    """Parquet with ``query``, ``scores`` and ``labels`` (one array per query, ragged), and what
    Spark's RankingMetrics reads: ``prediction`` (item ids by decreasing score, ties: the
    earlier first) and ``truth`` (the clicked ids)."""
    rng = np.random.default_rng(seed)
    writer = None
    for start in range(0, queries, chunk):
        rows = min(chunk, queries - start)
        lengths = rng.integers(10, candidates + 1, rows)
        valid = np.arange(candidates)[None, :] < lengths[:, None]
        relevance = rng.normal(size=(rows, candidates))
        scores = np.round(relevance + rng.normal(scale=1.5, size=relevance.shape), 2)  # some ties
        labels = (rng.random(relevance.shape) < 0.08 * np.exp(relevance)).astype(np.float64)
        order = np.argsort(np.where(valid, -scores, np.inf), axis=1, kind="stable")
        table = pa.table(
            {
                "query": pa.array(np.arange(start, start + rows)),
                "scores": ragged(scores, valid),
                "labels": ragged(labels, valid),
                "prediction": ragged(order.astype(np.float64), valid),
                "truth": ragged(
                    np.broadcast_to(np.arange(candidates, dtype=np.float64), scores.shape),
                    valid & (labels > 0),
                ),
            }
        )
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--candidates", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where to write the Parquet log (a temp dir by default)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers run this interpreter
    from pyspark.mllib.evaluation import RankingMetrics
    from pyspark.sql import SparkSession

    import rankstream
    from rankstream.spark import evaluate

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(args.dir or tmp, "log.parquet")
        t0 = time.perf_counter()
        write_log(path, args.queries, args.candidates)
        print(f"wrote {args.queries:,} queries to {path} in {time.perf_counter() - t0:.1f} s")

        active = SparkSession.getActiveSession()  # a notebook's (or a test's) session: kept
        spark = active or (
            SparkSession.builder.master("local[2]")
            .appName("rankstream-offline")
            .config("spark.ui.showConsoleProgress", "true")
            .config("spark.executorEnv.PYTHONPATH", os.path.dirname(os.path.dirname(rankstream.__file__)))
            .getOrCreate()
        )
        if active is None:
            spark.sparkContext.setLogLevel("ERROR")
        try:
            log = spark.read.parquet(path)
            t0 = time.perf_counter()
            ours = evaluate(log, SPARK_NAMES, conventions="spark_mllib")
            t_ours = time.perf_counter() - t0
            t0 = time.perf_counter()
            pairs = log.select("prediction", "truth").rdd.map(tuple).cache()
            theirs = RankingMetrics(pairs)
            spark_values = {f"precision@{k}": theirs.precisionAt(k) for k in KS}
            spark_values.update({f"recall@{k}": theirs.recallAt(k) for k in KS})
            spark_values.update({f"map@{k}": theirs.meanAveragePrecisionAt(k) for k in KS})
            spark_values.update({f"ndcg@{k}": theirs.ndcgAt(k) for k in KS})
            spark_values["map"] = theirs.meanAveragePrecision
            t_spark = time.perf_counter() - t0
            names = ["ndcg@10", "map@10", "recall@10", "mrr@10", "hit_rate@10"]
            with_stats = evaluate(log, rankstream.ListMetrics(names, confidence=0.95))
        finally:
            if active is None:
                spark.stop()

    print(f"\nSpark's conventions ({args.queries:,} queries): rankstream {t_ours:.1f} s (one job), "
          f"RankingMetrics {t_spark:.1f} s ({len(SPARK_NAMES)} jobs)\n")  # fmt: skip
    print("| metric | rankstream (spark_mllib) | RankingMetrics |")
    print("|---|---|---|")
    for name in SPARK_NAMES:
        print(f"| {name} | {ours[name]:.12f} | {spark_values[name]:.12f} |")
    print("\nrankstream's defaults (lists without a click skipped, gain 2^y - 1), 95% intervals:\n")
    print("| metric | value | stderr | 95% interval | lists |")
    print("|---|---|---|---|---|")
    for name in names:
        s = with_stats
        print(
            f"| {name} | {s[name]:.6f} | {s[name + '_stderr']:.6f} | "
            f"[{s[name + '_ci_low']:.6f}, {s[name + '_ci_high']:.6f}] | {s[name + '_count']:.0f} |"
        )


if __name__ == "__main__":
    main()
