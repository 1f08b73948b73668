"""``make test``'s runner (tests/run_suites.py): the Keras suites take machine-wide slots, so a
second ``make test`` on one machine waits for them instead of running beside the first."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

RUNNER = Path(__file__).with_name("run_suites.py")

FAKE_MAKE = """#!{python}
import sys
from pathlib import Path
suite = sys.argv[-1].removeprefix("test-")
with open(Path(sys.argv[0]).with_name("ran.txt"), "a") as out:
    out.write(suite + "\\n")
sys.exit(3 if suite == "keras-bad" else 0)
"""


def _fake_make(tmp: Path) -> Path:
    make = tmp / "make"
    make.write_text(FAKE_MAKE.format(python=sys.executable))
    make.chmod(0o755)
    return make


def _env(tmp: Path, make: Path) -> dict[str, str]:
    return {**os.environ, "MAKE": str(make), "TMPDIR": str(tmp), "RANKSTREAM_TEST_SLOTS": "1"}


def test_a_keras_suite_waits_for_a_free_slot(tmp_path: Path) -> None:
    sys.path.insert(0, str(RUNNER.parent))
    make = _fake_make(tmp_path)
    env = _env(tmp_path, make)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], os.environ["RANKSTREAM_TEST_SLOTS"] = str(tmp_path), "1"
    tempfile.tempdir = None  # the temp dir read again from TMPDIR
    try:
        import run_suites

        held = run_suites.take_slot("this test")  # every slot of the machine (one) held here
        proc = subprocess.Popen(
            [sys.executable, str(RUNNER), "core", "keras-x"], cwd=tmp_path, env=env,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:  # blocks until the runner says the Keras suite waits
            if "keras-x waits for a test slot" in line:
                break
        else:
            pytest.fail("the runner never waited for a slot")
        ran = (tmp_path / "ran.txt").read_text().split() if (tmp_path / "ran.txt").exists() else []
        assert "keras-x" not in ran  # waiting, not running
        held.close()  # the slot freed: the suite runs
        rest = proc.stdout.read()
        assert proc.wait() == 0, rest
        assert sorted((tmp_path / "ran.txt").read_text().split()) == ["core", "keras-x"]
        assert "all suites passed" in rest
    finally:
        tempfile.tempdir = None
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        os.environ.pop("RANKSTREAM_TEST_SLOTS", None)
        sys.path.remove(str(RUNNER.parent))


def test_a_failed_keras_suite_fails_the_run(tmp_path: Path) -> None:
    make = _fake_make(tmp_path)
    got = subprocess.run(
        [sys.executable, str(RUNNER), "core", "keras-bad", "keras-ok"], cwd=tmp_path,
        env=_env(tmp_path, make), capture_output=True, text=True,
    )  # fmt: skip
    assert got.returncode == 1, got.stdout
    assert "FAILED: keras-bad" in got.stdout
    assert sorted((tmp_path / "ran.txt").read_text().split()) == ["core", "keras-bad", "keras-ok"]
