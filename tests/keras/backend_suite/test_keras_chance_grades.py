"""``chance=True`` on Keras DCG and nDCG over lists of 3,000 items with graded labels (padding
``-1`` masked, keras-rs's conventions) through ``model.compile`` + ``evaluate``: ``expected``
and ``adjusted`` in the logs against each list's ``E = mean(x) D1(k')`` computed item by item
and the reference's DCG and ideal DCG, weighted by hand. Where values are read back (eager
torch) the batch takes the tiled pass of the gains and DCG's best value from each list's largest
label; under ``jit`` the dense pass: both must give these numbers."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from rankstream.keras import DCG, NDCG

import reference as ref

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64
RTOL = 1e-9 if X64 else 2e-5
ROWS, ITEMS, K = 24, 3000, 10


def data(seed: int):
    """Per list: many items of the top grade, one grade, or a few of mixed grades; padding
    ``-1``; weights exact in float32."""
    rng = np.random.default_rng(seed)
    labels = np.zeros((ROWS, ITEMS))
    for i in range(ROWS):
        if i % 3 == 0:
            labels[i] = rng.integers(0, 5, ITEMS) * (rng.random(ITEMS) < 0.2)
        elif i % 3 == 1:
            labels[i, rng.choice(ITEMS, 3, replace=False)] = 2.0
        else:
            labels[i, rng.choice(ITEMS, 4, replace=False)] = [1.0, 2.0, 3.0, 4.0]
    labels[rng.random((ROWS, ITEMS)) < 0.1] = -1.0
    labels[:, 0] = 3.0  # a relevant item in every list
    weights = np.round(rng.uniform(0.2, 3.0, size=ROWS) * 64) / 64
    return rng.normal(size=(ROWS, ITEMS)), labels, weights


def by_hand(scores, labels, weights, normalised):
    d = [1.0 / math.log2(j + 1) for j in range(1, K + 1)]
    w_sum = m_sum = e_sum = b_sum = 0.0
    for s, y, w in zip(scores.tolist(), labels.tolist(), weights, strict=True):
        valid = [v >= 0 for v in y]
        x = [2.0**v - 1.0 for v in y if v >= 0]
        kp = min(K, len(x))
        e = math.fsum(x) / len(x) * math.fsum(d[:kp])
        best = ref.dcg(y, y, K, valid=valid)
        m = ref.dcg(s, y, K, valid=valid)
        if normalised:
            e, m, best = e / best, m / best, 1.0
        w_sum, m_sum, e_sum, b_sum = w_sum + w, m_sum + w * m, e_sum + w * e, b_sum + w * best
    m, e, best = m_sum / w_sum, e_sum / w_sum, b_sum / w_sum
    return {"_expected": e, "_adjusted": (m - e) / (best - e)}


def test_evaluate_logs_the_expected_and_adjusted_of_long_graded_lists():
    scores, labels, weights = data(seed=2)
    metrics = [
        DCG(K, name="dcg", dtype="float64", chance=True),
        NDCG(K, name="ndcg", dtype="float64", chance=True),
    ]
    inputs = keras.Input((ITEMS,), dtype="float64")
    model = keras.Model(inputs, inputs)
    model.compile(loss="mse", weighted_metrics=metrics)
    logs = model.evaluate(scores, labels, sample_weight=weights, batch_size=ROWS, verbose=0, return_dict=True)
    for name, normalised in (("dcg", False), ("ndcg", True)):
        for suffix, value in by_hand(scores, labels, weights, normalised).items():
            assert logs[name + suffix] == pytest.approx(value, rel=RTOL), name + suffix
