"""Counting a batch of queries' relevant items against a catalog scored chunk by chunk.

For each relevant item ``s`` of a query (a *slot*) and the query's list (every catalog item not
excluded for it), the counts the relevant-ranks producer reads (:mod:`rankstream.core.relevant`):

    above_s = #{i : x_i > t_s},   tied_s = #{i != s : x_i = t_s},   tied_before_s = #{i < s : x_i = t_s}

with ``x_i`` the item scores and ``t_s`` the slot's own score *as its chunk computed it*. Each is a
sum over items, so it adds over chunks and over shards of the catalog: :func:`count_shard` counts
the items ``[start, stop)`` (a process holding that shard), :meth:`CatalogCounts.merge` adds two
shards' counts, :meth:`CatalogCounts.resolve` gives the final counts.

How a chunk is counted without ``M`` passes over it: each slot's score alone ``t'`` comes first
(one small product, :meth:`~rankstream.core.catalog.scoring.EmbeddingScorer.relevant`), with a band
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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core.catalog.budget import CANDIDATE_BLOCK


@dataclass
class CatalogCounts:
    """Counts of one batch's slots over some items of the catalog (a shard, or all of it).

    Attributes:
        above: ``(Q, M)`` items above each slot's band (int64).
        kept: the candidates inside a slot's band: ``(query, slot, value, item, weight)`` arrays.
        exact: ``(Q, M)`` each slot's score as its own chunk computed it (NaN: not in these items).
        excluded: ``(Q,)`` excluded items among these items.
        items: the number of items counted.
    """

    above: np.ndarray
    exact: np.ndarray
    excluded: np.ndarray
    items: int
    kept: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def merge(self, other: CatalogCounts) -> CatalogCounts:
        """The counts over both sets of items (disjoint shards of the catalog)."""
        if self.above.shape != other.above.shape:
            raise ValueError(
                f"cannot merge counts of batches of shapes {self.above.shape} and {other.above.shape}"
            )
        exact = np.where(np.isnan(self.exact), other.exact, self.exact)
        return CatalogCounts(
            self.above + other.above, exact, self.excluded + other.excluded, self.items + other.items,
            self.kept + other.kept,
        )  # fmt: skip

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
        q, m = self.above.shape
        above = self.above.astype(np.float64)
        tied = np.zeros((q, m))
        before = np.zeros((q, m))
        if self.kept:
            qq, cc, v, item, w = (np.concatenate(parts) for parts in zip(*self.kept, strict=True))
            keep = present[qq, cc]
            qq, cc, v, item, w = qq[keep], cc[keep], v[keep], item[keep], w[keep]
            t, own = self.exact[qq, cc], ids[qq, cc]
            flat = qq * m + cc
            size = q * m
            above += np.bincount(flat, weights=w * (v > t), minlength=size).reshape(q, m)
            equal = (v == t) & (item != own)
            tied += np.bincount(flat, weights=w * equal, minlength=size).reshape(q, m)
            before += np.bincount(flat, weights=w * (equal & (item < own)), minlength=size).reshape(q, m)
        n = num_items - self.excluded.astype(np.float64)
        return above, tied, before, n


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
    :meth:`~rankstream.core.catalog.scoring.EmbeddingScorer.relevant` gives them; the excluded
    pairs ``(ex_query, ex_item)`` sorted by item (those outside the shard are ignored)."""
    import torch

    q, m = ids.shape
    # the slots of each query by approximate score, padding last (+inf: never below a score)
    t_key = np.where(present, approx, np.inf)
    order = np.argsort(t_key, axis=1, kind="stable")
    t_sorted = np.take_along_axis(t_key, order, axis=1)
    lo = torch.from_numpy(np.ascontiguousarray(t_sorted - band[:, None]))
    hi = torch.from_numpy(np.ascontiguousarray(t_sorted + band[:, None]))
    floor = lo[:, 0].clone()  # the lowest band edge of each query
    counts = CatalogCounts(np.zeros((q, m), np.int64), np.full((q, m), np.nan), np.zeros(q, np.int64), 0)
    above = torch.zeros(q * (m + 1), dtype=torch.float64)
    flat_ids = np.where(present, ids, -1)
    for a in range(start, stop, chunk):
        b = min(a + chunk, stop)
        scores = scorer.chunk(queries, a, b, q)
        _check_chunk(scores, q, a, b)
        own = (flat_ids >= a) & (flat_ids < b)
        if own.any():
            rows, cols = np.nonzero(own)
            counts.exact[rows, cols] = (
                scores[torch.from_numpy(rows), torch.from_numpy(ids[rows, cols] - a)].double().numpy()
            )
        lo_ex, hi_ex = np.searchsorted(ex_item, [a, b])
        _count_chunk(
            scores, a, floor, lo, hi, order, above, counts, ex_query[lo_ex:hi_ex], ex_item[lo_ex:hi_ex]
        )
        counts.excluded += np.bincount(ex_query[lo_ex:hi_ex], minlength=q)
        counts.items += b - a
    rev = torch.flip(torch.cumsum(torch.flip(above.reshape(q, m + 1), [1]), 1), [1])[:, 1:]
    counts.above[np.arange(q)[:, None], order] = np.rint(rev.numpy()).astype(np.int64)
    return counts


