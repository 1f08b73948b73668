"""Paired comparison of rankers (``PairedComparison``): the mean difference, its standard error,
interval, paired t statistic and p-value equal scipy's ``ttest_rel`` / ``t.interval`` on the
per-list values of the naive reference; the weighted ones the ratio-estimator formula written
here; Holm and Bonferroni equal the adjustments written here from their definitions; through
``State`` (update, merge, any batch split) and an Ignite ``Engine`` run; and a simulation of two
equally good rankers rejects at about the test's level."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from scipy import stats

from rankstream import PairedComparison, State, merge
from rankstream.ignite import PairedComparison as IgnitePaired

import reference as ref

RANKERS = ["model", "popularity", "random"]
#: metric name -> the naive reference's per-list function and its k
NAMES = {
    "ndcg@10": (ref.ndcg, 10),
    "map@5": (ref.average_precision, 5),
    "recall@10": (ref.recall, 10),
    "mrr@10": (ref.reciprocal_rank, 10),
}


def make_data(seed: int = 0, b: int = 120, n: int = 25):
    """Graded labels (0..3, some lists without a relevant item or without a label >= 1), and
    three rankers of different quality; continuous scores (no ties)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=(b, n)).astype(float) * (rng.random((b, n)) < 0.25)
    labels[:3] = 0.0
    popularity = rng.normal(size=n)
    scores = {
        "model": labels * 0.6 + rng.normal(size=(b, n)),
        "popularity": np.broadcast_to(popularity, (b, n)) * 0.5 + labels * 0.5 + rng.normal(size=(b, n)),
        "random": rng.normal(size=(b, n)),
    }
    weights = rng.uniform(0.2, 2.0, size=b)
    return scores, labels, weights


def reference_values(scores, labels, name):
    """``(values (L, R), weights-index (L,))``: the per-list values of every ranker on the lists
    where the reference has a value for every ranker, one list at a time."""
    fn, k = NAMES[name]
    rows, kept = [], []
    for i in range(labels.shape[0]):
        vals = [fn(scores[r][i], labels[i], k) for r in RANKERS]
        if all(v is not None for v in vals):
            rows.append(vals)
            kept.append(i)
    return np.array(rows), np.array(kept)


