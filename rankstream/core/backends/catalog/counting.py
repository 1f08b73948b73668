"""Counting a batch of queries' relevant items against a catalog scored chunk by chunk.

For each relevant item ``s`` of a query (a *slot*) and the query's list (every catalog item not
excluded for it), the counts the relevant-ranks producer reads (:mod:`rankstream.core.relevant`):

    above_s = #{i : x_i > t_s},   tied_s = #{i != s : x_i = t_s},   tied_before_s = #{i < s : x_i = t_s}

with ``x_i`` the item scores and ``t_s`` the slot's own score *as its chunk computed it*. Each is a
sum over items, so it adds over chunks and over shards of the catalog: :func:`count_shard` counts
the items ``[start, stop)`` (a process holding that shard), :meth:`CatalogCounts.merge` adds two
shards' counts, :meth:`CatalogCounts.resolve` gives the final counts.

How a chunk is counted: each slot's score alone ``t'`` comes first (one small product,
:meth:`~rankstream.core.backends.catalog.scoring.EmbeddingScorer.relevant`), with a band
``[t' - b, t' + b]`` that holds the chunk's score of the item (``b`` the rounding bound). Per chunk
and block of rows, a query's lowest slots are counted *dense* (every score compared with their two
band edges, the flags counted eight at a time) and the rest from the *candidates*, the scores at
or above the next slot's lower edge, each placed among its query's sorted edges
(:mod:`~rankstream.core.backends.catalog.comparisons`; the split follows a cost model); where
numba is installed, the same counts come from one compiled pass per query row instead
(:mod:`~rankstream.core.backends.catalog.fused`, ``SIZES.catalog_fused``). A score
above a slot's band counts; a score inside it is kept aside (its value and item index). At the
end, each kept score is compared with the slot's exact score, read from the item's own chunk:
above, tied (and before the item) or below. So the counts are those of the chunk's arithmetic
exactly, whatever the rounding of ``t'``. Excluded items (per query) are subtracted where they
were counted: their ``(query, item)`` pairs in the chunk count with weight ``-1``.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core import sizes as _sizes
from rankstream.core.backends.catalog.comparisons import (
    ChunkTally,
    count_chunk,
    dense_costs,
    edges_in,
    exact_edges,
    place,
    sample_found,
)
from rankstream.core.backends.catalog.fused import FusedCounter, available


@dataclass
class CatalogCounts:
    """Counts of one batch's slots over some items of the catalog (a shard, or all of it).

    Attributes:
        above: ``(Q, M)`` items above each slot's band (int64).
        kept: the candidates inside a slot's band: ``(query, slot, value, item, weight)`` arrays.
        exact: ``(Q, M)`` each slot's score as its own chunk computed it (NaN: not in these items).
        excluded: ``(Q,)`` excluded items among these items.
        items: the number of items counted.
        tied, before: ``(Q, M)`` the kept scores already compared with the exact ones (tied with
            the slot, and tied before its item; :meth:`settle`), None while none was.
    """

    above: np.ndarray
    exact: np.ndarray
    excluded: np.ndarray
    items: int
    kept: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    tied: np.ndarray | None = None
    before: np.ndarray | None = None

    def merge(self, other: CatalogCounts) -> CatalogCounts:
        """The counts over both sets of items (disjoint shards of the catalog)."""
        if self.above.shape != other.above.shape:
            raise ValueError(
                f"cannot merge counts of batches of shapes {self.above.shape} and {other.above.shape}"
            )
        exact = np.where(np.isnan(self.exact), other.exact, self.exact)
        return CatalogCounts(
            self.above + other.above, exact, self.excluded + other.excluded, self.items + other.items,
            self.kept + other.kept, _add(self.tied, other.tied), _add(self.before, other.before),
        )  # fmt: skip

    def settle(self, ids: np.ndarray, present: np.ndarray, exact: np.ndarray) -> CatalogCounts:
        """These counts with every kept score compared with ``exact`` ``(Q, M)`` (each slot's score
        as its own chunk computed it, wherever that chunk was): above, tied, tied before. The
        result keeps nothing aside, so its arrays add over shards (an all-reduce SUM)."""
        q, m = self.above.shape
        above = self.above.astype(np.float64)
        tied = np.zeros((q, m)) if self.tied is None else self.tied.copy()
        before = np.zeros((q, m)) if self.before is None else self.before.copy()
        if self.kept:
            qq, cc, v, item, w = (np.concatenate(parts) for parts in zip(*self.kept, strict=True))
            keep = present[qq, cc]
            qq, cc, v, item, w = qq[keep], cc[keep], v[keep], item[keep], w[keep]
            t, own = exact[qq, cc], ids[qq, cc]
            flat = qq * m + cc
            size = q * m
            above += np.bincount(flat, weights=w * (v > t), minlength=size).reshape(q, m)
            equal = (v == t) & (item != own)
            tied += np.bincount(flat, weights=w * equal, minlength=size).reshape(q, m)
            before += np.bincount(flat, weights=w * (equal & (item < own)), minlength=size).reshape(q, m)
        return CatalogCounts(above, exact, self.excluded, self.items, [], tied, before)

    def resolve(
        self, ids: np.ndarray, present: np.ndarray, num_items: int, approx: np.ndarray, band: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(above, tied, tied_before, n)``: the final counts of every slot and each query's list
        length, once the counts cover the catalog (``items == num_items``). Raises where a slot's
        exact score fell outside its band (a scorer whose score of an item depends on the items
        scored with it by more than the band)."""
        if self.items != num_items:
            raise ValueError(
                f"the counts cover {self.items} items of a catalog of {num_items}: add every shard"
            )
        missing = present & np.isnan(self.exact)
        if missing.any():
            q, c = np.argwhere(missing)[0]
            raise ValueError(f"relevant item {int(ids[q, c])} of query {q} was in no counted chunk")
        with np.errstate(invalid="ignore"):  # inf - inf where a slot's score is infinite
            off = present & (np.abs(self.exact - approx) > band[:, None]) & np.isfinite(approx)
        if off.any():
            q, c = np.argwhere(off)[0]
            raise ValueError(
                f"score gave relevant item {int(ids[q, c])} of query {q} the score {self.exact[q, c]!r} "
                f"in its chunk and {approx[q, c]!r} alone: the score of an item must not depend on the "
                "other items scored with it (beyond rounding)"
            )
        done = self.settle(ids, present, self.exact)
        above, tied, before = done.above, done.tied, done.before
        n = num_items - self.excluded.astype(np.float64)
        return above, tied, before, n


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return a if b is None else b if a is None else a + b


