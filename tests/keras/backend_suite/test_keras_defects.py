"""User-reported defects on each backend: a gain or discount returning float32 (or float16, or
ints) where the metric computes in float64 (TensorFlow raised in Mul); a float32 state loading
sums that overflow it (result NaN); complex sums in a loaded state; a bad k in a name."""

from __future__ import annotations

import copy

import keras
import krs_reference as ref
import numpy as np
import pytest
from keras import ops

from rankstream.keras import DCG, NDCG, ListMetrics

N, F = 6, 3
JIT = {"torch": [False], "jax": [True], "tensorflow": [False, True]}[keras.backend.backend()]
MIN_GAP = 1e-5  # see test_keras_model.py: the order must not depend on the last bits

GAINS = {
    "float32": lambda label: ops.cast(label, "float32"),
    "int32": lambda label: ops.cast(label, "int32"),
    "float16": lambda label: ops.cast(label, "float16"),
}
DISCOUNTS = {
    "float32": lambda rank: ops.cast(ops.divide(1.0, rank), "float32"),
    "float16": lambda rank: ops.cast(ops.divide(1.0, rank), "float16"),
}


def linear(y):
    return y


def inverse_rank(j):
    return 1.0 / j


def naive_dcg(scores, labels, k=None):
    """keras-rs's DCG@k with a linear gain and a 1/rank discount, unweighted: the mean over
    the lists holding an item (labels < 0 are padding) of ``sum_{j <= k} y_(j) / j``."""
    num = den = 0.0
    for s, y in zip(np.asarray(scores, np.float64), np.asarray(labels, np.float64), strict=True):
        order = sorted((i for i in range(len(s)) if y[i] >= 0), key=lambda i: (-s[i], i))
        if order:
            num += sum(y[i] / j for j, i in enumerate(order[:k], start=1))
            den += 1.0
    return num / den


def reference(name, scores, labels, k=None):
    if name == "dcg":
        return naive_dcg(scores, labels, k)
    return ref.keras_rs_mean(name, scores, labels, k, gain=linear, discount=inverse_rank)


def data(seed, b):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, N, F)).astype("float32")
    y = rng.integers(-1, 4, (b, N)).astype("float32")  # -1: padding
    y[0] = np.minimum(y[0], 0)  # a list without relevant items (scored 0)
    return x, y


def tiny_model():
    inp = keras.Input((N, F))
    return keras.Model(inp, keras.layers.Reshape((N,))(keras.layers.Dense(1)(inp)))


def assert_no_near_ties(pred):
    s = np.asarray(pred, np.float64)
    gaps = np.abs(s[:, :, None] - s[:, None, :])[:, ~np.eye(N, dtype=bool)]
    assert gaps.min() > MIN_GAP, f"scores {gaps.min():.2e} apart: the order may depend on the batch size"


def test_the_reported_example_gives_keras_rs_numbers():
    """The report's call; keras-rs 0.4.0 gives 0.95192 (nDCG) and 2.45833 (DCG) with a linear
    gain and a 1/rank discount."""
    y, s = [[0, 0, 1, 0], [1, 0, 3, 2]], [[0.1, 0.2, 0.9, 0.3], [0.1, 0.8, 0.9, 0.7]]
    for cls, want in ((NDCG, 0.95192), (DCG, 2.45833)):
        metric = cls(gain_fn=GAINS["float32"], rank_discount_fn=DISCOUNTS["float32"])
        metric.update_state(y, s)
        assert float(metric.result()) == pytest.approx(want, abs=1e-5)
        assert float(metric.result()) == pytest.approx(reference(cls.__name__.lower(), s, y), rel=1e-6)


# every gain dtype once, every discount dtype at least once, and a pair of two narrow dtypes
# (each case compiles a model: the whole cross product adds minutes on a 2-core machine)
DTYPE_PAIRS = [("float32", "float16"), ("int32", "float32"), ("float16", "float16")]


