"""MAP@k / nDCG@k update on 1024 lists x 20,000 items: ours vs ignite vs a bare torch.topk.

One update of each metric on the same tensors (binary and graded labels, k in [1, 5, 10, 20]);
the floor is one ``torch.topk`` of the scores at max(k), the least any top-k metric must do.
Beside each time, the peak of the temporary memory of one update
(:func:`benchmarks.common.peak_temp_bytes`: torch's allocations replayed from its profiler,
numpy's traced), in MiB and as a multiple of the scores' bytes, for a fresh metric (what it
allocates and keeps counts too) after another instance ran on the same shapes. The binary case
adds a masked batch (a ragged mask) and R-Precision.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from ignite.metrics.rec_sys import NDCG as IgniteNDCG

from benchmarks.common import PEAK_COLUMNS, markdown_table, median_ms, peak_columns
from rankstream.ignite import MAP, NDCG, ListMetrics, RPrecision

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
            measured += [
                ("rankstream MAP, ragged mask", *timed(lambda: MAP(top_k=KS), masked, nbytes, repeat), ""),
                ("rankstream RPrecision (whole lists)", *timed(RPrecision, (s, y), nbytes, repeat), ""),
            ]
        for metric, ms, peak, peer in measured:
            rows.append(
                {"case": case, "metric": metric, "ms": ms, "x floor": ms / floor, **peak, "peer / ours": peer}
            )
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
