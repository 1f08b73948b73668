"""Sampled evaluation in Keras (``rankstream.keras.SampledRankMetrics``) on every backend:
``compile`` + ``evaluate`` (``jit_compile=True`` on JAX and TensorFlow) against the core
``SampledRanks`` on the same scores, the state against a histogram counted one row at a time
(ties built in: scores are small integers), bad input leaving the state, and the config round
trip."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rankstream.core.backends.keras_ops import x64_enabled
from rankstream.core.sampled_state import SampledRanks
from rankstream.keras import SampledRankMetrics

BACKEND = keras.backend.backend()
JIT = BACKEND in ("jax", "tensorflow")  # torch's jit_compile is torch.compile: minutes to build
N, M = 40, 5
# float32 state (JAX without x64): per-rank values up to 40 (minimal bias, mean rank) summed in float32
RTOL, ATOL = (1e-9, 1e-10) if x64_enabled() else (1e-5, 1e-5)


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 3, size=(rows, M + 1)).astype("float32"), rng.integers(0, M + 1, size=rows)


def naive_histogram(x: np.ndarray, y: np.ndarray, ties: str) -> np.ndarray:
    """Each row's sampled rank, a tie group's places counted one by one."""
    h = np.zeros(M + 1)
    for row, i in zip(x, y, strict=True):
        s = row[i]
        others = [v for j, v in enumerate(row) if j != i]
        above, tied = sum(v > s for v in others), sum(v == s for v in others)
        places = {"optimistic": [above], "pessimistic": [above + tied]}.get(
            ties, range(above, above + tied + 1)
        )
        for r in places:
            h[r] += 1 / len(places)
    return h


def core_report(x: np.ndarray, y: np.ndarray, ties: str, weights=None, **kw) -> dict[str, float]:
    pos = x[np.arange(len(y)), y]
    neg = np.stack([np.delete(row, i) for row, i in zip(x, y, strict=True)])
    return SampledRanks(N, M, ties=ties, **kw).update(pos, neg, weights=weights).compute()


def identity_model() -> keras.Model:
    return keras.Sequential([keras.Input((M + 1,)), keras.layers.Identity()])


@pytest.mark.parametrize("ties", ["realistic", "optimistic", "pessimistic"])
def test_compiled_evaluate_equals_core(ties: str) -> None:
    x, y = data(48, 2)
    metric = SampledRankMetrics(N, M, ks=(1, 3), confidence=0.9, ties=ties)
    model = identity_model()
    model.compile(loss=lambda a, b: keras.ops.mean(b) * 0.0, metrics=[metric], jit_compile=JIT)
    out = model.evaluate(x, y, batch_size=16, return_dict=True, verbose=0)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(metric._hist), naive_histogram(x, y, ties), atol=1e-5
    )
    want = core_report(x, y, ties, ks=(1, 3), confidence=0.9)
    keys = [k for k in out if k != "loss"]
    assert "count" in keys and "ndcg@3_bias_variance_stderr" in keys and "mrr_sampled_ci_low" in keys
    assert not any("fitted" in k for k in keys)  # host-only: report()
    for key in keys:
        np.testing.assert_allclose(float(out[key]), want[key], rtol=RTOL, atol=ATOL, err_msg=key)
    # eagerly after evaluate: the full core report from the same state
    full = metric.report()
    assert full.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(full[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_compiled_evaluate_with_sample_weights_equals_core() -> None:
    """Weights of 0, 0.5, 1, 2 and 3 (exact in float32): the weighted histogram, its squares, the
    number of weighted lists and the report against the core's weighted state."""
    x, y = data(40, 11)
    w = np.random.default_rng(11).choice([0.0, 0.5, 1.0, 2.0, 3.0], size=40).astype("float32")
    metric = SampledRankMetrics(N, M, ks=(2,), confidence=0.95)
    model = identity_model()  # Keras passes sample_weight to weighted_metrics, not to metrics
    model.compile(loss=lambda a, b: keras.ops.mean(b) * 0.0, weighted_metrics=[metric], jit_compile=JIT)
    out = model.evaluate(x, y, sample_weight=w, batch_size=16, return_dict=True, verbose=0)
    want = core_report(x, y, "realistic", weights=w, ks=(2,), confidence=0.95)
    assert float(out["count"]) == pytest.approx(w.sum())
    assert float(keras.ops.convert_to_numpy(metric._lists)) == np.count_nonzero(w)
    for key in (k for k in out if k != "loss"):
        np.testing.assert_allclose(float(out[key]), want[key], rtol=RTOL, atol=ATOL, err_msg=key)
    # weight 0 is a list left out: the same as the core without those rows
    keep = w > 0
    dropped = core_report(x[keep], y[keep], "realistic", weights=w[keep], ks=(2,), confidence=0.95)
    np.testing.assert_allclose(
        metric.report()["ndcg@2_bias_variance_ci_high"], dropped["ndcg@2_bias_variance_ci_high"], rtol=1e-5
    )


