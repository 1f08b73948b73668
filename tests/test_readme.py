"""The README's Ignite and core quickstarts run as written and print the documented values."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_ignite_quickstart_prints_the_seed_values():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_blocks()[0], "README-ignite", "exec"), {})
    # ignite's own documentation of rec_sys.MAP gives these values for this example.
    assert out.getvalue().strip().splitlines()[-1] == "[0.5, 0.625, 0.625, 0.75]"


def test_core_quickstart_runs():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_blocks()[1], "README-core", "exec"), {})
    assert out.getvalue().strip() == "(8, 2)"
