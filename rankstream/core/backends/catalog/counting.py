"""Counting a batch of queries' relevant items against a catalog scored chunk by chunk.

For each relevant item ``s`` of a query (a *slot*) and the query's list (every catalog item not
excluded for it), the counts the relevant-ranks producer reads (:mod:`rankstream.core.relevant`):

    above_s = #{i : x_i > t_s},   tied_s = #{i != s : x_i = t_s},   tied_before_s = #{i < s : x_i = t_s}

with ``x_i`` the item scores and ``t_s`` the slot's own score *as its chunk computed it*. Each is a
sum over items, so it adds over chunks and over shards of the catalog: :func:`count_shard` counts
the items ``[start, stop)`` (a process holding that shard), :meth:`CatalogCounts.merge` adds two
shards' counts, :meth:`CatalogCounts.resolve` gives the final counts.

How a chunk is counted without ``M`` passes over it: each slot's score alone ``t'`` comes first
(one small product, :meth:`~rankstream.core.backends.catalog.scoring.EmbeddingScorer.relevant`), with a band
``[t' - b, t' + b]`` that holds the chunk's score of the item (``b`` the rounding bound). Per chunk,
one comparison with each query's lowest band edge finds the *candidates* (scores that can be above
or tied with some slot: few when the relevant items rank high); each candidate is placed among its
query's sorted band edges (``searchsorted``): it is above every slot whose upper edge is below it
(counted, one ``bincount``), and a candidate inside a slot's band is kept aside (its value and item
index). At the end, each kept score is compared with the slot's exact score, read from the item's
own chunk: above, tied (and before the item) or below. So the counts are those of the chunk's
arithmetic exactly, whatever the rounding of ``t'``. Excluded items (per query) are subtracted
where they were counted: their ``(query, item)`` pairs in the chunk count with weight ``-1``.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core.backends.catalog.budget import CANDIDATE_BLOCK, DENSE_SHARE, ROW_BLOCK, TRIM_EVERY


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
    pairs ``(ex_query, ex_item)`` sorted by item (those outside the shard are ignored)."""
    import torch

    q, m = ids.shape
    # the slots of each query by approximate score, padding last (+inf: never below a score)
    t_key = np.where(present, approx, np.inf)
    order = np.argsort(t_key, axis=1, kind="stable")
    t_sorted = np.take_along_axis(t_key, order, axis=1)
    deepest = int(present.sum(axis=1).max(initial=0))
    sorted_items = np.take_along_axis(np.where(present, ids, -1), order, axis=1)
    edges = _Edges(t_sorted - band[:, None], t_sorted + band[:, None], deepest, sorted_items)
    counts = CatalogCounts(np.zeros((q, m), np.int64), np.full((q, m), np.nan), np.zeros(q, np.int64), 0)
    hist = torch.zeros(q * (m + 1), dtype=torch.float64)  # candidates by the upper edges they pass
    dense = torch.zeros((q, m), dtype=torch.float64)  # counts above each sorted slot's band
    flat_ids = np.where(present, ids, -1)
    for a in range(start, stop, chunk):
        b = min(a + chunk, stop)
        scores = scorer.chunk(queries, a, b, q)
        _check_chunk(scores, q, a, b)
        own = (flat_ids >= a) & (flat_ids < b)
        if own.any():
            rows, cols = np.nonzero(own)
            mine = scores[torch.from_numpy(rows), torch.from_numpy(ids[rows, cols] - a)]
            counts.exact[rows, cols] = mine.double().numpy()
        lo_ex, hi_ex = np.searchsorted(ex_item, [a, b])
        ex = (ex_query[lo_ex:hi_ex], ex_item[lo_ex:hi_ex] - a)
        _count_chunk(scores, a, edges, order, hist, dense, counts, ex)
        counts.excluded += np.bincount(ex[0], minlength=q)
        counts.items += b - a
        del scores
        if (a - start) // chunk % TRIM_EVERY == TRIM_EVERY - 1:
            release_freed()
    rev = torch.flip(torch.cumsum(torch.flip(hist.reshape(q, m + 1), [1]), 1), [1])[:, 1:] + dense
    counts.above[np.arange(q)[:, None], order] = np.rint(rev.numpy()).astype(np.int64)
    return counts


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
    measured by benchmarks/bench_catalog.py); with it (every :data:`TRIM_EVERY` chunks: a trim
    costs about 4 ms, and the pages it returns fault in again), it stays that of a few chunks."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class _Edges:
    """The sorted band edges ``(Q, M)`` of a batch, float64 and in a chunk's dtype rounded so that
    the comparisons mean the same: ``x >= lo`` as ``x >= up(lo)``, ``x > hi`` as ``x > down(hi)``."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, deepest: int, items: np.ndarray) -> None:
        import torch

        self.items = np.ascontiguousarray(items)  # the sorted slots' item ids (-1: padding)
        self.lo, self.hi = (
            torch.from_numpy(np.ascontiguousarray(lo)),
            torch.from_numpy(np.ascontiguousarray(hi)),
        )
        self.deepest = deepest  # sorted slot columns holding a real slot in some row
        self._as: dict[Any, tuple[Any, Any]] = {}

    def of(self, dtype: Any) -> tuple[Any, Any]:
        import torch

        if dtype not in self._as:
            if dtype == torch.float64:
                self._as[dtype] = (self.lo, self.hi)
            else:
                lo, hi = self.lo.to(dtype), self.hi.to(dtype)
                lo = torch.where(lo.double() < self.lo, torch.nextafter(lo, torch.full_like(lo, np.inf)), lo)
                hi = torch.where(hi.double() > self.hi, torch.nextafter(hi, torch.full_like(hi, -np.inf)), hi)
                self._as[dtype] = (lo, hi)
        return self._as[dtype]


def _check_chunk(scores: Any, q: int, a: int, b: int) -> None:
    """A ``ValueError`` for NaN scores in a chunk, naming the first one's query and item."""
    import torch

    if bool(torch.isnan(scores.amax(1)).any()):  # max propagates NaN: one cheap pass
        rows, cols = torch.nonzero(torch.isnan(scores), as_tuple=True)
        raise ValueError(
            f"the scores of items [{a}, {b}) hold {int(rows.numel())} NaN value(s), the first for query "
            f"{int(rows[0])} and item {a + int(cols[0])}; NaN scores are not ranked"
        )


