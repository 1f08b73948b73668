"""Flat items with a query id per item (``query_ids=True``), grouped into lists per batch:
through ``model.compile`` + ``evaluate`` / ``fit`` (compiled where the backend compiles) and
``update_state``, against keras-rs's one-list-at-a-time reference on the padded lists that an
independent numpy grouping (a Python loop over the ids) builds from the same items."""

from __future__ import annotations

import math

import keras
import krs_reference as ref
import numpy as np
import pytest
from keras import ops as K

from rankstream.adapters.keras_inputs import query_inputs
from rankstream.core.backends.keras_grouping import group_query_items
from rankstream.keras import MAP, MRR, NDCG, ListMetrics, PrecisionAtK, RecallAtK

BACKEND = keras.backend.backend()
# jit_compile=True on torch means torch.compile (inductor), minutes to build on a small CPU box:
# torch runs the eager path; JAX (jax.jit) and TensorFlow (a graph, and XLA) the static one.
JIT = {"torch": [False], "jax": [True], "tensorflow": [False, True]}[BACKEND]

# ragged queries: their sizes sum to 10 after the 3rd, 20 after the 5th, 30 after the 8th and
# 40 after the 10th, so batches of 10, 20 or 30 items (the last one partial) hold whole queries
SIZES = [3, 5, 2, 4, 6, 1, 7, 2, 6, 4]
IDS = np.repeat(np.array([17, 4, 9, 23, 0, 11, 5, 8, 31, 2]), SIZES)
N = IDS.shape[0]


