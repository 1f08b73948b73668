"""The catalog path's chunk size, from the sizes of :mod:`rankstream.core.sizes` (the one owner of
every size: ``catalog_memory``, ``catalog_bytes_per_score``, ``catalog_max_chunk_scores``,
``catalog_min_chunk``, and the counting's own, read there at call time, so a test that replaces
``sizes.SIZES`` changes them).

* :data:`MEMORY_BUDGET`: the default bytes of one chunk of scores and its temporaries (public as
  ``rankstream.catalog.MEMORY_BUDGET``; the value is ``SIZES.catalog_memory``);
  :func:`chunk_size` turns a budget into a number of items per chunk for a batch of queries (the
  user sets either through ``memory=`` or ``chunk_size=``).
"""

from __future__ import annotations

from rankstream.core import sizes as _sizes

#: bytes of one chunk of scores with its temporaries (default of ``memory=``; read from
#: :data:`rankstream.core.sizes.SIZES` ``.catalog_memory``)
MEMORY_BUDGET = _sizes.SIZES.catalog_memory


def chunk_size(num_queries: int, num_items: int, memory: int | None = None, chunk: int | None = None) -> int:
    """Items per chunk: ``chunk`` if given, else as many as ``memory`` bytes (default
    ``SIZES.catalog_memory``) hold at ``SIZES.catalog_bytes_per_score`` per score for
    ``num_queries`` queries, and no more than ``SIZES.catalog_max_chunk_scores`` scores; at least
    ``SIZES.catalog_min_chunk``, at most the catalog."""
    z = _sizes.SIZES
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk!r}")
        return max(1, min(chunk, max(num_items, 1)))
    memory = z.catalog_memory if memory is None else memory
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
        raise ValueError(f"memory must be a positive number of bytes, got {memory!r}")
    rows = max(num_queries, 1)
    fit = min(memory // (z.catalog_bytes_per_score * rows), z.catalog_max_chunk_scores // rows)
    return max(z.catalog_min_chunk, min(int(fit), max(num_items, 1)))
