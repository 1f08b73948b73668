"""Whole lists (issue 12): nDCG with ``k=None`` on 256 lists x 20,000 items (``--quick``: 64 x
5,000), graded labels (0.5 % relevant), Keras on the torch backend: one ``update_state`` of ours
and of keras-rs 0.4.0 against one full ``torch.sort`` of the scores (every whole-list metric must
rank every item). Interleaved repetitions, medians.
"""

from __future__ import annotations

import argparse
import os

os.environ["KERAS_BACKEND"] = "torch"

import keras_rs
import torch

from benchmarks.common import interleaved_ms, markdown_table
from benchmarks.floors import sort_floor
from rankstream.keras import NDCG

COLUMNS = ["case", "metric", "ms", "x floor"]


def run(quick: bool = False) -> list[dict]:
    batch, items = (64, 5000) if quick else (256, 20000)
    g = torch.Generator().manual_seed(0)
    s = torch.randn(batch, items, generator=g)
    relevant = (torch.rand(batch, items, generator=g) < 0.005).float()
    y = relevant * torch.randint(1, 5, (batch, items), generator=g).float()
    ours, ours_first, peer = NDCG(), NDCG(shuffle_ties=False), keras_rs.metrics.NDCG()
    t = interleaved_ms(
        {
            "torch.sort of the scores (floor)": lambda: sort_floor(s),
            "rankstream NDCG (k=None)": lambda: ours.update_state(y, s),
            "rankstream NDCG (k=None), shuffle_ties=False": lambda: ours_first.update_state(y, s),
            "keras-rs NDCG (k=None) 0.4.0": lambda: peer.update_state(y, s),
        },
        repeat=3 if quick else 7,
        warmup=1,
    )
    floor = t["torch.sort of the scores (floor)"]
    case = f"{batch}x{items} graded, Keras on torch"
    return [{"case": case, "metric": name, "ms": ms, "x floor": ms / floor} for name, ms in t.items()]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