def items(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores (distinct within each query, exact in float32) and graded labels, -1 padding
    included; one query without a relevant item, one of a single item."""
    rng = np.random.default_rng(seed)
    scores = (rng.permutation(N) / 8.0).astype("float32")
    labels = rng.integers(-1, 4, N).astype("float32")
    labels[IDS == 4] = np.minimum(labels[IDS == 4], 0)
    return scores, labels


def padded(ids, scores, labels, weights=None):
    """The numpy grouping the tests trust: one row per distinct id (a Python loop), the items
    in their order of arrival, padded with label -1 (keras-rs's padding) and weight 0."""
    uniq = list(dict.fromkeys(np.asarray(ids).tolist()))
    width = max(int(np.sum(ids == q)) for q in uniq)
    s, y, w = np.zeros((len(uniq), width)), np.full((len(uniq), width), -1.0), np.zeros((len(uniq), width))
    for r, q in enumerate(uniq):
        where = np.flatnonzero(ids == q)
        s[r, : where.size], y[r, : where.size] = scores[where], labels[where]
        w[r, : where.size] = 1.0 if weights is None else weights[where]
    return s, y, (None if weights is None else w)


def reference(metric, ids, scores, labels, k=None, weights=None):
    """keras-rs's reference (nDCG, MAP, HitRate, R-Precision) on the numpy-padded lists."""
    s, y, w = padded(ids, scores, labels, weights)
    return ref.keras_rs_mean(metric, s, y, k, sample_weight=w)


def batched_reference(metric, ids, scores, labels, k, weights, batch_size):
    """keras-rs's reference summed over batches: its list weights depend on the batch (a list
    without a relevant item weighs the batch's mean list weight), so they are read per batch."""
    num = den = 0.0
    for a in range(0, len(ids), batch_size):
        part = slice(a, a + batch_size)
        s, y, w = padded(ids[part], scores[part], labels[part], weights[part])
        n, d = ref.keras_rs_sums(metric, s, y, k, sample_weight=w)
        num, den = num + n, den + d
    return num / den


def padded_list_metric(metric, ids, scores, labels, weights=None):
    """The list metric (query_ids off) on the numpy-padded lists: ``metric`` a fresh metric."""
    s, y, w = padded(ids, scores, labels, weights)
    metric.update_state(y.astype("float32"), s.astype("float32"), sample_weight=w)
    return float(metric.result())


def identity_model():
    """Scores = the one input feature, exactly (a frozen unit Dense without bias)."""
    inp = keras.Input((1,))
    layer = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", trainable=False)
    return keras.Model(inp, layer(inp))


def labels_mse(y_true, y_pred):
    """A pointwise loss reading the labels of the ``(num_items, 2)`` layout."""
    return K.mean(K.square(K.cast(y_true[:, :1], y_pred.dtype) - y_pred))


def metrics():
    kw = {"query_ids": True, "shuffle_ties": False, "max_queries": 8, "max_query_length": 8}
    return [NDCG(k=3, **kw), ListMetrics(["map", "hit_rate@2", "recall@2", "mrr"], prefix="c_", **kw)]


@pytest.mark.parametrize("jit", JIT)
@pytest.mark.parametrize("batch_size", [10, 30])  # 30: a partial last batch of 10
def test_evaluate_equals_the_padded_lists(jit, batch_size):
    scores, labels = items(0)
    y = np.stack([labels, IDS.astype("float32")], axis=1)  # labels, then query ids
    model = identity_model()
    model.compile(loss=labels_mse, metrics=metrics(), jit_compile=jit)
    logs = model.evaluate(scores[:, None], y, batch_size=batch_size, verbose=0, return_dict=True)
    assert logs["ndcg@3"] == pytest.approx(reference("ndcg", IDS, scores, labels, 3), rel=1e-5)
    assert logs["c_map"] == pytest.approx(reference("map", IDS, scores, labels), rel=1e-5)
    assert logs["c_hit_rate@2"] == pytest.approx(reference("hit_rate", IDS, scores, labels, 2), rel=1e-5)
    recall = padded_list_metric(RecallAtK(k=2, shuffle_ties=False), IDS, scores, labels)
    mrr = padded_list_metric(MRR(shuffle_ties=False), IDS, scores, labels)
    assert logs["c_recall@2"] == pytest.approx(recall, rel=1e-5)
    assert logs["c_mrr"] == pytest.approx(mrr, rel=1e-5)


@pytest.mark.parametrize("jit", JIT)
def test_weighted_evaluate_with_integer_ids(jit):
    """Per-item sample_weight (a weight per query, repeated on its items) through
    ``weighted_metrics``; integer ``y_true`` keeps ids exact beyond float32's 2^24."""
    scores, labels = items(1)
    big = IDS.astype("int64") + 2**26
    w = np.repeat(np.linspace(0.5, 2.0, len(SIZES)), SIZES).astype("float32")
    y = np.stack([labels.astype("int64"), big], axis=1)
    model = identity_model()
    kw = {"query_ids": True, "shuffle_ties": False, "max_queries": 4, "max_query_length": 7}
    model.compile(
        loss=labels_mse, weighted_metrics=[ListMetrics(["ndcg@4", "precision@2"], **kw)], jit_compile=jit
    )
    logs = model.evaluate(scores[:, None], y, sample_weight=w, batch_size=10, verbose=0, return_dict=True)
    assert logs["ndcg@4"] == pytest.approx(batched_reference("ndcg", big, scores, labels, 4, w, 10), rel=1e-5)
    precision = PrecisionAtK(k=2, shuffle_ties=False)
    for a in range(0, N, 10):  # the padded-list metric, batch by batch
        padded_list_metric(precision, big[a : a + 10], scores[a : a + 10], labels[a : a + 10], w[a : a + 10])
    assert logs["precision@2"] == pytest.approx(float(precision.result()), rel=1e-5)


class Queries(keras.utils.PyDataset):
    """Batches of whole queries, ``x[cuts[i]:cuts[i + 1]]``."""

    def __init__(self, x, y, cuts):
        super().__init__()
        self.x, self.y, self.cuts = x, y, cuts

    def __len__(self):
        return len(self.cuts) - 1

    def __getitem__(self, i):
        a, b = self.cuts[i], self.cuts[i + 1]
        return self.x[a:b], self.y[a:b]


@pytest.mark.parametrize("jit", JIT[-1:])
def test_fit_then_evaluate_uneven_batches_of_whole_queries(jit):
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(N, 3)).astype("float32")
    _, labels = items(2)
    y = np.stack([labels, IDS.astype("float32")], axis=1)
    ends = np.cumsum(SIZES)
    cuts = [0, int(ends[2]), int(ends[7]), N]  # 10, 20 and 10 items: 3, 5 and 2 queries
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Dense(1)(inp))
    kw = {"query_ids": True, "shuffle_ties": False, "max_queries": 5, "max_query_length": 7}
    model.compile("sgd", labels_mse, metrics=[ListMetrics(["ndcg@3", "map"], **kw)], jit_compile=jit)
    history = model.fit(Queries(x, y, cuts), epochs=2, verbose=0)
    assert len(history.history["ndcg@3"]) == 2
    logs = model.evaluate(Queries(x, y, cuts), verbose=0, return_dict=True)
    pred = model.predict(x, batch_size=N, verbose=0)[:, 0].astype(np.float64)
    for q in np.unique(IDS):  # no near ties within a query: the order cannot depend on the batch
        s = np.sort(pred[IDS == q])
        assert s.size < 2 or np.diff(s).min() > 1e-5
    assert logs["ndcg@3"] == pytest.approx(reference("ndcg", IDS, pred, labels, 3), rel=1e-5, abs=1e-6)
    assert logs["map"] == pytest.approx(reference("map", IDS, pred, labels), rel=1e-5, abs=1e-6)


