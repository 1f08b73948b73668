"""The CPU seconds of every test, for finding what makes ``make test`` long.

As a pytest plugin (``PYTHONPATH=tests make test PYTEST_ARGS="-p cpu_profile"``), each test process writes the
CPU time (user + system, all its threads, and its children once waited for) of each test to
``build/test-logs/cpu/<suite>-<worker>.json``. CPU time, not wall time: on a shared or busy
machine the wall time of a test says how long it waited, its CPU time what it costs. Then
``python tests/cpu_profile.py [N]`` prints each suite's total and its N costliest test files and
tests (parametrizations summed). The method and what it found: docs/testing.md.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
from pathlib import Path

import pytest

OUT = Path("build/test-logs/cpu")
_ROWS: list[tuple[str, float]] = []


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = _cpu()
    yield
    _ROWS.append((item.nodeid, _cpu() - start))


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and hasattr(session.config, "workerinput"):
        worker = session.config.workerinput.get("workerid")
    if not _ROWS:  # xdist's controller runs no test
        return
    suite = f"keras-{os.environ.get('KERAS_BACKEND')}" if os.environ.get("RANKSTREAM_KERAS_SUITE") else "core"
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{suite}-{worker or 'main'}.json"
    path.write_text(json.dumps({"suite": suite, "rows": _ROWS, "process": _cpu()}))


def main(argv: list[str]) -> None:
    most = int(argv[0]) if argv else 15
    suites: dict[str, list] = collections.defaultdict(list)
    process: dict[str, float] = collections.defaultdict(float)
    for path in sorted(OUT.glob("*.json")):
        data = json.loads(path.read_text())
        suites[data["suite"]] += data["rows"]
        process[data["suite"]] += data["process"]
    for suite, rows in suites.items():
        files: collections.Counter = collections.Counter()
        tests: collections.Counter = collections.Counter()
        for nodeid, cpu in rows:
            files[nodeid.split("::")[0]] += cpu
            tests[nodeid.split("[")[0]] += cpu
        print(f"{suite}: {process[suite]:.0f} CPU-s in its test processes, {len(rows)} tests")
        for name, cpu in files.most_common(most):
            print(f"  {cpu:7.1f}  {name}")
        for name, cpu in tests.most_common(most):
            print(f"  {cpu:7.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
