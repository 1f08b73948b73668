"""Standard errors and confidence intervals of the rank-based means (``confidence=``): through
an Ignite ``Engine`` and the core ``State``, against scipy's ``sem`` / ``t.interval`` on the
per-task values of naive ranks (unit weights) and the ratio-estimator formula written out over
the tasks (weights); batch splits and merges; saved states without the statistics' sums."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from rank_statistics_reference import expected_statistics, per_task_values
from scipy import stats

from rankstream import State, merge
from rankstream.core.ranks.kernel import RANK_TYPES, RankKernel
from rankstream.core.state import StatisticsUnavailableWarning
from rankstream.ignite import GMR, ArithmeticMeanRank, HitsAtK, InverseHarmonicMeanRank, RankBasedMetrics

from pykeen_reference import naive_tasks

KS = (1, 3, 5)
FAMILY_KEYS = ("inverse_harmonic_mean_rank", "geometric_mean_rank", "arithmetic_mean_rank")
STATS = ("stderr", "ci_low", "ci_high")


def case(seed, kind="index", b=23, n=9, weights=False):
    """(scores with exact ties, y, mask, weights or None): integer scores, ragged lists."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, (b, n)).astype(np.float64)
    mask = np.arange(n)[None, :] < rng.integers(3, n + 1, b)[:, None]
    if kind == "index":
        y = (rng.random(b) * mask.sum(axis=1)).astype(np.int64)
    else:  # binary labels: 1 to 3 positives among the valid candidates
        y = np.zeros((b, n))
        for i in range(b):
            y[i, rng.choice(int(mask[i].sum()), 1 + i % 3, replace=False)] = 1.0
    w = rng.choice([0.0, 0.5, 1.0, 3.0], b) if weights else None
    return scores, y, mask, w


def batches_of(data, splits):
    scores, y, mask, w = data
    out = []
    for lo, hi in itertools.pairwise(splits):
        extra = {"mask": torch.from_numpy(mask[lo:hi])}
        if w is not None:
            extra["sample_weight"] = torch.from_numpy(w[lo:hi])
        out.append((torch.from_numpy(scores[lo:hi]), torch.from_numpy(y[lo:hi]), extra))
    return out


def engine_metrics(metrics, batches):
    engine = Engine(lambda e, b: b)
    for name, metric in metrics.items():
        metric.attach(engine, name)
    return engine.run(batches).metrics


