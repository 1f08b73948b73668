"""Build rankstream's API reference from its docstrings with pdoc (``make docs``).

Writes HTML to ``--output`` (default ``build/docs``; open ``index.html``). The landing page is a
map of the public modules (:data:`MAP`): the framework adapters first, then the core, the
rank-based metrics, filtering and distributed evaluation, each with one line saying what it
is for, and below them the modules that implement them. Every module of the package is
imported and documented, ``rankstream.keras`` under ``KERAS_BACKEND`` (``torch`` when unset).

Docstrings are Google-style with reST roles and literal blocks; pdoc renders the roles but not
two of their forms, which are turned into Markdown first: ``:class:`~a.b.C``` (the role's
``~``) and the ``::`` that opens a literal block (``Example::`` and an indented block become
``Example:`` and a code block).

Links: pdoc links a name it does not render, a private base class (``_ListMetric``) or a member
inherited from a framework class (Keras' ``Metric.name``), to an anchor that does not exist;
those names are left as plain text. Any other link to a missing page or anchor is an error.

Any warning raised while rankstream's modules are imported or rendered (a module that fails to
import, an annotation or docstring pdoc cannot read) fails the build, and so does a dead link.
The frameworks themselves are imported first, outside that check: their own deprecation
notices are not rankstream's to fix.
"""

from __future__ import annotations

import argparse
import html
import importlib
import inspect
import os
import pkgutil
import re
import sys
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The landing page: sections in order, each a list of (module, what it is for).
MAP: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Framework adapters",
        (
            (
                "rankstream.ignite",
                "PyTorch-Ignite metrics to attach to an Engine: MAP, NDCG, DCG, Precision, Recall, "
                "HitRate, MRR, RPrecision, ListMetrics and the rank-based metrics, with ignite's "
                "arguments and defaults.",
            ),
            (
                "rankstream.keras",
                "Keras 3 metrics for model.compile on torch, JAX and TensorFlow: drop-ins for "
                "keras_rs.metrics, HitRateAtK, RPrecision, ListMetrics and the rank-based metrics.",
            ),
            (
                "rankstream.torchmetrics",
                "torchmetrics Metric classes under torchmetrics' Retrieval* names and arguments "
                "(flat items with query ids), their states sums (Lightning, DDP, MetricCollection).",
            ),
        ),
    ),
    (
        "Core (no framework needed)",
        (
            (
                "rankstream",
                "The list-metric kernels (one definition of each metric), ListMetrics, State, "
                "merge and the functional forms, over numpy or torch arrays.",
            ),
            (
                "rankstream.core.functional",
                "Functional forms: per-list values of one batch, e.g. ndcg_at_k(y_pred, y, k=10).",
            ),
            (
                "rankstream.core.state",
                "State: a metric's state as a bag of named sums; update, merge, compute, state_dict.",
            ),
        ),
    ),
    (
        "Whole catalogs",
        (
            (
                "rankstream.catalog",
                "Exact list and rank metrics over a whole catalog scored chunk by chunk (item "
                "embeddings or any scoring callable), with per-query exclusions and shards whose "
                "counts add; no (queries x items) matrix.",
            ),
            (
                "rankstream.pykeen_catalog",
                "PyKEEN's rank-based report of a PyKEEN model (filtered, both sides, three rank "
                "types), each batch scored against slices of entities: no (batch x entities) matrix.",
            ),
        ),
    ),
    (
        "Rank-based metrics",
        (
            (
                "rankstream.pykeen",
                "PyKEEN-compatible metrics over arrays of ranks (Hits@k, MRR, GMR, mean rank, "
                "their expectations, variances and adjusted forms) and a name resolver.",
            ),
        ),
    ),
    (
        "Filtering",
        (
            (
                "rankstream.filtering",
                "Filtered link prediction: candidate masks from known triples (FilterIndex) and "
                "PyKEEN's macro weights.",
            ),
        ),
    ),
    (
        "Distributed",
        (
            (
                "rankstream.distributed",
                "Distributed and sharded evaluation: all-reduce or merge core states, weights "
                "that drop DistributedSampler padding.",
            ),
            (
                "rankstream.spark",
                "Offline evaluation of Spark DataFrames: per-partition sums on Arrow batches, "
                "summed by Spark; Spark MLlib's RankingMetrics conventions.",
            ),
        ),
    ),
)

