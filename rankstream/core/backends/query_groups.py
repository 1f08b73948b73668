"""The arrays' side of :mod:`rankstream.core.grouping` (flat items with a query id per item,
grouped into padded lists; that module documents it): torch and numpy operations themselves,
kept with the backends so that no other module of the core names a framework."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any

#: how queries may span batches (see :mod:`rankstream.core.grouping`); the first is the default
QUERY_MODES = ("contiguous", "whole", "sorted", "any")
#: the mode that keeps every item and so takes them in any order (named by the errors of the others)
ANY_ORDER = "query_mode='any'"


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


# -- query_mode="contiguous": the open query carried, the closed ids kept to refuse a return ----
def distinct_ids(indexes: Array) -> Array:
    """The distinct ids of ``indexes``, increasing (torch stays on its device)."""
    if _is_torch(indexes):
        import torch

        return torch.unique(indexes, sorted=True)
    return np.unique(np.asarray(indexes))


def cat_ids(parts: list[Array]) -> Array:
    if _is_torch(parts[0]):
        import torch

        return torch.cat(parts)
    return np.concatenate(parts)


def sorted_ids(ids: Array) -> Array:
    if _is_torch(ids):
        import torch

        return torch.sort(ids).values
    return np.sort(ids)


def held_ids(chunks: tuple[Array, ...], ids: Array) -> list[int]:
    """The ids of ``ids`` (distinct, increasing) that one of the ``chunks`` holds (each chunk
    increasing), increasing: one binary search per chunk and one host read."""
    found = None
    for chunk in chunks:
        size = int(chunk.shape[0])
        if size == 0 or int(ids.shape[0]) == 0:
            continue
        if _is_torch(ids):
            import torch

            pos = torch.clamp(torch.searchsorted(chunk.to(ids.device), ids), max=size - 1)
            hit = chunk.to(ids.device)[pos] == ids
        else:
            pos = np.minimum(np.searchsorted(chunk, ids), size - 1)
            hit = chunk[pos] == ids
        found = hit if found is None else found | hit
    if found is None:
        return []
    return [int(x) for x in ids[found].tolist()]


def with_closed(chunks: tuple[Array, ...], ids: Array) -> tuple[Array, ...]:
    """``chunks`` with ``ids`` (distinct, increasing, none held yet) added as a new chunk; then
    the last two merged (one sort) while the earlier is at most twice the later. The sizes then
    fall by more than half from chunk to chunk: at most ``log2(S) + 1`` chunks for ``S`` ids,
    and each id is copied about ``log2(S)`` times over a run."""
    if int(ids.shape[0]) == 0:
        return chunks
    out = [*chunks, ids]
    while len(out) >= 2 and int(out[-2].shape[0]) <= 2 * int(out[-1].shape[0]):
        later = out.pop()
        out[-1] = sorted_ids(cat_ids([out[-1], later.to(out[-1].device) if _is_torch(later) else later]))
    return tuple(out)


def _shown(ids: list[int]) -> str:
    head = ", ".join(map(str, ids[:5]))
    return head + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def returning_error(owner: str, found: list[int], batch_ids: Array) -> ValueError:
    """The ``ValueError`` of ``query_mode="contiguous"`` for ids that come again after their
    query was closed (``found``), echoing the update's ids."""
    n = int(batch_ids.shape[0])
    return ValueError(
        f"{owner}query_mode='contiguous' closes a query when an update ends on another query's item, "
        f"and query id(s) {_shown(found)} came again after their query was closed (this update holds "
        f"{n} query ids, from {int(batch_ids[0])} to {int(batch_ids[-1])}): the items of a query are "
        "not contiguous (a shuffling DataLoader or sampler, a log holding a query in two places). "
        f"Use {ANY_ORDER} (every item kept until the result, in any order: torchmetrics' own "
        "semantics), or feed each query's items together. The state is unchanged"
    )


def split_contiguous(
    indexes: Array,
    preds: Array,
    target: Array,
    carried: tuple[Array, Array, Array] | None,
    closed: tuple[Array, ...],
    owner: str = "",
) -> tuple[tuple[Array, Array, Array] | None, tuple[Array, Array, Array] | None, tuple[Array, ...]]:
    """For ``query_mode="contiguous"``: ``(the items of the queries this batch closes or None,
    the items of the query still open, the closed ids' chunks after it)``.

    Within the batch the items may come in any order. The open query is the batch's last item's:
    its items (joined to ``carried``, the query open before, when it is the same id) are kept.
    Every other query of the batch, and ``carried`` when the batch does not end on it, is
    closed: its id joins ``closed`` (:func:`with_closed`). An id already closed is a
    ``ValueError`` naming it and ``query_mode='any'`` (:func:`returning_error`).
    """
    check_flat(indexes, preds, target)
    if int(indexes.shape[0]) == 0:
        return None, carried, closed
    ids = distinct_ids(indexes)
    found = held_ids(closed, ids)
    if found:
        raise returning_error(owner, found, ids)
    last = int(indexes[-1])
    prev = int(carried[0][0]) if carried is not None else None
    ends = indexes == last
    rest = ~ends
    opened = (indexes[ends], preds[ends], target[ends])
    ready = (indexes[rest], preds[rest], target[rest])
    if carried is not None and prev == last:  # the open query goes on, and stays open
        opened = _joined(carried, opened)
    elif carried is not None:  # the open query ends before this batch's last item
        ready = _joined(carried, ready)
    now_closed = ids[ids != last]
    if prev is not None and prev != last and not bool((ids == prev).any()):
        now_closed = sorted_ids(cat_ids([now_closed, carried[0][:1]]))  # type: ignore[index]
    return (ready if int(ready[0].shape[0]) else None), opened, with_closed(closed, now_closed)


def _joined(a: tuple[Array, Array, Array], b: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
    return cat_ids([a[0], b[0]]), cat_ids([a[1], b[1]]), cat_ids([a[2], b[2]])


def split_ids(closed: Array, opened: Array) -> list[int]:
    """The ids counted twice when several processes' states are joined (``query_mode=
    "contiguous"``): closed in two of them, or closed in one and open in another. ``closed``
    and ``opened`` are every process's closed and open ids, concatenated; a process holds
    each of its closed ids once and none of them open, so a repeat means a query whose items
    went to several processes (the same id open in several is one query: its items join)."""
    if int(closed.shape[0]) == 0:
        return []
    c = sorted_ids(closed)
    twice = {int(x) for x in c[1:][c[1:] == c[:-1]].tolist()}
    if int(opened.shape[0]):
        twice |= set(held_ids((c,), distinct_ids(opened)))
    return sorted(twice)


def split_across_processes_error(owner: str, ids: list[int]) -> ValueError:
    """The ``ValueError`` of ``query_mode="contiguous"`` at the result of a distributed run for
    queries whose items went to several processes."""
    return ValueError(
        f"{owner}query_mode='contiguous': query id(s) {_shown(ids)} were counted by more than one "
        "process (each held part of the query: a DistributedSampler deals a query's items to every "
        f"process). Use {ANY_ORDER} (every item kept and gathered at the result: torchmetrics' own "
        "semantics), or give each process whole queries"
    )