def test_update_state_groups_any_order_within_a_batch():
    """Eagerly, ids in any order (a query's items need not be adjacent), a mask, and two
    batches of whole queries equal to one; without bounds and with them."""
    scores, labels = items(5)
    order = np.random.default_rng(6).permutation(N)
    ids, s, y = IDS[order], scores[order], labels[order]
    mask = np.ones(N, bool)
    mask[::7] = False
    expected = reference("ndcg", ids[mask], s[mask], y[mask], 3)
    one = NDCG(k=3, query_ids=True, shuffle_ties=False)
    one.update_state({"labels": y, "indexes": ids, "mask": mask}, s)
    assert float(one.result()) == pytest.approx(expected, rel=1e-5)
    two = NDCG(k=3, query_ids=True, shuffle_ties=False, max_queries=10, max_query_length=7)
    first = np.isin(ids, [17, 4, 9, 23])
    for part in (first, ~first):
        two.update_state({"labels": y[part], "indexes": ids[part], "mask": mask[part]}, s[part][:, None])
    assert float(two.result()) == pytest.approx(expected, rel=1e-5)


def test_reported_quantities_equal_the_padded_lists():
    """``confidence`` (stderr, interval, count) through query ids: the keys and numbers of the
    list metric on the same lists padded by numpy."""
    scores, labels = items(12)
    kw = {"shuffle_ties": False, "confidence": 0.95}
    m = ListMetrics(["ndcg@3", "map"], query_ids=True, max_queries=10, max_query_length=7, **kw)
    m.update_state({"labels": labels, "indexes": IDS}, scores)
    s, y, _ = padded(IDS, scores, labels)
    lists = ListMetrics(["ndcg@3", "map"], **kw)
    lists.update_state(y.astype("float32"), s.astype("float32"))
    got, want = m.result(), lists.result()
    assert sorted(got) == sorted(want) and "ndcg@3_stderr" in got
    for key in want:
        assert float(got[key]) == pytest.approx(float(want[key]), rel=1e-5), key


def test_ties_first_keep_the_order_of_arrival():
    """Tied scores rank the earlier item first (a stable grouping), ids out of order."""
    ids = np.array([2, 1, 2, 1, 2])
    s = np.array([0.5, 0.5, 0.5, 0.5, 0.5], "float32")
    y = np.array([0.0, 1.0, 1.0, 0.0, 0.0], "float32")
    m = MAP(k=1, query_ids=True, shuffle_ties=False)
    m.update_state({"labels": y, "indexes": ids}, s)
    # query 2: items (0, 1, 0) -> top-1 is the first, not relevant: 0; query 1: (1, 0) -> 1
    assert float(m.result()) == pytest.approx(0.5)


# how evaluate runs the metric: eagerly (run_eagerly=True), or compiled where the backend compiles
MODES = ["eager"] + [f"jit={j}" for j in JIT if BACKEND != "torch"]


