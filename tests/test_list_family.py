"""The list family (Precision, Recall, HitRate, MRR@k, DCG, R-precision; MAP and nDCG against
trec_eval too): values from independent sources (trec_eval through ir_measures, torchmetrics,
ignite's HitRate, the naive references), the Ignite declarations, and the invariants."""

from __future__ import annotations

import inspect
import itertools
import math

import ir_measures
import numpy as np
import pytest
import torch
import torchmetrics.retrieval as tmr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from ignite.metrics.rec_sys import HitRate as IgniteHitRate

import rankstream
import rankstream.ignite as rsi
from rankstream import (
    DCGKernel,
    HitRateKernel,
    MAPKernel,
    NDCGKernel,
    PrecisionKernel,
    RecallKernel,
    ReciprocalRankKernel,
    RPrecisionKernel,
    State,
)

import reference as ref

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")

# name -> (kernel from ks and conventions, naive per-list reference, its options)
FAMILY = {
    "precision": (lambda ks, **c: PrecisionKernel(ks, **c), ref.precision, {}),
    "precision_valid": (
        lambda ks, **c: PrecisionKernel(ks, denominator="valid", **c),
        ref.precision,
        {"denominator": "valid"},
    ),
    "recall": (lambda ks, **c: RecallKernel(ks, **c), ref.recall, {}),
    "hit_rate": (lambda ks, **c: HitRateKernel(ks, **c), ref.hit_rate, {}),
    "reciprocal_rank": (lambda ks, **c: ReciprocalRankKernel(ks, **c), ref.reciprocal_rank, {}),
    "dcg": (lambda ks, **c: DCGKernel(ks, **c), ref.dcg, {}),
    "dcg_linear": (
        lambda ks, **c: DCGKernel(ks, gain="linear_rank", **c),
        ref.dcg,
        {"gain": lambda y: y},
    ),
    "r_precision": (lambda ks, **c: RPrecisionKernel(**c), ref.r_precision, {}),
}
BACKENDS = {"numpy": np.asarray, "torch": torch.from_numpy}


def as_list(x):
    return [x] if isinstance(x, float) else list(x)


def state_value(kernel, parts, to=np.asarray):
    st_ = State(kernel)
    for s, y, m, w in parts:
        st_.update(to(s), to(y), None if m is None else to(m), None if w is None else to(w))
    try:
        return as_list(st_.compute())
    except Exception:  # nothing computable
        return None


def tie_free(rng, b, n):
    """Positive scores, distinct within each row (trec_eval and torchmetrics break ties their own way)."""
    return (
        rng.permuted(np.tile(np.arange(1, n + 1, dtype=np.float64), (b, 1)), axis=1) + rng.random((b, 1))
    ) / (n + 1)


def random_case(seed, *, ties=True, graded=True):
    rng = np.random.default_rng(seed)
    b, n = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    s = rng.integers(0, 4, size=(b, n)).astype(np.float64) if ties else tie_free(rng, b, n)
    hi = 4 if graded else 2
    y = rng.integers(0, hi, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.5)
    m = rng.random((b, n)) < 0.8
    w = rng.integers(0, 4, size=b).astype(np.float64)
    ks = sorted({int(k) for k in rng.integers(1, n + 3, size=3)})
    return s, y, m, w, ks


