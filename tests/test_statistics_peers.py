"""The statistics against the peers that compute them from every per-list value in memory:

* ranx (``ranx.compare`` with ``stat_test="student"``): its per-query metrics, their means and
  its paired t-test p-values equal what ``PairedComparison`` streams through an Ignite
  ``Engine``, for every list metric ranx and rankstream both define the same way;
* statsmodels: ``multipletests`` (Holm, Bonferroni) on those p-values equals the adjusted ones;
  a weighted mean's standard error is the heteroscedasticity-robust (HC1) standard error of
  the intercept of a weighted least-squares fit of the per-list values on a constant
  (``WLS(...).fit(cov_type="HC1")``: ``n / (n - 1) * sum(w^2 e^2) / sum(w)^2``, the ratio
  estimator of ``docs/statistics.md``), for every list metric through an Engine, and for the
  paired differences.

The data: tie-free scores, binary labels (ranx's nDCG gain and ours agree on them), every list
with 1 to 5 relevant items (ranx evaluates only judged queries)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from scipy import stats

from rankstream.ignite import ListMetrics, PairedComparison

ranx = pytest.importorskip("ranx", reason="ranx is a dev dependency (pip install -e '.[dev]')")
sm = pytest.importorskip("statsmodels.api", reason="statsmodels is a dev dependency")
from statsmodels.stats.multitest import multipletests  # noqa: E402

RANKERS = ["model", "popularity", "random"]
#: our name -> ranx's name of the same metric (ranx divides AP@k by every relevant item, ignite
#: by min(R, k): the lists hold at most 5 relevant items, so both are R)
METRICS = {
    "ndcg@10": "ndcg@10",
    "map@10": "map@10",
    "precision@5": "precision@5",
    "recall@10": "recall@10",
    "mrr@10": "mrr@10",
    "hit_rate@3": "hit_rate@3",
    "r_precision": "r-precision",
}


def make_data(seed: int = 0, b: int = 90, n: int = 30):
    rng = np.random.default_rng(seed)
    labels = np.zeros((b, n))
    for row, r in zip(labels, rng.integers(1, 6, size=b), strict=True):  # 1 to 5 relevant items
        row[rng.choice(n, size=r, replace=False)] = 1.0
    popularity = rng.normal(size=n)
    scores = {
        "model": labels * 0.9 + rng.normal(size=(b, n)),
        "popularity": popularity[None, :] * 0.7 + labels * 0.5 + rng.normal(size=(b, n)),
        "random": rng.normal(size=(b, n)),
    }
    weights = rng.uniform(0.2, 3.0, size=b)
    return scores, labels, weights


def ranx_compare(scores, labels):
    qrels = ranx.Qrels(
        {f"q{i:04d}": {f"d{j:03d}": 1 for j in np.flatnonzero(row)} for i, row in enumerate(labels)}
    )
    runs = [
        ranx.Run(
            {
                f"q{i:04d}": {f"d{j:03d}": float(s) for j, s in enumerate(row)}
                for i, row in enumerate(scores[r])
            },
            name=r,
        )
        for r in RANKERS
    ]
    report = ranx.compare(qrels, runs, list(METRICS.values()), stat_test="student", threads=1)
    per_query = {
        r: ranx.evaluate(qrels, run, list(METRICS.values()), return_mean=False, threads=1)
        for r, run in zip(RANKERS, runs, strict=True)
    }
    return report, per_query


def engine_run(metric, feed):
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "m")
    return engine.run(feed).metrics


def test_paired_comparison_equals_ranx_student_and_statsmodels_adjustments():
    scores, labels, _ = make_data(seed=1)
    report, per_query = ranx_compare(scores, labels)
    metric = PairedComparison(list(METRICS), RANKERS)
    feed = [
        ({r: torch.from_numpy(scores[r][i : i + 32]) for r in RANKERS}, torch.from_numpy(labels[i : i + 32]))
        for i in range(0, len(labels), 32)
    ]
    got = engine_run(metric, feed)
    pairs = list(itertools.combinations(RANKERS, 2))
    for ours, theirs in METRICS.items():
        for r in RANKERS:  # every ranker's mean as ranx evaluates it
            assert got[f"{ours}/{r}"] == pytest.approx(report.results[r][theirs], rel=1e-9, abs=1e-12)
        p_values = []
        for a, b in pairs:
            key = f"{ours}/{a}-vs-{b}"
            p = report.comparisons[a, b][theirs]["p_value"]
            assert got[f"{key}/p_value"] == pytest.approx(p, rel=1e-9, abs=1e-15), key
            d = per_query[a][theirs] - per_query[b][theirs]
            assert got[f"{key}/diff"] == pytest.approx(d.mean(), rel=1e-9, abs=1e-15), key
            assert got[f"{key}/stderr"] == pytest.approx(stats.sem(d), rel=1e-9), key
            p_values.append(p)
        holm = multipletests(p_values, method="holm")[1]
        bonferroni = multipletests(p_values, method="bonferroni")[1]
        for (a, b), p_holm, p_bonf in zip(pairs, holm, bonferroni, strict=True):
            key = f"{ours}/{a}-vs-{b}"
            assert got[f"{key}/p_holm"] == pytest.approx(p_holm, rel=1e-9, abs=1e-15), key
            assert got[f"{key}/p_bonferroni"] == pytest.approx(p_bonf, rel=1e-9, abs=1e-15), key


def hc1(values, weights):
    """The mean, HC1 standard error and degrees of freedom of a WLS fit on a constant."""
    fit = sm.WLS(values, np.ones_like(values), weights=weights).fit(cov_type="HC1")
    return float(fit.params[0]), float(fit.bse[0]), len(values) - 1


def test_weighted_standard_errors_equal_statsmodels_wls_hc1():
    """Every list metric with per-list weights through an Engine (confidence=0.9), against
    statsmodels on ranx's per-query values (lists of weight 0 are no units: left out)."""
    scores, labels, weights = make_data(seed=2)
    weights[::9] = 0.0
    _, per_query = ranx_compare(scores, labels)
    feed = [
        (torch.from_numpy(scores["model"][i : i + 25]), torch.from_numpy(labels[i : i + 25]),
         {"sample_weight": torch.from_numpy(weights[i : i + 25])})
        for i in range(0, len(labels), 25)
    ]  # fmt: skip
    got = engine_run(ListMetrics(list(METRICS), confidence=0.9), feed)
    keep = weights > 0
    for ours, theirs in METRICS.items():
        mean, se, df = hc1(per_query["model"][theirs][keep], weights[keep])
        half = stats.t.ppf(0.95, df) * se
        assert got[ours] == pytest.approx(mean, rel=1e-9), ours
        assert got[f"{ours}_stderr"] == pytest.approx(se, rel=1e-9), ours
        assert got[f"{ours}_ci_low"] == pytest.approx(mean - half, rel=1e-9), ours
        assert got[f"{ours}_ci_high"] == pytest.approx(mean + half, rel=1e-9), ours
        assert got[f"{ours}_count"] == keep.sum()


