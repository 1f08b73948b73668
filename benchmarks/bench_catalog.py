"""The whole catalog: ``rankstream.catalog.CatalogMetrics`` against its floor and the usual ways of
getting the same numbers, one thread (``python -m benchmarks.bench_catalog [--quick]``).

Data: 1,024 queries x 200,000 items (``--quick``: 256 x 20,000) at 64 and 256 dimensions, 10
relevant items per query, placed two ways: *trained* (each relevant item's embedding is its
query's direction times 3.5 standard deviations of the scores plus standard noise, so most land
in the query's top 1%, as a trained model puts them) and *random* (any items: the worst case,
half the catalog above the lowest one). Metrics: nDCG@10, Recall@100, MRR.

Timed side by side, interleaved repetitions (:func:`benchmarks.common.interleaved_ms`):

* **floor**: the same chunked matrix products (the catalog path's chunk), results discarded;
* **ours**: ``CatalogMetrics.update`` (exact at every k), counting in numba's compiled pass (the
  ``fast`` extra), and **ours, numpy passes** as without numba;
* **materialise + topk**: the whole ``(queries, items)`` matrix, ``torch.topk(100)``, the metrics
  from the top 100 (MRR truncated at 100);
* **streamed topk** (TFRS's ``FactorizedTopK`` / ``Streaming`` way): per chunk ``torch.topk(100)``
  merged with the running best 100, then the metrics;
* **faiss**: ``IndexFlatIP.search(k=100)`` (one thread) and the metrics.

Each is reported as a ratio to the floor, with how far its MRR is from the exact one (the
top-100 methods miss queries whose first relevant item ranks past 100). The peak extra memory of
one update (the peak resident size after minus the resident size before, in a fresh process
for each case) is measured at
200,000 and 2,000,000 items (``--quick``: 20,000 and 200,000), with the bytes of the dense
matrix beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import torch

from benchmarks.common import interleaved_ms, markdown_table
from rankstream.catalog import CatalogMetrics
from rankstream.core import sizes
from rankstream.core.backends.catalog.budget import chunk_size

NAMES = ["ndcg@10", "recall@100", "mrr"]
K = 100
RELEVANT = 10


def make_data(q: int, n: int, d: int, placement: str, seed: int = 0) -> tuple:
    """``(queries, items, relevant)``: Gaussian embeddings; each query's 10 relevant items distinct
    across queries, moved close to their query for ``"trained"``."""
    gen = torch.Generator().manual_seed(seed)
    items = torch.randn(n, d, generator=gen)
    queries = torch.randn(q, d, generator=gen)
    rng = np.random.default_rng(seed)
    relevant = rng.permutation(n)[: q * RELEVANT].reshape(q, RELEVANT)
    if placement == "trained":
        unit = queries / queries.norm(dim=1, keepdim=True)
        rel = torch.from_numpy(relevant)
        items[rel.reshape(-1)] = (
            3.5 * unit[:, None, :] + torch.randn(q, RELEVANT, d, generator=gen)
        ).reshape(-1, d)
    return queries, items, relevant


def metrics_from_top(ids: torch.Tensor, relevant: np.ndarray) -> dict[str, float]:
    """nDCG@10, Recall@100 and MRR (truncated at the top's depth) from each query's top ids."""
    rel = torch.from_numpy(relevant)
    hit = (ids[:, :, None] == rel[:, None, :]).any(-1).double()  # (Q, K)
    pos = torch.arange(1, ids.shape[1] + 1, dtype=torch.float64)
    disc = 1.0 / torch.log2(pos + 1.0)
    ideal = disc[: min(10, RELEVANT)].sum()
    ndcg = (hit[:, :10] * disc[:10]).sum(1) / ideal
    recall = hit[:, :K].sum(1) / RELEVANT
    first = torch.where(hit.any(1), hit.argmax(1).double() + 1.0, torch.tensor(float("inf")))
    return {
        "ndcg@10": ndcg.mean().item(),
        "recall@100": recall.mean().item(),
        "mrr": (1.0 / first).mean().item(),
    }


def run_time(q: int, n: int, d: int, placement: str, repeat: int) -> list[dict]:
    import faiss

    queries, items, relevant = make_data(q, n, d, placement)
    chunk = chunk_size(q, n)
    faiss.omp_set_num_threads(1)
    index = faiss.IndexFlatIP(d)
    index.add(items.numpy())
    out: dict[str, dict] = {}

    def floor() -> None:
        for a in range(0, n, chunk):
            torch.matmul(queries, items[a : a + chunk].T)

    def ours() -> None:
        out["ours"] = CatalogMetrics(NAMES, items).update(queries, relevant).compute()

    def ours_numpy() -> None:  # without numba (the fast extra): numpy's passes
        sizes.SIZES, old = dataclasses.replace(sizes.SIZES, catalog_fused=False), sizes.SIZES
        try:
            out["ours, numpy passes"] = CatalogMetrics(NAMES, items).update(queries, relevant).compute()
        finally:
            sizes.SIZES = old

    def materialise() -> None:
        out["materialise + topk"] = metrics_from_top(
            torch.topk(queries @ items.T, K, dim=1).indices, relevant
        )

    def streamed() -> None:
        best_v = torch.full((q, K), -float("inf"))
        best_i = torch.zeros((q, K), dtype=torch.int64)
        for a in range(0, n, chunk):
            v, i = torch.topk(torch.matmul(queries, items[a : a + chunk].T), min(K, min(chunk, n - a)), dim=1)
            v, sel = torch.topk(torch.cat([best_v, v], 1), K, dim=1)
            best_i = torch.gather(torch.cat([best_i, i + a], 1), 1, sel)
            best_v = v
        out["streamed topk"] = metrics_from_top(best_i, relevant)

    def flat_ip() -> None:
        _, ids = index.search(queries.numpy(), K)
        out["faiss IndexFlatIP"] = metrics_from_top(torch.from_numpy(ids), relevant)

    fns = {"floor": floor, "ours": ours, "ours, numpy passes": ours_numpy, "materialise + topk": materialise,
           "streamed topk": streamed, "faiss IndexFlatIP": flat_ip}  # fmt: skip
    ours()  # numba compiles its kernel once per install (cached on disk): not a cost of an update
    ms = interleaved_ms(fns, repeat=repeat, warmup=0)
    exact = out["ours"]
    rows = []
    for name in fns:
        row = {"case": f"{q}x{n}x{d} {placement}", "method": name, "s": ms[name] / 1e3,
               "x floor": ms[name] / ms["floor"]}  # fmt: skip
        if name != "floor":
            got = out[name]
            row["MRR - exact"] = got["mrr"] - exact["mrr"]
            row["nDCG@10, R@100 exact"] = (
                "yes, every k" if name.startswith("ours")
                else "yes" if all(abs(got[m] - exact[m]) < 1e-9 for m in NAMES[:2]) else "no"
            )  # fmt: skip
        rows.append(row)
    return rows


def _status(key: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process, in bytes (Linux)."""
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith(key + ":"))
    return int(line.split()[1]) * 1024


