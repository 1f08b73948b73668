"""An empty batch is a no-op for every public Keras metric class (the Keras half of
``tests/test_empty_batches.py``): every input form with zero rows (labels or index targets,
with and without a mask, with a per-row, per-item or no weight, lists of 0, 1 and several
items) leaves every variable bitwise as it was, the tie generator's too, and a metric fed empty
batches between real ones reports what it reports from the real batches alone. Eagerly, and on
torch on the accelerator path (nothing read back) as well."""

from __future__ import annotations

import contextvars
import itertools

import keras
import numpy as np
import pytest

import rankstream.keras as rk
from rankstream import ItemData
from rankstream.core import backends

BACKEND = keras.backend.backend()
K = keras.ops
RANK_NAMES = ("HitsAtK", "InverseHarmonicMeanRank", "GeometricMeanRank", "GMR", "ArithmeticMeanRank")
LIST_NAMES = [
    name
    for name in rk.__all__
    if isinstance(getattr(rk, name), type)
    and issubclass(getattr(rk, name), rk.KernelMetric)
    and name
    not in (
        *RANK_NAMES,
        "KernelMetric",
        "ListMetrics",
        "RankBasedMetrics",
        "PairedComparison",
        "BeyondMetrics",
        "CatalogMetrics",  # queries' embeddings and relevant ids: test_keras_catalog_metrics.py
    )
]
MAKE = {
    **{name: (lambda name=name: getattr(rk, name)(seed=1)) for name in LIST_NAMES},  # shuffled ties
    **{name: getattr(rk, name) for name in RANK_NAMES},
    "ListMetrics": lambda: rk.ListMetrics(["map@3", "ndcg@2", "auc"], seed=1),
    "RankBasedMetrics": lambda: rk.RankBasedMetrics(ks=[1]),
    # the metrics of the recommended items, and nDCG beside them (the top 2 of lists of N = 5)
    "BeyondMetrics": lambda: rk.BeyondMetrics(
        ["ndcg@2", "coverage@2", "novelty@2", "personalization@2"],
        items=ItemData(popularity=[5, 3, 2, 1, 0], num_users=6),
        seed=1,
    ),
}
SIZES = (0, 1, 4)
B, N = 4, 5


@pytest.fixture(params=["eager", "no-read"] if BACKEND == "torch" else ["eager"])
def mode(request, monkeypatch):
    if request.param == "no-read":
        monkeypatch.setattr(backends, "_READ_BACK", contextvars.ContextVar("read_back", default=False))
    return request.param


def snapshot(metric):
    return [np.array(K.convert_to_numpy(v), copy=True) for v in metric.variables]


def assert_same(after, before, where):
    assert len(after) == len(before), where
    for a, b in zip(after, before, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), where


def empty_inputs(rank: bool, n: int, item_weights: bool = True):
    """``(y_true, y_pred, sample_weight)`` of every form of an empty batch of ``n`` items (per-item
    weights where the metric takes them: not the rank-based metrics, not ``BeyondMetrics``)."""
    labels = [np.zeros((0, n), "float32")] + ([] if rank else [np.zeros((0, n), "int32")])
    targets = ([np.zeros(0, "int32"), np.zeros((0, 1), "int32")] if rank else []) + labels
    masked = [{"labels": y, "mask": np.zeros((0, n), bool)} for y in labels]
    weights = [None, np.zeros(0, "float32")] + (
        [] if rank or not item_weights else [np.zeros((0, n), "float32")]
    )
    for y_true, w in itertools.product(targets + masked, weights):
        yield y_true, np.zeros((0, n), "float32"), w


def real_batch(rank: bool, seed: int):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, (B, N)).astype("float32")  # ties: shuffled ones draw
    y = rng.integers(0, N, B).astype("int32") if rank else rng.integers(0, 3, (B, N)).astype("float32")
    return y, scores, rng.uniform(0.5, 2.0, B).astype("float32")


def result(metric):
    out = metric.result()
    if isinstance(out, dict):
        return {k: np.asarray(K.convert_to_numpy(v)) for k, v in out.items()}
    return np.asarray(K.convert_to_numpy(out))


@pytest.mark.parametrize("name", sorted(MAKE))
def test_every_empty_batch_is_a_no_op(name, mode):
    rank = name in (*RANK_NAMES, "RankBasedMetrics")
    metric, alone = MAKE[name](), MAKE[name]()
    first, second = real_batch(rank, 0), real_batch(rank, 1)
    metric.update_state(*first)
    alone.update_state(*first)
    before = snapshot(metric)
    for n in SIZES:
        for y_true, y_pred, w in empty_inputs(rank, n, item_weights=name != "BeyondMetrics"):
            metric.update_state(y_true, y_pred, sample_weight=w)
            assert_same(snapshot(metric), before, f"{name}: empty batch of {n} items, weight {w}")
    metric.update_state(*second)
    alone.update_state(*second)
    assert_same(snapshot(metric), snapshot(alone), name)
    got, want = result(metric), result(alone)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    else:
        np.testing.assert_array_equal(got, want)
