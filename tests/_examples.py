"""Run an ``examples/`` script as a user would and read the numbers it prints."""

from __future__ import annotations

import os
import subprocess
import sys

from _hang_guard import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(script: str) -> subprocess.CompletedProcess:
    """``python examples/<script>`` from the repository root (rankstream importable); asserts
    that it exits with 0, showing its output otherwise."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = run([sys.executable, os.path.join(ROOT, "examples", script)], env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def printed_numbers(stdout: str, prefix: str) -> list[float]:
    """The list printed after ``:`` on the first line starting with ``prefix``."""
    line = next(ln for ln in stdout.splitlines() if ln.startswith(prefix))
    return [float(v) for v in line.split(":", 1)[1].strip(" []").split(",")]
