"""The whole-catalog path: a batch of queries with their relevant item ids, counted against a
catalog scored chunk by chunk (:mod:`~rankstream.core.backends.catalog.counting`), into the relevant-ranks
producer of the list metrics (:mod:`rankstream.core.relevant`). Public as :mod:`rankstream.catalog`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.backends.catalog.budget import chunk_size
from rankstream.core.backends.catalog.counting import CatalogCounts, count_shard
from rankstream.core.backends.catalog.relevant_inputs import check_disjoint, excluded_pairs, relevant_slots
from rankstream.core.backends.catalog.scoring import CallableScorer, EmbeddingScorer
from rankstream.core.backends.catalog.shards import ShardScorer, count_processes
from rankstream.core.relevant.ranks import RelevantRanks

__all__ = ["CallableScorer", "CatalogBatch", "CatalogCounts", "EmbeddingScorer", "ShardScorer", "prepare"]


@dataclass
class CatalogBatch:
    """One batch, checked: the scorer's view of the queries, the slots ``(Q, M)`` (ids,
    ``present``, labels), the excluded pairs, and each slot's score alone with its band."""

    scorer: Any
    queries: Any
    ids: np.ndarray
    present: np.ndarray
    labels: np.ndarray
    ex_query: np.ndarray
    ex_item: np.ndarray
    approx: np.ndarray
    band: np.ndarray

    @property
    def num_queries(self) -> int:
        return int(self.ids.shape[0])

    def count(
        self, start: int = 0, stop: int | None = None, chunk: int | None = None, memory: int | None = None
    ) -> CatalogCounts:
        """The counts over the items ``[start, stop)`` (default: the whole catalog), ``chunk``
        items at a time (default: as many as ``memory`` bytes hold, :func:`chunk_size`)."""
        n = self.scorer.num_items
        stop = n if stop is None else stop
        for name, value in (("start", start), ("stop", stop)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= n:
                raise ValueError(f"{name} must be an item index in [0, {n}], got {value!r}")
        if stop < start:
            raise ValueError(f"stop must be >= start, got start={start}, stop={stop}")
        size = chunk_size(self.num_queries, max(stop - start, 1), memory, chunk)
        return count_shard(
            self.scorer, self.queries, self.ids, self.present, self.approx, self.band,
            start, stop, size, self.ex_query, self.ex_item,
        )  # fmt: skip

    def count_all(self, chunk: int | None = None, memory: int | None = None) -> CatalogCounts:
        """The counts over the whole catalog: every chunk here, or, with a
        :class:`~rankstream.core.backends.catalog.shards.ShardScorer`, this process's shard with the other
        processes' summed in (a collective: every process calls it with the same batch)."""
        if isinstance(self.scorer, ShardScorer):
            return count_processes(self, chunk, memory)
        return self.count(chunk=chunk, memory=memory)

    def ranks(self, counts: CatalogCounts, ties: str = "first", generator: Any = None) -> RelevantRanks:
        """The relevant ranks of the batch from counts covering the whole catalog."""
        above, tied, before, n = counts.resolve(
            self.ids, self.present, self.scorer.num_items, self.approx, self.band
        )
        return RelevantRanks(
            above, tied, before, self.labels, n, self.present, ties=ties, generator=generator
        )


def prepare(
    scorer: Any, queries: Any, relevant: Any, grades: Any = None, exclude: Any = None
) -> CatalogBatch:
    """Check and normalise one batch (nothing is counted yet)."""
    n = scorer.num_items
    ids, present, labels = relevant_slots(relevant, n, grades)
    q = ids.shape[0]
    if isinstance(scorer, EmbeddingScorer) or getattr(scorer, "embedded", False):
        queries = scorer.queries(queries)
        if int(queries.shape[0]) != q:
            raise ValueError(f"relevant must hold one row per query ({int(queries.shape[0])}), got {q}")
    ex_query, ex_item = excluded_pairs(exclude, q, n)
    check_disjoint(ids, present, ex_query, ex_item)
    if q == 0 or ids.shape[1] == 0:
        approx, band = np.zeros(ids.shape), np.zeros(q)
    else:
        approx, band = scorer.relevant(queries, ids)
    return CatalogBatch(scorer, queries, ids, present, labels, ex_query, ex_item, approx, band)
