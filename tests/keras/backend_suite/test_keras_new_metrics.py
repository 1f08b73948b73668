"""The new list metrics in Keras (ListAUC, GAUC, F1AtK, ERR, RBP with its residual), through
``model.compile`` + ``evaluate`` (jit on JAX) in batches: the naive one-list-at-a-time
references of ``tests/reference.py`` (AUC: every pair counted, ties one half), weighted by
``sample_weight`` per list. Every list holds a relevant and a non-relevant item, so the keras-rs
list weights are the given ones in every batch."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import rankstream.keras as rk

import reference as ref

BACKEND = keras.backend.backend()
B, N = 5, 7
TOL = {"rel": 1e-5, "abs": 1e-6}


def data(seed, ties):
    rng = np.random.default_rng(seed)
    if ties:  # AUC counts ties one half whatever their order
        s = rng.integers(0, 4, (3 * B, N)).astype("float32")
    else:
        s = np.argsort(rng.random((3 * B, N)), axis=1).astype("float32") / N + 0.05
    y = (rng.integers(0, 4, (3 * B, N)) * (rng.random((3 * B, N)) < 0.5)).astype("float32")
    y[:, 0], y[:, 1] = 2.0, 0.0  # both classes in every list (relevant meaning y >= 1)
    w = rng.uniform(0.5, 2.0, 3 * B).astype("float32")
    return s, y, w


def mean(values, weights):
    return float(np.sum(np.multiply(values, weights)) / np.sum(weights))


CASES = {
    # name -> (metric from its log name, log name, per-list reference, the reference's options,
    # data with ties, the list weight's extra factor: the number of items for GAUC)
    "auc": (lambda n: rk.ListAUC(name=n), "auc", ref.auc, {"threshold": 1.0}, True, False),
    "gauc": (lambda n: rk.GAUC(name=n), "gauc", ref.auc, {"threshold": 1.0}, True, True),
    "f1": (lambda n: rk.F1AtK(3, shuffle_ties=False, name=n), "f1@3", ref.f1, {"threshold": 1.0},
           False, False),
    "err": (lambda n: rk.ERR(3, max_grade=3, shuffle_ties=False, name=n), "err@3", ref.err,
            {"max_grade": 3.0}, False, False),
    "rbp": (lambda n: rk.RBP(shuffle_ties=False, p=0.7, residual=True, name=n), "rbp", ref.rbp,
            {"threshold": 1.0, "p": 0.7}, False, False),
}  # fmt: skip


@pytest.mark.parametrize("metric", list(CASES))
def test_compiled_model_matches_the_reference(metric):
    make, key, fn, kw, ties, by_size = CASES[metric]
    s, y, w = data(len(metric), ties)
    plain, weighted = make(key), make("w")
    inp = keras.Input((N,))
    model = keras.Model(inp, keras.layers.Identity()(inp))
    model.compile(
        loss=lambda yt, yp: keras.ops.mean(yp * 0.0),
        metrics=[plain],
        weighted_metrics=[weighted],
        jit_compile=BACKEND == "jax",
    )
    logs = model.evaluate(s, y, sample_weight=w, batch_size=B, verbose=0, return_dict=True)
    k = 3 if metric in ("f1", "err") else None
    values = [fn(s[b], y[b], k, **kw) for b in range(len(s))]
    size = N if by_size else 1.0
    assert logs[key] == pytest.approx(mean(values, np.ones(len(s))), **TOL)
    assert logs["w"] == pytest.approx(mean(values, w * size), **TOL)
    if metric == "rbp":  # the residual beside the value: p^N for lists of N items read whole
        assert logs["rbp_residual"] == pytest.approx(0.7**N, **TOL)
        assert logs["w_residual"] == pytest.approx(0.7**N, **TOL)


def test_update_state_with_a_mask_and_confidence():
    rng = np.random.default_rng(5)
    s = rng.integers(0, 3, (B, N)).astype("float32")
    y = (rng.random((B, N)) < 0.5).astype("float32")
    y[:, 0], y[:, 1] = 1.0, 0.0
    m = rng.random((B, N)) < 0.8
    m[:, :2] = True
    metric = rk.GAUC(confidence=0.95)
    metric.update_state({"labels": y, "mask": m}, s)
    result = {k: float(v) for k, v in metric.result().items()}
    values = [ref.auc(s[b], y[b], None, valid=m[b]) for b in range(B)]
    sizes = m.sum(axis=1)
    expected, se = ref.weighted_mean_stderr(values, list(sizes.astype(float)))
    assert result["gauc"] == pytest.approx(expected, **TOL)
    assert result["gauc_stderr"] == pytest.approx(se, **TOL)
    assert result["gauc_count"] == B


def test_collection_names():
    s, y, _ = data(3, False)
    metric = rk.ListMetrics(["f1@3", "err@3", "rbp", "auc", "success@2"], shuffle_ties=False)
    metric.update_state(y, s)
    got = {k: float(v) for k, v in metric.result().items()}
    assert set(got) == {"f1@3", "err@3", "rbp", "auc", "success@2"}
    f1 = rk.F1AtK(3, shuffle_ties=False)
    f1.update_state(y, s)
    assert got["f1@3"] == pytest.approx(float(f1.result()), **TOL)
    values = [ref.err(s[b], y[b], 3) for b in range(len(s))]
    assert got["err@3"] == pytest.approx(float(np.mean(values)), **TOL)
