"""Trust at the edges (issue 9), Keras half: every bad input ends in the right number or a clear
error naming the argument, the same eagerly and where nothing can be read back (JAX ``jit``,
``tf.function``; on torch the accelerator path, forced on the CPU), and never in a poisoned
state.

Expected numbers come from keras-rs 0.4.0 itself (on JAX wherever padding is involved: keras-rs
on torch subtracts 1e-6 x index from the scores) and from the naive references of
``krs_reference`` (python loops), never from rankstream.

Outcomes (the "Bad input" table of docs/inputs.md):

* NDCG / MAP: NaN and -inf labels are padding (keras-rs keeps ``labels >= 0``); a +inf label,
  a NaN score on an item of a list and an infinite weight are bad data; weights <= 0 or NaN
  drop the item or list (keras-rs).
* rank-based metrics: the true index must be an integer (a float ``y_true`` of shape
  ``(batch,)`` is a ``TypeError``, so NaN or inf cannot be an index); binary labels must be
  0/1 (NaN or inf is a ``ValueError``; binary labels work eagerly only). NaN scores among the
  candidates and negative, NaN or infinite weights are bad data.
* bad data: eagerly a ``ValueError`` naming the argument, the state bitwise unchanged; where
  nothing is read back the list (row) is left out of the sums, ``invalid_count`` counts it and
  ``result()`` is NaN until ``reset_state()``.
* ``(batch, 0)``: a ``ValueError`` naming ``y_pred``; ``(0, list_size)``: adds nothing.
* complex, string, object, ragged inputs and torch ``meta`` tensors: a ``TypeError`` naming the
  argument, before any cast.
"""

from __future__ import annotations

import contextvars
import threading

import keras
import keras_rs
import krs_reference as ref
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankstream.core import backends
from rankstream.keras import (
    GMR,
    MAP,
    NDCG,
    ArithmeticMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    RankBasedMetrics,
)

BACKEND = keras.backend.backend()
K = keras.ops
# Where nothing is read back: JAX jit, tf.function, and on torch the accelerator path.
TRACED = {"jax": "jit", "tensorflow": "tf.function", "torch": "no-read"}[BACKEND]
MODES = ["eager", TRACED]
TOL = {"rel": 2e-5, "abs": 2e-6}
KS = (1, 3)
B, N = 4, 5  # one shape for most updates: JAX compiles its eager ops once per shape


# ==========================================================================================
# helpers


@pytest.fixture
def no_read(monkeypatch):
    """On torch, the accelerator path (nothing read back) on the CPU."""

    def force():
        monkeypatch.setattr(backends, "_READ_BACK", contextvars.ContextVar("read_back", default=False))

    return force


class Updater:
    """``update(metric, y_true, y_pred, sample_weight)`` in one mode, the traced functions
    cached per metric (JAX compiles once per metric and input signature)."""

    def __init__(self, mode, no_read=None):
        self.mode = mode
        self._fns = {}
        if mode == "no-read":
            no_read()

    def __call__(self, metric, y_true, y_pred, sample_weight=None):
        if self.mode in ("eager", "no-read"):
            return metric.update_state(y_true, y_pred, sample_weight=sample_weight)
        fn = self._fns.get(id(metric))
        if fn is None:
            if self.mode == "jit":
                import jax

                fn = jax.jit(metric.stateless_update_state)
            else:
                import tensorflow as tf

                fn = tf.function(metric.update_state, jit_compile=self.mode == "xla")
            self._fns[id(metric)] = (metric, fn)
        else:
            fn = fn[1]
        if self.mode == "jit":
            new = fn([v.value for v in metric.variables], y_true, y_pred, sample_weight)
            for var, value in zip(metric.variables, new, strict=True):
                var.assign(value)
        else:
            fn(y_true, y_pred, sample_weight)


@pytest.fixture(params=MODES)
def update(request, no_read):
    return Updater(request.param, no_read)


def snapshot(metric):
    return [np.array(K.convert_to_numpy(v), copy=True) for v in metric.variables]


