"""In a model: compile(metrics=[...]) with fit and evaluate (jit where the backend has it),
and inside a saved .keras model."""

from __future__ import annotations

import os

import keras
import krs_reference as ref
import numpy as np
import pytest

from rankstream.keras import MAP, NDCG

N, F = 8, 3
# jit_compile=True on torch means torch.compile (inductor), which takes minutes to build on a
# small CPU box; it is exercised on JAX (jax.jit) and TensorFlow (XLA).
JIT = {"torch": [False], "jax": [True], "tensorflow": [False, True]}[keras.backend.backend()]


def data(seed, b):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, N, F)).astype("float32")
    y = rng.integers(-1, 4, (b, N)).astype("float32")  # -1: padding
    y[0] = -1  # a list that is all padding (weight 0)
    y[1] = np.minimum(y[1], 0)  # a list without relevant items (scored 0)
    return x, y


def tiny_model():
    inp = keras.Input((N, F))
    out = keras.layers.Reshape((N,))(keras.layers.Dense(1)(inp))
    return keras.Model(inp, out)


# A row's Dense outputs may differ in the last bits (a few 1e-7 here) between batch sizes,
# thread counts and BLAS paths, so evaluate's metrics and predict may see slightly different
# floats. NDCG and MAP depend on each list's order only: they agree when no two scores of a
# list are closer than that, which the tests check on predict's scores (these lists' closest
# pair is about 5e-4 apart) rather than assume.
MIN_GAP = 1e-5


def assert_no_near_ties(pred):
    s = np.asarray(pred, np.float64)
    gaps = np.abs(s[:, :, None] - s[:, None, :])[:, ~np.eye(N, dtype=bool)]
    assert gaps.min() > MIN_GAP, f"scores {gaps.min():.2e} apart: the order may depend on the batch size"


def reference(metric, scores, labels, k, sample_weight=None):
    return ref.keras_rs_mean(metric, np.asarray(scores, np.float64), labels, k, sample_weight=sample_weight)


@pytest.mark.parametrize("jit", JIT)
def test_fit_two_epochs_reports_the_metric_of_predict(jit):
    keras.utils.set_random_seed(0)
    x, y = data(0, 40)
    xv, yv = data(1, 20)
    model = tiny_model()
    model.compile("sgd", "mse", metrics=[NDCG(k=5), MAP()], jit_compile=jit)
    history = model.fit(x, y, batch_size=10, epochs=2, validation_data=(xv, yv), verbose=0)
    assert len(history.history["ndcg@5"]) == 2
    pred = model.predict(xv, batch_size=10, verbose=0)
    assert_no_near_ties(pred)
    ndcg = NDCG(k=5)
    ndcg.update_state(yv, pred)
    map_ = MAP()
    map_.update_state(yv, pred)
    expected_ndcg = reference("ndcg", pred, yv, 5)
    expected_map = reference("map", pred, yv, None)
    assert history.history["val_ndcg@5"][-1] == pytest.approx(expected_ndcg, rel=1e-5, abs=1e-6)
    assert history.history["val_map"][-1] == pytest.approx(expected_map, rel=1e-5, abs=1e-6)
    assert float(ndcg.result()) == pytest.approx(expected_ndcg, rel=1e-5, abs=1e-6)
    assert float(map_.result()) == pytest.approx(expected_map, rel=1e-5, abs=1e-6)
    # evaluate in other batch sizes (the last one partial): the same numbers
    logs = model.evaluate(xv, yv, batch_size=6, verbose=0, return_dict=True)
    assert logs["ndcg@5"] == pytest.approx(expected_ndcg, rel=1e-5, abs=1e-6)
    assert logs["map"] == pytest.approx(expected_map, rel=1e-5, abs=1e-6)


def test_evaluate_with_list_weights():
    """Keras hands sample_weight to ``weighted_metrics`` (``metrics`` get none)."""
    keras.utils.set_random_seed(1)
    x, y = data(2, 20)
    w = np.random.default_rng(3).uniform(0.1, 2.0, 20).astype("float32")
    model = tiny_model()
    model.compile(
        "sgd", "mse", metrics=[NDCG(k=3, name="plain")], weighted_metrics=[NDCG(k=3, name="weighted")]
    )
    logs = model.evaluate(x, y, sample_weight=w, batch_size=20, verbose=0, return_dict=True)
    pred = model.predict(x, batch_size=20, verbose=0)
    assert_no_near_ties(pred)
    assert logs["weighted"] == pytest.approx(
        reference("ndcg", pred, y, 3, sample_weight=w), rel=1e-5, abs=1e-6
    )
    assert logs["plain"] == pytest.approx(reference("ndcg", pred, y, 3), rel=1e-5, abs=1e-6)


def test_saved_model_keeps_the_metrics(tmp_path):
    keras.utils.set_random_seed(2)
    x, y = data(4, 30)
    model = tiny_model()
    metrics = [
        NDCG(k=4, gain_fn="linear_rank", shuffle_ties=False, name="ndcg_lin"),
        MAP(k=3, seed=5, denominator="min"),
    ]
    configs = [m.get_config() for m in metrics]
    model.compile("sgd", "mse", metrics=metrics)
    model.fit(x, y, batch_size=10, epochs=1, verbose=0)
    before = model.evaluate(x, y, batch_size=10, verbose=0, return_dict=True)
    path = os.path.join(tmp_path, "ranker.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    after = loaded.evaluate(x, y, batch_size=10, verbose=0, return_dict=True)
    assert after == pytest.approx(before, rel=1e-6)
    found = [m for m in _flat_metrics(loaded) if isinstance(m, (NDCG, MAP))]
    assert sorted((type(m).__name__, str(m.get_config())) for m in found) == sorted(
        (type(m).__name__, str(c)) for m, c in zip(metrics, configs, strict=True)
    )


def _flat_metrics(model):
    out, todo = [], list(model.metrics)
    while todo:
        m = todo.pop()
        out.append(m)
        todo.extend(getattr(m, "metrics", []) or [])
    return out
