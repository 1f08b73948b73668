"""The catalog path's sizes, in one place (until the project's one owner of sizes lands, they
live here and nowhere else in the catalog code).

* :data:`MEMORY_BUDGET`: the bytes one chunk of scores and its temporaries may hold, by default;
  :func:`chunk_size` turns it into a number of items per chunk for a batch of queries (the user
  sets either through ``memory=`` or ``chunk_size=``).
* :data:`BYTES_PER_SCORE`: what one score of a chunk costs at the peak: the score (4 or 8 bytes),
  its candidate flag, and a share of the candidate arrays (index and value of each score at or
  above a query's lowest relevant score).
* :data:`CANDIDATE_BLOCK`: candidates compared with the thresholds at a time (their ``(block,
  M)`` gathers stay small).
* :data:`CALLABLE_BAND`: for a user's scorer, the relative width of the band around a relevant
  item's score (taken once for the batch) inside which a catalog score is kept aside and compared
  with the exact score of the item's own chunk (for embeddings the band is the dot product's
  rounding bound instead, :func:`~rankstream.core.backends.catalog.scoring.EmbeddingScorer.band`).
"""

from __future__ import annotations

#: bytes of one chunk of scores with its temporaries (default of ``memory=``)
MEMORY_BUDGET = 256 << 20
#: bytes one score of a chunk holds at the peak (score, flag, candidate share; float64 scores)
BYTES_PER_SCORE = 24
#: candidates compared with the relevant scores at a time
CANDIDATE_BLOCK = 1 << 16
#: a chunk whose candidates, times this, exceed its scores times the slots per query is counted
#: slot by slot (two comparisons per slot over row blocks held in the cache) instead of
#: candidate by candidate (a gather and two binary searches each): the candidate way costs
#: about this many times one slot's comparisons per score. Measured at 1,024 x 20,000 x 64
#: with 10 relevant items inside each query's top x% (see docs/catalog.md)
DENSE_SHARE = 150
#: rows of a chunk compared with every slot's band edges at a time (slot by slot): a block of
#: this many rows of a chunk of ~10,000 float32 scores (2.6 MiB) stays in a core's cache
ROW_BLOCK = 64
#: chunks between two returns of the C heap's freed pages to the system
#: (:func:`~rankstream.core.backends.catalog.counting.release_freed`; about 7 MiB of holes per chunk at
#: 1,024 queries, 4 ms per trim)
TRIM_EVERY = 8
#: the most scores one chunk holds whatever the budget: a chunk of 1,024 queries x 10,922 items
#: (44 MiB, what 256 MiB allow) ran its matrix product 2.4 to 3.3 times slower than chunks of
#: 4,096 items (16 MiB) on one thread (1,024 x 100,000 x 64), and the counting 12-37% slower
#: end to end: the products' output and the comparisons stay in the caches
MAX_CHUNK_SCORES = 4 << 20
#: relative half-width of the band around a relevant score for a user's scorer
CALLABLE_BAND = 1e-4
#: the fewest items a chunk holds when the budget allows fewer (one query row of scores)
MIN_CHUNK = 1


def chunk_size(num_queries: int, num_items: int, memory: int | None = None, chunk: int | None = None) -> int:
    """Items per chunk: ``chunk`` if given, else as many as ``memory`` bytes (default
    :data:`MEMORY_BUDGET`) hold at :data:`BYTES_PER_SCORE` per score for ``num_queries``
    queries, and no more than :data:`MAX_CHUNK_SCORES` scores; at least :data:`MIN_CHUNK`, at
    most the catalog."""
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk!r}")
        return max(1, min(chunk, max(num_items, 1)))
    memory = MEMORY_BUDGET if memory is None else memory
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
        raise ValueError(f"memory must be a positive number of bytes, got {memory!r}")
    fit = min(memory // (BYTES_PER_SCORE * max(num_queries, 1)), MAX_CHUNK_SCORES // max(num_queries, 1))
    return max(MIN_CHUNK, min(int(fit), max(num_items, 1)))
