"""``ListMetrics``: several list metrics from one selection equal the metrics one by one
(each computed alone, its own kernel and state), on every split of the data; through an
Ignite ``Engine`` each name lands in ``engine.state.metrics``; bad names are clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine

from rankstream import State
from rankstream.core.lists.collection import ListMetrics, make_kernel, parse_name

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")

NAMES = ["ndcg@10", "map@5", "recall@3", "mrr@10", "precision@2", "hit_rate@1", "dcg@4", "r_precision", "ap"]


def _data(seed: int, b: int, n: int):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 6, size=(b, n)).astype(np.float64)  # exact ties on purpose
    y = (rng.random((b, n)) < 0.3) * rng.integers(1, 4, size=(b, n)).astype(np.float64)
    m = rng.random((b, n)) < 0.85
    w = rng.integers(0, 3, size=b).astype(np.float64)
    return s, y, m, w


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    b=st.integers(1, 9),
    n=st.integers(1, 12),
    cut=st.integers(0, 9),
    empty=st.sampled_from(["skip", "zero"]),
)
def test_collection_equals_its_metrics_one_by_one_on_any_split(seed, b, n, cut, empty):
    s, y, m, w = _data(seed, b, n)
    together = State(ListMetrics(NAMES, empty=empty))
    cut = min(cut, b)
    for part in (slice(0, cut), slice(cut, b)):
        together.update(s[part], y[part], m[part], w[part])
    for name in NAMES:
        alone = State(make_kernel(name, empty=empty)).update(s, y, m, w)
        key = name.replace("@", "_")
        got = {f: together.sums[f"{key}__{f}"] for f in alone.sums}
        for field, value in alone.sums.items():
            np.testing.assert_allclose(got[field], value, rtol=1e-12, atol=1e-12, err_msg=f"{name} {field}")


def test_engine_puts_every_name_in_the_state_metrics():
    from rankstream.ignite import MRR, NDCG, ListMetrics, Precision

    s, y, m, w = (torch.from_numpy(a) for a in _data(3, 12, 9))
    batches = [
        {"y_pred": s[i : i + 4], "y": y[i : i + 4], "mask": m[i : i + 4], "sample_weight": w[i : i + 4]}
        for i in (0, 4, 8)
    ]
    ev = Engine(lambda engine, batch: batch)
    ListMetrics(["ndcg@5", "mrr@3", "precision@2"]).attach(ev, "lists")
    singles = {"ndcg@5": NDCG(top_k=5), "mrr@3": MRR(top_k=3), "precision@2": Precision(top_k=2)}
    for name, metric in singles.items():
        metric.attach(ev, f"single {name}")
    state = ev.run(batches)
    for name in singles:
        single = state.metrics[f"single {name}"]
        single = single[0] if isinstance(single, list) else single
        assert state.metrics[name] == pytest.approx(single, rel=1e-12)
        assert state.metrics["lists"][name] == state.metrics[name]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [("nDCG@10", ("ndcg", 10)), ("AP", ("map", None)), ("RR@3", ("mrr", 3)), ("Success@1", ("hit_rate", 1))],
)
def test_names_as_ranx_and_ir_measures_write_them(name, parsed):
    assert parse_name(name) == parsed


@pytest.mark.parametrize("bad", ["ndcg@0", "auc@5", "", "map@-1", 5])
def test_bad_names_are_clear_errors(bad):
    with pytest.raises(ValueError, match="list metric"):
        parse_name(bad)


def test_metrics_that_read_the_batch_differently_cannot_share_a_selection():
    with pytest.raises(ValueError, match="ties"):
        ListMetrics({"a": make_kernel("map@3"), "b": make_kernel("ndcg@3", ties="random")})
    with pytest.raises(ValueError, match="repeat"):
        ListMetrics(["map@3", "map@3"])


def test_a_saved_collection_state_loads_only_into_the_same_collection():
    s, y, m, w = _data(5, 4, 6)
    src = State(ListMetrics(["ndcg@3", "map@2"])).update(s, y, m, w)
    dst = State(ListMetrics(["ndcg@3", "map@2"]))
    dst.load_state_dict(src.state_dict())
    assert dst.compute() == src.compute()
    with pytest.raises(ValueError, match="does not fit"):
        State(ListMetrics(["ndcg@3", "map@3"])).load_state_dict(src.state_dict())
