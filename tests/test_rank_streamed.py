"""Streamed rank-based metrics (Hits@k, MRR, GMR, mean rank) from scores.

Every expected number comes from an independent source: ranks counted naively task by task
(python loops over candidates, ties counted exactly), PyKEEN's ``Ranks.from_scores`` and
PyKEEN's metric classes applied to those naive ranks (value, expectation, variance, adjusted
and z forms), or exhaustive enumeration of all rank tuples for tiny cases.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from pykeen.evaluation.ranks import Ranks
from pykeen.metrics import ranking as pk

from rankstream.core import backends
from rankstream.core.ranks import stats
from rankstream.core.ranks.kernel import RankKernel
from rankstream.core.ranks.tasks import per_task_ranks
from rankstream.core.state import State
from rankstream.ignite import (
    GMR,
    ArithmeticMeanRank,
    GeometricMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    RankBasedMetrics,
)

from pykeen_reference import naive_rank, naive_tasks, pykeen_reference

RANK_TYPES = ("optimistic", "pessimistic", "realistic")
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ==========================================================================================
# the naive reference


def streamed(scores, y, mask=None, weights=None, ks=(1, 3, 10), rank_type="realistic", **kw):
    st_ = State(RankKernel(ks, rank_type, **kw))
    st_.update(scores, y, mask, weights)
    return st_


def assert_dicts_close(got, want, rtol=1e-9, atol=1e-12, skip=()):
    for key, value in want.items():
        if key in skip:
            continue
        assert key in got, key
        assert got[key] == pytest.approx(value, rel=rtol, abs=atol), (key, got[key], value)


# ==========================================================================================
# data


def tie_data(rng, b, n, *, levels=4, mask_p=0.2, labels=False, pos_p=0.3, weights=False, zero_w=False):
    scores = rng.integers(0, levels, size=(b, n)).astype(np.float64)
    mask = rng.random((b, n)) >= mask_p
    if labels:
        y = (rng.random((b, n)) < pos_p).astype(np.float64)
    else:
        y = rng.integers(0, n, size=b)
        mask[np.arange(b), y] = True
    w = None
    if weights:
        w = rng.integers(1 if not zero_w else 0, 4, size=b).astype(np.float64)
        if zero_w:
            w[0] = 0.0
    return scores, y, mask, w


# ==========================================================================================
# ranks


@pytest.mark.parametrize("backend", ["numpy", "torch64", "torch32"])
@pytest.mark.parametrize("labels", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_ranks_match_naive_counts(backend, labels, masked):
    rng = np.random.default_rng(1 + labels + 2 * masked)
    scores, y, mask, w = tie_data(rng, 13, 9, labels=labels, weights=True)
    mask = mask if masked else None
    want = naive_tasks(scores, y, mask, w)
    if backend == "numpy":
        args = [scores, y, mask, w]
    else:
        dtype = torch.float64 if backend == "torch64" else torch.float32
        args = [
            torch.as_tensor(scores, dtype=dtype),
            torch.as_tensor(y, dtype=dtype) if labels else torch.as_tensor(y),
            None if mask is None else torch.as_tensor(mask),
            torch.as_tensor(w, dtype=dtype),
        ]
    for rt in RANK_TYPES:
        r, nc, ww = (np.asarray(x, dtype=np.float64) for x in per_task_ranks(*args, rank_type=rt))
        np.testing.assert_array_equal(r, [naive_rank(t, rt) for t in want])
        np.testing.assert_array_equal(nc, [t[2] for t in want])
        np.testing.assert_array_equal(ww, [t[3] for t in want])


def test_ranks_match_pykeen_rank_builder():
    """PyKEEN's Ranks.from_scores, with removed candidates set to NaN as PyKEEN does."""
    rng = np.random.default_rng(5)
    scores, y, mask, _ = tie_data(rng, 40, 30, levels=6)
    s = torch.as_tensor(scores)
    pk_scores = s.masked_fill(~torch.as_tensor(mask), float("nan"))
    ranks = Ranks.from_scores(pk_scores[torch.arange(40), torch.as_tensor(y)][:, None], pk_scores)
    for rt in RANK_TYPES:
        r, nc, _ = per_task_ranks(s, torch.as_tensor(y), torch.as_tensor(mask), rank_type=rt)
        np.testing.assert_array_equal(r.numpy(), ranks.to_type_dict()[rt].double().numpy())
        np.testing.assert_array_equal(nc.numpy(), ranks.number_of_options.double().numpy())


