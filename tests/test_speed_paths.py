"""The fast paths of issue 12 give exactly what the general paths give (no timing here).

* the nDCG stacked path (ranking's and ideal labels through the gains together) vs the general
  path, element for element (to float64 rounding: a matrix product may sum in another order);
* ranking: rows whose ties are all between items of equal label and membership are not
  re-ranked, with the same numbers and the same random stream as re-ranking every tied row;
* the value checks read back with the ranking's tie check still raise as before;
* the torch counting pass (small inputs: plain ops; large: a float buffer) counts exactly;
* ``ravel_concat`` joins the state fields as ``join_flat`` did;
* the ideal ranking of whole lists cut after its last nonzero column gives the whole one's nDCG.

Each test runs on both paths of a CPU torch batch (``tests/test_host_path.py`` compares them).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import rankstream.core.sizes as sizes
import rankstream.core.topk as ranking
from rankstream.core.backends import Workspace, numpy_ops, torch_ops
from rankstream.core.lists import DCGKernel, MAPKernel, NDCGKernel, PrecisionKernel
from rankstream.ignite import MAP, NDCG, ListMetrics

# the fast paths below on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")


def _sums(kernel, s, y, mask=None, weight=None):
    return kernel.batch_sums(None, s, y, mask, weight)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(
            np.asarray(a[key]), np.asarray(b[key]), rtol=1e-13, atol=1e-13, err_msg=key
        )


def _data(b: int, n: int, seed: int, tied: bool = False):
    """Scores and graded labels; ``tied``: in every row one tie among items of equal label (at a
    place that varies with the row) and, in every third row, one among items of different labels."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(b, n, generator=g)
    y = (torch.rand(b, n, generator=g) < 0.3).float() * torch.randint(1, 4, (b, n), generator=g).float()
    if tied:
        for row in range(b):
            order = torch.argsort(s[row], descending=True)
            same = [int(i) for i in order if y[row, i] == y[row, order[row % n]]][:3]
            s[row, same] = float(s[row, same[0]])
            if row % 3 == 0:
                s[row, order[(row + 1) % n]] = float(s[row, order[(row + 2) % n]])
    return s, y


@pytest.mark.parametrize("top_k", [3, [1, 4, 7], 50])
@pytest.mark.parametrize("threshold", [None, 1.0, 2.0])
@pytest.mark.parametrize("gain", ["exp_rank", "linear_rank"])
@pytest.mark.parametrize("size", [(17, 30), (701, 60)])
def test_stacked_ndcg_is_the_general_path(monkeypatch, top_k, threshold, gain, size):
    s, y = _data(*size, 1)
    y = y * torch.rand(y.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y[3] = 0.0  # a list without relevance; the others real-valued labels (powers not exact)
    kernel = NDCGKernel(top_k, gain=gain, relevance_threshold=threshold)
    fast = _sums(kernel, s, y)
    monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, ndcg_stacked=-1))
    # a matrix product over (2B, K) or (B, K) may sum in another order (BLAS): float64 rounding
    _close(fast, _sums(kernel, s, y))


@pytest.mark.parametrize("ties", ["first", "random"])
@pytest.mark.parametrize("k", [1, 3, 29, 30, 40])
@pytest.mark.parametrize("masked", [False, True])
def test_ties_between_equal_labels_are_not_reranked(monkeypatch, ties, k, masked):
    """Same sums, batch after batch (so the random stream is the same too), as re-ranking
    every row that shows a tie."""
    kernels = [NDCGKernel(k, ties=ties, seed=3), MAPKernel(k, ties=ties, seed=3)]
    kernels += [PrecisionKernel(k, ties=ties, seed=3), DCGKernel(k, ties=ties, seed=3)]
    batches = []
    for seed in range(4):
        s, y = _data(9, 30, seed, tied=True)
        mask = torch.rand(9, 30, generator=torch.Generator().manual_seed(seed)) > 0.2 if masked else None
        batches.append((s, y, mask))

    def run() -> list[dict]:
        out = []
        for kernel in kernels:
            runtime = kernel.runtime()
            for s, y, mask in batches:
                out.append(kernel.batch_sums(runtime.context(s, torch_ops()), s, y, mask))
        return out

    fast = run()
    monkeypatch.setattr(ranking, "_ties_matter", lambda ops, eq, idx, labels, valid, end: ops.any(eq, axis=1))
    for a, b in zip(fast, run(), strict=True):
        _same(a, b)