def count_shard(
    scorer: Any,
    queries: Any,
    ids: np.ndarray,
    present: np.ndarray,
    approx: np.ndarray,
    band: np.ndarray,
    start: int,
    stop: int,
    chunk: int,
    ex_query: np.ndarray,
    ex_item: np.ndarray,
) -> CatalogCounts:
    """The counts of the slots ``ids`` ``(Q, M)`` (``present``) over the items ``[start, stop)``,
    scored ``chunk`` items at a time; ``approx`` and ``band`` as
    :meth:`~rankstream.core.backends.catalog.scoring.EmbeddingScorer.relevant` gives them; the excluded
    pairs ``(ex_query, ex_item)`` sorted by item (those outside the shard are ignored). Each chunk
    is counted by :class:`~rankstream.core.backends.catalog.fused.FusedCounter` where numba is
    installed, else by :func:`~rankstream.core.backends.catalog.comparisons.count_chunk` and
    :func:`~rankstream.core.backends.catalog.comparisons.place` (the same integers).

    In numpy's passes with query embeddings (a scorer that ``writes_into``), the queries are taken
    in the order of how many of their slots the first chunk's sample puts dense
    (:func:`dense_costs`), so a block of rows holds queries of one split; the counts come back in
    the callers' order (the compiled pass splits each row on its own)."""
    rows = _Rows(ids, present, approx, band)
    # the execution path: numba's pass where it is installed (a chunk's row under 2**31 scores:
    # its 32-bit counters), else numpy's passes (the same integers)
    counter = FusedCounter if available() and chunk < 2**31 else _NumpyPasses
    sorting = getattr(scorer, "writes_into", False) and counter is _NumpyPasses  # blocks of rows
    if not sorting or ids.shape[0] < 2 or rows.deepest == 0 or stop <= start:
        return _count_rows(scorer, queries, counter(rows), start, stop, chunk, ex_query, ex_item, None)
    b = min(start + chunk, stop)
    x = _host(scorer.chunk(queries, start, b, ids.shape[0]))
    lo, _ = edges_in(x.dtype, rows.lo64, rows.hi64, rows.pad)
    found = sample_found(x, lo)
    perm = np.argsort(np.argmin(dense_costs(found, b - start), axis=1), kind="stable")
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    import torch

    first = (x[perm], found[perm])
    part = _NumpyPasses(_Rows(ids[perm], present[perm], approx[perm], band[perm]))
    got = _count_rows(
        scorer, queries[torch.from_numpy(perm)], part, start, stop, chunk, inv[ex_query], ex_item, first
    )
    back = CatalogCounts(got.above[inv], got.exact[inv], got.excluded[inv], got.items)
    back.kept = [(perm[r], *rest) for r, *rest in got.kept]
    return back


