"""The torchmetrics adapter's flat items, checked, grouped and counted once per batch, with no
``topk`` and no sort of the queries' items.

:func:`checked_items` checks one batch's flat items (a NaN score raises, saying where);
:class:`FlatQueries` holds one batch of checked flat items (whole queries) and computes, once
and on demand, what several metrics read: the items sorted by query id (stable), the run
lengths, the scores padded to ``(Q, L)`` with ``-inf``, per-query counts, and for each relevant
item (target ``> 0``) the counts of the core's relevant-ranks producer
(:mod:`rankstream.core.relevant`): the items of its query scored above it, the other items tied
with it and those of them placed earlier, a count over its row:

    ``rank_j = #{i : s_i > s_j} + #{i < j : s_i = s_j}``  (0-based, ties="first")

so only the ``R`` relevant items are ranked: ``O(R L)`` comparisons, against the ``O(Q L log
L)`` of a sort (``R`` is a few per query in retrieval data); the equal scores are counted only
where a cut-off ``k`` needs them (fewer than ``k`` items above), the earlier ones only for the
items tied with another. :func:`relevant_ranks` hands these to the core, whose kernels compute
every metric from them (``from_ranks``, one definition per metric beside the dense one): the
adapter holds no metric math.

The batch is cached by the identity and version of the input tensors (:func:`flat_queries`), so
the metrics of a ``MetricCollection`` updated with the same tensors group and count them once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rankstream.core.inputs import nan_summary
from rankstream.core.relevant import RelevantRanks

_COUNT = torch.int32
#: the most values compared at a time when ranking the relevant items (rows of ``L``): a
#: chunk's rows stay in cache (on one thread, 2^16 took about half the time of 2^20)
CHUNK = 1 << 16
#: the most relevant items per query, on average, ranked by comparison with a cut-off ``k``
#: and over the whole query: past it, ``O(R L)`` comparisons cost more than the kernel's
#: top-k (or sort) of the padded lists, which then evaluates the batch (one thread, queries
#: of 20 to 180 items: the two met near 7 items per query at ``k = 10`` and 40 without ``k``)
DENSE_TOP_K, DENSE_WHOLE = 8, 32


def checked_items(
    preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor, ignore_index: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """The flat ``(indexes, preds, target)``, ``ignore_index`` removed, target as ``preds``'
    dtype, and whether the target came as integers (no item, after ``ignore_index`` too: an
    update that changes nothing, where torchmetrics raises); a ``ValueError`` on a non-finite
    target or a NaN score."""
    given = (preds, target, indexes)
    indexes, preds, target = indexes.reshape(-1), preds.reshape(-1), target.reshape(-1)
    if ignore_index is not None:
        keep = target != ignore_index
        indexes, preds, target = indexes[keep], preds[keep], target[keep]
    if target.is_floating_point() and not bool(torch.isfinite(target).all()):
        raise ValueError("target must be finite")
    if bool(torch.isnan(preds).any()):
        raise nan_error(*given, ignore_index)
    return indexes, preds, target.to(preds.dtype), not target.is_floating_point()


def nan_error(
    preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor, ignore_index: int | None
) -> ValueError:
    """The error of NaN ``preds`` (the error path): how many among the items not ignored, the
    first one's place in ``preds`` as given and its query id."""
    nan = torch.isnan(preds) if ignore_index is None else torch.isnan(preds) & (target != ignore_index)
    nan = nan.detach().cpu().numpy()
    first = int(np.argmax(nan.reshape(-1)))
    query = int(indexes.reshape(-1)[first])
    among = "" if ignore_index is None else f" among the items not ignored (target != {ignore_index})"
    summary = nan_summary(nan).replace(" (", f"{among} (", 1).replace(" batch)", f" batch, query id {query})")
    return ValueError(f"preds contains {summary}; NaN scores are not ranked")


