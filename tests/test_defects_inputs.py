"""User-reported defects of inputs: a gain or discount callable returning any dtype, inputs that
got another library's error (strings, objects, ragged lists, meta tensors), and messages that
named the wrong argument (``k``) or the wrong problem (``"ndcg@0"``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine

import rankstream
from rankstream import rank_based
from rankstream.ignite import DCG, MAP, NDCG, HitsAtK, ListMetrics, RPrecision

import reference as ref

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")

SCORES = [[0.1, 0.2, 0.9, 0.3], [0.1, 0.8, 0.9, 0.7]]
LABELS = [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 3.0, 2.0]]


def run_engine(metric, batches):
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    return engine.run(batches).metrics["m"]


def batches(seed, n_batches=3):
    rng = np.random.default_rng(seed)
    out = [(torch.tensor(SCORES), torch.tensor(LABELS))]
    for _ in range(n_batches):
        s = torch.from_numpy(rng.permutation(5 * 7).reshape(5, 7).astype(np.float32))  # no ties
        y = torch.from_numpy(rng.integers(0, 4, (5, 7)).astype(np.float32))
        out.append((s, y))
    return out


def expected(per_list, data, k, **kw):
    scores = [row for s, _ in data for row in s.tolist()]
    labels = [row for _, y in data for row in y.tolist()]
    return ref.mean_over_lists(per_list, scores, labels, k, **kw)


# -- 1. a user's gain or discount may return any dtype ------------------------------------

GAINS = {
    "float32": lambda y: y.to(torch.float32),
    "float16": lambda y: y.to(torch.float16),
    "int32": lambda y: y.to(torch.int32),
    "numpy float32": lambda y: np.asarray(y, dtype=np.float32),
}
DISCOUNTS = {
    "float32": lambda r: (1.0 / r).to(torch.float32),
    "float16": lambda r: (1.0 / r).to(torch.float16),
    "numpy float32": lambda r: np.asarray(1.0 / np.asarray(r), dtype=np.float32),
}


@pytest.mark.parametrize("gain", sorted(GAINS))
@pytest.mark.parametrize("discount", sorted(DISCOUNTS))
@pytest.mark.parametrize("cls, per_list", [(NDCG, ref.ndcg), (DCG, ref.dcg)])
def test_gain_and_discount_of_any_dtype_in_an_engine(cls, per_list, gain, discount):
    data = batches(0)
    metric = cls(
        top_k=[2, 7], gain_function=GAINS[gain], discount=DISCOUNTS[discount], relevance_threshold=None
    )
    got = run_engine(metric, data)
    # float16 holds 1/3, 1/5, 1/6, 1/7 to ~5e-4 relative
    tol = 2e-3 if "float16" in discount else 1e-6
    for k, value in zip([2, 7], got, strict=True):
        want = expected(per_list, data, k, gain=lambda y: y, discount=lambda j: 1.0 / j, threshold=None)
        assert value == pytest.approx(want, rel=tol)


def test_the_reported_example_gives_keras_rs_numbers_in_an_engine():
    """keras-rs 0.4.0 on the report's lists (linear gain, 1/rank discount): nDCG 0.95192,
    DCG 2.45833 (keras-rs scores a list by its own weight, the mean over the two lists)."""
    data = [(torch.tensor(SCORES), torch.tensor(LABELS))]
    gain, discount = (lambda y: y.to(torch.float32)), (lambda r: (1.0 / r).to(torch.float32))
    ndcg = NDCG(top_k=4, gain_function=gain, discount=discount, relevance_threshold=None)
    dcg = DCG(top_k=4, gain_function=gain, discount=discount)
    assert run_engine(ndcg, data)[0] == pytest.approx(0.95192, abs=1e-5)
    assert run_engine(dcg, data)[0] == pytest.approx(2.45833, abs=1e-5)


# -- 2. bad inputs: errors naming the argument, echoing what came in -----------------------

GOOD_P = np.array(SCORES)
GOOD_Y = np.array(LABELS)
BAD = {
    "strings": (np.array([["a", "b", "c", "d"], ["e", "f", "g", "h"]]), r"must hold numbers.*<U1"),
    "objects": (np.array([[1, 2, 3, None], [1, 2, 3, 4]], dtype=object), r"must hold numbers.*object"),
    "ragged": ([[0.1, 0.2], [0.3]], r"\[\[0\.1, 0\.2\], \[0\.3\]\]"),
    "ragged tensors": ([torch.tensor([0.1, 0.2]), torch.tensor([0.3])], r"must be array-like.*tensor"),
    "complex": (np.ones((2, 4), complex), r"must be real.*complex"),
}


def bad_output(which, bad):
    if which == "y_pred":
        return (bad, GOOD_Y)
    if which == "y":
        return (GOOD_P, bad)
    if which == "mask":
        return (GOOD_P, GOOD_Y, {"mask": bad})
    return (GOOD_P, GOOD_Y, {"sample_weight": bad})


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("which", ["y_pred", "y", "mask", "sample_weight"])
@pytest.mark.parametrize(
    "make", [lambda: NDCG(top_k=3), MAP, RPrecision, lambda: ListMetrics(["ndcg@3", "map"])]
)
def test_ignite_bad_inputs_name_the_argument_in_an_engine(make, which, kind):
    bad, echo = BAD[kind]
    with pytest.raises(TypeError, match=rf"^{which} .*{echo}"):
        run_engine(make(), [bad_output(which, bad)])


@pytest.mark.parametrize("kind", sorted(BAD))
def test_ignite_bad_input_leaves_the_state_untouched(kind):
    metric = NDCG(top_k=3)
    metric.reset()
    metric.update((GOOD_P, GOOD_Y))
    before = metric.state_dict()["__metric_state_per_rank"][0]["_sums"].clone()
    with pytest.raises(TypeError, match="y_pred"):
        metric.update((BAD[kind][0], GOOD_Y))
    assert torch.equal(metric.state_dict()["__metric_state_per_rank"][0]["_sums"], before)
    assert metric.compute() == run_engine(NDCG(top_k=3), [(GOOD_P, GOOD_Y)])


def test_ignite_rank_metric_bad_inputs_name_the_argument_in_an_engine():
    scores = np.array([[0.1, 0.9, 0.3], [0.5, 0.2, 0.4]])
    target = np.array([1, 0])
    with pytest.raises(TypeError, match=r"^y_pred must hold numbers.*<U"):
        run_engine(HitsAtK(k=1), [(scores.astype(str), target)])
    with pytest.raises(TypeError, match=r"^y must be array-like.*\[\[1, 2\], \[0\]\]"):
        run_engine(HitsAtK(k=1), [(scores, [[1, 2], [0]])])
    with pytest.raises(ValueError, match=r"^y_pred is a tensor on the 'meta' device"):
        run_engine(HitsAtK(k=1), [(torch.empty(2, 3, device="meta"), torch.tensor(target))])


def test_ignite_named_sides_bad_input_names_the_side():
    scores = np.array([[0.1, 0.9, 0.3], [0.5, 0.2, 0.4]])
    target = np.array([1, 0])
    metric = rankstream.ignite.RankBasedMetrics(ks=(1,), sides=("head", "tail"))
    batch = {"head": (scores, target), "tail": (scores.astype(object), target)}
    with pytest.raises(TypeError, match=r"^y_pred of side 'tail' must hold numbers.*object"):
        run_engine(metric, [batch])


FUNCTIONAL = [
    rankstream.map_at_k,
    rankstream.ndcg_at_k,
    rankstream.dcg_at_k,
    rankstream.precision_at_k,
    rankstream.recall_at_k,
    rankstream.hit_rate_at_k,
    rankstream.reciprocal_rank_at_k,
    rankstream.r_precision,
]


@pytest.mark.parametrize("kind", [*sorted(BAD), "meta"])
@pytest.mark.parametrize("which", ["y_pred", "y"])
@pytest.mark.parametrize("fn", FUNCTIONAL, ids=lambda f: f.__name__)
def test_functional_bad_inputs_name_the_argument(fn, which, kind):
    if kind == "meta":
        bad, echo, exc = torch.empty(2, 4, device="meta"), r"'meta' device.*\(2, 4\)", ValueError
    else:
        (bad, echo), exc = BAD[kind], TypeError
        if kind in ("strings", "objects"):  # an array's dtype is read after its conversion
            echo = r"(hold|real|numeric).*(<U1|object)"
    args = (bad, GOOD_Y) if which == "y_pred" else (GOOD_P, bad)
    with pytest.raises(exc, match=rf"^{which} .*{echo}"):
        fn(*args)


@pytest.mark.parametrize("which", ["ranks", "num_candidates", "weights"])
@pytest.mark.parametrize(
    "metric",
    [rank_based.InverseHarmonicMeanRank(), rank_based.HitsAtK(3), rank_based.AdjustedArithmeticMeanRank()],
)
def test_rank_based_meta_and_ragged_inputs_name_the_argument(metric, which):
    good = {"ranks": np.array([1.0, 2.0, 3.0]), "num_candidates": np.array([5.0, 5.0, 5.0]), "weights": None}
    for bad, exc, echo in [
        (torch.empty(3, device="meta"), ValueError, r"'meta' device.*\(3,\)"),
        ([[1, 2], [3]], TypeError, r"rectangular.*\[\[1, 2\], \[3\]\]"),
    ]:
        with pytest.raises(exc, match=rf"^{which} .*{echo}"):
            metric(**{**good, which: bad})
    if which != "ranks":  # the moments read the candidate counts and weights
        with pytest.raises(ValueError, match=rf"^{which} is a tensor on the 'meta' device"):
            kw = {"num_candidates": good["num_candidates"], which: torch.empty(3, device="meta")}
            metric.expected_value(**kw)


# -- 4. messages naming the argument that is wrong ----------------------------------------


@pytest.mark.parametrize("fn", FUNCTIONAL[:-1], ids=lambda f: f.__name__)
@pytest.mark.parametrize("k", [0, -1, [3, 0], True, 2.5])
def test_functional_k_errors_name_k(fn, k):
    with pytest.raises(ValueError, match=r"^k must be a positive int") as info:
        fn(GOOD_P, GOOD_Y, k=k)
    assert repr(k) in str(info.value)
    with pytest.raises(ValueError, match=r"^k must be a positive int"):
        fn(GOOD_P, GOOD_Y, k)  # positional too


@pytest.mark.parametrize("fn", FUNCTIONAL, ids=lambda f: f.__name__)
def test_functional_unknown_keywords_name_the_function(fn):
    with pytest.raises(TypeError, match=rf"^{fn.__name__}\(\) got unexpected keyword arguments \['top_k'\]"):
        fn(GOOD_P, GOOD_Y, top_k=3)


@pytest.mark.parametrize("name", ["ndcg@0", "map@-2", "recall@1.5", "mrr@", "P@x"])
@pytest.mark.parametrize("make", [rankstream.ListMetrics, ListMetrics], ids=["core", "ignite"])
def test_list_metric_names_with_a_bad_k_say_k(make, name):
    with pytest.raises(ValueError, match=r"k must be a positive integer") as info:
        make(["ndcg@3", name])
    assert repr(name) in str(info.value)
    assert "unknown" not in str(info.value)


def test_unknown_list_metric_names_still_say_unknown():
    with pytest.raises(ValueError, match=r"unknown list metric 'hits@3'"):
        ListMetrics(["hits@3"])


def test_good_names_and_k_still_work_in_an_engine():
    data = batches(1)
    got = run_engine(ListMetrics(["nDCG@2", "map @ 3", "P@05"]), data)
    assert got["nDCG@2"] == pytest.approx(expected(ref.ndcg, data, 2), rel=1e-9)
    assert got["map @ 3"] == pytest.approx(expected(ref.average_precision, data, 3), rel=1e-9)
    assert got["P@05"] == pytest.approx(expected(ref.precision, data, 5), rel=1e-9)
    per_list = rankstream.ndcg_at_k(GOOD_P, GOOD_Y, k=[3, 1])  # columns in sorted k
    for i in range(2):
        want = [ref.ndcg(SCORES[i], LABELS[i], k) for k in (1, 3)]
        assert per_list[i].tolist() == pytest.approx(want, rel=1e-12)
