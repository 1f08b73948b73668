"""The accelerator path (no value read back in update), forced on CPU.

On a GPU, reading a value back in ``update`` would be a device sync, so rankstream ranks with
one exact stable top-k over packed int64 keys and counts bad lists into the state instead of
raising. ``rankstream.core.backends.read_back(False)`` runs that path here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankstream import MAPKernel, NDCGKernel, State
from rankstream.core.backends import read_back, torch_ops
from rankstream.ignite import MAP, NDCG

import reference as ref


@pytest.fixture
def no_read():
    with read_back(False):
        yield


def reference_order(scores, valid):
    order = []
    for b in range(scores.shape[0]):
        real = ref.ranked_items(scores[b].tolist(), None if valid is None else valid[b].tolist())
        rest = [i for i in range(scores.shape[1]) if i not in real]
        order.append(real + rest)
    return order


SPECIAL = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), 2.5, -2.5, 1e-30, -1e-30, 3.4e38, -3.4e38]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.integers(1, 5),
    n=st.integers(1, 9),
    seed=st.integers(0, 10**6),
    masked=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
)
def test_packed_topk_is_the_stable_order_with_masked_items_last(b, n, seed, masked, dtype):
    rng = np.random.default_rng(seed)
    scores = torch.tensor(rng.choice(SPECIAL, size=(b, n)), dtype=torch.float32).to(dtype)
    valid = torch.from_numpy(rng.random((b, n)) < 0.7) if masked else None
    k = int(rng.integers(1, n + 1))
    idx, nan_rows = torch_ops().topk_first(scores, k, valid)
    expected = reference_order(scores.float().numpy(), None if valid is None else valid.numpy())
    # Masked items come last in an unspecified order; compare the valid prefix exactly.
    for row in range(b):
        n_valid = n if valid is None else int(valid[row].sum())
        m = min(k, n_valid)
        assert idx[row, :m].tolist() == expected[row][:m]
        assert set(idx[row, m:k].tolist()) <= set(expected[row][n_valid:])
    assert not nan_rows.any()


def test_packed_topk_flags_nan_rows_only_when_the_nan_is_valid():
    s = torch.tensor([[0.3, float("nan"), 0.1], [0.3, float("nan"), 0.1], [0.3, 0.2, 0.1]])
    valid = torch.tensor([[True, True, True], [True, False, True], [True, True, True]])
    _, nan_rows = torch_ops().topk_first(s, 2, valid)
    assert nan_rows.tolist() == [True, False, False]


@st.composite
def data(draw):
    b, n = draw(st.integers(1, 8)), draw(st.integers(1, 10))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    s = rng.integers(0, 4, size=(b, n)).astype(np.float32)
    y = rng.integers(0, 3, size=(b, n)).astype(np.float32)
    m = rng.random((b, n)) < 0.8
    w = rng.integers(0, 3, size=b).astype(np.float32)
    ks = sorted({draw(st.integers(1, n + 2)), draw(st.integers(1, n + 2))})
    return s, y, m, w, ks


@pytest.mark.parametrize("make", [lambda ks: MAPKernel(ks), lambda ks: NDCGKernel(ks, empty="zero")])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=data())
def test_no_read_path_gives_the_read_back_result(make, d):
    s, y, m, w, ks = d
    args = [torch.from_numpy(a) for a in (s, y, m, w)]
    normal = State(make(ks)).update(*args).sums
    with read_back(False):
        forced = State(make(ks)).update(*args).sums
    for name in normal:
        np.testing.assert_allclose(forced[name], normal[name], rtol=0, atol=1e-12)


def test_update_reads_nothing_back(no_read, monkeypatch):
    s = torch.randint(0, 3, (6, 9)).float()
    y = (torch.rand(6, 9) < 0.4).float()
    extra = {"mask": torch.rand(6, 9) < 0.8, "sample_weight": torch.rand(6)}
    metrics = [MAP(top_k=[1, 4]), NDCG(top_k=[2, 20]), MAP(top_k=3, ties="random", seed=1)]

    def forbidden(*a, **k):
        raise AssertionError("update read a value back to the host")

    with monkeypatch.context() as mp:
        for attr in ("item", "tolist", "__bool__", "numpy", "nonzero"):
            mp.setattr(torch.Tensor, attr, forbidden)
        for metric in metrics:
            metric.update((s, y, extra))
    for metric in metrics:
        assert len(metric.compute()) == len(metric.top_k)


def test_nan_scores_and_bad_weights_are_reported_by_compute(no_read):
    s = torch.tensor([[0.3, float("nan"), 0.1], [0.3, 0.2, 0.1]])
    y = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    m = MAP(top_k=2)
    m.update((s, y))  # does not raise: nothing is read back
    with pytest.raises(ValueError, match="1 list"):
        m.compute()
    w = MAP(top_k=2)
    w.update((s[1:], y[1:], {"sample_weight": torch.tensor([-1.0])}))
    with pytest.raises(ValueError, match="sample_weight"):
        w.compute()
    # A masked NaN is fine on this path too.
    ok = MAP(top_k=2)
    ok.update((s, y, {"mask": torch.tensor([[True, False, True], [True, True, True]])}))
    assert ok.compute() == [1.0]
