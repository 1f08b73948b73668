"""The list metrics AUC, GAUC, F1@k, ERR@k and RBP (with its residual), and ``success@k``:
values from independent sources (scikit-learn's ``roc_auc_score`` per list, ranx's ``f1`` and
``rbp``, ir_measures' ``ERR@k`` through its gdeval provider, the naive references of
``tests/reference.py``), the family's invariants, the Ignite Engine path, the collection's names
and the standard error. ir_measures' RBP providers (trectools, cwl_eval) are not installed:
RBP is checked against ranx and the naive reference."""

from __future__ import annotations

import itertools
import math

import ir_measures
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from ranx import Qrels, Run, evaluate
from sklearn.metrics import roc_auc_score

import rankstream
import rankstream.ignite as rsi
from rankstream import AUCKernel, ERRKernel, F1Kernel, GAUCKernel, HitRateKernel, RBPKernel, State
from rankstream.core.lists.collection import ListMetrics, make_kernel

import reference as ref

pytestmark = pytest.mark.usefixtures("list_path")
BACKENDS = {"numpy": np.asarray, "torch": torch.from_numpy}

# name -> (kernel from ks and conventions, naive per-list reference, its options, takes k)
NEW = {
    "f1": (lambda ks, **c: F1Kernel(ks, **c), ref.f1, {}, True),
    "err": (lambda ks, **c: ERRKernel(ks, **c), ref.err, {}, True),
    "err_max2": (lambda ks, **c: ERRKernel(ks, max_grade=2, **c), ref.err, {"max_grade": 2.0}, True),
    "rbp": (lambda ks, **c: RBPKernel(ks, **c), ref.rbp, {}, True),
    "rbp_graded": (
        lambda ks, **c: RBPKernel(ks, p=0.5, graded=True, **c),
        ref.rbp,
        {"p": 0.5, "graded": True},
        True,
    ),
    "auc": (lambda ks, **c: AUCKernel(**c), ref.auc, {}, False),
}


def value_of(result):
    """The value of a state's result as a list (a dict's ``"value"``, a float as one item)."""
    if isinstance(result, dict):
        result = result["value"]
    return [result] if isinstance(result, float) else list(result)


def state_value(kernel, parts, to=np.asarray):
    st_ = State(kernel)
    for s, y, m, w in parts:
        st_.update(to(s), to(y), None if m is None else to(m), None if w is None else to(w))
    try:
        return value_of(st_.compute())
    except Exception:  # nothing computable
        return None


def tie_free(rng, b, n):
    """Positive scores, distinct within each row (the peers break ties their own way)."""
    return (
        rng.permuted(np.tile(np.arange(1, n + 1, dtype=np.float64), (b, 1)), axis=1) + rng.random((b, 1))
    ) / (n + 1)


def random_case(seed, *, ties=True, hi=5, min_n=1):
    rng = np.random.default_rng(seed)
    b, n = int(rng.integers(1, 9)), int(rng.integers(min_n, 10))
    s = rng.integers(0, 4, size=(b, n)).astype(np.float64) if ties else tie_free(rng, b, n)
    y = rng.integers(0, hi, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.6)
    m = rng.random((b, n)) < 0.8
    w = rng.integers(0, 4, size=b).astype(np.float64)
    ks = sorted({int(k) for k in rng.integers(1, n + 3, size=3)})
    return s, y, m, w, ks