def test_infinite_scores_are_ranked_exactly():
    inf = float("inf")
    scores = np.array(
        [
            [inf, inf, 1.0, -inf, 0.0],
            [-inf, -inf, -inf, 2.0, -inf],
            [0.0, inf, -inf, 3.0, 3.0],
            [-inf, 5.0, inf, 1.0, -inf],
        ]
    )
    y = np.array([0, 1, 2, 4])
    labels = np.zeros_like(scores)
    labels[np.arange(4), y] = 1
    labels[3, 0] = 1
    for mask in [None, np.array([[1, 1, 1, 0, 1], [1, 1, 0, 1, 1], [1, 1, 1, 1, 0], [1, 0, 1, 1, 1]], bool)]:
        if mask is not None:
            mask[np.arange(4), y] = True
        for target in (y, labels):
            want = naive_tasks(scores, target, mask)
            for backend in (np.asarray, torch.as_tensor):
                args = [backend(scores), backend(target), None if mask is None else backend(mask)]
                r, nc, _ = per_task_ranks(*args, rank_type="pessimistic")
                np.testing.assert_array_equal(np.asarray(r), [t[1] for t in want])
                r, nc, _ = per_task_ranks(*args, rank_type="optimistic")
                np.testing.assert_array_equal(np.asarray(r), [t[0] for t in want])
                np.testing.assert_array_equal(np.asarray(nc), [t[2] for t in want])


def test_masked_nan_scores_are_ignored_and_visible_nan_raises():
    scores = np.array([[1.0, np.nan, 0.5], [np.nan, 2.0, 1.0]])
    mask = np.array([[True, False, True], [False, True, True]])
    for backend in (np.asarray, torch.as_tensor):
        y = backend(np.array([0, 2]))
        r, nc, _ = per_task_ranks(backend(scores), y, backend(mask), rank_type="optimistic")
        np.testing.assert_array_equal(np.asarray(r), [1, 2])
        np.testing.assert_array_equal(np.asarray(nc), [2, 2])
        with pytest.raises(ValueError, match="NaN"):
            per_task_ranks(backend(scores), backend(np.array([0, 2])))
        lab = np.array([[1.0, 0, 0], [0, 1, 0]])
        with pytest.raises(ValueError, match="NaN"):
            per_task_ranks(backend(scores), backend(lab))
        r, _, _ = per_task_ranks(backend(scores), backend(lab), backend(mask), rank_type="optimistic")
        np.testing.assert_array_equal(np.asarray(r), [1, 1])


# ==========================================================================================
# metric values against PyKEEN on the naive ranks


@pytest.mark.parametrize("rank_type", RANK_TYPES)
@pytest.mark.parametrize("labels", [False, True])
@pytest.mark.parametrize("weights", [False, True])
def test_all_metrics_match_pykeen_on_naive_ranks(rank_type, labels, weights):
    rng = np.random.default_rng(10 + labels + 2 * weights)
    scores, y, mask, w = tie_data(rng, 120, 25, labels=labels, pos_p=0.1, weights=weights)
    ks = (1, 3, 10, 30)
    got = streamed(
        torch.as_tensor(scores).float(),
        torch.as_tensor(y),
        torch.as_tensor(mask),
        None if w is None else torch.as_tensor(w),
        ks=ks,
        rank_type=rank_type,
    ).compute()
    want = pykeen_reference(naive_tasks(scores, y, mask, w), rank_type, ks)
    assert got["geometric_mean_rank_error_bound"] < 1e-12
    assert_dicts_close(got, want)