def test_eager_updates_merge_batches_and_bad_input_leaves_state() -> None:
    x, y = data(30, 5)
    metric = SampledRankMetrics(N, M, ks=2)
    metric.update_state(y[:13], x[:13])
    metric.update_state(y[13:], x[13:])
    metric.update_state(np.zeros(0), np.zeros((0, M + 1), "float32"))  # empty batch: a no-op
    before = keras.ops.convert_to_numpy(metric._hist).copy()
    bad = [
        (np.array([0, M + 1]), x[:2], "y_true"),
        (np.array([0.5, 1.0]), x[:2], "y_true"),
        (np.array([0, 1]), np.where(np.eye(2, M + 1) > 0, np.nan, 1.0).astype("float32"), "NaN"),
        (np.array([0, 1]), x[:2, :M], "y_pred"),
        (np.array([0, 1, 2]), x[:2], "y_true"),
    ]
    for yt, yp, match in bad:
        with pytest.raises(ValueError, match=match):
            metric.update_state(yt, yp)
    for weights in (np.array([1.0, -1.0]), np.array([np.nan, 1.0]), np.ones(3)):
        with pytest.raises(ValueError, match="sample_weight"):
            metric.update_state(y[:2], x[:2], sample_weight=weights)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(metric._hist), before)
    got = {k: float(v) for k, v in metric.result().items()}
    want = core_report(x, y, "realistic", ks=2)
    for key, value in got.items():
        np.testing.assert_allclose(value, want[key], rtol=RTOL, atol=ATOL, err_msg=key)
    metric.reset_state()
    assert np.isnan(float(metric.result()["mrr_sampled"])) and float(metric.result()["count"]) == 0
    same = SampledRankMetrics.from_config(metric.get_config())
    assert same.get_config() == metric.get_config()


def test_compiled_invalid_rows_are_counted_not_added() -> None:
    """JAX jit and TensorFlow graphs cannot raise: the bad row is counted apart, the result NaN;
    torch runs eagerly and raises."""
    x, y = data(8, 7)
    y[3] = M + 4
    metric = SampledRankMetrics(N, M, ks=2)
    model = identity_model()
    model.compile(loss=lambda a, b: keras.ops.mean(b) * 0.0, metrics=[metric], jit_compile=JIT)
    if not JIT:
        with pytest.raises(ValueError, match="y_true"):
            model.evaluate(x, y, batch_size=8, verbose=0)
        assert float(keras.ops.convert_to_numpy(keras.ops.sum(metric._hist))) == 0
        return
    out = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
    assert np.isnan(out["mrr_sampled"])
    keep = np.arange(8) != 3
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(metric._hist), naive_histogram(x[keep], y[keep], "realistic"), atol=1e-5
    )
    with pytest.raises(ValueError, match="invalid"):
        metric.report()
