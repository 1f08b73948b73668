"""Standard errors and intervals of the rank-based means in Keras (``confidence=``): a
pass-through model's ``compile`` + ``evaluate`` (jit on JAX and TensorFlow: the result is
computed with ``keras.ops`` and the traced t critical value), checked against scipy's ``sem`` /
``t.interval`` on naive per-task values and the weighted formula over the tasks; saved states
without the statistics' sums; the traced critical value against scipy."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from rank_statistics_reference import expected_statistics
from scipy import stats

from rankstream.core import backends
from rankstream.core.ranks.intervals import EXACT_DF, t_critical
from rankstream.core.state import StatisticsUnavailableWarning
from rankstream.keras import GMR, ArithmeticMeanRank, HitsAtK, InverseHarmonicMeanRank, RankBasedMetrics

from pykeen_reference import naive_tasks

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64
# float64 metrics where the backend has them (results to 1e-12); float32 on JAX without x64
DTYPE = "float64" if X64 else "float32"
TOL = {"rel": 1e-12, "abs": 1e-12} if X64 else {"rel": 2e-5, "abs": 2e-6}
KS = (1, 3)
N = 9


def pass_through():
    """The scores are the model's input, unchanged."""
    inputs = keras.Input((N,), dtype=DTYPE)
    return keras.Model(inputs, keras.layers.Activation("linear", dtype=DTYPE)(inputs))


