"""Rank-based metrics in Keras (Hits@k, MRR, GMR, mean rank and ``RankBasedMetrics``).

Expected numbers come from ranks counted naively task by task (python loops, ties counted
exactly) and PyKEEN's metric classes applied to those ranks (value, expectation, variance,
adjusted and z forms); and from ``rankstream.ignite`` on the same data. Scores are small
integers (many ties) and weights are exact in float32, so casting to the metric's float32
changes nothing.
"""

from __future__ import annotations

import contextvars

import keras
import numpy as np
import pytest
import torch

import rankstream.ignite as rs_ignite
from rankstream.core import backends
from rankstream.core.backends import Context
from rankstream.core.backends.keras_ops import keras_ops
from rankstream.core.ranks import kernel as rank_based
from rankstream.keras import (
    GMR,
    ArithmeticMeanRank,
    GeometricMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    RankBasedMetrics,
)

from pykeen_reference import naive_tasks, pykeen_reference

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64  # the default state dtype
# The GMR expectation's reported truncation bound for the few dozen tasks here: below 1e-6 with
# float64 state (20 cumulant sums); with float32 state (8 sums, FLOAT32_GMR_ORDER) the bound is
# conservative, about 1e-3 here, while the values still match PyKEEN to float32 precision.
GMR_BOUND = 1e-6 if X64 else 2e-2
# one list shape for every eager update: JAX compiles its eager ops once per shape
B, N = 16, 9
KS = (1, 3)
# float32 results of float64 host sums (float32 + Kahan sums on JAX without x64)
TOL = {"rel": 2e-5, "abs": 1e-6}


# ==========================================================================================
# the naive reference


def reference(tasks, rank_type, ks=KS):
    """The dict of RankBasedMetrics by PyKEEN's classes on the naive ranks."""
    return pykeen_reference(tasks, rank_type, ks)


def as_floats(result):
    return {k: float(keras.ops.convert_to_numpy(v)) for k, v in result.items()}


def assert_close(got, want, **tol):
    tol = tol or TOL
    assert set(want) <= set(got), sorted(set(want) - set(got))
    bad = {k: (got[k], v) for k, v in want.items() if got[k] != pytest.approx(v, **tol)}
    assert not bad, bad


# ==========================================================================================
# data


