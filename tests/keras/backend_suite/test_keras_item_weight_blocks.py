"""Per-item weights (keras-rs's ``(batch, list_size)`` ``sample_weight``) read by blocks of rows:
the passes over every item (each list's ``sum w rel``, the ideal ranking by ``w * gain``) give
keras-rs's values, whether the weights drop items (some ``<= 0``: a mask is built) or not
(every weight positive: no mask), with ``-1`` padding, through ``compile`` + ``evaluate``, and
with a mask through ``update_state`` (``evaluate`` takes no dict of labels beside one output).
The blocks are made one row each here (the size they start from lowered), and the test checks
that the metrics did read several blocks."""

from __future__ import annotations

import zlib
from dataclasses import replace

import keras
import krs_reference as ref
import numpy as np
import pytest

import rankstream.core.lists.selection as selection
import rankstream.core.sizes as sizes
from rankstream.keras import MAP, NDCG, HitRateAtK, RPrecision

B, N, K = 12, 40, 5
METRICS = {
    "ndcg": lambda: NDCG(k=K, shuffle_ties=False, name="ndcg", dtype="float64"),
    "map": lambda: MAP(k=K, shuffle_ties=False, name="map", dtype="float64"),
    "hit_rate": lambda: HitRateAtK(k=K, shuffle_ties=False, name="hit_rate", dtype="float64"),
    "r_precision": lambda: RPrecision(shuffle_ties=False, name="r_precision", dtype="float64"),
}


def zero_loss(y_true, y_pred):
    return y_pred * 0.0  # per item, as the weights


@pytest.fixture
def blocks(monkeypatch):
    """One row per block from the first value on; the blocks each metric read, counted."""
    seen = []
    real = selection.Selection.row_blocks

    def counted(self):
        out = real(self)
        seen.append(len(out))
        return out

    monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, row_blocks_from=1, row_block_share=1 << 30))
    monkeypatch.setattr(selection.Selection, "row_blocks", counted)
    return seen


def case(seed: int, drop: bool, masked: bool):
    rng = np.random.default_rng(seed)
    s, y, m, w = ref.make_case(rng, B, N, weights="item", masked=masked)
    if not drop:  # every weight positive: no item is dropped by its weight
        w = rng.uniform(0.2, 2.0, (B, N)).astype("float32")
    return s, y, m, w


@pytest.mark.parametrize("masked", [False, True], ids=["no mask", "mask"])
@pytest.mark.parametrize("drop", [False, True], ids=["weights > 0", "some weights 0"])
def test_evaluate_by_blocks_of_rows_gives_keras_rs_values(blocks, drop, masked):
    s, y, m, w = case(zlib.crc32(repr((drop, masked)).encode()), drop, masked)
    if m is None:  # compile + evaluate, one batch per step (keras-rs's list weights are per batch)
        inputs = keras.Input((N,))
        model = keras.Model(inputs, inputs)  # the scores as given
        model.compile(
            loss=zero_loss, weighted_metrics=[make() for make in METRICS.values()], run_eagerly=True
        )
        logs = model.evaluate(s, y, sample_weight=w, batch_size=B, verbose=0, return_dict=True)
    else:  # a mask comes in a dict of labels, which evaluate takes for several outputs: update_state
        logs = {}
        for name, make in METRICS.items():
            metric = make()
            metric.update_state({"labels": y, "mask": m}, s, sample_weight=w)
            logs[name] = float(metric.result())
    for name in METRICS:
        k = None if name == "r_precision" else K
        want = ref.keras_rs_mean(name, s, y, k, mask=m, sample_weight=w)
        assert logs[name] == pytest.approx(want, rel=1e-6, abs=1e-9), name
    assert max(blocks) == B  # the passes over every item went row by row
