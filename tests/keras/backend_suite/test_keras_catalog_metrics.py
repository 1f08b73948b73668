"""``rankstream.keras.CatalogMetrics`` (the list metrics over a whole catalog, counted chunk by
chunk) against the dense metrics on the materialised score matrix: ``rankstream.keras.ListMetrics``
(itself checked against keras-rs, ranx and torchmetrics elsewhere in the suite) given the
``(queries, N)`` scores ``q . E^T`` and labels holding each query's grades at its relevant ids
(0 elsewhere), under the same tie policy. Embeddings are multiples of 1/2 with small numerators:
every score is exact in float32 and ties (between relevant items, across the k-th place, with
items of lower and higher index) are everywhere. Eagerly and inside ``compile`` + ``fit`` /
``evaluate`` of a two-tower model (compiled steps on JAX and TensorFlow).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keras import ops as K

from rankstream.adapters.keras_metrics import COLLECTION_DEFAULTS, keras_rs_conventions
from rankstream.core.lists.collection import ListMetrics as ListMetricsKernel
from rankstream.keras import CatalogMetrics, ListMetrics

BACKEND = keras.backend.backend()
# catalog, dimensions, queries, relevant slots per query; every eager update is (B // 2, M): on
# JAX each new shape compiles each eager op anew
N, D, B, M = 9, 3, 6, 3
H = B // 2
BASES = ["ndcg", "dcg", "recall", "precision", "map", "mrr", "hit_rate", "f1", "rbp"]


def quantised(rng, *shape):
    return (rng.integers(-2, 3, shape) / 2).astype("float32")


def relevant_ids(rng, b, m=M, n=N):
    """(b, m) distinct ids per row, -1 padded, 0 to m of them (rows without one included)."""
    ids = np.full((b, m), -1, "int32")
    for i in range(b):
        k = rng.integers(0, m + 1)
        ids[i, :k] = rng.choice(n, k, replace=False)
        rng.shuffle(ids[i])
    return ids


def dense_labels(ids, grades=None, n=N):
    labels = np.zeros((ids.shape[0], n), "float32")
    for i, j in zip(*np.nonzero(ids >= 0), strict=True):
        labels[i, ids[i, j]] = 1.0 if grades is None else grades[i, j]
    return labels


def values(result):
    return {key: float(K.convert_to_numpy(v)) for key, v in result.items()}


def dense(names, ties, batches, empty="zero"):
    """The dense metric over ``[(scores, labels, weights), ...]``: the kernel of
    ``rankstream.keras.ListMetrics`` (keras-rs's conventions, each metric's Keras defaults) run
    on the host (numpy) on the materialised matrix, batch by batch, as the Keras metric runs it
    (tested equal to it across the suite; numpy here keeps JAX from compiling every shape)."""
    kernel = ListMetricsKernel(names, COLLECTION_DEFAULTS, empty=empty, **keras_rs_conventions(False, ties))
    total = None
    for scores, labels, w in batches:
        sums = kernel.batch_sums(None, scores.astype("float64"), labels.astype("float64"), None, w)
        sums = {f: np.asarray(v, np.float64) for f, v in sums.items()}
        total = sums if total is None else {f: total[f] + sums[f] for f in sums}
    return {key: float(v) for key, v in kernel.select(kernel.compute(total, np)).items()}


def dense_keras(names, ties, batches, **kw):
    """``rankstream.keras.ListMetrics`` itself (an independent path: the scores materialised,
    selected and ranked in the dense kernel) over ``[(scores, labels, weights), ...]``."""
    metric = ListMetrics(names, shuffle_ties=False, ties=ties, **kw)
    for scores, labels, w in batches:
        metric.update_state(labels, scores, sample_weight=w)
    return metric


def assert_close(got, want, tol=2e-5):
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=tol), (key, got[key], want[key])


# ------------------------------------------------------------------------------------------
# eager: equal to the dense metric


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, N + 1),
    chunk=st.sampled_from([1, 7, N]),
    ties=st.sampled_from(["first", "expected"]),
    graded=st.booleans(),
    weighted=st.booleans(),
)
def test_equals_dense_metrics(seed, k, chunk, ties, graded, weighted):
    """Every metric at a k from 1 to past the catalog (and nDCG, MAP over the whole catalog),
    grades (whole and half) or binary, per-query weights with zeros, chunk sizes 1, 7 and the
    whole catalog; one update of ``H`` queries (several updates: the tests below)."""
    rng = np.random.default_rng(seed)
    items, queries = quantised(rng, N, D), quantised(rng, H, D)
    ids = relevant_ids(rng, H)
    grades = (rng.integers(1, 5, ids.shape) / 2).astype("float32") if graded else None
    w = rng.integers(0, 3, H).astype("float32") if weighted else None
    names = [f"{b}@{k}" for b in BASES] + ["r_precision", "ndcg", "map", "auc", "gauc"]
    names += [f"err@{k}"] if ties == "first" else []  # ERR has no tie-expected form
    metric = CatalogMetrics(names, candidates=items, chunk_size=chunk, ties=ties)
    y = ids if grades is None else np.stack([ids.astype("float32"), grades], axis=-1)
    metric.update_state(y, queries, w)
    want = dense(names, ties, [(queries @ items.T, dense_labels(ids, grades), w)])
    assert_close(values(metric.result()), want)


def naive_first(scores, relevant, k):
    """Recall@k, RR@k and HR@k one query at a time, ranked by score with the lower index first
    (a stable sort), averaged over every query (keras-rs's ``empty="zero"``, unit weights)."""
    out = np.zeros(3)
    for row, rel in zip(scores, relevant, strict=True):
        ranked = rel[np.argsort(-row, kind="stable")][:k]
        hits, first = ranked.sum(), np.flatnonzero(ranked)
        out += [hits / max(rel.sum(), 1), 1.0 / (first[0] + 1) if first.size else 0.0, float(hits > 0)]
    return dict(zip([f"recall@{k}", f"mrr@{k}", f"hit_rate@{k}"], out / len(scores), strict=True))


def test_every_k_both_ties_and_empty_policies():
    """Every k from 1 to N + 1 for every metric at once, on one tie-heavy batch (checked to hold
    relevant items tied with each other and with items across the k-th place), both tie
    policies, ``empty="skip"`` too; the dict form of ``y_true``."""
    rng = np.random.default_rng(7)
    items, queries = quantised(rng, N, D), quantised(rng, B, D)
    items[3] = items[5]  # two items with equal scores for every query
    ids = relevant_ids(rng, B)
    ids[0, :2] = [3, 5]  # relevant items tied with each other
    grades = (rng.integers(1, 5, ids.shape) / 2).astype("float32")
    scores = queries @ items.T
    relevant_scores = np.take_along_axis(scores, np.maximum(ids, 0), axis=1)
    tied = (scores[:, None, :] == relevant_scores[:, :, None]).sum(-1) - 1
    assert (tied[ids >= 0] > 0).mean() > 0.3  # ties everywhere
    names = [f"{b}@{k}" for b in BASES for k in range(1, N + 2)]
    labels = dense_labels(ids, grades)
    for ties, empty in (("first", "zero"), ("expected", "skip")):
        # ERR has no tie-expected form
        these = names + ([f"err@{k}" for k in range(1, N + 2)] if ties == "first" else [])
        metric = CatalogMetrics(these, candidates=items, chunk_size=7, ties=ties, empty=empty)
        for part in (slice(0, H), slice(H, B)):
            metric.update_state({"ids": ids[part], "grades": grades[part]}, queries[part])
        want = dense(these, ties, [(scores[p], labels[p], None) for p in (slice(0, H), slice(H, B))], empty)
        got = values(metric.result())
        assert_close(got, want)
        assert len({round(v, 6) for v in want.values()}) > 20  # not a degenerate batch
        if ties == "first":  # and a reference outside rankstream
            for k in range(1, N + 2):
                naive = naive_first(scores, labels >= 1.0, k)
                assert_close({key: got[key] for key in naive}, naive)


def test_scores_held_one_chunk_at_a_time(monkeypatch):
    """The catalog is scored one (batch, chunk) block at a time, never (batch, N)."""
    rng = np.random.default_rng(1)
    items, queries = quantised(rng, N, D), quantised(rng, H, D)
    seen = []
    matmul = K.matmul

    def recording(a, b):
        out = matmul(a, b)
        seen.append(tuple(out.shape))
        return out

    monkeypatch.setattr(K, "matmul", recording)
    CatalogMetrics(["ndcg@5"], candidates=items, chunk_size=4).update_state(relevant_ids(rng, H), queries)
    assert seen and all(s[0] == H and s[1] <= 4 for s in seen), seen


def test_empty_batch_config_and_unsupported():
    rng = np.random.default_rng(2)
    items = quantised(rng, N, D)
    metric = CatalogMetrics(["ndcg@3", "mrr"], candidates=items, chunk_size=7, ties="first", prefix="c/")
    metric.update_state(np.zeros((0, M), "int32"), np.zeros((0, D), "float32"))
    assert values(metric.result()) == {"c/ndcg@3": 0.0, "c/mrr": 0.0}
    config = metric.get_config()
    assert config["metrics"] == ["ndcg@3", "mrr"] and config["chunk_size"] == 7 and config["ties"] == "first"
    again = CatalogMetrics.from_config({**config, "candidates": items})
    assert again.get_config() == config
    assert keras.saving.get_registered_object("rankstream>CatalogMetrics") is CatalogMetrics
    with pytest.raises(TypeError, match="candidates"):
        CatalogMetrics.from_config(config)
    with pytest.raises(ValueError, match="ties must be one of"):
        CatalogMetrics(["ndcg@3"], candidates=items, ties="random")
    with pytest.raises(ValueError, match="ERR has no exact tie-expected form"):
        CatalogMetrics(["err@3"], candidates=items, ties="expected")
    with pytest.raises(ValueError, match="chunk_size"):
        CatalogMetrics(["ndcg@3"], candidates=items, chunk_size=0)


def test_every_empty_batch_is_a_no_op():
    """Between two real batches, every empty form (ids and embeddings of 0 rows, the dict form
    with grades, an empty weight vector) leaves every variable bitwise as it was, and the result
    is the two real batches' (the generic empty-batch test of the suite covers the metrics that
    take scores and labels)."""
    rng = np.random.default_rng(6)
    items = quantised(rng, N, D)
    real = [(relevant_ids(rng, H), quantised(rng, H, D)) for _ in range(2)]
    empty_ids, empty_q = np.zeros((0, M), "int32"), np.zeros((0, D), "float32")
    empties = [
        (empty_ids, empty_q, None),
        (empty_ids, empty_q, np.zeros(0, "float32")),
        ({"ids": empty_ids, "grades": np.zeros((0, M), "float32")}, empty_q, None),
    ]
    names = ["ndcg@3", "mrr", "recall@5"]
    fed, plain = (CatalogMetrics(names, candidates=items, chunk_size=4) for _ in range(2))
    for ids, q in real:
        plain.update_state(ids, q)
        fed.update_state(ids, q)
        before = [np.array(K.convert_to_numpy(v), copy=True) for v in fed.variables]
        for y, x, w in empties:
            fed.update_state(y, x, sample_weight=w)
        after = [np.array(K.convert_to_numpy(v), copy=True) for v in fed.variables]
        assert [a.tobytes() for a in after] == [b.tobytes() for b in before]
    assert values(fed.result()) == values(plain.result())


def test_bad_input_raises_and_leaves_the_state():
    rng = np.random.default_rng(3)
    items, queries = quantised(rng, N, D), quantised(rng, H, D)
    metric = CatalogMetrics(["recall@3", "ndcg@3"], candidates=items, chunk_size=7)
    ids = relevant_ids(rng, H)
    ids[0, 0] = 1
    metric.update_state(ids, queries)
    before = values(metric.result())
    bad_ids = ids.copy()
    bad_ids[1, 0] = N
    repeated = ids.copy()
    repeated[2, :2] = [4, 4]
    grades = np.ones(ids.shape, "float32")
    grades[0, 0] = 0.0
    nan_queries = queries.copy()
    nan_queries[2, 0] = np.nan
    cases = [
        (bad_ids, queries, r"y_true must hold ids in \[-1, 9\).*\[9\.0\]"),
        (np.where(ids == 1, -2, ids), queries, r"y_true must hold ids in \[-1, 9\)"),
        (repeated, queries, "y_true repeats a relevant id"),
        ({"ids": ids, "grades": grades}, queries, "grades > 0"),
        (ids, nan_queries, r"NaN .* rows \[2\]"),
        (ids, queries[:, :2], "d=2"),
        (ids[:2], queries, r"y_true must be the relevant ids"),
        ({"labels": ids}, queries, "'ids'"),
    ]
    for y_true, y_pred, match in cases:
        with pytest.raises(ValueError, match=match):
            metric.update_state(y_true, y_pred)
        assert values(metric.result()) == before
    with pytest.raises(ValueError, match="sample_weight"):
        metric.update_state(ids, queries, sample_weight=np.ones((H, 2)))
    assert values(metric.result()) == before


# ------------------------------------------------------------------------------------------
# a two-tower model: compile + fit / evaluate (compiled steps on JAX and TensorFlow)

# jit_compile=True on torch is torch.compile (inductor): minutes to build on a small CPU box
JIT = BACKEND != "torch"
U = 12
NAMES = ["ndcg@3", "map@4", "mrr"]  # few: each compiled step holds every metric's graph
LEVEL = 0.95  # confidence=: each name with its stderr, ci_low, ci_high and count


def in_batch_softmax(y_true, y_pred):
    logits = K.matmul(y_pred[:, 0, :], K.transpose(y_pred[:, 1, :]))
    labels = K.arange(K.shape(logits)[0])
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


class TwoTower(keras.Model):
    """User and item tables; the output stacks a query and its item ``(batch, 2, D)``. With
    ``tracked`` the catalog metric is updated in ``compute_loss`` (where JAX maps the weights)."""

    def __init__(self, tracked: bool = False, confidence: float | None = None, **kw):
        super().__init__(**kw)
        self.users = keras.layers.Embedding(U, D)
        self.items = keras.layers.Embedding(N, D)
        self.catalog = None
        if tracked:
            self.catalog = CatalogMetrics(
                NAMES, candidates=lambda: self.items.embeddings, chunk_size=4, confidence=confidence
            )

    def call(self, x):
        return K.stack([self.users(x[:, 0]), self.items(x[:, 1])], axis=1)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if self.catalog is not None:
            self.catalog.update_state(y, y_pred, sample_weight=sample_weight)
        return super().compute_loss(x, y, y_pred, sample_weight, training)


def test_two_tower_fit_evaluate():
    """Live candidates (the item table as fit moves it) in ``compile(metrics=...)`` (torch,
    TensorFlow) or ``compute_loss`` (JAX, where Keras hides the weights from compile metrics:
    reading them in such a scope raises; test_keras_factorized.py runs the trainer into it),
    ``fit`` with validation (log keys), then ``evaluate`` on the final quantised weights with
    per-query sample weights equals the dense metric on the materialised matrix, with
    ``confidence=0.95``: every key (stderr, interval, count too) equals the dense Keras
    ``ListMetrics`` at that level fed the same two batches of 16 (the state merged)."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    tracked = BACKEND == "jax"
    model = TwoTower(tracked=tracked, confidence=LEVEL)
    x = np.stack([rng.integers(0, U, 32), rng.integers(0, N, 32)], axis=1).astype("int32")
    ids = relevant_ids(rng, 32)
    ids[:, 0] = np.where(ids[:, 0] < 0, x[:, 1], ids[:, 0])
    ids = np.where((ids == x[:, 1:]) & (np.arange(M) > 0), -1, ids)  # distinct per row
    model(x[:2])
    if BACKEND == "jax":  # compile metrics run in a scope mapping only the metrics' variables
        from keras.src.backend.common.stateless_scope import StatelessScope

        live = CatalogMetrics(NAMES, candidates=model.items, chunk_size=4, name="live")
        with StatelessScope(), pytest.raises(ValueError, match="JAX trainer updates compile"):
            live.update_state(ids[:H], x[:H, :1].astype("float32") + np.zeros((H, D), "float32"))
    metrics = None
    if not tracked:
        metrics = [CatalogMetrics(NAMES, candidates=model.items, chunk_size=4, confidence=LEVEL)]
    model.compile(keras.optimizers.SGD(0.3), loss=in_batch_softmax, weighted_metrics=metrics, jit_compile=JIT)
    if tracked:  # the metric is the model's own: not in the logs
        model.fit(x, ids, batch_size=16, epochs=1, verbose=0)
    else:
        history = model.fit(x, ids, batch_size=16, epochs=1, validation_data=(x[:16], ids[:16]), verbose=0)
        assert all(key in history.history and f"val_{key}" in history.history for key in NAMES)
    rng_w = np.random.default_rng(1)
    for v in model.weights:
        v.assign(quantised(rng_w, *v.shape))
    w = rng_w.integers(0, 3, len(x)).astype("float32")
    users = K.convert_to_numpy(model.users.embeddings)[x[:, 0]]
    items = K.convert_to_numpy(model.items.embeddings)
    want = dense(NAMES, "expected", [(users @ items.T, dense_labels(ids), w)])
    keras_dense = ListMetrics(NAMES, shuffle_ties=False, ties="expected")  # the Keras class itself
    keras_dense.update_state(dense_labels(ids), users @ items.T, sample_weight=w)
    assert_close(values(keras_dense.result()), want)
    parts = [(users[p] @ items.T, dense_labels(ids[p]), w[p]) for p in (slice(0, 16), slice(16, 32))]
    interval = values(dense_keras(NAMES, "expected", parts, confidence=LEVEL).result())
    assert len(interval) == 5 * len(NAMES) and all(np.isfinite(v) for v in interval.values())

    def evaluated(labels) -> dict:
        """The catalog metric's values after one evaluate (the model's own metric, or its logs)."""
        if tracked:
            model.catalog.reset_state()
            model.evaluate(x, labels, sample_weight=w, batch_size=16, verbose=0)
            return values(model.catalog.result())
        logs = model.evaluate(x, labels, sample_weight=w, batch_size=16, verbose=0, return_dict=True)
        return {key: logs[key] for key in interval}

    got = evaluated(ids)
    assert_close(got, interval)
    assert_close({key: got[key] for key in NAMES}, want)
    # an id out of the catalog: compiled, the query is left out and counted (result NaN, as the
    # dense metrics); eagerly (torch here) it raises naming y_true
    bad = ids.copy()
    bad[0, 0] = N
    if not JIT:
        with pytest.raises(ValueError, match="y_true must hold ids"):
            model.evaluate(x, bad, batch_size=16, verbose=0)
        return
    got = evaluated(bad)
    assert all(np.isnan(got[key]) for key in NAMES), got


# ------------------------------------------------------------------------------------------
# confidence=: the interval of every metric, against the dense Keras ListMetrics

INTERVAL_FIELDS = ("w2v2_sum", "w2v_sum", "w2_sum")


def tied_catalog(seed, b=B):
    """Quantised items and queries with two items equal for every query, a query whose relevant
    items are those two, and relevant ids per query (rows without one included)."""
    rng = np.random.default_rng(seed)
    items, queries = quantised(rng, N, D), quantised(rng, b, D)
    items[3] = items[5]
    ids = relevant_ids(rng, b)
    ids[0, :2] = [3, 5]
    ids[0, 2:] = -1
    return rng, items, queries, ids


@pytest.mark.parametrize("ties", ["first", "expected"])
def test_confidence_equals_dense_keras_list_metrics(ties):
    """``confidence=0.95``: every key (value, stderr, ci_low, ci_high, count) of every metric, at
    a cut-off inside the catalog, past it and over the whole catalog, after two updates of
    ``H`` queries with per-query weights (zeros included), equals ``rankstream.keras.ListMetrics``
    with the same level on the materialised matrix fed the same batches; so does every state
    field (the interval's ``w2v2_sum``, ``w2v_sum``, ``w2_sum`` of each metric included)."""
    rng, items, queries, ids = tied_catalog(11 if ties == "first" else 12)
    grades = (rng.integers(1, 5, ids.shape) / 2).astype("float32")
    w = rng.integers(0, 3, B).astype("float32")
    w[:2] = [1.0, 2.0]
    names = ["ndcg@3", "recall@4", "precision@11", "map", "mrr@3", "rbp@5", "r_precision", "auc", "gauc"]
    metric = CatalogMetrics(names, candidates=items, chunk_size=7, ties=ties, confidence=LEVEL)
    parts = (slice(0, H), slice(H, B))
    for p in parts:
        metric.update_state({"ids": ids[p], "grades": grades[p]}, queries[p], w[p])
    scores, labels = queries @ items.T, dense_labels(ids, grades)
    reference = dense_keras(names, ties, [(scores[p], labels[p], w[p]) for p in parts], confidence=LEVEL)
    want, got = values(reference.result()), values(metric.result())
    assert set(want) == {f"{n}{q}" for n in names for q in ("", "_stderr", "_ci_low", "_ci_high", "_count")}
    assert_close(got, want)
    assert all(np.isfinite(want[f"{n}_stderr"]) and want[f"{n}_stderr"] > 0 for n in ("ndcg@3", "map"))
    assert want["mrr@3_count"] == float((w > 0).sum())  # zero-weight queries not counted
    mine, theirs = metric.state_dict()["sums"], reference.state_dict()["sums"]
    assert mine.keys() == theirs.keys()
    assert {f.split("__")[-1] for f in mine} >= set(INTERVAL_FIELDS)
    for field in mine:
        np.testing.assert_allclose(mine[field], theirs[field], rtol=1e-6, atol=1e-6, err_msg=field)


def test_confidence_config_chance_and_random_ties_refused():
    """``confidence`` round-trips through the config (absent without it); ``chance=True`` and
    ``ties="random"`` raise naming the argument and pointing to ``rankstream.catalog``;
    ``chance=False`` is accepted."""
    items = quantised(np.random.default_rng(4), N, D)
    metric = CatalogMetrics(["ndcg@3", "mrr"], candidates=items, chunk_size=7, confidence=0.9, chance=False)
    config = metric.get_config()
    assert config["confidence"] == 0.9 and "chance" not in config
    again = CatalogMetrics.from_config({**config, "candidates": items})
    assert again.confidence == 0.9 and again.get_config() == config
    assert set(values(again.result())) >= {"ndcg@3_ci_low", "mrr_count"}
    assert "confidence" not in CatalogMetrics(["mrr"], candidates=items).get_config()
    with pytest.raises(
        ValueError, match=r"chance=True .*rankstream\.catalog\.CatalogMetrics\(\.\.\., chance=True\)"
    ):
        CatalogMetrics(["ndcg@3"], candidates=items, chance=True)
    with pytest.raises(TypeError, match="chance must be a bool, got 'yes'"):
        CatalogMetrics(["ndcg@3"], candidates=items, chance="yes")
    with pytest.raises(
        ValueError,
        match=r"ties must be one of .*got 'random'.*'expected' is the exact mean .* random orders"
        r".*rankstream\.catalog\.CatalogMetrics\(\.\.\., ties='random'",
    ):
        CatalogMetrics(["ndcg@3"], candidates=items, ties="random")
    with pytest.raises(ValueError, match="confidence"):
        CatalogMetrics(["ndcg@3"], candidates=items, confidence=1.5)
