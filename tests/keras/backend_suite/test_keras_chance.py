"""Chance-adjusted Keras list metrics (``chance=True``) through ``model.compile`` + ``evaluate``
(``jit`` on JAX, ``tf.function`` on TensorFlow): ``name_expected``, ``name_adjusted`` and
``name_z`` in the logs equal the exhaustive enumeration of every ordering of each list's valid
items (padding ``-1`` masked), scored by the naive reference and aggregated by hand; the same
for :class:`ListMetrics` with ``confidence``; the config round-trips."""

from __future__ import annotations

import itertools
import math

import keras
import numpy as np
import pytest

from rankstream.keras import (
    DCG,
    MAP,
    NDCG,
    HitRateAtK,
    ListMetrics,
    MeanReciprocalRank,
    PrecisionAtK,
    RecallAtK,
    RPrecision,
)

import reference as ref

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64
RTOL, ATOL = (1e-10, 1e-12) if X64 else (2e-5, 1e-6)
ROWS, ITEMS, BATCH = 24, 6, 8
#: class, k, the reference's per-list function and options (keras-rs's defaults)
CLASSES = {
    "ndcg@3": (NDCG, 3, ref.ndcg, {"threshold": None}),
    "dcg@3": (DCG, 3, ref.dcg, {"threshold": None}),
    "map@3": (MAP, 3, ref.average_precision, {"denominator": "all", "threshold": 1.0}),
    "precision@3": (PrecisionAtK, 3, ref.precision, {"denominator": "valid", "threshold": 1.0}),
    "recall@2": (RecallAtK, 2, ref.recall, {"threshold": 1.0}),
    "hit_rate@2": (HitRateAtK, 2, ref.hit_rate, {"threshold": 1.0}),
    "mrr@5": (MeanReciprocalRank, 5, ref.reciprocal_rank, {"threshold": 1.0}),
    "r_precision": (RPrecision, None, ref.r_precision, {"threshold": 1.0}),
}


def data(seed: int):
    """Tie-free scores, graded labels with padding (-1), every list relevant (so the list
    weight keras-rs collapses is the given one), weights exact in float32."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(ROWS, ITEMS))
    labels = rng.integers(0, 3, size=(ROWS, ITEMS)).astype(float)
    labels[rng.random((ROWS, ITEMS)) < 0.2] = -1.0
    labels[np.arange(ROWS), rng.integers(0, ITEMS, size=ROWS)] = 2.0
    weights = np.round(rng.uniform(0.2, 3.0, size=ROWS) * 64) / 64
    return scores, labels, weights


def by_enumeration(per_list, kw, scores, labels, weights, k):
    """``{"": M, "_expected": E, "_adjusted": ..., "_z": ...}``: every ordering of each list's
    valid items scored by the reference, the moments aggregated over the lists by hand."""
    w_sum = m_sum = e_sum = b_sum = v_sum = 0.0
    for s, y, w in zip(scores, labels, weights, strict=True):
        valid = [v >= 0 for v in y]
        m = per_list(s, y, k, valid=valid, **kw)
        items = [v for v in y if v >= 0]
        values = np.array(
            [
                per_list(list(range(len(items), 0, -1)), list(a), k, **kw)
                for a in set(itertools.permutations(items))
            ]
        )
        w_sum, m_sum = w_sum + w, m_sum + w * m
        e_sum, b_sum = e_sum + w * values.mean(), b_sum + w * values.max()
        v_sum += w * w * values.var()
    m, e, best = m_sum / w_sum, e_sum / w_sum, b_sum / w_sum
    return {
        "": m,
        "_expected": e,
        "_adjusted": (m - e) / (best - e),
        "_z": (m - e) / (math.sqrt(v_sum) / w_sum),
    }


def evaluate(metrics, scores, labels, weights):
    inputs = keras.Input((ITEMS,), dtype="float64")
    model = keras.Model(inputs, inputs)  # the scores as given: the reference ranks the same
    model.compile(loss="mse", weighted_metrics=metrics)
    return model.evaluate(
        scores, labels, sample_weight=weights, batch_size=BATCH, verbose=0, return_dict=True
    )


def test_evaluate_logs_the_chance_quantities_of_the_enumeration():
    scores, labels, weights = data(seed=3)
    metrics = [
        cls(*(() if k is None else (k,)), shuffle_ties=False, name=name, dtype="float64", chance=True)
        for name, (cls, k, _, _) in CLASSES.items()
    ]
    logs = evaluate(metrics, scores, labels, weights)
    for name, (_, k, per_list, kw) in CLASSES.items():
        for suffix, value in by_enumeration(per_list, kw, scores, labels, weights, k).items():
            assert logs[name + suffix] == pytest.approx(value, rel=RTOL, abs=ATOL), name + suffix


def test_list_metrics_flatten_every_members_quantities_with_confidence():
    scores, labels, weights = data(seed=4)
    names = ["ndcg@3", "map@3", "rprec"]
    metric = ListMetrics(names, shuffle_ties=False, dtype="float64", confidence=0.9, chance=True)
    logs = evaluate([metric], scores, labels, weights)
    for name, short in zip(names, ("ndcg@3", "map@3", "r_precision"), strict=True):
        _, k, per_list, kw = CLASSES[short]
        for suffix, value in by_enumeration(per_list, kw, scores, labels, weights, k).items():
            assert logs[name + suffix] == pytest.approx(value, rel=RTOL, abs=ATOL), name + suffix
        assert {f"{name}_{q}" for q in ("stderr", "ci_low", "ci_high", "count")} <= set(logs)


def test_config_round_trips_and_is_unchanged_without_the_option():
    on = NDCG(5, chance=True)
    assert on.get_config()["chance"] is True
    assert NDCG.from_config(on.get_config()).kernel.chance is True
    assert "chance" not in NDCG(5).get_config()
    assert "chance" not in ListMetrics(["map@3"]).get_config()
    assert (
        ListMetrics.from_config(ListMetrics(["map@3"], chance=True).get_config())
        .kernel.members["map@3"]
        .chance
    )
    with pytest.raises(TypeError, match="chance must be a bool, got 'on'"):
        MAP(3, chance="on")
