"""Trust at the edges (core, functional forms and the Ignite adapter).

Every class of bad input ends in the right number or a clear error naming the argument; an
update that raises leaves the state bitwise unchanged; no bad batch turns a state into NaN.
Expected values come from the naive references in ``reference.py`` or from exhaustive
enumeration, never from rankstream. The Keras half is ``keras/backend_suite/test_keras_edges.py``.
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from ignite.exceptions import NotComputableError

import rankstream
import rankstream.pykeen
from rankstream import MAPKernel, NDCGKernel, State, map_at_k, ndcg_at_k
from rankstream.core.backends import read_back
from rankstream.core.ranks.kernel import RankKernel
from rankstream.ignite import (
    GMR,
    MAP,
    NDCG,
    ArithmeticMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    RankBasedMetrics,
)

import reference as ref

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")

NAN, INF = float("nan"), float("inf")

# Every public Ignite metric; rank metrics read binary labels (each positive ranked against
# the non-positives), so the label classes below apply to them too.
IGNITE = {
    "MAP": lambda: MAP(top_k=[1, 3]),
    "NDCG": lambda: NDCG(top_k=[2, 5]),
    "NDCG_callable_gain": lambda: NDCG(top_k=[3], gain_function=lambda v: v * v, relevance_threshold=None),
    "HitsAtK": lambda: HitsAtK(k=[1, 3]),
    "InverseHarmonicMeanRank": lambda: InverseHarmonicMeanRank(),
    "GMR": lambda: GMR(),
    "ArithmeticMeanRank": lambda: ArithmeticMeanRank(),
    "RankBasedMetrics": lambda: RankBasedMetrics(ks=[1, 3]),
}
KERNELS = {
    "MAPKernel": lambda: MAPKernel([1, 3]),
    "NDCGKernel": lambda: NDCGKernel([2, 5]),
    "RankKernel": lambda: RankKernel([1, 3]),
}


def _good(rng: np.random.Generator, b: int, n: int) -> dict:
    """A valid batch: exact ties (scores on a small grid), binary labels with at least one
    positive and one negative per list, a mask keeping those two, weights in {1, 2}."""
    s = rng.integers(0, 4, size=(b, n)).astype(np.float32)
    y = (rng.random((b, n)) < 0.4).astype(np.float32)
    y[:, 0], y[:, 1] = 1.0, 0.0
    m = rng.random((b, n)) < 0.8
    m[:, :2] = True
    w = rng.integers(1, 3, size=b).astype(np.float32)
    return {"y_pred": s, "y": y, "mask": m, "sample_weight": w}


def _torch(batch: dict) -> dict:
    return {k: torch.from_numpy(np.asarray(v)) for k, v in batch.items()}


# Bad-input classes: how to spoil a good batch, the exception and the argument it names.
BAD = {
    "nan_score": (lambda d: d["y_pred"].__setitem__((0, 0), NAN), ValueError, "y_pred"),
    "nan_label": (lambda d: d["y"].__setitem__((0, 0), NAN), ValueError, "y"),
    "inf_label": (lambda d: d["y"].__setitem__((0, 0), INF), ValueError, "y"),
    "minus_inf_label": (lambda d: d["y"].__setitem__((0, 0), -INF), ValueError, "y"),
    "inf_weight": (lambda d: d["sample_weight"].__setitem__(0, INF), ValueError, "sample_weight"),
    "nan_weight": (lambda d: d["sample_weight"].__setitem__(0, NAN), ValueError, "sample_weight"),
    "negative_weight": (lambda d: d["sample_weight"].__setitem__(0, -1.0), ValueError, "sample_weight"),
    "no_items": (
        lambda d: d.update({k: v[:, :0] for k, v in d.items() if k != "sample_weight"}),
        ValueError,
        "y_pred",
    ),
    "complex_scores": (lambda d: d.update(y_pred=d["y_pred"] + 1j), TypeError, "y_pred"),
    "complex_labels": (lambda d: d.update(y=d["y"] * (1 + 1j)), TypeError, "y"),
    "complex_weight": (lambda d: d.update(sample_weight=d["sample_weight"] + 0j), TypeError, "sample_weight"),
    "wrong_label_shape": (lambda d: d.update(y=d["y"][:, :-1]), ValueError, "y"),
    "wrong_weight_shape": (
        lambda d: d.update(sample_weight=d["sample_weight"][:-1]),
        ValueError,
        "sample_weight",
    ),
}
# What a torch tensor of these cannot hold, tested as numpy / python input instead.
NOT_TORCH = {"complex_labels", "complex_weight", "complex_scores"}


def _spoil(batch: dict, bad: str) -> dict:
    out = {k: np.array(v, copy=True) for k, v in batch.items()}
    BAD[bad][0](out)
    return out


def _engine_run(metric, batches) -> Engine:
    ev = Engine(lambda engine, batch: batch)
    metric.attach(ev, "m")
    return ev.run(batches)


def _sums(metric) -> np.ndarray:
    return metric._sums.detach().cpu().numpy().copy()


@pytest.mark.parametrize("name", list(IGNITE))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), b=st.integers(2, 5), n=st.integers(3, 7), bad=st.sampled_from(sorted(BAD)))
def test_ignite_engine_refuses_a_bad_batch_and_keeps_the_good_state(name, seed, b, n, bad):
    """Through an Engine with a mapping output: a good batch, then a bad one. The run raises
    the documented error naming the argument, the metric keeps exactly the good batch's sums
    (no NaN), and computing it gives the good batch's result."""
    rng = np.random.default_rng(seed)
    good = _good(rng, b, n)
    spoiled = _spoil(good, bad)
    as_input = spoiled if bad in NOT_TORCH else _torch(spoiled)
    _, exc, arg = BAD[bad]
    metric = IGNITE[name]()
    with pytest.raises(exc, match=rf"\b{arg}\b"):
        _engine_run(metric, [_torch(good), as_input])
    after_bad = _sums(metric)
    alone = IGNITE[name]()
    _engine_run(alone, [_torch(good)])
    assert np.array_equal(after_bad, _sums(alone))
    assert np.all(np.isfinite(after_bad))
    assert metric.compute() == alone.compute()


