"""An empty batch (no list, no ranking task, no item) is a no-op for every public metric class.

Every input form a metric takes, with zero rows: index targets and binary or graded labels,
with and without a mask, with and without a ``sample_weight`` (per row or a scalar), lists of
0, 1 and several items, and flat items with query ids. Each leaves the state exactly as it was
(every field, bitwise, its dtype too), and a metric fed empty batches between real ones computes
the value of the same metric fed the real batches alone. The core's ``State``, the Ignite list
and rank classes, ``ListMetrics``, ``RankBasedMetrics`` and the torchmetrics adapter are here,
on both paths of a CPU torch batch and on the path that reads nothing back; the Keras classes
are in ``keras/backend_suite/test_keras_empty_batches.py``.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ignite.exceptions import NotComputableError

import rankstream
import rankstream.ignite as rignite
from rankstream import State
from rankstream.adapters.torchmetrics_metrics import CLASSES as TORCHMETRICS_CLASSES
from rankstream.core.backends import host_batches, read_back
from rankstream.core.lists.table import LIST_METRICS
from rankstream.core.ranks.kernel import RankKernel

SIZES = (0, 1, 2, 5)  # items per list of the empty batches
WEIGHTS = (None, "rows", "scalar")


@pytest.fixture(params=["host", "torch", "no-read"])
def path(request) -> Iterator[str]:
    """Both paths of a CPU torch batch, and the path of an accelerator (nothing read back)."""
    with host_batches(request.param == "host"), read_back(request.param != "no-read"):
        yield request.param


# -- the metrics ---------------------------------------------------------------------------

LIST_IGNITE: dict[str, Callable[[], Any]] = {
    name: (lambda cls=cls: cls()) for name, cls in rignite._lists.CLASSES.items()
}
LIST_IGNITE["MAP_random_ties"] = lambda: rignite.MAP(top_k=[1, 3], ties="random", seed=3)
LIST_IGNITE["NDCG_chance_confidence"] = lambda: rignite.NDCG(top_k=[2], chance=True, confidence=0.9)
LIST_IGNITE["ListMetrics"] = lambda: rignite.ListMetrics(["map@3", "ndcg@2", "auc", "r_precision"])
RANK_IGNITE: dict[str, Callable[[], Any]] = {
    name: (lambda cls=cls: cls()) for name, cls in rignite._ranks.CLASSES.items()
}
RANK_IGNITE["RankBasedMetrics"] = lambda: rignite.RankBasedMetrics(ks=[1])
RANK_IGNITE["RankBasedMetrics_every_type"] = lambda: rignite.RankBasedMetrics(
    ks=[1, 3], rank_type=("optimistic", "realistic", "pessimistic"), confidence=0.9
)
RANK_IGNITE["RankBasedMetrics_filtered"] = lambda: rignite.RankBasedMetrics(ks=[2], filtered_scores=True)
QUERY_IGNITE: dict[str, Callable[[], Any]] = {
    f"ListMetrics_{mode}": (lambda mode=mode: rignite.ListMetrics(["map@3", "ndcg@2"], query_mode=mode))
    for mode in ("whole", "sorted", "any")
}
QUERY_IGNITE["MAP_sorted"] = lambda: rignite.MAP(top_k=3, query_mode="sorted")
KERNELS: dict[str, Callable[[], Any]] = {row.kernel.__name__: row.kernel for row in LIST_METRICS}
RANK_KERNELS: dict[str, Callable[[], Any]] = {
    "RankKernel": lambda: RankKernel(ks=[1, 3]),
    "RankKernel_optimistic": lambda: RankKernel(ks=2, rank_type="optimistic", confidence=0.9),
}


# -- the empty batches ---------------------------------------------------------------------


def empty_list_batches(n: int) -> Iterator[tuple[Any, ...]]:
    """Every form of an empty batch of lists of ``n`` items: labels (float, int or bool), with
    or without a mask and a sample weight."""
    for labels, masked, weight in itertools.product(
        (torch.zeros(0, n), torch.zeros(0, n, dtype=torch.long), torch.zeros(0, n, dtype=torch.bool)),
        (False, True),
        WEIGHTS,
    ):
        yield torch.zeros(0, n), labels, _extra(n, masked, weight)


def empty_rank_batches(n: int) -> Iterator[tuple[Any, ...]]:
    """Every form of an empty batch of ranking tasks over ``n`` candidates: index targets,
    binary labels (float or bool), with or without a mask and a sample weight."""
    for target, masked, weight in itertools.product(
        (torch.zeros(0, dtype=torch.long), torch.zeros(0, n), torch.zeros(0, n, dtype=torch.bool)),
        (False, True),
        WEIGHTS,
    ):
        yield torch.zeros(0, n), target, _extra(n, masked, weight)


def _extra(n: int, masked: bool, weight: str | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if masked:
        extra["mask"] = torch.zeros(0, n, dtype=torch.bool)
    if weight is not None:
        extra["sample_weight"] = torch.zeros(0) if weight == "rows" else torch.tensor(2.0)
    return extra


def as_output(batch: tuple[Any, ...]) -> tuple[Any, ...]:
    """The Ignite ``update`` input of a batch ``(y_pred, y, extra)``."""
    y_pred, y, extra = batch
    return (y_pred, y, extra) if extra else (y_pred, y)


def empty_query_outputs() -> Iterator[Any]:
    """Flat items with query ids, none of them: a tuple and a mapping."""
    ids = torch.zeros(0, dtype=torch.long)
    yield torch.zeros(0), torch.zeros(0), {"indexes": ids}
    yield {"y_pred": torch.zeros(0), "y": torch.zeros(0, dtype=torch.long), "indexes": ids}


# -- the real batches ----------------------------------------------------------------------


def list_batch(seed: int, b: int = 5, n: int = 6) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    scores = torch.from_numpy(rng.integers(0, 4, (b, n)).astype(np.float64))  # ties
    labels = torch.from_numpy(rng.integers(0, 3, (b, n)).astype(np.float64))
    labels[:, 0] = 1.0  # every list holds a relevant item and an irrelevant one
    labels[:, 1] = 0.0
    mask = torch.from_numpy(rng.random((b, n)) < 0.8)
    mask[:, :2] = True
    weight = torch.from_numpy(rng.uniform(0.5, 2.0, b))
    return scores, labels, {"mask": mask, "sample_weight": weight}


def rank_batch(seed: int, b: int = 5, n: int = 6) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    scores = torch.from_numpy(rng.integers(0, 4, (b, n)).astype(np.float64))
    target = torch.from_numpy(rng.integers(0, n, b))
    mask = torch.from_numpy(rng.random((b, n)) < 0.8)
    mask[torch.arange(b), target] = True
    weight = torch.from_numpy(rng.uniform(0.5, 2.0, b))
    return scores, target, {"mask": mask, "sample_weight": weight}


def query_batch(seed: int, first_id: int) -> tuple[Any, ...]:
    """Flat items of three whole queries (ids ``first_id``..), sorted by id."""
    rng = np.random.default_rng(seed)
    ids = torch.repeat_interleave(torch.arange(first_id, first_id + 3), 4)
    labels = torch.from_numpy(rng.integers(0, 2, 12).astype(np.float64))
    labels[::4] = 1.0
    return torch.from_numpy(rng.random(12)), labels, {"indexes": ids}


# -- snapshots -----------------------------------------------------------------------------


def same(a: Any, b: Any, where: str = "state") -> None:
    """``a`` and ``b`` are the same state: equal structure, tensors and arrays bitwise equal
    (NaN where NaN) with one dtype."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b) or bool(
            torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()])
        ), where
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def ignite_state(metric: Any) -> Any:
    return metric.state_dict()


