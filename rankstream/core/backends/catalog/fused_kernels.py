"""The compiled kernels of :mod:`rankstream.core.backends.catalog.fused` (numba, imported only
when a chunk is counted and numba is installed). A row is read ``tile`` scores at a time: its
dense slots' counting loops (vectorised by the compiler) and the candidates' scan run over one
tile while it is in the L1 cache; the rare scans (the scores inside a band, the candidates) look
at a block of ``BLOCK`` scores only where a vectorised count over the block found one.

Indices into a slice run from 0 (``seg[c]``, ``c in range(n)``): numba then knows them
non-negative and vectorises the loops (indexing a row from ``c0`` defeats it)."""

from __future__ import annotations

import numba
import numpy as np

#: the scores a rare scan's vectorised count looks at before it looks at each one
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
def _band(seg, c0, i, j, low, high, kept, k_row, k_slot, k_value, k_col):
    """Keep aside the scores of ``seg`` (columns ``c0...``) inside ``[low, high]`` for slot ``j``."""
    for b0 in range(0, seg.shape[0], BLOCK):
        sub = seg[b0 : b0 + BLOCK]
        hits = 0
        for c in range(sub.shape[0]):
            hits += (sub[c] >= low) & (sub[c] <= high)
        if hits:
            for c in range(sub.shape[0]):
                v = sub[c]
                if v >= low and v <= high:
                    kept = _keep(i, j, v, c0 + b0 + c, kept, k_row, k_slot, k_value, k_col)
    return kept


@_jit
def _candidates(seg, c0, i, d, t, lo, hi, past, at_lo, idx, kept, k_row, k_slot, k_value, k_col):
    """Place the scores of ``seg`` not below ``t`` among row ``i``'s edges from slot ``d`` on:
    bucket ``p = #(hi_j < v)`` in ``past``, ``e = #(lo_j <= v)`` in ``at_lo``, the bands ``p .. e - 1``
    keep it aside; ``(kept, nan)``. A block with a candidate is compacted into ``idx`` without
    branches (a branch per score mispredicts where many are candidates)."""
    m = lo.shape[1]
    nan = 0
    for b0 in range(0, seg.shape[0], BLOCK):
        sub = seg[b0 : b0 + BLOCK]
        hits = 0
        for c in range(sub.shape[0]):
            hits += not (sub[c] < t)
        if not hits:
            continue
        k = 0
        for c in range(sub.shape[0]):
            idx[k] = c
            k += not (sub[c] < t)
        for h in range(k):
            c = idx[h]
            v = sub[c]
            if v != v:
                nan += 1
                continue
            p = d
            e = d
            for j in range(d, m):  # the sorted edges below v, counted without branches
                p += hi[i, j] < v
                e += lo[i, j] <= v
            past[p] += 1
            at_lo[e] += 1
            for j in range(p, e):
                kept = _keep(i, j, v, c0 + b0 + c, kept, k_row, k_slot, k_value, k_col)
    return kept, nan


@_jit
def count_rows(x, lo, hi, dense, thr, tile, above, found, k_row, k_slot, k_value, k_col):
    """Count the chunk ``x`` ``(Q, W)`` (see :mod:`~rankstream.core.backends.catalog.fused`):
    ``above`` added to, ``found`` written (counts), the kept scores written while the buffers
    hold them; ``(kept, nan)``."""
    q, width = x.shape
    m = lo.shape[1]
    kept = 0
    nan = 0
    past = np.zeros(m + 1, np.int64)
    at_lo = np.zeros(m + 1, np.int64)
    idx = np.zeros(BLOCK, np.int64)
    for i in range(q):
        row = x[i]
        d = dense[i]
        past[:] = 0
        at_lo[:] = 0
        for c0 in range(0, width, tile):
            seg = row[c0 : min(c0 + tile, width)]
            for j in range(d):
                low = lo[i, j]
                high = hi[i, j]
                a = 0
                g = 0
                for c in range(seg.shape[0]):
                    a += seg[c] > high
                    g += seg[c] >= low
                above[i, j] += a
                found[i, j] += g
                if g > a:  # scores inside the band (lo <= hi)
                    kept = _band(seg, c0, i, j, low, high, kept, k_row, k_slot, k_value, k_col)
            kept, n = _candidates(
                seg, c0, i, d, thr[i], lo, hi, past, at_lo, idx, kept, k_row, k_slot, k_value, k_col
            )
            nan += n
        s_past = 0  # a candidate with p edges below is above the slots d .. p - 1
        s_lo = 0
        for j in range(m - 1, d - 1, -1):
            s_past += past[j + 1]
            s_lo += at_lo[j + 1]
            above[i, j] += s_past
            found[i, j] = s_lo
    return kept, nan
