"""Run the Keras test suite on each backend (torch, JAX, TensorFlow), one process each.

The selected backends' subprocesses start together (module fixture) and each test waits for
its own, so the wall time is about that of the slowest backend. A backend passes only if its suite ran
tests and none failed, errored or was skipped; the subprocess output is shown on failure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).resolve().parent / "backend_suite"
BACKENDS = ["torch", "jax", "tensorflow"]
TIMEOUT_S = 600


def _launch(backend: str) -> tuple[subprocess.Popen, object]:
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "RANKSTREAM_KERAS_SUITE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONHASHSEED": "0",
    }
    log = tempfile.TemporaryFile(mode="w+")
    cmd = [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", "-rfEs", "--no-header"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    return proc, log


@pytest.fixture(scope="module")
def suites(request):
    """Start the selected backends' suites together (each test then waits for its own);
    under pytest-xdist each worker starts only the backend its test needs."""
    selected = [
        item.callspec.params["backend"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_keras_suite_passes_on_backend"
    ]
    together = not os.environ.get("PYTEST_XDIST_WORKER")
    started: dict[str, tuple[subprocess.Popen, object]] = {}

    def get(backend: str) -> tuple[subprocess.Popen, object]:
        for b in (selected if together else []) + [backend]:
            if b not in started:
                started[b] = _launch(b)
        return started[backend]

    yield get
    for proc, log in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_keras_suite_passes_on_backend(suites, backend):
    proc, log = suites(backend)
    try:
        rc = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "timeout"
    log.seek(0)
    output = log.read()
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    assert rc == 0, f"KERAS_BACKEND={backend}: pytest exited with {rc}\n{output}"
    assert re.search(r"\d+ passed", summary), f"KERAS_BACKEND={backend}: no test passed\n{output}"
    for word in ("skipped", "failed", "error", "xfailed", "deselected"):
        assert word not in summary, f"KERAS_BACKEND={backend}: {summary}\n{output}"
    print(f"KERAS_BACKEND={backend}: {summary}")
