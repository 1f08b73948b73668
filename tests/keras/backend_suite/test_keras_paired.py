"""``rankstream.keras.PairedComparison`` through ``model.compile`` + ``evaluate``: a model that
passes its input, the rankers' (tie-free) scores stacked ``(n, R, list_size)``, through, so the
metric sees exactly the scores the naive reference ranks; the logs equal ``scipy.stats.ttest_rel``
/ ``sem`` / ``t.interval`` on the reference's per-list values (unweighted, keras-rs's conventions:
a list without a relevant item scores 0), the ratio-estimator formula written here (weighted),
and Holm / Bonferroni written here from their definitions. The compiled-step computation against
the host's; bad input refused naming the argument, the state untouched; the config round trip."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
from keras import ops as K
from scipy import stats

from rankstream.keras import PairedComparison

import reference as ref

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64
DTYPE = "float64" if X64 else "float32"
#: float64 end to end where the backend has it; else float32 inputs and state (JAX without x64)
RTOL, ATOL = (1e-9, 1e-12) if X64 else (1e-5, 1e-6)
#: metric name -> the reference's per-list function, k and options (keras-rs's defaults)
NAMES = {
    "ndcg@5": (ref.ndcg, 5, {"threshold": None}),
    "map@5": (ref.average_precision, 5, {"denominator": "all", "threshold": 1.0}),
    "recall@3": (ref.recall, 3, {"threshold": 1.0}),
    "mrr@5": (ref.reciprocal_rank, 5, {"threshold": 1.0}),
}
ROWS, ITEMS, BATCH = 60, 8, 16
#: the error of scores not stacked per ranker (two rankers)
STACKED = r"y_pred must be the rankers' scores stacked \(batch, 2, list_size\) in the order of rankers"


def data(rankers, seed, every_list_relevant=False):
    """Graded labels (some lists without a relevant item unless ``every_list_relevant``), the
    rankers' tie-free scores of different quality stacked ``(ROWS, R, ITEMS)``, list weights
    exact in float32."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, 4, size=(ROWS, ITEMS)).astype(float) * (rng.random((ROWS, ITEMS)) < 0.35)
    if every_list_relevant:  # the list weight keras-rs collapses is then the given one
        labels[np.arange(ROWS), rng.integers(0, ITEMS, size=ROWS)] = 2.0
    quality = np.linspace(0.8, 0.0, len(rankers))
    scores = np.stack([q * labels + rng.normal(size=(ROWS, ITEMS)) for q in quality], axis=1)
    weights = np.round(rng.uniform(0.2, 3.0, size=ROWS) * 64) / 64
    return scores, labels, weights


def per_list_values(scores, labels, name):
    """``(ROWS, R)``: every ranker's per-list value from the reference, 0 for a list without a
    relevant item (keras-rs)."""
    fn, k, kw = NAMES[name]
    values = [[fn(scores[i, r], labels[i], k, **kw) for r in range(scores.shape[1])] for i in range(ROWS)]
    return np.array([[0.0 if v is None else v for v in row] for row in values])


def holm_reference(p):
    """Holm's step-down procedure: the smallest level at which each hypothesis is rejected when
    p_(i) is compared with level / (m - i + 1) in increasing order."""
    m, running, out = len(p), 0.0, [0.0] * len(p)
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def expected(scores, labels, rankers, weights=None, level=0.95):
    out = {}
    for name in NAMES:
        values = per_list_values(scores, labels, name)
        n = len(values)
        w = np.ones(n) if weights is None else weights
        for j, r in enumerate(rankers):
            out[f"{name}/{r}"] = np.sum(w * values[:, j]) / np.sum(w)
        out[f"{name}/count"] = float(n)
        p_values = []
        for (i, a), (j, b) in itertools.combinations(enumerate(rankers), 2):
            d = values[:, i] - values[:, j]
            key = f"{name}/{a}-vs-{b}"
            if weights is None:
                test = stats.ttest_rel(values[:, i], values[:, j])
                m, se, t, p = d.mean(), stats.sem(d), test.statistic, test.pvalue
                low, high = stats.t.interval(level, n - 1, loc=m, scale=se)
            else:  # the ratio estimator, written from its definition
                m = np.sum(w * d) / np.sum(w)
                se = np.sqrt(n / (n - 1) * np.sum(w**2 * (d - m) ** 2)) / np.sum(w)
                t = m / se
                p = 2 * stats.t.sf(abs(t), n - 1)
                half = stats.t.ppf(0.5 + level / 2, n - 1) * se
                low, high = m - half, m + half
            out.update({f"{key}/diff": m, f"{key}/stderr": se, f"{key}/ci_low": low, f"{key}/ci_high": high,
                        f"{key}/t": t, f"{key}/p_value": p})  # fmt: skip
            p_values.append(p)
        if len(rankers) > 2:
            pairs = [f"{name}/{a}-vs-{b}" for a, b in itertools.combinations(rankers, 2)]
            for key, p_holm, p in zip(pairs, holm_reference(p_values), p_values, strict=True):
                out[f"{key}/p_holm"] = p_holm
                out[f"{key}/p_bonferroni"] = min(1.0, len(pairs) * p)
    return out


def evaluate(metric, scores, labels, weights=None):
    inputs = keras.Input(scores.shape[1:], dtype=DTYPE)
    model = keras.Model(inputs, inputs)  # the stacked scores as given: the reference ranks the same
    # Keras hands sample_weight to weighted_metrics only; a loss on the first ranker's scores
    model.compile(
        loss=lambda y, p: K.mean(K.square(p[:, 0] - y)),
        **{"weighted_metrics" if weights is not None else "metrics": [metric]},
    )
    return model.evaluate(
        scores.astype(DTYPE), labels.astype(DTYPE), sample_weight=weights, batch_size=BATCH, verbose=0,
        return_dict=True,
    )  # fmt: skip


