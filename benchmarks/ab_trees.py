"""Two trees of rankstream side by side on the Ignite workload of ``make bench`` (1,024 x 20,000,
one thread): run it once per tree, alternately, each on its own ``PYTHONPATH``::

    for i in 1 2 3; do for t in OLD NEW; do PYTHONPATH=$t python benchmarks/ab_trees.py $t; done; done

Prints each case's median time over the floor (``torch.topk`` at the largest ``k``) and the tree
it imported. Used to check that a restructuring keeps every case within 1.05x
(docs/performance.md, "Restructurings")."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch

KS = [1, 5, 10, 20]
NAMES = ["ndcg@10", "map@10", "recall@20", "mrr", "precision@5"]


def cases() -> dict[str, Callable[[], object]]:
    import rankstream.ignite as ri

    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(1024, 20000, generator=gen)
    labels = (torch.rand(1024, 20000, generator=gen) < 0.01).long()
    rounded = (scores * 100).round() / 100
    ap, ndcg = ri.MAP(top_k=KS), ri.NDCG(top_k=KS)
    first, lm = ri.NDCG(top_k=KS, ties="first"), ri.ListMetrics(NAMES)
    return {
        "floor": lambda: torch.topk(scores, max(KS), dim=1),
        "MAP": lambda: ap.update((scores, labels)),
        "NDCG": lambda: ndcg.update((scores, labels)),
        "NDCG ties=first": lambda: first.update((rounded, labels)),
        "ListMetrics": lambda: lm.update((scores, labels)),
    }


def main(label: str, repeat: int = 7) -> None:
    torch.set_num_threads(1)
    import rankstream

    fns, times = cases(), {}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times.setdefault(name, []).append(time.perf_counter() - start)
    floor = statistics.median(times.pop("floor"))
    ratios = " ".join(f"{name}={statistics.median(t) / floor:.2f}x" for name, t in times.items())
    print(label, ratios, f"floor={floor * 1e3:.1f}ms", rankstream.__file__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tree")
