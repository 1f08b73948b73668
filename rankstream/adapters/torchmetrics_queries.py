"""How the torchmetrics adapter's metrics keep the queries that span updates (``query_mode``):
the states each mode adds, its ``update`` and what ``compute()`` adds
(:class:`QueryModes`, a base of
:class:`~rankstream.adapters.torchmetrics_metrics.RetrievalListMetric`).

* ``"contiguous"`` (default): ``carry_indexes``, ``carry_preds``, ``carry_target`` (the open
  query's items: the query of the last update's last item) and ``closed_ids`` (the ids of
  the closed queries, in chunks each increasing:
  :func:`~rankstream.core.backends.query_groups.with_closed`), all list states with
  ``dist_reduce_fx="cat"``. An update closes every query of the batch but its last item's,
  and the query open before unless the batch ends on it; its values are read off the batch
  shared by a ``MetricCollection`` (rows masked), the carried query's apart. An id among
  ``closed_ids`` is a ``ValueError`` naming ``query_mode='any'``; at ``compute()``, where a
  distributed sync has joined every process's states, an id closed twice, or closed and
  open, is one too (its query was split across processes; one process's ids are unique).
* ``"whole"``: nothing.
* ``"sorted"``: the ``carry_*`` states (the open query) and ``closed_max`` (``"max"``).
* ``"any"``: the ``carry_*`` states hold every item.
"""

from __future__ import annotations

from typing import Any

import torch

from rankstream.adapters.torchmetrics_flat import FlatQueries, flat_queries
from rankstream.core.backends.query_groups import (
    distinct_ids,
    held_ids,
    returning_error,
    split_across_processes_error,
    split_ids,
    with_closed,
)
from rankstream.core.grouping import split_open_query

CARRIED = ("carry_indexes", "carry_preds", "carry_target")
_LOW = torch.iinfo(torch.long).min


def joined(state: list[torch.Tensor] | torch.Tensor) -> torch.Tensor | None:
    """A list state as one tensor (after a distributed sync it is one already), None if empty."""
    if isinstance(state, torch.Tensor):
        return state if state.numel() else None
    return (state[0] if len(state) == 1 else torch.cat(state)) if len(state) else None


class QueryModes:
    """The query modes of a metric: its states, updates and pending items (module docstring).
    The metric provides ``add_state``, ``_stats`` (the state's terms of whole queries'
    items), ``_stats_of`` (those of a shared batch, some rows) and ``_add``."""

    query_mode: str
    add_state: Any
    _stats: Any
    _stats_of: Any
    _add: Any

    def _add_query_states(self) -> None:
        if self.query_mode != "whole":
            for name in CARRIED:
                self.add_state(name, default=[], dist_reduce_fx="cat")
        if self.query_mode == "contiguous":
            self.add_state("closed_ids", default=[], dist_reduce_fx="cat")
        if self.query_mode == "sorted":  # the largest id of a closed query
            self.add_state("closed_max", default=torch.full((), _LOW, dtype=torch.long), dist_reduce_fx="max")

    def _update_queries(self, fq: FlatQueries) -> None:
        """Add the checked batch ``fq`` as the mode says; nothing changes on error."""
        if self.query_mode == "whole":
            self._add(self._stats_of(fq))
        elif self.query_mode == "contiguous":
            self._update_contiguous(fq)
        elif self.query_mode == "any":
            for name, x in zip(CARRIED, (fq.indexes, fq.preds, fq.target), strict=True):
                getattr(self, name).append(x)
        else:
            self._update_sorted(fq)

    def _update_sorted(self, fq: FlatQueries) -> None:
        carried = [
            torch.cat([*getattr(self, n), x])
            for n, x in zip(CARRIED, (fq.indexes, fq.preds, fq.target), strict=True)
        ]
        closed_max = int(self.closed_max)
        (ci, cp, ct), (oi, op, ot) = split_open_query(*carried, None if closed_max == _LOW else closed_max)
        stats = self._stats(ci, cp, ct)  # may raise: nothing has changed yet
        self._add(stats)
        if ci.numel():
            self.closed_max = torch.maximum(self.closed_max, ci.max())
        self.carry_indexes, self.carry_preds, self.carry_target = [oi], [op], [ot]

    def _update_contiguous(self, fq: FlatQueries) -> None:
        """The batch joined to the query open before (``carry_*``): its queries but the last
        item's enter the sums (the carried one among them unless the batch ends on it), the
        last item's stays open, the others' ids join ``closed_ids``. What is made of the batch
        and the carried items is kept with the shared batch (``FlatQueries.joined_with``): the
        metrics of a ``MetricCollection`` carry the same tensors and group, check and split
        them once. Everything is computed before the state changes."""
        chunks = tuple(self.closed_ids)
        carried = tuple(joined(getattr(self, n)) for n in CARRIED) if len(self.carry_indexes) else ()
        every = (
            fq if not carried else fq.joined_with(("carried",), carried, lambda: _joined_batch(carried, fq))
        )
        ids = every.query_ids()  # the carried id is open, never among the closed ones
        found = fq.joined_with(("held",), (*chunks, *carried), lambda: held_ids(chunks, ids))
        if found:
            raise returning_error(
                f"{type(self).__name__}: ", found, fq.once("ids", lambda: distinct_ids(fq.indexes))
            )
        last = int(fq.indexes[-1])
        stats = self._stats_of(every, ids != last)
        opened = every.once(("open", last), lambda: _items(every, every.indexes == last))
        closed = fq.joined_with(
            ("closed", last), (*chunks, *carried), lambda: with_closed(chunks, ids[ids != last])
        )
        self._add(stats)
        self.carry_indexes, self.carry_preds, self.carry_target = ([x] for x in opened)
        self.closed_ids = list(closed)

    def _pending_stats(self) -> dict[str, torch.Tensor] | None:
        """The state's terms of the items ``compute()`` adds without closing them (the open
        queries, or every stored item), None if there are none. In ``"contiguous"`` mode, a
        query split across processes is a ``ValueError`` first (module docstring)."""
        if self.query_mode == "whole":
            return None
        if self.query_mode == "contiguous" and getattr(self, "_is_synced", False):
            self._check_not_split()  # joined states of several processes (one process: ids unique)
        if not len(self.carry_indexes):
            return None
        indexes, preds, target = (joined(getattr(self, n)) for n in CARRIED)
        # through the batch cache: the metrics of a collection carrying the same items share it
        return self._stats_of(
            flat_queries((preds, target, indexes), None, lambda: (indexes, preds, target, False), self)
        )

    def _check_not_split(self) -> None:
        closed = joined(self.closed_ids)
        if closed is None:
            return
        opened = joined(self.carry_indexes)
        twice = split_ids(closed, closed[:0] if opened is None else opened.to(closed.dtype))
        if twice:
            raise split_across_processes_error(f"{type(self).__name__}: ", twice)


def _items(fq: FlatQueries, where: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return fq.indexes[where], fq.preds[where], fq.target[where]


def _joined_batch(carried: tuple[torch.Tensor, ...], fq: FlatQueries) -> FlatQueries:
    """The carried items followed by the batch's, as one batch of whole queries but the last."""
    batch = (fq.indexes, fq.preds, fq.target)
    return FlatQueries(*(torch.cat([x, y]) for x, y in zip(carried, batch, strict=True)), fq.integer_target)
