"""Keras adapter vs keras-rs 0.4.0 on the torch backend: one ``update_state`` on the same tensors.

1024 lists x 20,000 items (``--quick``: 256 x 5,000), graded labels for nDCG and binary labels
for MAP (0.5 % relevant), default arguments on both sides (random tie-breaking) except ``k``.
``ratio`` is keras-rs time / rankstream time. keras-rs argsorts the whole list twice (its
tie shuffle, which it applies whenever a mask is present, i.e. always) and takes a top-k of it
twice; rankstream takes one top-``k`` of the scores and one of the labels. With ``k=None`` (the
whole list) both must sort every list, so the gap narrows.

Keras fixes its backend at import, so when this module runs in a process where keras is
already imported on another backend, :func:`run` measures in a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["case", "ours_ms", "peer_ms", "ratio"]


def _torch_backend_here() -> bool:
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend() == "torch"
    if os.environ.get("KERAS_BACKEND", "torch") != "torch":
        return False
    os.environ["KERAS_BACKEND"] = "torch"
    return True


def make_data(batch: int, items: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, items, generator=g)
    relevant = (torch.rand(batch, items, generator=g) < 0.005).float()
    graded = relevant * torch.randint(1, 5, (batch, items), generator=g).float()
    return scores, relevant, graded


def _measure(quick: bool) -> list[dict]:
    import keras_rs

    from benchmarks.common import median_ms
    from rankstream.keras import MAP, NDCG

    batch, items = (256, 5000) if quick else (1024, 20000)
    repeat = 3 if quick else 5
    s, binary, graded = make_data(batch, items)
    cases = [
        ("nDCG@10, graded", NDCG(k=10), keras_rs.metrics.NDCG(k=10), graded),
        ("MAP@10, binary", MAP(k=10), keras_rs.metrics.MeanAveragePrecision(k=10), binary),
        ("nDCG (k=None, whole list), graded", NDCG(), keras_rs.metrics.NDCG(), graded),
    ]
    rows = []
    for name, ours, peer, y in cases:
        full_list = "k=None" in name
        t_ours = median_ms(lambda ours=ours, y=y: ours.update_state(y, s), 1 if full_list else repeat)
        t_peer = median_ms(lambda peer=peer, y=y: peer.update_state(y, s), 1, warmup=0 if not quick else 1)
        rows.append(
            {
                "case": f"{batch}x{items} {name}",
                "ours_ms": t_ours,
                "peer_ms": t_peer,
                "ratio": t_peer / t_ours,
            }
        )
    return rows


def run(quick: bool = False) -> list[dict]:
    """Rows ``{"case", "ours_ms", "peer_ms", "ratio"}`` measured on the torch backend."""
    if _torch_backend_here():
        return _measure(quick)
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "benchmarks.bench_keras", "--json"] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    args = ap.parse_args()
    rows = run(args.quick)
    if args.json:
        print(json.dumps(rows))
    else:
        from benchmarks.common import markdown_table

        print(markdown_table(rows, COLUMNS))
