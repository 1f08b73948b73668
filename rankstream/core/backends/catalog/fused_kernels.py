"""The compiled kernels of :mod:`rankstream.core.backends.catalog.fused` (numba, imported only
when a chunk is counted and numba is installed). Each row's exact scores, narrowed edges and
split are found in a loop of their own before the counting loops (inside them, they slowed
those down). A row is read ``tile`` scores at a time: its dense slots' counting loops
(vectorised by the compiler, 32-bit counters) and the gathering of its candidates run over one
tile while it is in the L1 cache; the candidates are found through one 64-bit word of flags per
block of ``BLOCK`` scores (a vectorised loop with a constant trip count builds the tile's words,
their set bits are visited with no branch per score); then each other slot is counted over the
row's gathered candidates. The scan for the scores inside a band looks at a block only where a
vectorised count found one.

Indices into a slice run from 0 (``seg[c]``, ``c in range(n)``): numba then knows them
non-negative and vectorises the loops (indexing a row from ``c0`` defeats it). The hot loops
take an array and a length, not a slice per call: a slice costs its reference counting, which
at a trained model's ranks (a few candidates a row) cost more than the counting."""

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
def _count(v, n, low, high):
    """``(#(v > high), #(v >= low))`` over ``v[:n]`` (one vectorised loop; ``n`` passed, not a
    slice: a slice per slot and row cost more than the counting at a trained model's ranks)."""
    a = np.int32(0)
    g = np.int32(0)
    for c in range(n):  # 32-bit counters (n < 2**31): twice the lanes of numba's 64-bit sums
        a = np.int32(a + (v[c] > high))
        g = np.int32(g + (v[c] >= low))
    return a, g


@_jit
def _words(seg, t, words):
    """``words[b]``: the 64-bit word of flags ``not (x < t)`` of each whole block of ``BLOCK``
    scores of ``seg`` (a constant trip count: the compiler vectorises it); the number of blocks."""
    nb = seg.shape[0] // BLOCK
    for b in range(nb):
        sub = seg[b * BLOCK : b * BLOCK + BLOCK]
        word = np.uint64(0)
        for c in range(BLOCK):
            word |= np.uint64(not (sub[c] < t)) << np.uint64(c)
        words[b] = word
    return nb


@_jit
def _gather(seg, c0, t, words, nz, n, cand_v, cand_c):
    """Append the scores of ``seg`` (columns ``c0...``) not below ``t`` (NaN included) to the
    row's candidates ``cand_v``, ``cand_c`` (``n`` so far); the new ``n``. Each whole block's word
    of flags (:func:`_words`) with a bit set (``nz``: their list) has its set bits visited lowest
    first (no branch per score); the last partial block is looked at score by score."""
    nb = _words(seg, t, words)
    one = np.uint64(1)
    k = 0
    for b in range(nb):  # the blocks with a candidate, listed without a branch (fewer mispredicted)
        nz[k] = b
        k += words[b] != 0
    for kk in range(k):
        b = nz[kk]
        word = words[b]
        while word:
            low = word & (~word + one)
            word ^= low
            c = b * BLOCK + _DEBRUIJN[(low * _MAGIC) >> np.uint64(58)]
            cand_v[n] = seg[c]
            cand_c[n] = c0 + c
            n += 1
    for c in range(nb * BLOCK, seg.shape[0]):
        if not (seg[c] < t):
            cand_v[n] = seg[c]
            cand_c[n] = c0 + c
            n += 1
    return n


@_jit
def _known(x, i, a, ids, band_lo, band_hi, lo, hi, exact, tmp):
    """Record the exact scores of row ``i``'s slots whose items are in the chunk ``x`` (items
    ``a...``) in ``exact``; where there are any, narrow the row's edges ``lo``, ``hi`` (the banded
    ones ``band_lo``, ``band_hi`` with every exact score known: ``comparisons.exact_edges``)."""
    m = ids.shape[1]
    new = False
    for j in range(m):
        s = ids[i, j] - a
        if s >= 0 and s < x.shape[1]:
            exact[i, j] = x[i, s]
            new = True
    if not new:
        return
    for j in range(m):
        tmp[j] = exact[i, j]  # in the chunk's dtype; known where that is exact (not NaN, not rounded)
    run = tmp[m - 1] if tmp[m - 1] == exact[i, m - 1] else band_lo[i, m - 1]
    for j in range(m - 1, -1, -1):  # lo'_j = min over k >= j (the known: their exact scores)
        v = tmp[j] if tmp[j] == exact[i, j] else band_lo[i, j]
        run = v if v < run else run
        lo[i, j] = run
    run = tmp[0] if tmp[0] == exact[i, 0] else band_hi[i, 0]
    for j in range(m):  # hi'_j = max over k <= j
        v = tmp[j] if tmp[j] == exact[i, j] else band_hi[i, j]
        run = v if v > run else run
        hi[i, j] = run


