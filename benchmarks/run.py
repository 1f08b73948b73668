"""`make bench`: every benchmark in one run, printed as markdown and saved to
``build/bench/latest.md`` (ignored by git, so a run leaves a clone clean).

Options:

* ``--quick``: small sizes, for a smoke run;
* ``--output DIR``: write ``DIR/latest.md`` instead of ``build/bench/latest.md``;
* ``--publish``: also copy the results to the tracked ``benchmarks/results/latest.md``, on
  purpose, when the README's performance table is to be refreshed from them
  (``python benchmarks/run.py --publish``).

Each section runs in its own process (the Keras backend is fixed at import, and a fresh
process keeps one section's allocations from slowing the next).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: where a run writes ``latest.md`` unless ``--output`` says otherwise (untracked)
DEFAULT_OUTPUT = ROOT / "build" / "bench"
#: the tracked copy the README's performance table is taken from, written only with ``--publish``
PUBLISHED = ROOT / "benchmarks" / "results" / "latest.md"
SECTIONS = [
    ("MAP@k and nDCG@k, Ignite adapter (torch CPU)", "benchmarks.bench_lists", {}),
    (
        "nDCG / MAP, Keras adapter on the torch backend vs keras-rs",
        "benchmarks.bench_keras",
        {"KERAS_BACKEND": "torch"},
    ),
    ("Small eager batches: Ignite update vs minimal eager nDCG / MAP", "benchmarks.bench_small", {}),
    (
        "Compiled Keras on JAX: what a metric adds to evaluate",
        "benchmarks.bench_compiled",
        {"KERAS_BACKEND": "jax"},
    ),
    (
        "Compiled Keras on TensorFlow: what a metric adds to evaluate",
        "benchmarks.bench_compiled",
        {"KERAS_BACKEND": "tensorflow"},
    ),
    (
        "Whole lists (k=None), Keras on torch vs a sort",
        "benchmarks.bench_whole_list",
        {"KERAS_BACKEND": "torch"},
    ),
    ("Beyond-accuracy metrics added to ListMetrics (one thread)", "benchmarks.bench_beyond", {}),
    ("Streamed rank-based metrics (ranks from scores)", "benchmarks.bench_ranks", {}),
    ("PyKEEN's report (3 rank types x head, tail, both) in one metric", "benchmarks.bench_report", {}),
    ("Closed-form statistics (GMR, MRR) vs PyKEEN", "benchmarks.bench_stats", {}),
    ("Query ids: rankstream.torchmetrics vs torchmetrics", "benchmarks.bench_torchmetrics", {}),
    ("Whole catalog: exact metrics without the score matrix (one thread)", "benchmarks.bench_catalog", {}),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="folder of latest.md (default: build/bench, untracked)",
    )
    ap.add_argument(
        "--publish",
        action="store_true",
        help="also copy the results to the tracked benchmarks/results/latest.md",
    )
    return ap.parse_args(argv)


def write_results(text: str, output: Path, publish: bool, published: Path = PUBLISHED) -> list[Path]:
    """Write ``text`` to ``output/latest.md`` and, with ``publish``, to ``published``; the
    paths written."""
    output.mkdir(parents=True, exist_ok=True)
    written = [output / "latest.md"]
    if publish:
        published.parent.mkdir(parents=True, exist_ok=True)
        written.append(published)
    for path in written:
        path.write_text(text)
    return written


def run_section(title: str, module: str, env: dict[str, str], quick: bool) -> tuple[str, bool]:
    """One section in its own process: its markdown, and whether it ran."""
    cmd = [sys.executable, "-m", module] + (["--quick"] if quick else [])
    paths = [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(paths)}, capture_output=True,
        text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
        return f"### {title}\n\nFAILED (exit {proc.returncode})\n", False
    print(proc.stdout, flush=True)
    return f"### {title}\n\n{proc.stdout.strip()}\n", True


def main(
    argv: list[str] | None = None,
    sections: list[tuple[str, str, dict[str, str]]] | None = None,
    published: Path = PUBLISHED,
) -> int:
    """Run ``sections`` (default :data:`SECTIONS`) and write the results (see the module
    docstring); 1 when a section failed."""
    args = parse_args(argv)
    out = [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores, Python {platform.python_version()}"
        + (" (--quick)" if args.quick else ""),
        "",
    ]
    failed = 0
    for title, module, env in SECTIONS if sections is None else sections:
        if module.startswith("benchmarks.") and not (ROOT / (module.replace(".", "/") + ".py")).exists():
            continue
        print(f"== {title}", flush=True)
        text, ok = run_section(title, module, env, args.quick)
        failed += not ok
        out.append(text)
    written = write_results("\n".join(out) + "\n", args.output, args.publish, published)
    print(f"saved {', '.join(map(str, written))} ({failed} section(s) failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