def _count_chunk(
    scores: Any, a: int, edges: _Edges, order: np.ndarray, hist: Any, dense: Any, counts: CatalogCounts,
    excluded: tuple[np.ndarray, np.ndarray],
) -> None:  # fmt: skip
    """One chunk's counts. One pass finds the candidates (scores at or above the query's lowest
    band edge); few, they are placed among the band edges one by one (:func:`_candidates`);
    many (a ranking that puts relevant items low), each sorted slot's two comparisons are
    counted over the chunk (:data:`DENSE_SHARE`). Excluded pairs count with weight -1."""
    import torch

    lo, hi = edges.of(scores.dtype)
    er, ec = (torch.from_numpy(x) for x in excluded)
    hit = scores[er, ec] >= lo[er, 0]
    ex_rows, ex_cols = er[hit], ec[hit]
    minus = -torch.ones(ex_rows.shape[0], dtype=torch.float64)
    rows, cols = _above_floor(scores, lo[:, :1], DENSE_SHARE, max(edges.deepest, 1))
    if rows is not None:  # few candidates: one by one
        weight = torch.cat([torch.ones(rows.shape[0], dtype=torch.float64), minus])
        rows, cols = torch.cat([rows, ex_rows]), torch.cat([cols, ex_cols])
        _candidates(scores, a, edges, order, hist, counts, rows, cols, weight)
        return
    _candidates(scores, a, edges, order, hist, counts, ex_rows, ex_cols, minus)
    passed, kept = _slot_counts(scores, lo, hi, edges.deepest)
    dense[:, : edges.deepest] += passed.T
    if kept is not None:  # every score inside a band (each slot's own item among them)
        r, j, v, c = kept
        counts.kept.append((r, order[r, j], v, c + a, np.ones(r.shape[0])))