@_jit
def _split(found, i, c):
    """Row ``i``'s number of dense slots: the least ``2 d c + found_d`` over ``d`` in ``0 .. M``
    (``found_M`` = 0), the first where several are least."""
    m = found.shape[1]
    best = 0
    least = found[i, 0] if m else 0.0
    for d in range(1, m + 1):
        cost = 2.0 * d * c + (found[i, d] if d < m else 0.0)
        if cost < least:
            best, least = d, cost
    return best


@_jit
def count_rows(x, a, ids, band_lo, band_hi, lo, hi, exact, split, c, tile, above, found, *out):
    """Count the chunk ``x`` ``(Q, W)`` of items ``a...`` (see
    :mod:`~rankstream.core.backends.catalog.fused`). Per row: the exact scores of its slots in the
    chunk (``ids``, its sorted slots' items, -1 for padding) recorded in ``exact`` and its edges
    ``lo``, ``hi`` narrowed to them (:func:`_known`); its dense slots ``D`` from ``split`` (the
    last chunk's ``found``, :func:`_split`); its dense slots and its candidates' gathering tile by
    tile, then each other slot counted over the candidates (vectorised loops over a short array,
    not a placement per candidate). ``above`` and ``found`` (per item of width) written, the
    kept scores written while the buffers ``out`` (row, slot, value, column) hold them; returns
    ``(kept, nan)``. A NaN score is gathered as a candidate (no slot counts it: every comparison
    with NaN is false) and counted at the row's end: the candidates not at or above the
    threshold."""
    q, width = x.shape
    m = lo.shape[1]
    kept = 0
    nan = 0
    cand_v = np.empty(width, x.dtype)
    cand_c = np.empty(width, np.int64)
    words = np.empty(tile // BLOCK + 1, np.uint64)
    nz = np.empty(tile // BLOCK + 1, np.int64)
    tmp = np.empty(max(m, 1), x.dtype)
    cols = np.arange(width)
    dense = np.empty(q, np.int64)
    thr = np.empty(q, x.dtype)  # the candidates' threshold, in the chunk's dtype
    for i in range(q):  # apart from the counting loops (inside them, they slowed them down)
        _known(x, i, a, ids, band_lo, band_hi, lo, hi, exact, tmp)
        dense[i] = _split(split, i, c)
        thr[i] = lo[i, dense[i]] if dense[i] < m else np.inf
    for i in range(q):
        row = x[i]
        d = dense[i]
        t = thr[i]
        n = 0
        for j in range(m):
            above[i, j] = 0
            found[i, j] = 0.0
        for c0 in range(0, width, tile):
            seg = row[c0 : min(c0 + tile, width)]
            for j in range(d):
                a_, g = _count(seg, seg.shape[0], lo[i, j], hi[i, j])
                if g > a_:  # scores inside the band (lo <= hi): kept aside
                    kept = _band(seg, cols[c0:], i, j, lo[i, j], hi[i, j], kept, *out)
                above[i, j] += a_
                found[i, j] += g
            n = _gather(seg, c0, t, words, nz, n, cand_v, cand_c)
        for j in range(d, m):
            a_, g = _count(cand_v, n, lo[i, j], hi[i, j])
            if g > a_:
                kept = _band(cand_v[:n], cand_c, i, j, lo[i, j], hi[i, j], kept, *out)
            above[i, j] += a_
            found[i, j] = g
        for j in range(m):
            found[i, j] /= max(width, 1)
        if n:
            nan += n - _count(cand_v, n, t, t)[1]
    return kept, nan


@_jit
def sample_found(x, lo, step, out):
    """``out`` ``(Q, M)``: per row of the chunk ``x`` and sorted slot, the scores at or above its
    lower edge ``lo`` per item of width, estimated on every ``step``-th item (the first chunk's
    split, before any chunk was counted)."""
    q, width = x.shape
    m = lo.shape[1]
    k = (width + step - 1) // step
    part = np.empty(max(k, 1), x.dtype)
    for i in range(q):
        for c in range(k):
            part[c] = x[i, c * step]
        for j in range(m):
            out[i, j] = _count(part, k, lo[i, j], lo[i, j])[1] / max(k, 1)
