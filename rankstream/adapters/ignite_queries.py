"""The query stream of ``rankstream.ignite``'s metrics (flat items with ``indexes``): what its
``state_dict`` holds, how a saved one is read back, and the check of a distributed result in
``query_mode="contiguous"`` (:class:`~rankstream.core.query_stream.QueryStream` keeps the items
between updates; :class:`~rankstream.adapters.ignite_metrics.KernelMetric` drives it).

``state_dict`` keys (plain 1-d tensors), written in ``"sorted"`` and ``"any"`` mode always, in
``"contiguous"`` mode once the stream holds something (so a metric fed lists only saves what it
saved before):

* ``query_indexes``, ``query_preds``, ``query_target``: the open query's items (``"sorted"``,
  ``"contiguous"``) or every stored item (``"any"``);
* ``query_closed_max``: the largest closed id (``"sorted"``; empty otherwise);
* ``query_closed_ids``: the ids of the closed queries, increasing (``"contiguous"`` only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rankstream.core.backends.query_groups import held_ids, split_across_processes_error, split_ids
from rankstream.core.query_stream import Kept, QueryStream

QUERY_KEYS = ("query_indexes", "query_preds", "query_target")
#: every key of the query stream in a state_dict
QUERY_STATE = (*QUERY_KEYS, "query_closed_max", "query_closed_ids")


def query_state(stream: QueryStream) -> dict[str, torch.Tensor]:
    """The ``state_dict`` entries of ``stream`` (see the module docstring; none where a
    ``"contiguous"`` or ``"whole"`` stream holds nothing)."""
    pending = stream.pending()
    closed_ids = stream.closed_ids()
    if stream.query_mode == "whole" or (
        stream.query_mode == "contiguous" and pending is None and closed_ids is None
    ):
        return {}
    empty = (torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0))
    state = {key: items.detach().clone() for key, items in zip(QUERY_KEYS, pending or empty, strict=True)}
    closed = stream.kept.closed_max
    state["query_closed_max"] = torch.tensor([] if closed is None else [closed], dtype=torch.long)
    if stream.query_mode == "contiguous":
        ids = torch.zeros(0, dtype=torch.long) if closed_ids is None else closed_ids
        state["query_closed_ids"] = torch.as_tensor(ids).detach().clone()
    return state


def saved_queries(state_dict: Mapping[str, Any], query_mode: str, metric: str) -> Kept:
    """The query stream saved in ``state_dict``, checked as a batch of flat items: open items
    in a metric of mode ``"whole"``, more than one open query, or an open id among the closed
    ones are a ``ValueError`` naming ``metric``."""
    items = [state_dict.get(k) for k in QUERY_KEYS]
    closed = state_dict.get("query_closed_max")
    closed_ids = state_dict.get("query_closed_ids")
    if all(x is None for x in (*items, closed, closed_ids)):
        return Kept()
    if not all(isinstance(x, torch.Tensor) and x.ndim == 1 for x in (*items, closed)) or not (
        closed_ids is None or (isinstance(closed_ids, torch.Tensor) and closed_ids.ndim == 1)
    ):
        raise ValueError(
            f"state_dict of {metric}: {', '.join(QUERY_STATE)} must be 1-d tensors, got "
            f"{[type(x).__name__ for x in (*items, closed, closed_ids)]}"
        )
    n = int(items[0].shape[0])
    if query_mode == "whole" and n:
        raise ValueError(
            f"state_dict of {metric} holds {n} items of open queries (saved with query_mode 'contiguous', "
            "'sorted' or 'any'): load it into a metric with that query_mode"
        )
    if query_mode == "whole":
        return Kept()
    if query_mode == "contiguous":
        return _saved_contiguous(items, closed_ids, metric)
    kept = QueryStream(query_mode).feed(*items)[1] if n else Kept()  # checked as a batch of flat items
    if query_mode == "sorted" and n and len(kept.items) != 1:
        raise ValueError(f"state_dict of {metric}: the saved items hold more than one query")
    return Kept(kept.items, int(closed[0]) if closed.shape[0] else None)


def _saved_contiguous(items: list[torch.Tensor], closed_ids: torch.Tensor | None, metric: str) -> Kept:
    ids = torch.zeros(0, dtype=torch.long) if closed_ids is None else closed_ids.to(torch.long)
    ids = torch.sort(ids).values
    if ids.shape[0] > 1 and bool((ids[1:] == ids[:-1]).any()):
        raise ValueError(f"state_dict of {metric}: query_closed_ids holds an id twice")
    chunks = (ids,) if ids.shape[0] else ()
    if not items[0].shape[0]:
        return Kept((), None, chunks)
    ready, kept = QueryStream("contiguous").feed(*items)  # checked as a batch of flat items
    if ready is not None:
        raise ValueError(f"state_dict of {metric}: the saved open items hold more than one query")
    if held_ids(chunks, kept.items[0][0][:1]):
        raise ValueError(
            f"state_dict of {metric}: the open query's id {int(items[0][0])} is among query_closed_ids"
        )
    return Kept(kept.items, None, chunks)


def _gathered(x: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Every process's ``x`` (1-d, any length) as ``dtype``, concatenated in process order: one
    gather of the lengths, one of the values padded to the longest (a collective)."""
    import ignite.distributed as idist

    x = x.to(dtype).cpu()
    sizes = idist.all_gather(torch.tensor([x.shape[0]], dtype=torch.long))
    longest = int(sizes.max())
    if not longest:
        return x
    padded = torch.zeros(longest, dtype=dtype)
    padded[: x.shape[0]] = x
    every = idist.all_gather(padded).reshape(-1, longest)
    return torch.cat([row[: int(n)] for row, n in zip(every, sizes, strict=True)])


def gathered_pending(stream: QueryStream) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The items a result adds without closing them (:meth:`QueryStream.pending`: the open
    queries, or every stored item), those of every process in a distributed run (a collective:
    ids as int64, scores and labels as float64, exact for float32 and float64 inputs), so that
    a query whose items several processes hold is one query; None where there are none."""
    import ignite.distributed as idist

    pending = stream.pending()
    if idist.get_world_size() < 2:
        return pending
    if pending is None:
        pending = (torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0))
    ids, preds, target = (
        _gathered(torch.as_tensor(x), dtype)
        for x, dtype in zip(pending, (torch.long, torch.float64, torch.float64), strict=True)
    )
    return (ids, preds, target) if ids.shape[0] else None


def check_distributed(stream: QueryStream, metric: str) -> None:
    """In a distributed run (a collective: every process calls it), a ``ValueError`` naming
    ``query_mode='any'`` on every process where a query was counted by more than one (its id
    closed in two, or closed in one and open in another): ``"contiguous"`` mode only."""
    import ignite.distributed as idist

    if stream.query_mode != "contiguous" or idist.get_world_size() < 2:
        return
    closed = stream.closed_ids()
    pending = stream.pending()
    closed = torch.zeros(0, dtype=torch.long) if closed is None else torch.as_tensor(closed)
    opened = torch.zeros(0, dtype=torch.long) if pending is None else torch.as_tensor(pending[0][:1])
    twice = split_ids(_gathered(closed), _gathered(opened))  # the same open id in two: one query
    if twice:
        raise split_across_processes_error(f"{metric}: ", twice)