@pytest.mark.parametrize("name", list(KERNELS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), bad=st.sampled_from(sorted(BAD)), as_torch=st.booleans())
def test_core_state_refuses_a_bad_batch_bitwise_unchanged(name, seed, bad, as_torch):
    rng = np.random.default_rng(seed)
    good = _good(rng, 4, 6)
    st_ = State(KERNELS[name]())
    st_.update(good["y_pred"], good["y"], good["mask"], good["sample_weight"])
    before = {k: v.copy() for k, v in st_.sums.items()}
    spoiled = _spoil(good, bad)
    if as_torch and bad not in NOT_TORCH:
        spoiled = _torch(spoiled)
    _, exc, arg = BAD[bad]
    with pytest.raises(exc, match=rf"\b{arg}\b"):
        st_.update(spoiled["y_pred"], spoiled["y"], spoiled["mask"], spoiled["sample_weight"])
    for k, v in st_.sums.items():
        assert np.array_equal(v, before[k]), k
        assert np.all(np.isfinite(v))


def _update(state: State, batch: dict) -> State:
    args = [batch.get(k) for k in ("y_pred", "y", "mask", "sample_weight")]
    return state.update(*(None if a is None else torch.from_numpy(np.asarray(a)) for a in args))


@pytest.mark.parametrize("name", list(KERNELS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), bad=st.sampled_from(["nan_score", "inf_label", "nan_label", "inf_weight"]))
def test_no_read_path_counts_a_bad_list_and_keeps_the_sums_finite(name, seed, bad):
    """Where update cannot read values back (accelerators, jit; forced here), the bad list is
    left out of the sums and counted in ``invalid``; compute() then says how many."""
    if name == "RankKernel" and bad in ("inf_label", "nan_label"):
        return  # binary labels need eager reads (a data-dependent task count): they raise
    rng = np.random.default_rng(seed)
    good = _good(rng, 4, 6)
    if name == "RankKernel":  # the no-read rank path takes the index of the true item
        good["y"] = np.zeros(4, dtype=np.int64)
        del good["mask"]
    spoiled = {k: np.array(v, copy=True) for k, v in good.items()}
    if bad == "inf_label":
        spoiled["y"][0, 0] = INF
    else:
        BAD[bad][0](spoiled)
    rest = {k: v[1:] for k, v in good.items()}
    with read_back(False):
        st_bad = _update(State(KERNELS[name]()), spoiled)
        st_rest = _update(State(KERNELS[name]()), rest)
    assert st_bad.sums["invalid"] == 1
    for k, v in st_bad.sums.items():
        assert np.all(np.isfinite(v)), k
        if k != "invalid":
            np.testing.assert_allclose(v, st_rest.sums[k], rtol=1e-12, atol=1e-12, err_msg=k)
    with pytest.raises(ValueError, match=r"1 (list|row)"):
        st_bad.compute()


