"""Updates under tracing (JAX ``jit``, ``tf.function``), where nothing can be read back: the
same numbers as keras-rs, NaN scores reported as a NaN result instead of raising, and the
tie-shuffling seed state carried through. On torch (whose ``jit_compile`` is
``torch.compile``, minutes to build on a small CPU box) the accelerator path, which reads
nothing back either, is forced instead."""

from __future__ import annotations

import contextvars

import keras
import keras_rs
import krs_reference as ref
import numpy as np
import pytest

from rankstream.core import backends
from rankstream.keras import MAP, NDCG

BACKEND = keras.backend.backend()


@pytest.fixture
def traced(monkeypatch):
    """``traced(metric)`` -> an update function that runs without reading values back."""

    def make(metric):
        if BACKEND == "jax":
            import jax

            step = jax.jit(metric.stateless_update_state)

            def update(y_true, y_pred, sample_weight=None):
                new = step([v.value for v in metric.variables], y_true, y_pred, sample_weight)
                for var, value in zip(metric.variables, new, strict=True):
                    var.assign(value)

            return update
        if BACKEND == "tensorflow":
            import tensorflow as tf

            return tf.function(metric.update_state)
        monkeypatch.setattr(backends, "_READ_BACK", contextvars.ContextVar("read_back", default=False))
        return metric.update_state

    return make


@pytest.mark.parametrize(
    "cls, peer_cls", [(NDCG, keras_rs.metrics.NDCG), (MAP, keras_rs.metrics.MeanAveragePrecision)]
)
@pytest.mark.parametrize("weights", [None, "item"])
def test_traced_update_matches_keras_rs(traced, cls, peer_cls, weights):
    rng = np.random.default_rng(21)
    ours, peer = cls(k=4), peer_cls(k=4)
    update = traced(ours)
    for _ in range(2):
        s, y, m, w = ref.make_case(rng, 6, 9, weights=weights)
        update({"labels": y, "mask": m}, s, w)
        peer.update_state({"labels": y, "mask": m}, s, sample_weight=w)
    assert float(ours.result()) == pytest.approx(float(peer.result()), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("cls", [NDCG, MAP])
def test_nan_scores_give_a_nan_result_when_traced(traced, cls):
    rng = np.random.default_rng(22)
    metric = cls(k=3)
    update = traced(metric)
    s, y, m, _ = ref.make_case(rng, 6, 9)
    update({"labels": y, "mask": m}, s, None)
    assert np.isfinite(float(metric.result()))
    s = s.copy()
    y[3] = np.abs(y[3])
    m[3] = True
    s[3, 2] = np.nan  # a valid item
    update({"labels": y, "mask": m}, s, None)
    assert np.isnan(float(metric.result()))
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_seed_state_advances_when_traced(traced):
    metric = NDCG(k=3, seed=9)
    update = traced(metric)
    state = metric.variables[-1]
    assert state.name == "seed_generator_state"
    before = keras.ops.convert_to_numpy(state).copy()
    s, y, m, _ = ref.make_case(np.random.default_rng(23), 4, 6)
    update({"labels": y, "mask": m}, s, None)
    assert not np.array_equal(keras.ops.convert_to_numpy(state), before)


if BACKEND == "tensorflow":  # only a tf.function signature can leave a rank or size unknown

    def test_unknown_rank_or_list_size_is_a_clear_error():
        """A ``tf.function`` traced with ``TensorSpec(None)`` (unknown rank) or an unknown list
        size: the error names the argument and the fix; a known rank and list size with an
        unknown batch trace and give keras-rs's number."""
        import tensorflow as tf

        from rankstream.keras import GMR

        s, yt, _, _ = ref.make_case(np.random.default_rng(3), 4, 6)
        y = np.maximum(yt, 0.0).astype("float32")

        def traced(metric, *specs):
            return tf.function(lambda a, b: metric.update_state(a, b), input_signature=list(specs))

        unknown = tf.TensorSpec(None, tf.float32)
        with pytest.raises(ValueError, match=r"y_true has an unknown rank .*TensorSpec\(\[None, list_"):
            traced(NDCG(k=3), unknown, unknown)(y, s)
        with pytest.raises(ValueError, match=r"y_true has an unknown rank"):
            traced(GMR(), tf.TensorSpec(None, tf.int32), unknown)(np.zeros(4, "int32"), s)
        ragged = tf.TensorSpec([None, None], tf.float32)
        with pytest.raises(ValueError, match=r"y_pred's num_items \(axis 1\) must be known when traced"):
            traced(MAP(k=3), ragged, ragged)(y, s)
        with pytest.raises(ValueError, match=r"y_pred's num_candidates \(axis 1\) must be known"):
            traced(GMR(), tf.TensorSpec([None], tf.int32), ragged)(np.zeros(4, "int32"), s)
        batch_free = tf.TensorSpec([None, 6], tf.float32)
        ours = NDCG(k=3, shuffle_ties=False)
        traced(ours, batch_free, batch_free)(y, s)
        peer = keras_rs.metrics.NDCG(k=3, shuffle_ties=False)
        peer.update_state(y, s)
        assert float(ours.result()) == pytest.approx(float(peer.result()), rel=1e-6)