def case(seed, kind, b=B, n=N, mask=True, weights=True):
    """(y_true for Keras, scores, sample_weight, (y, mask) for the reference)."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, (b, n)).astype("float32")  # many ties
    m = None
    if mask:  # ragged lists: row i keeps its first 3..n candidates
        m = np.arange(n)[None, :] < rng.integers(3, n + 1, b)[:, None]
        scores = np.where(m, scores, 99.0).astype("float32")  # masked-out scores must not count
    if kind == "index":
        hi = n if m is None else m.sum(axis=1)
        y = (rng.random(b) * hi).astype("int32")
    else:
        # one positive on even rows, two on odd rows (a fixed layout of the positive slots
        # keeps JAX's eager per-shape compilations few), plus positives on masked-out items,
        # which do not count
        y = np.zeros((b, n), "float32")
        for i in range(b):
            size = n if m is None else int(m[i].sum())
            y[i, rng.choice(size, 1 + i % 2, replace=False)] = 1.0
        if m is not None:
            y[~m & (rng.random((b, n)) < 0.5)] = 1.0
    w = rng.choice([0.0, 0.5, 1.0, 2.0], b).astype("float32") if weights else None
    y_true = y if m is None else {"labels": y, "mask": m}
    return y_true, scores, w, (y, m)


def ref_of(cases, rank_type="realistic", ks=KS):
    tasks = []
    for _, s, w, (y, m) in cases:
        tasks += naive_tasks(s, y, m, w)
    return reference(tasks, rank_type, ks)


# ==========================================================================================
# values


@pytest.mark.parametrize(
    "kind, rank_type", [("index", "realistic"), ("index", "optimistic"), ("labels", "pessimistic")]
)
def test_values_match_naive_ranks_and_pykeen(kind, rank_type):
    """Masks (ragged lists), list weights (some 0), exact ties; three updates."""
    cases = [case(1, kind), case(2, kind), case(3, kind)]
    metric = RankBasedMetrics(ks=KS, rank_type=rank_type)
    for y_true, s, w, _ in cases:
        metric.update_state(y_true, s, sample_weight=w)
    got = as_floats(metric.result())
    want = ref_of(cases, rank_type)
    assert_close(got, want)
    assert 0.0 <= got["geometric_mean_rank_error_bound"] < GMR_BOUND
    if kind == "labels":  # (the single-metric classes share the kernel; one input kind is enough)
        return
    # the single-metric classes give the entries of the dict
    singles = {
        "hits_at_3": HitsAtK(3, rank_type=rank_type),
        "expected_hits_at_1": HitsAtK(1, rank_type=rank_type, output="expected"),
        "adjusted_inverse_harmonic_mean_rank": InverseHarmonicMeanRank(
            rank_type=rank_type, output="adjusted"
        ),
        "variance_geometric_mean_rank": GMR(rank_type=rank_type, output="variance"),
        "z_arithmetic_mean_rank": ArithmeticMeanRank(rank_type=rank_type, output="z"),
    }
    for key, single in singles.items():
        for y_true, s, w, _ in cases:
            single.update_state(y_true, s, sample_weight=w)
        assert float(single.result()) == pytest.approx(want[key], **TOL), key


def test_plain_inputs_and_sparse_target_column():
    """No mask, no weights; an index target of shape (batch, 1) as Keras often carries it."""
    y, s, _, ref = case(3, "index", mask=False, weights=False)
    want = ref_of([(y, s, None, ref)])
    for y_true in (y, y[:, None].astype("int64")):
        metric = RankBasedMetrics(ks=KS)
        metric.update_state(y_true, s)
        assert_close(as_floats(metric.result()), want)
    metric = InverseHarmonicMeanRank()
    metric.update_state(y, s)
    assert float(metric.result()) == pytest.approx(want["inverse_harmonic_mean_rank"], **TOL)


def test_ties_are_counted_exactly():
    """All candidates tied: rank 1 (optimistic), N (pessimistic), (N + 1) / 2 (realistic),
    whatever the index of the true candidate (never broken by position)."""
    s = np.zeros((B, N), "float32")
    y = (np.arange(B) % N).astype("int32")
    for rank_type, rank in (("optimistic", 1.0), ("pessimistic", float(N)), ("realistic", (N + 1) / 2)):
        metric = RankBasedMetrics(ks=KS, rank_type=rank_type)
        metric.update_state(y, s)
        got = as_floats(metric.result())
        assert got["arithmetic_mean_rank"] == rank and got["geometric_mean_rank"] == pytest.approx(rank)
        assert got["hits_at_1"] == float(rank <= 1) and got["hits_at_3"] == float(rank <= 3)


def test_any_batch_split_gives_the_same_numbers():
    """Three batches, or the same rows shuffled into three other batches (of the same size:
    JAX compiles eager ops per shape)."""
    cases = [case(seed, "index") for seed in (4, 5, 6)]
    first = RankBasedMetrics(ks=KS)
    for y_true, s, w, _ in cases:
        first.update_state(y_true, s, sample_weight=w)
    rows = np.random.default_rng(0).permutation(3 * B).reshape(3, B)
    cat = {
        "labels": np.concatenate([c[0]["labels"] for c in cases]),
        "mask": np.concatenate([c[0]["mask"] for c in cases]),
        "s": np.concatenate([c[1] for c in cases]),
        "w": np.concatenate([c[2] for c in cases]),
    }
    second = RankBasedMetrics(ks=KS)
    for r in rows:
        second.update_state({"labels": cat["labels"][r], "mask": cat["mask"][r]}, cat["s"][r], cat["w"][r])
    assert_close(as_floats(second.result()), as_floats(first.result()))


def test_same_numbers_as_ignite():
    for kind in ("index", "labels"):
        y_true, s, w, (y, m) = case(5, kind)
        ours = RankBasedMetrics(ks=KS, rank_type="optimistic")
        ours.update_state(y_true, s, sample_weight=w)
        theirs = rs_ignite.RankBasedMetrics(ks=KS, rank_type="optimistic")
        extra = {"mask": torch.as_tensor(m), "sample_weight": torch.as_tensor(w)}
        theirs.update((torch.as_tensor(s), torch.as_tensor(y), extra))
        want = theirs.compute()
        if not X64:  # fewer cumulant sums in float32 state: another (looser) bound, same values
            assert want.pop("geometric_mean_rank_error_bound") < GMR_BOUND
        assert_close(as_floats(ours.result()), want)
        hits = HitsAtK(3, rank_type="optimistic", output="z")
        hits.update_state(y_true, s, sample_weight=w)
        ignite_hits = rs_ignite.HitsAtK(3, rank_type="optimistic", output="z")
        ignite_hits.update((torch.as_tensor(s), torch.as_tensor(y), extra))
        assert float(hits.result()) == pytest.approx(ignite_hits.compute(), **TOL)


# ==========================================================================================
# lifecycle


def test_one_sum_variable_per_field():
    metric = RankBasedMetrics(ks=KS)
    fields = metric.kernel.fields
    names = [v.name for v in metric.variables]
    assert names == (list(fields) if X64 else list(fields) + [f"{f}_compensation" for f in fields])
    assert all(v.aggregation == "sum" for v in metric.variables)
    assert list(HitsAtK(5).kernel.fields) == ["weight", "count", "invalid", "hits", "hits_mean", "hits_var"]


def test_update_update_reset_update():
    c1, c2, c3 = case(6, "index"), case(7, "labels"), case(6, "labels")
    metric = RankBasedMetrics(ks=KS)
    gmr = GeometricMeanRank()
    for y_true, s, w, _ in (c1, c2):
        metric.update_state(y_true, s, sample_weight=w)
        gmr.update_state(y_true, s, sample_weight=w)
    assert_close(as_floats(metric.result()), ref_of([c1, c2]))
    metric.reset_state()
    gmr.reset_state()
    empty = as_floats(metric.result())
    assert set(empty.values()) == {0.0}  # the Keras convention of an empty mean
    assert float(gmr.result()) == 0.0
    assert not any(np.any(keras.ops.convert_to_numpy(v)) for v in metric.variables)
    y_true, s, w, _ = c3
    metric.update_state(y_true, s, sample_weight=w)
    gmr.update_state(y_true, s, sample_weight=w)
    want = ref_of([c3])
    assert_close(as_floats(metric.result()), want)
    assert float(gmr.result()) == pytest.approx(want["geometric_mean_rank"], **TOL)


def test_failed_update_leaves_the_state_as_it_was():
    y_true, s, w, _ = case(9, "index")
    metric = RankBasedMetrics(ks=KS)
    metric.update_state(y_true, s, sample_weight=w)
    before = [keras.ops.convert_to_numpy(v).copy() for v in metric.variables]
    with pytest.raises(ValueError, match="sample_weight"):
        metric.update_state(y_true, s, sample_weight=np.ones(B + 1, "float32"))
    with pytest.raises(TypeError, match="integer indices"):
        metric.update_state(y_true["labels"].astype("float32"), s)
    with pytest.raises(ValueError, match="out of range"):
        metric.update_state(np.full(B, N, "int32"), s)
    bad = s.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        metric.update_state(np.zeros(B, "int32"), bad)
    with pytest.raises(ValueError, match="binary"):
        metric.update_state(np.full((B, N), 2.0, "float32"), s)
    for a, b_ in zip(before, (keras.ops.convert_to_numpy(v) for v in metric.variables), strict=True):
        np.testing.assert_array_equal(a, b_)


def test_constructor_errors():
    with pytest.raises(ValueError, match="RankBasedMetrics"):
        HitsAtK(k=[1, 3])
    with pytest.raises(ValueError, match="rank_type"):
        InverseHarmonicMeanRank(rank_type="average")
    with pytest.raises(ValueError, match="output"):
        GMR(output="mean")
    with pytest.raises(ValueError, match="ks"):
        RankBasedMetrics(ks=())


@pytest.mark.parametrize(
    "metric",
    [
        HitsAtK(k=3, rank_type="pessimistic", output="adjusted"),
        InverseHarmonicMeanRank(output="z", name="z_mrr_custom"),
        GMR(rank_type="optimistic"),
        ArithmeticMeanRank(output="expected"),
        RankBasedMetrics(ks=(2, 5), rank_type="optimistic", name="all", prefix="opt_"),
    ],
    ids=lambda m: type(m).__name__,
)
def test_get_config_round_trip(metric):
    config = metric.get_config()
    clone = type(metric).from_config(config)
    assert clone.get_config() == config
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
    assert type(again) is type(metric) and again.get_config() == config
    y_true, s, w, _ = case(10, "index")
    for m in (metric, clone):
        m.reset_state()
        m.update_state(y_true, s, sample_weight=w)
    a, b_ = metric.result(), clone.result()
    if isinstance(a, dict):
        assert sorted(a) == sorted(b_) and all(k.startswith("opt_") for k in a)
        a, b_ = as_floats(a), as_floats(b_)
    else:
        a, b_ = float(a), float(b_)
    assert a == b_


def test_default_names():
    assert HitsAtK(10).name == "hits_at_10"
    assert HitsAtK(3, output="z").name == "z_hits_at_3"
    assert InverseHarmonicMeanRank().name == "mrr" and GMR(output="adjusted").name == "adjusted_gmr"
    assert ArithmeticMeanRank().name == "mean_rank"
    assert RankBasedMetrics().name == "rank_based"


# ==========================================================================================
# tracing: result() runs inside the jitted train/test step on JAX and TensorFlow


def _jit(fn):
    """``jax.jit``; a ``tf.function`` graph (XLA is exercised by the model test, and its
    compilation is slow)."""
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    return fn


def traced_update(metric, monkeypatch):
    """An update that reads nothing back: ``jax.jit``, ``tf.function``, or on torch the
    forced no-read (accelerator) path."""
    if BACKEND == "jax":
        import jax

        step = jax.jit(metric.stateless_update_state)

        def update(y_true, y_pred, sample_weight=None):
            new = step([v.value for v in metric.variables], y_true, y_pred, sample_weight)
            for var, value in zip(metric.variables, new, strict=True):
                var.assign(value)

        return update
    if BACKEND == "tensorflow":
        return _jit(metric.update_state)
    monkeypatch.setattr(backends, "_READ_BACK", contextvars.ContextVar("read_back", default=False))
    return metric.update_state


def traced_result(metric):
    """``result()`` while tracing (torch: the device path, ``keras.ops`` on the state)."""
    if BACKEND == "jax":
        return as_floats(_jit(metric.stateless_result)([v.value for v in metric.variables]))
    if BACKEND == "tensorflow":
        return as_floats(_jit(metric.result)())
    kernel = metric.kernel
    return as_floats(kernel.select_value(kernel.compute(metric.totals(), keras_ops())))


def test_traced_update_and_result_give_the_eager_numbers(monkeypatch):
    cases = [case(11, "index"), case(12, "index")]
    metric = RankBasedMetrics(ks=KS, rank_type="realistic")
    update = traced_update(metric, monkeypatch)
    for y_true, s, w, _ in cases:
        update(y_true, s, w)
    want = ref_of(cases)
    assert_close(as_floats(metric.result()), want)
    got = traced_result(metric)
    assert_close(got, want, rel=1e-4, abs=1e-5)  # float32 formulas where x64 is off
    assert got["geometric_mean_rank_error_bound"] < GMR_BOUND
    # a NaN score among the candidates cannot raise under jit: every value but count is NaN
    y_true, s, w, _ = case(13, "index")
    s[2, :] = np.nan
    update(y_true, s, w)
    for got in (as_floats(metric.result()), traced_result(metric)):
        assert np.isnan(got["hits_at_1"]) and np.isnan(got["z_geometric_mean_rank"])
        assert got["count"] > 0
    metric.reset_state()
    assert set(traced_result(metric).values()) == {0.0}


def test_binary_labels_under_jit_ask_for_indices(monkeypatch):
    y_true, s, _, _ = case(14, "labels")
    metric = HitsAtK(3)
    if BACKEND == "torch":  # no jit here (torch.compile takes minutes): the kernel as traced
        tensors = [keras.ops.convert_to_tensor(a) for a in (s, y_true["labels"], y_true["mask"])]
        traced = Context(type(keras_ops())(eager=False), read_back=False)
        update = lambda *_: metric.kernel.batch_sums(traced, *tensors)  # noqa: E731
    else:
        update = traced_update(metric, monkeypatch)
    with pytest.raises(ValueError, match=r"under jit pass the index of the true candidate"):
        update(y_true, s)


# ==========================================================================================
# in a model


ITEMS = 20  # the model test's catalogue: each candidate is an item id


def tiny_model():
    """Scores = a trainable ``Embedding`` lookup of each candidate's item id: a gather, so a
    row's scores are the same float32 values whatever the batch size, thread count or BLAS
    path. (A ``Dense`` over features was not: on some CPUs a row's outputs differed by up to
    3e-8 between evaluate's and predict's batch sizes, which broke the ties below.)"""
    inp = keras.Input((N,), dtype="int32")
    out = keras.layers.Reshape((N,))(keras.layers.Embedding(ITEMS, 1, name="item_score")(inp))
    return keras.Model(inp, out)


def model_data(seed, b):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, ITEMS, (b, N)).astype("int32")
    x[:, -2:] = x[:, :2]  # duplicated candidates: the same item, so exactly tied scores
    return x, rng.integers(0, N, b).astype("int32"), rng.choice([0.5, 1.0, 2.0], b).astype("float32")


def test_compiled_model_reports_the_metrics_of_predict():
    """``compile(metrics=...)`` with jit on JAX and TensorFlow (XLA); the dict of
    ``RankBasedMetrics`` is flattened into the logs, ``val_``-prefixed for validation data.
    One batch size throughout: fit's validation and evaluate share one compiled test step.
    The exact ties are in the data the metrics receive: duplicated item ids, looked up."""
    keras.utils.set_random_seed(0)
    x, y, _ = model_data(0, 40)
    xv, yv, wv = model_data(1, 30)
    model = tiny_model()
    model.compile(
        "sgd",
        loss=lambda yt, yp: keras.ops.mean(yp * yp),
        metrics=[RankBasedMetrics(ks=KS), HitsAtK(3, rank_type="pessimistic", name="hits3_pess")],
        weighted_metrics=[InverseHarmonicMeanRank(rank_type="optimistic", name="w_mrr")],
        jit_compile=BACKEND != "torch",  # torch.compile takes minutes on a small CPU box
    )
    history = model.fit(x, y, batch_size=10, epochs=1, validation_data=(xv, yv, wv), verbose=0)
    logs = model.evaluate(xv, yv, sample_weight=wv, batch_size=10, verbose=0, return_dict=True)
    pred = np.asarray(model.predict(xv, batch_size=30, verbose=0), dtype=np.float64)
    # the scores any step computes: the trained table's entries, looked up (no arithmetic);
    # so the metrics in evaluate (batches of 10) saw these floats, with the ties exact
    table = keras.ops.convert_to_numpy(model.get_layer("item_score").embeddings)[:, 0]
    np.testing.assert_array_equal(pred, table[xv])
    assert np.array_equal(pred[:, -2:], pred[:, :2]) and len(np.unique(table)) == ITEMS
    assert any(o < p for o, p, _, _ in naive_tasks(pred, yv))  # some true candidates are tied
    want = reference(naive_tasks(pred, yv), "realistic")
    assert_close(logs, want)
    pess = reference(naive_tasks(pred, yv), "pessimistic")
    assert logs["hits3_pess"] == pytest.approx(pess["hits_at_3"], **TOL)
    weighted = reference(naive_tasks(pred, yv, weights=wv), "optimistic")
    assert logs["w_mrr"] == pytest.approx(weighted["inverse_harmonic_mean_rank"], **TOL)
    for key in ("hits_at_1", "z_inverse_harmonic_mean_rank", "count", "hits3_pess", "w_mrr"):
        assert history.history[f"val_{key}"][-1] == pytest.approx(logs[key], **TOL), key
    # the metric applied to predict gives the same numbers
    metric = RankBasedMetrics(ks=KS)
    metric.update_state(yv, pred.astype("float32"))
    assert_close(as_floats(metric.result()), want)


# ==========================================================================================
# float32 state (JAX without x64; asked for explicitly here on every backend)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3, 5e3])
def test_float32_state_keeps_the_gmr_expectation_over_weight_scales(scale):
    """List weights of every scale from about 1e-4 to 1e4: the GMR expectation's state holds
    powers of the weights (up to w^(M+1)), so float32 state keeps fewer of them
    (``FLOAT32_GMR_ORDER``); every value still matches PyKEEN on the naive ranks, whose values
    do not depend on the weights' scale. (With the float64 order 20, weights above about 68
    overflowed float32.)"""
    rng = np.random.default_rng(21)
    cases = []
    for seed in (15, 16):
        y_true, s, _, ref = case(seed, "index", weights=False)
        cases.append((y_true, s, (rng.uniform(0.5, 2.0, B) * scale).astype("float32"), ref))
    metric = RankBasedMetrics(ks=KS, state_dtype="float32")
    gmr = GMR(output="z", state_dtype="float32")
    assert metric.state_dtype == gmr.state_dtype == "float32"
    assert metric.kernel.gmr_order == gmr.kernel.gmr_order == rank_based.FLOAT32_GMR_ORDER
    assert {keras.backend.standardize_dtype(v.dtype) for v in metric.variables} == {"float32"}
    for y_true, s, w, _ in cases:
        metric.update_state(y_true, s, sample_weight=w)
        gmr.update_state(y_true, s, sample_weight=w)
    got = as_floats(metric.result())
    want = ref_of(cases)
    assert_close(got, want)
    # the reported truncation bound is conservative: about 8e-4 at order 8 with 32 tasks (it
    # falls like n^-8: 2e-7 at 100 tasks), while the values above agree with PyKEEN to float32
    assert 0.0 <= got["geometric_mean_rank_error_bound"] < 2e-3
    assert float(gmr.result()) == pytest.approx(want["z_geometric_mean_rank"], **TOL)


def test_state_dtype_argument():
    default = RankBasedMetrics()
    assert default.state_dtype == ("float64" if X64 else "float32")
    assert default.kernel.gmr_order == (rank_based.DEFAULT_GMR_ORDER if X64 else rank_based.FLOAT32_GMR_ORDER)
    assert default.get_config()["state_dtype"] is None  # a saved model takes the loading backend's
    for cls in (HitsAtK, InverseHarmonicMeanRank, GMR, ArithmeticMeanRank, RankBasedMetrics):
        metric = cls(state_dtype="float32")
        assert metric.get_config()["state_dtype"] == "float32"
        assert type(metric).from_config(metric.get_config()).state_dtype == "float32"
        names = [v.name for v in metric.variables]
        assert names == list(metric.kernel.fields) + [f"{f}_compensation" for f in metric.kernel.fields]
    with pytest.raises(ValueError, match=r"state_dtype must be .*got 'float16'"):
        GMR(state_dtype="float16")
    if X64:
        assert HitsAtK(state_dtype="float64").state_dtype == "float64"
    else:
        with pytest.raises(ValueError, match=r"state_dtype='float64' is not available.*jax_enable_x64"):
            HitsAtK(state_dtype="float64")
