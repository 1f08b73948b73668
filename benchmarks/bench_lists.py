"""MAP@k / nDCG@k update on 1024 lists x 20,000 items: ours vs ignite vs a bare torch.topk.

One update of each metric on the same tensors (binary and graded labels, k in [1, 5, 10, 20]);
the floor is one ``torch.topk`` of the scores at max(k), the least any top-k metric must do.
Beside each time, the peak of the temporary memory of one update
(:func:`benchmarks.common.peak_temp_bytes`: torch's allocations replayed from its profiler,
numpy's traced), in MiB and as a multiple of the scores' bytes, for a fresh metric (what it
allocates and keeps counts too) after another instance ran on the same shapes. The binary case
adds a masked batch (a ragged mask), R-Precision, the statistics (``confidence=0.95``, against the
same metric without) and a paired comparison of two rankers (against one metric on one ranker);
a third case rounds the scores to 2 decimals (ties everywhere) and times ``ties="expected"``
against ``ties="first"``; the last times ``chance=True`` against the same metric without, on one
thread, the two interleaved (nDCG, DCG on graded and binary labels, MAP; with a ragged mask and
without).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from ignite.metrics.rec_sys import NDCG as IgniteNDCG

from benchmarks.common import PEAK_COLUMNS, interleaved_ms, markdown_table, median_ms, peak_columns
from rankstream.ignite import DCG, MAP, NDCG, ListMetrics, PairedComparison, RPrecision

KS = [1, 5, 10, 20]
# five metrics at k in {5, 10, 20} from one selection, against NDCG alone at those k
COLLECTION = [f"{m}@{k}" for m in ("ndcg", "map", "recall", "mrr", "precision") for k in (5, 10, 20)]


def make_data(batch: int, items: int, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, items, generator=g)
    relevant = (torch.rand(batch, items, generator=g) < 0.005).float()
    graded = relevant * torch.randint(1, 5, (batch, items), generator=g).float()
    return {"binary": (scores, relevant), "graded": (scores, graded)}


def timed(make: Callable[[], Any], output: Any, nbytes: int, repeat: int) -> tuple[float, dict]:
    """Median time of ``update`` on one instance of ``make()``, then the peak of one ``update``
    of a fresh instance (process-wide caches warm)."""
    metric = make()
    ms = median_ms(lambda: metric.update(output), repeat)
    fresh = make()
    return ms, peak_columns(lambda: fresh.update(output), nbytes)


def run(quick: bool = False) -> list[dict]:
    batch, items = (256, 5000) if quick else (1024, 20000)
    repeat = 3 if quick else 7
    rows = []
    for labels, (s, y) in make_data(batch, items).items():
        nbytes = s.numel() * s.element_size()
        case = f"{batch}x{items} {labels}"
        floor = median_ms(lambda s=s: torch.topk(s, max(KS), dim=-1), repeat)
        measured = [
            ("torch.topk floor", floor, peak_columns(lambda s=s: torch.topk(s, max(KS), dim=-1), nbytes), "")
        ]
        t_ndcg, p_ndcg = timed(lambda: NDCG(top_k=KS), (s, y), nbytes, repeat)
        t_peer, p_peer = timed(lambda: IgniteNDCG(top_k=KS), (s, y), nbytes, max(3, repeat // 2))
        ndcg3 = NDCG(top_k=[5, 10, 20])
        t_ndcg3 = median_ms(lambda m=ndcg3, s=s, y=y: m.update((s, y)), repeat)
        t_all, p_all = timed(lambda: ListMetrics(COLLECTION), (s, y), nbytes, repeat)
        measured += [
            ("rankstream MAP", *timed(lambda: MAP(top_k=KS), (s, y), nbytes, repeat), ""),
            ("rankstream NDCG", t_ndcg, p_ndcg, t_peer / t_ndcg),
            ("ignite NDCG 0.5.5", t_peer, p_peer, ""),
            (
                "ListMetrics: nDCG, MAP, recall, MRR, precision @ 5, 10, 20",
                t_all,
                p_all,
                f"{t_all / t_ndcg3:.2f}x NDCG@[5,10,20] alone",
            ),
        ]
        if labels == "binary":
            masked = (s, y, {"mask": ragged_mask(batch, items)})
            t_map = measured[1][1]
            t_ci, p_ci = timed(lambda: NDCG(top_k=KS, confidence=0.95), (s, y), nbytes, repeat)
            t_map_ci, p_map_ci = timed(lambda: MAP(top_k=KS, confidence=0.95), (s, y), nbytes, repeat)
            other = s + 0.5 * torch.randn(s.shape, generator=torch.Generator().manual_seed(7))
            two = ({"a": s, "b": other}, y)
            pair = lambda: PairedComparison([f"ndcg@{k}" for k in KS], ["a", "b"])  # noqa: E731
            t_pair, p_pair = timed(pair, two, nbytes, repeat)
            measured += [
                ("rankstream MAP, ragged mask", *timed(lambda: MAP(top_k=KS), masked, nbytes, repeat), ""),
                ("rankstream RPrecision (whole lists)", *timed(RPrecision, (s, y), nbytes, repeat), ""),
                ("rankstream NDCG, confidence=0.95", t_ci, p_ci, f"{t_ci / t_ndcg:.2f}x without"),
                ("rankstream MAP, confidence=0.95", t_map_ci, p_map_ci, f"{t_map_ci / t_map:.2f}x without"),
                ("PairedComparison nDCG, 2 rankers", t_pair, p_pair, f"{t_pair / t_ndcg:.2f}x one NDCG"),
            ]
        for metric, ms, peak, peer in measured:
            rows.append(
                {"case": case, "metric": metric, "ms": ms, "x floor": ms / floor, **peak, "peer / ours": peer}
            )
    rows += tied_rows(batch, items, repeat)
    rows += chance_rows(batch, items, repeat)
    return rows


def chance_rows(batch: int, items: int, repeat: int) -> list[dict]:
    """``chance=True`` against the same metric without, on one thread (the ratio is what the
    option costs; with more threads the other jobs of a shared machine blur it), the two
    updates interleaved (:func:`benchmarks.common.interleaved_ms`): nDCG and DCG on graded
    labels (5% nonzero, grades 1..4) and binary ones, MAP on binary ones, each without a mask
    and with a ragged one. Beside the time with ``chance=True``, the peak temporary memory of
    one such update."""
    data = make_data(batch, items)
    g = torch.Generator().manual_seed(3)
    graded = (torch.rand(batch, items, generator=g) < 0.05).float() * torch.randint(
        1, 5, (batch, items), generator=g
    )
    labels = {"graded": graded.float(), "binary": data["binary"][1]}
    s = data["binary"][0]
    nbytes = s.numel() * s.element_size()
    mask = ragged_mask(batch, items)
    cases = [("NDCG", NDCG, "graded"), ("NDCG", NDCG, "binary"), ("DCG", DCG, "graded"),
             ("DCG", DCG, "binary"), ("MAP", MAP, "binary")]  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        floor = median_ms(lambda: torch.topk(s, max(KS), dim=-1), repeat)
        for name, cls, kind in cases:
            for masked in (False, True):
                out = (s, labels[kind], {"mask": mask}) if masked else (s, labels[kind])
                off, on = cls(top_k=KS), cls(top_k=KS, chance=True)
                both = {"off": lambda m=off, o=out: m.update(o), "on": lambda m=on, o=out: m.update(o)}
                ms = interleaved_ms(both, repeat=repeat, warmup=1)
                fresh = cls(top_k=KS, chance=True)
                peak = peak_columns(lambda m=fresh, o=out: m.update(o), nbytes)
                case = f"{batch}x{items} {kind}{', ragged mask' if masked else ''}, one thread"
                rows.append({"case": case, "metric": f"rankstream {name}, chance=True", "ms": ms["on"],
                             "x floor": ms["on"] / floor, **peak,
                             "peer / ours": f"{ms['on'] / ms['off']:.2f}x without"})  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return rows


def tied_rows(batch: int, items: int, repeat: int) -> list[dict]:
    """Scores rounded to 2 decimals (a few hundred distinct values per list: ties at every
    cut-off), binary labels: each metric with ``ties="expected"`` against ``ties="first"``."""
    s, y = make_data(batch, items)["binary"]
    s = torch.round(s * 100.0) / 100.0
    nbytes = s.numel() * s.element_size()
    case = f"{batch}x{items} binary, scores rounded to 0.01"
    floor = median_ms(lambda: torch.topk(s, max(KS), dim=-1), repeat)
    rows = []
    makers = {
        "NDCG": lambda ties: NDCG(top_k=KS, ties=ties),
        "MAP": lambda ties: MAP(top_k=KS, ties=ties),
        "ListMetrics (15 names)": lambda ties: ListMetrics(COLLECTION, ties=ties),
    }
    for name, make in makers.items():
        t_first, p_first = timed(lambda make=make: make("first"), (s, y), nbytes, repeat)
        t_exp, p_exp = timed(lambda make=make: make("expected"), (s, y), nbytes, repeat)
        rows += [
            {"case": case, "metric": f"rankstream {name}, ties='first'", "ms": t_first,
             "x floor": t_first / floor, **p_first, "peer / ours": ""},
            {"case": case, "metric": f"rankstream {name}, ties='expected'", "ms": t_exp,
             "x floor": t_exp / floor, **p_exp, "peer / ours": f"{t_exp / t_first:.2f}x ties='first'"},
        ]  # fmt: skip
    return rows


def ragged_mask(batch: int, items: int, seed: int = 1) -> torch.Tensor:
    """Each list keeps its first half to all of its items."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(items // 2, items + 1, (batch, 1), generator=g)
    return torch.arange(items)[None, :] < lengths


COLUMNS = ["case", "metric", "ms", "x floor", *PEAK_COLUMNS, "peer / ours"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
