"""rankstream.spark on a local Spark session: the in-process core State on the same lists (every
list metric, ListMetrics, the rank report; masks, weights, 1, 3 and 8 partitions, one row per
list and one row per item, empty partitions), Spark's own RankingMetrics / RankingEvaluator under
the spark_mllib conventions, a retried task, bad input, and the example run small.

One session (``local[2,2]``: two threads, a task may fail twice) serves the module; Arrow batches
of 7 rows make every partition several batches of different widths."""

from __future__ import annotations

import json
import math
import os
import re
import runpy
import shutil
import sys

import numpy as np
import pytest
from _hang_guard import run as run_guarded

pytest.importorskip("pyspark", reason="pyspark is missing (pip install 'rankstream[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is missing (pip install 'rankstream[spark]')")
if shutil.which("java") is None:
    pytest.skip("Java is missing: Spark needs a JVM (java on PATH)", allow_module_level=True)

import pyarrow
from pyspark import TaskContext
from pyspark.ml.evaluation import RankingEvaluator
from pyspark.mllib.evaluation import RankingMetrics
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import rankstream
from rankstream import ListMetrics, State
from rankstream.adapters import spark_workers
from rankstream.core.lists.table import LIST_METRICS
from rankstream.core.ranks.kernel import RankKernel
from rankstream.spark import RANKING_EVALUATOR_NAMES, evaluate, evaluate_state

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_PACKAGE = os.path.dirname(rankstream.__file__)
TOL = dict(rel=1e-12, abs=1e-12)
ALL_NAMES = ["ndcg@3", "map@5", "precision@2", "recall@3", "mrr@5", "hit_rate@2", "dcg@3", "r_precision"]


