"""``make test``: the core suite and the Keras suite on each backend, side by side.

The suites are CPU-bound pytest runs of very different shapes: the core suite's long distributed
files keep a worker busy for minutes while the other idles, and each Keras suite spends its first
seconds importing its framework. Run one after the other, a 2-core machine idled for about a
sixth of ``make test``. Here the core suite runs in the foreground (its progress printed as it
goes) and every Keras suite starts at once beside it under ``nice``: they take the CPU the core
suite leaves and get all of it once it ends. Each Keras suite's output goes to
``build/test-logs/keras-<backend>.log`` and is printed whole when the suite ends, in the order of
the suites. ``--one-by-one`` runs them one after the other instead, each printing as it goes.

Every suite runs to its end when another fails; the exit status is 1 if any failed. The last
lines give each suite's wall time (from the common start, when side by side) and the total.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

LOGS = Path("build/test-logs")
NICE = "10"  # the Keras suites' niceness beside the core suite: they take what it leaves


def make_command(make: str, suite: str) -> list[str]:
    return [make, "--no-print-directory", f"test-{suite}"]


def one_by_one(make: str, suites: list[str]) -> dict[str, tuple[int, float]]:
    results = {}
    for suite in suites:
        start = time.monotonic()
        rc = subprocess.call(make_command(make, suite))
        results[suite] = (rc, time.monotonic() - start)
    return results


def side_by_side(make: str, suites: list[str]) -> dict[str, tuple[int, float]]:
    LOGS.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    background = {}
    for suite in suites[1:]:
        log = LOGS / f"{suite}.log"
        with open(log, "wb") as out:
            cmd = ["nice", "-n", NICE, *make_command(make, suite)]
            background[suite] = (subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), log)
        print(f"== make test: {suite} started beside the core suite (log: {log})", flush=True)
    core = subprocess.Popen(make_command(make, suites[0]))  # prints as it goes
    procs = {suites[0]: core, **{suite: proc for suite, (proc, _) in background.items()}}
    ended: dict[str, float] = {}
    while len(ended) < len(procs):  # note when each ends, to report its time
        for suite, proc in procs.items():
            if suite not in ended and proc.poll() is not None:
                ended[suite] = time.monotonic() - start
        time.sleep(0.5)
    results = {suites[0]: (core.returncode, ended[suites[0]])}
    for suite, (proc, log) in background.items():
        sys.stdout.write(log.read_text(errors="replace"))
        sys.stdout.flush()
        results[suite] = (proc.returncode, ended[suite])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+", help="suite names, the core suite first (make test-<name>)")
    parser.add_argument("--one-by-one", action="store_true", help="run the suites one after the other")
    args = parser.parse_args(argv)
    make = os.environ.get("MAKE", "make")
    start = time.monotonic()
    run = one_by_one if args.one_by_one else side_by_side
    results = run(make, args.suites)
    total = time.monotonic() - start
    how = "one after the other" if args.one_by_one else "side by side, from the common start"
    times = ", ".join(f"{suite} {seconds:.0f}s" for suite, (_, seconds) in results.items())
    print(f"make test: each suite's time ({how}): {times}; all {total:.0f}s")
    failed = [suite for suite, (rc, _) in results.items() if rc != 0]
    if failed:
        print(f"make test: FAILED: {' '.join(failed)}")
        return 1
    print(f"make test: all suites passed ({', '.join(results)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