class FlatQueries:
    """Checked flat items ``(N,)`` of whole queries (``ignore_index`` removed; ``target`` as
    ``preds``' dtype), grouped and ranked on demand (each piece computed once)."""

    def __init__(
        self, indexes: torch.Tensor, preds: torch.Tensor, target: torch.Tensor, integer_target: bool = False
    ) -> None:
        self.indexes, self.preds, self.target = indexes, preds, target
        #: the target came as integers (or booleans): its values are whole numbers
        self.integer_target = integer_target
        self._memo: dict[Any, Any] = {}

    def once(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def joined_with(self, key: Any, source: tuple[torch.Tensor, ...], make: Callable[[], Any]) -> Any:
        """``make()`` once per ``key`` while ``source`` (tensors a metric carries in, e.g. an
        open query's items) are the same objects: the metrics of a ``MetricCollection`` that
        carry the same tensors into this batch share what is made of them; another metric's
        own tensors make it anew."""
        held = self._memo.get(("joined", key))
        if (
            held is not None
            and len(held[0]) == len(source)
            and all(a is b for a, b in zip(held[0], source, strict=True))
        ):
            return held[1]
        value = make()
        self._memo[("joined", key)] = (source, value)
        return value

    # -- input checks (read once for every metric) ----------------------------------------
    def bad_binary(self) -> float | None:
        """A target value other than 0 and 1, or None (integer targets: one pass, their
        extremes)."""

        def make() -> float | None:
            y = self.target
            if self.integer_target:
                low, high = self.target_range()
                return None if low >= 0 and high <= 1 else (low if low < 0 else high)
            bad = (y != 0) & (y != 1)
            return float(y[bad][0]) if bool(bad.any()) else None

        return self.once("bad_binary", make)

    def target_range(self) -> tuple[float, float]:
        def make() -> tuple[float, float]:
            low, high = torch.aminmax(self.target)
            return float(low), float(high)

        return self.once("range", make)

    def target_min(self) -> float:
        return self.target_range()[0]

    # -- grouping -------------------------------------------------------------------------
    def sorted_items(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(preds, target, counts)``: the items in query-id order (stable) and the run
        length of each query."""
        return self._grouped()[1:]

    def query_ids(self) -> torch.Tensor:
        """The distinct query ids ``(Q,)``, increasing: the query of each row of the per-query
        values (and of the lists :func:`~rankstream.core.grouping.group_by_query` makes)."""
        return self._grouped()[0]

    def _grouped(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        def make() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            i, p, y = self.indexes, self.preds, self.target
            if i.shape[0] > 1 and not bool((i[1:] >= i[:-1]).all()):
                i, order = torch.sort(i, stable=True)
                p, y = p[order], y[order]
            ids, counts = torch.unique_consecutive(i, return_counts=True)
            return ids, p, y, counts

        return self.once("sorted", make)

    def width(self) -> int:
        return self.once("width", lambda: int(self.sorted_items()[2].max()))

    def mask(self) -> torch.Tensor:
        """``(Q, L)`` bool, True on the places of each query's items (its first ``n_q``)."""

        def make() -> torch.Tensor:
            counts = self.sorted_items()[2]
            return torch.arange(self.width(), device=counts.device) < counts[:, None]

        return self.once("mask", make)

    def padded(self, flat: torch.Tensor) -> torch.Tensor:
        """Flat sorted values ``(N,)`` in ``(Q, L)`` rows, ``-inf`` past each query's end."""
        mask = self.mask()
        full = torch.full(mask.shape, float("-inf"), dtype=flat.dtype, device=flat.device)
        return full.masked_scatter_(mask, flat)

    def padded_scores(self) -> torch.Tensor:
        """``(Q, L)`` scores, ``-inf`` past each query's end (compares below every item)."""
        return self.once("padded", lambda: self.padded(self.sorted_items()[0]))

    def sizes(self) -> torch.Tensor:
        return self.once("sizes", lambda: self.sorted_items()[2].to(torch.float64))

    def relevant_count(self) -> torch.Tensor:
        """Per query, the items with target ``> 0``, float64."""
        return self.relevant_per_query(False)

    # -- ranks ----------------------------------------------------------------------------
    def relevant(self, retrieved_only: bool) -> torch.Tensor:
        """The sorted items that are relevant (target ``> 0``; with ``retrieved_only`` also
        scored ``> 0``), bool ``(N,)``."""

        def make() -> torch.Tensor:
            p, y, _ = self.sorted_items()
            return (y > 0) & (p > 0) if retrieved_only else y > 0

        return self.once(("rel", retrieved_only), make)

    def relevant_per_query(self, retrieved_only: bool) -> torch.Tensor:
        """Per query, its relevant items (as :meth:`relevant`), float64: a count of the
        relevant items' rows (no pass over every item past the one that finds them)."""

        def make() -> torch.Tensor:
            row = self.relevant_items(retrieved_only)[0]
            return torch.bincount(row, minlength=self.n_queries()).to(torch.float64)

        return self.once(("n_rel", retrieved_only), make)

    def relevant_items(self, retrieved_only: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(row, col, position)`` of the relevant items (as :meth:`relevant`), in query order."""

        def make() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            counts = self.sorted_items()[2]
            pos = torch.nonzero(self.relevant(retrieved_only))[:, 0]
            ends = torch.cumsum(counts, 0)
            row = torch.searchsorted(ends, pos, right=True)
            col = pos - (ends - counts)[row]
            return row, col, pos

        return self.once(("relevant", retrieved_only), make)

    def _count(self, retrieved_only: bool, which: torch.Tensor | None, equal: bool) -> torch.Tensor:
        """Per relevant item (``which``: those of :meth:`relevant_items` at these indices;
        None: all), the items of its query scored above it (``equal``: equal to it, itself
        included), int32. Rows of at most :data:`CHUNK` values at a time."""
        row, _, pos = self.relevant_items(retrieved_only)
        if which is not None:
            row, pos = row[which], pos[which]
        scores = self.padded_scores()
        values = self.sorted_items()[0].index_select(0, pos)[:, None]
        step = max(1, CHUNK // max(int(scores.shape[1]), 1))
        parts = []
        for a in range(0, int(row.shape[0]), step):
            rows = scores.index_select(0, row[a : a + step])
            own = values[a : a + step]
            parts.append(_row_counts(torch.eq if equal else torch.gt, rows, own))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=_COUNT, device=row.device)

    def above(self, retrieved_only: bool) -> torch.Tensor:
        """Per relevant item (as :meth:`relevant_items`), the items of its query scored above
        it, int32."""
        return self.once(("above", retrieved_only), lambda: self._count(retrieved_only, None, False))

    def equal(self, retrieved_only: bool, k: int | None) -> torch.Tensor:
        """Per relevant item, the items of its query scored equal to it (itself included),
        int32, read only for the items with fewer than ``k`` items above (None: all); 1 for
        the others (ranked ``k`` or later whatever their ties: no metric cut at ``k`` reads
        more of them)."""

        def make() -> torch.Tensor:
            above = self.above(retrieved_only)
            if k is None:
                return self._count(retrieved_only, None, True)
            near = torch.nonzero(above < k)[:, 0]
            out = torch.ones_like(above)
            return out.index_copy_(0, near, self._count(retrieved_only, near, True))

        return self.once(("equal", retrieved_only, k), make)

    def ranks(self, retrieved_only: bool, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(row, rank)`` of the relevant items: ``rank`` 0-based with ties broken by
        position (earlier first), int64: the items above, plus (for the items tied with
        another, only) the equal items before it. With a cut-off ``k``, exact below ``k``
        and ``>= k`` elsewhere."""

        def make() -> tuple[torch.Tensor, torch.Tensor]:
            row, col, pos = self.relevant_items(retrieved_only)
            rank = self.above(retrieved_only).to(torch.int64)
            tied = torch.nonzero(self.equal(retrieved_only, k) > 1)[:, 0]
            if tied.numel():
                scores = self.padded_scores()
                r, c = row[tied], col[tied]
                own = self.sorted_items()[0].index_select(0, pos[tied])[:, None]
                earlier = torch.arange(scores.shape[1], device=scores.device) < c[:, None]
                before = ((scores.index_select(0, r) == own) & earlier).sum(1)
                rank = rank.index_add_(0, tied, before)
            return row, rank

        return self.once(("ranks", retrieved_only, k), make)

    def sparse(self, retrieved_only: bool, k: int | None) -> bool:
        """Whether the relevant items are few enough to rank by comparison for a cut-off
        ``k`` (:data:`DENSE_TOP_K`, :data:`DENSE_WHOLE`)."""
        most = DENSE_WHOLE if k is None else DENSE_TOP_K
        return int(self.relevant_items(retrieved_only)[0].shape[0]) <= most * self.n_queries()

    def n_queries(self) -> int:
        return int(self.sorted_items()[2].shape[0])


def _row_counts(compare: Callable[..., torch.Tensor], a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row, where ``compare(a, b)`` holds (``a`` ``(R, L)``, ``b`` ``(R, 1)``), int32: the
    comparison written as 0/1 into a float32 array and summed (exact below 2^24 per row), several
    times faster on CPU than a sum of the bools, which converts them first."""
    out = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    return compare(a, b, out=out).sum(1).to(_COUNT)


def relevant_ranks(fq: FlatQueries, k: int | None, labels: torch.Tensor) -> RelevantRanks:
    """The counts of the items with target ``> 0`` of every query (the slots), for the core's
    relevant-ranks producer (:mod:`rankstream.core.relevant`): the items above each, the other
    items tied with it and those of them placed earlier (read only where fewer than ``k`` items
    are above: a slot ranked past ``k`` in every order needs no more), with ``labels`` ``(N,)``
    (the sorted items' labels as the kernel reads them) at the slots and each query's size."""
    row, _, pos = fq.relevant_items(False)
    above = fq.above(False).to(torch.int64)
    tied = fq.equal(False, k).to(torch.int64) - 1
    tied_before = fq.ranks(False, k)[1] - above
    q = fq.n_queries()
    first = torch.searchsorted(row, row, right=False)
    slot = torch.arange(row.shape[0], device=row.device) - first
    m = int(slot.max()) + 1 if slot.numel() else 0
    shape = (q, m)

    def padded(x: torch.Tensor, dtype: Any) -> np.ndarray:
        out = np.zeros(shape, dtype=dtype)
        out[row.cpu().numpy(), slot.cpu().numpy()] = x.detach().cpu().numpy()
        return out

    present = padded(torch.ones_like(row, dtype=torch.bool), bool)
    return RelevantRanks(
        padded(above, np.int64),
        padded(tied, np.int64),
        padded(tied_before, np.int64),
        padded(labels.index_select(0, pos).to(torch.float64), np.float64),
        fq.sizes().cpu().numpy(),
        present,
    )


# -- the cache: one batch, keyed by the inputs' identity and version --------------------------
@dataclass
class _Entry:
    key: tuple
    refs: tuple[weakref.ref, ...]
    value: FlatQueries
    #: the metrics that read it, by id (a metric's hash follows its state)
    users: dict[int, weakref.ref]


#: the one batch kept (a list of one, replaced whole: a reader sees an entry or none)
_LAST: list[_Entry | None] = [None]


def _key(tensors: tuple[torch.Tensor, ...], ignore_index: int | None) -> tuple:
    return (*((id(t), t._version) for t in tensors), ignore_index)


def flat_queries(
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ignore_index: int | None,
    make: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]],
    user: Any,
) -> FlatQueries:
    """The :class:`FlatQueries` of these input tensors ``(preds, target, indexes)`` for the
    metric ``user``: the last one made, where the same tensor objects come again unchanged
    (their version: an in-place write changes it) with the same ``ignore_index`` and this
    metric has not read it yet (so a metric updated twice with the same tensors, refilled
    in a way that escapes the version count, reads them again); else a new one from
    ``make()`` (the flat ``(indexes, preds, target, integer_target)``). The one batch kept
    lives until other inputs come or the inputs are freed."""
    key = _key(inputs, ignore_index)
    entry = _LAST[0]
    if (
        entry is not None
        and entry.key == key
        and all(r() is t for r, t in zip(entry.refs, inputs, strict=True))
        and not _read_by(entry, user)
    ):
        entry.users[id(user)] = weakref.ref(user)
        return entry.value
    fq = FlatQueries(*make())
    refs = tuple(weakref.ref(t, _forget) for t in inputs)
    _LAST[0] = _Entry(key, refs, fq, {id(user): weakref.ref(user)})
    return fq


def _read_by(entry: _Entry, user: Any) -> bool:
    ref = entry.users.get(id(user))
    return ref is not None and ref() is user


def _forget(ref: weakref.ref) -> None:
    """An input tensor was freed: drop the batch made from it."""
    entry = _LAST[0]
    if entry is not None and any(r is ref for r in entry.refs):
        _LAST[0] = None


def clear_cache() -> None:
    """Drop the cached batch."""
    _LAST[0] = None