def assert_same_state(metric, before):
    after = snapshot(metric)
    assert len(after) == len(before)
    for a, b in zip(after, before, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()  # bitwise


def assert_clean_state(metric):
    for v in metric.variables:
        assert np.all(np.isfinite(K.convert_to_numpy(v))), (v.name, K.convert_to_numpy(v))


def sums(metric):
    return metric.state_dict()["sums"]


def value(metric):
    out = metric.result()
    if isinstance(out, dict):
        return {k: float(K.convert_to_numpy(v)) for k, v in out.items()}
    return float(K.convert_to_numpy(out))


def reference_sums(name, batches, ks=None):
    """The state's sums over ``[(y, s, w)]`` by the naive references: ``value_sum``,
    ``weight_sum`` and ``count`` for NDCG/MAP (k = the whole list), the rank sums otherwise."""
    if name in ("NDCG", "MAP"):
        num = den = count = 0.0
        for y, s, w in batches:
            n, d = ref.keras_rs_sums(name.lower(), s, y, None, sample_weight=w)
            num, den, count = num + n, den + d, count + len(y)  # every list here has a weight > 0
        return {"value_sum": [num], "weight_sum": den, "count": count}
    total = None
    for y, s, w in batches:
        one = ref.naive_rank_sums(s, y, w, ks)
        total = one if total is None else ref.add_sums(total, one)
    return total


def assert_sums_match(metric, expected):
    got = sums(metric)
    for field, v in expected.items():
        if field in got:
            np.testing.assert_allclose(got[field], v, rtol=2e-6, atol=1e-9, err_msg=field)


def zero_loss(y_true, y_pred):
    return K.sum(y_pred, axis=-1) * 0.0


def identity_model(n, metrics=(), weighted_metrics=(), mode="eager"):
    """A model whose predictions are its inputs (the scores), compiled for ``mode``."""
    inp = keras.Input((n,))
    model = keras.Model(inp, keras.layers.Identity()(inp))
    jit = {"eager": False, "jit": True, "tf.function": False, "no-read": False}[mode]
    model.compile(
        loss=zero_loss,
        metrics=list(metrics),
        weighted_metrics=list(weighted_metrics),
        run_eagerly=mode == "eager",
        jit_compile=jit,
    )
    return model


def evaluate(model, x, y, sample_weight=None, batch_size=None):
    return model.evaluate(
        x, y, sample_weight=sample_weight, batch_size=batch_size or len(x), verbose=0, return_dict=True
    )


def krs(metric_name, *batches, k=None):
    """keras-rs's streamed mean over batches ``(scores, labels, kw)`` (naive reference)."""
    num = den = 0.0
    for scores, labels, kw in batches:
        n, d = ref.keras_rs_sums(metric_name, scores, labels, k, **kw)
        num, den = num + n, den + d
    return num / den if den > 0 else 0.0


# ==========================================================================================
# (4) NaN and infinite labels


S3 = np.array([[0.5, 0.4, 0.1]], "float32")


@pytest.mark.parametrize("mode", MODES)
def test_nan_and_minus_inf_labels_are_padding(mode, no_read):
    """keras-rs keeps ``labels >= 0``: NaN and -inf labels are padding (keras-rs NDCG and MAP
    are 1.0 on ``[[nan, 1, 0]]`` scored ``[[.5, .4, .1]]``), in evaluate and update_state."""
    u = Updater(mode, no_read)
    y1 = np.array([[np.nan, 1, 0]], "float32")
    for cls, peer_cls in [(NDCG, keras_rs.metrics.NDCG), (MAP, keras_rs.metrics.MeanAveragePrecision)]:
        # no padding shift on JAX/TF; on torch keras-rs shuffles ties through its mask: no ties here
        peer = float(peer_cls()(y1, S3))
        assert peer == pytest.approx(1.0)
        one = cls(shuffle_ties=False)
        u(one, y1, S3)
        assert value(one) == pytest.approx(peer, **TOL)
    rng = np.random.default_rng(4)
    s = ref.tie_free_scores(rng, 2 * B, N)
    y = rng.integers(0, 3, (2 * B, N)).astype("float32")
    y[0, 0], y[1, 2], y[2, :] = np.nan, -np.inf, np.nan  # list 2: all padding
    y[3, 1], y[3, 3] = np.nan, 2.0
    metrics = [NDCG(k=3, shuffle_ties=False), MAP(k=3, shuffle_ties=False)]
    logs = evaluate(identity_model(N, metrics, mode=mode), s, y, batch_size=B)
    for name in ("ndcg", "map"):
        halves = [(s[h], y[h], {}) for h in (slice(0, B), slice(B, None))]
        assert logs[f"{name}@3"] == pytest.approx(krs(name, *halves, k=3), **TOL)
    assert [m.invalid_count for m in metrics] == [0, 0]


if BACKEND == "jax":  # keras-rs's masking is sound on JAX only

    def test_nan_labels_match_keras_rs_on_jax():
        rng = np.random.default_rng(41)
        s = ref.tie_free_scores(rng, 2 * B, N)
        y = rng.integers(-1, 4, (2 * B, N)).astype("float32")
        y[rng.random((2 * B, N)) < 0.25] = np.nan
        y[rng.random((2 * B, N)) < 0.1] = -np.inf
        for cls, peer_cls, name in [
            (NDCG, keras_rs.metrics.NDCG, "ndcg"),
            (MAP, keras_rs.metrics.MeanAveragePrecision, "map"),
        ]:
            peer = peer_cls(k=4)
            for b in (slice(0, B), slice(B, 2 * B)):
                peer.update_state(y[b], s[b])
            eager = cls(k=4)
            for b in (slice(0, B), slice(B, 2 * B)):
                eager.update_state(y[b], s[b])
            assert value(eager) == pytest.approx(float(peer.result()), **TOL)
            logs = evaluate(identity_model(N, [cls(k=4)], mode="jit"), s, y, batch_size=B)
            assert logs[f"{name}@4"] == pytest.approx(float(peer.result()), **TOL)


@pytest.mark.parametrize("mode", MODES)
def test_plus_inf_label_is_bad_data(mode, no_read):
    """A +inf label on an item of a list: eagerly a ValueError naming y_true (evaluate and
    update_state), the state unchanged; traced: that list left out and counted, result NaN."""
    s = np.array([[0.3, 0.2, 0.1], [0.1, 0.3, 0.2]], "float32")
    good = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]], "float32")
    bad = good.copy()
    bad[1, 2] = np.inf
    u = Updater(mode, no_read)
    for cls in (NDCG, MAP):
        metric = cls(shuffle_ties=False)
        u(metric, good, s)
        before = snapshot(metric)
        if mode == "eager":
            with pytest.raises(ValueError, match=r"y_true.*inf"):
                u(metric, bad, s)
            assert_same_state(metric, before)
            continue
        u(metric, bad, s)
        assert_clean_state(metric)
        assert metric.invalid_count == 1
        # what the other list adds: the sums of the valid batch and of the bad one without it
        assert_sums_match(metric, reference_sums(cls.__name__, [(good, s, None), (good[:1], s[:1], None)]))
        assert np.isnan(value(metric))
        metric.reset_state()
        assert metric.invalid_count == 0 and value(metric) == 0.0
    model = identity_model(3, [NDCG(), MAP()], mode=mode)
    if mode == "eager":
        with pytest.raises(ValueError, match=r"y_true.*inf"):
            evaluate(model, s, bad)
    else:
        logs = evaluate(model, s, bad)
        assert np.isnan(logs["ndcg"]) and np.isnan(logs["map"])