def _slot_counts(scores: Any, lo: Any, hi: Any, deepest: int) -> tuple[Any, Any]:
    """``(passed, kept)``: ``passed`` ``(deepest, Q)`` float64, per sorted slot column ``j`` and
    row, the scores ``> hi_j``; ``kept`` the scores inside a band, ``(row, j, value, column)``
    numpy arrays (None where there are none). Rows are taken :data:`ROW_BLOCK` at a time, so
    the block stays in the cache through its comparisons (over the whole chunk each comparison
    would read the chunk from memory again: about 3 times slower); the flags' sums are float32,
    exact for the ``< 2^24`` scores of a row."""
    import torch

    q, width = scores.shape
    sums = torch.float32 if width < 1 << 24 else torch.float64
    found = torch.empty((deepest, q), dtype=sums)
    passed = torch.empty((deepest, q), dtype=sums)
    size = min(ROW_BLOCK, q)
    at_lo, above = torch.empty((size, width), dtype=sums), torch.empty((size, width), dtype=sums)
    parts: list[tuple[Any, ...]] = []
    places = torch.arange(width, dtype=sums)
    for r in range(0, q, ROW_BLOCK):
        rows = slice(r, min(r + ROW_BLOCK, q))
        part, f_lo, f_hi = scores[rows], at_lo[: rows.stop - r], above[: rows.stop - r]
        for j in range(deepest):
            torch.ge(part, lo[rows, j : j + 1], out=f_lo)
            torch.sum(f_lo, 1, out=found[j, rows])
            torch.gt(part, hi[rows, j : j + 1], out=f_hi)
            torch.sum(f_hi, 1, out=passed[j, rows])
            inside = found[j, rows] - passed[j, rows]
            if bool((inside > 0).any()):  # scores inside the band (0/1 flags after sub_)
                parts.append(_inside(part, f_lo.sub_(f_hi), inside, places[:width], r, j))
    kept = None
    if parts:
        kept = tuple(torch.cat(p).numpy() for p in zip(*parts, strict=True))
    return passed.double(), kept


def _inside(part: Any, flags: Any, inside: Any, places: Any, r: int, j: int) -> tuple[Any, ...]:
    """``(row, j, value, column)`` of the flagged scores of a block: a row with one flag finds
    its column as ``flags . (0, 1, 2, ...)`` (one product, exact below 2^24), the rows with more
    by a scan of their own flags."""
    import torch

    one = torch.nonzero(inside == 1)[:, 0]
    cols = torch.mv(flags, places).round().long()[one]
    more = torch.nonzero(inside > 1)[:, 0]
    if more.numel():
        rr, cols_more = torch.nonzero(flags.index_select(0, more), as_tuple=True)
        one, cols = torch.cat([one, more[rr]]), torch.cat([cols, cols_more])
    return one + r, torch.full_like(one, j), part[one, cols].double(), cols


def _above_floor(scores: Any, floor: Any, share: int, deepest: int) -> tuple[Any, Any]:
    """``(rows, cols)`` of the scores at or above each row's ``floor``, or ``(None, None)`` where
    they are too many to take one by one (more than one score in ``share / deepest``). The
    comparison's bytes are counted first, then numpy's ``flatnonzero`` of them (its SIMD scan of
    bytes beat reading them 8 at a time, and ``torch.nonzero``, at every density measured)."""
    import torch

    width = scores.shape[1]
    flat = torch.ge(scores, floor).numpy().reshape(-1)
    if np.count_nonzero(flat) * share > flat.shape[0] * deepest:
        return None, None
    pos = torch.from_numpy(np.flatnonzero(flat))
    return pos // width, pos % width


def _candidates(
    scores: Any, a: int, edges: _Edges, order: np.ndarray, hist: Any, counts: CatalogCounts,
    rows: Any, cols: Any, weight: Any,
) -> None:  # fmt: skip
    """Each candidate ``(rows, cols)`` of the chunk placed among its query's sorted band edges
    (in the chunk's dtype, the edges rounded outward: :class:`_Edges`): counted in ``hist`` by
    the upper edges below it, kept where it lies inside a band."""
    import torch

    m = edges.lo.shape[1]
    lo, hi = edges.of(scores.dtype)  # rounded outward: the same comparisons in the chunk's dtype
    values = scores.reshape(-1).index_select(0, rows * scores.shape[1] + cols)
    for s in range(0, int(rows.shape[0]), CANDIDATE_BLOCK):
        part = slice(s, s + CANDIDATE_BLOCK)
        r, c, v, w = rows[part], cols[part], values[part], weight[part]
        passed = torch.searchsorted(hi.index_select(0, r), v[:, None], right=False)[:, 0]  # hi_j < v
        inside = torch.searchsorted(lo.index_select(0, r), v[:, None], right=True)[:, 0]  # lo_j <= v
        hist.index_add_(0, r * (m + 1) + passed, w)
        span = inside - passed
        if bool((span > 0).any()):
            pick = torch.repeat_interleave(torch.arange(r.shape[0]), span)
            step = torch.arange(pick.shape[0]) - torch.repeat_interleave(torch.cumsum(span, 0) - span, span)
            slot = (passed[pick] + step).numpy()
            rr = r[pick].numpy()
            value = v[pick].double().numpy()
            counts.kept.append((rr, order[rr, slot], value, (c[pick] + a).numpy(), w[pick].numpy()))
