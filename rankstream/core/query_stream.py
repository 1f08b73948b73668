"""Flat items with a query id per item, fed batch by batch, handed back as whole queries.

An adapter that takes flat ``(indexes, preds, target)`` items (see
:mod:`rankstream.core.grouping`) chooses how a query may span its updates with ``query_mode``;
:class:`QueryStream` keeps what that choice needs between updates:

* ``"contiguous"`` (the adapters' default): a query's items arrive together, in one batch (any
  order there) or continuing from the end of one batch into the next; the query of a batch's
  last item is kept open and joins the next batch, every other query is ready, and the ids of
  the closed queries are kept so that an id coming again is a ``ValueError`` naming
  ``query_mode='any'`` (:func:`~rankstream.core.grouping.split_contiguous`);
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
from rankstream.core.backends.query_groups import (
    cat_ids,
    check_flat,
    check_query_mode,
    sorted_ids,
    split_contiguous,
    split_open_query,
)

Array = Any
Items = tuple[Any, Any, Any]


class Kept(NamedTuple):
    """What a :class:`QueryStream` holds between updates: the items kept (``(indexes, preds,
    target)`` batches, in order), in ``"sorted"`` mode the largest id of a closed query, in
    ``"contiguous"`` mode the ids of the closed queries (chunks, each increasing:
    :func:`~rankstream.core.backends.query_groups.with_closed`)."""

    items: tuple[tuple[Any, Any, Any], ...] = ()
    closed_max: int | None = None
    closed: tuple[Any, ...] = ()


def _cat(parts: list[Array]) -> Array:
    return parts[0] if len(parts) == 1 else get_ops(parts[0]).concat(parts)


def _joined(items: tuple[Items, ...]) -> Items:
    return tuple(_cat([part[j] for part in items]) for j in range(3))  # type: ignore[return-value]


class QueryStream:
    """The items of queries that span updates (see the module docstring)."""

    def __init__(self, query_mode: str = "contiguous", owner: str = "") -> None:
        self.query_mode = check_query_mode(query_mode)
        self.owner = owner  # what the errors name first, e.g. "NDCG: "
        self.kept = Kept()

    def clear(self) -> None:
        """Forget every kept item (a metric's ``reset``)."""
        self.kept = Kept()

    def feed(self, indexes: Array, preds: Array, target: Array) -> tuple[Items | None, Kept]:
        """``(the items of whole queries ready now or None, the stream's next content)``;
        nothing changes until :meth:`commit`. Bad ids (``"sorted"``: out of order, or an id
        seen after its query closed; ``"contiguous"``: an id seen after its query closed) raise
        a ``ValueError``."""
        check_flat(indexes, preds, target)
        if self.query_mode == "contiguous":
            carried = self.kept.items[0] if self.kept.items else None
            ready, still_open, closed = split_contiguous(
                indexes, preds, target, carried, self.kept.closed, self.owner
            )
            return ready, Kept(() if still_open is None else (still_open,), None, closed)
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
        """The items a result adds without closing them: the open query (``"contiguous"``,
        ``"sorted"``), every stored item (``"any"``), or None."""
        return _joined(self.kept.items) if self.kept.items else None

    def closed_ids(self) -> Array | None:
        """The ids of the queries closed so far (``"contiguous"``), one array in increasing
        order, or None where none is kept."""
        chunks = self.kept.closed
        if not chunks:
            return None
        return sorted_ids(cat_ids(list(chunks))) if len(chunks) > 1 else chunks[0]
