"""Flat items with a query id per item, fed batch by batch, handed back as whole queries.

An adapter that takes flat ``(indexes, preds, target)`` items (see
:mod:`rankstream.core.grouping`) chooses how a query may span its updates with ``query_mode``;
:class:`QueryStream` keeps what that choice needs between updates:

* ``"whole"``: each batch holds whole queries; nothing is kept (every batch is ready as it is);
* ``"sorted"``: the ids arrive sorted across batches; the queries a batch closes are ready, the
  one still open at its end (the batch's last id) is kept and joins the next batch. An id seen
  again after its query closed is a ``ValueError``
  (:func:`~rankstream.core.grouping.split_open_query`);
* ``"any"``: any order; every item is kept until :meth:`QueryStream.pending` is asked for (the
  memory grows with the items seen, as torchmetrics' own retrieval metrics do).

:meth:`QueryStream.feed` is pure: it returns the items ready now and the stream's next content,
which the caller :meth:`~QueryStream.commit` s only once its own state has taken the ready items
(an update that fails leaves both untouched). :meth:`~QueryStream.pending` is what a result must
add without closing it (the open query, or every stored item). Works on torch tensors and numpy
arrays alike.
"""

from typing import Any, NamedTuple

from rankstream.core.backends import get_ops
from rankstream.core.backends.grouping import check_flat, check_query_mode, split_open_query

Array = Any
Items = tuple[Any, Any, Any]


class Kept(NamedTuple):
    """What a :class:`QueryStream` holds between updates: the items kept (``(indexes, preds,
    target)`` batches, in order) and, in ``"sorted"`` mode, the largest id of a closed query."""

    items: tuple[tuple[Any, Any, Any], ...] = ()
    closed_max: int | None = None


def _cat(parts: list[Array]) -> Array:
    return parts[0] if len(parts) == 1 else get_ops(parts[0]).concat(parts)


def _joined(items: tuple[Items, ...]) -> Items:
    return tuple(_cat([part[j] for part in items]) for j in range(3))  # type: ignore[return-value]


class QueryStream:
    """The items of queries that span updates (see the module docstring)."""

    def __init__(self, query_mode: str = "whole") -> None:
        self.query_mode = check_query_mode(query_mode)
        self.kept = Kept()

    def clear(self) -> None:
        """Forget every kept item (a metric's ``reset``)."""
        self.kept = Kept()

    def feed(self, indexes: Array, preds: Array, target: Array) -> tuple[Items | None, Kept]:
        """``(the items of whole queries ready now or None, the stream's next content)``;
        nothing changes until :meth:`commit`. Bad ids (``"sorted"``: out of order, or an id
        seen after its query closed) raise a ``ValueError``."""
        check_flat(indexes, preds, target)
        if self.query_mode == "whole":
            return (indexes, preds, target), self.kept
        if self.query_mode == "any":
            return None, Kept((*self.kept.items, (indexes, preds, target)))
        joined = _joined((*self.kept.items, (indexes, preds, target)))
        closed, still_open = split_open_query(*joined, self.kept.closed_max)
        closed_max = self.kept.closed_max
        if closed[0].shape[0]:
            closed_max = int(closed[0][-1])  # sorted: the last closed id is the largest
        kept = (still_open,) if still_open[0].shape[0] else ()
        return (closed if closed[0].shape[0] else None), Kept(kept, closed_max)

    def commit(self, kept: Kept) -> None:
        """Take ``kept`` (from :meth:`feed`) as the stream's content."""
        self.kept = kept

    def pending(self) -> Items | None:
        """The items a result adds without closing them: the open query (``"sorted"``), every
        stored item (``"any"``), or None."""
        return _joined(self.kept.items) if self.kept.items else None