# -- the naive references, with ties, masks, weights, thresholds and both empty policies ------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("seed", range(6))
def test_matches_the_naive_reference(backend, name, seed):
    make, fn, kw, takes_k = NEW[name]
    s, y, m, w, ks = random_case(seed)
    empty = ["skip", "zero"][seed % 2]
    threshold = [None, 2.0][(seed // 2) % 2]
    got = state_value(make(ks, empty=empty, relevance_threshold=threshold), [(s, y, m, w)], BACKENDS[backend])
    expected = [
        ref.mean_over_lists(fn, s, y, k, masks=m, weights=w, empty=empty, threshold=threshold, **kw)
        for k in (ks if takes_k else [None])
    ]
    if expected[0] is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_rbp_residual_matches_the_summed_tail(seed):
    s, y, m, w, ks = random_case(100 + seed)
    y[0, 0], m[0, 0], w[0] = 1.0, True, 1.0
    for p in (0.8, 0.95):
        result = (
            State(RBPKernel([*ks, rankstream.core.lists.base.WHOLE_LIST], p=p, residual=True))
            .update(s, y, m, w)
            .compute()
        )
        expected = [
            ref.mean_over_lists(ref.rbp_residual, s, y, k, masks=m, weights=w, p=p) for k in [*ks, None]
        ]
        assert result["residual"] == pytest.approx(expected, abs=1e-12)
        assert set(result) == {"value", "residual"}


# -- AUC and GAUC against scikit-learn, list by list, ties included ----------------------------


def sklearn_per_list(s, y, m, threshold=None):
    """``roc_auc_score`` of each list holding both classes (None for the others), and the
    lists' numbers of items."""
    aucs, sizes = [], []
    for b in range(len(s)):
        keep = m[b]
        rel = (y[b][keep] > 0) if threshold is None else (y[b][keep] >= threshold)
        sizes.append(int(keep.sum()))
        aucs.append(roc_auc_score(rel, s[b][keep]) if 0 < rel.sum() < keep.sum() else None)
    return aucs, sizes


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_auc_and_gauc_equal_sklearn_per_list_and_the_hand_aggregation(backend, seed):
    rng = np.random.default_rng(300 + seed)
    b, n = int(rng.integers(2, 12)), int(rng.integers(2, 30))
    s = rng.integers(0, 5, size=(b, n)).astype(np.float64)  # many exact ties
    y = (rng.random((b, n)) < 0.4).astype(np.float64) * rng.integers(1, 3, size=(b, n))
    m = rng.random((b, n)) < 0.85
    w = rng.integers(1, 4, size=b).astype(np.float64)
    y[0, :2], m[0, :2], s[0, :2] = [1.0, 0.0], True, [2.0, 2.0]  # one list with both classes at least
    to = BACKENDS[backend]
    threshold = [None, 2.0][seed % 2]
    if threshold is not None:
        y[0, 0] = 2.0
    aucs, sizes = sklearn_per_list(s, y, m, threshold)
    values, counted, _ = AUCKernel(relevance_threshold=threshold).per_list(to(s), to(y), to(m))
    values, counted = np.asarray(values), np.asarray(counted)
    for i, a in enumerate(aucs):
        assert bool(counted[i]) == (a is not None)
        if a is not None:
            assert values[i, 0] == pytest.approx(a, abs=1e-12)
    both = [i for i, a in enumerate(aucs) if a is not None]
    unweighted = sum(aucs[i] for i in both) / len(both)
    by_size = sum(sizes[i] * aucs[i] for i in both) / sum(sizes[i] for i in both)
    weighted = sum(w[i] * aucs[i] for i in both) / sum(w[i] for i in both)
    weighted_by_size = sum(w[i] * sizes[i] * aucs[i] for i in both) / sum(w[i] * sizes[i] for i in both)
    t = {"relevance_threshold": threshold}
    assert State(AUCKernel(**t)).update(to(s), to(y), to(m)).compute() == pytest.approx(unweighted, abs=1e-12)
    assert State(GAUCKernel(**t)).update(to(s), to(y), to(m)).compute() == pytest.approx(by_size, abs=1e-12)
    assert State(GAUCKernel(weight_by_size=False, **t)).update(
        to(s), to(y), to(m)
    ).compute() == pytest.approx(unweighted, abs=1e-12)
    assert State(AUCKernel(**t)).update(to(s), to(y), to(m), to(w)).compute() == pytest.approx(
        weighted, abs=1e-12
    )
    assert State(GAUCKernel(**t)).update(to(s), to(y), to(m), to(w)).compute() == pytest.approx(
        weighted_by_size, abs=1e-12
    )


def test_auc_of_a_list_of_all_equal_scores_is_one_half_and_one_class_lists_are_skipped_or_zero():
    s = np.array([[1.0, 1.0, 1.0, 1.0], [0.9, 0.1, 0.5, 0.3], [0.2, 0.4, 0.6, 0.8]])
    y = np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    assert State(AUCKernel()).update(s, y).compute() == pytest.approx((0.5 + 1.0) / 2)
    assert State(AUCKernel(empty="zero")).update(s, y).compute() == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert roc_auc_score(y[0], s[0]) == 0.5  # the convention is scikit-learn's


@pytest.mark.parametrize("ties", ["first", "random"])
def test_auc_does_not_depend_on_the_tie_convention(ties):
    s, y, m, w, _ = random_case(7, min_n=2)
    y[0, :2], m[0, :2] = [1.0, 0.0], True
    plain = State(AUCKernel()).update(s, y, m, w).compute()
    assert State(AUCKernel(ties=ties, seed=3)).update(s, y, m, w).compute() == pytest.approx(plain, abs=1e-12)


# -- F1@k and RBP against ranx, ERR@k against ir_measures (gdeval), tie-free graded data --------


def qrels_and_run(s, y, m):
    qrels, run = {}, {}
    for b in range(len(s)):
        items = [i for i in range(s.shape[1]) if m[b, i]]
        qrels[str(b + 1)] = {f"d{i}": int(y[b, i]) for i in items}
        run[str(b + 1)] = {f"d{i}": float(s[b, i]) for i in items}
    return qrels, run


def tie_free_case(seed):
    s, y, m, _, ks = random_case(500 + seed, ties=False)
    m[:, 0] = True
    y[:, 0] = np.maximum(y[:, 0], 1.0)  # every query has a relevant document
    return s, y, m, ks


@pytest.mark.parametrize("seed", range(4))
def test_f1_and_rbp_equal_ranx(seed):
    s, y, m, ks = tie_free_case(seed)
    qrels, run = qrels_and_run(s, y, m)
    # ranx keeps only the judged relevant documents: a document judged 0 is not in its qrels
    rq = Qrels({q: {d: r for d, r in docs.items() if r > 0} for q, docs in qrels.items()})
    rr = Run(run)
    names = [f"f1@{k}" for k in ks] + ["f1", "rbp.8", "rbp.5"]
    got = evaluate(rq, rr, names, return_mean=False, make_comparable=True)
    f1 = F1Kernel([*ks, rankstream.core.lists.base.WHOLE_LIST]).per_list(s, y, m)[0]
    for j, k in enumerate([*ks, None]):
        assert np.asarray(f1)[:, j] == pytest.approx(got[f"f1@{k}" if k else "f1"], abs=1e-9)
    for p in (0.8, 0.5):
        values = RBPKernel(p=p, graded=True).per_list(s, y, m)[0]
        assert np.asarray(values)[:, 0] == pytest.approx(got[f"rbp.{int(p * 10)}"], abs=1e-9)
    binary = Qrels({q: {d: 1 for d in docs} for q, docs in rq.to_dict().items()})
    got_binary = evaluate(binary, rr, "rbp.8", return_mean=False, make_comparable=True)
    assert np.asarray(RBPKernel(p=0.8).per_list(s, y, m)[0])[:, 0] == pytest.approx(got_binary, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_err_equals_ir_measures_gdeval(seed):
    s, y, m, ks = tie_free_case(seed)
    qrels, run = qrels_and_run(s, y, m)  # grades 0..4: gdeval's maximum judgment is 4
    measures = [ir_measures.ERR @ k for k in ks]
    per_query = {(r.query_id, str(r.measure)): r.value for r in ir_measures.iter_calc(measures, qrels, run)}
    values = np.asarray(ERRKernel(ks).per_list(s, y, m)[0])
    for b in range(len(s)):
        expected = [per_query[(str(b + 1), str(meas))] for meas in measures]
        assert values[b].tolist() == pytest.approx(expected, abs=1e-5)  # gdeval prints 5 decimals


def test_err_clips_grades_above_the_maximum():
    s = np.array([[0.9, 0.5, 0.1]])
    at_max = ERRKernel(3).per_list(s, np.array([[4.0, 0.0, 1.0]]))[0]
    above = ERRKernel(3).per_list(s, np.array([[9.0, 0.0, 1.0]]))[0]
    np.testing.assert_allclose(above, at_max)
    r1 = 15 / 16
    assert float(at_max[0, 0]) == pytest.approx(r1 + (1 - r1) * (1 / 16) / 3)


# -- the family's invariants (hypothesis, ties and masks included) -----------------------------

PROPERTIES = {
    "f1": lambda ks: F1Kernel(ks),
    "err_thr": lambda ks: ERRKernel(ks, relevance_threshold=2.0, empty="zero"),
    "rbp": lambda ks: RBPKernel(ks, p=0.7, residual=True),
    "rbp_graded_whole": lambda ks: RBPKernel(p=0.9, graded=True),
    "auc": lambda ks: AUCKernel(),
    "gauc_zero": lambda ks: GAUCKernel(empty="zero"),
}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def datasets(draw):
    b, n = draw(st.integers(1, 10)), draw(st.integers(1, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    scores = rng.integers(0, 4, size=(b, n)).astype(np.float64)
    labels = rng.integers(0, 4, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.5)
    mask = rng.random((b, n)) < 0.8
    weights = rng.integers(0, 4, size=b).astype(np.float64)
    ks = sorted(set(draw(st.lists(st.integers(1, n + 3), min_size=1, max_size=3))))
    return scores, labels, mask, weights, ks


def full_result(kernel, parts, to):
    st_ = State(kernel)
    for s, y, m, w in parts:
        st_.update(to(s), to(y), to(m), to(w))
    try:
        r = st_.compute()
    except Exception:
        return None
    return {q: value_of(v) for q, v in r.items()} if isinstance(r, dict) else value_of(r)


def approx_equal(a, b):
    if a is None or b is None:
        assert a is None and b is None
    elif isinstance(a, dict):
        assert set(a) == set(b)
        for q in a:
            assert b[q] == pytest.approx(a[q], abs=1e-12)
    else:
        assert b == pytest.approx(a, abs=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PROPERTIES)
@SETTINGS
@given(data=datasets(), cuts=st.lists(st.integers(0, 10), max_size=3), order_seed=st.integers(0, 100))
def test_any_batch_split_order_and_merge_give_the_same_result(backend, name, data, cuts, order_seed):
    s, y, m, w, ks = data
    to = BACKENDS[backend]
    whole = full_result(PROPERTIES[name](ks), [(s, y, m, w)], to)
    bounds = sorted({0, len(s), *[c for c in cuts if c < len(s)]})
    parts = [(s[a:b], y[a:b], m[a:b], w[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
    np.random.default_rng(order_seed).shuffle(parts)
    approx_equal(whole, full_result(PROPERTIES[name](ks), parts, to))
    states = [State(PROPERTIES[name](ks)).update(*(to(a) for a in p)) for p in parts]
    total = states[0]
    for other in states[1:]:
        total = total.merge(other)
    try:
        merged = total.compute()
        merged = {q: value_of(v) for q, v in merged.items()} if isinstance(merged, dict) else value_of(merged)
    except Exception:
        merged = None
    approx_equal(whole, merged)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PROPERTIES)
@SETTINGS
@given(data=datasets(), pad=st.integers(1, 5), pad_seed=st.integers(0, 1000))
def test_a_masked_item_behaves_as_if_deleted(backend, name, data, pad, pad_seed):
    s, y, _, w, ks = data
    to = BACKENDS[backend]
    rng = np.random.default_rng(pad_seed)
    b, n = s.shape
    sp = np.concatenate([s, rng.choice([np.nan, np.inf, 5.0, -1.0, 2.0], size=(b, pad))], axis=1)
    yp = np.concatenate([y, rng.integers(0, 4, size=(b, pad)).astype(np.float64)], axis=1)
    mp = np.concatenate([np.ones((b, n), bool), np.zeros((b, pad), bool)], axis=1)
    perm = rng.permutation(n + pad)
    real = np.sort(perm[:n])  # the real items keep their relative order (the tie rule reads indices)
    cols = np.empty(n + pad, dtype=int)
    cols[real] = np.arange(n)
    cols[np.setdiff1d(np.arange(n + pad), real)] = np.arange(n, n + pad)
    sp, yp, mp = sp[:, cols], yp[:, cols], mp[:, cols]
    plain = full_result(PROPERTIES[name](ks), [(s, y, np.ones_like(s, bool), w)], to)
    approx_equal(plain, full_result(PROPERTIES[name](ks), [(sp, yp, mp, w)], to))


RESIDUAL = {"rbp": {"residual": True}}
NAMES = ["f1@3", "err@2", "rbp", "rbp@2", "auc", "gauc", "success@2", "ndcg@3", "F1", "ERR"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("empty", ["skip", "zero"])
@SETTINGS
@given(data=datasets())
def test_the_collection_equals_its_metrics_one_by_one(backend, empty, data):
    s, y, m, w, _ = data
    to = BACKENDS[backend]
    together = State(ListMetrics(NAMES, RESIDUAL, empty=empty))
    try:
        got = together.update(to(s), to(y), to(m), to(w)).compute()
    except Exception:
        got = None
    alone = {}
    for name in NAMES:
        try:
            alone[name] = (
                State(make_kernel(name, RESIDUAL, empty=empty)).update(to(s), to(y), to(m), to(w)).compute()
            )
        except Exception:
            alone[name] = None
    if any(v is None for v in alone.values()):  # a member with nothing to report: the collection refuses
        assert got is None
        return
    for name, v in alone.items():
        if isinstance(v, dict):  # RBP: the residual beside the value
            assert [got[name]] == pytest.approx(value_of(v["value"]), abs=1e-12)
            assert [got[f"{name}_residual"]] == pytest.approx(value_of(v["residual"]), abs=1e-12)
        else:
            assert [got[name]] == pytest.approx(value_of(v), abs=1e-12)


def test_collection_names_and_success_is_hit_rate():
    assert make_kernel("success@5").__class__ is HitRateKernel
    assert isinstance(make_kernel("GAUC"), GAUCKernel) and isinstance(make_kernel("auc"), AUCKernel)
    assert isinstance(make_kernel("F1@3"), F1Kernel) and make_kernel("F1@3").top_k == [3]
    assert isinstance(make_kernel("ERR@10"), ERRKernel) and isinstance(make_kernel("RBP@5"), RBPKernel)
    assert ListMetrics(["rbp@3", "auc"]).reported == ["rbp@3", "auc"]
    with_residual = ListMetrics(["rbp@3", "auc"], defaults={"rbp": {"residual": True}})
    assert with_residual.reported == ["rbp@3", "rbp@3_residual", "auc"]
    s = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.4]])
    y = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    got = State(ListMetrics(["success@1", "hit_rate@1"])).update(s, y).compute()
    assert got["success@1"] == got["hit_rate@1"] == 0.0


# -- the standard error (once, from the base) ----------------------------------------------------


@pytest.mark.parametrize("name", ["gauc", "rbp"])
def test_confidence_gives_the_reference_standard_error(name):
    rng = np.random.default_rng(1)
    s = rng.integers(0, 4, (20, 7)).astype(float)  # ties: AUC counts them one half
    y = (rng.random((20, 7)) < 0.4) * 1.0
    m = rng.random((20, 7)) < 0.9
    w = rng.integers(1, 4, 20).astype(float)
    if name == "gauc":
        kernel = GAUCKernel(confidence=0.95)
        values = [ref.auc(s[b], y[b], None, valid=m[b]) for b in range(20)]
        weights = [w[b] * m[b].sum() for b in range(20)]
    else:
        kernel = RBPKernel(3, confidence=0.95, residual=True)
        values = [ref.rbp(s[b], y[b], 3, valid=m[b]) for b in range(20)]
        weights = list(w)
    pairs = [(v, wt) for v, wt in zip(values, weights, strict=True) if v is not None]
    mean, se = ref.weighted_mean_stderr([v for v, _ in pairs], [wt for _, wt in pairs])
    result = State(kernel).update(s, y, m, w).compute()
    assert value_of(result["value"]) == pytest.approx([mean], abs=1e-12)
    assert value_of(result["stderr"]) == pytest.approx([se], abs=1e-12)
    assert value_of(result["count"]) == [len(pairs)]
    if name == "rbp":
        assert "residual" in result


# -- the Ignite Engine path ----------------------------------------------------------------------


def run_engine(metrics, batches):
    engine = Engine(lambda e, b: b)
    for name, metric in metrics.items():
        metric.attach(engine, name)
    return engine.run(batches).metrics


IGNITE = {
    "F1": (lambda ks: rsi.F1(top_k=ks), ref.f1, {}, True),
    "ERR": (lambda ks: rsi.ERR(top_k=ks, max_grade=3), ref.err, {"max_grade": 3.0}, True),
    "RBP": (lambda ks: rsi.RBP(top_k=ks, p=0.6, residual=True), ref.rbp, {"p": 0.6}, True),
    "ListAUC": (lambda ks: rsi.ListAUC(), ref.auc, {}, False),
}


@pytest.mark.parametrize("name", IGNITE)
@pytest.mark.parametrize("seed", range(2))
def test_ignite_engine_runs_match_the_reference(name, seed):
    make, fn, kw, takes_k = IGNITE[name]
    s, y, m, w, ks = random_case(4000 + seed, min_n=2)
    y[0, :2], s[0, :2], m[0, :2], w[0] = [3.0, 0.0], [1.0, 2.0], True, 1.0
    cut = len(s) // 2
    batches = [
        {"y_pred": torch.from_numpy(s[a:b]), "y": torch.from_numpy(y[a:b]), "mask": torch.from_numpy(m[a:b]),
         "sample_weight": torch.from_numpy(w[a:b])}
        for a, b in [(0, cut), (cut, len(s))] if b > a
    ]  # fmt: skip
    expected = [
        ref.mean_over_lists(fn, s, y, k, masks=m, weights=w, **kw) for k in (ks if takes_k else [None])
    ]
    got = run_engine({"m": make(ks)}, batches)
    assert value_of(got["m"]) == pytest.approx(expected, abs=1e-9)
    if name == "RBP":
        residual = [ref.mean_over_lists(ref.rbp_residual, s, y, k, masks=m, weights=w, p=0.6) for k in ks]
        assert got["m_residual"] == pytest.approx(residual, abs=1e-9)


def test_ignite_gauc_weighs_lists_by_their_items():
    s = torch.tensor([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.4, 0.0]])
    y = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    a0 = roc_auc_score([1, 0, 0, 1], [0.9, 0.1, 0.5, 0.3])
    a1 = roc_auc_score([1, 0, 0], [0.2, 0.8, 0.4])
    got = run_engine({"g": rsi.GAUC(), "a": rsi.ListAUC(), "gu": rsi.GroupAUC(weight_by_size=False)},
                     [(s, y, {"mask": mask})])  # fmt: skip
    assert got["g"] == pytest.approx((4 * a0 + 3 * a1) / 7)
    assert got["a"] == pytest.approx((a0 + a1) / 2) == got["gu"]


def test_functional_forms():
    s = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.4]])
    y = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    assert rankstream.f1_at_k(s, y, 1).tolist() == pytest.approx([2 / (1 + 2), 2 / (1 + 1)])
    assert rankstream.list_auc(s, y).tolist() == pytest.approx([1.0, 1.0])
    assert rankstream.rbp_at_k(s, y, 2, p=0.5).tolist() == pytest.approx([0.5 * 1.5, 0.5])
    assert rankstream.err_at_k(s, y, 1).tolist() == pytest.approx([1 / 16, 1 / 16])
    assert rankstream.group_auc(s, y).tolist() == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ERRKernel(5, max_grade=0), "max_grade"),
        (lambda: ERRKernel(5, max_grade=math.inf), "max_grade"),
        (lambda: RBPKernel(p=1.0), "p must"),
        (lambda: RBPKernel(p=0), "p must"),
        (lambda: AUCKernel(relevance_threshold=0.0), "relevance_threshold"),
    ],
)
def test_bad_options_raise_naming_the_argument(make, match):
    with pytest.raises(ValueError, match=match):
        make()
    with pytest.raises(TypeError, match="weight_by_size"):
        GAUCKernel(weight_by_size="yes")
    with pytest.raises(TypeError, match="graded"):
        RBPKernel(graded=1)
    with pytest.raises(TypeError, match="residual"):
        RBPKernel(residual="yes")


@pytest.mark.parametrize("name", ["auc@5", "GAUC@3", "rprec@2"])
def test_a_cut_off_on_a_metric_without_one_is_refused(name):
    with pytest.raises(ValueError, match="has no cut-off"):
        ListMetrics([name])


@pytest.mark.parametrize("name", ["f1", "err", "rbp_graded", "auc"])
def test_random_ties_are_accepted_and_change_nothing_without_ties(name):
    make, _, _, _ = NEW[name]
    s, y, m, w, ks = random_case(900, ties=False, min_n=3)
    y[0, :2], m[0, :2], w[0] = [2.0, 0.0], True, 1.0
    first = state_value(make(ks), [(s, y, m, w)])
    assert state_value(make(ks, ties="random", seed=5), [(s, y, m, w)]) == pytest.approx(first, abs=1e-12)
