"""Time the closed-form GMR and MRR moments: rankstream (O(1) per task) vs PyKEEN 1.11.1.

Usage::

    python benchmarks/bench_stats.py            # full run (about 2 minutes, mostly PyKEEN)
    python benchmarks/bench_stats.py --quick    # about 15 seconds

Prints a markdown table.  Tasks have N_i uniform in {1..N_max} and weights uniform in
[0.5, 2] (all distinct: PyKEEN's weighted GMR builds one prefix sum up to N_i per distinct
weight, so its cost grows like sum_i N_i; its MRR builds one prefix sum up to max N).
PyKEEN runs on growing task counts (doubling from the start size) while the next size is
predicted to finish within the budget; rankstream then runs on the same case.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rankstream.core.ranks import streamed_forms as stats
from rankstream.pykeen import GeometricMeanRank, InverseHarmonicMeanRank


def make_case(num_tasks: int, max_n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = rng.integers(1, max_n + 1, num_tasks)
    w = rng.uniform(0.5, 2.0, num_tasks)
    return n, w


def time_call(fn: Callable[[], float], repeat: int = 1) -> tuple[float, float]:
    best, value = math.inf, math.nan
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def four_moments(gmr, mrr, n, w, repeat: int) -> dict[str, tuple[float, float]]:
    return {
        "GMR E": time_call(lambda: gmr.expected_value(n, weights=w), repeat),
        "GMR Var": time_call(lambda: gmr.variance(n, weights=w), repeat),
        "MRR E": time_call(lambda: mrr.expected_value(n, weights=w), repeat),
        "MRR Var": time_call(lambda: mrr.variance(n, weights=w), repeat),
    }


def run_pykeen(start_tasks: int, max_n: int, budget: float):
    try:
        from pykeen.metrics.ranking import GeometricMeanRank as PGMR
        from pykeen.metrics.ranking import InverseHarmonicMeanRank as PMRR
    except ImportError:
        return None, None
    gmr, mrr = PGMR(), PMRR()
    tasks, best = start_tasks, None
    while True:
        n, w = make_case(tasks, max_n)
        result = four_moments(gmr, mrr, n, w, repeat=1)
        total = sum(t for t, _ in result.values())
        if total > budget and best is not None:
            break
        best = (tasks, result, total)
        # cost grows about linearly in the number of distinct weights (= tasks here)
        if 2.0 * total > budget:
            break
        tasks *= 2
    return best, (gmr, mrr)


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1.0 else f"{seconds:.2f} s"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about 15 seconds")
    args = parser.parse_args(argv)

    if args.quick:
        big_tasks, big_n, pk_start, pk_n, budget, repeat = 20_000, 10**5, 500, 10**4, 5.0, 1
    else:
        big_tasks, big_n, pk_start, pk_n, budget, repeat = 200_000, 10**6, 2_000, 10**5, 60.0, 3

    gmr, mrr = GeometricMeanRank(), InverseHarmonicMeanRank()
    n, w = make_case(big_tasks, big_n)
    ours_big = four_moments(gmr, mrr, n, w, repeat)
    start = time.perf_counter()
    terms = stats.gmr_stream_terms(n.astype(np.float64), w, np)
    sums = {key: value.sum() for key, value in terms.items()}
    stream_e, stream_v, bound = stats.gmr_moments_from_sums(sums)
    stream_time = time.perf_counter() - start

    pk, _ = run_pykeen(pk_start, pk_n, budget)

    print(f"### GMR and MRR moments, weighted (numpy {np.__version__})\n")
    print(f"rankstream, {big_tasks:,} tasks, N uniform in 1..{big_n:.0e}, weights U(0.5, 2):\n")
    print("| quantity | time | value |")
    print("|---|---|---|")
    for key, (t, v) in ours_big.items():
        print(f"| {key} | {fmt_time(t)} | {v:.12g} |")
    print(f"| all four | {fmt_time(sum(t for t, _ in ours_big.values()))} | |")
    print(
        f"| GMR E+Var streamed (order {stats.DEFAULT_GMR_ORDER}) | {fmt_time(stream_time)} | "
        f"E {stream_e:.12g}, Var {stream_v:.12g}, bound {bound:.1e} |"
    )

    if pk is None:
        print("\nPyKEEN is not installed; no comparison.")
        return
    tasks, pk_result, pk_total = pk
    n, w = make_case(tasks, pk_n)
    ours_same = four_moments(gmr, mrr, n, w, repeat)
    print(
        f"\nSame case for both: {tasks:,} tasks, N uniform in 1..{pk_n:.0e} (largest PyKEEN "
        f"size run within the {budget:.0f} s budget):\n"
    )
    print("| quantity | PyKEEN 1.11.1 | rankstream | speed-up | rel. difference |")
    print("|---|---|---|---|---|")
    for key in pk_result:
        t_pk, v_pk = pk_result[key]
        t_us, v_us = ours_same[key]
        rel = abs(v_us - v_pk) / abs(v_pk) if v_pk else abs(v_us)
        print(f"| {key} | {fmt_time(t_pk)} | {fmt_time(t_us)} | {t_pk / t_us:,.0f}x | {rel:.1e} |")
    us_total = sum(t for t, _ in ours_same.values())
    print(f"| all four | {fmt_time(pk_total)} | {fmt_time(us_total)} | {pk_total / us_total:,.0f}x | |")


if __name__ == "__main__":
    main()
