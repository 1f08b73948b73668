"""``make test``: the core suite and the Keras suite on each backend, side by side.

The suites are CPU-bound pytest runs of very different shapes: the core suite's long distributed
files keep a worker busy for minutes while the other idles, and each Keras suite spends its first
seconds importing its framework. Run one after the other, a 2-core machine idled for about a
sixth of ``make test``. Here the core suite runs in the foreground (its progress printed as it
goes) and every Keras suite starts at once beside it under ``nice``: they take the CPU the core
suite leaves and get all of it once it ends. Each Keras suite's output goes to
``build/test-logs/keras-<backend>.log`` and is printed whole when the suite ends, in the order of
the suites. ``--one-by-one`` runs them one after the other instead, each printing as it goes.

Two ``make test`` runs at once on one machine (two clones, two users) would run six Keras suites
beside two core suites: sixteen pytest workers, each Keras worker 1-2.7 GB resident, on 24 GiB,
and the machine ran out of free memory. So a Keras suite first takes one of
``RANKSTREAM_TEST_SLOTS`` (default 3) machine-wide slots, an exclusive ``flock`` on a file in the
temp directory, held until the suite ends (the system releases it if the run dies): one
``make test`` gets every slot at once; a second one's Keras suites wait, saying so, while its
core suite runs.

Every suite runs to its end when another fails; the exit status is 1 if any failed. The last
lines give each suite's wall time (from the common start, when side by side) and the total.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

LOGS = Path("build/test-logs")
NICE = "10"  # the Keras suites' niceness beside the core suite: they take what it leaves


def take_slot(suite: str) -> IO[bytes]:
    """An exclusive lock on one of the machine's ``RANKSTREAM_TEST_SLOTS`` slot files (the open
    file: closing it, or the process ending, frees the slot); waits while every slot is held."""
    slots = max(1, int(os.environ.get("RANKSTREAM_TEST_SLOTS", "3")))
    paths = [Path(tempfile.gettempdir()) / f"rankstream-test-slot-{i}.lock" for i in range(slots)]
    said = False
    while True:
        for path in paths:
            handle = open(path, "ab")  # held open: the lock
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except OSError:
                handle.close()
        if not said:
            print(f"== make test: {suite} waits for a test slot ({slots} on this machine, all "
                  "held by another make test)", flush=True)  # fmt: skip
            said = True
        time.sleep(2.0)


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
    ended: dict[str, tuple[int, float]] = {}

    def in_slot(suite: str, log: Path) -> None:  # a Keras suite: a slot, then the suite
        with take_slot(suite), open(log, "wb") as out:
            cmd = ["nice", "-n", NICE, *make_command(make, suite)]
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            print(f"== make test: {suite} started beside the core suite (log: {log})", flush=True)
            ended[suite] = (proc.wait(), time.monotonic() - start)

    threads = {}
    for suite in suites[1:]:
        threads[suite] = threading.Thread(target=in_slot, args=(suite, LOGS / f"{suite}.log"), daemon=True)
        threads[suite].start()
    core = subprocess.Popen(make_command(make, suites[0]))  # prints as it goes
    ended[suites[0]] = (core.wait(), time.monotonic() - start)
    for suite, thread in threads.items():
        thread.join()
        sys.stdout.write((LOGS / f"{suite}.log").read_text(errors="replace"))
        sys.stdout.flush()
        if suite not in ended:  # the thread failed before its suite ended
            ended[suite] = (1, time.monotonic() - start)
    return {suite: ended[suite] for suite in suites}


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
