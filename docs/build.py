"""Build rankstream's API reference from its docstrings with pdoc (``make docs``).

Writes HTML to ``--output`` (default ``build/docs``; open ``index.html``). Every module of the
package is imported and documented (the public ``rankstream``, ``rankstream.ignite``,
``rankstream.keras``, ``rankstream.rank_based``, ``rankstream.distributed``, and the core and
adapters behind them), ``rankstream.keras`` under ``KERAS_BACKEND``
(``torch`` when unset). Any warning raised while rankstream's modules are imported or rendered
(a module that fails to import, an annotation or docstring pdoc cannot read) fails the build.
The frameworks themselves are imported first, outside that check: their own deprecation
notices are not rankstream's to fix.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    import pdoc.render

    import rankstream

    pdoc.render.configure(
        docformat="google",  # Google-style sections; reST roles and literals too
        footer_text=f"rankstream {rankstream.__version__}",
        show_source=True,
    )
    # pdoc walks into a package's submodules only when the package has no __all__: name the others.
    modules = ["rankstream"] + [
        m.name
        for m in pkgutil.walk_packages(rankstream.__path__, "rankstream.")
        if hasattr(importlib.import_module(m.name.rpartition(".")[0]), "__all__")
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*modules, output_directory=args.output)
    for w in caught:
        print(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}", file=sys.stderr)
    if caught:
        print(f"docs: {len(caught)} warning(s), treated as errors", file=sys.stderr)
        return 1
    pages = sorted(p.relative_to(args.output).as_posix() for p in args.output.rglob("*.html"))
    print(f"docs: {len(pages)} pages in {args.output} (open {args.output / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
