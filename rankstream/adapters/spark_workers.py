"""Can Spark's Python workers run :mod:`rankstream.spark`? Asked once per session, before its
first job.

``evaluate`` ships its partition function to Spark's Python workers, which import numpy,
pyarrow and rankstream to run it. A worker Python without them (a cluster's executors, or a local
session whose driver runs in a virtual environment while ``PYSPARK_PYTHON`` is unset, so the
workers start ``python3`` from the PATH) used to fail deep inside the job, as a
``ModuleNotFoundError`` in a Java stack trace. Instead, the first evaluation on a session runs
one tiny probe job (one row, one task, a plain Python UDF that needs nothing but the worker
itself) that imports what the job needs on a worker and reports the worker's interpreter and the
versions it found; a problem becomes a :class:`SparkWorkerError` on the driver that says what is
missing in which Python and how to point Spark at another. A passed check is remembered per
session and worker interpreter: later evaluations run no probe.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import rankstream
from rankstream.adapters.requirements import install_hint

#: what the job imports on a worker, in order (the last brings in rankstream and its core)
WORKER_MODULES = ("numpy", "pyarrow", "rankstream.adapters.spark_arrow")

# session -> (the worker interpreter it was checked for, the probe's report); weak: a stopped
# and dropped session leaves nothing behind
_CHECKED: weakref.WeakKeyDictionary[Any, tuple[str | None, dict]] = weakref.WeakKeyDictionary()


class SparkWorkerError(RuntimeError):
    """Spark's Python workers cannot run rankstream's job (a package missing on them, another
    rankstream version, or a worker Python that does not start)."""


def _make_probe() -> Any:
    """The probe, made in a function so that cloudpickle ships it by value: unpickling it on a
    worker imports nothing of rankstream, so a worker without rankstream runs it and says so."""

    def probe() -> str:
        import importlib
        import json
        import sys

        found: dict[str, Any] = {
            "python": sys.executable,
            "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        }
        for name in ("numpy", "pyarrow", "rankstream.adapters.spark_arrow"):
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # anything an import raises is the report's content
                found[name] = {"error": f"{type(exc).__name__}: {exc}"}
            else:
                found[name] = {"version": getattr(module, "__version__", None)}
        package = sys.modules.get("rankstream")
        if package is not None:
            found["rankstream"] = {
                "version": getattr(package, "__version__", None),
                "path": getattr(package, "__file__", None),
            }
        return json.dumps(found)

    return probe


def worker_python(session: Any) -> str | None:
    """The interpreter the session's workers start (the SparkContext's ``pythonExec``: its
    ``PYSPARK_PYTHON`` when it started, else ``"python3"``); None where the client has no
    SparkContext (Spark Connect: the server decides)."""
    try:
        return session.sparkContext.pythonExec
    except Exception:  # Spark Connect raises on sparkContext
        return None


def _where(python: str | None) -> str:
    """Which setting chose the workers' interpreter, for the message."""
    if python is None:
        return "chosen by the Spark Connect server's PYSPARK_PYTHON / spark.pyspark.python"
    if os.environ.get("PYSPARK_PYTHON") == python:
        return f"PYSPARK_PYTHON={python!r}"
    if python == "python3" and "PYSPARK_PYTHON" not in os.environ:
        return "PYSPARK_PYTHON is unset: Spark's default, 'python3' on the workers' PATH"
    return f"the SparkContext's PYSPARK_PYTHON={python!r} when it started"


def _point_spark() -> str:
    """How to have Spark start its workers on another Python, for the messages."""
    return (
        "set PYSPARK_PYTHON before the SparkSession starts (in local mode, the driver's own "
        f"interpreter: os.environ['PYSPARK_PYTHON'] = sys.executable, here {sys.executable!r}), or "
        "spark-submit --conf spark.pyspark.python=<python> on a cluster. See docs/spark.md, 'On a "
        "cluster'."
    )


def problems(report: dict) -> list[str]:
    """What the probe's report says the job lacks on the workers, one line each (empty: none)."""
    out = []
    for name in WORKER_MODULES:
        error = report.get(name, {}).get("error")
        if error is not None:
            label = "rankstream" if name.startswith("rankstream") else name
            out.append(f"{label} (import {name}: {error})")
    return out


def _message(report: dict, python: str | None) -> str | None:
    """The error for a report, or None when the workers can run the job."""
    where = f"{report['python']} (Python {report['python_version']}; {_where(python)})"
    missing = problems(report)
    if missing:
        return (
            f"rankstream.spark: Spark's Python workers cannot run the evaluation: the workers' "
            f"Python, {where}, lacks " + "; ".join(missing) + ". Install them into that Python "
            f"({install_hint('spark')}; rankstream alone may instead be shipped with spark-submit "
            "--py-files or SparkContext.addPyFile), or have Spark start its workers on a Python that "
            "has them: " + _point_spark()
        )
    theirs = report.get("rankstream", {})
    if theirs.get("version") != rankstream.__version__:
        return (
            f"rankstream.spark: Spark's Python workers run rankstream {theirs.get('version')} "
            f"(from {theirs.get('path')}) in {where}, the driver rankstream "
            f"{rankstream.__version__} (from {rankstream.__file__}): install the same version on "
            "both (the metric is pickled on the driver and unpickled on the workers)."
        )
    return None


def check_workers(session: SparkSession) -> dict:
    """The probe's report on ``session``'s workers (their interpreter, its version, and the
    version of each module the job imports), from one one-task job the first time a session
    (with its worker interpreter) is checked, then remembered.

    Raises :class:`SparkWorkerError` naming what is missing in which Python and the settings
    that choose it (``PYSPARK_PYTHON``, ``spark.pyspark.python``), when the workers lack a
    module or run another rankstream version, or when the probe job itself fails (the worker
    Python does not exist, or is another Python version than the driver's)."""
    python = worker_python(session)
    cached = _CHECKED.get(session)
    if cached is not None and cached[0] == python:
        return cached[1]
    probe = F.udf(_make_probe(), T.StringType(), useArrow=False)
    try:
        (row,) = session.range(1, numPartitions=1).select(probe().alias("report")).collect()
    except Exception as exc:  # Spark wraps whatever failed on the worker
        raise SparkWorkerError(
            f"rankstream.spark: Spark's Python workers did not run a one-row probe job (the "
            f"workers' Python: {_where(python)}); Spark said: {_first_error_line(exc)} The workers "
            f"need a Python {sys.version_info[0]}.{sys.version_info[1]} (the driver's version) with "
            "numpy, pyarrow and rankstream: " + _point_spark()
        ) from exc
    report = json.loads(row["report"])
    message = _message(report, python)
    if message is not None:
        raise SparkWorkerError(message)
    _CHECKED[session] = (python, report)
    return report


def _first_error_line(exc: Exception) -> str:
    """The line of Spark's (often long, Java-wrapped) error that says what went wrong."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = next((ln for ln in lines if "Exception:" in ln or "Error:" in ln), None)
    line = (line or (lines[0] if lines else type(exc).__name__)).lstrip(": ")[:500]
    return line if line.endswith(".") else line + "."
