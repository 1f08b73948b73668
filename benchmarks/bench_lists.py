"""MAP@k / nDCG@k update on 1024 lists x 20,000 items: ours vs ignite vs a bare torch.topk.

One update of each metric on the same tensors (binary and graded labels, k in [1, 5, 10, 20]);
the floor is one ``torch.topk`` of the scores at max(k), the least any top-k metric must do.
"""

from __future__ import annotations

import argparse

import torch
from ignite.metrics.rec_sys import NDCG as IgniteNDCG

from benchmarks.common import markdown_table, median_ms
from rankstream.ignite import MAP, NDCG, ListMetrics

KS = [1, 5, 10, 20]
# issue 11: five metrics at k in {5, 10, 20} from one selection, against NDCG alone at those k
COLLECTION = [f"{m}@{k}" for m in ("ndcg", "map", "recall", "mrr", "precision") for k in (5, 10, 20)]


def make_data(batch: int, items: int, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, items, generator=g)
    relevant = (torch.rand(batch, items, generator=g) < 0.005).float()
    graded = relevant * torch.randint(1, 5, (batch, items), generator=g).float()
    return {"binary": (scores, relevant), "graded": (scores, graded)}


def run(quick: bool = False) -> list[dict]:
    batch, items = (256, 5000) if quick else (1024, 20000)
    repeat = 3 if quick else 7
    rows = []
    for labels, (s, y) in make_data(batch, items).items():
        floor = median_ms(lambda s=s: torch.topk(s, max(KS), dim=-1), repeat)
        ours_map = MAP(top_k=KS)
        ours_ndcg = NDCG(top_k=KS)
        peer_ndcg = IgniteNDCG(top_k=KS)
        t_map = median_ms(lambda m=ours_map, s=s, y=y: m.update((s, y)), repeat)
        t_ndcg = median_ms(lambda m=ours_ndcg, s=s, y=y: m.update((s, y)), repeat)
        t_peer = median_ms(lambda m=peer_ndcg, s=s, y=y: m.update((s, y)), max(3, repeat // 2))
        case = f"{batch}x{items} {labels}"
        rows.append(
            {"case": case, "metric": "torch.topk floor", "ms": floor, "x floor": 1.0, "peer / ours": ""}
        )
        rows.append(
            {
                "case": case,
                "metric": "rankstream MAP",
                "ms": t_map,
                "x floor": t_map / floor,
                "peer / ours": "",
            }
        )
        rows.append(
            {
                "case": case,
                "metric": "rankstream NDCG",
                "ms": t_ndcg,
                "x floor": t_ndcg / floor,
                "peer / ours": t_peer / t_ndcg,
            }
        )
        rows.append(
            {
                "case": case,
                "metric": "ignite NDCG 0.5.5",
                "ms": t_peer,
                "x floor": t_peer / floor,
                "peer / ours": "",
            }
        )
        ndcg3, both = NDCG(top_k=[5, 10, 20]), ListMetrics(COLLECTION)
        t_ndcg3 = median_ms(lambda m=ndcg3, s=s, y=y: m.update((s, y)), repeat)
        t_all = median_ms(lambda m=both, s=s, y=y: m.update((s, y)), repeat)
        rows.append(
            {
                "case": case,
                "metric": "ListMetrics: nDCG, MAP, recall, MRR, precision @ 5, 10, 20",
                "ms": t_all,
                "x floor": t_all / floor,
                "peer / ours": f"{t_all / t_ndcg3:.2f}x NDCG@[5,10,20] alone",
            }
        )
    return rows


COLUMNS = ["case", "metric", "ms", "x floor", "peer / ours"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