def compile_for(model, mode, metric):
    jit = mode == "jit=True"
    model.compile(loss=labels_mse, metrics=[metric], run_eagerly=mode == "eager", jit_compile=jit)


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_over_a_bound_raises_or_is_counted_never_cut(mode):
    """A batch with more queries than ``max_queries``: eagerly a ValueError naming the bound;
    in a compiled step it is left out and counted as invalid, so the result is NaN, never a
    value over some of its items."""
    scores, labels = items(7)
    y = np.stack([labels, IDS.astype("float32")], axis=1)
    model = identity_model()
    metric = NDCG(k=3, query_ids=True, max_queries=2, max_query_length=8)
    compile_for(model, mode, metric)
    if mode == "eager":
        with pytest.raises(ValueError, match=r"a batch of 3 queries .* exceeds max_queries=2;"):
            model.evaluate(scores[:, None], y, batch_size=10, verbose=0)
        return
    logs = model.evaluate(scores[:, None], y, batch_size=10, verbose=0, return_dict=True)
    assert math.isnan(logs["ndcg@3"])
    assert metric.invalid_count == 2  # the 1st and 3rd batches of 10 items hold 3 queries


@pytest.mark.parametrize("mode", MODES)
def test_bounds_are_needed_only_in_a_compiled_step(mode):
    scores, labels = items(9)
    y = np.stack([labels, IDS.astype("float32")], axis=1)
    model = identity_model()
    compile_for(model, mode, NDCG(query_ids=True, shuffle_ties=False))
    if mode == "eager":  # any number of queries, of any length
        logs = model.evaluate(scores[:, None], y, batch_size=N, verbose=0, return_dict=True)
        assert logs["ndcg"] == pytest.approx(reference("ndcg", IDS, scores, labels), rel=1e-5)
        return
    with pytest.raises(ValueError, match=r"need static bounds: give max_queries"):
        model.evaluate(scores[:, None], y, batch_size=10, verbose=0)


def test_static_grouping_flags_what_it_cannot_hold():
    """The compiled steps' grouping, run here on every backend: ``(max_queries, max_len)``
    lists equal the numpy grouping's (padding rows empty), grouped ids take no sort, and a
    bound exceeded raises the flag rather than cutting items silently."""
    scores, labels = items(10)
    ids = IDS[:20]
    order = np.random.default_rng(11).permutation(20)
    for perm in (np.arange(20), order):  # grouped, then any order (the sorted branch)
        (s, y), mask, over, shape = group_query_items(
            K.convert_to_tensor(ids[perm]),
            (K.convert_to_tensor(scores[perm]), K.convert_to_tensor(labels[perm])),
            7,
            6,
            True,
        )
        assert shape == (7, 6) and not bool(K.convert_to_numpy(over))
        s, y, mask = (np.asarray(K.convert_to_numpy(a)) for a in (s, y, mask))
        assert mask.sum() == 20 and not mask[5:].any()  # 5 queries: rows 5, 6 empty
        ps, py, _ = padded(ids[perm], scores[perm], labels[perm])
        got = sorted(map(tuple, np.concatenate([np.where(mask, s, 0.0), np.where(mask, y, -1.0)], 1)[:5]))
        assert got == sorted(map(tuple, np.concatenate([ps, py], 1)))
    for bounds in ((4, 6), (5, 5)):  # 5 queries, the longest of 6 items
        *_, over, _ = group_query_items(
            K.convert_to_tensor(ids), (K.convert_to_tensor(scores[:20]),), *bounds, True
        )
        assert bool(K.convert_to_numpy(over)), bounds


def test_inexact_float_ids_are_flagged_in_a_compiled_step():
    """What a compiled step reads of float ids that are not exact integers: the flag that
    leaves the batch out (eagerly the same ids raise, below)."""
    y = np.array([[1, 0.5], [0, 0.5], [1, 2**25 + 2], [0, 2]], "float32")
    for rows, flagged in ((slice(0, 2), True), (slice(2, 3), True), (slice(3, 4), False)):
        *_, bad = query_inputs(
            K.convert_to_tensor(y[rows]), np.zeros(y[rows].shape[0], "float32"), None, "float32", False
        )
        assert bool(K.convert_to_numpy(bad)) is flagged, rows


