"""PyKEEN's whole report from one metric: every rank type from one comparison pass, named sides
with their own sums and ``both``, PyKEEN's flat keys, ``prefix``, PyKEEN's filtered scores,
stacked sides, and the streamed dispersion, median and inverse metrics.

Expected numbers come from ranks counted naively task by task (python loops, ties counted
exactly) and PyKEEN's metric classes applied to them (:mod:`pykeen_reference`); the median's
bounds from PyKEEN's and scipy's medians of the exact ranks. Scores are small integers (exact
ties in any batch layout)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from pykeen.evaluation.rank_based_evaluator import RankBasedMetricResults
from pykeen.metrics import ranking as pk
from scipy import stats as sps

from rankstream.core.ranks import median as stats
from rankstream.core.ranks.families import RANK_TYPES
from rankstream.core.ranks.kernel import RankKernel
from rankstream.core.state import State
from rankstream.ignite import ListMetrics, RankBasedMetrics

from pykeen_reference import naive_tasks, pykeen_report

SIDES = ("head", "tail")
KS = (1, 3, 5, 10)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def side_batch(rng, b=12, n=15, masked=True, weighted=False):
    """One side's batch: integer scores (ties), true indices, a ragged mask keeping the true
    candidate, positive weights (exact in binary)."""
    scores = rng.integers(0, 6, (b, n)).astype(np.float64)
    y = rng.integers(0, n, b)
    mask = None
    if masked:
        mask = rng.random((b, n)) < 0.75
        mask[np.arange(b), y] = True
    w = rng.integers(1, 8, b) / 4.0 if weighted else None
    return scores, y, mask, w


def batches(seed, num=3, **kw):
    rng = np.random.default_rng(seed)
    return [{side: side_batch(rng, **kw) for side in SIDES} for _ in range(num)]


def expected_report(data, ks=KS):
    """PyKEEN's flat keys over the naive ranks of every side and of both sides together."""
    return pykeen_report(
        {side: [t for batch in data for t in naive_tasks(*batch[side])] for side in SIDES}, ks
    )


def engine_output(batch):
    """An engine output: a mapping of sides, each a mapping of tensors."""
    out = {}
    for side, (scores, y, mask, w) in batch.items():
        item = {"y_pred": torch.tensor(scores), "y": torch.tensor(y)}
        if mask is not None:
            item["mask"] = torch.tensor(mask)
        if w is not None:
            item["sample_weight"] = torch.tensor(w)
        out[side] = item
    return out


def run_engine(metrics: dict, data):
    engine = Engine(lambda e, batch: engine_output(batch))
    for name, metric in metrics.items():
        metric.attach(engine, name)
    return engine.run(data).metrics


def assert_close(got, want, rtol=1e-9, atol=1e-12):
    assert set(want) <= set(got), sorted(set(want) - set(got))[:5]
    bad = {k: (got[k], v) for k, v in want.items() if not np.isclose(got[k], v, rtol=rtol, atol=atol)}
    assert not bad, list(bad.items())[:5]


# ==========================================================================================
# the report through an Engine


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_report_matches_pykeen_through_engine(masked, weighted):
    data = batches(3 + 2 * masked + weighted, masked=masked, weighted=weighted)
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    got = run_engine({"report": metric}, data)
    want = expected_report(data)
    assert_close(got, want)
    # exactly PyKEEN's keys plus the GMR series' error bound (which PyKEEN needs not: it has
    # every rank)
    ours = {k for k in got if k.count(".") == 2}
    extra = {f"{s}.{rt}.geometric_mean_rank_error_bound" for s in (*SIDES, "both") for rt in RANK_TYPES}
    assert ours == set(want) | extra


