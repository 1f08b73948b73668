"""rankstream.torchmetrics against torchmetrics on flat items with query ids, and the cost of
grouping them.

About 100,000 items in 1,000 queries of ragged length (20 to 180 items), 5% relevant, ids in
order (and shuffled: a sort by id first). For each metric, one ``update`` of every item then
``compute`` of a fresh metric, ours and torchmetrics' (which stores every prediction and groups
them by query in ``compute``), interleaved; ``top_k=10`` and torchmetrics' default (the whole
list). Then what grouping adds: nDCG@10 on the lists already padded (an Ignite update of
``(scores, labels, mask)``) against the same after ``group_by_query`` of the flat items.
"""

from __future__ import annotations

import argparse

import torch
import torchmetrics.retrieval as peer

import rankstream.torchmetrics as ours
from benchmarks.common import interleaved_ms, markdown_table
from rankstream.core.grouping import group_by_query
from rankstream.ignite import NDCG

COLUMNS = ["case", "metric", "ms", "torchmetrics ms", "torchmetrics / ours"]
NAMES = ["RetrievalNormalizedDCG", "RetrievalMAP", "RetrievalMRR", "RetrievalPrecision", "RetrievalRecall"]


def make_data(queries: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(20, 181, (queries,), generator=g)
    indexes = torch.repeat_interleave(torch.arange(queries), lengths)
    n = int(indexes.numel())
    return torch.randn(n, generator=g), (torch.rand(n, generator=g) < 0.05).long(), indexes


def run(quick: bool = False) -> list[dict]:
    preds, target, indexes = make_data(200 if quick else 1000)
    repeat = 5 if quick else 11
    case = f"{int(indexes.numel()):,} items, {int(indexes.max()) + 1:,} queries"
    rows = []
    for name in NAMES:
        for top_k in (10, None):
            mine, theirs = getattr(ours, name), getattr(peer, name)

            def one(cls, top_k=top_k):
                metric = cls(top_k=top_k)
                metric.update(preds, target, indexes=indexes)
                return metric.compute()

            t = interleaved_ms({"ours": lambda m=mine: one(m), "peer": lambda m=theirs: one(m)}, repeat, 1)
            rows.append(_row(case, f"{name}(top_k={top_k})", t))
    perm = torch.randperm(int(indexes.numel()), generator=torch.Generator().manual_seed(1))
    shuffled = (preds[perm], target[perm], indexes[perm])

    def flat(p, y, i):
        metric = ours.RetrievalNormalizedDCG(top_k=10)
        metric.update(p, y, indexes=i)
        return metric.compute()

    t = interleaved_ms({"ours": lambda: flat(*shuffled), "peer": lambda: _peer_ndcg(*shuffled)}, repeat, 1)
    rows.append(_row(case + ", ids shuffled", "RetrievalNormalizedDCG(top_k=10)", t))
    scores, labels, mask, _ = group_by_query(indexes, preds, target)
    padded = (scores, labels.float(), {"mask": mask})

    def on_padded():
        metric = NDCG(top_k=10, ignore_zero_hits=False)
        metric.update(padded)
        return metric.compute()

    def grouped():
        s, y, m, _ = group_by_query(indexes, preds, target)
        metric = NDCG(top_k=10, ignore_zero_hits=False)
        metric.update((s, y.float(), {"mask": m}))
        return metric.compute()

    t = interleaved_ms({"padded": on_padded, "grouped": grouped}, repeat, 1)
    rows.append({"case": case, "metric": "nDCG@10: group_by_query + update vs the padded update",
                 "ms": t["grouped"], "torchmetrics ms": "",
                 "torchmetrics / ours": f"{t['grouped'] / t['padded']:.2f}x the padded update"})  # fmt: skip
    return rows


def _row(case: str, metric: str, t: dict[str, float]) -> dict:
    return {"case": case, "metric": metric, "ms": t["ours"], "torchmetrics ms": t["peer"],
            "torchmetrics / ours": t["peer"] / t["ours"]}  # fmt: skip


def _peer_ndcg(p: torch.Tensor, y: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    metric = peer.RetrievalNormalizedDCG(top_k=10)
    metric.update(p, y, indexes=i)
    return metric.compute()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