def test_zero_lists_are_a_no_op_everywhere():
    empty = {"y_pred": torch.zeros(0, 4), "y": torch.zeros(0, 4)}
    for name, make in IGNITE.items():
        m = make()
        m.reset()
        m.update(empty)
        assert not np.any(_sums(m)), name
    for make in (MAPKernel, NDCGKernel):
        st_ = State(make(3)).update(np.zeros((0, 4)), np.zeros((0, 4)))
        assert all(not np.any(v) for v in st_.sums.values())
    assert map_at_k(np.zeros((0, 4)), np.zeros((0, 4)), 2).shape == (0,)


# ------------------------------------------------------------------------------------------
# 2. The mapping form through an Engine keeps mask and sample_weight


def test_engine_mapping_keeps_the_mask():
    s, y = torch.tensor([[0.9, 0.1]]), torch.tensor([[0.0, 1.0]])
    m = torch.tensor([[False, True]])
    # masked item removed: the list is item 1 alone, at rank 1
    expected = ref.ndcg([0.1], [1.0], 2)
    assert expected == 1.0
    state = _engine_run(NDCG(top_k=[2]), [{"y_pred": s, "y": y, "mask": m, "x": torch.zeros(1)}])
    assert state.metrics["m"] == [expected]
    tup = NDCG(top_k=[2])
    tup.reset()
    tup.update((s, y, {"mask": m}))
    assert tup.compute() == [expected]


def test_engine_mapping_keeps_the_sample_weight():
    s, y = torch.tensor([[0.9, 0.1]]), torch.tensor([[0.0, 1.0]])
    with pytest.raises(NotComputableError, match="MAP"):
        _engine_run(MAP(top_k=[2]), [{"y_pred": s, "y": y, "sample_weight": torch.tensor([0.0])}])
    rng = np.random.default_rng(3)
    batches = [_torch(_good(rng, 4, 6)) for _ in range(3)]
    flat = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
    expected = ref.mean_over_lists(
        ref.average_precision,
        flat["y_pred"].tolist(),
        flat["y"].tolist(),
        3,
        masks=flat["mask"].tolist(),
        weights=flat["sample_weight"].tolist(),
    )
    state = _engine_run(MAP(top_k=3), batches)
    assert state.metrics["m"] == pytest.approx([expected], rel=1e-12)


def test_engine_mapping_with_a_misspelt_key_is_an_error():
    s, y = torch.tensor([[0.9, 0.1]]), torch.tensor([[0.0, 1.0]])
    with pytest.raises(ValueError, match="masks"):
        _engine_run(MAP(top_k=[2]), [{"y_pred": s, "y": y, "masks": torch.tensor([[True, True]])}])


# ------------------------------------------------------------------------------------------
# 3. Callable gains: the ideal DCG orders the gains (checked by enumeration)


def _dcg(gains: list[float], k: int) -> float:
    return sum(g / math.log2(j + 1) for j, g in enumerate(gains[:k], start=1))


