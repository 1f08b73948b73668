"""The API reference: explicit public signatures, self-contained docstrings, and the pdoc build
(``docs/build.py``): its landing page is a map of the public modules in order and no link in it
leads nowhere. One docs build for the whole module."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ignite.engine import Engine

import reference

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = (
    "rankstream",
    "rankstream.ignite",
    "rankstream.keras",
    "rankstream.pykeen",
    "rankstream.filtering",
    "rankstream.distributed",
    "rankstream.spark",
    "rankstream.torchmetrics",
    "rankstream.catalog",
    "rankstream.pykeen_catalog",
)
#: the landing page's map, in order: adapters, core, rank-based, filtering, distributed
MAP_ORDER = [
    "rankstream.ignite",
    "rankstream.keras",
    "rankstream.torchmetrics",
    "rankstream",
    "rankstream.core.functional",
    "rankstream.core.state",
    "rankstream.catalog",
    "rankstream.pykeen_catalog",
    "rankstream.pykeen",
    "rankstream.filtering",
    "rankstream.distributed",
    "rankstream.spark",
]
#: Callables whose *args / **kwargs are genuinely variadic (keyed by the function that bears
#: them), each documented in its docstring under the variadic parameter's name.
VARIADIC = {
    # any number of states: nothing is hidden
    "rankstream.core.state.merge": "states",
    # the keyword arguments of whatever metric the name resolves to
    "rankstream.pykeen.resolve": "kwargs",
    # PyKEEN's API: the constructor arguments of a base metric the caller chooses
    "rankstream.pykeen.DerivedRankBasedMetric.__init__": "kwargs",
}
#: a reference to a private name in a reST role (``:class:`_ListMetric```, ``~a._b.C``)
PRIVATE_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]*\.)?_[A-Za-z]\w*[^`]*`")
#: a private class named in prose or a code span (``as _ListMetric``)
PRIVATE_CLASS = re.compile(r"(?<![\w.])_[A-Z][A-Za-z]+\b")


def _import(name: str) -> Any:
    """The module, under the Keras backend the suite runs (tests/conftest.py)."""
    return importlib.import_module(name)


def _public_objects() -> list[tuple[str, Any]]:
    seen: dict[int, tuple[str, Any]] = {}
    for module in PUBLIC:
        mod = _import(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and id(obj) not in seen:
                seen[id(obj)] = (f"{module}.{name}", obj)
    return list(seen.values())


def _bearer(obj: Any) -> Any:
    """The function whose signature ``inspect.signature(obj)`` shows (a class: its ``__init__``)."""
    return obj.__init__ if inspect.isclass(obj) else obj


def _variadic(obj: Any) -> list[str]:
    """The *args / **kwargs of ``obj``'s signature, unless allowed and documented as variadic."""
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # an exception class: no constructor of its own
        return []
    found = [p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    bearer = _bearer(obj)
    key = f"{getattr(bearer, '__module__', '')}.{getattr(bearer, '__qualname__', '')}"
    allowed = VARIADIC.get(key)
    if allowed and allowed in found and allowed in (inspect.getdoc(bearer) or ""):
        found.remove(allowed)
    return found


def test_public_signatures_are_explicit():
    objects = _public_objects()
    assert len(objects) > 60  # the walk reached every module's exports
    hidden = {name: found for name, obj in objects if (found := _variadic(obj))}
    assert not hidden, f"public signatures with *args / **kwargs hiding options: {hidden}"


def test_the_signature_check_catches_hidden_options():
    class Hiding:
        def __init__(self, top_k: int = 10, *args: Any, denominator: str = "k", **kwargs: Any) -> None:
            """Options as another class."""

    def forwards(query: Any, **kwargs: Any) -> None:
        """Like resolve, but not on the allow-list."""

    assert _variadic(Hiding) == ["args", "kwargs"]
    assert _variadic(forwards) == ["kwargs"]


@pytest.mark.parametrize(
    ("path", "options"),
    [
        ("rankstream.ignite.Precision", {"ignore_zero_hits", "device", "denominator", "ties", "seed"}),
        ("rankstream.ignite.Recall", {"relevance_threshold", "output_transform", "skip_unrolling"}),
        ("rankstream.ignite.MRR", {"relevance_threshold", "ties", "seed"}),
        ("rankstream.keras.MAP", {"denominator", "relevance_threshold", "empty", "state_dtype"}),
        ("rankstream.keras.PrecisionAtK", {"denominator", "relevance_threshold", "empty"}),
        ("rankstream.keras.RecallAtK", {"shuffle_ties", "seed", "empty", "state_dtype"}),
        ("rankstream.keras.MRR", {"relevance_threshold", "empty"}),
        ("rankstream.keras.HitRateAtK", {"relevance_threshold", "empty"}),
        ("rankstream.MAPKernel", {"denominator", "empty", "ties", "seed", "weighting", "negative_labels"}),
        ("rankstream.RPrecisionKernel", {"empty", "relevance_threshold"}),
        ("rankstream.ListMetrics", {"empty", "ties", "weighting", "relevance_threshold"}),
    ],
)
def test_reported_classes_name_their_options(path, options):
    module, _, name = path.rpartition(".")
    params = inspect.signature(getattr(_import(module), name)).parameters
    assert options <= set(params), f"{path}{inspect.signature(getattr(_import(module), name))}"


def _args_section(doc: str) -> list[str] | None:
    """The argument names of a Google ``Args:`` section (``a, b: ...`` names both), or None."""
    m = re.search(r"^Args:\n((?:[ \t]+.*\n|\n)+)", doc + "\n", re.MULTILINE)
    if not m:
        return None
    lines = m.group(1).splitlines()
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    names = []
    for ln in lines:
        if ln.strip() and len(ln) - len(ln.lstrip()) == indent:
            head = ln.strip().split(":", 1)[0]
            names += [n.strip().lstrip("*") for n in head.split(",")]
    return names


def test_adapter_docstrings_describe_every_argument():
    for module in ("rankstream.ignite", "rankstream.keras"):
        mod = _import(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not inspect.isclass(obj):
                continue
            doc = inspect.getdoc(obj) or ""
            described = _args_section(doc)
            assert described is not None, f"{module}.{name}: no Args section"
            params = [p for p in inspect.signature(obj).parameters if p != "self"]
            assert sorted(described) == sorted(params), f"{module}.{name}: Args {described} vs {params}"


def test_docstrings_reference_no_private_name():
    bad = []
    for name, obj in _public_objects():
        docs = [inspect.getdoc(obj) or ""]
        if inspect.isclass(obj):
            docs += [
                inspect.getdoc(member) or ""
                for attr, member in vars(obj).items()
                if (not attr.startswith("_") or attr == "__init__") and callable(member)
            ]
        for doc in docs:
            bad += [f"{name}: {m}" for m in PRIVATE_ROLE.findall(doc) + PRIVATE_CLASS.findall(doc)]
    assert not bad, bad


# ------------------------------------------------------------------------------------------
# the built reference


class _Page(HTMLParser):
    """Anchors, links, the landing page's map and the text of the rendered docstrings."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.map: list[tuple[str, str]] = []  # (href, description) of <dl class="module-map">
        self.docstring: list[str] = []
        self._divs: list[bool] = []
        self._in_map = self._in_dd = False
        self._in_code_block = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.hrefs.append(str(a["href"]))
            if self._in_map:
                self.map.append((str(a["href"]), ""))
        if tag == "div":
            self._divs.append("docstring" in classes)
        if tag == "pre" and any(self._divs):
            self._in_code_block += 1
        if tag == "dl" and "module-map" in classes:
            self._in_map = True
        if tag == "dd" and self._in_map:
            self._in_dd = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self._divs:
            self._divs.pop()
        if tag == "pre" and self._in_code_block:
            self._in_code_block -= 1
        if tag == "dl":
            self._in_map = False
        if tag == "dd":
            self._in_dd = False

    def handle_data(self, data: str) -> None:
        if self._in_dd and self.map:
            href, text = self.map[-1]
            self.map[-1] = (href, text + data)
        if any(self._divs) and not self._in_code_block:
            self.docstring.append(data)


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build.py"), "--output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"docs build failed:\n{proc.stdout}\n{proc.stderr}"
    pages = {}
    for page in sorted(out.rglob("*.html")):
        parsed = _Page()
        parsed.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parsed
    return out.resolve(), pages


def test_landing_page_is_the_module_map(docs):
    out, pages = docs
    index = pages[out / "index.html"]
    mapped = [(href.removesuffix(".html").replace("/", "."), text.strip()) for href, text in index.map]
    assert [name for name, _ in mapped[: len(MAP_ORDER)]] == MAP_ORDER
    for name, text in mapped[: len(MAP_ORDER)]:
        assert len(text) > 20, f"{name}: no description on the landing page ({text!r})"
    assert "rankstream.core.lists.ndcg" in [name for name, _ in mapped]  # the rest, after the map
    for name in MAP_ORDER:
        assert (out / (name.replace(".", "/") + ".html")) in pages


def test_no_dead_link(docs):
    out, pages = docs
    dead = []
    for page, parsed in pages.items():
        for href in parsed.hrefs:
            if re.match(r"^[a-z][a-z0-9+.-]*:", href):  # https:, data:, ...
                continue
            path, _, fragment = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            if target not in pages or (fragment and fragment not in pages[target].ids):
                dead.append(f"{page.relative_to(out)} -> {href}")
    assert not dead, f"{len(dead)} dead links, e.g. {dead[:20]}"


def test_public_pages_show_no_markup_artefacts(docs):
    out, pages = docs
    artefacts = re.compile(
        r"::\s*$|:(?:class|func|meth|mod|data|attr|exc|obj):`|~rankstream|``", re.MULTILINE
    )
    bad = []
    for name in MAP_ORDER:
        text = "".join(pages[out / (name.replace(".", "/") + ".html")].docstring)
        bad += [
            f"{name}: {m.group(0)!r} in ...{text[max(0, m.start() - 60) : m.end() + 20]!r}"
            for m in artefacts.finditer(text)
        ]
        bad += [f"{name}: private {m}" for m in PRIVATE_CLASS.findall(text)]
    assert not bad, bad


# ------------------------------------------------------------------------------------------
# the explicit signatures, used as documented, through an Engine


@pytest.mark.parametrize(
    ("cls_name", "per_list", "options"),
    [
        ("Precision", "precision", {"denominator": "valid", "threshold": 2.0}),
        ("Recall", "recall", {"threshold": 2.0}),
        ("MRR", "reciprocal_rank", {"threshold": 2.0}),
        ("HitRate", "hit_rate", {"threshold": 2.0}),
    ],
)
def test_ignite_positional_and_keyword_options_through_an_engine(cls_name, per_list, options):
    """``Cls(top_k, ignore_zero_hits, output_transform, device, skip_unrolling, *, options)``
    as the signature says, attached to an Engine, against the one-list-at-a-time reference."""
    import rankstream.ignite as rsi

    rng = np.random.default_rng(7)
    batches, lists = [], []
    for _ in range(4):
        s = rng.normal(size=(5, 7)).round(1)  # ties among scores too
        y = rng.integers(0, 4, size=(5, 7)).astype(float)
        batches.append((torch.from_numpy(s), torch.from_numpy(y)))
        lists += list(zip(s.tolist(), y.tolist(), strict=True))
    kw = {"relevance_threshold": options["threshold"]}
    if "denominator" in options:
        kw["denominator"] = options["denominator"]
    metric = getattr(rsi, cls_name)([2, 5], False, lambda out: out, "cpu", False, ties="first", **kw)
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    got = engine.run(batches).metrics["m"]
    fn = getattr(reference, per_list)
    scores, labels = [a for a, _ in lists], [b for _, b in lists]
    expected = [reference.mean_over_lists(fn, scores, labels, k, empty="zero", **options) for k in (2, 5)]
    assert got == pytest.approx(expected, abs=1e-12)
