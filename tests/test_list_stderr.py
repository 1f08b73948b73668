"""Standard errors and confidence intervals of the list metrics (``confidence=``), streamed from
sums: equal to ``scipy.stats.sem`` / ``scipy.stats.t.interval`` on the per-list values of the
naive reference (unweighted) and to the ratio-estimator formula written from its definition in
``tests/reference.py`` (weighted), through an Ignite ``Engine`` run, for every list metric and
several ``k``; batch and merge invariance with exact ties; the coverage of the interval by
simulation; the accuracy of the traceable ``t`` quantile; old checkpoints refused."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from scipy import stats

from rankstream import ListMetrics as CoreListMetrics
from rankstream import MAPKernel, NDCGKernel, State, merge
from rankstream.core.functional import ndcg_at_k
from rankstream.core.lists.table import LIST_METRICS
from rankstream.core.state import StatisticsUnavailableWarning
from rankstream.core.uncertainty import T_TABLE_DF, t_quantile_xp
from rankstream.ignite import DCG, MAP, MRR, NDCG, HitRate, ListMetrics, Precision, Recall, RPrecision

import reference as ref

KS = [1, 3, 5]
QUANTITIES = ("stderr", "ci_low", "ci_high", "count")
#: ignite class, the reference's per-list function, its options (ignite's defaults)
IGNITE = {
    "MAP": (MAP, ref.average_precision, {}),
    "NDCG": (NDCG, ref.ndcg, {"threshold": 1.0}),
    "DCG": (DCG, ref.dcg, {"threshold": 1.0}),
    "Precision": (Precision, ref.precision, {}),
    "Recall": (Recall, ref.recall, {}),
    "HitRate": (HitRate, ref.hit_rate, {}),
    "MRR": (MRR, ref.reciprocal_rank, {}),
    "RPrecision": (RPrecision, ref.r_precision, {}),
}


def data(seed: int, n_batches: int = 3, b: int = 25, n: int = 8, zero_weights: bool = True):
    """Batches of tie-free scores, graded labels (some lists without a relevant item), and
    per-list weights (some exactly 0: no unit)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        scores = rng.normal(size=(b, n))
        labels = rng.integers(1, 4, size=(b, n)).astype(float) * (rng.random((b, n)) < 0.35)
        weights = rng.uniform(0.2, 3.0, size=b)
        if zero_weights:
            weights[rng.random(b) < 0.1] = 0.0
        out.append((scores, labels, weights))
    return out


def expected(per_list, kw, batches, k, weighted: bool, level: float = 0.95) -> dict[str, float]:
    """value, stderr, interval and count of the reference: scipy on the per-list values
    (unweighted), the reference's formula (weighted)."""
    scores = [s for sc, _, _ in batches for s in sc]
    labels = [y for _, lab, _ in batches for y in lab]
    weights = [w for _, _, ws in batches for w in ws] if weighted else None
    values, ws = ref.counted_values(per_list, scores, labels, k, weights=weights, **kw)
    n = len(values)
    if weighted:
        m, se = ref.weighted_mean_stderr(values, ws)
        half = stats.t.ppf(0.5 + level / 2, n - 1) * se
        low, high = m - half, m + half
    else:
        m, se = float(np.mean(values)), float(stats.sem(values))
        low, high = stats.t.interval(level, n - 1, loc=m, scale=se)
    return {"value": m, "stderr": se, "ci_low": low, "ci_high": high, "count": float(n)}


def run_engine(metrics: dict, batches, weighted: bool) -> dict:
    engine = Engine(lambda e, batch: batch)
    for name, metric in metrics.items():
        metric.attach(engine, name)
    feed = [
        (torch.from_numpy(s), torch.from_numpy(y), {"sample_weight": torch.from_numpy(w)})
        if weighted
        else (torch.from_numpy(s), torch.from_numpy(y))
        for s, y, w in batches
    ]
    return engine.run(feed).metrics


