"""``rankstream.keras.FactorizedTopK`` against TensorFlow Recommenders' definition, directly and
inside ``compile`` + ``fit`` / ``evaluate`` of a two-tower model.

tensorflow-recommenders is not installed here (0.7.7 wants tf-keras, which conflicts with this
TensorFlow), so :func:`tfrs_reference` re-implements its score-based evaluation as read in
``tensorflow_recommenders/metrics/factorized_top_k.py`` at v0.7.7 (commit cf1dafa):

- lines 133-134: ``positive_scores = tf.reduce_sum(query_embeddings * true_candidate_embeddings,
  axis=1, keepdims=True)``;
- lines 136-137: ``top_k_predictions, _ = self._candidates(query_embeddings, k=max(self._ks))``,
  the top ``max(ks)`` scores ``query . candidate`` of the index (``layers/factorized_top_k.py``:
  ``BruteForce.call`` line 605 ``tf.math.top_k(scores, k=k)``; ``Streaming`` lines 430-436
  take ``min(k, available)`` when the catalog holds fewer than ``k``);
- lines 183-192: ``y_pred = tf.concat([positive_scores, top_k_predictions], axis=1)`` and
  ``tf.math.in_top_k(targets=zeros, predictions=y_pred, k=k)`` per ``k``, fed to
  ``tf.keras.metrics.Mean(name=f"{name}/top_{k}_categorical_accuracy")`` with
  ``sample_weight`` (lines 85-89, 192);
- ``tf.math.in_top_k`` (TensorFlow's ``InTopK`` kernel): the target is in the top ``k`` when
  fewer than ``k`` entries of the row are strictly greater than it (ties straddling the
  boundary are all in), and never when an entry of the row is not finite.

The reference below does exactly that, one query at a time: a full sort of the query's scores
(a naive top-k), the row ``[positive, top max(ks)]``, the ``in_top_k`` count, a weighted mean.
Under the TensorFlow backend, ``test_reference_is_tensorflows`` checks the reference's count
against ``tf.math.in_top_k`` and its stable order against ``tf.math.top_k``'s indices.
Embeddings are multiples of 1/2 with small integer numerators, so every score is exact in
float32 and ties (at the k-th score, and with the true candidate itself) are built in.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keras import ops as K

from rankstream.keras import FactorizedTopK

BACKEND = keras.backend.backend()
U, N, D = 12, 10, 3  # users, items (the catalog), dimensions
KEYS = [f"factorized_top_k/top_{k}_categorical_accuracy" for k in (1, 5, 10, 50, 100)]


def in_top_k(row: np.ndarray, k: int) -> bool:
    """TensorFlow's ``InTopK`` for target 0 of one row."""
    if not np.all(np.isfinite(row)):
        return False
    return int(np.sum(row[1:] > row[0])) < k


def tfrs_reference(q, c, candidates, ks, sample_weight=None):
    """TFRS 0.7.7's score-based ``FactorizedTopK`` values (see the module docstring)."""
    q, c, e = (np.asarray(a, np.float32) for a in (q, c, candidates))
    w = np.ones(len(q)) if sample_weight is None else np.asarray(sample_weight, float)
    w = np.broadcast_to(w, len(q))
    out = {}
    for k in ks:
        total = 0.0
        for i in range(len(q)):
            positive = np.sum(q[i] * c[i])
            top = np.sort(e @ q[i])[::-1][: max(ks)]  # the index's top max(ks)
            total += w[i] * in_top_k(np.concatenate([[positive], top]), k)
        out[f"factorized_top_k/top_{k}_categorical_accuracy"] = total / w.sum() if w.sum() else 0.0
    return out


def tfrs_id_reference(q, candidates, candidate_ids, true_ids, ks, sample_weight=None):
    """TFRS 0.7.7's id-based values (``factorized_top_k.py`` lines 141-180): the index's top
    ``max(ks)`` (``tf.math.top_k``: equal scores in index order, i.e. a stable sort), the true
    id matched against the retrieved ids, a hit at ``k`` when one of the first ``k`` matches."""
    q, e = np.asarray(q, np.float32), np.asarray(candidates, np.float32)
    w = np.ones(len(q)) if sample_weight is None else np.asarray(sample_weight, float)
    out = {}
    for k in ks:
        total = 0.0
        for i in range(len(q)):
            order = np.argsort(-(e @ q[i]), kind="stable")[: max(ks)]
            total += w[i] * bool(np.any(np.asarray(candidate_ids)[order][:k] == true_ids[i]))
        out[f"factorized_top_k/top_{k}_categorical_accuracy"] = total / w.sum() if w.sum() else 0.0
    return out


