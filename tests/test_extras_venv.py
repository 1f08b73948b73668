"""An extra alone runs its example, in a virtual environment of its own: ``pip install
"rankstream[spark]"`` into a fresh venv (no ``--system-site-packages``: nothing of the test
environment leaks in), then ``examples/spark_offline.py`` on that venv's Python, small.

This is what a user does after reading the README; the dev environment hides a missing
requirement (its dev extra brings pandas, which pyspark's ``mapInArrow`` needs on the driver).
pip's cache is used (no ``--no-cache-dir``), so a re-run installs from cached wheels; the
sources are a copy, so the build leaves nothing in the checkout. The other extras are checked
by hiding what they do not install (tests/test_packaging.py); this one is built for real because
pyspark's needs show only when Spark runs.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from _hang_guard import run

ROOT = Path(__file__).resolve().parent.parent


def fresh_venv(path: Path, requirement: str) -> Path:
    """A new venv at ``path`` with ``requirement`` installed under the repository's constraints;
    its Python."""
    proc = run([sys.executable, "-m", "venv", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = path / "bin" / "python"
    constraints = str(ROOT / "constraints.txt")
    # --no-compile: no bytecode for pyspark's thousands of modules (Python compiles what it imports)
    install = [str(python), "-m", "pip", "install", "-q", "--no-compile", "-c", constraints, requirement]
    proc = run(install, cwd=path)
    assert proc.returncode == 0, f"{' '.join(install)}:\n{proc.stdout}{proc.stderr}"
    return python


def source_copy(path: Path) -> Path:
    """What pip builds the wheel from (pyproject.toml, README.md, LICENSE, rankstream/)."""
    path.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, path / name)
    shutil.copytree(ROOT / "rankstream", path / "rankstream", ignore=shutil.ignore_patterns("__pycache__"))
    return path


def test_the_spark_extra_alone_runs_the_spark_example(tmp_path):
    python = fresh_venv(tmp_path / "venv", f"{source_copy(tmp_path / 'src')}[spark]")
    # the venv's own rankstream, not the checkout's; no Spark setting of the test run
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "VIRTUAL_ENV")}
    where = run([str(python), "-c", "import rankstream; print(rankstream.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr
    script = ROOT / "examples" / "spark_offline.py"
    proc = run([str(python), str(script), "--queries", "400", "--dir", str(tmp_path)], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ")]
    table = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    spark_rows = {cells[0]: cells[1:] for cells in table if len(cells) == 3 and cells[0] != "metric"}
    assert len(spark_rows) == 13, proc.stdout  # precision, recall, map, ndcg at three k, and map
    for name, (ours, theirs) in spark_rows.items():  # printed with 12 decimals
        assert float(ours) == pytest.approx(float(theirs), abs=2e-12), name
    own_rows = {cells[0]: cells[1:] for cells in table if len(cells) == 5 and cells[0] != "metric"}
    assert set(own_rows) == {"ndcg@10", "map@10", "recall@10", "mrr@10", "hit_rate@10"}, proc.stdout
