"""Distributed evaluation with rankstream's Ignite metrics: 2 gloo workers give the
single-process numbers.

A synthetic recommender evaluation: 1001 users (not a multiple of the 2 workers), a score
for each of 300 items, held-out items as labels, training items masked out. Each worker
evaluates its shard through ``idist.auto_dataloader`` (a ``DistributedSampler`` under
2 processes); the metrics all-reduce their sums in ``compute()``, so every worker prints
the same totals.

``DistributedSampler`` pads the last batch with a duplicate user so both workers see
501 users: counted as is, that user weighs twice. ``batch_padding_weights`` gives the
padded duplicate a ``sample_weight`` of 0 and the result is exactly the single-process one.

Run: ``python examples/distributed_ignite.py`` (CPU, a few seconds plus process start-up).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import tempfile

import ignite.distributed as idist
import torch
from ignite.engine import Engine
from torch.utils.data import DataLoader, TensorDataset

from rankstream.distributed import batch_padding_weights
from rankstream.ignite import MAP, NDCG

KS = [1, 5, 10]
N_USERS, N_ITEMS, BATCH = 1001, 300, 64


def make_data(seed: int = 0) -> TensorDataset:
    """Per user: model scores, held-out labels (graded 0..2) and a mask of candidates."""
    g = torch.Generator().manual_seed(seed)
    taste = torch.randn(N_USERS, 8, generator=g) @ torch.randn(8, N_ITEMS, generator=g)
    scores = taste + 4.0 * torch.randn(N_USERS, N_ITEMS, generator=g)  # the "model": taste + noise
    affinity = torch.softmax(taste * 2.0, dim=1)
    held_out = torch.multinomial(affinity, 8, generator=g)
    labels = torch.zeros(N_USERS, N_ITEMS)
    labels.scatter_(1, held_out, torch.randint(1, 3, (N_USERS, 8), generator=g).float())
    seen = torch.multinomial(affinity, 20, generator=g)  # "training" items: not candidates
    candidates = torch.ones(N_USERS, N_ITEMS, dtype=torch.bool)
    candidates.scatter_(1, seen, False)
    candidates |= labels > 0
    return TensorDataset(scores, labels, candidates)


def evaluate(loader: DataLoader, *, drop_padding: bool) -> dict[str, list[float]]:
    """One evaluation epoch over this process's shard (the whole data on one process)."""

    def step(engine: Engine, batch: tuple) -> tuple:
        scores, labels, candidates = batch
        extra = {"mask": candidates}
        if drop_padding:
            i = (engine.state.iteration - 1) % engine.state.epoch_length  # batch index in the epoch
            extra["sample_weight"] = batch_padding_weights(loader.sampler, i, loader.batch_size)
        return scores, labels, extra

    evaluator = Engine(step)
    MAP(top_k=KS).attach(evaluator, "map")
    NDCG(top_k=KS).attach(evaluator, "ndcg")
    return evaluator.run(loader).metrics


def worker(local_rank: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    ds = make_data()
    # batch_size is global: auto_dataloader gives each of the N workers BATCH // N and,
    # under N > 1 processes, a DistributedSampler (shuffle=False for evaluation).
    loader = idist.auto_dataloader(ds, batch_size=BATCH, shuffle=False)
    padded = evaluate(loader, drop_padding=False)
    exact = evaluate(loader, drop_padding=True)
    with open(os.path.join(out_dir, f"rank{idist.get_rank()}.json"), "w") as f:
        json.dump({"padded": padded, "exact": exact, "shard": len(loader.sampler)}, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.12f}" for v in values) + "]"


def main(nproc: int = 2) -> int:
    # The reference: one process, no distribution, the same loader code.
    single = evaluate(DataLoader(make_data(), batch_size=BATCH), drop_padding=True)

    with tempfile.TemporaryDirectory() as out:
        with idist.Parallel(
            backend="gloo",
            nproc_per_node=nproc,
            master_addr="127.0.0.1",
            master_port=_free_port(),
            timeout=datetime.timedelta(seconds=60),
        ) as parallel:
            parallel.run(worker, out)
        ranks = []
        for r in range(nproc):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks.append(json.load(f))

    print(f"{N_USERS} users on {nproc} workers: shards of {[r['shard'] for r in ranks]} (with padding)")
    ok = True
    for key, name in (("map", "MAP"), ("ndcg", "nDCG")):
        label = f"{name}@{KS}"
        print(f"single process   {label}: {_fmt(single[key])}")
        print(f"{nproc} gloo workers   {label}: {_fmt(ranks[0]['exact'][key])}")
        print(f"  padding counted {label}: {_fmt(ranks[0]['padded'][key])}")
        # every worker holds the same all-reduced totals
        same_everywhere = all(r["exact"][key] == ranks[0]["exact"][key] for r in ranks)
        close = all(abs(a - b) <= 1e-12 for a, b in zip(ranks[0]["exact"][key], single[key], strict=True))
        ok = ok and same_everywhere and close
    print("OK: distributed == single process" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