if BACKEND == "tensorflow":  # TensorFlow is imported by this run already

    def test_reference_is_tensorflows():
        """The reference's two pieces against TensorFlow's own ops, as TFRS calls them: the
        ``in_top_k`` count (ties in, non-finite rows out) against ``tf.math.in_top_k``, and the
        stable order against ``tf.math.top_k``'s indices, on tie-heavy rows with NaN and infinities."""
        import tensorflow as tf

        rng = np.random.default_rng(7)
        rows = rng.integers(-2, 3, (300, 8)).astype("float32")
        specials = np.array([np.nan, np.inf, -np.inf], "float32")
        rows[rng.random(rows.shape) < 0.03] = specials[rng.integers(0, 3, 1)]
        for k in range(1, 10):
            tf_hits = tf.math.in_top_k(targets=np.zeros(len(rows), "int32"), predictions=rows, k=k).numpy()
            assert list(tf_hits) == [in_top_k(row, k) for row in rows]
        finite = np.nan_to_num(rows, nan=0.0, posinf=3.0, neginf=-3.0)
        _, tf_order = tf.math.top_k(finite, k=8)
        assert (tf_order.numpy() == np.argsort(-finite, axis=1, kind="stable")).all()


def quantised(rng, *shape):
    return (rng.integers(-2, 3, shape) / 2).astype("float32")


def values(result):
    return {key: float(K.convert_to_numpy(v)) for key, v in result.items()}


def assert_close(got, want):
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-6), (key, got, want)


# ------------------------------------------------------------------------------------------
# the metric alone (eager)


