"""Keras, on each backend: the three silent surprises, through ``model.compile`` + ``fit`` /
``evaluate`` (compiled and eager) and ``update_state``. Values from the naive references
(``krs_reference.py``, ``tests/reference.py``), never from the metric under test.

1. Two metrics logging one name (``MAP(k=5)`` and ``ListMetrics(["map@5"])``, in either order)
   keep both values, the later one as ``map@5_1``, as Keras names two plain metrics.
2. Swapped ``update_state(y_pred, y_true)`` warns once per instance
   (``rankstream.SwappedInputsWarning``) where values are on the host; compiled steps
   (``jit``) neither warn nor break.
3. A list whose items are all padding or masked is not a list, under every empty policy."""

from __future__ import annotations

import os
import sys
import warnings

import keras
import numpy as np
import pytest
from krs_reference import keras_rs_mean, tie_free_scores

import rankstream
from rankstream.keras import MAP, NDCG, ListMetrics, RecallAtK

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import reference as R

BACKEND = keras.backend.backend()
N = 10


def _data(seed: int, b: int = 24):
    rng = np.random.default_rng(seed)
    s = tie_free_scores(rng, b, N)
    y = (rng.random((b, N)) < 0.6).astype("float32")  # many relevant items: AP@5 over R or min(R, 5) differ
    y[:, 0] = 1.0
    return s, y


def _model():
    # the scores are the inputs (a Dense of weight 1, trainable for fit)
    return keras.Sequential(
        [
            keras.Input((N, 1)),
            keras.layers.Dense(1, use_bias=False, kernel_initializer="ones"),
            keras.layers.Flatten(),
        ]
    )


@pytest.mark.parametrize("order", ["map_first", "lists_first"])
@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_a_metric_and_a_list_metrics_key_of_one_name_keep_both(order, mode):
    s, y = _data(0)
    mine = MAP(k=5, denominator="min", shuffle_ties=False)
    lists = ListMetrics(["map@5", "ndcg@3"], shuffle_ties=False)
    metrics = [mine, lists] if order == "map_first" else [lists, mine]
    model = _model()
    model.compile(optimizer="sgd", loss="mse", metrics=metrics, run_eagerly=mode == "eager")
    logs = model.evaluate(s[..., None], y, batch_size=8, verbose=0, return_dict=True)
    rows = (s.tolist(), y.tolist())
    want_min = R.mean_over_lists(R.average_precision, *rows, 5, empty="zero", threshold=1.0)
    want_all = keras_rs_mean("map", s, y, 5)
    assert want_min != pytest.approx(want_all, abs=1e-3)  # the two values differ
    first, second = (want_min, want_all) if order == "map_first" else (want_all, want_min)
    assert logs["map@5"] == pytest.approx(first, rel=1e-5)
    assert logs["map@5_1"] == pytest.approx(second, rel=1e-5)
    assert logs["ndcg@3"] == pytest.approx(keras_rs_mean("ndcg", s, y, 3), rel=1e-5)
    history = model.fit(s[..., None], y, batch_size=8, epochs=1, verbose=0).history
    assert {"map@5", "map@5_1", "ndcg@3", "loss"} <= set(history)


def test_two_collections_and_plain_metrics_of_one_name():
    s, y = _data(1)
    model = _model()
    model.compile(
        loss="mse",
        metrics=[
            ListMetrics(["map@5"], shuffle_ties=False),
            ListMetrics(["map@5", "recall@3"], shuffle_ties=False, empty="skip"),
            RecallAtK(k=3, shuffle_ties=False),
        ],
    )
    logs = model.evaluate(s[..., None], y, batch_size=12, verbose=0, return_dict=True)
    assert set(logs) == {"loss", "map@5", "map@5_1", "recall@3", "recall@3_1"}
    assert logs["map@5"] == pytest.approx(keras_rs_mean("map", s, y, 5), rel=1e-5)
    assert logs["map@5_1"] == pytest.approx(keras_rs_mean("map", s, y, 5), rel=1e-5)
    recall = R.mean_over_lists(R.recall, s.tolist(), y.tolist(), 3, threshold=1.0)  # every list has a hit
    assert logs["recall@3"] == pytest.approx(recall, rel=1e-5)
    assert logs["recall@3_1"] == pytest.approx(recall, rel=1e-5)