def data(seed, b=40):
    """Integer scores (exact ties), the true index, weights with zeros."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, (b, N)).astype(DTYPE)
    return scores, rng.integers(0, N, b).astype("int32"), rng.choice([0.0, 0.5, 1.0, 2.0], b).astype(DTYPE)


def floats(logs):
    return {k: float(v) for k, v in logs.items()}


@pytest.mark.parametrize("weighted", [False, True])
def test_evaluate_logs_match_scipy_and_the_weighted_formula(weighted):
    scores, y, w = data(0)
    model = pass_through()
    metrics = [
        RankBasedMetrics(ks=KS, confidence=0.95, dtype=DTYPE),
        HitsAtK(3, "optimistic", name="h3", confidence=0.9, dtype=DTYPE),
        InverseHarmonicMeanRank(name="mrr", confidence=0.9, dtype=DTYPE),
        GMR(name="gmr", confidence=0.9, dtype=DTYPE),
        ArithmeticMeanRank("pessimistic", name="mr", confidence=0.9, dtype=DTYPE),
    ]
    model.compile(
        loss=lambda yt, yp: keras.ops.mean(yp * 0.0),
        **({"weighted_metrics": metrics} if weighted else {"metrics": metrics}),
        jit_compile=BACKEND != "torch",
    )
    kwargs = {"sample_weight": w} if weighted else {}
    logs = floats(model.evaluate(scores, y, batch_size=16, verbose=0, return_dict=True, **kwargs))
    tasks = naive_tasks(scores, y, weights=w if weighted else None)
    assert any(o < p for o, p, _, _ in tasks)  # tied true candidates
    want = expected_statistics(tasks, "realistic", KS, 0.95)
    for key, value in want.items():
        assert logs[key] == pytest.approx(value, **TOL), key
    assert logs["count"] == sum(t[3] > 0 for t in tasks)
    for name, rank_type, key in [
        ("h3", "optimistic", "hits_at_3"),
        ("mrr", "realistic", "inverse_harmonic_mean_rank"),
        ("gmr", "realistic", "geometric_mean_rank"),
        ("mr", "pessimistic", "arithmetic_mean_rank"),
    ]:
        want = expected_statistics(tasks, rank_type, KS, 0.9)
        for q in ("stderr", "ci_low", "ci_high"):
            assert logs[f"{name}_{q}"] == pytest.approx(want[f"{key}_{q}"], **TOL), (name, q)
        assert logs[f"{name}_count"] == logs["count"]
        assert logs[f"{name}_ci_low"] <= logs[name] <= logs[f"{name}_ci_high"]


def test_one_task_gives_nan_statistics():
    scores, y, _ = data(1, b=1)
    metric = InverseHarmonicMeanRank(confidence=0.95, dtype=DTYPE)
    metric.update_state(y, scores)
    result = {k: float(v) for k, v in metric.result().items()}
    assert result["mrr"] > 0 and result["mrr_count"] == 1.0
    assert all(math.isnan(result[f"mrr_{q}"]) for q in ("stderr", "ci_low", "ci_high"))


def test_saved_state_without_statistics_loads_with_them_unavailable():
    scores, y, _ = data(2)
    old = RankBasedMetrics(ks=KS)
    old.update_state(y, scores)
    new = RankBasedMetrics(ks=KS, confidence=0.95)
    with pytest.warns(StatisticsUnavailableWarning, match=r"NaN \(unavailable, not 0\)"):
        new.load_state_dict(old.state_dict())
    got, want = floats(new.result()), floats(old.result())
    assert all(got[k] == want[k] for k in want)  # every value as saved
    stats_keys = [k for k in got if k.endswith(("_stderr", "_ci_low", "_ci_high"))]
    assert stats_keys and all(math.isnan(got[k]) for k in stats_keys)
    # with the statistics, a state round-trips
    full = RankBasedMetrics(ks=KS, confidence=0.95)
    full.update_state(y, scores)
    again = RankBasedMetrics(ks=KS, confidence=0.95)
    again.load_state_dict(full.state_dict())
    a, b = floats(again.result()), floats(full.result())
    assert a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)
    assert not math.isnan(a[stats_keys[0]])


def test_get_config_round_trip_keeps_the_level():
    for metric in (GMR(confidence=0.9), RankBasedMetrics(ks=KS, confidence=0.8), HitsAtK(3)):
        config = metric.get_config()
        clone = type(metric).from_config(config)
        assert clone.get_config() == config and clone.kernel.confidence == metric.kernel.confidence


def test_traced_critical_value_is_scipys():
    df = np.array([0.0, 1.0, 2.0, 7.0, 999.0, EXACT_DF, EXACT_DF + 1.0, 5000.0, 123456.0, 1e7])
    want = np.where(df >= 1, stats.t.ppf(0.5 + 0.95 / 2, np.maximum(df, 1)), np.nan)
    got = keras.ops.convert_to_numpy(
        t_critical(0.95, keras.ops.convert_to_tensor(df, dtype=DTYPE), keras.ops)
    )
    np.testing.assert_allclose(got, want, rtol=1e-13 if X64 else 1e-6)
    np.testing.assert_allclose(t_critical(0.95, df), want, rtol=1e-15)


def test_result_with_keras_ops_gives_the_host_numbers():
    """The report computed with ``keras.ops`` on the state variables (the path of ``result()``
    on an accelerator or under jit: the traced critical value) equals the host's float64 result
    and the reference, weighted, for two rank types; the updates without read-back."""
    scores, y, w = data(3)
    metric = RankBasedMetrics(ks=KS, rank_type=("optimistic", "realistic"), confidence=0.95, dtype=DTYPE)
    with backends.read_back(False):
        metric.update_state(y[:20], scores[:20], sample_weight=w[:20])
        metric.update_state(y[20:], scores[20:], sample_weight=w[20:])
    traced = {
        k: float(keras.ops.convert_to_numpy(v))
        for k, v in metric.kernel.compute(metric.totals(), keras.ops).items()
    }
    host = floats(metric.result())
    tasks = naive_tasks(scores, y, weights=w)
    for rt in ("optimistic", "realistic"):
        for key, value in expected_statistics(tasks, rt, KS, 0.95).items():
            assert host[f"both.{rt}.{key}"] == pytest.approx(value, **TOL), key
            assert traced[f"both.{rt}.{key}"] == pytest.approx(value, **TOL), key
