"""``ties="expected"``: every list metric is the mean of the metric over ALL orders of the tied
items, checked against an exhaustive enumeration written here from the definitions (every
ordering of every group of equal scores, the plain metric of each ranking, averaged), for every
metric and k, graded labels, masks, thresholds, gains, per-list weights and keras-rs per-item
weights, on numpy, torch (host and tensor paths) and the no-read path, to 1e-12 in float64.
Also: scikit-learn's ``ndcg_score(ignore_ties=False)``, batch invariance, an Ignite Engine run,
``ListMetrics``, and that NaN scores stay an error."""

from __future__ import annotations

import itertools
import math

import enumeration as en
import numpy as np
import pytest
import torch
from ignite.engine import Engine
from sklearn.metrics import ndcg_score

from rankstream import ListMetrics as CoreListMetrics
from rankstream.core.backends import host_batches, read_back
from rankstream.core.lists.dcg import DCGKernel
from rankstream.core.lists.hit_rate import HitRateKernel
from rankstream.core.lists.map import MAPKernel
from rankstream.core.lists.ndcg import NDCGKernel
from rankstream.core.lists.precision import PrecisionKernel
from rankstream.core.lists.r_precision import RPrecisionKernel
from rankstream.core.lists.recall import RecallKernel
from rankstream.core.lists.reciprocal_rank import ReciprocalRankKernel
from rankstream.core.topk import TIE_POLICIES
from rankstream.ignite import MAP, MRR, NDCG, HitRate, ListMetrics, Precision

import reference as ref

KS = [1, 2, 3, 5, 8, 11]


# -- the enumerating reference ------------------------------------------------------------
def one_ranking(name: str, ys: list[float], ws: list[float], k: int, opts: dict) -> float:
    """The metric of ONE ranking (``ys``, ``ws`` the labels and item weights of the list's
    items in rank order), from its definition (:func:`enumeration.one_ranking`, the item
    weights weighing the gains and AP's terms; DCG not divided by a list weight)."""
    ranking = list(zip(ys, ws, strict=True))
    return en.one_ranking(name, ranking, k, {**opts, "item_weighted": True, "list_weight": 1.0})


def expected_over_orders(name: str, scores, labels, valid, iw, k: int, opts: dict) -> float:
    """The mean of :func:`one_ranking` over every order of each group of tied scores among the
    list's (valid) items: the product of the groups' permutations, enumerated."""
    items = [i for i in range(len(scores)) if valid[i]]
    levels = sorted({float(scores[i]) for i in items}, reverse=True)
    groups = [[i for i in items if float(scores[i]) == v] for v in levels]
    values = []
    for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
        ranking = [i for order in orders for i in order]
        ys = [float(labels[i]) for i in ranking]
        ws = [1.0 if iw is None else float(iw[i]) for i in ranking]
        values.append(one_ranking(name, ys, ws, k, opts))
    return math.fsum(values) / len(values)


