"""MAP@k / nDCG@k in Ignite: parity with ignite 0.5.5, naive references, lifecycle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from ignite.metrics.rec_sys import NDCG as IgniteNDCG

from rankstream.ignite import MAP, NDCG

import reference as ref

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")


def run_engine(metric, batches):
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    return engine.run(batches).metrics["m"]


def random_batches(rng, n_batches, n_items, *, graded, ties, zero_rows=True):
    out = []
    for _ in range(n_batches):
        b = int(rng.integers(1, 7))
        if ties:
            s = rng.integers(0, 4, size=(b, n_items)).astype(np.float32)
        else:
            s = rng.standard_normal((b, n_items)).astype(np.float32)
        if graded:
            y = rng.integers(0, 5, size=(b, n_items)).astype(np.float32) * (rng.random((b, n_items)) < 0.4)
        else:
            y = (rng.random((b, n_items)) < 0.3).astype(np.float32)
        if zero_rows and b > 1:
            y[0] = 0.0
        out.append((torch.from_numpy(s), torch.from_numpy(y.astype(np.float32))))
    return out


# -- the peers' documented examples ----------------------------------------------------


def test_seed_map_example_prints_documented_values():
    y_pred = torch.Tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y_true = torch.Tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    assert run_engine(MAP(top_k=[1, 2, 3, 4]), [(y_pred, y_true)]) == [0.5, 0.625, 0.625, 0.75]


@pytest.mark.parametrize(
    "ignore_zero_hits, expected",
    [(True, [0.0, 0.3868, 0.3868, 0.6509]), (False, [0.0, 0.1934, 0.1934, 0.3254])],
)
def test_ignite_ndcg_doc_examples(ignore_zero_hits, expected):
    y_pred = torch.Tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y_true = torch.Tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    got = run_engine(NDCG(top_k=[1, 2, 3, 4], ignore_zero_hits=ignore_zero_hits), [(y_pred, y_true)])
    assert got == pytest.approx(expected, abs=1e-4)


# -- parity with ignite's own NDCG -------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gain_function", ["exp_rank", "linear_rank"])
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_ndcg_matches_ignite(seed, gain_function, ignore_zero_hits):
    rng = np.random.default_rng(seed)
    n_items = int(rng.integers(2, 12))
    top_k = sorted({int(x) for x in rng.integers(1, n_items + 5, size=3)})  # some past the end
    threshold = [1.0, 2.0, 0.5][seed % 3]
    batches = random_batches(rng, 4, n_items, graded=True, ties=seed % 2 == 0)
    kw = dict(ignore_zero_hits=ignore_zero_hits, relevance_threshold=threshold, gain_function=gain_function)
    try:
        expected = run_engine(IgniteNDCG(top_k=top_k, **kw), batches)
    except NotComputableError:
        with pytest.raises(NotComputableError):
            run_engine(NDCG(top_k=top_k, **kw), batches)
        return
    got = run_engine(NDCG(top_k=top_k, **kw), batches)
    assert got == pytest.approx(expected, abs=2e-6)


def test_ndcg_int_top_k_and_k_past_end_match_ignite_list_form():
    rng = np.random.default_rng(7)
    batches = random_batches(rng, 3, 5, graded=True, ties=True)
    expected = run_engine(IgniteNDCG(top_k=[9]), batches)
    assert run_engine(NDCG(top_k=9), batches) == pytest.approx(expected, abs=2e-6)


# -- MAP against the naive reference -----------------------------------------------------


def naive_map(batches, k, **kw):
    scores = [row.tolist() for s, _ in batches for row in s]
    labels = [row.tolist() for _, y in batches for row in y]
    return ref.mean_over_lists(ref.average_precision, scores, labels, k, **kw)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("denominator", ["min", "all"])
@pytest.mark.parametrize("ignore_zero_hits", [True, False])
def test_map_matches_naive_reference(seed, denominator, ignore_zero_hits):
    rng = np.random.default_rng(100 + seed)
    n_items = int(rng.integers(1, 15))
    top_k = sorted({int(x) for x in rng.integers(1, n_items + 4, size=3)})
    batches = random_batches(rng, 3, n_items, graded=seed % 2 == 1, ties=seed % 3 != 0)
    threshold = None if seed % 4 else 2.0
    metric = MAP(
        top_k=top_k, ignore_zero_hits=ignore_zero_hits, denominator=denominator, relevance_threshold=threshold
    )
    empty = "skip" if ignore_zero_hits else "zero"
    expected = [
        naive_map(batches, k, denominator=denominator, threshold=threshold, empty=empty) for k in top_k
    ]
    if expected[0] is None:
        with pytest.raises(NotComputableError):
            run_engine(metric, batches)
        return
    assert run_engine(metric, batches) == pytest.approx(expected, abs=1e-12)


def test_map_mask_and_weights_match_naive_reference():
    rng = np.random.default_rng(3)
    b, n = 9, 12
    s = rng.integers(0, 5, size=(b, n)).astype(np.float32)
    y = (rng.random((b, n)) < 0.3).astype(np.float32)
    m = rng.random((b, n)) < 0.7
    w = rng.integers(0, 4, size=b).astype(np.float32)
    metric = MAP(top_k=[1, 3, 20])
    metric.update(
        (torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m), "sample_weight": w})
    )
    got = metric.compute()
    expected = [
        ref.mean_over_lists(
            ref.average_precision, s.tolist(), y.tolist(), k, masks=m.tolist(), weights=w.tolist()
        )
        for k in [1, 3, 20]
    ]
    assert got == pytest.approx(expected, abs=1e-12)


def test_ndcg_mask_weights_and_callables_match_naive_reference():
    rng = np.random.default_rng(4)
    b, n = 8, 10
    s = rng.standard_normal((b, n)).astype(np.float32)
    y = rng.integers(0, 4, size=(b, n)).astype(np.float32)
    m = rng.random((b, n)) < 0.6
    w = rng.random(b).astype(np.float32)

    def gain(v):
        return v * v

    def disc(j):
        return 1.0 / j

    metric = NDCG(top_k=[2, 5], gain_function=gain, discount=disc, relevance_threshold=1.0)
    metric.update(
        {
            "y_pred": torch.from_numpy(s),
            "y": torch.from_numpy(y),
            "mask": torch.from_numpy(m),
            "sample_weight": torch.from_numpy(w),
        }
    )
    got = metric.compute()
    expected = [
        ref.mean_over_lists(
            ref.ndcg,
            s.tolist(),
            y.tolist(),
            k,
            masks=m.tolist(),
            weights=w.tolist(),
            gain=lambda v: v * v,
            discount=lambda j: 1.0 / j,
        )
        for k in [2, 5]
    ]
    assert got == pytest.approx(expected, abs=1e-7)


def test_int_and_bool_labels_equal_float_labels():
    rng = np.random.default_rng(5)
    s = torch.from_numpy(rng.standard_normal((6, 9)))
    yb = torch.from_numpy(rng.random((6, 9)) < 0.3)
    for cls in (MAP, NDCG):
        a, b_, c = cls(top_k=[1, 4]), cls(top_k=[1, 4]), cls(top_k=[1, 4])
        a.update((s, yb.float()))
        b_.update((s, yb))
        c.update((s, yb.long()))
        assert a.compute() == b_.compute() == c.compute()


# -- ties ----------------------------------------------------------------------------------


def test_ties_first_break_by_index_even_at_the_cut():
    # All scores equal: "first" ranks by index, so only item 0 is in the top 1.
    s = torch.zeros(2, 6)
    y = torch.tensor([[1.0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1.0]])
    assert run_engine(MAP(top_k=[1, 6]), [(s, y)]) == pytest.approx([0.5, (1.0 + 1 / 6) / 2])


def test_random_ties_average_to_the_closed_form_expectation():
    # Under a uniformly random order of N tied items, E[DCG@k] = mean(g) * sum_{j<=k} D_j
    # (MATH.md, Hoeffding); the mean over many seeded draws must approach it.
    n, k = 6, 3
    y = torch.tensor([[3.0, 0, 1, 0, 2, 0]])
    g = (2.0**y - 1)[0]
    disc = sum(1 / math.log2(j + 1) for j in range(1, k + 1))
    ideal = sorted(g.tolist(), reverse=True)
    idcg = sum(v / math.log2(j + 1) for j, v in enumerate(ideal[:k], start=1))
    expected = float(g.mean()) * disc / idcg
    metric = NDCG(top_k=k, ties="random", seed=0)
    for _ in range(4000):
        metric.update((torch.zeros(1, n), y))
    assert metric.compute()[0] == pytest.approx(expected, abs=0.01)


def test_random_ties_with_a_seed_are_reproducible_and_ignore_untied_rows():
    rng = np.random.default_rng(0)
    s = torch.from_numpy(rng.integers(0, 3, size=(5, 8)).astype(np.float32))
    y = torch.from_numpy((rng.random((5, 8)) < 0.4).astype(np.float32))
    a, b = MAP(top_k=[2, 5], ties="random", seed=3), MAP(top_k=[2, 5], ties="random", seed=3)
    a.update((s, y))
    b.update((s, y))
    assert a.compute() == b.compute()
    distinct = torch.from_numpy(rng.standard_normal((5, 8)))
    c, d = MAP(top_k=[2, 5], ties="random", seed=1), MAP(top_k=[2, 5])
    c.update((distinct, y))
    d.update((distinct, y))
    assert c.compute() == d.compute()


# -- lifecycle --------------------------------------------------------------------------------


def test_compute_before_any_usable_list_raises():
    m = MAP(top_k=3)
    with pytest.raises(NotComputableError):
        m.compute()
    m.update((torch.rand(2, 5), torch.zeros(2, 5)))  # no relevant item: skipped
    with pytest.raises(NotComputableError):
        m.compute()
    z = MAP(top_k=3, ignore_zero_hits=False)
    z.update((torch.rand(2, 5), torch.zeros(2, 5)))
    assert z.compute() == [0.0]


@pytest.mark.parametrize("cls", [MAP, NDCG])
def test_state_dict_round_trip_mid_epoch(cls):
    rng = np.random.default_rng(9)
    batches = random_batches(rng, 6, 10, graded=True, ties=True)
    full = cls(top_k=[1, 5])
    for b in batches:
        full.update(b)
    first = cls(top_k=[1, 5])
    for b in batches[:3]:
        first.update(b)
    saved = first.state_dict()
    resumed = cls(top_k=[1, 5])
    resumed.load_state_dict(saved)
    for b in batches[3:]:
        resumed.update(b)
    assert resumed.compute() == full.compute()


def test_compute_twice_and_update_after_compute():
    rng = np.random.default_rng(2)
    batches = random_batches(rng, 4, 7, graded=False, ties=False)
    m = NDCG(top_k=[2])
    for b in batches[:2]:
        m.update(b)
    first = m.compute()
    assert m.compute() == first
    for b in batches[2:]:
        m.update(b)
    fresh = NDCG(top_k=[2])
    for b in batches:
        fresh.update(b)
    assert m.compute() == fresh.compute()


def test_reset_zeroes_the_state():
    m = MAP(top_k=2)
    m.update((torch.rand(3, 4), torch.ones(3, 4)))
    m.reset()
    with pytest.raises(NotComputableError):
        m.compute()


def test_output_transform_and_device_arguments():
    engine = Engine(lambda e, b: {"scores": b[0], "target": b[1]})
    m = MAP(top_k=2, output_transform=lambda o: (o["scores"], o["target"]), device="cpu")
    m.attach(engine, "map")
    y_pred = torch.Tensor([[4.0, 2.0, 3.0, 1.0]])
    y = torch.Tensor([[0.0, 0.0, 1.0, 1.0]])
    # rank 2 holds a relevant item: AP@2 = (1/2) / min(2, 2)
    assert engine.run([(y_pred, y)]).metrics["map"] == [0.25]


def test_numpy_inputs_are_accepted():
    m = MAP(top_k=2)
    m.update((np.array([[4.0, 2.0, 3.0, 1.0]]), np.array([[0.0, 0.0, 1.0, 1.0]])))
    assert m.compute() == [0.25]