_INDEX = """\
{% extends "frame.html.jinja2" %}
{% block title %}rankstream API reference{% endblock %}
{% block nav %}
    <h2>rankstream</h2>
    {% for title, entries in sections %}
        <h2>{{ title }}</h2>
        <ul>
        {% for name, line in entries %}
            <li><a href="{{ name.replace('.', '/') }}.html">{{ name }}</a></li>
        {% endfor %}
        </ul>
    {% endfor %}
    <h2>Implementation</h2>
    <ul>
    {% for name, line in others %}
        <li><a href="{{ name.replace('.', '/') }}.html">{{ name }}</a></li>
    {% endfor %}
    </ul>
    <footer>{{ footer_text }}</footer>
{% endblock %}
{% block content %}
    <header class="pdoc">
        {% if search %}
            <input type="search" placeholder="Search API Documentation..." aria-label="search box">
        {% endif %}
    </header>
    <main class="pdoc">
        <section class="module-info">
            <h1 class="modulename">rankstream API reference</h1>
            <div class="docstring">
            <p>Streaming ranking metrics: one framework-agnostic core of sums and thin adapters.
            Start with an adapter, or with the core outside any framework.</p>
            {% for title, entries in sections %}
                <h2 id="section-{{ loop.index }}">{{ title }}</h2>
                <dl class="module-map">
                {% for name, line in entries %}
                    <dt><a href="{{ name.replace('.', '/') }}.html"><code>{{ name }}</code></a></dt>
                    <dd>{{ line }}</dd>
                {% endfor %}
                </dl>
            {% endfor %}
            <h2 id="implementation">Implementation</h2>
            <p>The modules behind the public ones (documented for contributors).</p>
            <dl class="module-map">
            {% for name, line in others %}
                <dt><a href="{{ name.replace('.', '/') }}.html"><code>{{ name }}</code></a></dt>
                <dd>{{ line }}</dd>
            {% endfor %}
            </dl>
            </div>
        </section>
    </main>
    {% if search %}
        {% include "search.html.jinja2" %}
    {% endif %}
{% endblock %}
"""

_ROLE_TILDE = re.compile(r"(:(?:py:)?(?:mod|func|data|const|class|meth|attr|exc|obj):`)~")


def _literal_blocks(text: str) -> str:
    """reST literal blocks as Markdown: ``Text::`` then an indented block becomes ``Text:`` and
    a fenced code block (``Text ::`` gives ``Text``, a lone ``::`` nothing), as Sphinx shows it."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        if not stripped.endswith("::"):
            out.append(line)
            i += 1
            continue
        base = len(line) - len(line.lstrip())
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block_start, block = j, []
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
            j -= 1
        if not block:  # "::" with no indented block after it: not a literal block
            out.append(line)
            i += 1
            continue
        head = stripped[:-2]
        head = head.rstrip() if head.endswith(" ") or not head.strip() else head + ":"
        if head.strip():
            out.append(head)
        out.append("")
        indent = min(len(b) - len(b.lstrip()) for b in block if b.strip())
        pad = " " * base
        out.append(pad + "```python")
        out.extend(pad + b[indent:] if b.strip() else "" for b in block)
        out.append(pad + "```")
        i = block_start + len(block)
    return "\n".join(out)


def _markdown_ready(text: str) -> str:
    """The two reST forms pdoc does not render, turned into what it does (module docstring)."""
    return _literal_blocks(_ROLE_TILDE.sub(r"\1", text))


class _Page(HTMLParser):
    """The anchors (``id``) of a page and its links (``href``, with the text they wrap)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "a" and found.get("href"):
            self.hrefs.append(str(found["href"]))


def _local(href: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", href, re.IGNORECASE)


def _target(page: Path, href: str) -> tuple[Path, str]:
    path, _, fragment = href.partition("#")
    return ((page.parent / path).resolve() if path else page.resolve()), fragment


def _unrendered(module: str, qualname: str) -> bool:
    """Whether pdoc renders no anchor for ``module.qualname`` by design: a private name, or a
    member that a class inherits from outside rankstream (a framework's base class)."""
    parts = qualname.split(".")
    if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts):
        return True
    try:
        owner: Any = importlib.import_module(module)
        for part in parts[:-1]:
            owner = getattr(owner, part)
    except (ImportError, AttributeError):
        return False
    if not inspect.isclass(owner):
        return False
    for klass in inspect.getmro(owner):
        if parts[-1] in vars(klass):
            return not klass.__module__.startswith("rankstream")
    return True  # an instance attribute pdoc read from a base's __init__ (Keras' ``self.name``)