# -- the naive references ----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FAMILY)
@pytest.mark.parametrize("seed", range(8))
def test_matches_the_naive_reference(backend, name, seed):
    make, fn, kw = FAMILY[name]
    s, y, m, w, ks = random_case(seed)
    empty = ["skip", "zero"][seed % 2]
    threshold = [None, 2.0][(seed // 2) % 2]
    got = state_value(make(ks, empty=empty, relevance_threshold=threshold), [(s, y, m, w)], BACKENDS[backend])
    ks_ref = [None] if name == "r_precision" else ks
    expected = [
        ref.mean_over_lists(fn, s, y, k, masks=m, weights=w, empty=empty, threshold=threshold, **kw)
        for k in ks_ref
    ]
    if expected[0] is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_functional_forms_per_list():
    s = np.array([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    assert rankstream.precision_at_k(s, y, 2).tolist() == [0.5, 0.0]
    assert rankstream.precision_at_k(s, y, [2, 6]).tolist() == [[0.5, 2 / 6], [0.0, 1 / 6]]
    assert rankstream.precision_at_k(s, y, 6, denominator="valid").tolist() == [0.5, 0.25]
    assert rankstream.recall_at_k(s, y, 3).tolist() == [0.5, 1.0]
    assert rankstream.hit_rate_at_k(s, y, [1, 2]).tolist() == [[0.0, 1.0], [0.0, 0.0]]
    assert rankstream.reciprocal_rank_at_k(s, y, [2, 3]).tolist() == [[0.5, 0.5], [0.0, 1 / 3]]
    assert rankstream.dcg_at_k(s, y, 2).tolist() == pytest.approx([1 / math.log2(3), 0.0])
    assert rankstream.r_precision(s, y).tolist() == [0.5, 0.0]
    t = rankstream.r_precision(
        torch.from_numpy(s), torch.from_numpy(y), mask=torch.tensor([[0, 0, 1, 1]] * 2) > 0
    )
    assert t.tolist() == [1.0, 0.0]
    assert "k" not in inspect.signature(rankstream.r_precision).parameters
    with pytest.raises(TypeError, match="positional"):
        rankstream.r_precision(s, y, 3)
    _, counted = rankstream.recall_at_k(s, y, 1, return_counted=True)
    assert counted.tolist() == [True, True]


def test_dcg_shares_ndcg_numerator():
    rng = np.random.default_rng(3)
    s, y = rng.random((6, 7)), rng.integers(0, 4, size=(6, 7)).astype(np.float64)
    for gain in ("exp_rank", "linear_rank"):
        d = rankstream.dcg_at_k(s, y, [1, 3, 7], gain=gain)
        ideal = rankstream.dcg_at_k(y, y, [1, 3, 7], gain=gain)
        nd = rankstream.ndcg_at_k(s, y, [1, 3, 7], gain=gain, relevance_threshold=None)
        assert np.where(ideal > 0, d / np.where(ideal > 0, ideal, 1), 0) == pytest.approx(nd, abs=1e-12)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="denominator"):
        PrecisionKernel(3, denominator="min")
    for cls in (PrecisionKernel, RecallKernel, HitRateKernel, ReciprocalRankKernel):
        with pytest.raises(ValueError, match="relevance_threshold"):
            cls(3, relevance_threshold=0.0)
    with pytest.raises(ValueError, match="relevance_threshold"):
        RPrecisionKernel(relevance_threshold=-1.0)


# -- trec_eval (ir_measures + pytrec_eval) -------------------------------------------------

TREC = {
    "P": (lambda k: ir_measures.P @ k, lambda ks: PrecisionKernel(ks)),
    "R": (lambda k: ir_measures.R @ k, lambda ks: RecallKernel(ks)),
    "RR": (lambda k: ir_measures.RR @ k, lambda ks: ReciprocalRankKernel(ks)),
    "Rprec": (lambda k: ir_measures.Rprec, lambda ks: RPrecisionKernel()),
    "AP": (
        lambda k: ir_measures.AP @ k,
        lambda ks: MAPKernel(ks, denominator="all", relevance_threshold=1.0),
    ),
    "nDCG": (
        lambda k: ir_measures.nDCG @ k,
        lambda ks: NDCGKernel(ks, gain="linear_rank", relevance_threshold=None),
    ),
}


@pytest.mark.parametrize("measure", TREC)
@pytest.mark.parametrize("seed", range(6))
def test_matches_trec_eval(measure, seed):
    s, y, m, _, ks = random_case(1000 + seed, ties=False)
    m[:, 0] = True
    y[:, 0] = np.maximum(y[:, 0], 1.0)  # every query has a relevant document (trec_eval needs qrels)
    to_measure, make = TREC[measure]
    qrels, run = {}, {}
    for b in range(len(s)):
        items = [i for i in range(s.shape[1]) if m[b, i]]
        qrels[f"q{b}"] = {f"d{i}": int(y[b, i]) for i in items}
        run[f"q{b}"] = {f"d{i}": float(s[b, i]) for i in items}
    kernel = make(ks)
    values, counted, _ = kernel.per_list(s, y, m)
    assert counted.all()
    measures = [to_measure(k) for k in (kernel.top_k if measure != "Rprec" else [None])]
    per_query = {(r.query_id, str(r.measure)): r.value for r in ir_measures.iter_calc(measures, qrels, run)}
    for b in range(len(s)):
        expected = [per_query[(f"q{b}", str(meas))] for meas in measures]
        assert values[b].tolist() == pytest.approx(expected, abs=1e-9)


# -- torchmetrics 1.9 -------------------------------------------------------------------------

TORCHMETRICS = {
    "precision": (lambda k: tmr.RetrievalPrecision(top_k=k, empty_target_action="skip"), PrecisionKernel),
    "recall": (lambda k: tmr.RetrievalRecall(top_k=k, empty_target_action="skip"), RecallKernel),
    "hit_rate": (lambda k: tmr.RetrievalHitRate(top_k=k, empty_target_action="skip"), HitRateKernel),
    "mrr": (lambda k: tmr.RetrievalMRR(top_k=k, empty_target_action="skip"), ReciprocalRankKernel),
    "r_precision": (lambda k: tmr.RetrievalRPrecision(empty_target_action="skip"), None),
}


@pytest.mark.parametrize("name", TORCHMETRICS)
@pytest.mark.parametrize("seed", range(5))
def test_matches_torchmetrics(name, seed):
    s, y, m, _, ks = random_case(2000 + seed, ties=False, graded=False)
    y[0, 0], m[0, 0] = 1.0, True  # one list with a relevant item at least
    make_tm, kernel_cls = TORCHMETRICS[name]
    rows, cols = np.nonzero(m)  # masked items are not in the list: left out
    preds, target, index = (torch.from_numpy(a) for a in (s[rows, cols], y[rows, cols] > 0, rows))
    for k in [None] if kernel_cls is None else ks:
        tm = make_tm(k)
        tm.update(preds, target, indexes=index)
        expected = float(tm.compute())
        kernel = RPrecisionKernel() if kernel_cls is None else kernel_cls(k)
        assert state_value(kernel, [(s, y, m, None)], torch.from_numpy) == pytest.approx([expected], abs=1e-6)


# -- ignite 0.5.5 HitRate, through an Engine -------------------------------------------------


def run_engine(metric, batches):
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    return engine.run(batches).metrics["m"]


@pytest.mark.parametrize("ignore_zero_hits", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_hit_rate_matches_ignite(seed, ignore_zero_hits):
    rng = np.random.default_rng(3000 + seed)
    n = int(rng.integers(2, 9))
    top_k = sorted({int(k) for k in rng.integers(1, n + 1, size=3)})  # ignite raises past the list
    ours, theirs = [], []
    for _ in range(3):
        b = int(rng.integers(1, 6))
        s, y = tie_free(rng, b, n), (rng.random((b, n)) < 0.3).astype(np.float64)
        m, w = rng.random((b, n)) < 0.8, rng.integers(0, 3, size=b).astype(np.float64)
        ours.append({"y_pred": torch.from_numpy(s), "y": torch.from_numpy(y), "mask": torch.from_numpy(m),
                     "sample_weight": torch.from_numpy(w)})  # fmt: skip
        # ignite: masked items last with label 0; an integer weight repeats the list
        sm, ym = np.where(m, s, -np.inf), np.where(m, y, 0.0)
        reps = w.astype(int)
        theirs.append((torch.from_numpy(np.repeat(sm, reps, 0)), torch.from_numpy(np.repeat(ym, reps, 0))))
    try:
        expected = run_engine(IgniteHitRate(top_k=top_k, ignore_zero_hits=ignore_zero_hits), theirs)
    except NotComputableError:
        with pytest.raises(NotComputableError):
            run_engine(rsi.HitRate(top_k=top_k, ignore_zero_hits=ignore_zero_hits), ours)
        return
    got = run_engine(rsi.HitRate(top_k=top_k, ignore_zero_hits=ignore_zero_hits), ours)
    assert got == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "kw, expected",
    [({"top_k": [1, 2, 3, 4]}, [0.0, 1.0, 1.0, 1.0]), ({"top_k": [1, 2, 3, 4], "ignore_zero_hits": False},
     [0.0, 0.5, 0.5, 0.5])],
)  # fmt: skip
def test_hit_rate_ignite_doc_examples(kw, expected):
    y_pred = torch.Tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y_true = torch.Tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    assert run_engine(rsi.HitRate(**kw), [(y_pred, y_true)]) == expected
    assert run_engine(rsi.HitRate(top_k=2), [(y_pred[:1], torch.Tensor([[0.0, 0.0, 1.0, 0.0]]))]) == [1.0]
    # k past the end of the lists: clipped (ignite's HitRate raises)
    assert run_engine(rsi.HitRate(top_k=[9]), [(y_pred, y_true)]) == [1.0]


def test_hit_rate_has_ignites_signature():
    ours = inspect.signature(rsi.HitRate).parameters
    theirs = inspect.signature(IgniteHitRate).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    assert [ours[p].default for p in theirs if p != "output_transform"] == [
        theirs[p].default for p in theirs if p != "output_transform"
    ]


# -- the Ignite declarations -----------------------------------------------------------------

IGNITE = {
    "Precision": (lambda ks: rsi.Precision(top_k=ks), "precision", {}),
    "Precision_valid": (lambda ks: rsi.Precision(top_k=ks, denominator="valid"), "precision_valid", {}),
    "Recall": (lambda ks: rsi.Recall(top_k=ks, ignore_zero_hits=False), "recall", {"empty": "zero"}),
    "HitRate": (lambda ks: rsi.HitRate(top_k=ks), "hit_rate", {}),
    "MRR": (lambda ks: rsi.MRR(top_k=ks, relevance_threshold=2.0), "reciprocal_rank", {"threshold": 2.0}),
    "DCG": (lambda ks: rsi.DCG(top_k=ks, relevance_threshold=None), "dcg", {}),
    "DCG_ignite_threshold": (lambda ks: rsi.DCG(top_k=ks), "dcg", {"threshold": 1.0}),
    "RPrecision": (lambda ks: rsi.RPrecision(), "r_precision", {}),
}


@pytest.mark.parametrize("name", IGNITE)
@pytest.mark.parametrize("seed", range(3))
def test_ignite_declarations_match_the_reference(name, seed):
    make, family, kw = IGNITE[name]
    _, fn, fkw = FAMILY[family]
    s, y, m, w, ks = random_case(4000 + seed)
    y[0, 0], m[0, 0], w[0] = 3.0, True, 1.0
    cut = len(s) // 2
    batches = [
        {"y_pred": torch.from_numpy(s[a:b]), "y": torch.from_numpy(y[a:b]), "mask": torch.from_numpy(m[a:b]),
         "sample_weight": torch.from_numpy(w[a:b])}
        for a, b in [(0, cut), (cut, len(s))] if b > a
    ]  # fmt: skip
    empty = kw.get("empty", "skip")
    threshold = kw.get("threshold")
    expected = [
        ref.mean_over_lists(fn, s, y, k, masks=m, weights=w, empty=empty, threshold=threshold, **fkw)
        for k in ([None] if name == "RPrecision" else ks)
    ]
    got = run_engine(make(ks), batches)
    assert as_list(got) == pytest.approx(expected, abs=1e-9)


def test_mrr_is_list_wise_and_the_per_positive_one_keeps_its_name():
    assert rsi.MRR is rsi.MeanReciprocalRank
    assert rsi.InverseHarmonicMeanRank is not rsi.MRR
    y_pred = torch.tensor([[0.9, 0.8, 0.1, 0.7]])
    y = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    assert run_engine(rsi.MRR(top_k=[1, 2]), [(y_pred, y)]) == [0.0, 0.5]  # first relevant at rank 2
    per_positive = run_engine(rsi.InverseHarmonicMeanRank(), [(y_pred, y)])  # ranks 2 and 3 among negatives
    assert per_positive == pytest.approx((1 / 2 + 1 / 3) / 2)
    import rankstream.pykeen as R

    assert R.MRR().key == "inverse_harmonic_mean_rank"


def test_ignite_state_dict_round_trip_and_refusal():
    batch = (torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0.0, 1.0, 1.0]]))
    src = rsi.RPrecision()
    src.update(batch)
    dst = rsi.RPrecision()
    dst.load_state_dict(src.state_dict())
    assert dst.compute() == src.compute() == 0.5
    with pytest.raises(ValueError, match="does not fit"):
        rsi.Recall(top_k=2).load_state_dict(rsi.Precision(top_k=2).state_dict())


