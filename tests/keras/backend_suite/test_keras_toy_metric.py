"""The Keras form of a list metric added outside the package (tests/toy_list_metric.py: one
kernel class, one table row): ``adapters.keras_metrics.register`` makes its class from the row,
and ``compile`` + ``evaluate`` log its value, and with ``chance=True`` its expectation under a
random ranking, each against a naive one-list reference (tests/test_toy_metric.py checks the
other forms)."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
from toy_list_metric import registered

from rankstream.adapters import keras_metrics


@pytest.fixture(scope="module")
def toy():
    """The toy's Keras class, made from its row; every registry as it was afterwards."""
    more = (keras_metrics.LIST_CLASSES, keras_metrics.COLLECTION_DEFAULTS, vars(keras_metrics))
    with registered(*more) as row:
        yield keras_metrics.register(row)


def hits(scores, labels, k):
    """The relevant items (label >= 1) among the top ``k`` of one list (no ties in the scores)."""
    order = np.argsort(-np.asarray(scores), kind="stable")
    return float(sum(labels[i] >= 1 for i in order[:k]))


def chance_mean(labels, k):
    """The mean of ``hits`` over every order of one list's items (a random ranking)."""
    n = len(labels)
    return float(
        np.mean([sum(labels[i] >= 1 for i in perm[:k]) for perm in itertools.permutations(range(n))])
    )


def test_evaluate_logs_the_value_and_its_expectation_under_chance(toy):
    rng = np.random.default_rng(11)
    x = np.stack([rng.permutation(6) for _ in range(20)]).astype("float32")  # no ties in a row
    y = rng.integers(0, 3, size=(20, 6)).astype("float32")
    y[:, 0] = np.maximum(y[:, 0], 1.0)  # every list holds a relevant item
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    model.compile("sgd", "mse", metrics=[toy(k=3, name="toy"), toy(k=2, chance=True, name="toy_chance")])
    logs = model.evaluate(x, y, batch_size=7, verbose=0, return_dict=True)
    pairs = list(zip(x.tolist(), y.tolist(), strict=True))
    assert logs["toy"] == pytest.approx(np.mean([hits(s, t, 3) for s, t in pairs]), rel=1e-5)
    assert logs["toy_chance"] == pytest.approx(np.mean([hits(s, t, 2) for s, t in pairs]), rel=1e-5)
    expected = np.mean([chance_mean(t, 2) for _, t in pairs])
    assert logs["toy_chance_expected"] == pytest.approx(expected, rel=1e-5)
    assert type(keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(toy(k=3)))) is toy