class _Rows:
    """A batch's slots sorted per query by their scores alone (padding last), with their bands."""

    def __init__(self, ids: np.ndarray, present: np.ndarray, approx: np.ndarray, band: np.ndarray) -> None:
        t_key = np.where(present, approx, np.inf)
        order = np.argsort(t_key, axis=1, kind="stable")
        self.deepest = int(present.sum(axis=1).max(initial=0))
        self.order = order[:, : self.deepest]
        t_sorted = np.take_along_axis(t_key, self.order, axis=1)
        self.pad = ~np.take_along_axis(present, self.order, axis=1)
        self.lo64, self.hi64 = t_sorted - band[:, None], t_sorted + band[:, None]
        self.ids, self.present = ids, present


class _Edges:
    """Per dtype of the chunks, the sorted slots' edges: the bands' (:func:`edges_in`), narrowed
    to the exact scores known so far (:func:`exact_edges`), the rows of a chunk's relevant items
    narrowed as the chunk comes."""

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows
        self.banded: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.now: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def get(self, dtype: Any, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` in ``dtype`` with the exact scores ``exact`` ``(Q, M)`` known so far."""
        if dtype not in self.now:
            rows = self.rows
            if dtype not in self.banded:
                self.banded[dtype] = edges_in(dtype, rows.lo64, rows.hi64, rows.pad)
            lo, hi = exact_edges(*self.banded[dtype], np.take_along_axis(exact, rows.order, axis=1))
            self.now[dtype] = (lo.copy(), hi.copy())  # narrowed in place as more become known
        return self.now[dtype]

    def known(self, fresh: np.ndarray, exact: np.ndarray) -> None:
        """The rows ``fresh`` got exact scores (``exact``): their edges narrowed again."""
        known = np.take_along_axis(exact[fresh], self.rows.order[fresh], axis=1)
        for dtype, (lo, hi) in self.now.items():
            band_lo, band_hi = self.banded[dtype]
            lo[fresh], hi[fresh] = exact_edges(band_lo[fresh], band_hi[fresh], known)


class _NumpyPasses:
    """Counts a batch's chunks in numpy's passes (:func:`count_chunk`, :func:`place`): the
    interface of :class:`~rankstream.core.backends.catalog.fused.FusedCounter`, without numba."""

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows
        self._edges = _Edges(rows)
        self._exact = np.full(rows.ids.shape, np.nan)
        self._flat_ids = np.where(rows.present, rows.ids, -1)

    def edges(self, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` the sorted slots' edges in ``dtype``, narrowed to the exact scores known."""
        return self._edges.get(dtype, self._exact)

    def count(self, x: np.ndarray, a: int, tally: ChunkTally) -> int:
        """Count the chunk ``x`` (items ``a...``) into ``tally`` (as ``FusedCounter.count``); the
        number of NaN scores."""
        ids, width = self.rows.ids, x.shape[1]
        own = (self._flat_ids >= a) & (self._flat_ids < a + width)
        if own.any():
            r, c = np.nonzero(own)
            self._exact[r, c] = x[r, ids[r, c] - a]
            self._edges.known(np.unique(r), self._exact)  # their slots get their exact edges
        lo, hi = self.edges(x.dtype)
        split, cand_r, cand_c, values = count_chunk(x, a, lo, hi, dense_costs(tally.found, width), tally)
        nan = int(np.isnan(values).sum())
        if not nan:
            place(cand_r, cand_c, values, lo, hi, split, 1.0, a, tally, record=True)
        tally.found /= width
        return nan

    def sample(self, x: np.ndarray) -> np.ndarray:
        """``(Q, M)`` the first chunk's split, estimated on a sample of its items."""
        return sample_found(x, self.edges(x.dtype)[0])

    def exact(self) -> np.ndarray:
        """``(Q, M)`` each slot's score in its own chunk (NaN: not counted)."""
        return self._exact


def _count_rows(
    scorer: Any, queries: Any, counter: Any, start: int, stop: int, chunk: int, ex_query: np.ndarray,
    ex_item: np.ndarray, first: tuple[np.ndarray, np.ndarray] | None,
) -> CatalogCounts:  # fmt: skip
    """:func:`count_shard` over the queries in the order given, each chunk counted by ``counter``
    (:class:`_NumpyPasses` or :class:`~rankstream.core.backends.catalog.fused.FusedCounter`;
    ``first``: the first chunk's scores and sample, already made)."""
    rows = counter.rows
    present, order, pad = rows.present, rows.order, rows.pad
    q, m = present.shape
    counts = CatalogCounts(np.zeros((q, m), np.int64), np.full((q, m), np.nan), np.zeros(q, np.int64), 0)
    tally = ChunkTally(np.zeros((q, rows.deepest), np.int64))
    trim = _sizes.SIZES.catalog_trim_every
    into, out = bool(getattr(scorer, "writes_into", False)), None
    for a in range(start, stop, chunk):
        b = min(a + chunk, stop)
        if first is not None:
            (x, tally.found), first = first, None
        elif into:  # the last chunk's tensor again (fresh pages per chunk: faults, heap holes)
            out = scorer.chunk(queries, a, b, q, out=out)
            x = _host(out)
        else:
            x = _host(scorer.chunk(queries, a, b, q))
        if tally.found is None:
            tally.found = counter.sample(x)
        before = len(tally.kept)
        if counter.count(x, a, tally):
            _nan_error(x, a, b)
        lo_ex, hi_ex = np.searchsorted(ex_item, [a, b])
        if hi_ex > lo_ex:  # excluded pairs in the chunk: subtracted where they were counted
            er, ec = ex_query[lo_ex:hi_ex], ex_item[lo_ex:hi_ex] - a
            lo, hi = counter.edges(x.dtype)
            place(er, ec, x[er, ec], lo, hi, None, -1.0, a, tally)
            counts.excluded += np.bincount(er, minlength=q)
        for r, j, v, item, w in tally.kept[before:]:
            keep = ~pad[r, j]
            counts.kept.append((r[keep], order[r[keep], j[keep]], v[keep], item[keep], w[keep]))
        del tally.kept[before:]
        counts.items += b - a
        del x
        if (a - start) // chunk % trim == trim - 1:
            release_freed()
    counts.above[np.arange(q)[:, None], order] = tally.above
    counts.exact = counter.exact()
    return counts


def _host(scores: Any) -> np.ndarray:
    """A chunk's scores as a numpy array of float32 or float64 (a narrower float widened: exact)."""
    import torch

    if isinstance(scores, torch.Tensor):
        if scores.dtype not in (torch.float32, torch.float64):
            scores = scores.float()
        scores = scores.numpy()
    return np.ascontiguousarray(scores)


def _nan_error(x: np.ndarray, a: int, b: int) -> None:
    """A ``ValueError`` for NaN scores in a chunk, naming the first one's query and item."""
    rows, cols = np.nonzero(np.isnan(x))
    raise ValueError(
        f"the scores of items [{a}, {b}) hold {int(rows.size)} NaN value(s), the first for query "
        f"{int(rows[0])} and item {a + int(cols[0])}; NaN scores are not ranked"
    )


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):
        return None


def release_freed() -> None:
    """Hand the C heap's freed pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). The chunks' temporaries (candidate arrays of sizes that vary from chunk to chunk)
    leave holes in the heap that glibc keeps resident: without this, the resident size of one
    update grew with the number of chunks (2.1 GiB at 2,000,000 items against 0.26 GiB at 200,000,
    measured by benchmarks/bench_catalog.py); with it (every ``SIZES.catalog_trim_every`` chunks: a trim
    costs about 4 ms, and the pages it returns fault in again), it stays that of a few chunks."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