def test_zero_weight_rows_count_for_nothing():
    rng = np.random.default_rng(3)
    scores, y, mask, w = tie_data(rng, 60, 12, weights=True, zero_w=True)
    w[1::4] = 0.0
    got = streamed(scores, y, mask, w).compute()
    want = pykeen_reference(naive_tasks(scores, y, mask, w), "realistic", (1, 3, 10))
    assert_dicts_close(got, want)
    assert got["count"] == np.count_nonzero(w)


def test_expectations_by_enumeration_of_all_rank_tuples():
    """E and Var of every metric equal the mean and variance over all rank tuples."""
    nc = [3, 1, 4, 2]
    w = [1.0, 2.0, 0.5, 1.5]
    rows = []
    for ranks in itertools.product(*[range(1, n + 1) for n in nc]):
        r = np.array(ranks, dtype=float)
        ww = np.array(w)
        rows.append(
            {
                "hits_at_2": np.average(r <= 2, weights=ww),
                "inverse_harmonic_mean_rank": np.average(1 / r, weights=ww),
                "geometric_mean_rank": math.exp(np.average(np.log(r), weights=ww)),
                "arithmetic_mean_rank": np.average(r, weights=ww),
            }
        )
    # one batch whose tasks have exactly these candidate counts (index targets, masks)
    mask = np.array([[j < n for j in range(4)] for n in nc])
    scores = np.zeros((4, 4))
    got = streamed(scores, np.zeros(4, dtype=np.int64), mask, np.array(w), ks=(2,)).compute()
    for key in rows[0]:
        vals = np.array([row[key] for row in rows])
        assert got[f"expected_{key}"] == pytest.approx(vals.mean(), rel=1e-12), key
        rel = 1e-12 if key != "geometric_mean_rank" else 2e-3  # 4 tasks: a truncated series
        assert got[f"variance_{key}"] == pytest.approx(vals.var(), rel=rel), key


def test_gmr_stream_error_bound_and_small_counts():
    rng = np.random.default_rng(7)
    # one task: exact (the GMR is the rank itself)
    got = streamed(np.zeros((1, 9)), np.array([0])).compute()
    assert got["expected_geometric_mean_rank"] == pytest.approx(5.0, rel=1e-15)
    assert got["variance_geometric_mean_rank"] == pytest.approx((81 - 1) / 12, rel=1e-15)
    assert got["geometric_mean_rank_error_bound"] == 0.0
    # many tasks with large ragged N: E and Var against the O(1) closed form, and the bound holds
    b, n = 300, 3000
    mask = np.arange(n)[None, :] < rng.integers(1, n + 1, size=b)[:, None]
    w = rng.random(b) + 0.25
    st_ = streamed(np.zeros((b, n), np.float32), np.zeros(b, np.int64), mask, w)
    got = st_.compute()
    nc = mask.sum(1)
    e = pk.GeometricMeanRank().expected_value(nc, weights=w)
    assert got["expected_geometric_mean_rank"] == pytest.approx(e, rel=1e-11)
    assert got["expected_geometric_mean_rank"] == pytest.approx(stats.gmr_expectation(nc, w), rel=1e-12)
    assert got["variance_geometric_mean_rank"] == pytest.approx(stats.gmr_variance(nc, w), rel=1e-10)
    assert got["geometric_mean_rank_error_bound"] < 1e-13


def test_kernel_fields_equal_sums_of_the_stats_streaming_terms():
    """The per-N table (and the direct path) give the sums of stats' per-task terms."""
    rng = np.random.default_rng(2)
    scores, y, mask, w = tie_data(rng, 50, 40, weights=True, mask_p=0.5)
    tasks = naive_tasks(scores, y, mask, w)
    nc = np.array([t[2] for t in tasks], dtype=float)
    ww = np.array([t[3] for t in tasks])
    for table_max in (1 << 17, 0):
        sums = streamed(scores, y, mask, w, ks=(1, 5), table_max=table_max).sums
        for k, j in ((1, 0), (5, 1)):
            h = stats.hits_stream_terms(nc, ww, np, k=float(k))
            assert sums["hits_mean"][j] == pytest.approx(h["mean"].sum(), rel=1e-13)
            assert sums["hits_var"][j] == pytest.approx(h["var"].sum(), rel=1e-13)
        m = stats.mrr_stream_terms(nc, ww, np)
        assert sums["inverse_rank_mean"] == pytest.approx(m["mean"].sum(), rel=1e-13)
        assert sums["inverse_rank_var"] == pytest.approx(m["var"].sum(), rel=1e-13)
        g = stats.gmr_stream_terms(nc, ww, np, order=20)
        for mm in range(1, 21):  # kept as Taylor coefficients F_m / m!
            want = g[f"cumulant_{mm}"].sum() / math.factorial(mm)
            assert sums["gmr_cumulants"][mm - 1] == pytest.approx(want, rel=1e-12, abs=1e-300)
        assert sums["gmr_tail"] == pytest.approx(g["tail"].sum(), rel=1e-13)


