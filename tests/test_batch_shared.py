"""The per-batch data the list metrics share (``BatchShared``): each field computed at most once
per batch, named (an unknown name raises), and nothing carried between batches that changes a
number: nDCG with ``chance=True`` keeps in the instance's workspace whether its last batch had
every list's top ``K`` labels equal (``chance_gains._closed_flag``), which only picks how the
next batch's ideal ranking is found; a batch's sums after any earlier batch equal those of a
fresh instance (checked against a naive nDCG reference too)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rankstream.core.backends import Context, Workspace
from rankstream.core.lists.ndcg import NDCGKernel
from rankstream.core.lists.shared import BatchShared

import reference as ref


def test_a_field_is_made_once_per_batch_and_an_unknown_name_raises():
    shared, calls = BatchShared(), []
    make = lambda: calls.append(1) or np.ones(2)  # noqa: E731
    first = shared.once("relevant", make, 1.0)
    assert shared.once("relevant", make, 1.0) is first and len(calls) == 1
    shared.once("relevant", make, 2.0)  # another threshold: another value
    assert len(calls) == 2
    assert shared.once("list_sizes", make) is shared.once("list_sizes", make) and len(calls) == 3
    with pytest.raises(ValueError, match="no field 'relevnt'"):
        shared.once("relevnt", make)


CLOSED = np.array([[3.0, 3.0, 1.0, 0.0, 2.0], [2.0, 0.0, 2.0, 2.0, 1.0]])  # >= 2 items of the top label
OPEN = np.array([[3.0, 1.0, 0.0, 0.0, 2.0], [2.0, 2.0, 1.0, 0.0, 0.0]])  # row 0: one item of label 3


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("before", [CLOSED, OPEN])
@pytest.mark.parametrize("batch", [CLOSED, OPEN])
def test_a_batch_sums_the_same_after_any_earlier_batch(backend, before, batch):
    rng = np.random.default_rng(0)
    kernel = NDCGKernel([1, 2], chance=True, relevance_threshold=1.0)
    arrays = (lambda a: torch.as_tensor(a)) if backend == "torch" else (lambda a: a)
    scores = rng.permutation(10).reshape(2, 5).astype(np.float64)
    ws = Workspace()
    kernel.batch_sums(Context.of(arrays(scores), workspace=ws), arrays(scores), arrays(before))
    learnt = kernel.batch_sums(Context.of(arrays(scores), workspace=ws), arrays(scores), arrays(batch))
    fresh = kernel.batch_sums(None, arrays(scores), arrays(batch))
    for name, value in fresh.items():
        np.testing.assert_allclose(np.asarray(learnt[name]), np.asarray(value), rtol=0, atol=1e-12)
    want = [sum(ref.ndcg(s, y, k) for s, y in zip(scores, batch, strict=True)) for k in (1, 2)]
    np.testing.assert_allclose(np.asarray(learnt["value_sum"]), want, atol=1e-9)
