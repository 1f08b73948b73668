"""A list kernel reporting a second quantity: a subclass of a real kernel adds a state field
(``value_sq_sum``, the sum of the squared per-list values) and a reported quantity (``stderr``,
the standard error of the mean over the lists) by overriding ``list_fields``, ``quantities``
and ``compute`` only. Checked against numpy's sample standard deviation of the per-list values
of the naive reference, through ``State`` (update and merge) and the core ``ListMetrics``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toy_kernels import MAPWithStderr

from rankstream import ListMetrics, MAPKernel, NDCGKernel, State, merge
from rankstream.core.lists.base import ListField, ListOutput

import reference as ref

KS = [1, 3, 5]


def batches(seed: int = 0, n_batches: int = 3, b: int = 9, n: int = 8):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        scores = rng.normal(size=(b, n))  # continuous: no ties
        labels = rng.integers(0, 3, size=(b, n)).astype(float) * (rng.random((b, n)) < 0.4)
        labels[0] = 0.0  # a list without a relevant item: skipped
        out.append((scores, labels))
    return out


def reference_lists(data, k: int) -> np.ndarray:
    """AP@k of every list holding a relevant item, one list at a time."""
    lists = [(s, y) for scores, labels in data for s, y in zip(scores, labels, strict=True)]
    values = [ref.average_precision(s, y, k) for s, y in lists]
    return np.array([v for v in values if v is not None])


def expected(data) -> tuple[list[float], list[float]]:
    per_k = [reference_lists(data, k) for k in KS]
    return [v.mean() for v in per_k], [v.std(ddof=1) / np.sqrt(v.size) for v in per_k]


@pytest.mark.parametrize("as_torch", [False, True])
def test_state_update_and_merge_report_value_and_stderr(as_torch):
    data = batches()
    convert = (lambda a: torch.from_numpy(a)) if as_torch else (lambda a: a)
    kernel = MAPWithStderr(KS)
    assert kernel.fields == {
        "value_sum": (3,),
        "value_sq_sum": (3,),
        "weight_sum": (),
        "count": (),
        "invalid": (),
    }
    shards = []
    for scores, labels in data:  # one state per batch, merged
        shards.append(State(kernel).update(convert(scores), convert(labels)))
    whole = State(kernel)
    for scores, labels in data:
        whole.update(convert(scores), convert(labels))
    parent = State(MAPKernel(KS))
    for scores, labels in data:
        parent.update(convert(scores), convert(labels))

    value, stderr = expected(data)
    for result in (merge(*shards).compute(), whole.compute()):
        assert set(result) == {"value", "stderr"}
        assert result["value"] == parent.compute()  # the parent's numbers, unchanged
        np.testing.assert_allclose(result["value"], value, rtol=1e-12)
        np.testing.assert_allclose(result["stderr"], stderr, rtol=1e-10)


def test_parent_kernel_reports_its_value_alone():
    data = batches(seed=1)
    st = State(MAPKernel(KS))
    for scores, labels in data:
        st.update(scores, labels)
    result = st.compute()
    assert isinstance(result, list)
    np.testing.assert_allclose(result, expected(data)[0], rtol=1e-12)


def test_collection_flattens_member_quantities():
    data = batches(seed=2)
    metrics = ListMetrics({"map@5": MAPWithStderr(5), "ndcg@3": NDCGKernel(3)})
    assert metrics.reported == ["map@5", "map@5_stderr", "ndcg@3"]
    st = State(metrics)
    for scores, labels in data:
        st.update(scores, labels)
    result = st.compute()
    assert list(result) == ["map@5", "map@5_stderr", "ndcg@3"]

    ap = reference_lists(data, 5)
    assert result["map@5"] == pytest.approx(ap.mean(), rel=1e-12)
    assert result["map@5_stderr"] == pytest.approx(ap.std(ddof=1) / np.sqrt(ap.size), rel=1e-10)
    scores = [s for sc, _ in data for s in sc]
    labels = [y for _, lab in data for y in lab]
    assert result["ndcg@3"] == pytest.approx(ref.mean_over_lists(ref.ndcg, scores, labels, 3), rel=1e-12)


def test_collection_refuses_a_name_taken_by_a_quantity():
    with pytest.raises(ValueError, match="must not name another's quantity"):
        ListMetrics({"map": MAPWithStderr(5), "map_stderr": MAPKernel(3)})


def ones(out: ListOutput):
    return out.values[:, 0] * 0.0 + 1.0


class WeightPowers(MAPKernel):
    """MAP@k with the sums of w^0, w^1 and w^2 over the counted lists as extra fields."""

    def list_fields(self) -> dict[str, ListField]:
        extra = {f"w{p}": ListField((), ones, power=p) for p in (0, 1, 2)}
        return {**super().list_fields(), **extra}


def test_list_fields_weigh_their_terms_by_the_declared_power():
    scores, labels = batches(seed=3, n_batches=1)[0]
    w = np.random.default_rng(4).uniform(0.1, 3.0, size=len(scores))
    st = State(WeightPowers(3)).update(scores, labels, sample_weight=w)
    counted = labels.sum(axis=1) > 0
    for p in (0, 1, 2):
        assert st.sums[f"w{p}"] == pytest.approx(np.sum(w[counted] ** p), rel=1e-12)
    assert st.sums["weight_sum"] == pytest.approx(np.sum(w[counted]), rel=1e-12)
    assert st.compute() == State(MAPKernel(3)).update(scores, labels, sample_weight=w).compute()