def test_collection_with_ties_matches_its_metrics():
    s, y = _data(12, 25, 5, tied=True)
    both = ListMetrics(["ndcg@5", "map@5"])
    ndcg, map_ = NDCG(top_k=5), MAP(top_k=5)
    for metric in (both, ndcg, map_):
        metric.update((s, y))
    assert both.compute() == {"ndcg@5": ndcg.compute()[0], "map@5": map_.compute()[0]}


@pytest.mark.parametrize("tied", [False, True])
def test_value_checks_still_raise_with_one_read(tied):
    s, y = _data(6, 20, 2, tied=tied)
    metric = NDCG(top_k=5)
    metric.update((s, y))
    before = metric.state_sums()
    for bad_y in (float("nan"), float("inf"), float("-inf")):
        y_bad = y.clone()
        y_bad[2, 7] = bad_y
        with pytest.raises(ValueError, match="finite labels"):
            metric.update((s, y_bad))
    with pytest.raises(ValueError, match="sample_weight must be finite and non-negative"):
        metric.update((s, y, {"sample_weight": torch.tensor([1.0, -1.0, 1, 1, 1, 1])}))
    s_bad = s.clone()
    s_bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN scores"):
        metric.update((s_bad, y))
    _same(before, metric.state_sums())


@pytest.mark.parametrize("shape", [(7, 30), (300, 400)])  # plain ops / the float buffer
@pytest.mark.parametrize("strict,t", [(True, 0.0), (True, 1.5), (False, 1.0), (False, 2.0)])
def test_count_relevant_counts_exactly(shape, strict, t):
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(-1, 4, shape, generator=g).float()
    valid = torch.rand(shape, generator=g) > 0.3
    ws = Workspace()
    for mask in (None, valid):
        got = torch_ops().count_relevant(labels, t, strict, mask, torch.float64, ws)
        rel = labels > t if strict else labels >= t
        if mask is not None:
            rel = rel & mask
        assert torch.equal(got, rel.sum(dim=1).to(torch.float64))


def test_ravel_concat_joins_fields():
    parts = [np.array([1.0, 2.0]), np.array(3.0), np.array([[4.0, 5.0]]), np.array(6.0)]
    expected = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(numpy_ops().ravel_concat(parts), expected)
    got = torch_ops().ravel_concat([torch.as_tensor(p) for p in parts])
    assert torch.equal(got, torch.as_tensor(expected))
    got = torch_ops().ravel_concat([torch.as_tensor(p) for p in parts if p.ndim <= 1])
    assert torch.equal(got, torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64))


@pytest.mark.parametrize("top_k", [1500, 1200, [5, 1100, 1500]])
@pytest.mark.parametrize("threshold", [None, 1.0])
@pytest.mark.parametrize("case", ["sparse", "negative", "masked", "dense_row", "no_relevance"])
def test_ideal_prefix_is_the_whole_ideal(monkeypatch, top_k, threshold, case):
    """Whole lists: the ideal ranking cut after its last nonzero column gives the numbers of
    the whole ideal ranking (labels kept negative too: their gains are not 0)."""
    g = torch.Generator().manual_seed(7)
    b, n = 6, 1500
    s = torch.randn(b, n, generator=g)
    y = (torch.rand(b, n, generator=g) < 0.01).float() * torch.randint(1, 4, (b, n), generator=g).float()
    mask = None
    if case == "negative":
        y[2, :40] = -1.0
    elif case == "masked":
        mask = torch.rand(b, n, generator=g) > 0.3
    elif case == "dense_row":
        y[4] = torch.randint(1, 3, (n,), generator=g).float()
    elif case == "no_relevance":
        y.zero_()
    kernel = NDCGKernel(top_k, relevance_threshold=threshold, empty="zero")
    fast = _sums(kernel, s, y, mask)
    monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, ideal_prefix_from=10**9))
    _close(fast, _sums(kernel, s, y, mask))
