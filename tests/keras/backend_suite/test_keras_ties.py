"""``ties="expected"`` through Keras ``model.compile`` + ``evaluate`` (under ``jit_compile`` on
JAX and TensorFlow, the traced no-read path: ``topk_first``, the tie groups by a doubling
cumulative max, the comparison pass in whole-array ``keras.ops``) equal to the eager numpy core
of the same kernel, and to the exhaustive enumeration over the orders of the tied items, with
keras-rs's conventions (per-item weights, -1 padding) on scores full of exact ties."""

from __future__ import annotations

import itertools
import math

import keras
import numpy as np
import pytest

from rankstream.core.lists.hit_rate import HitRateKernel
from rankstream.core.lists.map import MAPKernel
from rankstream.core.lists.ndcg import NDCGKernel
from rankstream.core.lists.precision import PrecisionKernel
from rankstream.core.lists.r_precision import RPrecisionKernel
from rankstream.core.lists.reciprocal_rank import ReciprocalRankKernel
from rankstream.keras import KernelMetric

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64
RTOL, ATOL = (1e-12, 1e-12) if X64 else (2e-5, 1e-6)
KERAS_RS = {"weighting": "keras_rs", "negative_labels": "mask", "empty": "zero"}
ROWS, ITEMS, BATCH = 48, 8, 16


def data(seed: int):
    """Scores on a grid of 3 levels (exact ties, one constant row), graded labels with -1
    padding, per-item weights exact in float32."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, size=(ROWS, ITEMS)).astype(np.float64) / 2.0
    scores[0] = 1.0
    labels = rng.integers(0, 4, size=(ROWS, ITEMS)).astype(np.float64)
    labels[rng.random((ROWS, ITEMS)) < 0.15] = -1.0  # padding
    labels[:, 0] = np.maximum(labels[:, 0], 0.0)
    weights = rng.choice([0.5, 1.0, 2.0], size=(ROWS, ITEMS))
    return scores, labels, weights


def kernels():
    return {
        "ndcg@3": NDCGKernel(3, relevance_threshold=None, ties="expected", **KERAS_RS),
        "map@5": MAPKernel(5, denominator="all", relevance_threshold=1.0, ties="expected", **KERAS_RS),
        "hr@2": HitRateKernel(2, relevance_threshold=1.0, ties="expected", **KERAS_RS),
        "mrr@4": ReciprocalRankKernel(4, relevance_threshold=2.0, ties="expected", **KERAS_RS),
        "p@3": PrecisionKernel(3, denominator="valid", relevance_threshold=1.0, ties="expected", **KERAS_RS),
        "rprec": RPrecisionKernel(relevance_threshold=1.0, ties="expected", **KERAS_RS),
    }


def compiled(metrics, jit: bool):
    inputs = keras.Input((ITEMS,), dtype="float64")
    model = keras.Model(inputs, inputs)  # the scores as given
    model.compile(
        loss=lambda yt, yp: keras.ops.mean(yp * 0.0),
        weighted_metrics=metrics,
        jit_compile=jit if BACKEND != "torch" else False,
    )
    return model


def evaluate(metrics, scores, labels, weights, jit: bool, model=None):
    model = model or compiled(metrics, jit)
    return model.evaluate(
        scores, labels, sample_weight=weights, batch_size=BATCH, verbose=0, return_dict=True
    )


def core_value(kernel, scores, labels, weights) -> float:
    """The eager numpy core: the kernel's sums over the same batches, then its value."""
    sums = None
    for a in range(0, ROWS, BATCH):
        part = kernel.batch_sums(
            None, scores[a : a + BATCH], labels[a : a + BATCH], None, weights[a : a + BATCH]
        )
        sums = part if sums is None else {n: sums[n] + part[n] for n in sums}
    return float(np.asarray(kernel.compute(sums)["value"]).reshape(-1)[0])