def test_one_positive_per_row_labels_equal_index_targets():
    rng = np.random.default_rng(4)
    scores, y, mask, w = tie_data(rng, 30, 11, weights=True)
    labels = np.zeros_like(scores)
    labels[np.arange(30), y] = 1.0
    a = streamed(torch.as_tensor(scores), torch.as_tensor(y), torch.as_tensor(mask), torch.as_tensor(w)).sums
    b = streamed(
        torch.as_tensor(scores), torch.as_tensor(labels).bool(), torch.as_tensor(mask), torch.as_tensor(w)
    ).sums
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-13, atol=0)


# ==========================================================================================
# properties


@st.composite
def datasets(draw):
    b = draw(st.integers(1, 10))
    n = draw(st.integers(1, 8))
    labels = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    scores, y, mask, w = tie_data(
        rng, b, n, levels=3, mask_p=0.3, labels=labels, pos_p=0.4, weights=True, zero_w=draw(st.booleans())
    )
    cuts = sorted(set(draw(st.lists(st.integers(0, b), max_size=4))))
    return scores, y, mask, w, cuts


@SETTINGS
@given(datasets(), st.sampled_from(RANK_TYPES), st.booleans())
def test_batch_split_invariance(data, rank_type, use_torch):
    scores, y, mask, w, cuts = data
    conv = torch.as_tensor if use_torch else np.asarray
    kernel = RankKernel((1, 2, 5), rank_type)
    whole = State(kernel).update(conv(scores), conv(y), conv(mask), conv(w))
    parts = []
    bounds = [0, *cuts, scores.shape[0]]
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            parts.append(
                State(kernel).update(conv(scores[lo:hi]), conv(y[lo:hi]), conv(mask[lo:hi]), conv(w[lo:hi]))
            )
    merged = parts[0]
    for p in reversed(parts[1:]):  # any order
        merged = p.merge(merged)
    for key in kernel.fields:
        np.testing.assert_allclose(merged.sums[key], whole.sums[key], rtol=1e-12, atol=1e-12)


@SETTINGS
@given(datasets(), st.sampled_from(RANK_TYPES))
def test_mask_equals_removal(data, rank_type):
    """A masked candidate is exactly a candidate that is not there: each row with its masked
    columns dropped, as its own batch, gives the same state."""
    scores, y, mask, w, _ = data
    kernel = RankKernel((1, 2, 5), rank_type)
    masked = State(kernel).update(
        torch.as_tensor(scores), torch.as_tensor(y), torch.as_tensor(mask), torch.as_tensor(w)
    )
    removed = State(kernel)
    for i in range(scores.shape[0]):
        cols = np.nonzero(mask[i])[0]
        if cols.size == 0:
            continue
        yi = np.searchsorted(cols, y[i])[None] if y.ndim == 1 else y[i, cols][None]
        removed.update(scores[i, cols][None], yi, None, w[i : i + 1])
    for key in kernel.fields:
        np.testing.assert_allclose(removed.sums[key], masked.sums[key], rtol=1e-12, atol=1e-12)


