"""Small CPU torch batches computed on numpy views of their tensors (``TorchOps.host``, issue
12) give torch's own numbers (to float64 rounding: the libraries may sum in another order), the
same random tie order batch after batch, the same errors, and torch tensors back; the views are
taken only where they can be. The reference is the torch path of the same code
(``host_batches(False)``), itself checked against the peers and naive references by the suites
that run on both paths.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankstream.core.backends import host_batches, torch_ops
from rankstream.core.backends.torch import TorchHostOps
from rankstream.core.lists import MAPKernel, NDCGKernel
from rankstream.core.lists.collection import ListMetrics as ListMetricsKernel
from rankstream.core.lists.collection import make_kernel
from rankstream.core.sizes import SIZES
from rankstream.ignite import NDCG


def _data(b: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 4, (b, n), generator=g).float()  # exact ties
    return s, torch.randint(0, 4, (b, n), generator=g).float()


LIST_NAMES = ["ndcg@4", "map@3", "dcg@5", "precision@2", "recall@3", "hit_rate@1", "mrr@4", "r_precision"]


def _close(host: dict, device: dict) -> None:
    assert host.keys() == device.keys()
    for key in host:
        assert isinstance(host[key], torch.Tensor), key  # torch in, torch out
        got, want = host[key].numpy(), device[key].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=key)


@st.composite
def _list_case(draw):
    b, n = draw(st.integers(1, 7)), draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 4, (b, n), generator=g).float()  # exact ties everywhere
    y = torch.randint(-1, 4, (b, n), generator=g).float() * (torch.rand(b, n, generator=g) < 0.5)
    keras_rs = draw(st.booleans())
    conventions = {
        "ties": draw(st.sampled_from(["first", "random"])),
        "seed": seed,
        "empty": draw(st.sampled_from(["skip", "zero"])),
    }
    if keras_rs:
        conventions.update(weighting="keras_rs", negative_labels="mask")
    mask = torch.rand(b, n, generator=g) < 0.8 if draw(st.booleans()) else None
    weight = None
    kind = draw(st.sampled_from(["none", "list", "item" if keras_rs else "none"]))
    if kind == "list":
        weight = torch.rand(b, generator=g, dtype=torch.float64) * 2
    elif kind == "item":
        weight = torch.rand(b, n, generator=g) * 2
    names = draw(st.lists(st.sampled_from(LIST_NAMES), min_size=1, max_size=3, unique=True))
    return s, y, mask, weight, conventions, names


@given(case=_list_case())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_host_batches_give_torchs_numbers(case):
    """Every list kernel (alone and in a collection) on the numpy views and on torch: the same
    sums, batch after batch from one runtime (so random ties draw the same stream)."""
    s, y, mask, weight, conventions, names = case
    kernels = [make_kernel(name, **conventions) for name in names]
    kernels.append(ListMetricsKernel(names, **conventions))
    batches = [(s, y, mask, weight), (s.flip(1), y.flip(1), mask, weight)]
    for kernel in kernels:
        out = {}
        for host in (True, False):
            runtime, sums = kernel.runtime(), []
            with host_batches(host):
                for batch in batches:
                    sums.append(kernel.batch_sums(runtime.context(s, torch_ops()), *batch))
            out[host] = sums
        for a, b in zip(out[True], out[False], strict=True):
            _close(a, b)


def test_host_batches_per_list_values_are_torch():
    s, y = _data(5, 9, 3)
    kernel = NDCGKernel(4, ties="random", seed=1)
    with host_batches(True):
        host = kernel.per_list(s, y)
    with host_batches(False):
        device = kernel.per_list(s, y)
    for a, b in zip(host, device, strict=True):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_host_batches_are_taken_only_where_they_can_be():
    ops = torch_ops()
    s, y = _data(4, 6, 0)
    s = s + torch.rand(4, 6, dtype=torch.float32)
    assert isinstance(ops.host((s, y, None, None)), TorchHostOps)
    assert isinstance(ops.host((s, y, s > 0, 2.0)), TorchHostOps)
    assert isinstance(ops.host((s.requires_grad_(), y, None, None)), TorchHostOps)
    big = torch.zeros(1, SIZES.host + 1)
    not_host = [
        (big, big, None, None),  # large: torch's threads win
        (s.bfloat16(), y, None, None),  # no numpy dtype
        (s, y.bfloat16(), None, None),
        (s, y.to_sparse(), None, None),
        (s, y, None, [1.0, 2.0, 3.0, 4.0]),  # a python list: converted as the torch path does
        (torch.zeros(4, 6, device="meta"), y, None, None),
    ]
    for arrays in not_host:
        assert ops.host(arrays) is ops
    with host_batches(False):
        assert ops.host((s, y, None, None)) is ops
    # a metric computes through them and hands torch tensors back
    metric = NDCG(top_k=3)
    metric.update((s.detach(), y))
    assert isinstance(metric._sums, torch.Tensor) and metric._sums.dtype == torch.float64


@pytest.mark.filterwarnings("ignore:y_pred has dtype int64")
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int64])
def test_host_batches_take_other_dtypes(dtype):
    s, y = _data(6, 8, 4)
    s = (s * 4).round().to(dtype)
    for kernel in (NDCGKernel([1, 3]), MAPKernel(3, ties="random", seed=2)):
        with host_batches(True):
            host = kernel.batch_sums(None, s, y.to(torch.int64))
        with host_batches(False):
            device = kernel.batch_sums(None, s, y.to(torch.int64))
        _close(host, device)


def test_user_callables_get_the_callers_tensors():
    """A gain or discount written with torch functions works on the numpy views too."""
    seen = []

    def gain(y):
        seen.append(type(y))
        return torch.pow(2.0, y) - 1.0

    def discount(rank):
        seen.append(type(rank))
        return 1.0 / torch.log2(rank + 1.0)

    s, y = _data(5, 9, 1)
    out = {}
    for host in (True, False):
        kernel = NDCGKernel([2, 4], gain=gain, discount=discount, ties="random", seed=4)
        with host_batches(host):
            out[host] = kernel.batch_sums(None, s, y)
    _close(out[True], out[False])
    assert seen and all(t is torch.Tensor for t in seen)