def test_rank_metrics_refuse_nan_and_inf_labels():
    """Rank-based metrics: an index is an integer (float targets are refused, NaN cannot be
    one) and binary labels are 0/1: NaN or inf labels are a clear error, never a number."""
    s = np.array([[0.3, 0.2, 0.1], [0.1, 0.3, 0.2]], "float32")
    for metric in (HitsAtK(k=1), InverseHarmonicMeanRank(), RankBasedMetrics()):
        before = snapshot(metric)
        with pytest.raises(TypeError, match=r"y_true of shape \(batch,\) must hold integer indices"):
            metric.update_state(np.array([0.0, np.nan], "float32"), s)
        for label in (np.nan, np.inf, -np.inf):
            binary = np.array([[1.0, 0.0, 0.0], [0.0, label, 1.0]], "float32")
            with pytest.raises(ValueError, match=r"y_true labels must be binary"):
                metric.update_state(binary, s)
        assert_same_state(metric, before)


# ==========================================================================================
# (5) infinite weights


LIST_W = np.array([1.0, 2.0], "float32")


@pytest.mark.parametrize(
    "cls, per_item",
    [(NDCG, False), (NDCG, True), (MAP, False), (MAP, True), (HitsAtK, False), (RankBasedMetrics, False)],
)
def test_inf_weight_never_poisons_the_state(update, cls, per_item):
    """A valid batch, then one with an infinite weight (per list; for NDCG/MAP per item too,
    rank-based metrics take one weight per row): eagerly the update raises naming
    sample_weight and the variables are bitwise unchanged; traced, the list (row) is left out
    of every sum, ``invalid_count`` says 1 and ``result()`` is NaN."""
    rank = cls in (HitsAtK, RankBasedMetrics)
    s = np.array([[0.3, 0.2, 0.1], [0.1, 0.3, 0.2]], "float32")
    y = np.array([0, 1], "int32") if rank else np.array([[0, 1, 2], [1, 0, 2]], "float32")
    w = np.ones((2, 3), "float32") if per_item else LIST_W.copy()
    metric = cls() if rank else cls(shuffle_ties=False)
    update(metric, y, s, w)
    before = snapshot(metric)
    bad = w.copy()
    bad[1] = np.inf
    if update.mode == "eager":
        with pytest.raises(ValueError, match="sample_weight"):
            update(metric, y, s, bad)
        assert_same_state(metric, before)
        return
    update(metric, y, s, bad)
    assert_clean_state(metric)
    assert metric.invalid_count == 1
    # the sums of the valid batch and of the bad one without its bad list
    ks = metric.kernel.ks if rank else None
    assert_sums_match(metric, reference_sums(cls.__name__, [(y, s, w), (y[:1], s[:1], w[:1])], ks))
    out = value(metric)
    if isinstance(out, dict):
        assert all(np.isnan(v) for k, v in out.items() if k != "count")
    else:
        assert np.isnan(out)