# few distinct shapes: on JAX each new shape of an eager op compiles it
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.just(9),
    chunk=st.sampled_from([1, 4, 9, 100]),
    weighted=st.booleans(),
    split=st.sampled_from([0, 3]),
)
def test_matches_tfrs_at_every_k(seed, n, chunk, weighted, split):
    """Every k from 1 to past the catalog, tie-heavy embeddings, the true candidate from the
    catalog for some queries (tied with itself) and not for others, any chunk size (N not a
    multiple of it), the queries split into two updates (an empty one too)."""
    rng = np.random.default_rng(seed)
    b, d = 6, 2
    e = quantised(rng, n, d)
    q = quantised(rng, b, d)
    c = np.where(rng.random((b, 1)) < 0.5, e[rng.integers(0, n, b)], quantised(rng, b, d))
    w = rng.integers(0, 4, b).astype("float32") if weighted else None
    ks = tuple(range(1, 12))  # every k from 1 to two past the largest catalog (one shape)
    metric = FactorizedTopK(e, ks=ks, chunk_size=chunk)
    for part in (slice(0, split), slice(split, b)):
        metric.update_state(q[part], c[part], sample_weight=None if w is None else w[part])
    assert_close(values(metric.result()), tfrs_reference(q, c, e, ks, w))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.just(9),
    chunk=st.sampled_from([1, 4, 9, 100]),
    with_ids=st.booleans(),
    split=st.sampled_from([0, 3]),
)
def test_id_based_matches_tfrs(seed, n, chunk, with_ids, split):
    """TFRS's id-based evaluation (``true_candidate_ids``): candidate ids repeated or absent,
    true ids absent from the catalog, ties in index order across chunk boundaries."""
    rng = np.random.default_rng(seed)
    b, d = 6, 2
    e, q = quantised(rng, n, d), quantised(rng, b, d)
    ids = rng.integers(0, n // 2 + 1, n) if with_ids else np.arange(n)
    true = rng.integers(0, n // 2 + 2, b).astype("int32")
    ks = tuple(range(1, 12))
    metric = FactorizedTopK(e, ks=ks, chunk_size=chunk, candidate_ids=ids if with_ids else None)
    for part in (slice(0, split), slice(split, b)):
        metric.update_state(q[part], q[part], true_candidate_ids=true[part])
    assert_close(values(metric.result()), tfrs_id_reference(q, e, ids, true, ks))


def test_scores_held_one_chunk_at_a_time(monkeypatch):
    """Every score block the metric computes is (batch, <= chunk_size): no (batch, N) matrix."""
    rng = np.random.default_rng(6)
    e, q = quantised(rng, 9, 2), quantised(rng, 6, 2)
    shapes = []
    matmul = keras.ops.matmul

    def recording(a, b):
        out = matmul(a, b)
        shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(keras.ops, "matmul", recording)
    metric = FactorizedTopK(e, ks=(1, 3), chunk_size=4)
    metric.update_state(q, e[:6])
    metric.update_state(q, e[:6], true_candidate_ids=np.arange(6))
    assert shapes and all(s[0] == 6 and s[1] <= 4 for s in shapes), shapes
    assert sum(s[1] for s in shapes) == 3 * 9  # one pass score-based, two passes id-based


def test_keys_default_ks_and_empty_state():
    metric = FactorizedTopK(np.zeros((3, 2), "float32"))
    assert metric.name == "factorized_top_k" and metric.ks == (1, 5, 10, 50, 100)
    assert list(metric.result()) == KEYS
    assert values(metric.result()) == dict.fromkeys(KEYS, 0.0)  # Keras' Mean before any value
    metric.update_state(np.zeros((0, 2), "float32"), np.zeros((0, 2), "float32"))  # no-op
    assert values(metric.result()) == dict.fromkeys(KEYS, 0.0)


def test_weight_shapes_and_non_finite_positive():
    rng = np.random.default_rng(3)
    e, q = quantised(rng, 9, 2), quantised(rng, 6, 2)
    c = e[[0, 1, 2, 3, 4, 5]]
    c[2, 0] = np.nan  # TFRS: in_top_k is False for a row with a non-finite entry
    w = np.array([1, 2, 0, 3, 1, 2], "float32")
    ks = tuple(range(1, 12))
    want = tfrs_reference(q, c, e, ks, w)
    for weight in (w, w[:, None]):
        metric = FactorizedTopK(e, ks=ks, chunk_size=4)
        metric.update_state(q, c, sample_weight=weight)
        assert_close(values(metric.result()), want)
    metric = FactorizedTopK(e, ks=ks, chunk_size=4)
    metric.update_state(q, c, sample_weight=2.0)  # a scalar weight: the unweighted mean
    assert values(metric.result())["factorized_top_k/top_11_categorical_accuracy"] == pytest.approx(5 / 6)


def test_bad_input_raises_and_leaves_the_state():
    rng = np.random.default_rng(4)
    e, q = quantised(rng, 9, 2), quantised(rng, 6, 2)
    metric = FactorizedTopK(e, ks=(1, 3), chunk_size=4)
    metric.update_state(q, e[:6])
    before = values(metric.result())
    with pytest.raises(ValueError, match=r"d=1 dimensions.*\(9, 2\)"):
        metric.update_state(q[:, :1], e[:6, :1])
    with pytest.raises(ValueError, match=r"\(6, 2\) and \(3, 2\)"):
        metric.update_state(q, e[:3])
    with pytest.raises(ValueError, match=r"sample_weight.*\(3,\)"):
        metric.update_state(q, e[:6], sample_weight=np.ones(3, "float32"))
    with pytest.raises(ValueError, match=r"y_pred.*\(6, 3, 2\)"):
        metric.update_state(None, np.stack([q, q, q], axis=1))
    with pytest.raises(TypeError, match=r"true_candidate_ids must be integers, got dtype float32"):
        metric.update_state(q, e[:6], np.zeros(6, "float32"))
    with pytest.raises(ValueError, match=r"true_candidate_ids must be .* got shape \(5,\)"):
        metric.update_state(q, e[:6], np.arange(5))
    with pytest.raises(ValueError, match=r"candidate_ids holds 3 ids but the candidates are 9"):
        FactorizedTopK(e, candidate_ids=np.arange(3)).update_state(q, e[:6], np.arange(6))
    assert values(metric.result()) == before
    for ks, err in (((0, 5), ValueError), ((-1,), ValueError), ((), ValueError), ((1.5,), TypeError)):
        with pytest.raises(err, match=r"ks must"):
            FactorizedTopK(e, ks=ks)
    for ks in ((True,), "5", 5):
        with pytest.raises(TypeError, match=r"ks must"):
            FactorizedTopK(e, ks=ks)
    for chunk in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match=r"chunk_size must be a positive int, got"):
            FactorizedTopK(e, chunk_size=chunk)
    with pytest.raises(ValueError, match=r"candidates must .* \(N, d\), got shape \(9,\)"):
        FactorizedTopK(e[:, 0])
    with pytest.raises(TypeError, match=r"candidate_ids must be a 1-D array of integer ids, got dtype float"):
        FactorizedTopK(e, candidate_ids=np.zeros(9))


# ------------------------------------------------------------------------------------------
# a two-tower model: compile + fit / evaluate, compiled steps (torch: eager, see JIT)

# jit_compile=True on torch is torch.compile (inductor): minutes to build on a small CPU box
JIT = BACKEND != "torch"


def in_batch_softmax(y_true, y_pred):
    """The two-tower loss: each query's own item against the batch's other items."""
    logits = K.matmul(y_pred[:, 0, :], K.transpose(y_pred[:, 1, :]))
    labels = K.arange(K.shape(logits)[0])
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


class TwoTower(keras.Model):
    """User and item embedding tables; the output stacks a query and its item, (batch, 2, D).
    With ``tracked`` the model updates ``self.retrieval`` in ``compute_loss``, where the
    weights are live on every backend (TFRS's pattern: its Retrieval task does the same)."""

    def __init__(self, tracked: bool = False, **kw):
        super().__init__(**kw)
        self.users = keras.layers.Embedding(U, D)
        self.items = keras.layers.Embedding(N, D)
        self.retrieval = FactorizedTopK(lambda: self.items.embeddings, chunk_size=3) if tracked else None

    def call(self, x):
        return K.stack([self.users(x[:, 0]), self.items(x[:, 1])], axis=1)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if self.retrieval is not None:
            self.retrieval.update_state(y_pred[:, 0, :], y_pred[:, 1, :], sample_weight=sample_weight)
        return super().compute_loss(x, y, y_pred, sample_weight, training)


def interactions(seed, b):
    rng = np.random.default_rng(seed)
    x = np.stack([rng.integers(0, U, b), rng.integers(0, N, b)], axis=1).astype("int32")
    return x, np.zeros(b, "float32")


def quantise_weights(model):
    for v in model.weights:
        v.assign(np.round(K.convert_to_numpy(v) * 2) / 2)


def reference_of(model, x, ks=(1, 5, 10, 50, 100), sample_weight=None):
    users = K.convert_to_numpy(model.users.embeddings)[x[:, 0]]
    items = K.convert_to_numpy(model.items.embeddings)
    return tfrs_reference(users, items[x[:, 1]], items, ks, sample_weight)


@pytest.mark.parametrize("pattern", ["compile", "compute_loss"])
def test_two_tower_fit_evaluate(pattern):
    """Live candidates (the item table as training moves it): the log keys of fit and of its
    validation, then evaluate on the final (quantised) weights equals TFRS's definition. On JAX,
    compile(metrics=...) with live candidates raises: Keras' JAX trainer updates those metrics
    where the model's current weights are not visible (they would be the weights before fit)."""
    keras.utils.set_random_seed(0)
    model = TwoTower(tracked=pattern == "compute_loss")
    x, y = interactions(0, 48)
    model(x[:2])
    metrics = [FactorizedTopK(model.items, chunk_size=3)] if pattern == "compile" else None
    model.compile(keras.optimizers.SGD(0.5), loss=in_batch_softmax, metrics=metrics, jit_compile=JIT)
    if BACKEND == "jax" and pattern == "compile":
        with pytest.raises(ValueError, match="JAX trainer updates compile"):
            model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        return
    history = model.fit(x, y, batch_size=16, epochs=2, validation_data=(x[:16], y[:16]), verbose=0)
    for key in KEYS:
        assert key in history.history and f"val_{key}" in history.history
        assert all(0.0 <= v <= 1.0 for v in history.history[key])
    quantise_weights(model)
    got = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    assert_close({k: got[k] for k in KEYS}, reference_of(model, x))


def test_fixed_candidates_weighted_and_batch_size_invariant():
    """Candidates as a fixed array, ``weighted_metrics`` (Keras passes the sample weights),
    ks past TFRS's and past the catalog, score-based and id-based (``y_true`` the true items'
    ids, the catalog in reverse order with its ids): the same values for two batch sizes."""
    keras.utils.set_random_seed(1)
    model = TwoTower()
    x, _ = interactions(2, 30)
    y = x[:, 1].copy()  # the true items' ids (int32)
    model(x[:2])
    rng = np.random.default_rng(5)
    for v in model.weights:
        v.assign(quantised(rng, *v.shape))
    table = K.convert_to_numpy(model.items.embeddings)
    w = rng.integers(0, 4, len(x)).astype("float32")
    ks = (1, 2, 3, 7, 11)
    by_score = FactorizedTopK(table, ks=ks, chunk_size=4)
    ids = np.arange(N)[::-1]
    by_id = FactorizedTopK(table[::-1], ks=ks, name="by_id", candidate_ids=ids, chunk_size=4)
    model.compile(loss=in_batch_softmax, weighted_metrics=[by_score, by_id], jit_compile=JIT)
    want = reference_of(model, x, ks, w)
    users = K.convert_to_numpy(model.users.embeddings)[x[:, 0]]
    by_id_want = tfrs_id_reference(users, table[::-1], ids, y, ks, w)
    want.update({key.replace("factorized_top_k/", "by_id/"): v for key, v in by_id_want.items()})
    assert len(set(want.values())) > 4  # not a degenerate catalog
    # ties decide: queries whose item ties with others at the k-th score (a hit here, a miss
    # were ties counted against it), for some k of ks
    scores, positive = users @ table.T, np.sum(users * table[y], axis=1)
    above, tied = (scores > positive[:, None]).sum(1), (scores == positive[:, None]).sum(1) - 1
    assert any(((above < k) & (above + tied >= k)).any() for k in ks)
    for batch_size in (10, 30):
        got = model.evaluate(x, y, sample_weight=w, batch_size=batch_size, verbose=0, return_dict=True)
        assert_close({k: got[k] for k in want}, want)