def torchmetrics_state(metric: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, list) else v.clone()) for k, v in metric.metric_state.items()}


def core_state(state: State) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in state.sums.items()}


# -- every form: the state is unchanged ----------------------------------------------------


@pytest.mark.parametrize("name", sorted(LIST_IGNITE))
def test_ignite_list_metrics_take_every_empty_batch_as_a_no_op(name, path):
    metric = LIST_IGNITE[name]()
    metric.reset()
    metric.update(list_batch(0))
    before = ignite_state(metric)
    for n in SIZES:
        for batch in empty_list_batches(n):
            metric.update(as_output(batch))
            same(ignite_state(metric), before, f"{name} after an empty batch of shape (0, {n})")
            metric.update(dict(zip(("y_pred", "y"), batch[:2], strict=True), **batch[2]))
            same(ignite_state(metric), before, f"{name} after an empty mapping of shape (0, {n})")


@pytest.mark.parametrize("name", sorted(RANK_IGNITE))
def test_ignite_rank_metrics_take_every_empty_batch_as_a_no_op(name, path):
    metric = RANK_IGNITE[name]()
    metric.reset()
    metric.update(rank_batch(0))
    before = ignite_state(metric)
    for n in SIZES:
        for batch in empty_rank_batches(n):
            metric.update(as_output(batch))
            same(ignite_state(metric), before, f"{name} after an empty batch of shape (0, {n})")