def measure_memory(q: int, n: int, d: int, placement: str) -> dict:
    """In this (fresh) process: the peak RSS an update adds to what the data already took
    (``VmHWM`` reset through ``/proc/self/clear_refs`` where allowed, else the peak since the
    process started: an upper bound). Not ``ru_maxrss``: Linux carries it over ``exec`` from the
    parent process."""
    torch.set_num_threads(1)
    queries, items, relevant = make_data(q, n, d, placement)
    cm = CatalogMetrics(NAMES, items)
    cm.update(queries[:2], relevant[:2])  # lazy imports and caches, before the baseline
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak to the resident size now
    except OSError:
        pass
    before = _status("VmRSS")
    cm.update(queries, relevant)
    after = _status("VmHWM")
    return {"case": f"{q}x{n}x{d} {placement}", "peak extra MiB": max(after - before, 0) / 2**20,
            "dense matrix MiB": q * n * 4 / 2**20, "chunk": chunk_size(q, n)}  # fmt: skip


def memory_rows(q: int, sizes: list[int], d: int) -> list[dict]:
    rows = []
    for n in sizes:
        for placement in ("trained", "random"):
            cmd = [sys.executable, "-m", "benchmarks.bench_catalog", "--memory", f"{q},{n},{d},{placement}"]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--memory", help=argparse.SUPPRESS)  # q,n,d,placement: one memory case
    ap.add_argument("--dims", default="64,256")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()
    if args.memory:
        q, n, d, placement = args.memory.split(",")
        print(json.dumps(measure_memory(int(q), int(n), int(d), placement)))
        return
    torch.set_num_threads(1)
    q, n, repeat = (256, 20_000, 3) if args.quick else (1024, 200_000, 2)
    repeat = args.repeat or repeat
    rows = []
    for d in (int(x) for x in args.dims.split(",")):
        for placement in ("trained", "random"):
            rows += run_time(q, n, d, placement, repeat)
    cols = ["case", "method", "s", "x floor", "MRR - exact", "nDCG@10, R@100 exact"]
    print(markdown_table(rows, cols))
    if args.no_memory:
        return
    print()
    catalog_sizes = [20_000, 200_000] if args.quick else [200_000, 2_000_000]
    mem = memory_rows(q, catalog_sizes, 64)
    print(markdown_table(mem, ["case", "chunk", "peak extra MiB", "dense matrix MiB"]))


if __name__ == "__main__":
    main()
