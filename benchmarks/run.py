"""`make bench`: every benchmark in one run, printed as markdown and saved to
benchmarks/results/latest.md (the README's performance table is copied from it).

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
    ("Streamed rank-based metrics (ranks from scores)", "benchmarks.bench_ranks", {}),
    ("PyKEEN's report (3 rank types x head, tail, both) in one metric", "benchmarks.bench_report", {}),
    ("Closed-form statistics (GMR, MRR) vs PyKEEN", "benchmarks.bench_stats", {}),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    out = [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores, Python {platform.python_version()}"
        + (" (--quick)" if args.quick else ""),
        "",
    ]
    failed = 0
    for title, module, env in SECTIONS:
        if not (ROOT / (module.replace(".", "/") + ".py")).exists():
            continue
        print(f"== {title}", flush=True)
        cmd = [sys.executable, "-m", module] + (["--quick"] if args.quick else [])
        proc = subprocess.run(
            cmd, cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
        )
        if proc.returncode != 0:
            failed += 1
            print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
            out += [f"### {title}", "", f"FAILED (exit {proc.returncode})", ""]
            continue
        print(proc.stdout, flush=True)
        out += [f"### {title}", "", proc.stdout.strip(), ""]
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "latest.md").write_text("\n".join(out) + "\n")
    print(f"saved benchmarks/results/latest.md ({failed} section(s) failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