# -- swapped arguments -------------------------------------------------------------------------


def _graded(seed: int, b: int = 16):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(b, N)).astype("float32")
    y = rng.integers(0, 4, size=(b, N)).astype("float32")
    y[:, 0] = 3.0
    return s, y


def _swapped_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, rankstream.SwappedInputsWarning)]


def test_swapped_update_state_warns_once_per_instance():
    s, y = _graded(2)
    metric = NDCG(k=5, shuffle_ties=False)

    def swapped():
        for part in (slice(0, 8), slice(8, 16)):
            metric.update_state(s[part], y[part])  # (y_pred, y_true): swapped

    caught = _swapped_warnings(swapped)
    assert len(caught) == 1 and "swapped" in str(caught[0].message)
    # the number is the swapped arguments' (keras-rs: negative "labels" are padding)
    assert float(metric.result()) == pytest.approx(keras_rs_mean("ndcg", y, s, 5), rel=1e-4)
    right = NDCG(k=5, shuffle_ties=False)
    assert _swapped_warnings(lambda: right.update_state(y, s)) == []
    assert float(right.result()) == pytest.approx(keras_rs_mean("ndcg", s, y, 5), rel=1e-5)


class SwappingModel(keras.Model):
    """A custom step that passes the metric its arguments swapped (the user's bug)."""

    def __init__(self):
        inputs = keras.Input((N,))
        super().__init__(inputs, keras.layers.Identity()(inputs))
        self.swapped_metric = MAP(k=5, relevance_threshold=None, shuffle_ties=False)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.swapped_metric.update_state(y_pred, y)
        return self.get_metrics_result()


@pytest.mark.parametrize("mode", ["compiled", "eager"])
def test_swapped_in_a_custom_step(mode):
    s, y = _graded(3)
    model = SwappingModel()
    model.compile(loss="mse", run_eagerly=mode == "eager")
    caught = _swapped_warnings(lambda: model.evaluate(s, y, batch_size=8, verbose=0))
    value = float(model.swapped_metric.result())
    want = keras_rs_mean("map", y, s, 5, rel_threshold=1e-9)  # relevant: "label" > 0
    reads = mode == "eager" or BACKEND == "torch"  # the torch trainer runs eagerly
    assert len(caught) == (1 if reads else 0)
    assert value == pytest.approx(want, rel=1e-4)


def test_real_data_compiled_and_eager_never_warns():
    s, y = _graded(4)
    for eager in (False, True):
        model = _model()
        model.compile(loss="mse", metrics=[NDCG(k=5), ListMetrics(["map@3"])], run_eagerly=eager)
        caught = _swapped_warnings(lambda m=model: m.evaluate(s[..., None], y, batch_size=8, verbose=0))
        assert caught == []


# -- lists with no item ------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["zero", "skip"])
def test_lists_with_every_item_padding_are_not_lists(empty):
    rng = np.random.default_rng(5)
    s = tie_free_scores(rng, 16, N)
    y = (rng.random((16, N)) < 0.4).astype("float32")
    y[:, 0] = 1.0
    y[3] = -1.0  # all padding
    y[9] = -1.0
    y[12, :] = 0.0  # a list without a relevant item (kept under "zero")
    kept = [i for i in range(16) if (y[i] >= 0).any()]
    model = _model()
    model.compile(
        loss="mse",
        metrics=[
            RecallAtK(k=2, shuffle_ties=False, empty=empty),
            ListMetrics(["ndcg@3", "map@4"], shuffle_ties=False, empty=empty, prefix="c/"),
        ],
    )
    logs = model.evaluate(s[..., None], y, batch_size=16, verbose=0, return_dict=True)
    rows = ([s[i].tolist() for i in kept], [y[i].tolist() for i in kept])
    assert logs["recall@2"] == pytest.approx(
        R.mean_over_lists(R.recall, *rows, 2, empty=empty, threshold=1.0), rel=1e-5
    )
    assert logs["c/map@4"] == pytest.approx(
        R.mean_over_lists(R.average_precision, *rows, 4, empty=empty, denominator="all", threshold=1.0),
        rel=1e-5,
    )
    ndcg = R.mean_over_lists(R.ndcg, *rows, 3, empty=empty, threshold=None)
    assert logs["c/ndcg@3"] == pytest.approx(ndcg, rel=1e-5)