def close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, err_msg=what)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("name", list(IGNITE))
def test_ignite_engine_stderr_and_interval_equal_scipy_on_the_reference(name, weighted):
    cls, per_list, kw = IGNITE[name]
    batches = data(seed=len(name) + 10 * weighted)
    takes_k = "top_k" in inspect.signature(cls).parameters
    metric = cls(KS, confidence=0.95) if takes_k else cls(confidence=0.95)
    plain = cls(KS) if takes_k else cls()
    metrics = run_engine({"m": metric, "plain": plain}, batches, weighted)
    ks = KS if takes_k else [None]
    want = [expected(per_list, kw, batches, k, weighted) for k in ks]
    assert metrics["m"] == metrics["plain"]  # the value as without the option
    for q in ("value", *QUANTITIES):
        got = metrics["m" if q == "value" else f"m_{q}"]
        close(got, [w[q] for w in want] if takes_k else want[0][q], f"{name} {q}")
    result = metric.compute()
    assert set(result) == {"value", *QUANTITIES}


def test_ignite_level_sets_the_interval():
    batches = data(seed=5)
    metrics = run_engine({"m": MAP(3, confidence=0.8)}, batches, weighted=False)
    want = expected(ref.average_precision, {}, batches, 3, weighted=False, level=0.8)
    close(metrics["m_ci_low"], [want["ci_low"]], "ci_low at 0.8")
    close(metrics["m_ci_high"], [want["ci_high"]], "ci_high at 0.8")


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_ignite_list_metrics_report_every_name_with_its_interval(weighted):
    batches = data(seed=7)
    names = {"ndcg@5": (ref.ndcg, {"threshold": 1.0}, 5), "map@3": (ref.average_precision, {}, 3),
             "rprec": (ref.r_precision, {}, None), "mrr@10": (ref.reciprocal_rank, {}, 10)}  # fmt: skip
    metrics = run_engine({"lm": ListMetrics(list(names), confidence=0.95)}, batches, weighted)
    for name, (per_list, kw, k) in names.items():
        want = expected(per_list, kw, batches, k, weighted)
        close(metrics[name], want["value"], name)
        for q in QUANTITIES:
            close(metrics[f"{name}_{q}"], want[q], f"{name}_{q}")


def test_option_off_leaves_fields_results_and_settings_as_they_were():
    for row in LIST_METRICS:
        off, default = (row.kernel(3), row.kernel(3, confidence=None)) if row.takes_k else (row.kernel(),) * 2
        on = row.kernel(3, confidence=0.95) if row.takes_k else row.kernel(confidence=0.95)
        assert off.quantities == () and default.fields == off.fields
        assert list(off.fields) == ["value_sum", "weight_sum", "count", "invalid"]
        assert list(on.fields) == [
            "value_sum",
            "w2v2_sum",
            "w2v_sum",
            "w2_sum",
            "weight_sum",
            "count",
            "invalid",
        ]
        assert on.quantities == QUANTITIES
        assert State(on).state_dict()["config"] == State(off).state_dict()["config"]


def test_a_state_saved_without_the_statistics_loads_with_them_unavailable():
    """A state saved without the statistics' sums (a metric without a level, or an older
    version) loads into a metric with a level: the value as saved, the statistics NaN (never 0)
    with a warning; they stay unavailable through updates, merges and saves, until reset."""
    batches = data(seed=3)
    off = State(MAPKernel(3))
    for s, y, w in batches:
        off.update(s, y, sample_weight=w)
    on = State(MAPKernel(3, confidence=0.95))
    with pytest.warns(StatisticsUnavailableWarning, match=r"NaN \(unavailable, not 0\) until reset"):
        on.load_state_dict(off.state_dict())
    want = expected(ref.average_precision, {}, batches, 3, weighted=True)
    got = on.compute()
    close(got["value"], [want["value"]], "value as saved")
    assert got["count"] == [want["count"]]
    assert all(np.isnan(got[q][0]) for q in ("stderr", "ci_low", "ci_high"))
    fresh = State(MAPKernel(3, confidence=0.95)).update(*batches[0][:2])
    assert np.isnan(merge(on, fresh).compute()["stderr"][0])  # unavailable in a merge too
    reloaded = State(MAPKernel(3, confidence=0.95))
    reloaded.load_state_dict(on.state_dict())  # saved unavailable: loads unavailable, no warning
    assert np.isnan(reloaded.compute()["stderr"][0])
    on.reset()
    assert np.isfinite(on.update(*batches[0][:2]).update(*batches[1][:2]).compute()["stderr"][0])
    # ignite: the flat state of the old layout loads too
    src = MAP(3)
    run_engine({"m": src}, batches, weighted=False)
    dst = MAP(3, confidence=0.95)
    with pytest.warns(StatisticsUnavailableWarning):
        dst.load_state_dict(src.state_dict())
    got = dst.compute()
    assert got["value"] == src.compute() and np.isnan(got["stderr"])
    # with the fields, a state loads whatever the level (the level reads the same sums)
    on = MAP(3, confidence=0.95)
    run_engine({"m": on}, batches, weighted=False)
    other = MAP(3, confidence=0.9)
    other.load_state_dict(on.state_dict())
    want = expected(ref.average_precision, {}, batches, 3, weighted=False, level=0.9)
    close(other.compute()["ci_low"], [want["ci_low"]], "loaded, at 0.9")


