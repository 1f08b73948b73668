"""Standard errors and confidence intervals of the Keras list metrics (``confidence=``) through
``model.compile`` + ``evaluate``: a model that passes its input through, so every metric sees
exactly the (tie-free) scores the naive reference ranks; equal to ``scipy.stats.sem`` /
``scipy.stats.t.interval`` on the reference's per-list values (unweighted) and to the reference's
ratio-estimator formula (weighted). The traced path (``keras.ops``, the count a traced value)
against the host's scipy."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops as K
from scipy import stats

from rankstream.core.lists.map import MAPKernel
from rankstream.core.state import StatisticsUnavailableWarning
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
#: float64 end to end where the backend has it; else float32 inputs and state (JAX without x64)
RTOL, ATOL = (1e-12, 1e-14) if X64 else (2e-5, 1e-6)
QUANTITIES = ("stderr", "ci_low", "ci_high", "count")
#: class, the reference's per-list function and options (keras-rs's conventions: empty lists 0)
CLASSES = {
    "map": (MAP, ref.average_precision, {"denominator": "all", "threshold": 1.0}),
    "ndcg": (NDCG, ref.ndcg, {"threshold": None}),
    "dcg": (DCG, ref.dcg, {"threshold": None}),
    "precision": (PrecisionAtK, ref.precision, {"denominator": "valid", "threshold": 1.0}),
    "recall": (RecallAtK, ref.recall, {"threshold": 1.0}),
    "hit_rate": (HitRateAtK, ref.hit_rate, {"threshold": 1.0}),
    "mrr": (MeanReciprocalRank, ref.reciprocal_rank, {"threshold": 1.0}),
    "r_precision": (RPrecision, ref.r_precision, {"threshold": 1.0}),
}
ROWS, ITEMS, BATCH = 60, 8, 16


def data(seed: int, every_list_relevant: bool = False):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(ROWS, ITEMS))  # tie-free
    labels = rng.integers(1, 4, size=(ROWS, ITEMS)).astype(float) * (rng.random((ROWS, ITEMS)) < 0.35)
    if every_list_relevant:  # the list weight keras-rs collapses is then the given one
        labels[np.arange(ROWS), rng.integers(0, ITEMS, size=ROWS)] = 2.0
    # exact in float32 (Keras' data adapter casts sample_weight to floatx)
    weights = np.round(rng.uniform(0.2, 3.0, size=ROWS) * 64) / 64
    return scores, labels, weights


def expected(per_list, kw, scores, labels, k, weights=None, level=0.95):
    values, ws = ref.counted_values(
        per_list, list(scores), list(labels), k, weights=weights, empty="zero", **kw
    )
    n = len(values)
    if weights is None:
        m, se = float(np.mean(values)), float(stats.sem(values))
        low, high = stats.t.interval(level, n - 1, loc=m, scale=se)
    else:
        m, se = ref.weighted_mean_stderr(values, ws)
        half = stats.t.ppf(0.5 + level / 2, n - 1) * se
        low, high = m - half, m + half
    return {"": m, "_stderr": se, "_ci_low": low, "_ci_high": high, "_count": float(n)}


def evaluate(metrics, scores, labels, weights=None):
    inputs = keras.Input((ITEMS,), dtype="float64")
    model = keras.Model(inputs, inputs)  # the scores as given: the reference ranks the same
    # Keras hands sample_weight to weighted_metrics only
    model.compile(loss="mse", **{"weighted_metrics" if weights is not None else "metrics": metrics})
    return model.evaluate(
        scores, labels, sample_weight=weights, batch_size=BATCH, verbose=0, return_dict=True
    )


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_evaluate_logs_equal_scipy_on_the_reference(weighted):
    scores, labels, weights = data(seed=11 + weighted, every_list_relevant=weighted)
    w = weights if weighted else None
    metrics, want = [], {}
    for short, (cls, per_list, kw) in CLASSES.items():
        for k in (1, 3, 5) if short != "r_precision" else (None,):
            name = short if k is None else f"{short}@{k}"
            args = (k,) if k is not None else ()
            metrics.append(cls(*args, shuffle_ties=False, name=name, dtype="float64", confidence=0.95))
            want[name] = expected(per_list, kw, scores, labels, k, w)
    logs = evaluate(metrics, scores, labels, w)
    for name, quantities in want.items():
        for suffix, value in quantities.items():
            assert logs[name + suffix] == pytest.approx(value, rel=RTOL, abs=ATOL), name + suffix


def test_evaluate_list_metrics_report_every_name_with_its_interval():
    scores, labels, _ = data(seed=5)
    names = {"ndcg@5": (ref.ndcg, {"threshold": None}, 5), "map@3": (*CLASSES["map"][1:], 3),
             "rprec": (ref.r_precision, {"threshold": 1.0}, None)}  # fmt: skip
    metric = ListMetrics(list(names), shuffle_ties=False, dtype="float64", confidence=0.9)
    logs = evaluate([metric], scores, labels)
    for name, (per_list, kw, k) in names.items():
        for suffix, value in expected(per_list, kw, scores, labels, k, level=0.9).items():
            assert logs[name + suffix] == pytest.approx(value, rel=RTOL, abs=ATOL), name + suffix


def test_config_round_trips_and_is_unchanged_without_the_option():
    with_level = NDCG(5, confidence=0.9)
    assert with_level.get_config()["confidence"] == 0.9
    assert NDCG.from_config(with_level.get_config()).kernel.confidence == 0.9
    assert "confidence" not in NDCG(5).get_config()
    assert "confidence" not in ListMetrics(["map@3"]).get_config()
    assert ListMetrics.from_config(ListMetrics(["map@3"], confidence=0.8).get_config()).confidence == 0.8


def test_a_state_saved_without_the_statistics_loads_with_them_unavailable():
    """A state saved by a metric without a level (or an older version) loads into one with a
    level: the value is the saved one, the statistics NaN (unavailable, never 0) with a
    warning, and they stay unavailable after more batches and a save and load, until reset."""
    scores, labels, _ = data(seed=2)
    old = MAP(3, dtype="float64")
    old.update_state(labels, scores)
    new = MAP(3, confidence=0.95, dtype="float64")
    with pytest.warns(StatisticsUnavailableWarning, match=r"saved without the sums of its standard error"):
        new.load_state_dict(old.state_dict())
    want = float(K.convert_to_numpy(old.result()))
    got = {k: float(K.convert_to_numpy(v)) for k, v in new.result().items()}
    assert got["map@3"] == pytest.approx(want, rel=1e-12)
    assert all(np.isnan(got[f"map@3_{q}"]) for q in ("stderr", "ci_low", "ci_high"))
    new.update_state(labels, scores)
    again = MAP(3, confidence=0.95, dtype="float64")
    again.load_state_dict(new.state_dict())
    assert np.isnan(float(K.convert_to_numpy(again.result()["map@3_stderr"])))
    again.reset_state()
    again.update_state(labels, scores)
    assert float(K.convert_to_numpy(again.result()["map@3_stderr"])) > 0


def _traced(fn):
    """``fn`` compiled by the backend (jit / tf.function); torch runs keras.ops eagerly."""
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    return fn


@pytest.mark.parametrize("lists", [7, 300, 5000])  # t from the table, and from the expansion
def test_compute_on_keras_ops_equals_the_host(lists):
    rng = np.random.default_rng(lists)
    scores, labels = rng.normal(size=(lists, 6)), (rng.random((lists, 6)) < 0.4).astype(float)
    weights = rng.uniform(0.5, 2.0, size=lists)
    kernel = MAPKernel([1, 3], confidence=0.95)
    sums = kernel.batch_sums(None, scores, labels, sample_weight=weights)
    host = kernel.compute({f: np.asarray(v, dtype=np.float64) for f, v in sums.items()}, np)
    dtype = "float64" if X64 else "float32"
    tensors = {f: K.convert_to_tensor(np.asarray(v), dtype=dtype) for f, v in sums.items()}
    traced = _traced(lambda t: kernel.compute(t, K))(tensors)
    for q in ("value", *QUANTITIES):
        got = K.convert_to_numpy(traced[q])
        np.testing.assert_allclose(got, host[q], rtol=1e-12 if X64 else 2e-6, atol=0, err_msg=q)
