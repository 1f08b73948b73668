"""Compiled Keras (issue 12): what a metric adds to ``model.evaluate`` (``jit_compile="auto"``) on
the current Keras backend (``make bench`` runs it on JAX and on TensorFlow).

8,192 lists x 1,000 items (``--quick``: 2,048), batch 512, graded labels (0.5 % relevant); the
model is an identity layer with a mean squared error loss, so the scores are the inputs and the
metric is most of the step. Each evaluate is timed, interleaved with the others (medians);
``added`` is its time minus the evaluate without metrics; ``x floor`` divides that by what the
top-k floor metric (:func:`benchmarks.floors.topk_floor_metric`: one ``ops.top_k`` of the scores
summed into a variable) adds, left out when the floor adds less than the noise of the run
(TensorFlow's input pipeline dominates its evaluate); ``keras-rs / ours`` is what keras-rs's
NDCG@10 adds over what ours adds.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras
import keras_rs

from benchmarks.common import interleaved_ms, markdown_table
from benchmarks.floors import topk_floor_metric
from rankstream.keras import MAP, NDCG

COLUMNS = ["backend", "metric", "evaluate ms", "added ms", "x floor", "keras-rs / ours"]


def _model(metrics: list[Any], items: int) -> Any:
    model = keras.Sequential([keras.Input((items,)), keras.layers.Identity()])
    model.compile(loss="mse", metrics=metrics, jit_compile="auto")
    return model


def run(quick: bool = False) -> list[dict]:
    lists, items, batch = (2048 if quick else 8192), 1000, 512
    rng = np.random.default_rng(0)
    x = rng.standard_normal((lists, items)).astype("float32")
    y = ((rng.random((lists, items)) < 0.005) * rng.integers(1, 5, (lists, items))).astype("float32")
    cases = {
        "no metric": [],
        "top-k floor metric": [topk_floor_metric(10)],
        "rankstream NDCG@10": [NDCG(k=10)],
        "rankstream NDCG@10, shuffle_ties=False": [NDCG(k=10, shuffle_ties=False)],
        "rankstream MAP@10": [MAP(k=10)],
        "keras-rs NDCG@10 (0.4.0)": [keras_rs.metrics.NDCG(k=10)],
    }
    models = {name: _model(metrics, items) for name, metrics in cases.items()}
    fns = {name: (lambda m=m: m.evaluate(x, y, batch_size=batch, verbose=0)) for name, m in models.items()}
    t = interleaved_ms(fns, repeat=3 if quick else 7, warmup=1)
    base, floor = t["no metric"], t["top-k floor metric"] - t["no metric"]
    ours = t["rankstream NDCG@10"] - base
    rows = []
    for name, ms in t.items():
        added = ms - base
        rows.append(
            {
                "backend": keras.backend.backend(),
                "metric": name,
                "evaluate ms": ms,
                "added ms": added if name != "no metric" else "",
                "x floor": added / floor if name != "no metric" and floor > 0.05 * base else "",
                "keras-rs / ours": added / ours if name.startswith("keras-rs") else "",
            }
        )
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(markdown_table(run(ap.parse_args().quick), COLUMNS))