def test_the_reported_rank_batch_of_no_task_with_a_mask_is_a_no_op():
    """The report: ``RankBasedMetrics(ks=[1])`` crashed (``IndexError`` in the tiling of the
    mask's row counts) on a batch of no task with a mask, index targets or binary labels."""
    metric = rignite.RankBasedMetrics(ks=[1])
    metric.reset()
    mask = {"mask": torch.zeros(0, 1, dtype=torch.bool)}
    for y in (torch.zeros(0, dtype=torch.long), torch.zeros(0, 1)):
        metric.update((torch.zeros(0, 1), y, mask))
    assert not torch.any(metric.state_dict()["__metric_state_per_rank"][0]["_sums"])
    with pytest.raises(NotComputableError, match="tasks seen: 0"):
        metric.compute()


@pytest.mark.parametrize("name", sorted(QUERY_IGNITE))
def test_ignite_query_ids_of_no_item_are_a_no_op(name, path):
    metric = QUERY_IGNITE[name]()
    metric.reset()
    y_pred, y, extra = query_batch(0, 0)
    metric.update((y_pred, y, extra))
    before = ignite_state(metric)
    for output in empty_query_outputs():
        metric.update(output)
        same(ignite_state(metric), before, name)


@pytest.mark.parametrize("name", sorted(KERNELS) + sorted(RANK_KERNELS))
def test_core_states_take_every_empty_batch_as_a_no_op(name, path):
    rank = name in RANK_KERNELS
    state = State((RANK_KERNELS if rank else KERNELS)[name]())
    y_pred, y, extra = (rank_batch if rank else list_batch)(0)
    state.update(y_pred.numpy(), y.numpy(), extra["mask"].numpy(), extra["sample_weight"].numpy())
    before = core_state(state)
    for n in SIZES:
        for y_pred, y, extra in (empty_rank_batches if rank else empty_list_batches)(n):
            for arrays in (lambda x: x, lambda x: x.numpy()):  # torch and numpy
                mask, weight = (arrays(extra[k]) if k in extra else None for k in ("mask", "sample_weight"))
                state.update(arrays(y_pred), arrays(y), mask, weight)
                same(core_state(state), before, f"{name} after an empty batch of shape (0, {n})")


def empty_flat_items() -> Iterator[tuple[Any, Any, Any]]:
    """torchmetrics' flat items, none of them: 1-D and 2-D, float, int and bool targets."""
    for shape, target_dtype in itertools.product(
        ((0,), (0, 3), (3, 0)), (torch.float32, torch.long, torch.bool)
    ):
        yield torch.zeros(shape), torch.zeros(shape, dtype=target_dtype), torch.zeros(shape, dtype=torch.long)