@pytest.fixture(scope="module")
def spark():
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers run this interpreter (its packages)
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("rankstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
        # the workers import the rankstream this test imports
        .config("spark.executorEnv.PYTHONPATH", os.path.dirname(os.path.dirname(rankstream.__file__)))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("FATAL")
    yield session
    session.stop()
    if before is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = before


# -- the data: ragged lists with exact ties, graded labels, masks, weights, empty lists --------


def make_lists(seed: int = 0, n: int = 70, rank: bool = False):
    """Rows ``(q, scores, labels, mask, weight)`` and the same lists padded for the core."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n):
        size = int(rng.integers(1 if rank else 0, 10))
        scores = rng.integers(0, 4, size).astype(float)  # ties, exact
        mask = rng.random(size) < 0.85
        if rank:
            mask[int(rng.integers(0, size))] = True
            true = int(rng.choice(np.flatnonzero(mask)))
            labels = np.zeros(size)
            labels[true] = 1.0
        else:
            labels = rng.integers(0, 4, size).astype(float) * (rng.random() < 0.8)
        weight = float(rng.choice([0.0, 0.5, 1.0, 2.0], p=[0.1, 0.3, 0.4, 0.2]))
        rows.append((q, scores.tolist(), labels.tolist(), mask.tolist(), weight))
    width = max(len(r[1]) for r in rows)
    S, Y, M = np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, width), bool)
    for i, r in enumerate(rows):
        S[i, : len(r[1])], Y[i, : len(r[1])], M[i, : len(r[1])] = r[1], r[2], r[3]
    W = np.array([r[4] for r in rows])
    return rows, (S, Y, M, W)


LIST_SCHEMA = "q long, scores array<double>, labels array<double>, mask array<boolean>, w double"
ITEM_SCHEMA = "q long, pos int, score double, label double, m boolean, w double"


def item_rows(rows):
    return [(q, j, s[j], y[j], m[j], w) for q, s, y, m, w in rows for j in range(len(s))]


@pytest.fixture(scope="module")
def lists(spark):
    rows, arrays = make_lists(0)
    return (
        spark.createDataFrame(rows, LIST_SCHEMA),
        spark.createDataFrame(item_rows(rows), ITEM_SCHEMA),
        arrays,
    )


def by_shape(shape, frames, parts):
    by_list, by_item = frames
    if shape == "list":
        return by_list.repartition(parts), {}
    return by_item.repartition(parts), {"query": "q", "item": "pos", "scores": "score", "labels": "label"}


def assert_same(got, want):
    if isinstance(want, dict):
        assert set(got) == set(want)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, **TOL, nan_ok=True), key
    else:
        assert got == pytest.approx(want, **TOL, nan_ok=True)


# -- equal to the core State --------------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 3, 8])
@pytest.mark.parametrize("shape", ["list", "item"])
def test_list_metrics_equal_the_core_state(lists, shape, parts):
    by_list, by_item, (S, Y, M, W) = lists
    df, cols = by_shape(shape, (by_list, by_item), parts)
    metric = ListMetrics(ALL_NAMES, confidence=0.95)
    mask = "m" if shape == "item" else "mask"
    state = evaluate_state(df, metric, mask=mask, weight="w", **cols)
    reference = State(metric).update(S, Y, mask=M, sample_weight=W)
    assert_same(state.compute(), reference.compute())
    for name, value in reference.sums.items():  # the sums themselves, field by field
        np.testing.assert_allclose(state.sums[name], value, rtol=1e-12, atol=1e-12)


def test_every_list_kernel_alone_equals_the_core_state(lists):
    by_list, _, (S, Y, M, W) = lists
    df = by_list  # as created: two partitions, no shuffle
    for row in LIST_METRICS:
        kernel = row.kernel([1, 3, 5]) if row.takes_k else row.kernel()
        want = State(kernel).update(S, Y, mask=M, sample_weight=W).compute()
        assert_same(evaluate(df, kernel, mask="mask", weight="w"), want)


def test_without_mask_and_weight_and_with_empty_partitions(lists):
    by_list, _, (S, Y, M, _) = lists
    # every row in one partition of eight: seven partitions hold no row; the lists are the
    # given arrays (the mask column unused: the lists' own lengths decide)
    df = by_list.repartition(8, F.lit(0))
    rows, _ = make_lists(0)
    full = np.zeros_like(M)
    for i, r in enumerate(rows):
        full[i, : len(r[1])] = True
    metric = ListMetrics(["ndcg@5", "map", "recall@2"], empty="zero")
    want = State(metric).update(S, Y, mask=full).compute()
    assert_same(evaluate(df, metric), want)
    assert df.rdd.getNumPartitions() == 8


@pytest.fixture(scope="module")
def ranked(spark):
    rows, (S, Y, M, W) = make_lists(1, n=60, rank=True)
    true = np.argmax(Y, axis=1)
    by_list = spark.createDataFrame(
        [(q, s, int(np.argmax(y)), m, w) for q, s, y, m, w in rows],
        "q long, scores array<double>, labels int, mask array<boolean>, w double",
    )
    by_item = spark.createDataFrame(item_rows(rows), ITEM_SCHEMA)
    return by_list, by_item, (S, true, M, W)


@pytest.mark.parametrize("parts", [1, 3, 8])
@pytest.mark.parametrize("shape", ["list", "item"])
def test_rank_report_equals_the_core_state(ranked, shape, parts):
    by_list, by_item, (S, true, M, W) = ranked
    df, cols = by_shape(shape, (by_list, by_item), parts)
    kernel = RankKernel((1, 3, 5), ("optimistic", "realistic", "pessimistic"), confidence=0.95)
    got = evaluate(df, kernel, mask="m" if shape == "item" else "mask", weight="w", **cols)
    want = State(kernel).update(S, true, mask=M, sample_weight=W).compute()
    assert "both.realistic.hits_at_3_ci_low" in want
    assert_same(got, want)


def test_a_retried_task_counts_once(spark, lists, tmp_path):
    """A task of partition 1 fails on its first attempt after two of its Arrow batches went
    through rankstream's partition function; Spark retries it (``local[2,2]``) and the result
    equals the core's: the failed attempt's partial sums were never part of the stage output."""
    by_list, _, (S, Y, M, W) = lists
    marker = str(tmp_path / "failed-once")

    def flaky(batches):
        ctx = TaskContext.get()
        fail = ctx.partitionId() == 1 and ctx.attemptNumber() == 0
        for i, batch in enumerate(batches):
            yield batch
            if fail and i == 1:
                open(marker, "w").close()
                raise RuntimeError("injected failure of a first attempt")

    df = by_list.repartition(3).mapInArrow(flaky, by_list.schema)
    metric = ListMetrics(["ndcg@3", "map@5", "mrr@5"])
    got = evaluate(df, metric, mask="mask", weight="w")
    assert os.path.exists(marker), "the first attempt did not fail: nothing was retried"
    assert_same(got, State(metric).update(S, Y, mask=M, sample_weight=W).compute())


# -- Spark's RankingMetrics and RankingEvaluator ----------------------------------------------


def spark_lists(seed: int = 2, n: int = 80):
    """``(scores, labels)`` lists, the ranking Spark reads (item ids by decreasing score, ties:
    the earlier first, as ``ties="first"``) and the ground truth (ids with a label > 0, in
    decreasing label, with their labels)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = int(rng.integers(1, 13))
        scores = rng.integers(0, 6, size).astype(float)
        labels = rng.integers(0, 4, size).astype(float) * (i == 0 or rng.random() < 0.8)
        if i == 0:  # Spark infers the schema from the first row: give it a relevant item
            labels[0] = 2.0
        pred = np.argsort(-scores, kind="stable")
        truth = np.flatnonzero(labels > 0)
        truth = truth[np.argsort(-labels[truth], kind="stable")]
        out.append(
            (
                scores,
                labels,
                pred.astype(float).tolist(),
                truth.astype(float).tolist(),
                labels[truth].tolist(),
            )
        )
    return out


KS = (1, 3, 10)


@pytest.fixture(scope="module")
def mllib(spark):
    data = spark_lists()
    df = spark.createDataFrame(
        [(s.tolist(), y.tolist(), p, t) for s, y, p, t, _ in data],
        "scores array<double>, labels array<double>, prediction array<double>, truth array<double>",
    ).repartition(3)
    return data, df


def scala_graded_ndcg(pred, lab, rel, k):
    """``RankingMetrics.ndcgAt(k)`` of one list given relevance values, as its Scala source
    reads: gain ``2^rel - 1`` (0 for an item not in ``lab``), discount ``1 / ln(i + 2)``, the
    ideal over ``lab`` in the order given, ``n = min(max(len(pred), |lab|), k)``; 0 for an
    empty ``lab`` or an ideal of 0."""
    if not lab:
        return 0.0
    relevance = dict(zip(lab, rel, strict=True))
    n = min(max(len(pred), len(set(lab))), k)
    dcg = sum((2.0 ** relevance.get(pred[i], 0.0) - 1.0) / math.log(i + 2) for i in range(min(n, len(pred))))
    ideal = sum(
        (2.0 ** relevance.get(lab[i], 0.0) - 1.0) / math.log(i + 2) for i in range(min(n, len(set(lab))))
    )
    return 0.0 if ideal == 0 else dcg / ideal


def test_spark_mllib_conventions_equal_ranking_metrics(spark, mllib):
    data, df = mllib
    binary = RankingMetrics(spark.sparkContext.parallelize([(p, t) for _, _, p, t, _ in data], 2).cache())
    names = [f"{m}@{k}" for k in KS for m in ("precision", "recall", "map", "ndcg")] + ["map"]
    ours = evaluate(df, names, conventions="spark_mllib")
    theirs = {f"precision@{k}": binary.precisionAt(k) for k in KS}
    theirs.update({f"recall@{k}": binary.recallAt(k) for k in KS})
    theirs.update({f"map@{k}": binary.meanAveragePrecisionAt(k) for k in KS})
    theirs.update({f"ndcg@{k}": binary.ndcgAt(k) for k in KS})
    theirs["map"] = binary.meanAveragePrecision
    assert_same(ours, theirs)
    # the rankstream defaults differ (lists without a relevant item skipped, gain 2^y - 1, ...)
    assert evaluate(df, ["ndcg@3"])["ndcg@3"] != pytest.approx(theirs["ndcg@3"], rel=1e-6)


def test_spark_mllib_relevance_conventions_equal_the_scala_graded_ndcg(spark, mllib):
    data, df = mllib
    ours = evaluate(df, [f"ndcg@{k}" for k in KS], conventions="spark_mllib_relevance")
    for k in KS:
        want = np.mean([scala_graded_ndcg(p, t, r, k) for _, _, p, t, r in data])
        assert ours[f"ndcg@{k}"] == pytest.approx(want, **TOL), k
    # pyspark's RankingMetrics takes (pred, lab, rel) triples but hands the JVM two columns:
    # its nDCG stays binary (so the graded form is reachable from Scala/Java only)
    triples = RankingMetrics(spark.sparkContext.parallelize([(p, t, r) for _, _, p, t, r in data], 2))
    binary = evaluate(df, ["ndcg@3"], conventions="spark_mllib")["ndcg@3"]
    assert triples.ndcgAt(3) == pytest.approx(binary, **TOL)


def test_spark_mllib_conventions_equal_ranking_evaluator(mllib):
    _, df = mllib
    names = [f"{m}@5" for m in ("precision", "recall", "map", "ndcg")] + ["map"]
    ours = evaluate(df, names, conventions="spark_mllib")
    for metric_name, name in RANKING_EVALUATOR_NAMES.items():
        for k in (5,) if "{k}" in name else (10,):
            evaluator = RankingEvaluator(
                predictionCol="prediction", labelCol="truth", metricName=metric_name, k=k
            )
            assert ours[name.format(k=k)] == pytest.approx(evaluator.evaluate(df), **TOL), (metric_name, k)


# -- bad input --------------------------------------------------------------------------------


def test_bad_arguments_name_the_argument(lists):
    by_list, by_item, _ = lists
    with pytest.raises(ValueError, match=r"labels='y' is not a column.*\['q', 'scores'"):
        evaluate(by_list, ["ndcg@3"], labels="y")
    with pytest.raises(TypeError, match=r"weight='mask' must be a numeric column, got array<boolean>"):
        evaluate(by_list, ["ndcg@3"], weight="mask")
    with pytest.raises(TypeError, match=r"scores='score' must be an array of numeric values, got double"):
        evaluate(by_item, ["ndcg@3"], scores="score", labels="label")
    with pytest.raises(ValueError, match=r"conventions='spark_mllib' builds metrics from names"):
        evaluate(by_list, ListMetrics(["ndcg@3"]), conventions="spark_mllib")
    with pytest.raises(ValueError, match=r"conventions must be one of .*got 'mllib'"):
        evaluate(by_list, ["ndcg@3"], conventions="mllib")
    with pytest.raises(ValueError, match=r"item='pos' orders the items of a query: it needs query"):
        evaluate(by_item, ["ndcg@3"], scores="score", labels="label", item="pos")
    with pytest.raises(TypeError, match=r"metric must be a list kernel"):
        evaluate(by_list, 3)


def test_bad_data_on_an_executor_is_a_value_error(spark):
    df = spark.createDataFrame(
        [([1.0, 2.0], [1.0]), ([0.5], [1.0])], "scores array<double>, labels array<double>"
    )
    with pytest.raises(
        ValueError,
        match=r"rankstream.spark: columns 'scores' and 'labels' must hold arrays of the same length.*"
        r"first has 2 scores and 1",
    ):
        evaluate(df, ["ndcg@3"])
    items = spark.createDataFrame(
        [(1, 0.5, 1.0, 1.0), (1, 0.2, 0.0, 2.0)], "q long, score double, label double, w double"
    )
    with pytest.raises(ValueError, match=r"column '_w' is one weight per query.*from 1.0 to 2.0"):
        evaluate(items, ["ndcg@3"], query="q", scores="score", labels="label", weight="w")


# -- the example, run small ---------------------------------------------------------------------


def test_example_prints_our_report_next_to_ranking_metrics(spark, tmp_path, monkeypatch, capsys):
    """The example as ``python examples/spark_offline.py --queries 400`` runs it, in this process
    (it keeps the active session: no second JVM)."""
    script = os.path.join(ROOT, "examples", "spark_offline.py")
    monkeypatch.setattr(sys, "argv", [script, "--queries", "400", "--dir", str(tmp_path)])
    runpy.run_path(script, run_name="__main__")
    out = capsys.readouterr().out
    table = [[c.strip() for c in ln.strip("|").split("|")] for ln in out.splitlines() if ln[:2] == "| "]
    rows = {cells[0]: cells[1:] for cells in table if len(cells) == 3 and cells[0] != "metric"}
    assert len(rows) == 13, out  # precision, recall, map, ndcg at three k, and map
    for name, (ours, theirs) in rows.items():  # printed with 12 decimals
        assert float(ours) == pytest.approx(float(theirs), abs=2e-12), name
    assert not spark.sparkContext._jsc.sc().isStopped()


# -- the workers' Python: checked once per session, before the first job -------------------------


def jobs_run(spark) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_the_workers_python_is_probed_once_per_session(spark, lists):
    """The first evaluation on a session runs one more job than the next ones (the probe); the
    probe's report is the workers' interpreter (this one: PYSPARK_PYTHON) and what it imports."""
    by_list, _, _ = lists
    spark_workers._CHECKED.pop(spark, None)  # as on a new session
    runs = []
    for _ in range(3):
        before = jobs_run(spark)
        evaluate(by_list, ["ndcg@3"])
        runs.append(jobs_run(spark) - before)
    assert runs[0] == runs[1] + 1 and runs[1] == runs[2], runs
    before = jobs_run(spark)
    report = spark_workers.check_workers(spark)  # remembered: no job
    assert jobs_run(spark) == before
    assert report["python"] == sys.executable
    assert report["pyarrow"]["version"] == pyarrow.__version__
    assert report["numpy"]["version"] == np.__version__
    assert report["rankstream"] == {"version": rankstream.__version__, "path": rankstream.__file__}


# Run by a fresh driver (its own JVM): one SparkSession after the other, each with its workers
# on another Python; prints what evaluate raised and how many jobs had run.
WORKER_SCENARIOS = """
import json, os, sys
from pyspark.sql import SparkSession
from rankstream.spark import SparkWorkerError, evaluate

for name, python, path in json.loads(sys.argv[1]):
    if python is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = python
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", path)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("FATAL")
    df = spark.createDataFrame([([0.9, 0.2], [1.0, 0.0])], "scores array<double>, labels array<double>")
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    try:
        out = {"result": evaluate(df, ["ndcg@2"])}
    except SparkWorkerError as exc:
        out = {"error": str(exc), "chained": type(exc.__cause__).__name__}
    out["jobs"] = len(spark.sparkContext.statusTracker().getJobIdsForGroup()) - jobs
    print("SCENARIO", name, json.dumps(out), flush=True)
    spark.stop()
"""


def test_workers_without_what_the_job_needs_are_a_clear_error_before_the_job(tmp_path):
    """Workers on a Python without numpy, pyarrow and rankstream (a bare virtual environment),
    named by PYSPARK_PYTHON or, PYSPARK_PYTHON unset, found as ``python3`` on the PATH; workers
    importing another rankstream version; and a worker Python that does not exist: each is one
    SparkWorkerError from the probe job, saying what is missing where and which settings choose
    the workers' Python, and no evaluation job runs."""
    bare = tmp_path / "bare"
    proc = run_guarded([sys.executable, "-m", "venv", "--without-pip", str(bare)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bare_python = str(bare / "bin" / "python")
    other = tmp_path / "other"  # rankstream under another version number
    shutil.copytree(ROOT_PACKAGE, other / "rankstream", ignore=shutil.ignore_patterns("__pycache__"))
    init = other / "rankstream" / "__init__.py"
    init.write_text(
        init.read_text().replace(f'__version__ = "{rankstream.__version__}"', '__version__ = "0.0.0"')
    )
    scenarios = [
        ("bare", bare_python, ROOT),
        ("unset", None, ROOT),
        ("version", sys.executable, str(other)),
        ("absent", str(tmp_path / "no" / "python"), ROOT),
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{bare / 'bin'}{os.pathsep}{env['PATH']}"  # python3: the bare one
    env["PYTHONPATH"] = ROOT
    proc = run_guarded([sys.executable, "-c", WORKER_SCENARIOS, json.dumps(scenarios)], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = dict(re.findall(r"^SCENARIO (\w+) (.*)$", proc.stdout, re.M))
    out = {name: json.loads(found[name]) for name, *_ in scenarios}
    for name, *_ in scenarios:
        assert out[name]["jobs"] == 1, (name, out[name])  # the probe alone, no evaluation job
    missing = "No module named '{}'"
    bare_error = out["bare"]["error"]
    assert bare_error.startswith(
        f"rankstream.spark: Spark's Python workers cannot run the evaluation: the workers' Python, "
        f"{bare_python} (Python {sys.version.split()[0]}; PYSPARK_PYTHON={bare_python!r}), lacks numpy "
        f"(import numpy: ModuleNotFoundError: {missing.format('numpy')}); pyarrow (import pyarrow: "
        f"ModuleNotFoundError: {missing.format('pyarrow')}); rankstream (import "
        "rankstream.adapters.spark_arrow: ModuleNotFoundError: "
    ), bare_error
    for error in (bare_error, out["unset"]["error"]):
        assert 'Install them into that Python (pip install "rankstream[spark]"' in error, error
        assert "--py-files" in error and "set PYSPARK_PYTHON before the SparkSession starts" in error
        assert f"os.environ['PYSPARK_PYTHON'] = sys.executable, here {sys.executable!r}" in error
        assert "spark.pyspark.python" in error
    unset = out["unset"]["error"]
    assert f"the workers' Python, {bare / 'bin' / 'python3'} (" in unset, unset
    assert "PYSPARK_PYTHON is unset: Spark's default, 'python3' on the workers' PATH), lacks numpy" in unset
    version = out["version"]["error"]
    assert version.startswith(
        f"rankstream.spark: Spark's Python workers run rankstream 0.0.0 (from "
        f"{other / 'rankstream' / '__init__.py'}) in {sys.executable} ("
    ), version
    assert f"the driver rankstream {rankstream.__version__} (from {rankstream.__file__})" in version
    absent = out["absent"]["error"]
    assert absent.startswith(
        "rankstream.spark: Spark's Python workers did not run a one-row probe job (the workers' "
        f"Python: PYSPARK_PYTHON={str(tmp_path / 'no' / 'python')!r}); Spark said: "
    ), absent
    assert f'Cannot run program "{tmp_path / "no" / "python"}"' in absent, absent
    assert "need a Python {}.{} (the driver's version)".format(*sys.version_info[:2]) in absent
    assert out["absent"]["chained"] != "NoneType"


def test_beyond_accuracy_of_als_recommendations(spark):
    """ALS's recommendForAllUsers layout (user, array of (item, rating) structs; ragged, a null
    array, an empty one) over 2 partitions: BeyondAccuracy of the same ids in one process."""
    from rankstream.core.beyond import BeyondAccuracy, ItemData

    rng = np.random.default_rng(11)
    n = 9
    items = ItemData(popularity=rng.integers(0, 6, n), num_users=8, tail_max_popularity=1,
                     categories=rng.integers(0, 3, n), embeddings=rng.normal(size=(n, 2)))  # fmt: skip
    lists = [list(rng.permutation(n)[: rng.integers(1, 6)]) for _ in range(17)] + [[], None]
    rows = [
        (u, None if x is None else [(int(i), float(-j)) for j, i in enumerate(x)])
        for u, x in enumerate(lists)
    ]
    schema = "user int, recommendations array<struct<item:int, rating:float>>"
    df = spark.createDataFrame(rows, schema)  # the session's 2 partitions
    got = rankstream.spark.beyond_accuracy(df, items, top_k=[2, 4]).compute()
    ids = np.full((len(lists), 5), -1)
    for r, x in enumerate(lists):
        ids[r, : len(x or [])] = x or []
    ref = BeyondAccuracy(items, top_k=[2, 4])
    ref.update(ids)
    for key, value in ref.compute().items():
        assert got[key] == pytest.approx(value, **TOL), key


def test_beyond_accuracy_of_score_rows(spark):
    """Score rows, one row per list (arrays of N scores, a mask) and one row per item (query,
    item, score, mask), over the session's partitions: BeyondAccuracy of each list's valid items
    sorted by (score descending, id ascending) in python; a NaN score raises a ValueError."""
    from rankstream.core.beyond import BeyondAccuracy, ItemData

    rng = np.random.default_rng(12)
    n, q = 7, 11
    items = ItemData(popularity=rng.integers(0, 6, n), num_users=8, tail_max_popularity=1,
                     categories=rng.integers(0, 3, n), embeddings=rng.normal(size=(n, 2)))  # fmt: skip
    scores = rng.integers(0, 3, (q, n)).astype(float)  # ties at every cut-off
    mask = rng.random((q, n)) > 0.25
    mask[3] = False  # a list with no item
    ids = np.full((q, 4), -1)
    for r in range(q):
        best = sorted((j for j in range(n) if mask[r, j]), key=lambda j: (-scores[r, j], j))[:4]
        ids[r, : len(best)] = best
    ref = BeyondAccuracy(items, top_k=[2, 4])
    ref.update(ids)
    want = ref.compute()
    rows = [(r, scores[r].tolist(), mask[r].tolist()) for r in range(q)]
    by_list = spark.createDataFrame(rows, "q int, s array<double>, m array<boolean>")
    by_item = spark.createDataFrame(
        [(r, j, float(scores[r, j]), bool(mask[r, j])) for r in range(q) for j in range(n)],
        "q int, i int, s double, m boolean",
    )
    got_list = rankstream.spark.beyond_accuracy(by_list, items, top_k=[2, 4], scores="s", mask="m")
    got_item = rankstream.spark.beyond_accuracy(
        by_item, items, top_k=[2, 4], scores="s", mask="m", query="q", item="i"
    )
    for got in (got_list.compute(), got_item.compute()):
        assert set(got) == set(want)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, **TOL, nan_ok=True), key
    with_nan = by_item.withColumn(
        "s", F.when((F.col("q") == 2) & (F.col("i") == 5), float("nan")).otherwise(F.col("s"))
    )
    with pytest.raises(ValueError, match="NaN"):
        rankstream.spark.beyond_accuracy(with_nan, items, scores="s", query="q", item="i")
