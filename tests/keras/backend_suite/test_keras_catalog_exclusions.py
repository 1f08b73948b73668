"""Per-query exclusions of ``rankstream.keras.CatalogMetrics`` (``y_true={"ids": ..., "exclude":
...}``: a user's training items, the filtered setting) against the dense metric on the
materialised ``(queries, N)`` score matrix with each query's excluded items masked out (the
kernel of ``rankstream.keras.ListMetrics`` given the mask, on the host), under both tie
policies. Embeddings are multiples of 1/2 with small numerators: exact scores, ties everywhere,
excluded items tied with relevant ones (above, below and between them by index). Eagerly and
in one compiled ``evaluate`` (jit on JAX and TensorFlow); bad input eagerly raises naming
``exclude``, compiled it is counted invalid.
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
# the sizes of test_keras_catalog_metrics.py (on JAX each new shape compiles each eager op anew)
N, D, M, E, H = 9, 3, 3, 3, 3
# auc, gauc, r_precision, f1, rbp's residual and the whole-list metrics read each list's length
NAMES = ["ndcg@3", "recall@4", "precision@10", "map", "mrr@5", "hit_rate@2", "f1@4", "rbp@6",
         "r_precision", "auc", "gauc", "ndcg"]  # fmt: skip
COMPILED = ["ndcg@3", "precision@10", "auc", "f1@4"]  # few: each adds to the compiled graph


def quantised(rng, *shape):
    return (rng.integers(-2, 3, shape) / 2).astype("float32")


def lists(rng, b):
    """(ids (b, M), exclude (b, E)): distinct relevant ids (0 to M), excluded ids drawn from the
    other items with repeats and -1 pads."""
    ids, exclude = np.full((b, M), -1, "int32"), np.full((b, E), -1, "int32")
    for i in range(b):
        perm = rng.permutation(N)
        k = rng.integers(0, M + 1)
        ids[i, :k] = perm[:k]
        pool = perm[M:]
        exclude[i] = np.where(rng.random(E) < 0.8, rng.choice(pool, E), -1)
        rng.shuffle(ids[i])
    return ids, exclude


def dense(names, ties, scores, ids, exclude, grades=None, w=None):
    """The dense metric (keras-rs's conventions) on the scores with the excluded items masked."""
    labels = np.zeros(scores.shape, "float64")
    mask = np.ones(scores.shape, bool)
    for i in range(scores.shape[0]):
        for j in np.flatnonzero(ids[i] >= 0):
            labels[i, ids[i, j]] = 1.0 if grades is None else grades[i, j]
        mask[i, exclude[i][exclude[i] >= 0]] = False
    kernel = ListMetricsKernel(names, COLLECTION_DEFAULTS, empty="zero", **keras_rs_conventions(False, ties))
    sums = kernel.batch_sums(None, scores.astype("float64"), labels, mask, w)
    sums = {f: np.asarray(v, np.float64) for f, v in sums.items()}
    return {key: float(v) for key, v in kernel.select(kernel.compute(sums, np)).items()}, labels, mask


def values(result):
    return {key: float(K.convert_to_numpy(v)) for key, v in result.items()}


def assert_close(got, want, tol=2e-5):
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=tol), (key, got[key], want[key])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), chunk=st.sampled_from([7, N]), graded=st.booleans())
def test_exclusions_equal_dense_masked(seed, chunk, graded):
    """Both tie policies, chunk sizes 7 and whole, grades or binary, per-query weights; an
    excluded item made tied with a relevant one; repeated excluded ids count once."""
    rng = np.random.default_rng(seed)
    items, queries = quantised(rng, N, D), quantised(rng, H, D)
    ids, exclude = lists(rng, H)
    if ids[0, 0] >= 0:  # an excluded item tied with a relevant one, listed twice
        other = next(j for j in range(N) if j not in ids[0])
        items[other] = items[ids[0, 0]]
        exclude[0, :2] = other
    grades = (rng.integers(1, 5, ids.shape) / 2).astype("float32") if graded else None
    w = rng.integers(0, 3, H).astype("float32")
    y = {"ids": ids, "exclude": exclude} | ({} if grades is None else {"grades": grades})
    for ties in ("first", "expected"):
        metric = CatalogMetrics(NAMES, candidates=items, chunk_size=chunk, ties=ties)
        metric.update_state(y, queries, w)
        want = dense(NAMES, ties, queries @ items.T, ids, exclude, grades, w)[0]
        assert_close(values(metric.result()), want)