def assert_statistics(got, want, prefix=""):
    assert {prefix + k for k in want} <= set(got)
    for key, value in want.items():
        assert got[prefix + key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize(
    "kind, weights, rank_type",
    [
        ("index", False, "realistic"),
        ("index", True, "optimistic"),
        ("labels", False, "pessimistic"),
        ("labels", True, "realistic"),
    ],
)
def test_engine_statistics_match_scipy_and_the_weighted_formula(kind, weights, rank_type):
    data = case(0, kind, weights=weights)
    tasks = naive_tasks(data[0], data[1], data[2], data[3])
    assert any(o < p for o, p, _, _ in tasks)  # tied true candidates
    metric = RankBasedMetrics(
        ks=KS, rank_type=rank_type, confidence=0.95, metrics=("hits", "mrr", "gmr", "mr")
    )
    got = engine_metrics({"rb": metric}, batches_of(data, [0, 7, 8, 23]))
    assert_statistics(got, expected_statistics(tasks, rank_type, KS, 0.95))
    assert got["count"] == sum(t[3] > 0 for t in tasks)


def test_unit_weights_are_scipy_sem_and_t_interval_literally():
    data = case(1)
    tasks = naive_tasks(data[0], data[1], data[2])
    got = engine_metrics({"rb": RankBasedMetrics(ks=KS, confidence=0.9)}, batches_of(data, [0, 23]))
    values, _ = per_task_values(tasks, "realistic", KS)
    for key in FAMILY_KEYS:
        v = values[key]
        assert got[f"{key}_stderr"] == pytest.approx(stats.sem(v), rel=1e-12)
        low, high = stats.t.interval(0.9, v.size - 1, loc=v.mean(), scale=stats.sem(v))
        if key == "geometric_mean_rank":  # the log scale's interval, mapped back
            low, high = math.exp(low), math.exp(high)
            assert got[key] == pytest.approx(math.exp(v.mean()), rel=1e-12)
        assert (got[f"{key}_ci_low"], got[f"{key}_ci_high"]) == pytest.approx((low, high), rel=1e-12)


def test_equal_weights_give_the_unweighted_statistics():
    scores, y, mask, _ = case(2)
    plain = State(RankKernel(KS, metrics=("hits", "mrr", "gmr", "mr"), confidence=0.95))
    scaled = State(RankKernel(KS, metrics=("hits", "mrr", "gmr", "mr"), confidence=0.95))
    plain.update(scores, y, mask)
    scaled.update(scores, y, mask, np.full(len(y), 2.5))
    a, b = plain.compute(), scaled.compute()
    for key in (*(f"hits_at_{k}" for k in KS), *FAMILY_KEYS):
        for q in STATS:
            assert b[f"{key}_{q}"] == pytest.approx(a[f"{key}_{q}"], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("cls", [HitsAtK, InverseHarmonicMeanRank, GMR, ArithmeticMeanRank])
def test_one_family_classes_put_each_quantity_in_the_engine(cls):
    data = case(3, weights=True)
    tasks = naive_tasks(*data)
    want = expected_statistics(tasks, "pessimistic", KS, 0.99)
    key = {HitsAtK: "hits_at_3", InverseHarmonicMeanRank: FAMILY_KEYS[0], GMR: FAMILY_KEYS[1]}.get(
        cls, FAMILY_KEYS[2]
    )
    metric = cls(3, "pessimistic", confidence=0.99) if cls is HitsAtK else cls("pessimistic", confidence=0.99)
    got = engine_metrics({"m": metric}, batches_of(data, [0, 11, 23]))
    assert set(got) == {"m", "m_stderr", "m_ci_low", "m_ci_high", "m_count"}
    for q in STATS:
        assert got[f"m_{q}"] == pytest.approx(want[f"{key}_{q}"], rel=1e-12, abs=1e-12), q
    assert got["m_count"] == sum(t[3] > 0 for t in tasks)
    assert got["m_ci_low"] <= got["m"] <= got["m_ci_high"]


def test_hits_with_several_k_reports_lists_ordered_by_k():
    data = case(4)
    want = expected_statistics(naive_tasks(*data), "realistic", KS, 0.95)
    got = engine_metrics({"h": HitsAtK(list(KS), confidence=0.95)}, batches_of(data, [0, 23]))
    for q in STATS:
        assert got[f"h_{q}"] == pytest.approx([want[f"hits_at_{k}_{q}"] for k in KS], rel=1e-12, abs=1e-12)


def test_sides_and_rank_types_report_per_side_and_type():
    head, tail = case(5), case(6, "labels", b=11)
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=("head", "tail"), confidence=0.95)

    def side(data):
        scores, y, mask, _ = data
        return {"y_pred": torch.from_numpy(scores), "y": torch.from_numpy(y), "mask": torch.from_numpy(mask)}

    got = engine_metrics({"rb": metric}, [{"head": side(head), "tail": side(tail)}])
    tasks = {"head": naive_tasks(*head[:3]), "tail": naive_tasks(*tail[:3])}
    tasks["both"] = tasks["head"] + tasks["tail"]
    for name, side_tasks in tasks.items():
        for rt in RANK_TYPES:
            assert_statistics(got, expected_statistics(side_tasks, rt, KS, 0.95), f"{name}.{rt}.")
            assert got[f"{name}.{rt}.count"] == len(side_tasks)


def test_any_split_and_merge_give_the_same_statistics():
    data = case(7, "labels", weights=True)
    kernel = RankKernel(KS, metrics=("hits", "mrr", "gmr", "mr"), confidence=0.95)
    want = expected_statistics(naive_tasks(*data), "realistic", KS, 0.95)
    rng = np.random.default_rng(0)
    scores, y, mask, w = data
    for _ in range(3):
        cuts = sorted({0, len(y), *rng.integers(1, len(y), 3).tolist()})
        shards = [
            State(kernel).update(scores[a:b], y[a:b], mask[a:b], w[a:b]) for a, b in itertools.pairwise(cuts)
        ]
        got = merge(*reversed(shards)).compute()
        assert_statistics(got, want)


def test_fewer_than_two_tasks_give_nan_statistics_never_zero():
    scores, y, mask, _ = case(8, b=3)
    st = State(RankKernel(KS, metrics=("hits", "mrr"), confidence=0.95))
    st.update(scores[:1], y[:1], mask[:1])
    got = st.compute()
    assert got["count"] == 1.0 and got["inverse_harmonic_mean_rank"] > 0
    for key in ("hits_at_3", FAMILY_KEYS[0]):
        assert all(math.isnan(got[f"{key}_{q}"]) for q in STATS)
    st.update(scores[1:], y[1:], mask[1:])
    assert all(not math.isnan(got) for key, got in st.compute().items() if key.endswith("_stderr"))


def test_off_keeps_the_fields_keys_and_saved_config():
    off, on = RankKernel(KS), RankKernel(KS, confidence=0.95)
    assert not any(f.endswith(("_w2", "_w2_sq", "weight_sq")) for f in off.fields)
    assert list(on.fields)[: len(off.fields)] == list(off.fields)  # the new fields come last
    scores, y, mask, _ = case(9)
    a, b = State(off).update(scores, y, mask), State(on).update(scores, y, mask)
    assert "confidence" not in a.state_dict()["config"] and off.quantities == ()
    plain, stats_on = a.compute(), b.compute()
    assert not any(k.endswith(STATS) for k in plain)
    assert {k: stats_on[k] for k in plain} == plain
    assert a.state_dict()["config"] == b.state_dict()["config"]  # the level is no setting of the sums


def test_saved_state_without_statistics_loads_with_them_unavailable():
    """A state saved without the statistics' sums (by a metric without confidence, or an older
    version) loads into a metric with them: the values as saved, the statistics NaN (never 0)
    with a warning, in Ignite and the core; one saved with them is refused by a metric without."""
    data = case(10)
    old = HitsAtK(3)
    engine_metrics({"h": old}, batches_of(data, [0, 23]))
    new = HitsAtK(3, confidence=0.95)
    with pytest.warns(StatisticsUnavailableWarning, match=r"saved without the sums of its standard error"):
        new.load_state_dict(old.state_dict())
    got = new.compute()
    assert got["value"] == old.compute()
    assert got["count"] == 23 and all(math.isnan(got[q]) for q in STATS)
    rb_old = RankBasedMetrics(ks=KS)
    rb_new = RankBasedMetrics(ks=KS, confidence=0.9)
    with pytest.warns(StatisticsUnavailableWarning):
        rb_new.load_state_dict(rb_old.state_dict())
    # the core State, too
    kernel = RankKernel(KS, confidence=0.95)
    saved = State(RankKernel(KS)).update(data[0], data[1], data[2]).state_dict()
    loaded = State(kernel)
    with pytest.warns(StatisticsUnavailableWarning):
        loaded.load_state_dict(saved)
    values = loaded.compute()
    plain = State(RankKernel(KS)).update(data[0], data[1], data[2]).compute()
    assert all(values[k] == v for k, v in plain.items())
    stat_keys = [k for k in values if k.endswith("_stderr")]
    assert stat_keys and all(math.isnan(values[k]) for k in stat_keys)
    # with the statistics saved, a metric without them refuses the state, saying so
    full = HitsAtK(3, confidence=0.95)
    engine_metrics({"h": full}, batches_of(data, [0, 23]))
    with pytest.raises(ValueError, match=r"saved with the sums of the standard errors"):
        HitsAtK(3).load_state_dict(full.state_dict())
    # and a state with statistics round-trips
    again = HitsAtK(3, confidence=0.95)
    again.load_state_dict(full.state_dict())
    assert again.compute() == full.compute()


def test_bad_confidence_is_refused():
    for bad in (0.0, 1.0, 95, "0.95", True):
        with pytest.raises(ValueError, match=r"confidence must be a confidence level in \(0, 1\).*got"):
            RankBasedMetrics(confidence=bad)
    with pytest.raises(ValueError, match=r"needs output='value', got output='adjusted'"):
        GMR(output="adjusted", confidence=0.95)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_the_95_percent_intervals_cover_the_population_means(weighted):
    """2,000 evaluations of 200 ranking tasks drawn from a population of 4,000 (40 candidates,
    tie-free scores, tasks of varied difficulty): each family's 95% interval covers the
    population's (weighted) mean in 93-97% of them; the geometric mean rank's interval, built on
    the log scale and mapped back, covers the population's geometric mean rank."""
    rng = np.random.default_rng(11 + weighted)
    size, n = 4000, 40
    difficulty = rng.uniform(0.0, 3.0, size=size)
    scores = rng.normal(size=(size, n))
    truth_idx = rng.integers(0, n, size=size)
    scores[np.arange(size), truth_idx] += difficulty
    ranks = 1.0 + (scores > scores[np.arange(size), truth_idx][:, None]).sum(axis=1)  # no ties
    weights = 0.5 + difficulty + rng.uniform(0.0, 1.0, size=size)  # correlated with the rank
    w = weights if weighted else np.ones(size)
    truth = {
        "hits_at_10": np.sum(w * (ranks <= 10)) / w.sum(),
        "inverse_harmonic_mean_rank": np.sum(w / ranks) / w.sum(),
        "arithmetic_mean_rank": np.sum(w * ranks) / w.sum(),
        "geometric_mean_rank": np.exp(np.sum(w * np.log(ranks)) / w.sum()),
    }
    kernel = RankKernel((10,), metrics=("hits", "mrr", "gmr", "mr"), confidence=0.95)
    covered = dict.fromkeys(truth, 0)
    evaluations = 2000
    for _ in range(evaluations):
        idx = rng.integers(0, size, size=200)
        got = State(kernel).update(scores[idx], truth_idx[idx], None, weights[idx] if weighted else None)
        result = got.compute()
        for key, value in truth.items():
            covered[key] += result[f"{key}_ci_low"] <= value <= result[f"{key}_ci_high"]
    for key, count in covered.items():
        assert 0.93 <= count / evaluations <= 0.97, (key, count / evaluations)
