"""The peer map (docs/conventions.md; its scikit-learn row also in the README), row by row
where a peer gives the number: scikit-learn's ``ndcg_score`` and torchmetrics'
``RetrievalNormalizedDCG`` and ``RetrievalMAP(top_k=None)`` are reproduced by the rankstream
class and arguments the table names (tie-free scores: both peers treat ties in their own way)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from sklearn.metrics import ndcg_score
from torchmetrics.retrieval import RetrievalMAP, RetrievalNormalizedDCG

from rankstream.ignite import MAP, NDCG


def _case(seed: int, b: int = 12, n: int = 15):
    rng = np.random.default_rng(seed)
    s = (rng.permutation(b * n).reshape(b, n) + 1.0) / (b * n)  # positive, no ties
    y = ((rng.random((b, n)) < 0.3) * rng.integers(1, 4, size=(b, n))).astype(np.float64)
    y[0] = 0.0  # a list without a relevant item
    return s, y


def _run(metric, s, y):
    ev = Engine(lambda engine, batch: batch)
    metric.attach(ev, "m")
    return ev.run(
        [
            (torch.from_numpy(s[:5]), torch.from_numpy(y[:5])),
            (torch.from_numpy(s[5:]), torch.from_numpy(y[5:])),
        ]
    ).metrics["m"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [3, 15])
def test_sklearn_and_torchmetrics_ndcg(seed, k):
    s, y = _case(seed)
    ours = _run(
        NDCG(top_k=[k], gain_function="linear_rank", relevance_threshold=None, ignore_zero_hits=False), s, y
    )
    assert ours[0] == pytest.approx(ndcg_score(y, s, k=k), rel=1e-9)
    tm = RetrievalNormalizedDCG(top_k=k)
    idx = torch.arange(s.shape[0])[:, None].expand(s.shape)
    value = tm(torch.from_numpy(s).flatten(), torch.from_numpy(y).flatten(), indexes=idx.flatten())
    assert ours[0] == pytest.approx(float(value), rel=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_torchmetrics_map_over_whole_lists(seed):
    s, y = _case(seed)
    n = s.shape[1]
    ours = _run(MAP(top_k=[n], denominator="all", ignore_zero_hits=False), s, y)
    tm = RetrievalMAP(top_k=None)
    idx = torch.arange(s.shape[0])[:, None].expand(s.shape)
    value = tm(torch.from_numpy(s).flatten(), torch.from_numpy(y > 0).flatten(), indexes=idx.flatten())
    assert ours[0] == pytest.approx(float(value), rel=1e-6)