# ==========================================================================================
# (6) empty lists


ALL_METRICS = [
    lambda: NDCG(k=2, shuffle_ties=False),
    lambda: MAP(k=2),
    lambda: HitsAtK(k=1),
    lambda: InverseHarmonicMeanRank(),
    lambda: GMR(),
    lambda: ArithmeticMeanRank(),
    lambda: RankBasedMetrics(ks=KS),
]
METRIC_IDS = [
    "NDCG",
    "MAP",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "GMR",
    "ArithmeticMeanRank",
    "RankBasedMetrics",
]
RANK_IDS = {"HitsAtK", "InverseHarmonicMeanRank", "GMR", "ArithmeticMeanRank", "RankBasedMetrics"}


def targets(name, b, n, rng=None):
    """``y_true`` for a metric: true indices for the rank-based ones, labels otherwise."""
    rng = rng or np.random.default_rng(0)
    if name in RANK_IDS:
        return rng.integers(0, max(n, 1), b).astype("int32")
    return rng.integers(0, 3, (b, n)).astype("float32")


@pytest.mark.parametrize("make, name", list(zip(ALL_METRICS, METRIC_IDS, strict=True)), ids=METRIC_IDS)
def test_empty_lists_and_empty_batches(update, make, name):
    metric = make()
    s = ref.tie_free_scores(np.random.default_rng(6), B, N)
    update(metric, targets(name, B, N), s)
    before = snapshot(metric)
    for b in (B, 1):
        with pytest.raises(ValueError, match=rf"y_pred must have at least one .*\({b}, 0\)"):
            update(metric, targets(name, b, 0), np.zeros((b, 0), "float32"))
        assert_same_state(metric, before)
    update(metric, targets(name, 0, N), np.zeros((0, N), "float32"))  # no list: adds nothing
    after = snapshot(metric)
    for a, b_ in zip(after, before, strict=True):
        np.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("mode", MODES)
def test_empty_lists_through_evaluate(mode, no_read):
    if mode == "no-read":
        no_read()
    for make, name in zip(ALL_METRICS, METRIC_IDS, strict=True):
        if name not in ("NDCG", "InverseHarmonicMeanRank"):
            continue
        model = identity_model(0, [make()], mode=mode)
        with pytest.raises(ValueError, match=r"y_pred must have at least one"):
            evaluate(model, np.zeros((4, 0), "float32"), targets(name, 4, 0))


# ==========================================================================================
# (7) sample_weight of shape (batch, 1)


@pytest.mark.parametrize(
    "cls, peer_cls", [(NDCG, keras_rs.metrics.NDCG), (MAP, keras_rs.metrics.MeanAveragePrecision)]
)
def test_batch_by_one_weights_match_keras_rs(cls, peer_cls, no_read):
    """keras-rs broadcasts a ``(batch, 1)`` weight: one weight per list (no padding here, so
    keras-rs is a fair reference on every backend)."""
    y = np.array([[0, 1, 2], [1, 0, 0]], "float32")
    s = np.array([[0.3, 0.1, 0.2], [0.1, 0.2, 0.3]], "float32")
    w = np.array([[2.0], [1.0]], "float32")
    peer = float(peer_cls()(y, s, sample_weight=w))
    if cls is NDCG:
        assert peer == pytest.approx(0.606, abs=5e-4)
    rng = np.random.default_rng(7)
    s2 = ref.tie_free_scores(rng, B, N)
    y2 = rng.integers(0, 3, (B, N)).astype("float32")
    y2[2] = 0  # a list without relevance: keras-rs weighs it by the batch's mean list weight
    w2 = rng.uniform(0.2, 2.0, (B, 1)).astype("float32")
    peer2 = peer_cls(k=3)
    peer2.update_state(y2, s2, sample_weight=w2)
    for mode in MODES:
        u = Updater(mode, no_read)
        ours = cls()
        u(ours, y, s, w)
        assert value(ours) == pytest.approx(peer, **TOL)
        ours = cls(k=3)
        u(ours, y2, s2, w2)
        assert value(ours) == pytest.approx(float(peer2.result()), **TOL)
    with pytest.raises(ValueError, match=rf"sample_weight of shape \(batch, 1\) must have batch = {B}"):
        cls().update_state(y2, s2, sample_weight=np.ones((B + 1, 1), "float32"))


