"""Beyond-accuracy metrics added to a ListMetrics update at 1,024 x 20,000 (one thread).

The Ignite ``BeyondMetrics`` over the list metrics' collection (nDCG, MAP, recall, MRR,
precision at 5, 10, 20) without and with the ten beyond-accuracy names at k = 10 (coverage,
entropy, Gini, personalization, novelty, ARP, APLT, ACLT, category diversity over 50
categories, cosine diversity of 32-dimensional embeddings), the two updates interleaved
(:func:`benchmarks.common.interleaved_ms`) on one thread; and the beyond names alone.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from benchmarks.bench_lists import COLLECTION, make_data
from benchmarks.common import interleaved_ms, markdown_table, median_ms
from rankstream.adapters.ignite_beyond import BeyondMetrics
from rankstream.core.beyond import ItemData

BEYOND = [f"{m}@10" for m in ("coverage", "entropy", "gini", "personalization", "novelty", "arp", "aplt",
                              "aclt", "diversity", "ild")]  # fmt: skip


def run(quick: bool = False) -> list[dict]:
    batch, n = (256, 5000) if quick else (1024, 20000)
    repeat = 5 if quick else 15
    s, y = make_data(batch, n)["binary"]
    rng = np.random.default_rng(0)
    pop = rng.zipf(1.5, n).clip(max=10_000)
    items = ItemData(popularity=pop, num_users=10_000, tail_max_popularity=2,
                     categories=rng.integers(0, 50, n), embeddings=rng.normal(size=(n, 32)))  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        without, with_beyond = BeyondMetrics(COLLECTION, items), BeyondMetrics(COLLECTION + BEYOND, items)
        alone = BeyondMetrics(BEYOND, items)
        fns = {"without": lambda: without.update((s, y)), "with": lambda: with_beyond.update((s, y)),
               "alone": lambda: alone.update((s, y))}  # fmt: skip
        ms = interleaved_ms(fns, repeat=repeat, warmup=1)
        floor = median_ms(lambda: torch.topk(s, 20, dim=-1), repeat)
    finally:
        torch.set_num_threads(threads)
    case = f"{batch}x{n} binary, one thread"
    return [
        {"case": case, "metric": "torch.topk floor (k = 20)", "ms": floor, "vs ListMetrics": ""},
        {"case": case, "metric": "ListMetrics (15 names)", "ms": ms["without"], "vs ListMetrics": "1.00x"},
        {"case": case, "metric": "ListMetrics (15 names) + 10 beyond-accuracy names @10", "ms": ms["with"],
         "vs ListMetrics": f"{ms['with'] / ms['without']:.3f}x"},
        {"case": case, "metric": "10 beyond-accuracy names @10 alone", "ms": ms["alone"],
         "vs ListMetrics": f"{ms['alone'] / ms['without']:.3f}x"},
    ]  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), ["case", "metric", "ms", "vs ListMetrics"]))
