"""Small eager batches (issue 12): one Ignite ``update`` of NDCG@10 / MAP@10 against the minimal
eager versions of :mod:`benchmarks.floors`, at 32 lists x 100 items and 256 x 1,000.

Every timing comes from one interleaved loop (:func:`~benchmarks.common.interleaved_ms`), so
the ratios hold while the shared cores are busy. Rows: the floor; our metric's ``update`` (small CPU
batches run on numpy views of the tensors) and the same ``update`` kept on torch ops
(``host_batches(False)``: the path of large and GPU batches, and of the previous release); our
metric attached to an ignite ``Engine`` over 100 iterations (the engine's own cost, measured with
no metric attached, subtracted; ``compute`` at the epoch's end included), relative to 100 plain
updates in the same loop and scaled by the update's time of the first loop; ignite's ``NDCG``;
torchmetrics' ``RetrievalNormalizedDCG`` (``update`` of the flattened batch then ``compute``, its
cost per batch: it stores every prediction and groups them by list on ``compute``). The peers are
timed in a loop of their own with the floor (they allocate a lot, which slows whatever runs next);
their ``x floor`` is from that loop, and their ``us`` that ratio times the floor of the first loop.
"""

from __future__ import annotations

import argparse

import torch
from ignite.engine import Engine
from ignite.metrics.rec_sys import NDCG as IgniteNDCG
from torchmetrics.retrieval import RetrievalNormalizedDCG

from benchmarks.common import interleaved_ms, markdown_table
from benchmarks.floors import minimal_map, minimal_ndcg
from rankstream.core.backends import host_batches
from rankstream.ignite import MAP, NDCG

K = 10
COLUMNS = ["case", "metric", "us", "x floor"]


def make_data(batch: int, items: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, items, generator=g)
    relevant = (torch.rand(batch, items, generator=g) < 0.05).float()
    return scores, relevant * torch.randint(1, 5, (batch, items), generator=g).float()


def _engine_ms(metric: object | None, s: torch.Tensor, y: torch.Tensor, n: int = 20) -> object:
    engine = Engine(lambda engine, batch: batch)
    if metric is not None:
        metric.attach(engine, "m")  # type: ignore[attr-defined]
    data = [(s, y)] * n
    return lambda: engine.run(data, max_epochs=1)


def run(quick: bool = False) -> list[dict]:
    repeat = 11 if quick else 201
    return [row for batch, items in [(32, 100), (256, 1000)] for row in _case(batch, items, repeat)]


def _case(batch: int, items: int, repeat: int) -> list[dict]:
    rows = []
    s, y = make_data(batch, items)
    ndcg_ranks = torch.arange(2, K + 2, dtype=s.dtype)
    map_ranks = torch.arange(1, K + 1, dtype=s.dtype)
    ours_ndcg, ours_map, peer = NDCG(top_k=K), MAP(top_k=K), IgniteNDCG(top_k=[K])
    torch_ndcg, torch_map = NDCG(top_k=K), MAP(top_k=K)

    def on_torch(metric: NDCG | MAP) -> object:
        def update() -> None:
            with host_batches(False):
                metric.update((s, y))

        return update

    tm = RetrievalNormalizedDCG(top_k=K)
    index = torch.arange(batch).repeat_interleave(items)

    def torchmetrics_batch() -> None:
        tm.update(s.reshape(-1), y.reshape(-1), index)
        tm.compute()
        tm.reset()

    # Ours against the floors in one loop; the peers (which allocate a lot, disturbing
    # whatever runs next) in a second loop against the same floor.
    t = interleaved_ms(
        {
            "minimal eager NDCG (floor)": lambda: minimal_ndcg(s, y, K, ndcg_ranks),
            "rankstream NDCG update": lambda: ours_ndcg.update((s, y)),
            "rankstream NDCG update on torch ops": on_torch(torch_ndcg),
            "minimal eager MAP (floor)": lambda: minimal_map(s, y, K, map_ranks),
            "rankstream MAP update": lambda: ours_map.update((s, y)),
            "rankstream MAP update on torch ops": on_torch(torch_map),
        },
        repeat=repeat,
    )
    peers = interleaved_ms(
        {
            "floor": lambda: minimal_ndcg(s, y, K, ndcg_ranks),
            "ignite NDCG 0.5.5 update": lambda: peer.update((s, y)),
            "torchmetrics RetrievalNormalizedDCG": torchmetrics_batch,
        },
        repeat=max(5, repeat // 10),
    )
    for name in ("ignite NDCG 0.5.5 update", "torchmetrics RetrievalNormalizedDCG"):
        t[name] = peers[name] / peers["floor"] * t["minimal eager NDCG (floor)"]
    n_iter = 100
    eng = interleaved_ms(
        {
            "none": _engine_ms(None, s, y, n_iter),
            "ndcg": _engine_ms(NDCG(top_k=K), s, y, n_iter),
            "map": _engine_ms(MAP(top_k=K), s, y, n_iter),
            "ndcg direct": lambda: [ours_ndcg.update((s, y)) for _ in range(n_iter)],
            "map direct": lambda: [ours_map.update((s, y)) for _ in range(n_iter)],
        },
        repeat=max(5, repeat // 10),
    )
    # the engine's own cost (no metric attached) taken out, relative to as many plain updates
    # in this loop, times the first loop's update
    for name in ("ndcg", "map"):
        ratio = (eng[name] - eng["none"]) / eng[f"{name} direct"]
        t[f"rankstream {name.upper()} via Engine"] = ratio * t[f"rankstream {name.upper()} update"]
    case = f"{batch}x{items}"
    nd, mp = t["minimal eager NDCG (floor)"], t["minimal eager MAP (floor)"]
    order = [
        ("minimal eager NDCG (floor)", nd),
        ("rankstream NDCG update", nd),
        ("rankstream NDCG update on torch ops", nd),
        ("rankstream NDCG via Engine", nd),
        ("ignite NDCG 0.5.5 update", nd),
        ("torchmetrics RetrievalNormalizedDCG", nd),
        ("minimal eager MAP (floor)", mp),
        ("rankstream MAP update", mp),
        ("rankstream MAP update on torch ops", mp),
        ("rankstream MAP via Engine", mp),
    ]
    for name, floor in order:
        rows.append({"case": case, "metric": name, "us": t[name] * 1e3, "x floor": t[name] / floor})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