def test_eager_bounds_raise_and_leave_the_state():
    scores, labels = items(8)
    m = NDCG(query_ids=True, max_queries=3, max_query_length=5, shuffle_ties=False)
    m.update_state({"labels": labels[:10], "indexes": IDS[:10]}, scores[:10])
    before = m.state_dict()["sums"]
    with pytest.raises(ValueError, match=r"6 items.*max_query_length=5"):
        m.update_state({"labels": labels[10:20], "indexes": IDS[10:20]}, scores[10:20])
    with pytest.raises(ValueError, match=r"4 queries.*max_queries=3"):
        m.update_state({"labels": labels[:14], "indexes": IDS[:14]}, scores[:14])
    after = m.state_dict()["sums"]
    assert all(np.array_equal(before[f], after[f]) for f in before)
    assert float(m.result()) == pytest.approx(reference("ndcg", IDS[:10], scores[:10], labels[:10]), rel=1e-5)


def test_bad_inputs_name_the_argument():
    m = NDCG(query_ids=True)
    s = np.zeros(4, "float32")
    with pytest.raises(ValueError, match=r"y_true must be \(num_items, 2\).*got shape \(4, 3\)"):
        m.update_state(np.zeros((4, 3), "float32"), s)
    with pytest.raises(ValueError, match=r'"labels" and "indexes".*got keys \[\'ids\', \'labels\'\]'):
        m.update_state({"labels": s, "ids": s}, s)
    with pytest.raises(ValueError, match=r"y_pred must be flat items.*got shape \(2, 2\)"):
        m.update_state({"labels": s, "indexes": np.arange(4)}, s.reshape(2, 2))
    with pytest.raises(ValueError, match=r'y_true\["indexes"\] must have shape \(4,\).*got shape \(3,\)'):
        m.update_state({"labels": s, "indexes": np.arange(3)}, s)
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(4,\)"):
        m.update_state({"labels": s, "indexes": np.arange(4)}, s, sample_weight=np.ones(5))
    with pytest.raises(ValueError, match=r"whole-number query ids.*\[0\.5"):
        m.update_state(np.array([[1, 0.5], [0, 0.5], [1, 1], [0, 2]], "float32"), s)
    with pytest.raises(ValueError, match=r"at most 16777216 in absolute value in float32"):
        m.update_state(np.array([[1, 2**25 + 2], [0, 2**25 + 2], [1, 1], [0, 2]], "float32"), s)
    with pytest.raises(TypeError, match=r'y_true\["indexes"\] must hold real numbers'):
        m.update_state({"labels": s, "indexes": np.arange(4) * 1j}, s)
    assert float(m.state_dict()["sums"]["count"]) == 0


def test_bad_settings_name_the_argument():
    for mode in ("contiguous", "sorted", "any"):  # the modes that keep more than sums
        with pytest.raises(ValueError, match=rf"query_mode='{mode}' is not available in Keras"):
            NDCG(query_ids=True, query_mode=mode)
    with pytest.raises(ValueError, match=r"query_mode must be one of"):
        MAP(query_ids=True, query_mode="open")
    with pytest.raises(ValueError, match=r"max_queries must be a positive int or None, got 0"):
        ListMetrics(["map"], query_ids=True, max_queries=0)
    with pytest.raises(ValueError, match=r"pass query_ids=True too"):
        NDCG(max_query_length=4)
    with pytest.raises(TypeError, match=r"query_ids must be a bool, got 'yes'"):
        NDCG(query_ids="yes")


def test_config_round_trip_keeps_the_query_settings():
    m = ListMetrics(["ndcg@3"], query_ids=True, max_queries=5, max_query_length=9)
    config = m.get_config()
    assert {k: config[k] for k in ("query_ids", "max_queries", "max_query_length", "query_mode")} == {
        "query_ids": True,
        "max_queries": 5,
        "max_query_length": 9,
        "query_mode": "whole",
    }
    again = ListMetrics.from_config(config)
    assert again.max_queries == 5 and again.query_ids is True
    ndcg = NDCG.from_config(NDCG(k=3, query_ids=True, max_queries=2, max_query_length=4).get_config())
    assert (ndcg.k, ndcg.query_ids, ndcg.max_queries, ndcg.max_query_length) == (3, True, 2, 4)
    assert "query_ids" not in NDCG().get_config()  # lists: the config as it always was