@pytest.mark.parametrize("mode", MODES)
def test_batch_by_one_weights_in_evaluate(mode, no_read):
    if mode == "no-read":
        no_read()
    rng = np.random.default_rng(8)
    s = ref.tie_free_scores(rng, 2 * B, N)
    y = rng.integers(0, 3, (2 * B, N)).astype("float32")
    t = rng.integers(0, N, 2 * B).astype("int32")
    w = rng.uniform(0.2, 2.0, (2 * B, 1)).astype("float32")
    logs = evaluate(identity_model(N, weighted_metrics=[NDCG(k=3)], mode=mode), s, y, w, batch_size=B)
    halves = [(s[h], y[h], {"sample_weight": w[h, 0]}) for h in (slice(0, B), slice(B, None))]
    assert logs["ndcg@3"] == pytest.approx(krs("ndcg", *halves, k=3), **TOL)
    logs = evaluate(
        identity_model(N, weighted_metrics=[InverseHarmonicMeanRank()], mode=mode), s, t, w, batch_size=B
    )
    naive = ref.naive_rank_values(ref.naive_rank_sums(s, t, w[:, 0]))
    assert logs["mrr"] == pytest.approx(naive["inverse_harmonic_mean_rank"], **TOL)


# ==========================================================================================
# (8) loading a state


def test_state_dict_says_what_it_belongs_to():
    metric = HitsAtK(k=3)
    s = ref.tie_free_scores(np.random.default_rng(9), 4, 5)
    metric.update_state(targets("HitsAtK", 4, 5), s)
    state = metric.state_dict()
    assert set(state) == {"format", "metric", "config", "fields", "sums"}
    assert state["metric"] == "HitsAtK"
    assert all(v.dtype == np.float64 for v in state["sums"].values())
    assert state["sums"]["invalid"] == 0.0
    clone = HitsAtK(k=3)
    clone.load_state_dict(state)
    assert value(clone) == pytest.approx(value(metric), **TOL)


def test_a_refused_load_changes_nothing():
    mrr, hits = InverseHarmonicMeanRank(), HitsAtK(k=1)
    s = ref.tie_free_scores(np.random.default_rng(10), 4, 5)
    t = targets("InverseHarmonicMeanRank", 4, 5)
    mrr.update_state(t, s)
    hits.update_state(t, s)
    before = snapshot(hits)
    good = hits.state_dict()
    nan = {**good, "sums": {**good["sums"], "weight": np.array(np.nan)}}
    cases = [
        (mrr.state_dict(), ValueError, r"HitsAtK.*saved by 'InverseHarmonicMeanRank'"),
        ({**good, "extra": 1}, ValueError, r"HitsAtK.*keys"),
        ({k: v for k, v in good.items() if k != "config"}, ValueError, r"HitsAtK.*keys"),
        (nan, ValueError, r"'weight' must be finite"),
        (
            {**good, "sums": {**good["sums"], "hits": np.zeros(2)}},
            ValueError,
            r"'hits' must have shape \(1,\)",
        ),
        (HitsAtK(k=5).state_dict(), ValueError, r"other settings"),
        ([1.0], TypeError, r"state must be a mapping"),
    ]
    for state, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            hits.load_state_dict(state)
        assert_same_state(hits, before)
    ndcg = NDCG(k=3)
    with pytest.raises(ValueError, match=r"NDCG.*saved by 'MAP'"):
        ndcg.load_state_dict(MAP(k=3).state_dict())


# ==========================================================================================
# (10) dtypes


def complex_(x):
    return np.asarray(x).astype("complex64") + 1j


@pytest.mark.parametrize("make, name", list(zip(ALL_METRICS, METRIC_IDS, strict=True)), ids=METRIC_IDS)
def test_complex_inputs_are_refused_before_any_cast(update, make, name):
    metric = make()
    s = ref.tie_free_scores(np.random.default_rng(11), B, N)
    y = targets(name, B, N)
    w = np.ones(B, "float32")
    before = snapshot(metric)
    for args, arg in [
        ((y, complex_(s), None), "y_pred"),
        ((complex_(y), s, None), "y_true"),
        ((y, s, complex_(w)), "sample_weight"),
    ]:
        with pytest.raises(TypeError, match=rf"{arg} must hold real numbers, got complex dtype complex64"):
            update(metric, *args)
        assert_same_state(metric, before)


@pytest.mark.parametrize("mode", MODES)
def test_complex_scores_in_evaluate(mode, no_read):
    if mode == "no-read":
        no_read()
    model = identity_model(3, [NDCG()], mode=mode)
    with pytest.raises(TypeError, match=r"y_true must hold real numbers"):
        evaluate(model, S3, complex_([[0.0, 1.0, 0.0]]))


