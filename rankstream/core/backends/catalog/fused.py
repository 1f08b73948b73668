"""One chunk's counts in one compiled pass per query row (numba, where it is installed): the
same counts as numpy's passes (:class:`~rankstream.core.backends.catalog.counting._NumpyPasses`:
:func:`~rankstream.core.backends.catalog.comparisons.count_chunk` then
:func:`~rankstream.core.backends.catalog.comparisons.place`), without the comparison flags,
candidate arrays and per-chunk numpy calls between them (the kernels: ``fused_kernels.py``).

Per query row ``i`` of the chunk ``x`` ``(Q, W)``, with its slots' sorted edges ``lo``, ``hi``
``(Q, M)`` (the bands', :func:`~rankstream.core.backends.catalog.comparisons.edges_in`; padding
``+inf``), first, apart from the counting loops:

* the exact scores of its slots whose items are in the chunk are read from it, and its edges
  narrowed to every exact score known (:func:`~rankstream.core.backends.catalog.comparisons.exact_edges`
  on one row);
* its split ``D``: the least ``2 d SIZES.catalog_fused_dense_cost + found_d`` over ``d`` (each
  dense slot costs two vectorised comparisons per score, a candidate its gathering; ``found_d``
  the scores per item at or above ``lo_d`` in the last chunk, in the first one on a sample).

Then its counts:

* each *dense* slot ``j < D``: ``above_j += #(x > hi_j)`` and ``g_j = #(x >= lo_j)`` in one loop
  the compiler vectorises; ``g_j - above_j = #(lo_j <= x <= hi_j)`` (``lo_j <= hi_j``), so the
  scores inside the band are looked for only where that is not 0 (kept aside);
* the *candidates*, the scores not below ``lo_D`` (``+inf`` where every slot is dense), NaN
  included (counted at the row's end: the caller raises), gathered with their columns; then
  each slot ``j >= D`` is counted over the gathered values as a dense slot over the row (the
  scores below ``lo_D`` are below its band: ``lo_D <= lo_j``).

``found_j`` (the next chunk's split) is ``#(x >= lo_j)`` per item of width. The comparisons are
those of numpy's passes, value for value, so the counts are the same integers
(``tests/test_catalog_engine.py`` runs every regime of both paths, on tie-heavy scores with NaN
and infinities, against the materialised matrix).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np

from rankstream.core import sizes as _sizes
from rankstream.core.backends.catalog.comparisons import ChunkTally, edges_in, exact_edges


@functools.cache
def kernels() -> Any:
    """The compiled kernels' module (``fused_kernels``), or None where numba cannot give them
    (numpy's passes count the same integers): not installed, a release that does not run on this
    numpy (its import fails), or nowhere to cache the compiled code (numba raises
    ``RuntimeError`` when neither the package's ``__pycache__`` nor a user cache directory is
    writable; ``NUMBA_CACHE_DIR`` names one)."""
    try:  # through sys.modules (``from package import`` would find a module imported before)
        return importlib.import_module("rankstream.core.backends.catalog.fused_kernels")
    except (ImportError, RuntimeError):
        return None


def available() -> bool:
    """Whether chunks are counted by the compiled kernel (numba installed and
    ``SIZES.catalog_fused`` on)."""
    return bool(_sizes.SIZES.catalog_fused) and kernels() is not None


class FusedCounter:
    """Counts a batch's chunks with :func:`kernels`: per query row, in the compiled pass, its
    relevant items' exact scores read from the chunk, its edges narrowed to them, its split,
    then its counts (numpy's path does each of these in a numpy call per chunk). Holds the
    sorted slots' item ids, each dtype's banded and narrowed edges, the exact scores found so
    far and the kept scores' buffers (grown when a chunk keeps more scores aside than they hold:
    that chunk is counted again).

    ``rows``: the batch's sorted slots (``order``, ``ids``, ``present``, ``lo64``, ``hi64``,
    ``pad``, as ``counting._Rows`` has them)."""

    def __init__(self, rows: Any) -> None:
        ids = np.take_along_axis(np.where(rows.present, rows.ids, -1), rows.order, axis=1)
        self._ids = np.ascontiguousarray(ids.astype(np.int64))
        self.rows = rows
        self.sorted_exact = np.full(ids.shape, np.nan)  # each sorted slot's score in its chunk
        self._edges: dict[Any, tuple[np.ndarray, ...]] = {}
        self._room = 0
        self._kept: tuple[np.ndarray, ...] = ()
        self._delta: np.ndarray | None = None  # the kernel's outputs, reused by the chunks
        self._found: list[np.ndarray] = []

    def edges(self, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` the sorted slots' edges in ``dtype``, narrowed to the exact scores known
        (those the chunks of other dtypes found are narrowed at the first chunk of this one)."""
        if dtype not in self._edges:
            rows = self.rows
            band_lo, band_hi = edges_in(dtype, rows.lo64, rows.hi64, rows.pad)
            lo, hi = exact_edges(band_lo, band_hi, self.sorted_exact)
            self._edges[dtype] = (band_lo, band_hi, lo.copy(), hi.copy())
        return self._edges[dtype][2], self._edges[dtype][3]

    def count(self, x: np.ndarray, a: int, tally: ChunkTally) -> int:
        """Count the chunk ``x`` (items ``a...``) into ``tally``: ``above`` ``(Q, M)`` added to,
        ``found`` read (each row's split: the last chunk's) and written (this chunk's, per item
        of width), the kept scores ``(row, sorted slot, value, item, weight)`` appended; the
        exact scores of the chunk's own slots recorded. Returns the number of NaN scores."""
        run = kernels().count_rows
        self.edges(x.dtype)
        band_lo, band_hi, lo, hi = self._edges[x.dtype]
        z = _sizes.SIZES
        if self._delta is None:
            self._delta = np.empty(tally.above.shape, np.int64)
            self._found = [np.empty(tally.above.shape), np.empty(tally.above.shape)]
        got = self._found[1] if tally.found is self._found[0] else self._found[0]  # not the split's
        while True:
            if not self._kept:
                room = max(self._room, z.catalog_fused_kept, 1)
                self._kept = (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.float64),
                              np.empty(room, np.int64))  # fmt: skip
                self._room = room
            kept, nan = run(
                x, a, self._ids, band_lo, band_hi, lo, hi, self.sorted_exact, tally.found,
                float(z.catalog_fused_dense_cost), z.catalog_fused_tile, self._delta, got, *self._kept,
            )  # fmt: skip
            if kept <= self._room:
                break
            self._room, self._kept = kept, ()  # too few: count the chunk again with room for all
        tally.above += self._delta
        tally.found = got
        if kept:
            rows, slots, values, cols = (buf[:kept].copy() for buf in self._kept)
            tally.kept.append((rows, slots, values, cols + a, np.ones(kept)))
        return int(nan)

    def sample(self, x: np.ndarray) -> np.ndarray:
        """``(Q, M)`` the first chunk's split, estimated on a sample of its items
        (``SIZES.catalog_sample_step``)."""
        out = np.empty(self._ids.shape)
        kernels().sample_found(x, self.edges(x.dtype)[0], max(1, _sizes.SIZES.catalog_sample_step), out)
        return out

    def exact(self) -> np.ndarray:
        """``(Q, M)`` each slot's score in its own chunk, in the batch's order (NaN: not counted)."""
        rows = self.rows
        out = np.full(rows.ids.shape, np.nan)
        np.put_along_axis(out, rows.order, self.sorted_exact, axis=1)
        return out