def _ndcg_by_enumeration(scores, labels, gain, k):
    order = ref.ranked_items(scores)
    dcg = _dcg([gain(labels[i]) for i in order], k)
    best = max(_dcg([gain(labels[i]) for i in p], k) for p in itertools.permutations(range(len(scores))))
    return dcg / best


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.integers(-2, 3), min_size=2, max_size=5),
    seed=st.integers(0, 10**6),
    k=st.integers(1, 6),
    which=st.sampled_from(["square", "shifted_square", "abs"]),
)
def test_callable_gain_ndcg_is_dcg_over_the_best_permutation(labels, seed, k, which):
    gain = {"square": lambda v: v * v, "shifted_square": lambda v: (v - 1) ** 2, "abs": abs}[which]
    y = np.array([labels], dtype=np.float64)
    s = np.random.default_rng(seed).permutation(len(labels)).astype(np.float64)[None, :]
    g = [gain(v) for v in labels]
    if max(_dcg(sorted(g, reverse=True), k), 0.0) <= 0:
        return  # no positive ideal DCG: the list has no relevant item
    expected = _ndcg_by_enumeration(s[0].tolist(), labels, gain, k)
    assert expected <= 1.0 + 1e-12
    got = ndcg_at_k(s, y, k, gain=gain, relevance_threshold=None)
    assert got[0] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    ig = NDCG(top_k=[k], gain_function=gain, relevance_threshold=None)
    state = _engine_run(ig, [(torch.from_numpy(s), torch.from_numpy(y))])
    assert state.metrics["m"][0] == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_issue_repros_of_callable_gains():
    s = torch.tensor([[0.9, 0.1]])
    one = NDCG(top_k=[2], gain_function=lambda v: (v - 1) ** 2, relevance_threshold=None)
    assert _engine_run(one, [(s, torch.tensor([[0.0, 1.0]]))]).metrics["m"] == [1.0]
    sq = NDCG(top_k=[2], gain_function=lambda v: v * v, relevance_threshold=None)
    got = _engine_run(sq, [(s, torch.tensor([[1.0, -2.0]]))]).metrics["m"][0]
    assert got == pytest.approx(_ndcg_by_enumeration([0.9, 0.1], [1.0, -2.0], lambda v: v * v, 2))


# ------------------------------------------------------------------------------------------
# 4. NaN and infinite labels: one outcome on every backend


@pytest.mark.parametrize("label", [NAN, INF, -INF])
def test_non_finite_labels_raise_naming_y_on_numpy_torch_and_ignite(label):
    s = np.array([[3.0, 2.0, 1.0, 0.0]])
    y = np.array([[label, 1.0, 0.0, 1.0]])
    for fn in (map_at_k, ndcg_at_k):
        for args in ((s, y), (torch.from_numpy(s), torch.from_numpy(y))):
            with pytest.raises(ValueError, match=r"\by\b.*finite"):
                fn(*args, 2)
    with pytest.raises(ValueError, match=r"\by\b"):
        _engine_run(MAP(top_k=2), [(torch.from_numpy(s), torch.from_numpy(y))])


def test_a_masked_non_finite_label_is_not_in_the_list():
    s = np.array([[3.0, 2.0, 1.0, 0.0]])
    y = np.array([[NAN, 1.0, 0.0, 1.0]])
    m = np.array([[False, True, True, True]])
    expected = ref.average_precision([2.0, 1.0, 0.0], [1.0, 0.0, 1.0], 2)
    assert map_at_k(s, y, 2, mask=m)[0] == pytest.approx(expected)
    got = map_at_k(torch.from_numpy(s), torch.from_numpy(y), 2, mask=torch.from_numpy(m))
    assert float(got[0]) == pytest.approx(expected)


# ------------------------------------------------------------------------------------------
# 8. Loading a state


def test_a_state_of_another_metric_is_refused_whole():
    src = InverseHarmonicMeanRank()
    src.reset()
    src.update((torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([1])))
    dst = HitsAtK(1)
    dst.reset()
    before = _sums(dst)
    with pytest.raises(ValueError, match="does not fit HitsAtK"):
        dst.load_state_dict(src.state_dict())
    assert np.array_equal(_sums(dst), before)
    with pytest.raises(ValueError, match="settings"):
        MAP(top_k=[1, 2]).load_state_dict(MAP(top_k=[1, 3]).state_dict())
    with pytest.raises(ValueError, match="settings"):
        MAP(top_k=[1, 2], denominator="all").load_state_dict(MAP(top_k=[1, 2]).state_dict())