@pytest.mark.parametrize("make, name", list(zip(ALL_METRICS, METRIC_IDS, strict=True)), ids=METRIC_IDS)
def test_strings_objects_and_ragged_lists_name_the_argument(make, name):
    metric = make()
    s = ref.tie_free_scores(np.random.default_rng(12), 2, 3)
    y = targets(name, 2, 3)
    cases = [
        ((y, np.array([["a", "b", "c"], ["d", "e", "f"]]), None), "y_pred", r"must hold numbers.*<U1"),
        ((y, s.astype(object), None), "y_pred", r"must hold numbers.*object"),
        ((y, [[0.1, 0.2, 0.3], [0.1]], None), "y_pred", r"rectangular array of numbers"),
        ((y, s, [1.0, [2.0]]), "sample_weight", r"rectangular array of numbers"),
        ((y.astype(str), s, None), "y_true", r"must hold numbers"),
    ]
    if name not in RANK_IDS:
        cases.append((({"labels": y, "mask": [[True], [True, False]]}, s, None), r'y_true\["mask"\]', "rect"))
    before = snapshot(metric)
    for args, arg, pattern in cases:
        with pytest.raises(TypeError, match=rf"{arg} .*{pattern}"):
            metric.update_state(*args)
        assert_same_state(metric, before)


if BACKEND == "torch":  # torch's meta device

    @pytest.mark.parametrize("make, name", list(zip(ALL_METRICS, METRIC_IDS, strict=True)), ids=METRIC_IDS)
    def test_meta_tensors_are_refused(make, name):
        import torch

        metric = make()
        s = torch.as_tensor(ref.tie_free_scores(np.random.default_rng(13), 2, 3))
        y = torch.as_tensor(targets(name, 2, 3))
        w = torch.ones(2)
        before = snapshot(metric)
        for args, arg in [
            ((y, s.to("meta"), None), "y_pred"),
            ((y.to("meta"), s, None), "y_true"),
            ((y, s, w.to("meta")), "sample_weight"),
        ]:
            with pytest.raises(TypeError, match=rf"{arg} is a torch tensor on the 'meta' device"):
                metric.update_state(*args)
            assert_same_state(metric, before)


# ==========================================================================================
# (11) signed zeros


@pytest.mark.parametrize("mode", MODES + (["xla"] if BACKEND == "tensorflow" else []))
def test_signed_zeros_are_ties(mode, no_read):
    """Scores ``[-0., 0., -1.]``, labels ``[0, 1, 0]``: -0.0 and +0.0 tie, the earlier index
    first (``shuffle_ties=False``), so MAP@1 and NDCG@1 are 0 on every backend, as numpy, torch
    and Ignite rank them; the rank metrics count the tie (realistic rank 1.5)."""
    u = Updater(mode, no_read)
    s = np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0]], "float32")
    y = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]], "float32")
    for cls in (MAP, NDCG):
        metric = cls(k=1, shuffle_ties=False)
        u(metric, y[:1], s[:1])
        assert value(metric) == 0.0
        metric = cls(k=1, shuffle_ties=False)
        u(metric, y[1:], s[1:])
        assert value(metric) == 0.0
    metric = InverseHarmonicMeanRank()
    u(metric, np.array([1, 0], "int32"), s)
    assert value(metric) == pytest.approx(1 / 1.5, **TOL)


# ==========================================================================================
# (9) threads


