"""rankstream.torchmetrics against torchmetrics on flat items with query ids, the cost of
grouping them, and a ``MetricCollection``.

About 100,000 items in 1,000 queries of ragged length (20 to 180 items), 5% relevant, ids in
order (and shuffled: a sort by id first). For each metric, one ``update`` of every item then
``compute`` of a fresh metric, ours and torchmetrics' (which stores every prediction and groups
them by query in ``compute``), interleaved; ``top_k=10`` and torchmetrics' default (the whole
list). Ours starts from fresh inputs every time (the batch cache emptied: no metric reuses
another's grouping). Then what grouping adds: nDCG@10 on the lists already padded (an Ignite
update of ``(scores, labels, mask)``) against the same after ``group_by_query`` of the flat
items. Last, a ``MetricCollection`` of five metrics at ``top_k=10`` against the five metrics
updated one by one (each grouping the batch again) and against torchmetrics' collection.
``--threads N`` sets torch's intra-op threads (default: torch's own choice).
"""

from __future__ import annotations

import argparse

import torch
import torchmetrics.retrieval as peer
from torchmetrics import MetricCollection

import rankstream.torchmetrics as ours
from benchmarks.common import interleaved_ms, markdown_table
from rankstream.adapters.torchmetrics_flat import clear_cache
from rankstream.core.grouping import group_by_query
from rankstream.ignite import NDCG

COLUMNS = ["case", "metric", "ms", "torchmetrics ms", "torchmetrics / ours"]
NAMES = ["RetrievalNormalizedDCG", "RetrievalMAP", "RetrievalMRR", "RetrievalPrecision", "RetrievalRecall",
         "RetrievalHitRate"]  # fmt: skip
COLLECTION = [
    "RetrievalNormalizedDCG",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalPrecision",
    "RetrievalRecall",
]


def make_data(queries: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(20, 181, (queries,), generator=g)
    indexes = torch.repeat_interleave(torch.arange(queries), lengths)
    n = int(indexes.numel())
    return torch.randn(n, generator=g), (torch.rand(n, generator=g) < 0.05).long(), indexes


def _fresh(metric, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
    clear_cache()
    metric.update(preds, target, indexes=indexes)
    return metric.compute()


def run(quick: bool = False) -> list[dict]:
    preds, target, indexes = make_data(200 if quick else 1000)
    repeat = 5 if quick else 21
    case = f"{int(indexes.numel()):,} items, {int(indexes.max()) + 1:,} queries"
    rows = []
    for name in NAMES:
        for top_k in (10, None):
            mine, theirs = getattr(ours, name), getattr(peer, name)
            fns = {
                "ours": lambda m=mine, k=top_k: _fresh(m(top_k=k), preds, target, indexes),
                "peer": lambda m=theirs, k=top_k: _fresh(m(top_k=k), preds, target, indexes),
            }
            rows.append(_row(case, f"{name}(top_k={top_k})", interleaved_ms(fns, repeat, 1)))
    perm = torch.randperm(int(indexes.numel()), generator=torch.Generator().manual_seed(1))
    shuffled = (preds[perm], target[perm], indexes[perm])
    fns = {
        "ours": lambda: _fresh(ours.RetrievalNormalizedDCG(top_k=10), *shuffled),
        "peer": lambda: _fresh(peer.RetrievalNormalizedDCG(top_k=10), *shuffled),
    }
    rows.append(
        _row(case + ", ids shuffled", "RetrievalNormalizedDCG(top_k=10)", interleaved_ms(fns, repeat, 1))
    )
    rows.append(_grouping_row(case, preds, target, indexes, repeat))
    rows.extend(_collection_rows(case, preds, target, indexes, repeat))
    return rows


def _grouping_row(
    case: str, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor, repeat: int
) -> dict:
    """The Ignite metric on flat items with their query ids (the path users take: the output
    ``(y_pred, y, {"indexes": ids})``, grouped inside ``update``) against the same metric on
    the same lists padded beforehand; float labels on both sides."""
    labels_flat = target.float()
    scores, labels, mask, _ = group_by_query(indexes, preds, labels_flat)
    padded = (scores, labels, {"mask": mask})
    flat = (preds, labels_flat, {"indexes": indexes})

    def update(output) -> object:
        metric = NDCG(top_k=10, ignore_zero_hits=False)
        metric.update(output)
        return metric.compute()

    t = interleaved_ms({"padded": lambda: update(padded), "grouped": lambda: update(flat)}, repeat, 1)
    return {"case": case, "metric": "nDCG@10: flat items with query ids vs the padded update (Ignite)",
            "ms": t["grouped"], "torchmetrics ms": "",
            "torchmetrics / ours": f"{t['grouped'] / t['padded']:.2f}x the padded update"}  # fmt: skip


def _collection_rows(
    case: str, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor, repeat: int
) -> list[dict]:
    def collection(module):
        clear_cache()
        metrics = MetricCollection({n: getattr(module, n)(top_k=10) for n in COLLECTION})
        metrics.update(preds, target, indexes=indexes)
        return metrics.compute()

    def singles():
        return [_fresh(getattr(ours, n)(top_k=10), preds, target, indexes) for n in COLLECTION]

    fns = {"ours": lambda: collection(ours), "singles": singles, "peer": lambda: collection(peer)}
    t = interleaved_ms(fns, repeat, 1)
    label = f"MetricCollection of {len(COLLECTION)} (top_k=10)"
    return [
        _row(case, label, t),
        {"case": case, "metric": f"{label} vs the {len(COLLECTION)} metrics one by one",
         "ms": t["ours"], "torchmetrics ms": "",
         "torchmetrics / ours": f"{t['ours'] / t['singles']:.2f}x the singles ({t['singles']:.3g} ms)"},
    ]  # fmt: skip


def _row(case: str, metric: str, t: dict[str, float]) -> dict:
    return {"case": case, "metric": metric, "ms": t["ours"], "torchmetrics ms": t["peer"],
            "torchmetrics / ours": t["peer"] / t["ours"]}  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch's intra-op threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(markdown_table(run(args.quick), COLUMNS))