def test_the_keras_list_metrics_agree_and_no_exclusions_change_nothing():
    """The Keras ``ListMetrics`` itself on the masked matrix gives the reference's AUC (its
    kernel, the reference, is checked against it and peers across the suite); an
    all-pad ``exclude`` (and an empty one) equals no ``exclude``."""
    rng = np.random.default_rng(5)
    items, queries = quantised(rng, N, D), quantised(rng, H, D)
    ids, exclude = lists(rng, H)
    names = ["auc", "f1@4", "r_precision"]  # list-length readers; few: each compiles eager ops on JAX
    want, labels, mask = dense(names, "expected", queries @ items.T, ids, exclude)
    keras_dense = ListMetrics(["auc"], shuffle_ties=False, ties="expected")  # the Keras class itself
    keras_dense.update_state({"labels": labels.astype("float32"), "mask": mask}, queries @ items.T)
    assert_close(values(keras_dense.result()), {"auc": want["auc"]})
    metric = CatalogMetrics(names, candidates=items, chunk_size=7)
    metric.update_state({"ids": ids, "exclude": exclude}, queries)
    assert_close(values(metric.result()), want)
    plain = CatalogMetrics(names, candidates=items, chunk_size=7)
    plain.update_state(ids, queries)
    for pads in (np.full((H, 2), -1, "int32"), np.zeros((H, 0), "int32")):
        padded = CatalogMetrics(names, candidates=items, chunk_size=7)
        padded.update_state({"ids": ids, "exclude": pads}, queries)
        assert_close(values(padded.result()), values(plain.result()), tol=1e-6)


def test_bad_exclusions_raise_and_leave_the_state():
    rng = np.random.default_rng(3)
    items, queries = quantised(rng, N, D), quantised(rng, H, D)
    ids, exclude = lists(rng, H)
    ids[0, 0] = 1
    exclude[0] = np.where(exclude[0] == 1, -1, exclude[0])
    metric = CatalogMetrics(["recall@3", "auc"], candidates=items, chunk_size=7)
    metric.update_state({"ids": ids, "exclude": exclude}, queries)
    before = [np.array(K.convert_to_numpy(v), copy=True) for v in metric.variables]
    out_of_range, overlap, below = exclude.copy(), exclude.copy(), exclude.copy()
    out_of_range[1, 0] = N
    overlap[0, 1] = 1
    below[2, 2] = -2
    cases = [
        (out_of_range, ValueError, r"y_true\['exclude'\] must hold ids in \[-1, 9\).*\[9\.0\]"),
        (below, ValueError, r"y_true\['exclude'\] must hold ids in \[-1, 9\).*\[-2\.0\]"),
        (overlap, ValueError, r"y_true\['exclude'\] must hold no id of the row's relevant ids.*\[\[0, 1\]\]"),
        (exclude[:2], ValueError, r"y_true\['exclude'\] must be the excluded ids"),
        (exclude[:, 0], ValueError, r"y_true\['exclude'\] must be the excluded ids"),
        (exclude + 0.5, ValueError, r"y_true\['exclude'\] must hold ids"),
        (exclude > 0, TypeError, r"y_true\['exclude'\]: the excluded ids must be integers"),
    ]
    for bad, error, match in cases:
        with pytest.raises(error, match=match):
            metric.update_state({"ids": ids, "exclude": bad}, queries)
        after = [np.array(K.convert_to_numpy(v), copy=True) for v in metric.variables]
        assert [a.tobytes() for a in after] == [b.tobytes() for b in before]
    with pytest.raises(ValueError, match="'exclude'"):
        metric.update_state({"ids": ids, "excluded": exclude}, queries)


class Direct(keras.Model):
    """The queries' embeddings are the input; the catalog metric is updated in ``compute_loss``
    (the compiled step's own graph on every backend)."""

    def __init__(self, items, **kw):
        super().__init__(**kw)
        self.scale = self.add_weight(shape=(), initializer="ones", trainable=False)
        self.catalog = CatalogMetrics(COMPILED, candidates=items, chunk_size=4)

    def call(self, x):
        return x * self.scale

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        self.catalog.update_state(y, y_pred, sample_weight=sample_weight)
        return K.sum(y_pred) * 0.0


def test_compiled_evaluate():
    """Two compiled steps of an ``evaluate`` (jit on JAX and TensorFlow) equal the dense masked
    metric; compiled, a relevant item also excluded leaves its query out and counted invalid
    (result NaN); eagerly (torch) it raises naming ``exclude``."""
    rng = np.random.default_rng(11)
    items, x = quantised(rng, N, D), quantised(rng, 2 * H, D)
    ids, exclude = lists(rng, 2 * H)
    w = rng.integers(0, 3, 2 * H).astype("float32")
    model = Direct(items)
    model.compile(jit_compile=BACKEND != "torch")
    model.evaluate(x, {"ids": ids, "exclude": exclude}, sample_weight=w, batch_size=H, verbose=0)
    want = dense(COMPILED, "expected", x @ items.T, ids, exclude, None, w)[0]
    assert_close(values(model.catalog.result()), want)
    bad = exclude.copy()
    ids[0, 0] = 2
    bad[0, 0] = 2
    model.catalog.reset_state()
    if BACKEND == "torch":
        with pytest.raises(ValueError, match=r"y_true\['exclude'\] must hold no id"):
            model.evaluate(x, {"ids": ids, "exclude": bad}, batch_size=H, verbose=0)
        return
    model.evaluate(x, {"ids": ids, "exclude": bad}, batch_size=H, verbose=0)
    assert all(np.isnan(v) for v in values(model.catalog.result()).values())