def test_bad_levels_are_refused_naming_the_argument():
    for bad in (0.0, 1.0, 95, -0.5, True, "0.95"):
        with pytest.raises(ValueError, match=r"confidence must be a confidence level in \(0, 1\)"):
            NDCG(10, confidence=bad)
        with pytest.raises(ValueError, match=r"confidence must be a confidence level"):
            CoreListMetrics(["ndcg@10"], confidence=bad)
    with pytest.raises(ValueError, match="confidence applies to metrics given by name"):
        CoreListMetrics({"m": MAPKernel(3)}, confidence=0.95)
    with pytest.raises(ValueError, match="return_counted goes with per-list values"):
        ndcg_at_k(np.zeros((2, 3)), np.ones((2, 3)), 2, confidence=0.95, return_counted=True)


@pytest.mark.parametrize("ks", [3, [2, 5]])
def test_functional_form_with_confidence_equals_scipy_on_the_reference(ks):
    rng = np.random.default_rng(11)
    s = np.stack([rng.permutation(8) for _ in range(30)]).astype(float)  # no ties in a row
    y = rng.integers(0, 3, size=(30, 8)).astype(float)
    y[:, 0] = 1.0  # every list holds a relevant item
    got = ndcg_at_k(s, y, ks, confidence=0.9)
    for j, k in enumerate([ks] if isinstance(ks, int) else ks):
        v = np.array([ref.ndcg(a, b, k) for a, b in zip(s.tolist(), y.tolist(), strict=True)])
        low, high = stats.t.interval(0.9, v.size - 1, loc=v.mean(), scale=stats.sem(v))
        pick = (lambda q: got[q]) if isinstance(ks, int) else (lambda q: got[q][j])  # noqa: B023
        assert pick("value") == pytest.approx(v.mean(), rel=1e-12)
        assert pick("stderr") == pytest.approx(stats.sem(v), rel=1e-12)
        assert (pick("ci_low"), pick("ci_high")) == pytest.approx((low, high), rel=1e-12)
        assert pick("count") == v.size


def test_below_two_lists_the_statistics_are_nan_not_zero():
    s, y = np.array([[0.3, 0.2, 0.1]]), np.array([[0.0, 1.0, 0.0]])
    result = State(NDCGKernel(2, confidence=0.95)).update(s, y).compute()
    assert result["count"] == [1.0]
    assert np.isnan(result["stderr"][0]) and np.isnan(result["ci_low"][0]) and np.isnan(result["ci_high"][0])


# -- merge and batch invariance, exact ties ------------------------------------------------


@st.composite
def tied_batches(draw):
    n = draw(st.integers(2, 6))
    rows = draw(st.integers(3, 14))
    scores = np.array(draw(st.lists(st.lists(st.integers(0, 2), min_size=n, max_size=n), min_size=rows,
                                    max_size=rows)), dtype=float)  # fmt: skip
    labels = np.array(draw(st.lists(st.lists(st.integers(0, 2), min_size=n, max_size=n), min_size=rows,
                                    max_size=rows)), dtype=float)  # fmt: skip
    weights = np.array(
        draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=rows, max_size=rows))
    )
    cuts = sorted(draw(st.lists(st.integers(1, rows - 1), max_size=3, unique=True)))
    labels[0, 0], weights[0] = 2.0, 1.0  # one list every metric counts
    return scores, labels, weights, cuts