def test_table_and_direct_paths_agree_and_backends_agree():
    rng = np.random.default_rng(8)
    scores, y, mask, w = tie_data(rng, 40, 64, labels=True, pos_p=0.2, weights=True)
    a = streamed(scores, y, mask, w).sums
    b = streamed(
        torch.as_tensor(scores), torch.as_tensor(y), torch.as_tensor(mask), torch.as_tensor(w), table_max=0
    ).sums
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64])
def test_low_precision_and_integer_scores(dtype):
    rng = np.random.default_rng(14)
    scores, y, mask, w = tie_data(rng, 20, 15, levels=7, weights=True)  # small ints: exact in any dtype
    want = naive_tasks(scores, y, mask, w)
    for target in (torch.as_tensor(y), torch.as_tensor(np.eye(15)[y])):
        r, nc, _ = per_task_ranks(
            torch.as_tensor(scores).to(dtype),
            target,
            torch.as_tensor(mask),
            torch.as_tensor(w),
            rank_type="realistic",
        )
        np.testing.assert_array_equal(r.numpy(), [naive_rank(t, "realistic") for t in want])
        np.testing.assert_array_equal(nc.numpy(), [t[2] for t in want])


def test_generic_torch_path_equals_the_cpu_fast_path(monkeypatch):
    """The path accelerators take (bool comparisons and reductions, no scratch buffers)."""
    import rankstream.core.backends.torch as torch_backend

    rng = np.random.default_rng(15)
    for labels in (False, True):
        scores, y, mask, w = tie_data(rng, 30, 20, labels=labels, pos_p=0.2, weights=True)
        args = [torch.as_tensor(a) for a in (scores, y, mask, w)]
        fast = streamed(*args).sums
        with monkeypatch.context() as mp:
            mp.setattr(torch_backend, "_cpu", lambda x: False)
            slow = streamed(*args).sums
        for key in fast:
            np.testing.assert_array_equal(fast[key], slow[key])


def test_no_read_back_path_counts_bad_rows_and_compute_raises(monkeypatch):
    """Where update cannot read values back (accelerators, jit) it never raises: rows with bad
    data are left out and counted, and compute() raises."""

    rng = np.random.default_rng(16)
    scores, y, mask, w = tie_data(rng, 12, 9, weights=True)
    good = [torch.as_tensor(a) for a in (scores, y, mask, w)]
    want = streamed(*good).sums
    _no_read_back(monkeypatch)
    got = streamed(*good).sums
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    bad_s, bad_y, bad_m, bad_w = (a.copy() for a in (scores, y, mask, w))
    bad_s[1, (y[1] + 1) % 9] = np.nan
    bad_m[1, (y[1] + 1) % 9] = True  # a NaN among the candidates
    bad_y[3] = 9  # out of range
    bad_m[5, bad_y[5]] = False  # masked true candidate
    bad_w[7] = -1.0  # negative weight
    bad_s[8, :] = np.nan
    bad_m[8, :] = False
    bad_m[8, y[8]] = True
    bad_s[8, y[8]] = 0.0  # NaN only where masked: fine
    st_ = streamed(*(torch.as_tensor(a) for a in (bad_s, bad_y, bad_m, bad_w)))
    rows = [i for i in range(12) if i not in (1, 3, 5, 7)]
    ref_ = streamed(*(torch.as_tensor(a[rows]) for a in (bad_s, bad_y, bad_m, bad_w))).sums
    assert st_.sums["invalid"] == 4.0
    for key in ref_:
        if key != "invalid":
            np.testing.assert_allclose(st_.sums[key], ref_[key], rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="4 row"):
        st_.compute()
    m = InverseHarmonicMeanRank()
    m.update((torch.as_tensor(bad_s), torch.as_tensor(bad_y), {"mask": torch.as_tensor(bad_m)}))
    with pytest.raises(ValueError, match="counted and reported"):
        m.compute()


def test_many_positives_per_row():
    rng = np.random.default_rng(9)
    scores, y, mask, w = tie_data(rng, 6, 50, labels=True, pos_p=0.6, levels=5, weights=True)
    got = streamed(
        torch.as_tensor(scores), torch.as_tensor(y), torch.as_tensor(mask), torch.as_tensor(w), ks=(1, 10)
    ).compute()
    want = pykeen_reference(naive_tasks(scores, y, mask, w), "realistic", (1, 10))
    assert_dicts_close(got, want, rtol=1e-9)


