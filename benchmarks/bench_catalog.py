"""The catalog path against its floor (the same chunked matrix products, results discarded), one
thread: ``python benchmarks/bench_catalog.py [queries] [items] [dim]``. Two placements of the
relevant items (10 per query): where a trained model puts them (inside its top 1%), and at random
(the worst case: about half the catalog scores above the lowest one)."""

from __future__ import annotations

import resource
import sys
import time

import numpy as np
import torch

from rankstream.catalog import CatalogMetrics, prepare
from rankstream.core.catalog.budget import chunk_size


def floor(queries, items, chunk):
    t = time.perf_counter()
    for a in range(0, items.shape[0], chunk):
        torch.matmul(queries, items[a : a + chunk].T)
    return time.perf_counter() - t


def main() -> None:
    torch.set_num_threads(1)
    q, n, d = (int(x) for x in (sys.argv[1:] + ["1024", "200000", "64"][len(sys.argv[1:]) :]))
    gen = torch.Generator().manual_seed(0)
    items = torch.randn(n, d, generator=gen)
    queries = torch.randn(q, d, generator=gen)
    chunk = chunk_size(q, n)
    rng = np.random.default_rng(0)
    random_rel = [rng.choice(n, 10, replace=False) for _ in range(q)]
    # "trained": 10 items among each query's top 1% (found once, outside the timing)
    top = torch.topk(queries @ items.T, max(n // 100, 10), dim=1).indices.numpy()
    trained_rel = [rng.choice(row, 10, replace=False) for row in top]
    base = floor(queries, items, chunk)
    print(f"{q} queries x {n} items x {d} dims, chunk {chunk}: floor {base:.2f} s")
    for label, rel in (("trained", trained_rel), ("random", random_rel)):
        cm = CatalogMetrics(["ndcg@10", "recall@100", "mrr"], items)
        t = time.perf_counter()
        cm.update(queries, rel)
        took = time.perf_counter() - t
        base = floor(queries, items, chunk)
        print(f"  {label}: {took:.2f} s = {took / base:.2f}x the floor ({base:.2f} s); {cm.compute()}")
    batch = prepare(queries, trained_rel, items=items)
    t = time.perf_counter()
    batch.count()
    print(f"  counting alone (trained): {time.perf_counter() - t:.2f} s")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
