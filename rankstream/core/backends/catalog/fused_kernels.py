"""The compiled kernels of :mod:`rankstream.core.backends.catalog.fused` (numba, imported only
when a chunk is counted and numba is installed). A row is read ``tile`` scores at a time: its
dense slots' counting loops (vectorised by the compiler) and the gathering of its candidates run
over one tile while it is in the L1 cache; the candidates are found through one 64-bit word of
flags per block of ``BLOCK`` scores (a vectorised loop builds it, its set bits are visited with
no branch per score); then each other slot is counted over the row's gathered candidates. The
scan for the scores inside a band looks at a block only where a vectorised count found one.

Indices into a slice run from 0 (``seg[c]``, ``c in range(n)``): numba then knows them
non-negative and vectorises the loops (indexing a row from ``c0`` defeats it)."""

from __future__ import annotations

import numba
import numpy as np

#: the scores of a block: a rare scan's vectorised count looks at them before it looks at each
#: one, and the candidates' flags of a block are one 64-bit word (so at most 64)
BLOCK = 64

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)


@_jit
def _keep(i, j, v, c, kept, k_row, k_slot, k_value, k_col):
    """Record score ``v`` (row ``i``, column ``c``) kept aside for slot ``j``; the new count."""
    if kept < k_row.shape[0]:
        k_row[kept] = i
        k_slot[kept] = j
        k_value[kept] = v
        k_col[kept] = c
    return kept + 1


@_jit
def _band(seg, cols, i, j, low, high, kept, k_row, k_slot, k_value, k_col):
    """Keep aside the scores of ``seg`` (their columns ``cols``) inside ``[low, high]`` for slot
    ``j``, looking at each score of a block only where a vectorised count found one."""
    for b0 in range(0, seg.shape[0], BLOCK):
        sub = seg[b0 : b0 + BLOCK]
        hits = 0
        for c in range(sub.shape[0]):
            hits += (sub[c] >= low) & (sub[c] <= high)
        if hits:
            for c in range(sub.shape[0]):
                v = sub[c]
                if v >= low and v <= high:
                    kept = _keep(i, j, v, cols[b0 + c], kept, k_row, k_slot, k_value, k_col)
    return kept


#: de Bruijn's sequence for 64-bit words: the index of a word's lowest set bit ``low`` is
#: ``_DEBRUIJN[(low * _MAGIC) >> 58]`` (no intrinsic: numba's public API has none)
_MAGIC = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN = np.array(
    [0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22, 45, 39,
     33, 30, 24, 18, 12, 5, 63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40,
     15, 34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6],
    np.int64,
)  # fmt: skip


@_jit
def _candidates(seg, c0, t, n, cand_v, cand_c):
    """Append the scores of ``seg`` (columns ``c0...``) not below ``t`` to the row's candidates
    ``cand_v``, ``cand_c`` (``n`` so far); ``(n, nan)``, NaN counted and not appended. Each block
    of 64 scores gives a 64-bit word of its candidates (a vectorised loop), whose set bits are
    visited lowest first: no branch per score."""
    nan = 0
    one = np.uint64(1)
    for b0 in range(0, seg.shape[0], BLOCK):
        sub = seg[b0 : b0 + BLOCK]
        word = np.uint64(0)
        for c in range(sub.shape[0]):
            word |= np.uint64(not (sub[c] < t)) << np.uint64(c)
        while word:
            low = word & (~word + one)
            word ^= low
            c = _DEBRUIJN[(low * _MAGIC) >> np.uint64(58)]
            v = sub[c]
            if v != v:
                nan += 1
            else:
                cand_v[n] = v
                cand_c[n] = c0 + b0 + c
                n += 1
    return n, nan


@_jit
def _slot(seg, cols, i, j, low, high, kept, k_row, k_slot, k_value, k_col):
    """Slot ``j``'s counts over the scores ``seg`` (their columns ``cols``):
    ``(#(x > high), #(x >= low), kept)``, the scores inside ``[low, high]`` kept aside."""
    a = 0
    g = 0
    for c in range(seg.shape[0]):
        a += seg[c] > high
        g += seg[c] >= low
    if g > a:  # scores inside the band (low <= high): kept aside
        kept = _band(seg, cols, i, j, low, high, kept, k_row, k_slot, k_value, k_col)
    return a, g, kept


@_jit
def count_rows(x, lo, hi, dense, thr, tile, above, found, k_row, k_slot, k_value, k_col):
    """Count the chunk ``x`` ``(Q, W)`` (see :mod:`~rankstream.core.backends.catalog.fused`):
    ``above`` added to, ``found`` written (counts), the kept scores written while the buffers
    hold them; ``(kept, nan)``. Per row: its dense slots and its candidates' gathering tile by
    tile, then each other slot counted over the candidates (vectorised loops over a short
    array, not a placement per candidate)."""
    q, width = x.shape
    m = lo.shape[1]
    kept = 0
    nan = 0
    cand_v = np.empty(width, x.dtype)
    cand_c = np.empty(width, np.int64)
    cols = np.arange(width)
    for i in range(q):
        row = x[i]
        d = dense[i]
        n = 0
        for c0 in range(0, width, tile):
            seg = row[c0 : min(c0 + tile, width)]
            for j in range(d):
                out = k_row, k_slot, k_value, k_col
                a, g, kept = _slot(seg, cols[c0:], i, j, lo[i, j], hi[i, j], kept, *out)
                above[i, j] += a
                found[i, j] += g
            n, bad = _candidates(seg, c0, thr[i], n, cand_v, cand_c)
            nan += bad
        for j in range(d, m):
            out = k_row, k_slot, k_value, k_col
            a, g, kept = _slot(cand_v[:n], cand_c, i, j, lo[i, j], hi[i, j], kept, *out)
            above[i, j] += a
            found[i, j] = g
    return kept, nan
