"""Streamed rank computation on 1024 tasks x 20,000 candidates (torch CPU) against a bare
memory pass over the same scores.

* ``ours``: one ``update`` of rankstream's Ignite ``RankBasedMetrics`` (every rank-based
  metric with its expectation terms; ranks computed once) or ``MRR``;
* ``peer``: the floor any streamed rank must pay, one read of the scores. Two floors are
  reported: ``scores.sum()`` (one read) and one comparison against the true scores written as
  0/1 floats and summed per row (one read, one write, one read: the optimistic rank alone).

Cases: one true index per row (no mask / a ragged mask) and binary labels with a few
positives per row (the filtered setting; each positive slot costs one more pair of passes).

Memory: the peak of the temporary memory of one ``update`` of a fresh metric (what it keeps,
its workspace and the expectation terms of the list width, counts too) after another instance
ran on the same batch, and of one call of each floor (as timed: the comparison's buffer exists
already), in MiB and as a multiple of the scores' bytes
(:func:`benchmarks.common.peak_temp_bytes`).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import PEAK_COLUMNS, markdown_table, median_ms, peak_columns
from rankstream.ignite import InverseHarmonicMeanRank, RankBasedMetrics

KS = (1, 3, 10)


def make_data(batch: int, items: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, items, generator=g)
    target = torch.randint(0, items, (batch,), generator=g)
    lengths = torch.randint(items // 2, items + 1, (batch, 1), generator=g)
    mask = torch.arange(items)[None, :] < lengths
    mask[torch.arange(batch), target] = True
    labels = (torch.rand(batch, items, generator=g) < 2.0 / items).float()  # ~2 positives per row
    labels[torch.arange(batch), target] = 1.0
    return {"scores": scores, "target": target, "mask": mask, "labels": labels}


def one_comparison(scores: torch.Tensor, t: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    torch.gt(scores, t[:, None], out=buf)
    return buf.sum(dim=1)


def run(quick: bool = False) -> list[dict]:
    batch, items = (256, 5000) if quick else (1024, 20000)
    repeat = 5 if quick else 15
    d = make_data(batch, items)
    s = d["scores"]
    t = s[torch.arange(batch), d["target"]]
    buf = torch.empty_like(s)
    floor_sum = median_ms(lambda: s.sum(), repeat, warmup=2)
    floor_cmp = median_ms(lambda: one_comparison(s, t, buf), repeat, warmup=2)
    nbytes = s.numel() * s.element_size()
    floors = {
        "scores.sum()": (floor_sum, peak_columns(lambda: s.sum(), nbytes)),
        "1 comparison + row sum": (floor_cmp, peak_columns(lambda: one_comparison(s, t, buf), nbytes)),
    }
    cases = [
        ("index, no mask, all metrics", lambda: RankBasedMetrics(KS), (s, d["target"])),
        ("index, no mask, MRR only", InverseHarmonicMeanRank, (s, d["target"])),
        (
            "index, ragged mask, all metrics",
            lambda: RankBasedMetrics(KS),
            (s, d["target"], {"mask": d["mask"]}),
        ),
        (
            f"labels, {int(d['labels'].sum(1).max())} slots, all metrics",
            lambda: RankBasedMetrics(KS),
            (s, d["labels"]),
        ),
    ]
    rows = []
    for name, make, output in cases:
        metric = make()
        ms = median_ms(lambda m=metric, o=output: m.update(o), repeat, warmup=2)
        fresh = make()
        ours_peak = peak_columns(lambda m=fresh, o=output: m.update(o), nbytes)
        for peer_name, (peer, peer_peak) in floors.items():
            rows.append(
                {
                    "case": f"{batch}x{items} {name}",
                    "peer": peer_name,
                    "ours_ms": ms,
                    "peer_ms": peer,
                    "ratio": ms / peer,
                    **{f"ours {c}": v for c, v in ours_peak.items()},
                    "peer peak MiB": peer_peak["peak MiB"],
                }
            )
    return rows


COLUMNS = [
    "case",
    "peer",
    "ours_ms",
    "peer_ms",
    "ratio",
    *(f"ours {c}" for c in PEAK_COLUMNS),
    "peer peak MiB",
]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
