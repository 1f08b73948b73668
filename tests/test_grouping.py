"""Flat items with query ids grouped into padded lists (rankstream.core.grouping), against a
naive one-query-at-a-time grouping in Python."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rankstream.core.backends.query_groups import held_ids, split_ids, with_closed
from rankstream.core.grouping import (
    QUERY_MODES,
    check_query_mode,
    group_by_query,
    split_contiguous,
    split_open_query,
)


def naive_groups(indexes: list[int], preds: list[float], target: list[float]) -> dict[int, list[tuple]]:
    """query id -> its items (score, label) in their order of arrival."""
    out: dict[int, list[tuple]] = {}
    for q, p, t in zip(indexes, preds, target, strict=True):
        out.setdefault(q, []).append((p, t))
    return out


def flat(seed: int, n: int, n_queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.choice(np.arange(-5, 1000), size=n_queries, replace=False)
    indexes = rng.choice(ids, size=n)  # ragged: some queries long, some of one item, some absent
    preds = np.round(rng.normal(size=n), 1)  # ties within queries
    target = rng.integers(0, 3, size=n).astype(np.float64)
    return indexes.astype(np.int64), preds, target


def check_against_naive(out: tuple, indexes: np.ndarray, preds: np.ndarray, target: np.ndarray) -> None:
    scores, labels, mask, ids = (np.asarray(x) for x in out)
    groups = naive_groups(indexes.tolist(), preds.tolist(), target.tolist())
    assert ids.tolist() == sorted(groups)
    assert scores.shape == labels.shape == mask.shape == (len(groups), max(len(g) for g in groups.values()))
    for row, q in enumerate(ids.tolist()):
        items = groups[q]
        n = len(items)
        assert mask[row].tolist() == [True] * n + [False] * (mask.shape[1] - n)
        assert scores[row, :n].tolist() == [p for p, _ in items]
        assert labels[row, :n].tolist() == [t for _, t in items]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_grouping_equals_naive(seed: int) -> None:
    indexes, preds, target = flat(seed, 500, 40)
    check_against_naive(group_by_query(indexes, preds, target), indexes, preds, target)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torch_grouping_equals_naive_and_keeps_dtypes(seed: int) -> None:
    indexes, preds, target = flat(seed, 500, 40)
    ti, tp, tt = torch.from_numpy(indexes), torch.from_numpy(preds).float(), torch.from_numpy(target).long()
    out = group_by_query(ti, tp, tt)
    assert all(isinstance(x, torch.Tensor) for x in out)
    assert out[0].dtype == torch.float32 and out[1].dtype == torch.long and out[2].dtype == torch.bool
    check_against_naive(tuple(x.numpy() for x in out), indexes, tp.numpy(), target)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_ids_in_order_already_group_without_a_sort(backend: str) -> None:
    indexes, preds, target = flat(4, 300, 25)
    order = np.argsort(indexes, kind="stable")
    indexes, preds, target = indexes[order], preds[order], target[order]
    args = (
        (indexes, preds, target)
        if backend == "numpy"
        else tuple(torch.from_numpy(x) for x in (indexes, preds, target))
    )
    out = group_by_query(*args)
    check_against_naive(tuple(np.asarray(x) for x in out), indexes, preds, target)


def test_one_query_and_no_item() -> None:
    s, _, m, ids = group_by_query(np.array([7, 7, 7]), np.array([0.3, 0.1, 0.2]), np.array([1.0, 0.0, 1.0]))
    assert ids.tolist() == [7] and s.tolist() == [[0.3, 0.1, 0.2]] and m.all()
    s, _, m, ids = group_by_query(torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0))
    assert s.shape == (0, 0) and ids.shape == (0,)


@pytest.mark.parametrize(
    "indexes, preds, target, match",
    [
        (np.zeros(3, np.int64), np.zeros(2), np.zeros(3), r"1-d of one length, got shapes \(3,\), \(2,\)"),
        (np.zeros((2, 2), np.int64), np.zeros((2, 2)), np.zeros((2, 2)), "1-d of one length"),
        (np.zeros(3), np.zeros(3), np.zeros(3), "indexes must hold integer query ids, got dtype float64"),
        (
            np.zeros(3, np.int64),
            np.zeros(3, np.int64),
            np.zeros(3),
            "preds must be floating point, got dtype int64",
        ),
    ],
)
def test_bad_input_is_named(indexes: np.ndarray, preds: np.ndarray, target: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        group_by_query(indexes, preds, target)


def test_query_modes() -> None:
    assert QUERY_MODES == ("contiguous", "whole", "sorted", "any")
    assert check_query_mode("sorted") == "sorted"
    with pytest.raises(ValueError, match=r"query_mode must be one of .* got 'streamed'"):
        check_query_mode("streamed")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_split_open_query(backend: str) -> None:
    conv = (
        (lambda x: torch.tensor(x, dtype=torch.float64 if isinstance(x[0], float) else torch.long))
        if backend == "torch"
        else np.array
    )
    idx = conv([1, 1, 2, 4, 4, 4])
    p = conv([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    closed, open_ = split_open_query(idx, p, p, closed_below=0)
    assert np.asarray(closed[0]).tolist() == [1, 1, 2] and np.asarray(open_[0]).tolist() == [4, 4, 4]
    assert np.asarray(open_[1]).tolist() == [0.4, 0.5, 0.6]
    closed, open_ = split_open_query(conv([3, 3]), conv([0.1, 0.2]), conv([0.0, 1.0]), closed_below=None)
    assert np.asarray(closed[0]).tolist() == [] and np.asarray(open_[0]).tolist() == [3, 3]
    with pytest.raises(ValueError, match="id 2 arrives after id 4"):
        split_open_query(conv([1, 4, 2]), conv([0.1, 0.2, 0.3]), conv([0.1, 0.2, 0.3]), closed_below=None)
    with pytest.raises(ValueError, match=r"query id 2 arrives after its query .* up to id 2"):
        split_open_query(conv([2, 5]), conv([0.1, 0.2]), conv([0.1, 0.2]), closed_below=2)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_closed_ids_in_halving_chunks_answer_as_a_set(backend: str) -> None:
    conv = (lambda x: torch.tensor(x, dtype=torch.long)) if backend == "torch" else np.array
    rng = np.random.default_rng(0)
    ids = rng.permutation(100_000)[:3000] - 500
    chunks: tuple = ()
    for start in range(0, 3000, 37):  # batches of distinct new ids, as the default mode adds them
        chunks = with_closed(chunks, conv(np.sort(ids[start : start + 37])))
        sizes = [int(c.shape[0]) for c in chunks]
        assert all(a > 2 * b for a, b in itertools.pairwise(sizes)), sizes
    assert all(bool((np.diff(np.asarray(c)) > 0).all()) for c in chunks)
    assert sorted(np.concatenate([np.asarray(c) for c in chunks]).tolist()) == sorted(ids.tolist())
    probe = np.sort(np.concatenate([ids[::50], np.arange(100_000, 100_040)]))
    assert held_ids(chunks, conv(probe)) == sorted(ids[::50].tolist())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_split_contiguous_against_a_naive_stream(backend: str) -> None:
    """Batches of a log whose queries are contiguous (ids in no order, the items of each batch
    shuffled): every query is handed back once with all its items, the last one at the end."""
    conv = (lambda x: torch.tensor(x)) if backend == "torch" else np.array
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 12, size=40)
    log = np.repeat(rng.permutation(1000)[:40], sizes)
    got: dict[int, list[float]] = {}
    carried, closed = None, ()
    cuts = [0, *sorted(rng.choice(np.arange(1, len(log)), size=12, replace=False)), len(log)]
    for a, b in itertools.pairwise(cuts):
        order = np.append(rng.permutation(b - a - 1), b - a - 1)  # shuffled, the last item kept last
        idx = log[a:b][order]
        pos = np.arange(a, b, dtype=np.float64)[order]
        ready, carried, closed = split_contiguous(conv(idx), conv(pos), conv(pos), carried, closed)
        if ready is not None:
            assert not set(np.asarray(ready[0]).tolist()) & set(got)  # each query handed back once
            for q, p in zip(np.asarray(ready[0]).tolist(), np.asarray(ready[1]).tolist(), strict=True):
                got.setdefault(q, []).append(p)
    for q, p in zip(np.asarray(carried[0]).tolist(), np.asarray(carried[1]).tolist(), strict=True):
        got.setdefault(q, []).append(p)
    want: dict[int, list[float]] = {}
    for p, q in enumerate(log.tolist()):
        want.setdefault(q, []).append(float(p))
    assert {q: sorted(v) for q, v in got.items()} == want
    assert sorted(np.concatenate([np.asarray(c) for c in closed]).tolist()) == sorted(
        set(log.tolist()) - {log[-1]}
    )
    with pytest.raises(ValueError, match=rf"query id\(s\) {int(log[0])} came again .* query_mode='any'"):
        split_contiguous(conv(log[:1]), conv([0.5]), conv([0.5]), carried, closed)


def test_split_ids_finds_queries_counted_by_two_processes() -> None:
    closed = torch.tensor([4, 9, 2, 7, 9])  # process 1 closed 4, 9; process 2 closed 2, 7, 9
    assert split_ids(closed, torch.tensor([7, 11, 11])) == [7, 9]  # 11 open in two: one query
    assert split_ids(torch.tensor([1, 2]), torch.tensor([3, 3])) == []