def test_extra_keys_and_non_finite_sums_are_refused():
    m = MAP(top_k=[1])
    m.reset()
    m.update((torch.tensor([[0.3, 0.2]]), torch.tensor([[1.0, 0.0]])))
    sd = m.state_dict()
    per_rank = sd["__metric_state_per_rank"][0]
    extra = {"__metric_state_per_rank": [{**per_rank, "surprise": 1}]}
    with pytest.raises(ValueError, match="surprise"):
        MAP(top_k=[1]).load_state_dict(extra)
    nan = {"__metric_state_per_rank": [{**per_rank, "_sums": per_rank["_sums"] * NAN}]}
    dst = MAP(top_k=[1])
    dst.reset()
    with pytest.raises(ValueError, match="finite"):
        dst.load_state_dict(nan)
    assert not np.any(_sums(dst))
    ok = MAP(top_k=[1])
    ok.load_state_dict(sd)
    assert ok.compute() == [1.0]


def test_core_state_load_checks_everything_before_assigning():
    st_ = State(MAPKernel(1))
    with pytest.raises(ValueError, match="invalid"):
        st_.load({"value_sum": [5.0], "weight_sum": 7.0, "count": 7.0, "invalid": np.zeros(3)})
    assert all(not np.any(v) for v in st_.sums.values())
    with pytest.raises(ValueError, match="finite"):
        st_.load({"value_sum": [NAN], "weight_sum": 7.0, "count": 7.0, "invalid": 0.0})
    assert all(not np.any(v) for v in st_.sums.values())
    saved = State(MAPKernel(1)).update(np.array([[0.3, 0.2]]), np.array([[1.0, 0.0]])).state_dict()
    with pytest.raises(ValueError, match="does not fit NDCGKernel"):
        State(NDCGKernel(1)).load_state_dict(saved)
    with pytest.raises(ValueError, match="settings"):
        State(MAPKernel(1, denominator="all")).load_state_dict(saved)
    again = State(MAPKernel(1))
    again.load_state_dict(saved)
    assert again.compute() == [1.0]


# ------------------------------------------------------------------------------------------
# 9. Threads: separate instances are independent


def test_two_instances_in_two_threads_match_sequential_runs():
    rng = np.random.default_rng(11)
    data = []
    for _ in range(2):
        s = torch.from_numpy(rng.integers(0, 50, size=(64, 3000)).astype(np.float32))
        y = torch.from_numpy((rng.random((64, 3000)) < 0.01).astype(np.float32))
        y[:, 0] = 1.0
        m = torch.from_numpy(rng.random((64, 3000)) < 0.9)
        m[:, 0] = True
        data.append({"y_pred": s, "y": y, "mask": m})
    makers = [lambda: RankBasedMetrics(ks=[1, 10]), lambda: MAP(top_k=[5, 50]), lambda: NDCG(top_k=[10])]

    def run(metric, batch, rounds, barrier=None):
        metric.reset()
        for _ in range(rounds):
            if barrier is not None:
                barrier.wait()
            metric.update(batch)
        return metric.compute()

    for make in makers:
        sequential = [run(make(), data[i], 6) for i in range(2)]
        results: list = [None, None]
        barrier = threading.Barrier(2)
        metrics = [make(), make()]

        def work(i, metrics=metrics, barrier=barrier, results=results):
            results[i] = run(metrics[i], data[i], 6, barrier)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for got, want in zip(results, sequential, strict=True):
            if isinstance(want, dict):
                assert got.keys() == want.keys()
                for key in want:
                    assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15, nan_ok=True), key
            else:
                assert got == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------------------------------
# 10. Dtypes and mixed inputs


def test_mixed_numpy_and_torch_inputs_are_converted():
    s = np.array([[3.0, 2.0, 1.0, 0.0]])
    y = np.array([[0.0, 1.0, 0.0, 1.0]])
    m = np.array([[True, True, False, True]])
    plain = ref.average_precision(s[0].tolist(), y[0].tolist(), 2)
    masked = ref.average_precision([3.0, 2.0, 0.0], [0.0, 1.0, 1.0], 2)
    for args in ((torch.from_numpy(s), y), (s, torch.from_numpy(y))):
        out = map_at_k(*args, 2)
        assert isinstance(out, torch.Tensor)  # torch in, torch out
        assert float(out[0]) == pytest.approx(plain)
    assert float(map_at_k(torch.from_numpy(s), torch.from_numpy(y), 2, mask=m)[0]) == pytest.approx(masked)
    ig = MAP(top_k=2)
    ig.reset()
    ig.update((torch.from_numpy(s), y, {"mask": m}))
    assert ig.compute() == pytest.approx([masked])


