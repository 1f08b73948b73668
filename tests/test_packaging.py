"""What a stranger meets: the package metadata, the built wheel, the errors of an adapter whose
framework is not installed, and the demo run outside a terminal.

A missing package is simulated in a subprocess by hiding it from the import system (the same
``ModuleNotFoundError`` as a package that was never installed), so nothing is uninstalled.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from _extras import hidden_distributions, hidden_modules
from _hang_guard import run as guarded_run

import rankstream

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
DEMO = ROOT / "examples" / "ignite_recommender.py"

# Run first in every subprocess below: hides the top-level packages named in RANKSTREAM_HIDE
# from imports, and the distributions named in RANKSTREAM_HIDE_DISTS (canonical names) from
# importlib.metadata (torch, for one, asks the metadata whether optree is installed).
HIDE = textwrap.dedent(
    """
    import importlib.machinery, os, re, sys

    HIDDEN = set(filter(None, os.environ.get("RANKSTREAM_HIDE", "").split(",")))
    HIDDEN_DISTS = set(filter(None, os.environ.get("RANKSTREAM_HIDE_DISTS", "").split(",")))

    class Hiding(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN:
                return None
            return super().find_spec(name, path, target)

        @classmethod
        def find_distributions(cls, *args, **kwargs):
            for dist in super().find_distributions(*args, **kwargs):
                if re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() not in HIDDEN_DISTS:
                    yield dist

    sys.meta_path[:] = [Hiding if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
    """
)


def run_python(code: str, hide: tuple[str, ...] = (), **env: str):
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "RANKSTREAM_HIDE": ",".join(hide),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **env,
    }
    return guarded_run(
        [sys.executable, "-c", HIDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
    )


def import_error(module: str, hide: tuple[str, ...], **env: str) -> tuple[str, str | None]:
    """The message of the ImportError that ``import module`` raises, and its cause's module name."""
    proc = run_python(
        f"""
        try:
            import {module}
        except ImportError as e:
            cause = e.__cause__
            print("MESSAGE", e)
            print("CAUSE", type(cause).__name__, getattr(cause, "name", None))
        else:
            print("IMPORTED")
        """,
        hide,
        **env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "IMPORTED" not in proc.stdout, f"import {module} worked with {hide} hidden"
    message = re.search(r"^MESSAGE (.*)$", proc.stdout, re.M).group(1)
    cause = re.search(r"^CAUSE (\S+) (\S+)$", proc.stdout, re.M)
    return message, cause.group(2) if cause and cause.group(1) != "NoneType" else None


# --- metadata -------------------------------------------------------------------------------


def requirements(extras: bool = True) -> dict[str, list[str]]:
    groups = {"dependencies": PROJECT["dependencies"]}
    if extras:
        groups.update(PROJECT["optional-dependencies"])
    return groups


def test_runtime_requirements_have_lower_bounds_only():
    # `dev` pins test peers whose numbers the parity tests compare with; nothing a user installs does.
    for group, reqs in requirements().items():
        if group == "dev":
            continue
        for req in reqs:
            assert not re.search(r"==|<|~=|!=", req), f"{group}: {req} caps a version"
            name = re.split(r"[\[>=<~!; ]", req, maxsplit=1)[0]
            assert name == "rankstream" or ">=" in req, f"{group}: {req} has no lower bound"


def test_extras_name_what_the_errors_and_readme_tell_users_to_install():
    extras = PROJECT["optional-dependencies"]
    assert {"ignite", "keras", "examples", "docs", "dev"} <= set(extras)
    assert {r.split(">=")[0] for r in extras["ignite"]} == {"torch", "pytorch-ignite"}
    assert [r.split(">=")[0] for r in extras["keras"]] == ["keras"]  # no backend: the user picks one
    assert any(r.startswith("matplotlib") for r in extras["examples"])
    core = " ".join(PROJECT["dependencies"])
    assert "matplotlib" not in core and "torch" not in core and "keras" not in core


def test_torch_pin_lives_in_constraints_only():
    pins = [ln for ln in (ROOT / "constraints.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert "torch==2.13.0" in pins
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


def test_version_has_one_source():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rankstream.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)", rankstream.__version__)
    assert importlib.metadata.version("rankstream") == rankstream.__version__


def test_license_is_an_spdx_expression_with_its_text():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_changelog_and_typing_marker_exist():
    assert (ROOT / "rankstream" / "py.typed").exists()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel setuptools builds from a copy of the sources, any Python warning an error
    (``project.license`` as a table used to print a deprecation warning on every install), with
    numpy and scipy hidden as in pip's isolated build: the version must be read from
    ``rankstream/__init__.py`` without importing the package."""
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "rankstream", src / "rankstream", ignore=shutil.ignore_patterns("__pycache__"))
    build = f"import setuptools.build_meta as b; b.build_wheel({str(out)!r})"
    proc = guarded_run(
        [sys.executable, "-W", "error", "-c", HIDE + build],
        capture_output=True,
        text=True,
        cwd=src,
        env={**os.environ, "RANKSTREAM_HIDE": "numpy,scipy,torch,keras,ignite"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("rankstream-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def test_wheel_metadata(wheel):
    dist_info = f"rankstream-{rankstream.__version__}.dist-info"
    names = set(wheel.namelist())
    assert "rankstream/py.typed" in names
    assert f"{dist_info}/licenses/LICENSE" in names
    meta = wheel.read(f"{dist_info}/METADATA").decode()
    assert re.search(rf"^Version: {re.escape(rankstream.__version__)}$", meta, re.M)
    assert re.search(r"^License-Expression: Apache-2.0$", meta, re.M)
    for req in re.findall(r"^Requires-Dist: (.*)$", meta, re.M):
        spec, _, marker = req.partition(";")
        if 'extra == "dev"' not in marker:
            assert "==" not in spec and "<" not in spec, req


def test_wheel_ships_every_module(wheel):
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "rankstream").rglob("*.py")}
    assert sources <= set(wheel.namelist())


# --- adapters without their framework -------------------------------------------------------


def test_core_imports_and_computes_without_any_framework():
    proc = run_python(
        """
        import numpy as np
        import rankstream, rankstream.pykeen
        print(rankstream.map_at_k(np.array([[3.0, 2.0, 1.0]]), np.array([[0.0, 1.0, 1.0]]), k=[3]))
        frameworks = {"torch", "ignite", "keras", "jax", "tensorflow"}
        print(sorted(m for m in sys.modules if m.split(".")[0] in frameworks))
        """,
        hide=("torch", "ignite", "keras", "jax", "jaxlib", "tensorflow"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize("missing", ["torch", "ignite"])
def test_ignite_adapter_without_its_framework_names_the_extra(missing):
    message, cause = import_error("rankstream.ignite", hide=(missing,))
    assert 'pip install "rankstream[ignite]"' in message
    assert f"No module named '{missing}'" in message
    assert cause == missing  # the original error is chained


def test_keras_adapter_without_keras_names_the_extra_and_a_backend():
    message, cause = import_error("rankstream.keras", hide=("keras",))
    assert 'pip install "rankstream[keras]" jax' in message
    assert "tensorflow" in message and "torch" in message
    assert cause == "keras"


@pytest.mark.parametrize("backend", ["jax", "tensorflow", "torch"])
def test_keras_adapter_without_its_backend_names_the_extra_and_the_backend(backend):
    hide = ("jax", "jaxlib") if backend == "jax" else (backend,)
    message, cause = import_error("rankstream.keras", hide=hide, KERAS_BACKEND=backend)
    assert f'pip install "rankstream[keras]" {backend}' in message
    assert f"KERAS_BACKEND={backend}" in message
    assert cause == backend


def test_keras_default_backend_missing_is_explained(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    proc = guarded_run(
        [sys.executable, "-c", HIDE + "import rankstream.keras"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            **env,
            "RANKSTREAM_HIDE": "tensorflow",
            "KERAS_HOME": str(tmp_path),  # no keras.json choosing a backend
            "PYTHONPATH": str(ROOT),
        },
    )
    assert proc.returncode != 0
    assert "KERAS_BACKEND is unset" in proc.stderr
    assert 'pip install "rankstream[keras]" tensorflow' in proc.stderr


@pytest.mark.parametrize(
    "module, fake, version, expected",
    [
        ("rankstream.ignite", "ignite", "0.4.13", "pytorch-ignite 0.5.1 or later"),
        ("rankstream.keras", "keras", "2.15.0", "Keras 3.6 or later"),
    ],
)
def test_too_old_framework_is_named(module, fake, version, expected):
    proc = run_python(
        f"""
        import types
        sys.modules[{fake!r}] = types.SimpleNamespace(__version__={version!r})
        try:
            import {module}
        except ImportError as e:
            print("MESSAGE", e)
        """
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout and version in proc.stdout


# --- the demo, as `make demo > log` runs it -------------------------------------------------


def makefile_variable(name: str) -> str:
    found = re.search(rf"^{name} := (.*)$", MAKEFILE, re.M)
    assert found, f"the Makefile sets no {name}"
    return found.group(1).strip()


MAKEFILE = (ROOT / "Makefile").read_text()
DEMO_EXTRAS = set(makefile_variable("DEMO_EXTRAS").split(","))


def makefile_rules() -> dict[str, tuple[list[str], str]]:
    """target -> (its prerequisites, its recipe) for each rule of the Makefile (a static pattern
    rule's prerequisites are those after its last colon)."""
    rules = {}
    for m in re.finditer(r"^([^\s#][^:\n]*):(?!=)([^\n]*)\n((?:\t[^\n]*\n)*)", MAKEFILE, re.M):
        rules[m.group(1).strip()] = (m.group(2).rpartition(":")[2].split(), m.group(3))
    return rules


def test_make_demo_installs_the_demo_extras_alone_and_every_other_target_the_dev_extra():
    """``make demo`` on a fresh clone builds a venv with the demo's extras only (torch pinned by
    constraints.txt) and runs the demo; every other target that runs Python from the venv
    needs the dev extra, installed on top (a second stamp)."""
    rules = makefile_rules()
    assert makefile_variable("DEMO_STAMP") == "$(VENV)/.demo-installed"
    assert makefile_variable("STAMP") == "$(VENV)/.installed"
    prereqs, recipe = rules["$(DEMO_STAMP)"]
    assert prereqs == ["pyproject.toml", "constraints.txt"]
    assert "$(PY) -m venv $(VENV)" in recipe
    installs = re.findall(r"\$\(PIP\) install -q (.*)", recipe)
    assert installs == ["--upgrade pip setuptools wheel", '-c constraints.txt -e ".[$(DEMO_EXTRAS)]"']
    assert rules["demo"] == (["$(DEMO_STAMP)"], "\t$(BIN)/python examples/ignite_recommender.py\n")
    prereqs, recipe = rules["$(STAMP)"]
    assert prereqs == ["$(DEMO_STAMP)"]
    assert re.findall(r"\$\(PIP\) install -q (.*)", recipe) == ['-c constraints.txt -e ".[dev]"']
    assert rules["venv"][0] == ["$(STAMP)"]
    phony = re.search(r"^\.PHONY: (.*)$", MAKEFILE, re.M).group(1).split()
    keras = [f"test-keras-{b}" for b in makefile_variable("KERAS_BACKENDS").split()]
    others = set(phony) - {"venv", "demo", "clean", *keras}
    assert others == {"test", "test-core", "bench", "bench-spark", "lint", "docs"}
    for target in [*sorted(others), "$(addprefix test-keras-,$(KERAS_BACKENDS))"]:
        assert rules[target][0] == ["venv"], (target, rules[target])
    # both installs end with the check that torch is the pinned wheel
    assert "constraints.txt" in makefile_variable("TORCH_PIN")
    for stamp in ("$(DEMO_STAMP)", "$(STAMP)"):
        assert rules[stamp][1].splitlines()[-2:] == ["\t$(CHECK_TORCH)", f"\ttouch {stamp}"]


def test_demo_logs_one_clean_line_per_epoch_and_writes_its_plot(tmp_path):
    """The demo as ``make demo > log`` runs it, with nothing importable but what ``make demo``
    installs (``rankstream[$(DEMO_EXTRAS)]``: every other package of this environment hidden)."""
    png = tmp_path / "plot" / "demo.png"
    proc = run_python(
        f"""
        import runpy
        sys.argv = [{str(DEMO)!r}, "--epochs", "1", "--plot", {str(png)!r}]
        runpy.run_path({str(DEMO)!r}, run_name="__main__")
        """,
        hide=tuple(hidden_modules(DEMO_EXTRAS)),
        RANKSTREAM_HIDE_DISTS=",".join(hidden_distributions(DEMO_EXTRAS)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\r" not in proc.stdout + proc.stderr  # no progress bar written into a log
    epochs = [ln for ln in proc.stdout.splitlines() if ln.startswith("epoch ") and "/1:" in ln]
    assert [ln.split(":")[0] for ln in epochs] == ["epoch 0/1", "epoch 1/1"], proc.stdout
    assert max(len(ln) for ln in proc.stdout.splitlines()) < 200
    # The last epoch's intervals: each brackets its value, which is the table's last row at k=10,
    # over every user of the data (consistency only: the numbers themselves are tested elsewhere).
    lines = proc.stdout.splitlines()
    users = int(re.search(r"(\d+) users x \d+ items", proc.stdout).group(1))
    header = [col.strip() for col in next(ln for ln in lines if ln.startswith("epoch |")).split("|")]
    last_row = [col.strip() for col in next(ln for ln in lines if ln.startswith("    1 |")).split("|")]
    number = r"(\d+\.\d+)"
    for label, column in [("MAP@10", "MAP@10"), ("nDCG@10", "NDCG@10")]:
        found = re.search(
            rf"^{label} +{number} \(95% CI {number}-{number}, (\d+) users\)$", proc.stdout, re.M
        )
        assert found, proc.stdout
        value, low, high = (float(found.group(i)) for i in (1, 2, 3))
        assert low < value < high, found.group(0)
        assert found.group(1) == last_row[header.index(column)], (found.group(0), last_row)
        assert int(found.group(4)) == users
    assert f"per epoch: {png}" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


TORCHMETRICS_SNIPPET = """
import torch
from rankstream.torchmetrics import RetrievalMRR, RetrievalNormalizedDCG

preds = torch.tensor([0.9, 0.2, 0.5, 0.1, 0.8, 0.3])
target = torch.tensor([1, 0, 0, 0, 0, 1])
indexes = torch.tensor([0, 0, 0, 1, 1, 1])
mrr, ndcg = RetrievalMRR(), RetrievalNormalizedDCG(top_k=2)
mrr.update(preds, target, indexes=indexes)
ndcg.update(preds, target, indexes=indexes)
print("torchmetrics:", round(float(mrr.compute()), 4), round(float(ndcg.compute()), 4))
"""


def run_example_code(script: str, *args: str) -> str:
    path = ROOT / "examples" / script
    argv = [str(path), *args]
    return f"import runpy\nsys.argv = {argv!r}\nrunpy.run_path({str(path)!r}, run_name='__main__')\n"


@pytest.mark.parametrize(
    "extras, also, code, env, expected",
    [
        # pip install ".[ignite]": compare_rankers (torch and Ignite alone)
        (
            {"ignite"},
            (),
            run_example_code("compare_rankers.py", "--users", "500"),
            {},
            r"^ndcg@10/itemknn-vs-popularity \[diff, ci_low, ci_high, p_value\]: \[",
        ),
        # pip install ".[keras]" jax, as the README says
        ({"keras"}, ("jax",), run_example_code("keras_ranking.py"), {"KERAS_BACKEND": "jax"}, r"^test: \{"),
        # pip install ".[torchmetrics]": the README's torchmetrics block
        ({"torchmetrics"}, (), TORCHMETRICS_SNIPPET, {}, r"^torchmetrics: 0.75 0.8155$"),
    ],
    ids=["ignite", "keras+jax", "torchmetrics"],
)
def test_an_extra_alone_runs_its_adapter(extras, also, code, env, expected):
    """With every package of this environment that ``pip install ".[extras]" *also`` would not
    install hidden (imports and metadata), the adapter's example runs. The spark extra is built
    for real (tests/test_extras_venv.py); the demo's extras in the demo test above."""
    proc = run_python(
        code,
        hide=tuple(hidden_modules(extras, also)),
        RANKSTREAM_HIDE_DISTS=",".join(hidden_distributions(extras, also)),
        **env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(expected, proc.stdout, re.M), proc.stdout


def test_demo_without_matplotlib_says_which_extra_before_training():
    proc = run_python(
        f"""
        import runpy
        sys.argv = ["ignite_recommender.py", "--epochs", "1"]
        runpy.run_path({str(DEMO)!r}, run_name="__main__")
        """,
        hide=("matplotlib",),
    )
    assert proc.returncode != 0
    assert 'pip install "rankstream[examples]"' in proc.stderr
    assert "epoch" not in proc.stdout  # it failed before training


def test_rank_based_is_a_deprecated_alias_of_pykeen():
    proc = run_python(
        """
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import rankstream.rank_based as old
            import rankstream.rank_based  # a second import: no second warning
            from rankstream.rank_based import HitsAtK, resolve
        import rankstream.pykeen as new
        print(len(caught), caught[0].category.__name__, "rankstream.pykeen" in str(caught[0].message))
        print(old is new, HitsAtK is new.HitsAtK, resolve("hits@3").k)
        """
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["1 DeprecationWarning True", "True True 3"]
