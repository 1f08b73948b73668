"""A catalog split over processes: each process holds the items ``[start, stop)`` of a catalog of
``num_items`` and counts over them; the counts are summed before the metric.

Every process calls with the SAME batch (queries, relevant ids, grades, exclusions); the
reductions are SUMs of fixed-size float64 arrays (``reduce``, e.g.
:func:`rankstream.distributed.sum_over_processes` for ``torch.distributed``), three per batch:

1. **the relevant items' scores alone and their bands.** A relevant item's score alone ``t'`` and
   its rounding bound can only be computed by the process holding the item (its embedding, or
   a scorer that serves that shard): each process fills the slots of the items it holds and
   zeros elsewhere, and the SUM gives every process every slot's ``t'`` and bound (adding zeros is
   exact), plus how many processes hold each item (it must be one: the shards cover the catalog
   once). Every process then counts its shard against the same bands.
2. **the exact scores.** Each slot's score as its own chunk computed it is known to the process
   that holds its item: SUM of the values (zeros elsewhere) and of the "known" flags.
3. **the counts.** Each process compares the scores it kept inside a band with those exact scores
   (:meth:`~rankstream.core.backends.catalog.counting.CatalogCounts.settle`), and the SUM of the settled
   ``above``, ``tied``, ``tied_before``, the excluded counts and the items counted is the count
   over the whole catalog: exactly what one process counting every chunk gets.

A failure on one process (NaN scores in its shard, a scorer returning a wrong shape) is carried
by the next reduction as a flag, so every process raises (the failing one its own error, the
others a ``ValueError`` saying another process failed) and none waits forever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rankstream.core.backends.catalog.counting import CatalogCounts
from rankstream.core.backends.catalog.scoring import EmbeddingScorer

Reduce = Callable[[np.ndarray], np.ndarray]


def _index(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


class ShardScorer:
    """The scorer of one process's shard ``[start, stop)`` of a catalog of ``num_items``:
    ``inner`` an :class:`~rankstream.core.backends.catalog.scoring.EmbeddingScorer` of the shard's
    ``stop - start`` embeddings (row ``i`` is item ``start + i``), or a
    :class:`~rankstream.core.backends.catalog.scoring.CallableScorer` called with the global item ids of
    the shard. ``reduce`` sums a float64 array over the processes."""

    def __init__(self, inner: Any, start: int, stop: int, num_items: int, reduce: Reduce) -> None:
        start, stop, num_items = _index(start, "shard start"), _index(stop, "shard stop"), _index(
            num_items, "num_items"
        )  # fmt: skip
        if not start <= stop <= num_items:
            raise ValueError(
                f"shard must be (start, stop) with 0 <= start <= stop <= num_items={num_items}, "
                f"got ({start}, {stop})"
            )
        self.embedded = isinstance(inner, EmbeddingScorer)
        if self.embedded and inner.num_items != stop - start:
            raise ValueError(
                f"items must hold the shard's {stop - start} embeddings (items {start} to {stop - 1}), "
                f"got {inner.num_items} rows"
            )
        if not callable(reduce):
            raise TypeError(f"reduce must be a callable summing an array over processes, got {reduce!r}")
        self.inner, self.start, self.stop, self.num_items = inner, start, stop, num_items
        self.shift = start if self.embedded else 0  # global id - shift = the inner scorer's id
        self.reduce, self.dtype = reduce, inner.dtype

    def queries(self, queries: Any) -> Any:
        return self.inner.queries(queries)

    @property
    def writes_into(self) -> bool:
        return bool(getattr(self.inner, "writes_into", False))

    def chunk(self, queries: Any, start: int, stop: int, rows: int, out: Any = None) -> Any:
        if out is None:
            return self.inner.chunk(queries, start - self.shift, stop - self.shift, rows)
        return self.inner.chunk(queries, start - self.shift, stop - self.shift, rows, out=out)

    def summed(self, parts: list[np.ndarray], failure: BaseException | None) -> list[np.ndarray]:
        """``parts`` summed over the processes (one reduction), after a failure flag: raises on
        every process where any failed."""
        flat = np.concatenate([np.zeros(1) + (failure is not None)] + [p.reshape(-1) for p in parts])
        total = np.asarray(self.reduce(flat.astype(np.float64)), np.float64).reshape(-1)
        if total.shape != flat.shape:
            raise ValueError(f"reduce must return an array of shape {flat.shape}, got {total.shape}")
        if failure is not None:
            raise failure
        if total[0] > 0:
            raise ValueError(f"counting the catalog failed on {int(total[0])} other process(es)")
        out, at = [], 1
        for p in parts:
            out.append(total[at : at + p.size].reshape(p.shape))
            at += p.size
        return out

    def relevant(self, queries: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(t, band)`` as the inner scorer gives them, each slot's from the process holding its
        item (reduction 1)."""
        local = (ids >= self.start) & (ids < self.stop)
        t, bound = np.zeros(ids.shape), np.zeros(ids.shape)
        failure = None
        if local.any():
            try:
                sub = np.where(local, ids, self.start) - self.shift
                tt, bb = self.inner.relevant_each(queries, sub)
                t, bound = np.where(local, tt, 0.0), np.where(local, bb, 0.0)
            except (ValueError, TypeError) as exc:
                failure = exc
        t, bound, held = self.summed([t, bound, local.astype(np.float64)], failure)
        wrong = (ids >= 0) & (held != 1)
        if wrong.any():
            q, c = np.argwhere(wrong)[0]
            raise ValueError(
                f"relevant item {int(ids[q, c])} of query {q} lies in {int(held[q, c])} shards: the "
                "shards (start, stop) of the processes must cover the catalog once"
            )
        return t, bound.max(axis=1, initial=0.0)


def count_processes(batch: Any, chunk: int | None = None, memory: int | None = None) -> CatalogCounts:
    """The counts of ``batch`` (prepared with a :class:`ShardScorer`) over the whole catalog: this
    process's shard counted, the exact scores and the settled counts summed over the processes
    (reductions 2 and 3). Every process gets the same counts."""
    scorer: ShardScorer = batch.scorer
    q, m = batch.ids.shape
    failure, counts = None, None
    try:
        counts = batch.count(scorer.start, scorer.stop, chunk=chunk, memory=memory)
    except (ValueError, TypeError) as exc:
        failure = exc
    known = np.zeros((q, m), bool) if counts is None else ~np.isnan(counts.exact)
    mine = np.zeros((q, m)) if counts is None else np.where(known, counts.exact, 0.0)
    value, held = scorer.summed([mine, known.astype(np.float64)], failure)
    assert counts is not None  # a failure raised above
    exact = np.where(held > 0, value, np.nan)
    done = counts.settle(batch.ids, batch.present, exact)
    tied, before = done.tied, done.before
    assert tied is not None and before is not None
    parts = [done.above, tied, before, done.excluded.astype(np.float64), np.array([float(done.items)])]
    above, tied, before, excluded, items = scorer.summed(parts, None)
    return CatalogCounts(np.rint(above), exact, np.rint(excluded), int(np.rint(items[0])), [], tied, before)
