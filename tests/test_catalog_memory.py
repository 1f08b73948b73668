"""The catalog path's temporary memory does not grow with the catalog: one update's peak stays
under its memory budget for a catalog of 20,000 and one of 80,000 items (the dense score
matrices: 5 and 20 MiB), with the relevant items placed at random (the most scores kept inside
the bands, the slot-by-slot passes) and near their queries (the candidate path). Measured with
:func:`benchmarks.common.peak_temp_bytes` (torch's allocations from ``torch.profiler``, numpy's
from ``tracemalloc``), as tests/test_memory.py does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.common import peak_temp_bytes
from rankstream.catalog import CatalogMetrics

Q, D, BUDGET = 64, 8, 2 << 20


def catalog(n: int, placement: str):
    g = torch.Generator().manual_seed(0)
    items, queries = torch.randn(n, D, generator=g), torch.randn(Q, D, generator=g)
    relevant = np.random.default_rng(0).permutation(n)[: Q * 10].reshape(Q, 10)
    if placement == "trained":  # each relevant item along its query: at the top
        items[torch.from_numpy(relevant).reshape(-1)] = (
            (3.0 * queries[:, None, :]).expand(Q, 10, D).reshape(-1, D)
        )
    return items, queries, relevant


@pytest.mark.parametrize("placement", ["random", "trained"])
def test_peak_memory_does_not_grow_with_the_catalog(placement):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for n in (20_000, 80_000):
            items, queries, relevant = catalog(n, placement)
            CatalogMetrics(["ndcg@10", "mrr"], items, memory=BUDGET).update(queries, relevant)  # warm
            cm = CatalogMetrics(["ndcg@10", "mrr"], items, memory=BUDGET)
            peak = peak_temp_bytes(lambda cm=cm, q=queries, r=relevant: cm.update(q, r))
            dense = Q * n * 4
            assert peak <= BUDGET, (n, placement, peak)
            assert dense >= 2 * BUDGET  # the bound is well under the matrix it avoids
    finally:
        torch.set_num_threads(threads)