def check_links(output: Path) -> list[str]:
    """Unlink what pdoc links but does not render (:func:`_unrendered`) in every page under
    ``output``; return the other links to a missing page or anchor, one line each."""
    pages: dict[Path, _Page] = {}
    for page in sorted(output.rglob("*.html")):
        parsed = _Page()
        parsed.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parsed
    dead: list[str] = []
    for page, parsed in pages.items():
        module = page.relative_to(output.resolve()).with_suffix("").as_posix().replace("/", ".")
        unlink: set[str] = set()
        for href in parsed.hrefs:
            if not _local(href):
                continue
            dest, fragment = _target(page, href)
            if dest in pages and (not fragment or fragment in pages[dest].ids):
                continue
            dest_module = dest.relative_to(output.resolve()).with_suffix("").as_posix().replace("/", ".")
            if dest in pages and fragment and _unrendered(dest_module, fragment):
                unlink.add(href)
            else:
                dead.append(f"{page.relative_to(output.resolve())}: dead link {href!r} (from {module})")
        if unlink:
            text = page.read_text(encoding="utf-8")
            for href in unlink:
                quoted = re.escape(html.escape(href))
                pattern = re.compile(r'<a\b[^>]*\bhref="' + quoted + r'"[^>]*>(.*?)</a>', re.DOTALL)
                text = pattern.sub(r"\1", text)
            page.write_text(text, encoding="utf-8")
    return dead


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "docs")
    args = parser.parse_args(argv)

    os.environ.setdefault("KERAS_BACKEND", "torch")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT))
    for framework in ("torch", "ignite", "keras"):
        __import__(framework)

    import pdoc
    import pdoc.docstrings
    import pdoc.render

    import rankstream

    pdoc.render.configure(
        docformat="google",  # Google-style sections; reST roles and literals too
        footer_text=f"rankstream {rankstream.__version__}",
        show_source=True,
    )
    rst = pdoc.docstrings.rst
    pdoc.docstrings.rst = lambda contents, source_file: rst(_markdown_ready(contents), source_file)
    pdoc.docstrings.convert.cache_clear()
    # pdoc walks into a package's submodules only when the package has no __all__: name the others.
    modules = ["rankstream"] + [
        m.name
        for m in pkgutil.walk_packages(rankstream.__path__, "rankstream.")
        if m.name != "rankstream.rank_based"  # the deprecated alias of rankstream.pykeen
        and hasattr(importlib.import_module(m.name.rpartition(".")[0]), "__all__")
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*modules, output_directory=args.output)
        documented = sorted(p.relative_to(args.output).with_suffix("").as_posix().replace("/", ".")
                            for p in args.output.rglob("*.html") if p.name != "index.html")  # fmt: skip
        mapped = [name for _, entries in MAP for name, _ in entries]
        missing = sorted(set(mapped) - set(documented))
        others = [(name, _first_line(name)) for name in documented if name not in mapped]
        index = pdoc.render.env.from_string(_INDEX).render(sections=MAP, others=others)
        (args.output / "index.html").write_text(index, encoding="utf-8")
    for w in caught:
        print(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}", file=sys.stderr)
    dead = check_links(args.output)
    for line in dead:
        print(f"docs: {line}", file=sys.stderr)
    if missing:
        print(f"docs: modules on the landing page without a page: {missing}", file=sys.stderr)
    if caught or dead or missing:
        print(
            f"docs: {len(caught)} warning(s), {len(dead)} dead link(s), {len(missing)} missing module(s), "
            "treated as errors",
            file=sys.stderr,
        )
        return 1
    pages = sorted(p.relative_to(args.output).as_posix() for p in args.output.rglob("*.html"))
    print(f"docs: {len(pages)} pages in {args.output} (open {args.output / 'index.html'})")
    return 0


def _first_line(module: str) -> str:
    """The first line of a module's docstring (its one-line description)."""
    doc = inspect.getdoc(importlib.import_module(module)) or ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", first).replace("``", "")


if __name__ == "__main__":
    sys.exit(main())