@pytest.mark.parametrize("cls", [MAP, RankBasedMetrics])
def test_two_metrics_updated_from_two_threads(cls):
    """Two instances updated at the same time from two threads, each on its own data (lists of
    different widths, so shared scratch space would be resized under the other's feet): each
    ends exactly where the same updates in one thread end."""
    rng = np.random.default_rng(14)
    # torch: the CPU scratch-buffer paths; elsewhere shapes compiled already (JAX)
    b, widths = (32, (301, 257)) if BACKEND == "torch" else (B, (N, N))
    data = []
    for n in widths:
        batches = []
        for _ in range(8):
            s = rng.normal(size=(b, n)).astype("float32")
            y = rng.integers(0, n, b).astype("int32") if cls is RankBasedMetrics else None
            if y is None:
                y = rng.integers(-1, 3, (b, n)).astype("float32")
            batches.append((y, s))
        data.append(batches)

    def make():
        return cls(ks=KS) if cls is RankBasedMetrics else cls(k=5, shuffle_ties=False)

    sequential = []
    for batches in data:
        metric = make()
        for y, s in batches:
            metric.update_state(y, s)
        sequential.append(snapshot(metric))
    metrics = [make(), make()]
    barrier = threading.Barrier(2)
    errors = []

    def work(metric, batches):
        try:
            barrier.wait()
            for y, s in batches:
                metric.update_state(y, s)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(m, d)) for m, d in zip(metrics, data, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for metric, expected in zip(metrics, sequential, strict=True):
        assert_same_state(metric, expected)


# ==========================================================================================
# (12) error messages name the public metric


def test_messages_name_the_public_metric():
    with pytest.raises(ValueError) as info:
        NDCG(k=3).load_state_dict(MAP(k=3).state_dict())
    assert "Kernel" not in str(info.value)
    metric = MAP()
    state = metric.state_dict()
    state["config"] = {**state["config"], "top_k": [1]}
    with pytest.raises(ValueError) as info:
        metric.load_state_dict(state)
    assert "MAP" in str(info.value) and "Kernel" not in str(info.value)


# ==========================================================================================
# the property test: every bad-input class at every public metric


LIST_CLASSES = [
    "valid",
    "nan_score",
    "inf_score",
    "nan_label",
    "minus_inf_label",
    "inf_label",
    "inf_weight",
    "inf_item_weight",
    "negative_weight",
    "nan_weight",
    "empty_items",
    "empty_batch",
    "complex",
    "wrong_shape",
]
RANK_CLASSES = [
    "valid",
    "nan_score",
    "inf_score",
    "nan_label",
    "inf_weight",
    "negative_weight",
    "nan_weight",
    "empty_items",
    "empty_batch",
    "complex",
    "wrong_shape",
]


def _make(name):
    return {
        "NDCG": lambda: NDCG(k=3, shuffle_ties=False),
        "MAP": lambda: MAP(k=3, shuffle_ties=False),
        "HitsAtK": lambda: HitsAtK(k=3),
        "InverseHarmonicMeanRank": lambda: InverseHarmonicMeanRank(),
        "GMR": lambda: GMR(),
        "ArithmeticMeanRank": lambda: ArithmeticMeanRank(),
        "RankBasedMetrics": lambda: RankBasedMetrics(ks=KS),
    }[name]()


def _batch(rng, name):
    s = ref.tie_free_scores(rng, B, N)
    if name in RANK_IDS:
        return rng.integers(0, N, B).astype("int32"), s, None
    y = rng.integers(-1, 3, (B, N)).astype("float32")
    return y, s, None


def _bad_batch(rng, name, kind):
    """``(y_true, y_pred, sample_weight, outcome)`` with outcome ``("value", None)``,
    ``("raise", (type, pattern))`` or ``("bad", (type, pattern))`` (bad data: raise eagerly,
    count when traced). NDCG and MAP get positive per-item weights half of the time."""
    rank = name in RANK_IDS
    y, s, w = _batch(rng, name)
    r, c = int(rng.integers(B)), int(rng.integers(N))
    if not rank:
        y[r, c] = max(y[r, c], 1.0)  # the corrupted item is in the list
        if rng.random() < 0.5:
            w = rng.uniform(0.5, 2.0, (B, N)).astype("float32")
    if kind == "valid":
        return y, s, w, ("value", None)
    if kind == "nan_score":
        s[r, c] = np.nan
        return (
            y,
            s,
            w,
            (
                "bad",
                (
                    ValueError,
                    r"y_pred contains 1 NaN score among the (items in the lists|candidates) \(first at row",
                ),
            ),
        )
    if kind == "inf_score":
        s[r, c] = np.inf * (1 if rng.random() < 0.5 else -1)
        s[(r + 1) % B, c] = np.inf  # ties of infinite scores too
        s[(r + 1) % B, (c + 1) % N] = np.inf
        return y, s, w, ("value", None)
    if kind == "nan_label":
        if rank:
            return y.astype("float32") * np.nan, s, w, ("raise", (TypeError, r"y_true of shape \(batch,\)"))
        y[r, c] = np.nan
        return y, s, w, ("value", None)
    if kind == "minus_inf_label":
        y[r, c] = -np.inf
        return y, s, w, ("value", None)
    if kind == "inf_label":
        y[r, c] = np.inf
        return y, s, w, ("bad", (ValueError, r"y_true must hold finite labels"))
    if kind in ("inf_weight", "negative_weight", "nan_weight", "inf_item_weight"):
        bad = {
            "inf_weight": np.inf,
            "inf_item_weight": np.inf,
            "negative_weight": -1.0,
            "nan_weight": np.nan,
        }[kind]
        if kind == "inf_item_weight":
            w = rng.uniform(0.5, 2.0, (B, N)).astype("float32")
            w[r, c] = bad
        else:
            w = rng.uniform(0.5, 2.0, B).astype("float32")
            w[r] = bad
        if not rank and kind in ("negative_weight", "nan_weight"):
            return y, s, w, ("value", None)  # keras-rs drops the list
        return y, s, w, ("bad", (ValueError, r"sample_weight must be finite"))
    if kind == "empty_items":
        y = np.zeros(B, "int32") if rank else np.zeros((B, 0), "float32")
        return y, np.zeros((B, 0), "float32"), None, ("raise", (ValueError, r"y_pred must have at least one"))
    if kind == "empty_batch":
        return y[:0], s[:0], None, ("value", None)
    if kind == "complex":
        which = int(rng.integers(3))
        if which == 0:
            return y, s + 1j, w, ("raise", (TypeError, r"y_pred must hold real numbers"))
        if which == 1:
            return y + 1j, s, w, ("raise", (TypeError, r"y_true must hold real numbers"))
        return y, s, np.ones(B, "complex64"), ("raise", (TypeError, r"sample_weight must hold real numbers"))
    if kind == "wrong_shape":
        which = int(rng.integers(2))
        if which == 0:
            return y, s, np.ones(B + 1, "float32"), ("raise", (ValueError, r"sample_weight"))
        if rank:
            return y[:-1], s, w, ("raise", (ValueError, r"y_true must be the indices"))
        return y[:, :-1], s, w, ("raise", (ValueError, r"y_true and y_pred must have the same shape"))
    raise AssertionError(kind)


def _expected(name, batches):
    """The naive reference over ``[(y, s, w)]`` (keras-rs's numbers for NDCG/MAP)."""
    if name in RANK_IDS:
        total = None
        for y, s, w in batches:
            one = ref.naive_rank_sums(s, y, w, KS if name == "RankBasedMetrics" else (3,))
            total = one if total is None else ref.add_sums(total, one)
        values = ref.naive_rank_values(total, KS if name == "RankBasedMetrics" else (3,))
        pick = {
            "HitsAtK": "hits_at_3",
            "InverseHarmonicMeanRank": "inverse_harmonic_mean_rank",
            "GMR": "geometric_mean_rank",
            "ArithmeticMeanRank": "arithmetic_mean_rank",
        }
        if name == "RankBasedMetrics":
            return {**values, "count": total["count"]}
        return values[pick[name]]
    return krs(name.lower(), *[(s, y, {"sample_weight": w}) for y, s, w in batches], k=3)


def _check_value(name, got, expected):
    if isinstance(expected, dict):
        for key, v in expected.items():
            assert got[key] == pytest.approx(v, **TOL), (key, got[key], v)
    else:
        assert got == pytest.approx(expected, **TOL)


NAMES = ["NDCG", "MAP", "HitsAtK", "InverseHarmonicMeanRank", "GMR", "ArithmeticMeanRank", "RankBasedMetrics"]


@pytest.mark.parametrize("mode", MODES)
def test_every_bad_input_class_at_every_metric(mode, no_read):
    """Hypothesis (the data): at every public metric, a valid batch then one batch of every
    bad-input class: the documented outcome (the reference number, a clear error naming the
    argument with the state bitwise unchanged, or bad data counted with a NaN result), never
    a NaN in the state. Every (metric, class) pair in every example."""
    u = Updater(mode, no_read)
    metrics = {name: _make(name) for name in NAMES}

    def one(name, kind, rng):
        metric = metrics[name]
        metric.reset_state()
        first = _batch(rng, name)
        u(metric, *first)
        before = snapshot(metric)
        y, s, w, (outcome, error) = _bad_batch(rng, name, kind)
        if outcome == "raise" or (outcome == "bad" and mode == "eager"):
            with pytest.raises(error[0], match=error[1]) as info:
                u(metric, y, s, w)
            assert "Kernel" not in str(info.value)
            assert_same_state(metric, before)
            assert_clean_state(metric)
            _check_value(name, value(metric), _expected(name, [first]))
            return
        u(metric, y, s, w)
        assert_clean_state(metric)
        if outcome == "value":
            assert metric.invalid_count == 0
            _check_value(name, value(metric), _expected(name, [first, (y, s, w)]))
        else:
            assert metric.invalid_count == 1
            out = value(metric)
            if isinstance(out, dict):
                assert all(np.isnan(v) for k, v in out.items() if k != "count"), out
            else:
                assert np.isnan(out)

    @settings(max_examples=2, deadline=None, derandomize=True, database=None)
    @given(seed=st.integers(0, 2**32 - 1))
    def check(seed):
        for i, name in enumerate(NAMES):
            for j, kind in enumerate(RANK_CLASSES if name in RANK_IDS else LIST_CLASSES):
                try:
                    one(name, kind, np.random.default_rng([seed, i, j]))
                except BaseException as exc:
                    raise AssertionError(f"{name}, {kind} ({mode}, seed {seed}): {exc!r}") from exc

    check()