@settings(max_examples=40, deadline=None)
@given(tied_batches())
def test_batches_and_merges_give_the_one_batch_statistics(case):
    scores, labels, weights, cuts = case
    kernel = CoreListMetrics(["ndcg@2", "map@3", "precision@1", "rprec"], confidence=0.95)
    whole = State(kernel).update(scores, labels, sample_weight=weights)
    parts = [State(kernel).update(s, y, sample_weight=w) for s, y, w in zip(
        np.split(scores, cuts), np.split(labels, cuts), np.split(weights, cuts), strict=True)]  # fmt: skip
    merged = merge(*parts)
    for field, total in whole.sums.items():
        np.testing.assert_allclose(merged.sums[field], total, rtol=1e-12, atol=1e-12, err_msg=field)
    got, want = merged.compute(), whole.compute()
    assert list(got) == list(want)
    np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-9, atol=1e-12)
    # the reference on the tied lists (ties to the earlier index, as ties="first")
    values, ws = ref.counted_values(
        ref.average_precision, list(scores), list(labels), 3, weights=list(weights)
    )
    assert got["map@3_count"] == len(values)
    if len(values) >= 2 and np.ptp(values) > 0:
        m, se = ref.weighted_mean_stderr(values, ws)
        assert got["map@3"] == pytest.approx(m, rel=1e-12)
        assert got["map@3_stderr"] == pytest.approx(se, rel=1e-9)


# -- coverage by simulation ---------------------------------------------------------------


def population(rng, size: int = 4000, n: int = 10):
    """A finite population of lists (scores that favour the relevant items) with weights that
    depend on the list, so the weighted and unweighted means differ."""
    labels = (rng.random((size, n)) < rng.uniform(0.05, 0.5, size=(size, 1))).astype(float)
    scores = rng.normal(size=(size, n)) + 0.8 * labels
    weights = 0.5 + labels.sum(axis=1) / n * 3.0 + rng.uniform(0, 1, size=size)
    return scores, labels, weights


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_the_95_percent_interval_covers_the_population_mean(weighted):
    rng = np.random.default_rng(2024 + weighted)
    scores, labels, weights = population(rng)
    # the population's per-list nDCG@5 from the reference (empty lists count 0: every list is a unit)
    values, _ = ref.counted_values(ref.ndcg, list(scores), list(labels), 5, empty="zero", threshold=1.0)
    values = np.asarray(values)
    truth = np.sum(weights * values) / np.sum(weights) if weighted else values.mean()
    kernel = NDCGKernel(5, empty="zero", confidence=0.95)
    covered = 0
    evaluations, size = 2000, 200
    for _ in range(evaluations):
        idx = rng.integers(0, len(values), size=size)  # 200 lists drawn from the population
        st_ = State(kernel).update(scores[idx], labels[idx], sample_weight=weights[idx] if weighted else None)
        result = st_.compute()
        covered += result["ci_low"][0] <= truth <= result["ci_high"][0]
    assert 0.93 <= covered / evaluations <= 0.97, covered / evaluations


# -- the traceable t quantile -------------------------------------------------------------


@pytest.mark.parametrize(("level", "bound"), [(0.5, 1e-13), (0.9, 1e-13), (0.95, 1e-13), (0.99, 1e-13),
                                              (0.999, 1e-13), (0.9999, 1e-12)])  # fmt: skip
def test_t_quantile_xp_matches_scipy_from_1_to_a_million_degrees_of_freedom(level, bound):
    df = np.concatenate([np.arange(1.0, 5001.0), np.unique(np.geomspace(5001, 1e6, 5000).round())])
    got = np.concatenate([t_quantile_xp(level, chunk, np) for chunk in np.array_split(df, 20)])
    want = stats.t.ppf(0.5 + level / 2, df)
    assert np.max(np.abs(got - want) / want) < bound
    np.testing.assert_array_equal(got[:T_TABLE_DF], want[:T_TABLE_DF])  # the table: scipy's own
    assert np.isnan(t_quantile_xp(level, np.float64(0.0), np))