def test_keys_parse_as_pykeen_keys():
    """Every key naming a metric PyKEEN has parses with PyKEEN's own key parser into the same
    (side, rank type, metric); PyKEEN's default report keys are all ours except its
    ``adjusted_hits_at_k`` / ``z_hits_at_k`` (one key for every k in PyKEEN: the last k
    written wins; ours are per k)."""
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    metric.update(engine_output(batches(0, num=1)[0]))
    got = metric.compute()
    pykeen_keys = set(RankBasedMetricResults.create_random(0).to_flat_dict())
    known_metrics = {key.split(".")[2] for key in pykeen_keys} | {f"hits_at_{k}" for k in KS}
    # PyKEEN's parser accepts the adjusted and z forms for the realistic rank only
    checked = 0
    for key in got:
        side, rank_type, name = key.split(".")
        if name in known_metrics and rank_type == "realistic":
            parsed = RankBasedMetricResults.key_from_string(key)
            assert (parsed.side, parsed.rank_type, parsed.metric) == (side, rank_type, name)
            checked += 1
    assert checked == 3 * (len(known_metrics) - 2)
    collapsed = {k for k in pykeen_keys if k.endswith(("adjusted_hits_at_k", "z_hits_at_k"))}
    assert pykeen_keys - collapsed <= set(got)
    # PyKEEN's collapsed key holds its last k: ours for that k
    assert {k.replace("_hits_at_k", "_hits_at_10") for k in collapsed} <= set(got)


def test_one_pass_equals_one_metric_per_side_and_type():
    data = batches(11)
    report = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    singles = {(s, rt): RankBasedMetrics(ks=KS, rank_type=rt) for s in SIDES for rt in RANK_TYPES}
    for batch in data:
        report.update(engine_output(batch))
        for (side, _), metric in singles.items():
            metric.update(engine_output(batch)[side])
    got = report.compute()
    for (side, rt), metric in singles.items():
        single = metric.compute()
        assert {k: got[f"{side}.{rt}.{k}"] for k in single} == pytest.approx(single, rel=1e-12, abs=1e-15)


def test_prefix_keeps_instances_apart_on_one_engine():
    data = batches(5)
    filtered = RankBasedMetrics(ks=(1, 10), rank_type=RANK_TYPES, sides=SIDES, prefix="filtered/")
    plain = RankBasedMetrics(ks=(1, 10), rank_type=("realistic",), sides=SIDES, prefix="raw/")
    got = run_engine({"a": filtered, "b": plain}, data)
    want = expected_report(data, ks=(1, 10))
    assert_close({k[len("filtered/") :]: v for k, v in got.items() if k.startswith("filtered/")}, want)
    raw = {k[len("raw/") :]: v for k, v in got.items() if k.startswith("raw/")}
    assert {k.split(".")[1] for k in raw} == {"realistic"}
    assert_close(raw, {k: v for k, v in want.items() if ".realistic." in k})
    with pytest.raises(TypeError, match="prefix"):
        RankBasedMetrics(prefix=3)


def test_list_metrics_prefix():
    lists = ListMetrics(["ndcg@3"], prefix="val_")
    lists.update((torch.tensor([[3.0, 1.0, 2.0]]), torch.tensor([[1.0, 0.0, 1.0]])))
    assert set(lists.compute()) == {"val_ndcg@3"}


def test_sides_missing_from_a_batch_add_nothing():
    data = batches(8)
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    for batch in data:
        metric.update(engine_output({"head": batch["head"]}))
        metric.update(engine_output({"tail": batch["tail"]}))
    assert_close(metric.compute(), expected_report(data))


def test_a_failed_update_leaves_every_side_untouched():
    data = batches(9)
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    metric.update(engine_output(data[0]))
    before = metric.state_sums()
    bad = engine_output(data[1])
    bad["tail"]["y"] = bad["tail"]["y"] + 100  # out of range
    with pytest.raises(ValueError, match="out of range"):
        metric.update(bad)
    after = metric.state_sums()
    assert all(np.array_equal(before[f], after[f]) for f in before)


def test_checkpoint_round_trip():
    data = batches(4)
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    for batch in data[:2]:
        metric.update(engine_output(batch))
    resumed = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    resumed.load_state_dict(metric.state_dict())
    resumed.update(engine_output(data[2]))
    assert_close(resumed.compute(), expected_report(data))
    other = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=("tail", "head"))
    with pytest.raises(ValueError, match="sides"):
        other.load_state_dict(metric.state_dict())