@pytest.mark.parametrize("mode", ["whole", "sorted", "any"])
@pytest.mark.parametrize("name", sorted(TORCHMETRICS_CLASSES))
def test_torchmetrics_adapter_takes_no_item_as_a_no_op(name, mode, path):
    """No item, or none left after ``ignore_index``, changes nothing (torchmetrics raises)."""
    cls = TORCHMETRICS_CLASSES[name]
    metric = cls(query_mode=mode, ignore_index=-1)
    preds, target, ids = (
        torch.tensor([0.3, 0.2, 0.1, 0.5]),
        torch.tensor([0, 1, 1, 0]),
        torch.tensor([0, 0, 1, 1]),
    )
    metric.update(preds, target, ids)
    before = torchmetrics_state(metric)
    for items in empty_flat_items():
        metric.update(*items)
        same(torchmetrics_state(metric), before, f"{name} after {tuple(items[0].shape)} items")
    metric.update(torch.tensor([0.4, 0.1]), torch.tensor([-1, -1]), torch.tensor([2, 2]))  # all ignored
    same(torchmetrics_state(metric), before, f"{name} after ignored items")
    reference = cls(query_mode=mode, ignore_index=-1)
    reference.update(preds, target, ids)
    same(metric.compute(), reference.compute(), name)


# -- between real batches: the value of the real batches alone -----------------------------

FORMS = st.tuples(st.sampled_from(SIZES), st.integers(0, 17))  # (items per list, which form)


def _empty_form(rank: bool, n: int, which: int) -> tuple[Any, ...]:
    forms = list((empty_rank_batches if rank else empty_list_batches)(n))
    return as_output(forms[which % len(forms)])


@settings(max_examples=25)
@given(
    name=st.sampled_from(sorted(LIST_IGNITE) + sorted(RANK_IGNITE)),
    seeds=st.lists(st.integers(0, 10**6), min_size=1, max_size=3),
    empties=st.lists(st.tuples(st.integers(0, 3), FORMS), max_size=4),
    host=st.booleans(),
)
def test_empty_batches_between_real_ones_change_no_value(name, seeds, empties, host):
    """Empty batches anywhere among real ones: the metric computes what it computes from the
    real batches alone (random ties too: an empty batch draws nothing)."""
    rank = name in RANK_IGNITE
    make = (RANK_IGNITE if rank else LIST_IGNITE)[name]
    real = [(rank_batch if rank else list_batch)(seed) for seed in seeds]
    fed = [as_output(b) for b in real]
    for where, (n, which) in empties:
        fed.insert(min(where, len(fed)), _empty_form(rank, n, which))
    with host_batches(host):
        alone, mixed = make(), make()
        alone.reset()
        mixed.reset()
        for batch in real:
            alone.update(as_output(batch))
        for output in fed:
            mixed.update(output)
        same(ignite_state(mixed), ignite_state(alone), name)
        assert mixed.compute() == alone.compute()


@pytest.mark.parametrize("row", LIST_METRICS, ids=[row.function for row in LIST_METRICS])
def test_functional_forms_of_no_list_are_empty(row, path):
    """The functional forms give no value for no list: shape ``(0,)``, or ``(0, len(k))``."""
    fn = getattr(rankstream, row.function)
    with_k = "k" in inspect.signature(fn).parameters
    for n, arrays in itertools.product(SIZES, (np.zeros, torch.zeros)):
        for masked in (False, True):
            mask = arrays((0, n)) > 0 if masked else None
            values, counted = fn(arrays((0, n)), arrays((0, n)), mask=mask, return_counted=True)
            assert tuple(values.shape) == (0,) and tuple(counted.shape) == (0,)
            assert type(values) is type(arrays((0,)))
            if with_k:
                assert tuple(fn(arrays((0, n)), arrays((0, n)), [1, 3], mask=mask).shape) == (0, 2)