@pytest.mark.parametrize("jit", JIT)
@pytest.mark.parametrize(("gain", "discount"), DTYPE_PAIRS)
def test_gain_and_discount_of_any_dtype_in_fit_and_evaluate(gain, discount, jit):
    keras.utils.set_random_seed(0)
    x, y = data(0, 24)
    xv, yv = data(1, 12)
    metrics = [
        NDCG(k=4, gain_fn=GAINS[gain], rank_discount_fn=DISCOUNTS[discount]),
        DCG(k=4, gain_fn=GAINS[gain], rank_discount_fn=DISCOUNTS[discount]),
    ]
    model = tiny_model()
    model.compile("sgd", "mse", metrics=metrics, jit_compile=jit)
    history = model.fit(x, y, batch_size=8, epochs=1, validation_data=(xv, yv), verbose=0)
    pred = model.predict(xv, batch_size=12, verbose=0)
    assert_no_near_ties(pred)
    # float16 holds 1/3, 1/5 and 1/6 to ~5e-4 relative (the labels 0..3 exactly)
    tol = 2e-3 if "float16" in (gain, discount) else 1e-5
    want = {name: reference(name, pred, yv, 4) for name in ("ndcg", "dcg")}
    assert history.history["val_ndcg@4"][-1] == pytest.approx(want["ndcg"], rel=tol)
    assert history.history["val_dcg@4"][-1] == pytest.approx(want["dcg"], rel=tol)
    logs = model.evaluate(xv, yv, batch_size=5, verbose=0, return_dict=True)
    assert logs["ndcg@4"] == pytest.approx(want["ndcg"], rel=tol)
    assert logs["dcg@4"] == pytest.approx(want["dcg"], rel=tol)


def evaluated_metric(state_dtype):
    """An NDCG metric after ``model.evaluate``, its logged value and the reference."""
    keras.utils.set_random_seed(0)
    x, y = data(2, 16)
    metric = NDCG(k=4, state_dtype=state_dtype)
    model = tiny_model()
    model.compile("sgd", "mse", metrics=[metric])
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    pred = model.predict(x, batch_size=16, verbose=0)
    assert_no_near_ties(pred)
    return metric, logs["ndcg@4"], ref.keras_rs_mean("ndcg", pred, y, 4)


@pytest.mark.parametrize("field", ["value_sum", "weight_sum"])
def test_a_float32_state_refuses_sums_that_overflow_it(field):
    metric, logged, want = evaluated_metric("float32")
    assert logged == pytest.approx(want, rel=1e-5)
    bad = copy.deepcopy(metric.state_dict())
    bad["sums"][field] = bad["sums"][field] * 0 + 1e300  # finite in float64, inf in float32
    with pytest.raises(
        ValueError, match=rf"state: field '{field}' holds .*1e\+300.*overflows the float32 state"
    ):
        metric.load_state_dict(bad)
    assert float(metric.result()) == pytest.approx(want, rel=1e-5)  # not NaN: the state is kept


def test_a_float32_state_loads_sums_that_fit_it():
    metric, _, want = evaluated_metric("float32")
    sd = metric.state_dict()
    scaled = copy.deepcopy(sd)
    scaled["sums"] = {k: v * 1e30 for k, v in sd["sums"].items()}  # below float32's 3.4e38
    metric.load_state_dict(scaled)
    assert float(metric.result()) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("imag", [1.0, 0.0])
def test_complex_sums_are_refused_at_load(imag):
    metric, _, want = evaluated_metric(None)
    bad = copy.deepcopy(metric.state_dict())
    bad["sums"]["value_sum"] = bad["sums"]["value_sum"] + 1j * imag
    with pytest.raises(TypeError, match=r"state: field 'value_sum' must hold real sums, got complex"):
        metric.load_state_dict(bad)
    assert float(metric.result()) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("name", ["ndcg@0", "map@-1", "mrr@"])
def test_list_metric_names_with_a_bad_k_say_k(name):
    with pytest.raises(ValueError, match=r"k must be a positive integer") as info:
        ListMetrics(["ndcg@3", name])
    assert repr(name) in str(info.value)