def test_rows_without_positives_and_empty_batches():
    scores = torch.rand(3, 5)
    labels = torch.zeros(3, 5)
    st_ = State(RankKernel(3))
    st_.update(scores, labels)
    assert all(np.all(v == 0) for v in st_.sums.values())
    labels[1, 2] = 1
    st_.update(scores, labels)
    assert st_.compute()["count"] == 1.0


# ==========================================================================================
# Ignite


def run_engine(metric, batches, name="m"):
    engine = Engine(lambda e, b: b)
    metric.attach(engine, name)
    return engine.run(batches).metrics


def test_ignite_engine_run_flattens_the_dict_and_matches_pykeen():
    rng = np.random.default_rng(11)
    batches, tasks = [], []
    for i in range(5):
        labels = i % 2 == 1
        scores, y, mask, w = tie_data(rng, 20, 16, labels=labels, pos_p=0.15, weights=True)
        y_t = torch.as_tensor(y).float() if labels else torch.as_tensor(y)
        batches.append(
            (
                torch.as_tensor(scores).float(),
                y_t,
                {"mask": torch.as_tensor(mask), "sample_weight": torch.as_tensor(w)},
            )
        )
        tasks += naive_tasks(scores, y, mask, w)
    metrics = run_engine(RankBasedMetrics(ks=(1, 3, 10)), batches, "ranking")
    want = pykeen_reference(tasks, "realistic", (1, 3, 10))
    assert_dicts_close(metrics, want)
    assert isinstance(metrics["ranking"], dict)
    for cls, key in [
        (lambda: HitsAtK(k=3), "hits_at_3"),
        (lambda: InverseHarmonicMeanRank(), "inverse_harmonic_mean_rank"),
        (lambda: InverseHarmonicMeanRank(output="z"), "z_inverse_harmonic_mean_rank"),
        (lambda: GMR(output="adjusted"), "adjusted_geometric_mean_rank_index"),
        (lambda: GeometricMeanRank(output="expected"), "expected_geometric_mean_rank"),
        (lambda: ArithmeticMeanRank(output="variance"), "variance_arithmetic_mean_rank"),
        (lambda: ArithmeticMeanRank(output="adjusted"), "adjusted_arithmetic_mean_rank_index"),
    ]:
        got = run_engine(cls(), batches)["m"]
        assert got == pytest.approx(want[key], rel=1e-9, abs=1e-12), key
    got = run_engine(HitsAtK(k=[10, 1], rank_type="optimistic"), batches)["m"]
    want_opt = pykeen_reference(tasks, "optimistic", (1, 10))
    assert got == pytest.approx([want_opt["hits_at_1"], want_opt["hits_at_10"]], rel=1e-12)


def test_ignite_state_dict_round_trip_and_reset():
    rng = np.random.default_rng(12)
    scores, y, mask, _ = tie_data(rng, 30, 10)
    m = RankBasedMetrics(ks=(1, 5), rank_type="pessimistic")
    m.update((torch.as_tensor(scores), torch.as_tensor(y), {"mask": torch.as_tensor(mask)}))
    before = m.compute()
    m2 = RankBasedMetrics(ks=(1, 5), rank_type="pessimistic")
    m2.load_state_dict(m.state_dict())
    assert m2.compute() == before
    m.reset()
    with pytest.raises(NotComputableError, match="ranking task"):
        m.compute()


def test_ignite_no_tasks_is_not_computable():
    m = InverseHarmonicMeanRank()
    m.update((torch.rand(4, 6), torch.zeros(4, 6)))
    with pytest.raises(NotComputableError):
        m.compute()


def test_gmr_warns_when_its_expectation_bound_is_loose():
    m = GMR(output="expected")
    m.update((torch.rand(3, 6), torch.tensor([0, 1, 2])))
    with pytest.warns(RuntimeWarning, match="GMR"):
        m.compute()
    m = GMR()  # the value itself needs no expectation: no warning
    m.update((torch.rand(3, 6), torch.tensor([0, 1, 2])))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.compute()


# ==========================================================================================
# bad input


S = torch.rand(3, 5, generator=torch.Generator().manual_seed(0))
Y = torch.tensor([0, 4, 2])