@pytest.mark.parametrize(
    ("bad", "exc", "arg"),
    [
        (np.array([["a", "b"]]), TypeError, "y_pred"),
        (np.array([[object(), 1.0]], dtype=object), TypeError, "y_pred"),
        ([[1.0, 2.0], [3.0]], TypeError, "y_pred"),
        (np.array([[1 + 2j, 0.5]]), TypeError, "y_pred"),
    ],
)
def test_unreadable_scores_name_the_argument(bad, exc, arg):
    with pytest.raises(exc, match=rf"\b{arg}\b"):
        map_at_k(bad, np.array([[1.0, 0.0]]), 1)


def test_meta_and_complex_tensors_are_refused():
    with pytest.raises(ValueError, match=r"y_pred.*meta"):
        map_at_k(torch.zeros(2, 3, device="meta"), torch.zeros(2, 3), 1)
    with pytest.raises(TypeError, match=r"\by\b.*complex"):
        ndcg_at_k(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.complex64), 1)
    with pytest.raises(TypeError, match="ranks"):
        rankstream.pykeen.HitsAtK(1)(np.array([1 + 1j, 2.0]))


# ------------------------------------------------------------------------------------------
# 11. Signed zeros are ties (index order first), 12. error names, integer scores


def test_signed_zeros_are_ties():
    s = np.array([[-0.0, 0.0, -1.0]])
    y = np.array([[0.0, 1.0, 0.0]])
    expected = ref.average_precision(s[0].tolist(), y[0].tolist(), 1)
    assert expected == 0.0  # item 0 first: -0.0 == 0.0, earlier index first
    assert map_at_k(s, y, 1)[0] == expected
    assert float(map_at_k(torch.from_numpy(s), torch.from_numpy(y), 1)[0]) == expected
    batch = [(torch.from_numpy(s).float(), torch.from_numpy(y))]
    assert _engine_run(MAP(top_k=1), batch).metrics["m"] == [expected]
    assert _engine_run(NDCG(top_k=1), batch).metrics["m"] == [expected]


@pytest.mark.parametrize("name", list(IGNITE))
def test_not_computable_names_the_public_metric(name):
    m = IGNITE[name]()
    m.reset()
    with pytest.raises(NotComputableError) as info:
        m.compute()
    public = type(m).__name__
    assert public in str(info.value)
    assert "Kernel" not in str(info.value)


def test_integer_scores_warn_once_and_can_be_silenced():
    s, y = np.array([[1, 2, 3]]), np.array([[0.0, 0.0, 1.0]])
    with pytest.warns(rankstream.IntegerScoresWarning, match="y_pred"):
        map_at_k(s, y, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=rankstream.IntegerScoresWarning)
        assert map_at_k(s, y, 1)[0] == 1.0
        map_at_k(s.astype(np.float32), y, 1)  # floats: no warning at all


@pytest.mark.parametrize("gain", ["linear_rank", "exp_rank"])
def test_a_list_without_a_relevant_item_scores_zero_under_empty_zero_whatever_its_gains(gain):
    """With ``relevance_threshold=None`` negative labels have negative gains; under
    ``empty="zero"`` a list whose labels are all <= 0 (no relevant item) scores 0, as the naive
    reference counts it, not its own negative DCG."""
    from rankstream.core.lists.dcg import DCGKernel

    rng = np.random.default_rng(5)
    scores = rng.normal(size=(12, 6))
    labels = rng.integers(-2, 3, size=(12, 6)).astype(np.float64)
    labels[:4] = -rng.integers(0, 3, size=(4, 6))  # no relevant item, negative gains
    gains = {"linear_rank": lambda y: y, "exp_rank": lambda y: 2.0**y - 1.0}[gain]
    kernel = DCGKernel(3, gain=gain, relevance_threshold=None, empty="zero")
    values, _ = ref.counted_values(ref.dcg, list(scores), list(labels), 3, empty="zero", gain=gains)
    got = State(kernel).update(scores, labels).compute()
    assert got == pytest.approx([np.mean(values)], rel=1e-12)
    assert np.all(kernel.per_list(scores, labels)[0][:4] == 0.0)
