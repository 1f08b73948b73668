"""Timing and memory helpers shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable


def median_ms(fn: Callable[[], object], repeat: int = 7, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in milliseconds after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def interleaved_ms(
    fns: dict[str, Callable[[], object]], repeat: int = 31, warmup: int = 3
) -> dict[str, float]:
    """Median wall time in milliseconds of each of ``fns``, measured side by side: every
    repetition runs each function once, in turn, so a neighbour's load on the shared cores
    falls on all of them alike and the ratios of the medians stay meaningful."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: sorted(ts)[len(ts) // 2] * 1e3 for name, ts in times.items()}


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


_PROFILER_READY = False


def peak_temp_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes of memory ``fn()`` holds beyond what was live when it was called: torch's
    allocations replayed in order from ``torch.profiler`` (``profile_memory=True``: every
    CPU allocation and free of the torch allocator, with its size) for the peak of the live
    sum, plus the peak of numpy's buffers traced by ``tracemalloc`` (numpy reports its data
    buffers to it; torch does not, so nothing is counted twice). The two peaks are added:
    an upper bound when both libraries allocate in one call. Whatever ``fn`` leaves allocated
    (a new state, a workspace buffer) counts; what it frees of memory held before lowers the
    running sum but never below zero at the peak."""
    import tracemalloc

    from torch.profiler import ProfilerActivity, profile

    global _PROFILER_READY
    if not _PROFILER_READY:  # the first profile imports torch._dynamo & co: not fn's memory
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
            pass
        _PROFILER_READY = True
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base_np = tracemalloc.get_traced_memory()[0]
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        peak_np = tracemalloc.get_traced_memory()[1] - base_np
    finally:
        if not started:
            tracemalloc.stop()
    events = [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and str(e.device_type()).endswith("CPU")
    ]
    live = peak = 0
    for _, nbytes in sorted(events):
        live += nbytes
        peak = max(peak, live)
    return peak + max(peak_np, 0)


#: the memory columns of a benchmark table (:func:`peak_columns`)
PEAK_COLUMNS = ["peak MiB", "peak x scores"]


def peak_columns(fn: Callable[[], object], scores_bytes: int) -> dict[str, float]:
    """The temporary memory of one call ``fn()`` (:func:`peak_temp_bytes`) in MiB and as a
    multiple of ``scores_bytes`` (the bytes of the scores it reads), keyed as
    :data:`PEAK_COLUMNS`."""
    got = peak_temp_bytes(fn)
    return {"peak MiB": got / float(1 << 20), "peak x scores": got / float(scores_bytes)}
