"""rankstream.ignite.CatalogMetrics through an ignite Engine against rankstream.ignite.ListMetrics
(the dense path, itself checked against the peers) on the materialised (queries, items) score
matrix with each query's excluded items masked; quantised embeddings (exact ties and arithmetic).
Its idist SUM over 2 and 3 gloo processes is checked in tests/test_catalog_distributed.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream.ignite import CatalogMetrics, ListMetrics

pytestmark = pytest.mark.filterwarnings("ignore::rankstream.SwappedInputsWarning")

NAMES = ["ndcg@10", "recall@20", "mrr", "map@5", "precision@3", "hit_rate@10", "auc"]


def data(seed=3, n=90, batches=(5, 1, 7)):
    rng = np.random.default_rng(seed)
    items = torch.from_numpy(rng.integers(-2, 3, (n, 3)).astype(np.float32))
    out = []
    for q in batches:
        queries = torch.from_numpy(rng.integers(-2, 3, (q, 3)).astype(np.float32))
        relevant = [rng.choice(n, rng.integers(0, 5), replace=False) for _ in range(q)]
        exclude = [np.setdiff1d(rng.choice(n, 12), r) for r in relevant]
        out.append((queries, relevant, exclude))
    return items, out


def dense_batches(items, batches):
    """(scores, labels, {"mask"}) of each batch: the materialised matrix."""
    for queries, relevant, exclude in batches:
        scores = queries.double() @ items.double().T
        labels = torch.zeros(scores.shape, dtype=torch.float64)
        mask = torch.ones(scores.shape, dtype=torch.bool)
        for i, (r, e) in enumerate(zip(relevant, exclude, strict=True)):
            labels[i, torch.from_numpy(r)] = 1.0
            mask[i, torch.from_numpy(e)] = False
        yield scores, labels, {"mask": mask}


def run(metric, data):
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "m")
    return engine.run(data).metrics


@pytest.mark.parametrize("ties", ["first", "expected"])
def test_engine_equals_dense_list_metrics(ties):
    items, batches = data()
    outputs = [(q, r, {"exclude": e}) for q, r, e in batches]
    got = run(CatalogMetrics(NAMES, items, chunk_size=7, ties=ties, confidence=0.9), outputs)
    want = run(ListMetrics(NAMES, ties=ties, confidence=0.9), list(dense_batches(items, batches)))
    assert set(got) == set(want)
    for key in want:
        if key == "m":
            continue
        assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-7), key


def test_output_forms_callable_scorer_and_errors():
    items, batches = data(seed=4, batches=(6,))
    queries, relevant, exclude = batches[0]
    want = run(ListMetrics(NAMES), list(dense_batches(items, batches)))
    score = lambda qs, ids: qs @ items[ids].T  # noqa: E731
    mapping = [{"queries": queries, "relevant": relevant, "exclude": exclude}]
    got = run(CatalogMetrics(NAMES, score=score, num_items=90, chunk_size=11), mapping)
    assert got["mrr"] == pytest.approx(want["mrr"]) and got["ndcg@10"] == pytest.approx(want["ndcg@10"])
    weighted = CatalogMetrics(
        ["mrr"], items, output_transform=lambda o: (o[0], o[1], {"sample_weight": o[2]})
    )
    weights = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    keep = [(queries[:1], relevant[:1], [np.array([], np.int64)])]
    alone = run(ListMetrics(["mrr"]), list(dense_batches(items, keep)))
    assert len(relevant[0]) > 0  # the one weighted query has a relevant item (seed 4)
    assert run(weighted, [(queries, relevant, weights)])["mrr"] == pytest.approx(alone["mrr"])

    m = CatalogMetrics(NAMES, items)
    m.update((queries, relevant))
    before = m.state_sums()
    for bad, match in [
        ((queries, [[1, 90]] * 6), "out of range"),
        ((queries, relevant, {"exclude": [r[:1] for r in relevant]}), "exclude"),
        ({"queries": queries}, "keys"),
        ((queries, relevant, {"mask": None}), "third element"),
    ]:
        with pytest.raises(ValueError, match=match):
            m.update(bad)
        assert all(np.array_equal(before[k], v) for k, v in m.state_sums().items())
    m.update((queries[:0], []))  # an empty batch: a no-op
    assert all(np.array_equal(before[k], v) for k, v in m.state_sums().items())
