"""Flat items with a query id per item (``indexes``) through an Ignite ``Engine``: each batch
holds whole queries, in any item order; the metrics equal the same metrics run on the lists
padded one query at a time here (items in their order of arrival, a mask on the padding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream.ignite import MAP, NDCG, ListMetrics, MeanReciprocalRank, RankBasedMetrics


def flat_batches(seed: int, queries: int = 40, per_batch: int = 7):
    """Ragged queries (3 to 25 items), graded labels, continuous scores; batches of whole
    queries, the items of a batch shuffled (ids in no order)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 26, size=queries)
    out = []
    for start in range(0, queries, per_batch):
        ids = np.concatenate([np.full(n, q) for q, n in enumerate(lengths[start : start + per_batch], start)])
        n = len(ids)
        scores = rng.normal(size=n)
        labels = rng.integers(0, 4, size=n).astype(np.float64) * (rng.random(n) < 0.3)
        perm = rng.permutation(n)
        out.append((scores[perm], labels[perm], ids[perm]))
    return out


def padded(batch):
    """The batch's queries as padded lists, one query at a time (ids in increasing order, items
    in their order of arrival)."""
    scores, labels, ids = batch
    queries = sorted(set(ids.tolist()))
    width = max(int((ids == q).sum()) for q in queries)
    s = np.zeros((len(queries), width))
    y = np.zeros((len(queries), width))
    m = np.zeros((len(queries), width), dtype=bool)
    for row, q in enumerate(queries):
        items = np.flatnonzero(ids == q)
        s[row, : len(items)], y[row, : len(items)], m[row, : len(items)] = scores[items], labels[items], True
    return torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}


def run(make, feed):
    engine = Engine(lambda e, b: b)
    make().attach(engine, "m")
    return engine.run(feed).metrics


def assert_same(got: dict, want: dict) -> None:
    """Every key of the engine's metrics (and of a mapping result) equal to 1e-12."""
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, dict):
            assert_same(got[key], value)
        else:
            np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=1e-14, err_msg=key)


MAKERS = {
    "NDCG": lambda: NDCG(top_k=[1, 5, 10]),
    "MAP": lambda: MAP(top_k=[3, 10]),
    "MRR": lambda: MeanReciprocalRank(top_k=[5]),
    "ListMetrics": lambda: ListMetrics(["ndcg@5", "recall@10", "precision@3", "hit_rate@1", "r_precision"]),
}


@pytest.mark.parametrize("form", ["tuple", "mapping"])
@pytest.mark.parametrize("name", list(MAKERS))
def test_flat_items_with_query_ids_equal_the_padded_lists(name: str, form: str) -> None:
    batches = flat_batches(seed=3)
    if form == "tuple":
        flat = [
            (torch.from_numpy(s), torch.from_numpy(y), {"indexes": torch.from_numpy(i)})
            for s, y, i in batches
        ]
    else:
        flat = [
            {"y_pred": torch.from_numpy(s), "y": torch.from_numpy(y), "indexes": torch.from_numpy(i)}
            for s, y, i in batches
        ]
    assert_same(run(MAKERS[name], flat), run(MAKERS[name], [padded(b) for b in batches]))


def test_rank_based_metrics_take_flat_binary_labels_with_query_ids() -> None:
    batches = [(s, (y > 0).astype(np.float64), i) for s, y, i in flat_batches(seed=4)]
    flat = [
        (torch.from_numpy(s), torch.from_numpy(y), {"indexes": torch.from_numpy(i)}) for s, y, i in batches
    ]
    make = lambda: RankBasedMetrics(ks=(1, 3))  # noqa: E731
    assert_same(run(make, flat), run(make, [padded(b) for b in batches]))


def test_query_ids_refuse_what_they_cannot_mean() -> None:
    s, y, i = (torch.from_numpy(a) for a in flat_batches(seed=5)[0])
    metric = NDCG(top_k=5)
    with pytest.raises(ValueError, match=r"with indexes .* no mask or sample_weight: got mask=given"):
        metric.update((s, y, {"indexes": i, "mask": torch.ones_like(s, dtype=torch.bool)}))
    with pytest.raises(
        ValueError, match=r"with indexes, y_pred must be flat items of shape \(num_items,\), got"
    ):
        metric.update((s[None, :], y[None, :], {"indexes": i}))
    with pytest.raises(ValueError, match="indexes"):
        metric.update((s, y, {"indexes": i[:-1]}))
    metric.update((s, y, {"indexes": i}))  # the failed updates left the state as it was
    want = NDCG(top_k=5)
    want.update(padded((s.numpy(), y.numpy(), i.numpy())))
    assert metric.compute() == pytest.approx(want.compute(), rel=1e-12)