def _check_chunk(scores: Any, q: int, a: int, b: int) -> None:
    """A ``ValueError`` for NaN scores in a chunk, naming the first one's query and item."""
    import torch

    if bool(torch.isnan(scores).any()):
        rows, cols = torch.nonzero(torch.isnan(scores), as_tuple=True)
        raise ValueError(
            f"the scores of items [{a}, {b}) hold {int(rows.numel())} NaN value(s), the first for query "
            f"{int(rows[0])} and item {a + int(cols[0])}; NaN scores are not ranked"
        )


def _count_chunk(
    scores: Any, a: int, floor: Any, lo: Any, hi: Any, order: np.ndarray, above: Any,
    counts: CatalogCounts, ex_query: np.ndarray, ex_item: np.ndarray,
) -> None:  # fmt: skip
    """Add one chunk's candidates to ``above`` (per query, a histogram of how many upper band
    edges each candidate passes) and keep the in-band ones in ``counts.kept``."""
    import torch

    m = lo.shape[1]
    mask = torch.ge(scores, floor.to(scores.dtype)[:, None])
    rows, cols = torch.nonzero(mask, as_tuple=True)
    weight = torch.ones(rows.shape[0], dtype=torch.float64)
    if ex_query.size:  # the excluded pairs of this chunk, counted with weight -1 where candidates
        er, ec = torch.from_numpy(ex_query), torch.from_numpy(ex_item - a)
        hit = mask[er, ec]
        rows = torch.cat([rows, er[hit]])
        cols = torch.cat([cols, ec[hit]])
        weight = torch.cat([weight, -torch.ones(int(hit.sum()), dtype=torch.float64)])
    values = scores[rows, cols].to(torch.float64)
    for s in range(0, int(rows.shape[0]), CANDIDATE_BLOCK):
        r, v, w = (
            rows[s : s + CANDIDATE_BLOCK],
            values[s : s + CANDIDATE_BLOCK],
            weight[s : s + CANDIDATE_BLOCK],
        )
        c = cols[s : s + CANDIDATE_BLOCK]
        passed = torch.searchsorted(hi[r], v[:, None], right=False)[:, 0]  # upper edges below v
        inside = torch.searchsorted(lo[r], v[:, None], right=True)[:, 0]  # lower edges at or below v
        above.index_add_(0, r * (m + 1) + passed, w)
        span = inside - passed
        if bool((span > 0).any()):
            pick = torch.repeat_interleave(torch.arange(r.shape[0]), span)
            step = torch.arange(pick.shape[0]) - torch.repeat_interleave(torch.cumsum(span, 0) - span, span)
            slot = (passed[pick] + step).numpy()
            rr = r[pick].numpy()
            counts.kept.append((rr, order[rr, slot], v[pick].numpy(), (c[pick] + a).numpy(), w[pick].numpy()))
