"""Saved states that must be refused: complex sums (a cast would drop the imaginary part), sums
that overflow the dtype the state is kept in, and merges of states of other metrics."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream import ListMetrics, MAPKernel, NDCGKernel, State, merge
from rankstream.core.state import unpack_state
from rankstream.ignite import MAP, NDCG, HitsAtK

import reference as ref

SCORES = np.array([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0], [0.5, 0.1, 0.9, 0.3]])
LABELS = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1.0, 2.0, 0.0, 1.0]])


def engine_state(metric, batches):
    """The metric attached to an Engine run over ``batches``: its result and state_dict."""
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    value = engine.run(batches).metrics["m"]
    return value, metric.state_dict()


def expected_map(k):
    return ref.mean_over_lists(ref.average_precision, SCORES.tolist(), LABELS.tolist(), k)


# -- Ignite ------------------------------------------------------------------------------


@pytest.mark.parametrize("imag", [1.0, 0.0])
def test_ignite_load_refuses_complex_sums_and_keeps_its_state(imag):
    value, sd = engine_state(MAP(top_k=[1, 3]), [(SCORES, LABELS)])
    assert value == pytest.approx([expected_map(1), expected_map(3)], rel=1e-12)
    bad = copy.deepcopy(sd)
    sums = bad["__metric_state_per_rank"][0]["_sums"]
    bad["__metric_state_per_rank"][0]["_sums"] = sums.to(torch.complex128) + 1j * imag
    dst = MAP(top_k=[1, 3])
    dst.load_state_dict(sd)
    with pytest.raises(TypeError, match=r"state_dict: field 'value_sum' must hold real sums, got complex"):
        dst.load_state_dict(bad)
    assert dst.compute() == value  # the state loaded before is untouched


def test_ignite_resumed_from_a_good_state_continues_in_an_engine():
    _, sd = engine_state(MAP(top_k=3), [(SCORES[:2], LABELS[:2])])
    metric = MAP(top_k=3)
    metric.load_state_dict(sd)
    metric.update((SCORES[2:], LABELS[2:]))
    assert metric.compute() == pytest.approx([expected_map(3)], rel=1e-12)


def test_ignite_rank_metric_load_refuses_complex_sums():
    scores = torch.tensor([[0.1, 0.9, 0.3], [0.5, 0.2, 0.4]])
    _, sd = engine_state(HitsAtK(k=1), [(scores, torch.tensor([1, 0]))])
    bad = copy.deepcopy(sd)
    bad["__metric_state_per_rank"][0]["_sums"] = bad["__metric_state_per_rank"][0]["_sums"] * (1 + 1j)
    with pytest.raises(TypeError, match=r"field '.+' must hold real sums, got complex"):
        HitsAtK(k=1).load_state_dict(bad)


# -- the core State --------------------------------------------------------------------


def test_state_load_state_dict_refuses_complex_sums():
    st = State(MAPKernel([1, 3])).update(SCORES, LABELS)
    before = st.compute()
    sd = st.state_dict()
    for field in ("value_sum", "weight_sum"):
        bad = copy.deepcopy(sd)
        bad["sums"][field] = bad["sums"][field] + 0j  # complex even with a zero imaginary part
        with pytest.raises(TypeError, match=rf"state_dict: field '{field}' must hold real sums"):
            st.load_state_dict(bad)
        with pytest.raises(TypeError, match=rf"field '{field}' must hold real sums"):
            State(MAPKernel([1, 3]), bad)
        with pytest.raises(TypeError, match=rf"sums: field '{field}' must hold real sums"):
            st.load(bad["sums"])
    assert st.compute() == before == pytest.approx([expected_map(1), expected_map(3)], rel=1e-12)


def test_a_float32_state_refuses_sums_that_overflow_it():
    kernel = MAPKernel([1, 3])
    sd = State(kernel).update(SCORES, LABELS).state_dict()
    sd["sums"]["weight_sum"] = np.array(1e300)
    with pytest.raises(
        ValueError, match=r"owner: field 'weight_sum' holds 1e\+300, which overflows the float32"
    ):
        unpack_state(kernel, sd, owner="owner", state_dtype="float32")
    assert float(unpack_state(kernel, sd, owner="owner")["weight_sum"]) == 1e300  # float64 holds it
    sd["sums"]["weight_sum"] = np.array(3e38)  # the largest float32 is 3.4e38: fits
    assert float(unpack_state(kernel, sd, state_dtype="float32")["weight_sum"]) == 3e38


def test_merge_refuses_states_of_other_metrics_naming_both():
    a = State(MAPKernel([1, 5])).update(SCORES, LABELS)
    b = State(NDCGKernel([1, 5])).update(SCORES, LABELS)
    with pytest.raises(ValueError, match=r"cannot merge a state of MAPKernel with a state of NDCGKernel"):
        a.merge(b)
    with pytest.raises(ValueError, match=r"cannot merge a state of NDCGKernel with a state of MAPKernel"):
        merge(b, a)
    with pytest.raises(ValueError, match=r"denominator='min' vs 'all'"):
        a.merge(State(MAPKernel([1, 5], denominator="all")))
    with pytest.raises(ValueError, match=r"gain"):
        b.merge(State(NDCGKernel([1, 5], gain="linear_rank")))
    with pytest.raises(
        ValueError, match=r"cannot merge states of ListMetrics with other settings: settings="
    ):
        State(ListMetrics(["ndcg@3"])).merge(State(ListMetrics(["ndcg@3"], relevance_threshold=2.0)))
    with pytest.raises(TypeError, match=r"got dict"):
        a.merge(a.state_dict())


def test_merge_of_one_metric_adds_and_may_differ_in_seed():
    a = State(MAPKernel([1, 3], ties="random", seed=1)).update(SCORES[:2], LABELS[:2])
    b = State(MAPKernel([1, 3], ties="random", seed=2)).update(SCORES[2:], LABELS[2:])
    # these lists have no tied scores, so the random tie order changes nothing
    assert a.merge(b).compute() == pytest.approx([expected_map(1), expected_map(3)], rel=1e-12)
    one = State(NDCGKernel(3)).update(SCORES[:1], LABELS[:1])
    two = State(NDCGKernel(3)).update(SCORES[1:], LABELS[1:])
    want = ref.mean_over_lists(ref.ndcg, SCORES.tolist(), LABELS.tolist(), 3)
    assert merge(one, two).compute() == pytest.approx([want], rel=1e-12)


def test_ignite_ndcg_state_round_trip_through_the_core_state():
    value, sd = engine_state(NDCG(top_k=2), [(SCORES, LABELS)])
    flat = sd["__metric_state_per_rank"][0]["_sums"].numpy()
    sums = {"value_sum": flat[:1], "weight_sum": flat[1], "count": flat[2], "invalid": flat[3]}
    assert State(NDCGKernel(2), sums).compute() == value