# -- invariants (hypothesis) ------------------------------------------------------------------

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONVENTIONS = {"skip": {}, "zero_t2": {"empty": "zero", "relevance_threshold": 2.0}}


@st.composite
def datasets(draw):
    return random_case(draw(st.integers(0, 2**31 - 1)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("conv", CONVENTIONS)
@pytest.mark.parametrize("name", FAMILY)
@SETTINGS
@given(data=datasets(), cuts=st.lists(st.integers(0, 9), max_size=4), order_seed=st.integers(0, 100))
def test_any_batch_split_gives_the_same_sums(backend, conv, name, data, cuts, order_seed):
    s, y, m, w, ks = data
    make = FAMILY[name][0]
    to = BACKENDS[backend]
    whole = State(make(ks, **CONVENTIONS[conv]))
    whole.update(to(s), to(y), to(m), to(w))
    bounds = sorted({0, len(s), *[c for c in cuts if c < len(s)]})
    parts = [(s[a:b], y[a:b], m[a:b], w[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
    np.random.default_rng(order_seed).shuffle(parts)
    split = State(make(ks, **CONVENTIONS[conv]))
    for p in parts:
        split.update(*(to(a) for a in p))
    for field, total in whole.sums.items():
        assert np.asarray(split.sums[field]) == pytest.approx(np.asarray(total), abs=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("conv", CONVENTIONS)
@pytest.mark.parametrize("name", FAMILY)
@SETTINGS
@given(data=datasets(), pad=st.integers(1, 5), pad_seed=st.integers(0, 1000))
def test_a_masked_item_behaves_as_if_deleted(backend, conv, name, data, pad, pad_seed):
    s, y, _, w, ks = data
    make = FAMILY[name][0]
    to = BACKENDS[backend]
    rng = np.random.default_rng(pad_seed)
    b, n = s.shape
    # Masked items at random positions with any scores (NaN, +inf too) and labels; the real
    # items keep their relative order (ties go to the earlier index).
    sp = np.concatenate([s, rng.choice([np.nan, np.inf, 5.0, -1.0], size=(b, pad))], axis=1)
    yp = np.concatenate([y, rng.integers(0, 4, size=(b, pad)).astype(np.float64)], axis=1)
    mp = np.concatenate([np.ones((b, n), bool), np.zeros((b, pad), bool)], axis=1)
    real = np.sort(rng.permutation(n + pad)[:n])
    cols = np.empty(n + pad, dtype=int)
    cols[real] = np.arange(n)
    cols[np.setdiff1d(np.arange(n + pad), real)] = np.arange(n, n + pad)
    plain = state_value(make(ks, **CONVENTIONS[conv]), [(s, y, None, w)], to)
    masked = state_value(make(ks, **CONVENTIONS[conv]), [(sp[:, cols], yp[:, cols], mp[:, cols], w)], to)
    assert masked == (None if plain is None else pytest.approx(plain, abs=1e-12))


@pytest.mark.parametrize("name", FAMILY)
@pytest.mark.parametrize("seed", range(3))
def test_the_no_read_back_path_agrees(name, seed):
    from rankstream.core.backends import read_back

    make = FAMILY[name][0]
    s, y, m, w, ks = random_case(5000 + seed)
    expected = state_value(make(ks, empty="zero"), [(s, y, m, w)], torch.from_numpy)
    with read_back(False):
        got = state_value(make(ks, empty="zero"), [(s, y, m, w)], torch.from_numpy)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-12))