def holm_reference(p):
    """Holm's step-down procedure from its definition: reject in increasing order of p while
    p_(i) <= alpha / (m - i + 1); the adjusted p-value is the smallest alpha that rejects."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def expected_unweighted(scores, labels, name):
    values, _ = reference_values(scores, labels, name)
    out = {f"{name}/{r}": values[:, j].mean() for j, r in enumerate(RANKERS)}
    out[f"{name}/count"] = float(len(values))
    p_values = []
    for (i, a), (j, b) in itertools.combinations(enumerate(RANKERS), 2):
        d = values[:, i] - values[:, j]
        test = stats.ttest_rel(values[:, i], values[:, j])
        low, high = stats.t.interval(0.9, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        key = f"{name}/{a}-vs-{b}"
        out.update({
            f"{key}/diff": d.mean(), f"{key}/stderr": stats.sem(d), f"{key}/ci_low": low,
            f"{key}/ci_high": high, f"{key}/t": test.statistic, f"{key}/p_value": test.pvalue,
        })  # fmt: skip
        p_values.append(test.pvalue)
    pairs = [f"{name}/{a}-vs-{b}" for a, b in itertools.combinations(RANKERS, 2)]
    for key, p_holm, p in zip(pairs, holm_reference(p_values), p_values, strict=True):
        out[f"{key}/p_holm"] = p_holm
        out[f"{key}/p_bonferroni"] = min(1.0, len(pairs) * p)
    return out


def assert_close(got, want, tol=1e-9):
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=tol, abs=tol), key


def test_core_matches_scipy_ttest_rel_and_adjustments():
    scores, labels, _ = make_data()
    kernel = PairedComparison(list(NAMES), RANKERS, confidence=0.9)
    got = State(kernel).update(scores, labels).compute()
    want = {}
    for name in NAMES:
        want.update(expected_unweighted(scores, labels, name))
    assert_close(got, want)
    assert list(got) == kernel.reported
    # the differences are not all insignificant: the test compares real p-values
    assert got["ndcg@10/model-vs-random/p_value"] < 1e-6
    assert got["recall@10/model-vs-popularity/p_value"] > 1e-4


def test_weighted_matches_the_ratio_estimator():
    scores, labels, weights = make_data(seed=1)
    kernel = PairedComparison(["ndcg@10", "map@5"], RANKERS)
    got = (
        State(kernel).update(np.stack([scores[r] for r in RANKERS], axis=1), labels, None, weights).compute()
    )
    for name in ("ndcg@10", "map@5"):
        values, kept = reference_values(scores, labels, name)
        w = weights[kept]
        n = len(w)
        for j, r in enumerate(RANKERS):
            assert got[f"{name}/{r}"] == pytest.approx(np.sum(w * values[:, j]) / np.sum(w), rel=1e-12)
        for (i, a), (j, b) in itertools.combinations(enumerate(RANKERS), 2):
            d = values[:, i] - values[:, j]
            m = np.sum(w * d) / np.sum(w)
            se = np.sqrt(n / (n - 1) * np.sum(w**2 * (d - m) ** 2)) / np.sum(w)
            t = m / se
            key = f"{name}/{a}-vs-{b}"
            assert got[f"{key}/diff"] == pytest.approx(m, rel=1e-12)
            assert got[f"{key}/stderr"] == pytest.approx(se, rel=1e-9)
            assert got[f"{key}/t"] == pytest.approx(t, rel=1e-9)
            assert got[f"{key}/p_value"] == pytest.approx(2 * stats.t.sf(abs(t), n - 1), rel=1e-9)
            half = stats.t.ppf(0.975, n - 1) * se
            assert got[f"{key}/ci_low"] == pytest.approx(m - half, rel=1e-9)
            assert got[f"{key}/ci_high"] == pytest.approx(m + half, rel=1e-9)


def test_batch_split_merge_and_input_forms_agree():
    scores, labels, weights = make_data(seed=2, b=90)
    kernel = PairedComparison(["ndcg@10", "mrr@10", "precision@5"], RANKERS)
    whole = State(kernel).update(scores, labels, None, weights)
    stacked = np.stack([scores[r] for r in RANKERS], axis=1)
    as_torch = {r: torch.from_numpy(s.copy()) for r, s in scores.items()}
    shards = [
        State(kernel).update({r: s[lo:hi] for r, s in scores.items()}, labels[lo:hi], None, weights[lo:hi])
        for lo, hi in [(0, 7), (7, 50), (50, 90)]
    ]
    one_by_one = State(kernel)
    for lo in range(0, 90, 13):
        one_by_one.update(stacked[lo : lo + 13], labels[lo : lo + 13], None, weights[lo : lo + 13])
    others = [
        merge(*shards),
        one_by_one,
        State(kernel).update(stacked, labels, None, weights),
        State(kernel).update(as_torch, torch.from_numpy(labels), None, torch.from_numpy(weights)),
    ]
    want = whole.compute()
    for other in others:
        assert_close(other.compute(), want, tol=1e-12)


def test_two_rankers_report_no_adjustment_and_keys_in_order():
    scores, labels, _ = make_data(seed=3)
    kernel = PairedComparison(["ndcg@10"], ["model", "random"])
    got = State(kernel).update({"random": scores["random"], "model": scores["model"]}, labels).compute()
    assert list(got) == [
        "ndcg@10/model", "ndcg@10/random", "ndcg@10/count",
        *(f"ndcg@10/model-vs-random/{s}" for s in ("diff", "stderr", "ci_low", "ci_high", "t", "p_value")),
    ]  # fmt: skip
    values, _ = reference_values(scores, labels, "ndcg@10")
    test = stats.ttest_rel(values[:, 0], values[:, 2])
    assert got["ndcg@10/model-vs-random/t"] == pytest.approx(test.statistic, rel=1e-9)
    assert got["ndcg@10/model-vs-random/p_value"] == pytest.approx(test.pvalue, rel=1e-9)


def _engine_run(scores, labels, weights, batch_size, metric):
    n = labels.shape[0]
    data = [
        {
            "y_pred": {r: torch.from_numpy(s[lo : lo + batch_size].copy()) for r, s in scores.items()},
            "y": torch.from_numpy(labels[lo : lo + batch_size]),
            "sample_weight": None if weights is None else torch.from_numpy(weights[lo : lo + batch_size]),
        }
        for lo in range(0, n, batch_size)
    ]
    for batch in data:
        if batch["sample_weight"] is None:
            del batch["sample_weight"]
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "compare")
    engine.run(data)
    return engine


def test_ignite_engine_run_matches_scipy():
    scores, labels, _ = make_data(seed=4)
    metric = IgnitePaired(list(NAMES), RANKERS, confidence=0.9)
    engine = _engine_run(scores, labels, None, 32, metric)
    want = {}
    for name in NAMES:
        want.update(expected_unweighted(scores, labels, name))
    got = {k: v for k, v in engine.state.metrics.items() if k != "compare"}
    assert_close(got, want)
    assert_close(engine.state.metrics["compare"], want)


def test_ignite_stacked_weighted_and_checkpoint_equal_the_core():
    scores, labels, weights = make_data(seed=5, b=70)
    stacked = torch.from_numpy(np.stack([scores[r] for r in RANKERS], axis=1))
    metric = IgnitePaired(["ndcg@10", "map@5"], RANKERS)
    metric.update({"y_pred": stacked[:40], "y": torch.from_numpy(labels[:40]),
                   "sample_weight": torch.from_numpy(weights[:40])})  # fmt: skip
    saved = metric.state_dict()
    resumed = IgnitePaired(["ndcg@10", "map@5"], RANKERS)
    resumed.load_state_dict(saved)
    for m in (metric, resumed):
        m.update(
            (stacked[40:], torch.from_numpy(labels[40:]), {"sample_weight": torch.from_numpy(weights[40:])})
        )
    core = State(PairedComparison(["ndcg@10", "map@5"], RANKERS)).update(scores, labels, None, weights)
    assert_close(metric.compute(), core.compute(), tol=1e-12)
    assert_close(resumed.compute(), core.compute(), tol=1e-12)


def test_bad_input_names_the_argument_and_leaves_the_state():
    scores, labels, _ = make_data(seed=6, b=10)
    metric = IgnitePaired(["ndcg@10"], ["model", "random"])
    metric.update({"y_pred": {r: torch.from_numpy(scores[r]) for r in ("model", "random")},
                   "y": torch.from_numpy(labels)})  # fmt: skip
    before = metric.state_sums()
    with pytest.raises(
        ValueError, match=r"y_pred must map exactly the rankers \['model', 'random'\].*'popularity'"
    ):
        metric.update({"y_pred": {r: torch.from_numpy(scores[r]) for r in ("model", "popularity")},
                       "y": torch.from_numpy(labels)})  # fmt: skip
    with pytest.raises(ValueError, match=r"stacked scores of shape \(batch, 2, list_size\).*\(10, 25\)"):
        metric.update((torch.from_numpy(scores["model"]), torch.from_numpy(labels)))
    bad = {"model": torch.from_numpy(scores["model"]), "random": torch.from_numpy(scores["random"][:, :5])}
    with pytest.raises(ValueError):
        metric.update({"y_pred": bad, "y": torch.from_numpy(labels)})
    after = metric.state_sums()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="rankers must name two or more distinct rankers"):
        PairedComparison(["ndcg@10"], ["a", "a"])
    with pytest.raises(ValueError, match="without '/' or '-vs-'"):
        PairedComparison(["ndcg@10"], ["a/b", "c"])
    with pytest.raises(ValueError, match="confidence must be a confidence level"):
        PairedComparison(["ndcg@10"], ["a", "b"], confidence=95)
    with pytest.raises(ValueError, match="unknown list metric"):
        PairedComparison(["ndcg10"], ["a", "b"])


def test_equal_rankers_reject_at_the_level():
    """2,000 evaluations of 200 lists each, two rankers drawn from one distribution: the
    paired t-test at 0.05 rejects in 3-7% of them (nDCG@10 and MAP@10)."""
    rng = np.random.default_rng(7)
    kernel = PairedComparison(["ndcg@10", "map@10"], ["a", "b"])
    n_eval, b, n = 2000, 200, 20
    rejected = {"ndcg@10": 0, "map@10": 0}
    for _ in range(n_eval):
        labels = (rng.random((b, n)) < 0.15).astype(np.float64)
        quality = rng.uniform(0.0, 1.5, size=(b, 1))  # lists differ in how easy they are
        stacked = labels[:, None, :] * quality[:, None, :] + rng.normal(size=(b, 2, n))
        sums = {k: np.asarray(v) for k, v in kernel.batch_sums(None, stacked, labels).items()}
        result = kernel.compute(sums)
        for name in rejected:
            rejected[name] += result[f"{name}/a-vs-b/p_value"] < 0.05
    for name, count in rejected.items():
        assert 0.03 <= count / n_eval <= 0.07, (name, count / n_eval)


def test_holm_steps_down_and_bonferroni_caps():
    from rankstream.core.lists.paired import bonferroni, holm

    p = [0.04, 0.01, 0.011, 0.5]  # the step-down's running maximum lifts 0.011 * 3 to 0.04
    assert holm(np.array(p)) == pytest.approx(holm_reference(p), rel=1e-15)
    assert holm(np.array(p)) == pytest.approx([0.08, 0.04, 0.04, 0.5], rel=1e-15)
    assert bonferroni(np.array(p)) == pytest.approx([0.16, 0.04, 0.044, 1.0], rel=1e-15)
    with_nan = holm(np.array([0.01, np.nan, 0.02]))  # NaN keeps NaN, counts in m
    assert with_nan[0] == pytest.approx(0.03) and np.isnan(with_nan[1]) and with_nan[2] == pytest.approx(0.04)


def test_compare_rankers_example_prints_scipy_paired_tests():
    """The example, run as a user runs it, prints per metric the difference, the interval and
    the p-value of scipy's paired t-test on the per-user values of the functional forms."""
    import importlib.util
    from pathlib import Path

    from _examples import printed_numbers, run_example

    from rankstream import map_at_k, ndcg_at_k, recall_at_k, reciprocal_rank_at_k

    proc = run_example("compare_rankers.py")
    path = Path(__file__).resolve().parent.parent / "examples" / "compare_rankers.py"
    spec = importlib.util.spec_from_file_location("compare_rankers_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    seen, held_out = example.make_data()
    rankers = example.make_rankers(seen)
    users = torch.arange(seen.shape[0])
    forms = {
        "ndcg@10": ndcg_at_k,
        "map@10": map_at_k,
        "recall@20": recall_at_k,
        "mrr@10": reciprocal_rank_at_k,
    }
    for name, form in forms.items():
        k = int(name.split("@")[1])
        values = {}
        for ranker, score in rankers.items():
            v, counted = form(score(users), held_out, k, mask=~seen, return_counted=True)
            values[ranker] = np.asarray(v)[np.asarray(counted)]
        a, b = values["itemknn"], values["popularity"]
        d = a - b
        low, high = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        p = stats.ttest_rel(a, b).pvalue
        got = printed_numbers(proc.stdout, f"{name}/itemknn-vs-popularity [")
        assert got == pytest.approx([d.mean(), low, high, p], rel=1e-9, abs=1e-300), name


def test_accelerator_and_torch_paths_equal_the_host_path_and_count_bad_lists():
    """Without reading values back (the path of an accelerator or jit) and with every batch
    on torch, the results equal the default path's; a NaN score of one ranker makes its list
    invalid, and compute() says so rather than report a number."""
    from rankstream.core.backends import host_batches, read_back

    scores, labels, weights = make_data(seed=8, b=60)
    data = ({r: torch.from_numpy(s.copy()) for r, s in scores.items()}, torch.from_numpy(labels))
    kernel = PairedComparison(["ndcg@10", "map@5"], RANKERS)
    want = State(kernel).update(*data, None, torch.from_numpy(weights)).compute()
    with read_back(False):
        no_read = State(kernel).update(*data, None, torch.from_numpy(weights)).compute()
    with host_batches(False):
        on_torch = State(kernel).update(*data, None, torch.from_numpy(weights)).compute()
    assert_close(no_read, want, tol=1e-12)
    assert_close(on_torch, want, tol=1e-12)
    data[0]["random"][5, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        State(kernel).update(*data)
    with read_back(False):
        state = State(kernel).update(*data)
    assert state.sums["ndcg_10__invalid"] == 1.0
    with pytest.raises(ValueError, match=r"PairedComparison\['ndcg@10'\]: 1 list\(s\) had NaN scores"):
        state.compute()