def test_evaluate_under_jit_equals_the_eager_core() -> None:
    scores, labels, weights = data(3)
    metrics = [KernelMetric(kernel, name=name, dtype="float64") for name, kernel in kernels().items()]
    logs = evaluate(metrics, scores, labels, weights, jit=True)
    for name, kernel in kernels().items():
        assert logs[name] == pytest.approx(core_value(kernel, scores, labels, weights), rel=RTOL, abs=ATOL), (
            name
        )


def _ndcg_one_order(ys, ws, k: int) -> float:
    g = [w * (2.0**y - 1.0) for y, w in zip(ys, ws, strict=True)]
    kk = min(k, len(g))
    dcg = sum(g[j] / math.log2(j + 2) for j in range(kk))
    idcg = sum(v / math.log2(j + 2) for j, v in enumerate(sorted(g, reverse=True)[:kk]))
    return dcg / idcg if idcg > 0 else 0.0


def test_per_list_ndcg_under_jit_equals_the_enumeration() -> None:
    """The per-item-weighted nDCG@3 of each list alone (one list per batch, so the keras-rs list
    weight is the list's own), under ``jit`` where the backend has one, against the mean over
    every order of each group of tied items."""
    scores, labels, weights = data(8)
    rows = range(6)
    kernel = NDCGKernel(3, relevance_threshold=None, ties="expected", **KERAS_RS)
    model = compiled([KernelMetric(kernel, name="ndcg", dtype="float64")], jit=True)
    for i in rows:
        keep = labels[i] >= 0
        items = [j for j in range(ITEMS) if keep[j]]
        groups = [
            [j for j in items if scores[i, j] == v]
            for v in sorted({scores[i, j] for j in items}, reverse=True)
        ]
        values = [
            _ndcg_one_order([labels[i, j] for j in r], [weights[i, j] for j in r], 3)
            for r in (sum(p, ()) for p in itertools.product(*(itertools.permutations(g) for g in groups)))
        ]
        want = math.fsum(values) / len(values)
        logs = evaluate(None, scores[i : i + 1], labels[i : i + 1], weights[i : i + 1], True, model)
        assert logs["ndcg"] == pytest.approx(want, rel=RTOL, abs=ATOL), i


def test_the_keras_rs_classes_take_ties_expected() -> None:
    """``ties="expected"`` on the keras-rs classes and ``ListMetrics`` (overriding
    ``shuffle_ties``): compile + evaluate under jit equals the eager core with the classes'
    defaults and that policy; the option round-trips through the config and is validated."""
    from rankstream.keras import NDCG, ListMetrics, MeanReciprocalRank

    scores, labels, weights = data(5)
    metrics = [
        NDCG(3, name="ndcg", dtype="float64", ties="expected"),
        MeanReciprocalRank(4, name="mrr", dtype="float64", ties="expected"),
        ListMetrics(["map@5", "precision@3"], dtype="float64", ties="expected"),
    ]
    logs = evaluate(metrics, scores, labels, weights, jit=True)
    want = {
        "ndcg": NDCGKernel(3, relevance_threshold=None, ties="expected", **KERAS_RS),
        "mrr": ReciprocalRankKernel(4, relevance_threshold=1.0, ties="expected", **KERAS_RS),
        "map@5": MAPKernel(5, denominator="all", relevance_threshold=1.0, ties="expected", **KERAS_RS),
        "precision@3": PrecisionKernel(
            3, denominator="valid", relevance_threshold=1.0, ties="expected", **KERAS_RS
        ),
    }
    for name, kernel in want.items():
        got = logs[name]
        assert got == pytest.approx(core_value(kernel, scores, labels, weights), rel=RTOL, abs=ATOL), name
    assert NDCG.from_config(metrics[0].get_config()).kernel.conventions.ties == "expected"
    assert "ties" not in NDCG(3).get_config()  # unset: the config as it always was
    assert (
        ListMetrics.from_config(metrics[2].get_config()).kernel.members["map@5"].conventions.ties
        == "expected"
    )
    with pytest.raises(ValueError, match=r"ties must be one of .*got 'mean'"):
        NDCG(3, ties="mean")