# ==========================================================================================
# input forms: stacked sides, PyKEEN's filtered scores


def test_stacked_sides_equal_a_mapping_of_sides():
    data = batches(6, weighted=True)
    mapped = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    stacked = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    for batch in data:
        mapped.update(engine_output(batch))
        h, t = batch["head"], batch["tail"]
        scores = torch.tensor(np.stack([h[0], t[0]], 1))
        y = torch.tensor(np.stack([h[1], t[1]], 1))
        mask = torch.tensor(np.stack([h[2], t[2]], 1))
        w = torch.tensor(np.stack([h[3], t[3]], 1))
        stacked.update((scores, y, {"mask": mask, "sample_weight": w}))
    assert stacked.compute() == pytest.approx(mapped.compute(), rel=1e-12, abs=1e-15)
    with pytest.raises(ValueError, match=r"y_pred with stacked sides must have shape \(batch, 2"):
        stacked.update((torch.zeros(4, 3, 5), torch.zeros(4, 3, dtype=torch.long)))
    with pytest.raises(ValueError, match="y with stacked sides"):
        stacked.update((torch.zeros(4, 2, 5), torch.zeros(4, dtype=torch.long)))


@given(seed=st.integers(0, 10_000), neg_inf=st.booleans())
@SETTINGS
def test_pykeen_filtered_scores_equal_the_mask(seed, neg_inf):
    """NaN (PyKEEN's filtered candidates) or -inf scores are not candidates, as ``mask`` False:
    PyKEEN counts its candidates with ``isfinite``."""
    rng = np.random.default_rng(seed)
    data = [{side: side_batch(rng, b=6, n=9) for side in SIDES} for _ in range(2)]
    masked = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    filtered = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES, filtered_scores=True)
    for batch in data:
        masked.update(engine_output(batch))
        fill = -np.inf if neg_inf else np.nan
        plain = {s: (np.where(m, x, fill), y, None, w) for s, (x, y, m, w) in batch.items()}
        filtered.update(engine_output(plain))
    assert filtered.compute() == pytest.approx(masked.compute(), rel=1e-12, abs=1e-15)


def test_filtered_scores_at_the_true_candidate_and_without_the_option():
    scores = torch.tensor([[1.0, float("nan"), 0.5]])
    with pytest.raises(ValueError, match="NaN"):
        RankBasedMetrics().update((scores, torch.tensor([0])))
    with pytest.raises(ValueError, match="masked out"):
        RankBasedMetrics(filtered_scores=True).update((scores, torch.tensor([1])))
    # without the option, -inf is the lowest score, a candidate
    low = torch.tensor([[1.0, float("-inf"), 0.5]])
    plain, filtered = RankBasedMetrics(ks=1), RankBasedMetrics(ks=1, filtered_scores=True)
    plain.update((low, torch.tensor([2])))
    filtered.update((low, torch.tensor([2])))
    assert plain.compute()["expected_hits_at_1"] == pytest.approx(1 / 3)
    assert filtered.compute()["expected_hits_at_1"] == pytest.approx(1 / 2)
    with pytest.raises(TypeError, match="filtered_scores"):
        RankBasedMetrics(filtered_scores="yes")


@pytest.mark.parametrize(
    ("kwargs", "update", "match"),
    [
        ({"sides": SIDES}, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)), "mapping"),
        ({"sides": SIDES}, {"head": None, "relation": None}, "sides of this metric"),
        ({}, {"head": (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))}, "missing"),
    ],
)
def test_side_errors(kwargs, update, match):
    metric = RankBasedMetrics(**kwargs)
    with pytest.raises(ValueError, match=match):
        metric.update(update)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sides": ("head", "both")}, "other than 'both'"),
        ({"sides": ("head", "head")}, "unique"),
        ({"sides": "head"}, "sequence of names"),
        ({"rank_type": ("realistic", "median")}, "rank_type must be one of"),
        ({"rank_type": ()}, "non-empty sequence"),
        ({"metrics": ("hits", "mean")}, "subset of"),
    ],
)
def test_setting_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RankBasedMetrics(**kwargs)