def assert_logs(logs, want):
    assert set(want) <= set(logs), sorted(set(want) - set(logs))
    for key, value in want.items():
        assert float(logs[key]) == pytest.approx(value, rel=RTOL, abs=ATOL), key


def test_evaluate_logs_equal_ttest_rel_on_the_reference():
    rankers = ["model", "popularity", "random"]
    scores, labels, _ = data(rankers, seed=3)
    metric = PairedComparison(list(NAMES), rankers, shuffle_ties=False, dtype=DTYPE, confidence=0.9)
    logs = evaluate(metric, scores, labels)
    want = expected(scores, labels, rankers, level=0.9)
    assert_logs(logs, want)
    assert set(metric.kernel.reported) == set(want)
    # real differences and real non-differences: the comparison is of p-values that matter
    assert logs["ndcg@5/model-vs-random/p_value"] < 1e-6
    assert logs["recall@3/popularity-vs-random/p_value"] > 1e-3


def test_evaluate_weighted_equals_the_ratio_estimator():
    rankers = ["a", "b"]
    scores, labels, weights = data(rankers, seed=4, every_list_relevant=True)
    metric = PairedComparison(list(NAMES), rankers, shuffle_ties=False, dtype=DTYPE, prefix="cmp_")
    logs = evaluate(metric, scores, labels, weights)
    assert_logs(logs, {f"cmp_{key}": v for key, v in expected(scores, labels, rankers, weights).items()})
    assert not any(key.startswith("ndcg") for key in logs)  # every key prefixed


@pytest.mark.parametrize("shape", [(4, 3, ITEMS), (4, ITEMS), (4, 1, 2, ITEMS)])
def test_scores_not_stacked_per_ranker_are_refused_naming_y_pred(shape):
    metric = PairedComparison(["ndcg@5"], ["a", "b"], shuffle_ties=False)
    labels = np.ones((4, ITEMS))
    metric.update_state(labels, np.random.default_rng(0).normal(size=(4, 2, ITEMS)))
    before = metric.state_dict()["sums"]
    with pytest.raises(ValueError, match=STACKED):
        metric.update_state(labels, np.zeros(shape))
    after = metric.state_dict()["sums"]
    assert all(np.array_equal(before[f], after[f]) for f in before)


def test_wrong_number_of_rankers_raises_through_evaluate():
    scores, labels, _ = data(["a", "b", "c"], seed=6)
    with pytest.raises(ValueError, match=STACKED):
        evaluate(PairedComparison(["ndcg@5"], ["a", "b"]), scores, labels)


def test_labels_of_another_shape_are_refused_naming_y_true():
    metric = PairedComparison(["ndcg@5"], ["a", "b"])
    with pytest.raises(ValueError, match=r"y_true .* shape"):
        metric.update_state(np.ones((4, ITEMS + 1)), np.zeros((4, 2, ITEMS)))


def test_config_round_trips_and_the_class_is_registered():
    metric = PairedComparison(["ndcg@5", "map@3"], ["a", "b", "c"], seed=3, name="cmp", prefix="p_",
                              confidence=0.8, empty="skip")  # fmt: skip
    config = metric.get_config()
    assert keras.saving.get_registered_object("rankstream>PairedComparison") is PairedComparison
    again = PairedComparison.from_config(config)
    assert again.get_config() == config
    assert (again.metrics, again.rankers, again.confidence) == (["ndcg@5", "map@3"], ["a", "b", "c"], 0.8)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
    assert isinstance(restored, PairedComparison) and restored.get_config() == config


def test_compiled_steps_log_nan_p_values_and_the_final_logs_scipy_s():
    rankers = ["a", "b", "c"]
    scores, labels, _ = data(rankers, seed=7)
    steps = []
    callback = keras.callbacks.LambdaCallback(on_test_batch_end=lambda batch, logs: steps.append(dict(logs)))
    metric = PairedComparison(["ndcg@5", "map@5"], rankers, shuffle_ties=False, dtype=DTYPE)
    inputs = keras.Input(scores.shape[1:], dtype=DTYPE)
    model = keras.Model(inputs, inputs)
    model.compile(loss=lambda y, p: K.mean(K.square(p[:, 0] - y)), metrics=[metric])
    logs = model.evaluate(scores.astype(DTYPE), labels.astype(DTYPE), batch_size=BATCH, verbose=0,
                          return_dict=True, callbacks=[callback])  # fmt: skip
    assert len(steps) == -(-ROWS // BATCH)
    values = per_list_values(scores, labels, "ndcg@5")
    want = stats.ttest_rel(values[:, 0], values[:, 1]).pvalue
    assert logs["ndcg@5/a-vs-b/p_value"] == pytest.approx(want, rel=RTOL, abs=ATOL)
    # JAX and TensorFlow compile the step: its logs are keras.ops' (the last step's state is the
    # final one); torch runs it eagerly (the host's every step), so its keras.ops result is read
    # here from the state left after evaluate
    if BACKEND == "torch":
        assert not any(np.isnan(float(step["ndcg@5/a-vs-b/p_value"])) for step in steps)
        traced = metric.kernel.compute(metric.totals(), keras.ops)
    else:
        traced = steps[-1]
    assert set(metric.kernel.reported) <= set(traced)
    tol = 1e-12 if metric.state_dtype == "float64" else 2e-6
    for key in metric.kernel.reported:
        got = float(K.convert_to_numpy(traced[key]))
        if key.endswith(("/p_value", "/p_holm", "/p_bonferroni")):
            assert np.isnan(got), key
            assert 0.0 <= float(logs[key]) <= 1.0, key
        else:
            assert got == pytest.approx(float(logs[key]), rel=tol, abs=tol), key