@pytest.mark.parametrize("bad", [0, -1, [], [3, 0], 2.5, True, "3"])
def test_k_must_be_positive_ints(bad):
    with pytest.raises(ValueError, match="k"):
        HitsAtK(k=bad)
    with pytest.raises(ValueError, match="ks"):
        RankBasedMetrics(ks=bad)


def test_constructor_arguments_are_checked():
    with pytest.raises(ValueError, match="rank_type"):
        InverseHarmonicMeanRank(rank_type="average")
    with pytest.raises(ValueError, match="rank_type"):
        RankBasedMetrics(rank_type=None)
    with pytest.raises(ValueError, match="output"):
        HitsAtK(output="max")
    with pytest.raises(ValueError, match="gmr_order"):
        RankKernel(gmr_order=0)
    with pytest.raises(ValueError, match="metrics"):
        RankKernel(metrics=("ndcg",))


W = torch.ones(3)
BAD_UPDATES = [
    ((S, torch.tensor([0, 5, 1])), ValueError, r"out of range.*\[5\]"),
    ((S, torch.tensor([0, -1, 1])), ValueError, r"out of range.*\[-1\]"),
    ((S, torch.tensor([0.0, 1.0, 2.0])), TypeError, "integer indices"),
    ((S, torch.tensor([True, False, True])), TypeError, "integer indices"),
    ((S, torch.tensor([0, 1])), ValueError, r"y must be.*shape \(2,\)"),
    ((S, torch.zeros(3, 4)), ValueError, r"y must be.*\(3, 4\)"),
    ((S[0], Y), ValueError, "y_pred must be 2-D"),
    ((S > 0.5, Y), TypeError, "y_pred must hold real scores"),
    ((S, Y, {"mask": torch.ones(3, 4, dtype=torch.bool)}), ValueError, "mask must have the shape"),
    ((S, Y, {"mask": torch.ones(3, 5)}), TypeError, "mask must be a bool"),
    ((S, Y, {"mask": torch.tensor([[False] + [True] * 4] * 3)}), ValueError, r"rows \[0\] is masked"),
    ((S, Y, {"sample_weight": torch.tensor([1.0, -1.0, 1.0])}), ValueError, "sample_weight.*-1.0"),
    ((S, Y, {"sample_weight": torch.tensor([1.0, float("nan"), 1.0])}), ValueError, "sample_weight"),
    ((S, Y, {"sample_weight": torch.tensor([1.0, float("inf"), 1.0])}), ValueError, "sample_weight"),
    ((S, Y, {"sample_weight": torch.ones(4)}), ValueError, "sample_weight must be a scalar"),
    ((S, torch.full((3, 5), 2.0)), ValueError, r"binary.*\[2.0\]"),
    ((S.masked_fill(S > 0.5, float("nan")), Y), ValueError, "NaN"),
    ((torch.tensor([[0.1, float("nan")], [0.2, 0.3]]), torch.eye(2)[[1, 0]]), ValueError, "NaN"),
    ((torch.empty(3, 0), Y), ValueError, "at least one candidate"),
]


@pytest.mark.parametrize("output, exc, match", BAD_UPDATES)
def test_bad_updates_raise_and_leave_the_state_untouched(output, exc, match):
    m = RankBasedMetrics(ks=(1, 3))
    m.update((torch.rand(2, 5), torch.tensor([1, 3])))
    before = m.state_sums()
    with pytest.raises(exc, match=match):
        m.update(output)
    after = m.state_sums()
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])


def test_numpy_inputs_and_scalar_weight():
    rng = np.random.default_rng(13)
    scores, y, mask, _ = tie_data(rng, 25, 7)
    a = streamed(scores, y, mask, 2.0).compute()
    want = pykeen_reference(naive_tasks(scores, y, mask), "realistic", (1, 3, 10))
    assert_dicts_close(a, want)


def _no_read_back(monkeypatch):
    """Every update takes the accelerator / jit path (nothing read back), also on the CPU."""
    monkeypatch.setattr(backends, "_READ_BACK", contextvars.ContextVar("read_back", default=False))