# -- data with exact ties -----------------------------------------------------------------
def tied_batch(seed: int, b: int = 14, n: int = 8, mask: bool = True, item_weights: bool = False):
    """Scores on a coarse grid (groups of ties), one constant row, graded labels 0..3, a mask
    keeping at least one item per list; tied groups kept small enough to enumerate."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, size=(b, n)).astype(np.float64) / 4.0
    scores[0] = 0.5  # every item tied
    scores[1] = np.arange(n)[::-1]  # no tie at all
    labels = rng.integers(0, 4, size=(b, n)).astype(np.float64)
    labels[2] = 0.0  # no relevant item
    valid = rng.random((b, n)) < 0.8 if mask else np.ones((b, n), dtype=bool)
    valid[:, 0] = True
    if mask:
        valid[3, 1:] = False  # a list of one item
    iw = rng.choice([0.5, 1.0, 2.0, 3.0], size=(b, n)) if item_weights else None
    return scores, labels, valid, iw


KERNELS = {
    "ndcg": (NDCGKernel, {}),
    "ndcg_lin": (NDCGKernel, {"gain": "linear_rank", "relevance_threshold": None}),
    "dcg": (DCGKernel, {}),
    "map": (MAPKernel, {}),
    "map_all": (MAPKernel, {"denominator": "all", "relevance_threshold": 2.0}),
    "precision": (PrecisionKernel, {}),
    "precision_valid": (PrecisionKernel, {"denominator": "valid", "relevance_threshold": 2.0}),
    "recall": (RecallKernel, {}),
    "hit_rate": (HitRateKernel, {}),
    "hit_rate_t": (HitRateKernel, {"relevance_threshold": 3.0}),
    "reciprocal_rank": (ReciprocalRankKernel, {}),
    "reciprocal_rank_t": (ReciprocalRankKernel, {"relevance_threshold": 2.0}),
}


def reference_values(key: str, scores, labels, valid, iw, ks) -> np.ndarray:
    cls, opts = KERNELS[key]
    name = cls.name
    ref_opts = dict(opts)
    if cls is NDCGKernel and "relevance_threshold" not in opts:
        ref_opts["relevance_threshold"] = 1.0
    return np.array(
        [[expected_over_orders(name, s, y, m, None if iw is None else w, k, ref_opts) for k in ks]
         for s, y, m, w in zip(scores, labels, valid, iw if iw is not None else labels, strict=True)]
    )  # fmt: skip


@pytest.mark.parametrize("key", sorted(KERNELS))
@pytest.mark.parametrize("seed", [0, 1])
def test_every_metric_every_k_equals_the_enumeration(key: str, seed: int) -> None:
    scores, labels, valid, _ = tied_batch(seed)
    cls, opts = KERNELS[key]
    kernel = cls(KS, ties="expected", **opts)
    want = reference_values(key, scores, labels, valid, None, KS)
    got = kernel.per_list(scores, labels, mask=valid)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", sorted(KERNELS))
def test_a_selection_shorter_than_the_list(key: str) -> None:
    """``max(k) = 3`` of 8 items: in some rows the group at position 3 goes on past the
    selection (the comparison pass reads those rows only), in others it ends there."""
    scores, labels, valid, _ = tied_batch(21, b=24)
    cls, opts = KERNELS[key]
    kernel = cls([2, 3], ties="expected", **opts)
    want = reference_values(key, scores, labels, valid, None, [2, 3])
    np.testing.assert_allclose(kernel.per_list(scores, labels, mask=valid)[0], want, rtol=1e-12, atol=1e-12)
    t = [torch.tensor(a) for a in (scores, labels, valid)]
    with host_batches(False):
        got = kernel.per_list(t[0], t[1], mask=t[2])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with read_back(False):
        got = kernel.per_list(t[0], t[1], mask=t[2])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", ["ndcg", "map", "hit_rate", "reciprocal_rank", "precision"])
def test_without_a_mask_and_on_every_path(key: str) -> None:
    """numpy, torch tensors on the host ops and on torch's own ops, and the no-read path (the
    exact ``topk_first`` selection of an accelerator or a trace)."""
    scores, labels, valid, _ = tied_batch(5, mask=False)
    cls, opts = KERNELS[key]
    kernel = cls(KS, ties="expected", **opts)
    want = reference_values(key, scores, labels, valid, None, KS)
    np.testing.assert_allclose(kernel.per_list(scores, labels)[0], want, rtol=1e-12, atol=1e-12)
    ts, ty = torch.tensor(scores), torch.tensor(labels)
    for host in (True, False):
        with host_batches(host):
            got = kernel.per_list(ts, ty)[0].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with read_back(False):
        np.testing.assert_allclose(kernel.per_list(ts, ty)[0].numpy(), want, rtol=1e-12, atol=1e-12)
        want_m = reference_values(key, scores, labels, tied_batch(5)[2], None, KS)
        got_m = kernel.per_list(ts, ty, mask=torch.tensor(tied_batch(5)[2]))[0].numpy()
        np.testing.assert_allclose(got_m, want_m, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [30, 200, 2000])
def test_the_group_straddling_k_reaching_past_the_selection(n: int) -> None:
    """Long lists with three score levels: the group holding position ``K`` goes on far past
    the top ``K`` (its size and relevant count come from the comparison pass). Too long to
    enumerate: the reference is the group-by-group closed forms in exact rationals
    (:func:`_closed_form`; the enumeration checks those forms in ``docs/ties.md``)."""
    rng = np.random.default_rng(7)
    b = 6 if n < 1000 else 40  # 40 x 2000: torch's tiled pass (rows gathered per tile)
    scores = rng.integers(0, 3, size=(b, n)).astype(np.float64)
    labels = (rng.random((b, n)) < 0.3).astype(np.float64)
    ks = [1, 4, 10]
    for cls in (PrecisionKernel, RecallKernel, HitRateKernel, ReciprocalRankKernel, MAPKernel):
        got = cls(ks, ties="expected").per_list(scores, labels)[0]
        want = np.array(
            [[_closed_form(cls.name, s, y, k) for k in ks] for s, y in zip(scores, labels, strict=True)]
        )
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _closed_form(name: str, s, y, k: int) -> float:
    """MATH.md's and docs/ties.md's group formulas, summed group by group in Python (exact
    rationals via math.comb), independent of the kernels' per-position arithmetic."""
    from fractions import Fraction

    levels = sorted(set(s.tolist()), reverse=True)
    groups = [(int(np.sum(s == v)), int(np.sum((s == v) & (y > 0)))) for v in levels]
    n_rel = int(np.sum(y > 0))
    if n_rel == 0:
        return 0.0
    hits, rr, hr, ap, before, start = Fraction(0), Fraction(0), Fraction(0), Fraction(0), 0, 1
    for t, r in groups:
        if start > k:
            break
        b_end = min(start + t - 1, k)
        m = b_end - start + 1
        hits += Fraction(m * r, t)
        if before == 0 and r > 0:
            hr = 1 - Fraction(math.comb(t - r, m), math.comb(t, m))
            rr = sum(Fraction(math.comb(t - 1 - i, r - 1), math.comb(t, r)) / (start + i) for i in range(m))
        elif before > 0:
            hr = Fraction(1)
        q = Fraction(r - 1, t - 1) if t > 1 else Fraction(0)
        ap += sum(Fraction(r, t) * (before + 1 + i * q) / (start + i) for i in range(m))
        before += r
        start += t
    value = {
        "precision": hits / k,
        "recall": hits / n_rel,
        "hit_rate": hr,
        "reciprocal_rank": rr,
        "map": ap / min(n_rel, k),
    }[name]
    return float(value)


