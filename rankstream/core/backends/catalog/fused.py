"""One chunk's counts in one compiled pass per query row (numba, where it is installed): the
same counts as :func:`~rankstream.core.backends.catalog.comparisons.count_chunk` followed by
:func:`~rankstream.core.backends.catalog.comparisons.place`, without the comparison flags and
candidate arrays numpy has to write between them (the kernels: ``fused_kernels.py``).

Per query row ``i`` of the chunk ``x`` ``(Q, W)`` with its sorted edges ``lo``, ``hi`` ``(Q, M)``
(:func:`~rankstream.core.backends.catalog.comparisons.edges_in`, narrowed by
:func:`~rankstream.core.backends.catalog.comparisons.exact_edges`; padding ``+inf``) and its split
``D`` (:func:`splits`):

* each *dense* slot ``j < D``: ``above_j += #(x > hi_j)`` and ``g_j = #(x >= lo_j)`` in one loop
  the compiler vectorises; ``g_j - above_j = #(lo_j <= x <= hi_j)`` (``lo_j <= hi_j``), so the
  scores inside the band are looked for only where that is not 0 (kept aside);
* the *candidates*, the scores not below ``lo_D`` (``+inf`` where every slot is dense), NaN
  included: a NaN is counted (the caller raises), every other is gathered with its column; then
  each slot ``j >= D`` is counted over the gathered values as a dense slot over the row (the
  scores below ``lo_D`` are below its band: ``lo_D <= lo_j``).

``found_j`` (the next chunk's split) is ``#(x >= lo_j)`` per item of width, as numpy's path
records it. The comparisons are those of the numpy path, value for value, so the counts are the
same integers (``tests/test_catalog_engine.py`` runs every regime of both paths, on tie-heavy
scores with NaN and infinities, against the materialised matrix).

The split ``D`` per row: the least ``2 d SIZES.catalog_fused_dense_cost + found_d`` over ``d``
(each dense slot costs two vectorised comparisons per score; a candidate costs its gathering,
``found_d`` the scores per item at or above ``lo_d`` in the last chunk).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rankstream.core import sizes as _sizes


@functools.cache
def kernel() -> Any:
    """The compiled counting kernel, or None where numba cannot give it (numpy's passes count
    the same integers): not installed, a release that does not run on this numpy (its import
    fails), or nowhere to cache the compiled code (numba raises ``RuntimeError`` when neither the
    package's ``__pycache__`` nor a user cache directory is writable; ``NUMBA_CACHE_DIR`` names
    one)."""
    try:
        from rankstream.core.backends.catalog.fused_kernels import count_rows
    except (ImportError, RuntimeError):
        return None
    return count_rows


def available() -> bool:
    """Whether chunks are counted by the compiled kernel (numba installed and
    ``SIZES.catalog_fused`` on)."""
    return bool(_sizes.SIZES.catalog_fused) and kernel() is not None


def splits(found: np.ndarray) -> np.ndarray:
    """``(Q,)`` each row's number of dense slots ``D``: the least ``2 d c + found_d`` over ``d`` in
    ``0 .. M`` (``c`` = ``SIZES.catalog_fused_dense_cost``; ``found`` ``(Q, M)`` per item of width,
    ``found_M`` = 0)."""
    q, m = found.shape
    cost = np.concatenate([found, np.zeros((q, 1))], axis=1)
    cost = cost + 2.0 * _sizes.SIZES.catalog_fused_dense_cost * np.arange(m + 1)[None, :]
    return np.argmin(cost, axis=1).astype(np.int64)


class FusedCounter:
    """Counts chunks with :func:`kernel`, holding its output buffers between chunks (grown when a
    chunk keeps more scores aside than they hold: that chunk is counted again)."""

    def __init__(self) -> None:
        self._room = 0
        self._kept: tuple[np.ndarray, ...] = ()

    def count(
        self, x: np.ndarray, a: int, lo: np.ndarray, hi: np.ndarray, dense: np.ndarray, above: np.ndarray,
        found: np.ndarray,
    ) -> tuple[int, list[tuple[np.ndarray, ...]]]:  # fmt: skip
        """Count the chunk ``x`` (items ``a...``): ``above`` ``(Q, M)`` int64 added to, ``found``
        ``(Q, M)`` float64 written (per item of width); returns the NaN count and the kept scores
        ``[(row, sorted slot, value, item, weight)]``."""
        q, width = x.shape
        m = lo.shape[1]
        run = kernel()
        # each row's candidate threshold: its lower edge D, +inf where every slot is dense
        pad = np.concatenate([lo, np.full((q, 1), np.inf, lo.dtype)], axis=1)
        thr = np.ascontiguousarray(np.take_along_axis(pad, dense[:, None], axis=1)[:, 0])
        while True:
            if not self._kept:
                room = max(self._room, _sizes.SIZES.catalog_fused_kept, 1)
                self._kept = (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.float64),
                              np.empty(room, np.int64))  # fmt: skip
                self._room = room
            delta = np.zeros((q, m), np.int64)
            got = np.zeros((q, m), np.int64)
            kept, nan = run(x, lo, hi, dense, thr, _sizes.SIZES.catalog_fused_tile, delta, got, *self._kept)
            if kept <= self._room:
                break
            self._room, self._kept = kept, ()  # too few: count the chunk again with room for all
        above += delta
        found[:] = got / max(width, 1)
        rows, slots, values, cols = (buf[:kept].copy() for buf in self._kept)
        return int(nan), [(rows, slots, values, cols + a, np.ones(kept))] if kept else []
