"""Every ```python block of README.md runs as written, on its own, and prints what it documents.

Each block runs in a fresh interpreter (so no block leans on another's names), from an empty
directory, with rankstream importable and Keras on its torch backend. A ``print(...)`` whose
comment (on its line, or alone on the next line) is a Python literal documents its output: the
printed value must equal it, ``...`` matching anything (``# [0.5, 0.625]``,
``# {'loss': ..., 'ndcg': ...}``, ``# (8, 2): per-list AP@5``).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _hang_guard import run as guarded_run

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# Runs a block as written; records what each print() call writes to stdout, one entry per call.
RUNNER = """
import builtins, io, json, sys
source, record = sys.argv[1], sys.argv[2]
printed, _print = [], builtins.print
def recording_print(*args, **kwargs):
    if kwargs.get("file") in (None, sys.stdout):
        buffer = io.StringIO()
        _print(*args, **{**kwargs, "file": buffer})
        printed.append(buffer.getvalue())
    _print(*args, **kwargs)
builtins.print = recording_print
with open(source) as f:
    code = compile(f.read(), "README.md block", "exec")
try:
    exec(code, {"__name__": "__main__"})
finally:
    with open(record, "w") as f:
        json.dump(printed, f)
"""


def python_blocks() -> list[tuple[str, str]]:
    """(id, source) of each ```python block, the id from the section heading above it."""
    text = README.read_text()
    blocks, heading, counts = [], "top", {}
    for m in re.finditer(r"^(#{1,6}) (.*?)$|^```(\w*)\n(.*?)^```", text, re.M | re.S):
        if m.group(1):
            heading = re.sub(r"\W+", "-", m.group(2).lower()).strip("-")
        elif m.group(3) == "python":
            counts[heading] = counts.get(heading, 0) + 1
            blocks.append((f"{heading}-{counts[heading]}", m.group(4)))
    return blocks


BLOCKS = python_blocks()


def documented_outputs(source: str) -> list[tuple[int, object]]:
    """(index among the block's print() calls, documented value) for each documented print."""
    lines = source.splitlines()
    prints = sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    )
    found = []
    for i, lineno in enumerate(prints):
        line = lines[lineno - 1]
        comment = line.split("#", 1)[1] if "#" in line and not line.lstrip().startswith("#") else None
        if comment is None and lineno < len(lines) and lines[lineno].lstrip().startswith("#"):
            comment = lines[lineno].lstrip()[1:]
        if comment is None:
            continue
        value = literal(comment.strip())
        if value is not _NONE:
            found.append((i, value))
    return found


_NONE = object()


def literal(text: str) -> object:
    """The Python literal ``text`` is, or starts with before ``": "`` (``(8, 2): per-list ...``)."""
    for candidate in (text, text.split(": ", 1)[0]):
        try:
            return ast.literal_eval(candidate)
        except (ValueError, SyntaxError):
            continue
    return _NONE


def matches(expected: object, actual: object) -> bool:
    if expected is Ellipsis:
        return True
    if isinstance(expected, float) or isinstance(actual, float):
        return isinstance(actual, (int, float)) and math.isclose(
            actual, expected, rel_tol=1e-9, abs_tol=1e-12
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(matches(v, actual[k]) for k, v in expected.items())
        )
    if isinstance(expected, (list, tuple)):
        return (
            type(actual) is type(expected)
            and len(actual) == len(expected)
            and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return expected == actual


def run_block(source: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    (tmp_path / "block.py").write_text(source)
    record = tmp_path / "printed.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "KERAS_BACKEND": "torch",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    proc = guarded_run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "block.py"), str(record)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    printed = json.loads(record.read_text()) if record.exists() else []
    return proc, printed


def test_readme_has_the_quickstart_blocks():
    ids = [block_id for block_id, _ in BLOCKS]
    assert len(ids) >= 4, ids
    assert any(i.startswith("quickstart-ignite") for i in ids)
    assert any(i.startswith("quickstart-keras") for i in ids)
    assert any(i.startswith("rank-based") for i in ids)


@pytest.mark.parametrize("source", [s for _, s in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_block_runs_as_written_and_prints_what_it_documents(source, tmp_path):
    proc, printed = run_block(source, tmp_path)
    assert proc.returncode == 0, f"README block failed:\n{source}\n--- output ---\n{proc.stdout}{proc.stderr}"
    assert printed, f"README block prints nothing:\n{source}"
    last = source.rstrip().splitlines()[-1].lstrip()
    assert last.startswith(("print(", "#", "assert ")), f"the block's last line shows nothing: {last}"
    for index, expected in documented_outputs(source):
        assert index < len(printed), f"print number {index + 1} never ran"
        shown = printed[index].strip()
        actual = literal(shown)
        assert actual is not _NONE and matches(expected, actual), (
            f"README documents {expected!r}, the block printed {shown!r}"
        )


def test_documented_outputs_are_checked():
    """The quickstarts' documented values are found (so the check above is not vacuous)."""
    documented = {block_id: documented_outputs(source) for block_id, source in BLOCKS}
    ignite = next(v for k, v in documented.items() if k.startswith("quickstart-ignite"))
    assert [0.5, 0.625, 0.625, 0.75] in [value for _, value in ignite]  # ignite's own documented example
    assert any(k.startswith("rank-based") and v for k, v in documented.items())


def test_matches():
    assert matches({"a": ..., "b": [1, 0.5]}, {"a": 3, "b": [1, 0.5]})
    assert not matches({"a": ...}, {"a": 1, "b": 2})
    assert not matches([0.5, 0.625], [0.5, 0.6])
    assert matches((8, 2), (8, 2)) and not matches((8, 2), [8, 2])
    assert literal("(8, 2): per-list AP@5") == (8, 2) and literal("w: scalar") is _NONE