def test_select_needs_one_rank_type():
    with pytest.raises(ValueError, match="select needs one rank type"):
        RankKernel(10, RANK_TYPES, select=("hits", "value"))


# ==========================================================================================
# the streamed median: exact below the limit, bounded above it


def naive_realistic(scores, y):
    o, p, _, _ = zip(*naive_tasks(scores, y), strict=True)
    return (np.array(o) + np.array(p)) / 2.0


@given(seed=st.integers(0, 10_000), exact=st.sampled_from([1, 4, 16]), per_octave=st.sampled_from([1, 2, 8]))
@SETTINGS
def test_median_and_mad_lie_within_their_bounds(seed, exact, per_octave):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    scores = rng.integers(0, max(2, n // 3), (int(rng.integers(1, 40)), n)).astype(np.float64)
    y = rng.integers(0, n, scores.shape[0])
    kernel = RankKernel(
        KS, "realistic", metrics=("median",), median_exact=exact, median_bins_per_octave=per_octave
    )
    state = State(kernel)
    state.update(scores, y)
    got = state.compute()
    ranks = naive_realistic(scores, y)
    true_median = np.median(ranks)
    true_mad = sps.median_abs_deviation(ranks, scale="normal")
    slack = 1e-9 * (1 + true_median)
    assert abs(got["median_rank"] - true_median) <= got["median_rank_error_bound"] + slack
    mad_bound = got["median_absolute_deviation_error_bound"]
    assert abs(got["median_absolute_deviation"] - true_mad) <= mad_bound + slack
    # the bound: zero when every rank is below the exact limit, else at most a bin's width
    if ranks.max() < exact:
        assert got["median_rank_error_bound"] == 0.0 and got["median_absolute_deviation_error_bound"] == 0.0
    assert got["median_rank_error_bound"] <= max(0.5, (2 ** (1 / per_octave) - 1) * true_median + 1)


@given(
    ranks=st.lists(st.integers(2, 2000).map(lambda r: r / 2.0), min_size=1, max_size=60),
    weights=st.lists(st.integers(1, 12), min_size=60, max_size=60),
)
@SETTINGS
def test_histogram_median_exact_below_the_limit_matches_pykeen(ranks, weights):
    """With every rank below the exact limit, the median and MAD are PyKEEN's (weighted medians;
    its unweighted MAD scaled by 1 / ndtri(3/4), as scipy's ``scale="normal"``)."""
    ranks = np.array(ranks)
    w = np.array(weights[: ranks.size], dtype=float)
    bins = stats.rank_bins(1024, 64)
    idx = np.searchsorted(bins.edges, ranks, side="right") - 1
    for weights_ in (None, w):
        hist = np.bincount(idx, weights=weights_, minlength=len(bins)).astype(float)
        median, median_bound, mad, mad_bound = stats.histogram_median_xp(hist, bins, np)
        assert median == pk.MedianRank()(ranks, None, weights_)
        assert median_bound == 0.0 and mad_bound == 0.0
        if weights_ is None:
            assert mad == pytest.approx(sps.median_abs_deviation(ranks, scale="normal"), rel=1e-14, abs=1e-14)
        else:
            raw = pk.MedianAbsoluteDeviation()(ranks, None, weights_)
            assert mad == pytest.approx(raw / sps.norm.ppf(0.75), rel=1e-14, abs=1e-14)


def test_rank_bins():
    bins = stats.rank_bins(8, 4, top=2.0**10)
    assert list(bins.edges[:15]) == [1 + i / 2 for i in range(15)]  # every half-integer to 8
    log = bins.edges[15:]
    assert np.all(np.diff(log) > 0) and np.all(log * 2 == np.round(log * 2))
    assert np.all(log[1:] / log[:-1] <= 2 ** (1 / 4) + 0.5 / 8)
    assert bins.high[-1] == np.inf and np.all(bins.high[:14] == bins.low[:14])  # 1 .. 7.5 exact
    assert bins.high[14] > bins.low[14] == 8
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="exact limit"):
            stats.rank_bins(bad)
    with pytest.raises(ValueError, match="bins per octave"):
        stats.rank_bins(8, 0)