@pytest.mark.parametrize("key", ["ndcg", "dcg", "map", "map_all", "precision", "hit_rate", "reciprocal_rank"])
def test_keras_rs_per_item_weights(key: str) -> None:
    """Per-item weights (keras-rs weighting): every gain (DCG, nDCG) or relevant term (AP) is
    weighted by its item's weight, so the expectation weighs each order's ranking the same way;
    the other metrics' values do not read the item weights."""
    scores, labels, valid, iw = tied_batch(3, item_weights=True)
    cls, opts = KERNELS[key]
    kernel = cls(KS, ties="expected", weighting="keras_rs", **opts)
    want = reference_values(key, scores, labels, valid, iw, KS)
    got, _, lw = kernel.per_list(scores, labels, mask=valid, sample_weight=iw)
    if key == "dcg":  # keras-rs divides DCG by the list's weight
        want = want / lw[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_r_precision_equals_the_enumeration() -> None:
    scores, labels, valid, _ = tied_batch(11)
    want = np.array([[expected_over_orders("r_precision", s, y, m, None, 0, {})]
                     for s, y, m in zip(scores, labels, valid, strict=True)])  # fmt: skip
    kernel = RPrecisionKernel(ties="expected")
    np.testing.assert_allclose(kernel.per_list(scores, labels, mask=valid)[0], want, rtol=1e-12, atol=1e-12)
    with read_back(False):  # the whole list selected
        got = kernel.per_list(torch.tensor(scores), torch.tensor(labels), mask=torch.tensor(valid))[0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_no_ties_is_the_first_order_and_the_policies_are_listed() -> None:
    rng = np.random.default_rng(2)
    scores, labels = rng.random((20, 30)), rng.integers(0, 3, (20, 30)).astype(float)
    for cls, opts in KERNELS.values():
        a = cls(KS, ties="expected", **opts).per_list(scores, labels)[0]
        b = cls(KS, ties="first", **opts).per_list(scores, labels)[0]
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert "expected" in TIE_POLICIES
    with pytest.raises(ValueError, match=r"ties must be one of .*'expected'.* got 'mean'"):
        NDCGKernel(5, ties="mean")


def test_constant_scores_give_the_random_ranking_expectation() -> None:
    """All scores equal: every order equally likely, so P@k is kR/N / k and HitRate@k is
    1 - C(N - R, k) / C(N, k) (the hypergeometric), for a list far too long to enumerate."""
    n, r = 500, 7
    scores = np.zeros((1, n))
    labels = np.zeros((1, n))
    labels[0, :r] = 1.0
    ks = [1, 10, 100]
    hr = HitRateKernel(ks, ties="expected").per_list(scores, labels)[0][0]
    p = PrecisionKernel(ks, ties="expected").per_list(scores, labels)[0][0]
    np.testing.assert_allclose(hr, [1 - math.comb(n - r, k) / math.comb(n, k) for k in ks], rtol=1e-12)
    np.testing.assert_allclose(p, [r / n] * 3, rtol=1e-12)


def test_scikit_learn_ndcg_score_without_ignoring_ties() -> None:
    rng = np.random.default_rng(4)
    b, n = 200, 40
    scores = np.round(rng.random((b, n)), 1)
    scores[rng.random(b) < 0.3] = 0.25  # 30% constant rows
    labels = rng.integers(0, 4, (b, n)).astype(float)
    labels[:5] = 0.0
    for k in (1, 5, 10, 40):
        metric = NDCG(k, ties="expected", gain_function="linear_rank", relevance_threshold=None,
                      ignore_zero_hits=False)  # fmt: skip
        metric.update((torch.tensor(scores), torch.tensor(labels)))
        assert metric.compute() == pytest.approx(
            [ndcg_score(labels, scores, k=k, ignore_ties=False)], abs=1e-12
        )


def test_batch_invariance_and_an_ignite_engine_run() -> None:
    scores, labels, valid, _ = tied_batch(9, b=24)
    ks = [1, 3, 5]
    want = {
        "hr": reference_values("hit_rate", scores, labels, valid, None, ks),
        "mrr": reference_values("reciprocal_rank", scores, labels, valid, None, ks),
        "map": reference_values("map", scores, labels, valid, None, ks),
        "p": reference_values("precision", scores, labels, valid, None, ks),
    }
    counted = labels.max(axis=1, where=valid, initial=0) > 0  # ignore_zero_hits: lists with a relevant item
    metrics = {"hr": HitRate(ks, ties="expected"), "mrr": MRR(ks, ties="expected"),
               "map": MAP(ks, ties="expected"), "p": Precision(ks, ties="expected")}  # fmt: skip
    for size in (1, 5, 24):
        batches = [(torch.tensor(scores[a : a + size]), torch.tensor(labels[a : a + size]),
                    {"mask": torch.tensor(valid[a : a + size])}) for a in range(0, 24, size)]  # fmt: skip
        engine = Engine(lambda e, batch: batch)
        for name, metric in metrics.items():
            metric.attach(engine, name)
        state = engine.run(batches, max_epochs=1)
        for name in metrics:
            np.testing.assert_allclose(
                state.metrics[name], want[name][counted].mean(axis=0), rtol=1e-12, atol=1e-12
            )


def test_list_metrics_share_one_selection_with_every_member() -> None:
    scores, labels, valid, _ = tied_batch(12)
    ks = [2, 5]
    lm = ListMetrics(
        ["ndcg@2", "ndcg@5", "map@2", "map@5", "mrr@5", "hit_rate@2", "r_precision"], ties="expected"
    )
    lm.update((torch.tensor(scores), torch.tensor(labels), {"mask": torch.tensor(valid)}))
    got = lm.compute()
    counted = labels.max(axis=1, where=valid, initial=0) > 0
    ndcg = reference_values("ndcg", scores, labels, valid, None, ks)
    # ListMetrics' nDCG takes ignite's threshold 1.0 (labels >= 1 relevant), as the kernel here
    counted_ndcg = labels.max(axis=1, where=valid, initial=0) >= 1
    assert got["ndcg@5"] == pytest.approx(ndcg[counted_ndcg, 1].mean(), abs=1e-12)
    assert got["map@2"] == pytest.approx(
        reference_values("map", scores, labels, valid, None, ks)[counted, 0].mean(), abs=1e-12
    )
    assert got["mrr@5"] == pytest.approx(
        reference_values("reciprocal_rank", scores, labels, valid, None, ks)[counted, 1].mean(), abs=1e-12
    )
    rp = [
        expected_over_orders("r_precision", s, y, m, None, 0, {})
        for s, y, m in zip(scores, labels, valid, strict=True)
    ]
    assert got["r_precision"] == pytest.approx(np.mean(np.array(rp)[counted]), abs=1e-12)
    core = CoreListMetrics(["hit_rate@2", "precision@5"], ties="expected")  # the core collection, on numpy
    got_core = core.finalize(core.compute(core.batch_sums(None, scores, labels, valid)))
    hr = reference_values("hit_rate", scores, labels, valid, None, ks)
    p = reference_values("precision", scores, labels, valid, None, ks)
    assert got_core["hit_rate@2"] == pytest.approx(hr[counted, 0].mean(), abs=1e-12)
    assert got_core["precision@5"] == pytest.approx(p[counted, 1].mean(), abs=1e-12)


def test_nan_scores_stay_an_error() -> None:
    scores, labels, _, _ = tied_batch(1)
    scores[4, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        HitRate(3, ties="expected").update((torch.tensor(scores), torch.tensor(labels)))
    metric = HitRate(3, ties="expected")
    with read_back(False):
        metric.update((torch.tensor(scores), torch.tensor(labels)))
    with pytest.raises(ValueError, match="NaN"):
        metric.compute()


def test_per_list_weights() -> None:
    """A weighted mean of the per-list expectations (one weight per list)."""
    scores, labels, valid, _ = tied_batch(6)
    w = np.linspace(0.5, 2.0, scores.shape[0])
    ks = [1, 3]
    want = reference_values("ndcg", scores, labels, valid, None, ks)
    counted = labels.max(axis=1, where=valid, initial=0) >= 1
    metric = NDCG(ks, ties="expected")
    metric.update(
        (
            torch.tensor(scores),
            torch.tensor(labels),
            {"mask": torch.tensor(valid), "sample_weight": torch.tensor(w)},
        )
    )
    np.testing.assert_allclose(
        metric.compute(), (want[counted] * w[counted, None]).sum(0) / w[counted].sum(), rtol=1e-12, atol=1e-12
    )


# -- the metrics beyond the eight: F1, RBP (linear in the ranked relevance), ERR, AUC ----------
@pytest.mark.parametrize("name", ["f1", "rbp", "rbp_graded"])
def test_f1_and_rbp_equal_the_enumeration(name: str) -> None:
    scores, labels, valid, _ = tied_batch(seed=41, b=10, n=7)
    base = "rbp" if name.startswith("rbp") else "f1"
    opts = {"graded": True} if name == "rbp_graded" else {}
    for k in (1, 3, 7):
        metric = CoreListMetrics(
            [f"{base}@{k}"], {base: opts} if opts else None, ties="expected", empty="zero"
        )
        got, counted, _ = metric.members[f"{base}@{k}"].per_list(scores, labels, valid)
        for i in range(len(scores)):
            if not counted[i]:
                continue
            items = [j for j in range(len(scores[i])) if valid[i][j]]
            levels = sorted({float(scores[i][j]) for j in items}, reverse=True)
            groups = [[j for j in items if float(scores[i][j]) == v] for v in levels]
            values = [
                en.one_ranking(base, [(float(labels[i][j]), 1.0) for o in orders for j in o], k, opts)
                for orders in itertools.product(*(itertools.permutations(g) for g in groups))
            ]
            assert got[i][0] == pytest.approx(math.fsum(values) / len(values), abs=1e-12), (name, k, i)


def test_err_refuses_expected_ties_and_auc_counts_ties_one_half_already() -> None:
    with pytest.raises(ValueError, match=r"ERR has no exact tie-expected form.*got ties='expected'"):
        CoreListMetrics(["err@5"], ties="expected")
    scores, labels, valid, _ = tied_batch(seed=42)
    first = CoreListMetrics(["auc", "gauc"]).members
    expected = CoreListMetrics(["auc", "gauc"], ties="expected").members
    for name in ("auc", "gauc"):
        a = first[name].per_list(scores, labels, valid)[0]
        b = expected[name].per_list(scores, labels, valid)[0]
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("size", [(64, 40), (40, 4_000)])  # numpy views of small batches; torch
def test_bfloat16_scores_through_an_engine_equal_scikit_learn_and_the_reference(size) -> None:
    """A bf16 model's scores (8 bits of mantissa: ties everywhere) fed to an Ignite ``Engine`` in
    three batches: nDCG with ``ties="expected"`` equals scikit-learn's ``ndcg_score(...,
    ignore_ties=False)`` on the same values as float64, and MAP / ``ListMetrics`` equal the
    one-list reference (earlier index first among ties); bf16 labels too."""
    b, n = size
    g = torch.Generator().manual_seed(8)
    scores = (torch.randn(b, n, generator=g) * 0.05).to(torch.bfloat16)
    labels = torch.randint(0, 3, (b, n), generator=g).float() * (torch.rand(b, n, generator=g) < 0.2)
    engine = Engine(lambda e, batch: batch)
    NDCG(10, ties="expected", gain_function="linear_rank", relevance_threshold=None,
         ignore_zero_hits=False).attach(engine, "ndcg")  # fmt: skip
    MAP(10).attach(engine, "map")
    ListMetrics(["map@10", "precision@5"]).attach(engine, "lm")
    cut = [0, b // 3, 2 * b // 3, b]
    feed = [(scores[a:z], labels[a:z].to(torch.bfloat16)) for a, z in itertools.pairwise(cut)]
    got = engine.run(feed).metrics
    s64, y64 = scores.double().numpy(), labels.double().numpy()
    assert got["ndcg"] == pytest.approx([ndcg_score(y64, s64, k=10, ignore_ties=False)], abs=1e-12)
    ap = [ref.average_precision(s, y, 10) for s, y in zip(s64.tolist(), y64.tolist(), strict=True)]
    p5 = [ref.precision(s, y, 5) for s, y in zip(s64.tolist(), y64.tolist(), strict=True)]
    assert got["map"] == pytest.approx([np.mean([v for v in ap if v is not None])], rel=1e-12)
    assert got["lm"]["map@10"] == pytest.approx(got["map"][0], rel=1e-12)
    assert got["lm"]["precision@5"] == pytest.approx(np.mean([v for v in p5 if v is not None]), rel=1e-12)
