"""The arrays' side of :mod:`rankstream.core.grouping` (flat items with a query id per item,
grouped into padded lists; that module documents it): torch and numpy operations themselves,
kept with the backends so that no other module of the core names a framework."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any

#: how queries may span batches (see the module docstring)
QUERY_MODES = ("whole", "sorted", "any")


def check_query_mode(query_mode: str) -> str:
    """``query_mode`` as given, or a ``ValueError`` naming the choices."""
    if query_mode not in QUERY_MODES:
        raise ValueError(f"query_mode must be one of {QUERY_MODES}, got {query_mode!r}")
    return query_mode


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def check_flat(indexes: Array, preds: Array, target: Array) -> None:
    """Raise a ``ValueError`` unless ``indexes``, ``preds`` and ``target`` are 1-d of one
    length, the ids are integers and the scores floats."""
    shapes = [tuple(x.shape) for x in (indexes, preds, target)]
    if len({*shapes}) != 1 or len(shapes[0]) != 1:
        raise ValueError(
            "indexes, preds and target must be 1-d of one length, got shapes "
            f"{shapes[0]}, {shapes[1]}, {shapes[2]}"
        )
    if _is_torch(indexes):
        import torch

        integer = (
            not torch.is_floating_point(indexes)
            and not torch.is_complex(indexes)
            and indexes.dtype != torch.bool
        )
        floating = torch.is_floating_point(preds)
    else:
        integer = np.issubdtype(np.asarray(indexes).dtype, np.integer)
        floating = np.issubdtype(np.asarray(preds).dtype, np.floating)
    if not integer:
        raise ValueError(f"indexes must hold integer query ids, got dtype {indexes.dtype}")
    if not floating:
        raise ValueError(f"preds must be floating point, got dtype {preds.dtype}")


def group_by_query(indexes: Array, preds: Array, target: Array) -> tuple[Array, Array, Array, Array]:
    """Flat items ``(N,)`` grouped into lists: ``(scores, labels, mask, ids)``.

    ``scores`` and ``labels`` are ``(Q, L)`` (``Q`` the distinct ids, ``L`` the longest
    query's length), the items of each query in their order of arrival, padded with 0;
    ``mask`` ``(Q, L)`` is True on the items; ``ids`` ``(Q,)`` the query ids in increasing order
    (row ``q`` is query ``ids[q]``). Torch tensors stay on their device (one host read: ``L``);
    numpy arrays give numpy arrays. ``N = 0`` gives ``Q = 0`` lists of length 0.
    """
    check_flat(indexes, preds, target)
    if _is_torch(indexes):
        return _group_torch(indexes, preds, target)
    return _group_numpy(np.asarray(indexes), np.asarray(preds), np.asarray(target))


def _group_torch(indexes: Array, preds: Array, target: Array) -> tuple[Array, Array, Array, Array]:
    import torch

    dev, n = indexes.device, indexes.shape[0]
    if n < 2 or bool((indexes[1:] >= indexes[:-1]).all()):  # already grouped in order: no sort
        ids_sorted = indexes
    else:
        ids_sorted, order = torch.sort(indexes, stable=True)
        preds, target = preds[order], target[order]
    ids, counts = torch.unique_consecutive(ids_sorted, return_counts=True)
    n_q = int(ids.shape[0])
    width = int(counts.max()) if n_q else 0
    # the items fill each row's first n_q places, rows in order: one row-major scatter
    mask = torch.arange(width, device=dev) < counts[:, None]
    shape = (n_q, width)
    scores = torch.zeros(shape, dtype=preds.dtype, device=dev).masked_scatter_(mask, preds)
    labels = torch.zeros(shape, dtype=target.dtype, device=dev).masked_scatter_(mask, target)
    return scores, labels, mask, ids


def _group_numpy(indexes: Array, preds: Array, target: Array) -> tuple[Array, Array, Array, Array]:
    n = indexes.shape[0]
    if n >= 2 and not bool((indexes[1:] >= indexes[:-1]).all()):
        order = np.argsort(indexes, kind="stable")
        indexes, preds, target = indexes[order], preds[order], target[order]
    new = np.ones(n, dtype=bool)
    new[1:] = indexes[1:] != indexes[:-1]
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, n))
    n_q = starts.shape[0]
    width = int(counts.max()) if n_q else 0
    flat = np.repeat(np.arange(n_q) * width - starts, counts) + np.arange(n)
    scores = np.zeros(n_q * width, dtype=preds.dtype)
    labels = np.zeros(n_q * width, dtype=target.dtype)
    mask = np.zeros(n_q * width, dtype=bool)
    scores[flat], labels[flat], mask[flat] = preds, target, True
    shape = (n_q, width)
    return scores.reshape(shape), labels.reshape(shape), mask.reshape(shape), indexes[starts]


def split_open_query(
    indexes: Array, preds: Array, target: Array, closed_below: int | None
) -> tuple[tuple[Array, Array, Array], tuple[Array, Array, Array]]:
    """For ``query_mode="sorted"``: the items of the queries closed by this batch and those of
    the one query still open (the batch's last id), ``((indexes, preds, target), (...))``.

    ``indexes`` must be non-decreasing and, when ``closed_below`` is given (the largest id of
    a query already closed), every id must exceed it: an id seen again after its query closed
    (or arriving out of order) is a ``ValueError`` naming it.
    """
    check_flat(indexes, preds, target)
    n = indexes.shape[0]
    if n == 0:
        return (indexes, preds, target), (indexes, preds, target)
    if _is_torch(indexes):
        import torch

        back = torch.nonzero(indexes[1:] < indexes[:-1])
        first_back = int(back[0, 0]) + 1 if back.numel() else -1
        cut = int(torch.searchsorted(indexes, indexes[-1:], right=False)[0]) if first_back < 0 else 0
        lowest = int(indexes[0])
    else:
        back = np.flatnonzero(indexes[1:] < indexes[:-1])
        first_back = int(back[0]) + 1 if back.size else -1
        cut = int(np.searchsorted(indexes, indexes[-1], side="left")) if first_back < 0 else 0
        lowest = int(indexes[0])
    if first_back >= 0:
        raise ValueError(
            "query_mode='sorted' needs indexes sorted by query id across batches: id "
            f"{int(indexes[first_back])} arrives after id {int(indexes[first_back - 1])}"
        )
    if closed_below is not None and lowest <= closed_below:
        raise ValueError(
            f"query_mode='sorted': query id {lowest} arrives after its query (or a later one, up to "
            f"id {closed_below}) was closed; sort the items by query id or use query_mode='any'"
        )
    return (indexes[:cut], preds[:cut], target[:cut]), (indexes[cut:], preds[cut:], target[cut:])
