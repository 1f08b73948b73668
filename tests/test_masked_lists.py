"""A list whose items are all masked is not a list: no list metric, no collection and no empty
policy counts it, and its weight enters no sum (as a list that was never in the batch). Values
from the naive references (tests/reference.py) on the lists that have an item, and from
enumeration on tiny cases; through an Ignite ``Engine``, the core ``State`` and the functions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream import State, recall_at_k
from rankstream.core.backends import read_back
from rankstream.core.lists.collection import make_kernel
from rankstream.ignite import DCG, MAP, MRR, NDCG, HitRate, ListMetrics, Precision, Recall, RPrecision

import reference as R

pytestmark = pytest.mark.usefixtures("list_path")

CLASSES = {
    "map": (lambda e: MAP(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.average_precision, {}),
    "ndcg": (lambda e: NDCG(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.ndcg, {}),
    "dcg": (lambda e: DCG(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.dcg, {"threshold": 1.0}),
    "precision": (lambda e: Precision(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.precision, {}),
    "recall": (lambda e: Recall(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.recall, {}),
    "hit_rate": (lambda e: HitRate(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.hit_rate, {}),
    "mrr": (lambda e: MRR(top_k=[2, 4], ignore_zero_hits=e == "skip"), R.reciprocal_rank, {}),
    "r_precision": (lambda e: RPrecision(ignore_zero_hits=e == "skip"), R.r_precision, {}),
}


def _run(metric, batches, name="m"):
    ev = Engine(lambda engine, batch: batch)
    metric.attach(ev, name)
    return ev.run(batches).metrics


def test_the_reported_case_recall_at_2():
    """One perfect list and one fully masked list: Recall@2 is 1.0 (was 0.5 in Ignite)."""
    y_pred = torch.tensor([[0.9, 0.8, 0.1], [0.3, 0.2, 0.1]])
    y = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [False, False, False]])
    got = _run(Recall(top_k=2, ignore_zero_hits=False), [(y_pred, y, {"mask": mask})])["m"]
    assert got == [1.0]


def _batches(seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in (5, 4):
        s = torch.randint(0, 5, (b, 6), generator=g).double()
        y = torch.randint(0, 4, (b, 6), generator=g).double() * (torch.rand(b, 6, generator=g) < 0.5)
        m = torch.rand(b, 6, generator=g) < 0.7
        m[1] = False  # fully masked, with relevant labels under the mask
        y[1, :2] = 2.0
        m[3, :] = False
        w = torch.tensor([0.5, 1.0, 2.0, 1.5, 3.0][:b], dtype=torch.float64)
        out.append((s, y, {"mask": m, "sample_weight": w}))
    return out


def _expected(ref, batches, k, empty, kw):
    rows = [(s.tolist(), y.tolist(), x["mask"].tolist(), x["sample_weight"].tolist()) for s, y, x in batches]
    scores = [r for part in rows for r in part[0]]
    labels = [r for part in rows for r in part[1]]
    masks = [r for part in rows for r in part[2]]
    weights = [r for part in rows for r in part[3]]
    kept = [i for i, m in enumerate(masks) if any(m)]  # the lists that have an item
    assert len(kept) < len(masks)
    return R.mean_over_lists(
        ref,
        [scores[i] for i in kept],
        [labels[i] for i in kept],
        k,
        masks=[masks[i] for i in kept],
        weights=[weights[i] for i in kept],
        empty=empty,
        **kw,
    )


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("empty", ["skip", "zero"])
@pytest.mark.parametrize("seed", range(3))
def test_every_list_metric_drops_fully_masked_lists(name, empty, seed):
    make, ref, kw = CLASSES[name]
    batches = _batches(seed)
    got = _run(make(empty), batches)["m"]
    got = got if isinstance(got, list) else [got]
    ks = [None] if name == "r_precision" else [2, 4]
    want = [_expected(ref, batches, k, empty, kw) for k in ks]
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("empty", ["skip", "zero"])
def test_list_metrics_collection_drops_them_too(empty):
    batches = _batches(7)
    names = ["map@2", "ndcg@4", "dcg@2", "precision@2", "recall@4", "hit_rate@2", "mrr@4", "r_precision"]
    got = _run(ListMetrics(names, ignore_zero_hits=empty == "skip"), batches, "lists")
    for metric in names:
        base, k = metric.split("@") if "@" in metric else (metric, None)
        _, ref, kw = CLASSES[base]
        want = _expected(ref, batches, None if k is None else int(k), empty, kw)
        assert got[metric] == pytest.approx(want, rel=1e-12), metric


@pytest.mark.parametrize("empty", ["skip", "zero"])
def test_weights_of_fully_masked_lists_are_not_counted(empty):
    """A fully masked list with a huge weight changes nothing, and only fully masked lists
    give nothing to compute (where values are read back and where they are not)."""
    s = torch.tensor([[0.9, 0.1, 0.5], [0.3, 0.2, 0.1]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    m = torch.tensor([[True, True, True], [False, False, False]])
    for reads in (True, False):
        with read_back(reads):
            kernel = make_kernel("precision@2", empty=empty)
            st = State(kernel).update(s, y, m, torch.tensor([1.0, 1e6], dtype=torch.float64))
            assert st.compute() == [0.5]
            assert float(st.sums["weight_sum"]) == 1.0
            assert float(st.sums["count"]) == 1.0
            only_masked = State(kernel).update(s[1:], y[1:], m[1:])
            with pytest.raises(Exception, match="usable list"):
                only_masked.compute()


def test_functional_form_reports_them_as_not_counted():
    s = np.array([[0.9, 0.1], [0.3, 0.2]])
    y = np.array([[1.0, 0.0], [1.0, 0.0]])
    m = np.array([[True, True], [False, False]])
    values, counted = recall_at_k(s, y, 1, mask=m, empty="zero", return_counted=True)
    assert values.tolist() == [1.0, 0.0]
    assert counted.tolist() == [True, False]
