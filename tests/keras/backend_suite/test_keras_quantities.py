"""A kernel that reports more than its value (``kernel.quantities``): ``KernelMetric`` needs no
change, and ``fit`` / ``evaluate`` log ``<name>`` and ``<name>_<quantity>``."""

from __future__ import annotations

import keras
import keras_rs
import numpy as np
import pytest
from toy_kernels import MAPWithStderr

from rankstream.core.lists.map import MAPKernel
from rankstream.keras import KernelMetric

import reference as R

#: keras-rs's conventions, as rankstream.keras.MAP sets them (no tie in a model's float scores)
KERAS_RS = {
    "denominator": "all",
    "empty": "zero",
    "relevance_threshold": 1.0,
    "ties": "first",
    "weighting": "keras_rs",
    "negative_labels": "mask",
}


class TwiceMAP(MAPKernel):
    """MAP@k reporting a second quantity, twice the value."""

    quantities = ("twice",)

    def compute(self, sums, xp=np):
        values = super().compute(sums, xp)
        return {**values, "twice": 2 * values["value"]}


def data(seed, rows=40, items=6, features=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype("float32")
    y = rng.integers(0, 3, size=(rows, items)).astype("float32")
    return x, y


def tiny_model(items=6, features=5):
    inputs = keras.Input((features,))
    return keras.Model(inputs, keras.layers.Dense(items)(inputs))


@pytest.mark.parametrize("run", ["evaluate", "fit"])
def test_logs_hold_the_value_and_each_quantity(run):
    keras.utils.set_random_seed(3)
    x, y = data(0)
    model = tiny_model()
    ours = KernelMetric(TwiceMAP(3, **KERAS_RS), name="toy")
    peer = keras_rs.metrics.MeanAveragePrecision(k=3, name="peer")
    model.compile("sgd", "mse", metrics=[ours, peer])
    if run == "evaluate":
        logs = model.evaluate(x, y, batch_size=10, verbose=0, return_dict=True)
    else:  # the logs of the last epoch, over the batches of that epoch
        logs = {k: v[-1] for k, v in model.fit(x, y, batch_size=10, epochs=1, verbose=0).history.items()}
    assert {"toy", "toy_twice", "peer"} <= set(logs)
    assert logs["toy"] == pytest.approx(logs["peer"], rel=1e-5, abs=1e-6)
    assert logs["toy_twice"] == pytest.approx(2 * logs["peer"], rel=1e-5, abs=1e-6)


def test_result_is_keyed_by_the_name_with_the_prefix():
    x, y = data(1, rows=8)
    scores = np.asarray(x[:, :1] + np.arange(6, dtype="float32"), dtype="float32")  # no ties
    ours = KernelMetric(TwiceMAP([2, 4], **KERAS_RS), name="map", prefix="val_")
    peer = {k: keras_rs.metrics.MeanAveragePrecision(k=k) for k in (2, 4)}
    ours.update_state(y, scores)
    for metric in peer.values():
        metric.update_state(y, scores)
    result = ours.result()
    assert sorted(result) == ["val_map", "val_map_twice"]
    expected = np.array([float(peer[k].result()) for k in (2, 4)])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(result["val_map"]), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(result["val_map_twice"]), 2 * expected, rtol=1e-5, atol=1e-6
    )


def test_a_kernel_with_its_own_state_field_and_stderr_in_evaluate():
    """The toy kernel adds ``value_sq_sum`` and reports ``stderr``: in ``compile`` + ``evaluate``
    with no change to the adapter, the logs hold both; the stderr is numpy's
    ``std(ddof=1) / sqrt(n)`` of the naive reference's per-list values. The model passes its
    input through, so the scores the metric ranks are the (tie-free) inputs themselves."""
    rng = np.random.default_rng(5)
    x = np.stack([rng.permutation(8) for _ in range(30)]).astype("float32")  # no ties in a row
    y = rng.integers(0, 3, size=(30, 8)).astype("float32")
    y[:, 0] = 1.0  # every list holds a relevant item: every list is counted
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    model.compile("sgd", "mse", metrics=[KernelMetric(MAPWithStderr(3), name="toy")])
    logs = model.evaluate(x, y, batch_size=7, verbose=0, return_dict=True)
    per_list = np.array([R.average_precision(s, t, 3) for s, t in zip(x.tolist(), y.tolist(), strict=True)])
    assert logs["toy"] == pytest.approx(per_list.mean(), rel=1e-5)
    assert logs["toy_stderr"] == pytest.approx(per_list.std(ddof=1) / np.sqrt(per_list.size), rel=1e-4)