def test_weighted_paired_differences_equal_statsmodels_wls_hc1():
    scores, labels, weights = make_data(seed=3)
    _, per_query = ranx_compare(scores, labels)
    stacked = torch.from_numpy(np.stack([scores[r] for r in RANKERS], axis=1))
    feed = [
        {"y_pred": stacked[i : i + 40], "y": torch.from_numpy(labels[i : i + 40]),
         "sample_weight": torch.from_numpy(weights[i : i + 40])}
        for i in range(0, len(labels), 40)
    ]  # fmt: skip
    got = engine_run(PairedComparison(list(METRICS), RANKERS), feed)
    for ours, theirs in METRICS.items():
        for a, b in itertools.combinations(RANKERS, 2):
            d = per_query[a][theirs] - per_query[b][theirs]
            mean, se, df = hc1(d, weights)
            key = f"{ours}/{a}-vs-{b}"
            assert got[f"{key}/diff"] == pytest.approx(mean, rel=1e-9, abs=1e-15), key
            assert got[f"{key}/stderr"] == pytest.approx(se, rel=1e-9, abs=1e-15), key
            t = mean / se
            assert got[f"{key}/t"] == pytest.approx(t, rel=1e-9, abs=1e-12), key
            assert got[f"{key}/p_value"] == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9, abs=1e-15), (
                key
            )


def test_ignore_zero_hits_takes_a_bool_only():
    """A mapping (per-metric defaults, as the core collections take) where ignite's
    ``ignore_zero_hits`` stands is refused, not read as True."""
    with pytest.raises(TypeError, match=r"ignore_zero_hits must be True or False, got \{'map'"):
        ListMetrics(["map@10"], {"map": {"denominator": "all"}})
    with pytest.raises(TypeError, match=r"ignore_zero_hits must be True or False, got 'no'"):
        PairedComparison(["map@10"], RANKERS, "no")
    from rankstream.ignite import MAP

    with pytest.raises(TypeError, match=r"ignore_zero_hits must be True or False, got None"):
        MAP(10, None)
