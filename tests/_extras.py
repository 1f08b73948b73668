"""What an install of rankstream with some extras brings, read off the metadata: the closure of
distributions ``pip install "rankstream[extras]"`` installs (rankstream's own requirements from
this checkout's pyproject.toml, every other from the installed distributions' metadata), and the
top-level modules of the test environment that such an install would NOT have, to hide from a
subprocess (see ``HIDE`` in test_packaging.py) so that it runs with only what the extras bring.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _ours(extras: set[str]) -> list[Requirement]:
    """rankstream's requirements with ``extras``, self-references (``rankstream[all]``) resolved."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    unknown = extras - set(optional)
    assert not unknown, f"no extra {sorted(unknown)} in pyproject.toml; there are {sorted(optional)}"
    out = [Requirement(r) for r in project["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in map(Requirement, optional[extra]):
            if canonical(req.name) == "rankstream":
                todo += sorted(req.extras)
            else:
                out.append(req)
    return out


def closure(extras: set[str], also: tuple[str, ...] = ()) -> set[str]:
    """The canonical names of the distributions ``pip install "rankstream[extras]" *also``
    installs, with the versions installed here (rankstream itself not included). A requirement
    this environment does not have is an ``AssertionError``: the closure would be a guess."""
    asked = [*_ours(extras), *map(Requirement, also)]
    todo = [(r.name, set(r.extras)) for r in asked if r.marker is None or r.marker.evaluate({"extra": ""})]
    found: dict[str, set[str]] = {}  # distribution -> the extras it was asked for
    while todo:
        name, wanted = todo.pop()
        name = canonical(name)
        if name in found and wanted <= found[name]:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise AssertionError(
                f"{name} (from rankstream[{','.join(sorted(extras))}]) is not installed"
            ) from None
        found[name] = found.get(name, set()) | wanted
        for sub in map(Requirement, dist.requires or []):
            # unconditional, or a requirement of the platform or of an extra asked for
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in found[name] | {""}):
                todo.append((sub.name, set(sub.extras)))
    return found


def hidden_modules(extras: set[str], also: tuple[str, ...] = ()) -> list[str]:
    """The top-level modules installed here that ``pip install "rankstream[extras]" *also``
    would not install (rankstream itself comes from the checkout, never hidden)."""
    keep = set(closure(extras, also)) | {"rankstream"}
    hide = []
    for module, dists in md.packages_distributions().items():
        if module.isidentifier() and not {canonical(d) for d in dists} & keep:
            hide.append(module)
    return sorted(hide)


def hidden_distributions(extras: set[str], also: tuple[str, ...] = ()) -> list[str]:
    """The canonical names of the distributions installed here that ``pip install
    "rankstream[extras]" *also`` would not install (rankstream itself excepted)."""
    keep = set(closure(extras, also)) | {"rankstream"}
    return sorted({canonical(d.metadata["Name"]) for d in md.distributions()} - keep)
