"""One chunk's counts: each score compared with the band edges of its query's slots.

For a query's slots sorted by their scores alone ``t'_0 <= t'_1 <= ...`` (padding last, at
``+inf``), each with the band ``[lo_j, hi_j] = [t'_j - b, t'_j + b]``, a chunk's score ``x`` is
*above* slot ``j`` where ``x > hi_j``, *inside* its band where ``lo_j <= x <= hi_j`` (kept aside
with its value and item: compared with the slot's exact score at the end), below otherwise. The
edges are taken in the chunk's dtype rounded so that the comparisons mean the same
(:func:`edges_in`): ``x < lo`` as ``x < up(lo)``, ``x <= hi`` as ``x <= down(hi)``, exact.

Two ways share a chunk, per query at the same sorted slot ``D`` (:func:`choose_dense`):

* **dense** (slots ``j < D``, a query's lowest: many scores above them): every score is compared
  with ``lo_j`` and ``hi_j`` in one numpy call per block of rows into bytes, and the bytes are
  counted eight at a time (:func:`_true_counts`: the flags read as 64-bit words, summed in groups
  too small for a byte to carry, then folded). ``above_j = width - #(x <= hi_j)``;
  ``#(x < lo_j) < #(x <= hi_j)`` marks a slot with scores inside its band, and only those rows'
  flags are scanned for them;
* **candidates** (slots ``j >= D``): the same call compares every score with ``lo_D``; the
  scores not below it (few where the relevant items rank high), and every NaN, are the
  candidates: each is placed among its query's edges ``D...`` by two counts of the edges below it
  (sorted edges: the slots it is above, and the bands it is inside, :func:`place`).

NaN fails ``x < lo_D`` (and ``x < +inf`` where every slot is dense), so every NaN score is a
candidate: one check of the candidates' values finds it, with no pass of its own. The split ``D``
follows a cost model (:func:`choose_dense`) fed by the previous chunk's counts of scores at or
above each slot's lower edge (for the first chunk, those of a sample of its items,
:func:`sample_found`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core import sizes as _sizes

_BYTES = np.uint64(0x00FF00FF00FF00FF)
_PAIRS = np.uint64(0x0000FFFF0000FFFF)
_LOW = np.uint64(0xFFFFFFFF)
_ONES = np.uint64(0x0101010101010101)  # eight true bytes
_ZERO = np.uint64(0)


def edges_in(dtype: Any, lo: np.ndarray, hi: np.ndarray, pad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(up(lo), down(hi))`` in ``dtype``: the smallest value of the dtype ``>= lo`` (so ``x < lo``
    iff ``x < up(lo)`` for ``x`` of the dtype) and the largest ``<= hi`` (``x <= hi`` iff ``x <=
    down(hi)``); ``+inf`` where ``pad``."""
    with np.errstate(over="ignore"):
        up, down = lo.astype(dtype), hi.astype(dtype)
    up = np.where(up < lo, np.nextafter(up, dtype.type(np.inf)), up)
    down = np.where(down > hi, np.nextafter(down, dtype.type(-np.inf)), down)
    up[pad], down[pad] = np.inf, np.inf
    return np.ascontiguousarray(up), np.ascontiguousarray(down)


@dataclass
class ChunkTally:
    """What one shard's chunks add up, per sorted slot: ``above`` ``(Q, M)`` int64 (scores above
    the band), ``kept`` (the scores inside a band: ``(row, sorted slot, value, item, weight)``),
    and ``found`` ``(M,)``, the last chunk's scores at or above each slot's lower edge (all
    queries) over its width, for the next chunk's split."""

    above: np.ndarray
    kept: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    found: np.ndarray | None = None
    _buffers: dict[tuple[int, ...], tuple[Any, ...]] = field(default_factory=dict)

    def buffers(self, k: int, rows: int, width: int, groups: int, span: int) -> tuple[Any, Any]:
        """``(flags, words)``: a block's flags ``(k, rows, padded)`` (the padding false: not
        counted) and the same bytes as torch 64-bit words in groups; made once per shape and
        reused by the chunks (fresh pages for every chunk cost their faults each time, and
        fragment the heap)."""
        key = (k, rows, width, groups, span)
        if key not in self._buffers:
            import torch

            self._buffers.clear()
            flags = np.zeros((k, rows, groups * span * 8), dtype=bool)
            words = torch.from_numpy(flags.view(np.int64)).view(k, rows, groups, span)
            self._buffers[key] = (flags, words)
        return self._buffers[key]


def flag_bytes(q: int, width: int) -> int:
    """The bytes one block of rows' flags may hold for a chunk of ``q x width`` scores:
    ``SIZES.catalog_flag_bytes``, and at most ``SIZES.catalog_flag_bytes_per_score`` per score
    of the chunk (small chunks keep their budget)."""
    z = _sizes.SIZES
    return max(1, min(z.catalog_flag_bytes, z.catalog_flag_bytes_per_score * q * width))


def _layout(width: int) -> tuple[int, int, int]:
    """``(groups, span, padded)``: a row of ``width`` flag bytes as ``groups`` of ``span`` 64-bit
    words (at most 255: a byte of their sum never carries), ``padded`` bytes in all."""
    words = -(-width // 8)
    groups = -(-words // 255)
    span = -(-words // groups)
    return groups, span, groups * span * 8


def choose_dense(found: np.ndarray, q: int, width: int, deepest: int) -> int:
    """The sorted slot ``D`` below which a chunk is counted dense: each dense slot costs two
    comparisons of every score, each candidate ``SIZES.catalog_candidate_cost`` of them, and the
    candidates of ``D`` are (as the last chunk had them, per item of width) the scores at or
    above ``lo_D``. At most as many dense slots as one row's flags fit in :func:`flag_bytes`."""
    most = max(0, (flag_bytes(q, width) // _layout(width)[2] - 1) // 2)
    cost = _sizes.SIZES.catalog_candidate_cost
    d = np.arange(deepest + 1)
    cand = np.append(found[:deepest], 0.0) * width
    total = 2.0 * d * q * width + cost * cand
    total[d > most] = np.inf
    return int(np.argmin(total))


def sample_found(x: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Per sorted slot, the scores at or above its lower edge (all queries) per item of width,
    estimated on every ``SIZES.catalog_sample_step``-th item of the chunk ``x`` (the first
    chunk's split, before any chunk was counted)."""
    part = x[:, :: _sizes.SIZES.catalog_sample_step]
    below = np.less(part[None], lo.T[:, :, None])  # (deepest, Q, sampled)
    return np.array([below[j].size - np.count_nonzero(below[j]) for j in range(lo.shape[1])]) / max(
        part.shape[1], 1
    )


def count_chunk(
    x: np.ndarray, a: int, lo: np.ndarray, hi: np.ndarray, dense: int, tally: ChunkTally
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count the chunk ``x`` ``(Q, W)`` (items ``a...``) against the sorted edges ``lo``, ``hi``
    ``(Q, deepest)`` in its dtype (:func:`edges_in`): slots ``< dense`` dense, the rest by
    candidates. Adds to ``tally``; returns the candidates ``(rows, cols, values)`` (NaN among
    them where the chunk holds any) for :func:`place`."""
    q, width = x.shape
    deepest = lo.shape[1]
    thr = lo[:, dense] if dense < deepest else np.full(q, np.inf, x.dtype)
    low = np.concatenate([thr[None, :], lo[:, :dense].T])  # x < edge: (1 + D, Q)
    high = np.ascontiguousarray(hi[:, :dense].T)  # x <= edge: (D, Q)
    k = 1 + 2 * dense
    groups, span, padded = _layout(width)
    rows = max(1, min(q, flag_bytes(q, width) // (k * padded)))
    flags, summed = tally.buffers(k, rows, width, groups, span)
    words = flags.view(np.uint64)  # (k, rows, padded / 8)
    found = np.zeros(deepest)
    cand: list[tuple[np.ndarray, np.ndarray]] = []
    for r0 in range(0, q, rows):
        r1 = min(r0 + rows, q)
        n = r1 - r0
        part = x[r0:r1]
        np.less(part, low[:, r0:r1, None], out=flags[: 1 + dense, :n, :width])
        np.less_equal(part, high[:, r0:r1, None], out=flags[1 + dense :, :n, :width])
        true = _true_counts(summed[:, :n].sum(-1).numpy())  # (k, n)
        if (true[0] < width).any():  # the scores not below lo_D (or NaN): the false bytes
            rr, cc = _bytes_at(words[0, :n], padded, _ONES)
            keep = cc < width  # the padding is false too
            cand.append((rr[keep] + r0, cc[keep]))
        if dense:
            lt, le = true[1 : 1 + dense], true[1 + dense :]
            tally.above[r0:r1, :dense] += (width - le).T
            found[:dense] += (width - lt).sum(1)
            jj, ii = np.nonzero(le > lt)  # slots with scores inside their band
            if jj.size:  # x < lo false, x <= hi true
                p, col = _bytes_at(words[1 + jj, ii] ^ words[1 + dense + jj, ii], padded, _ZERO)
                row = ii[p] + r0
                tally.kept.append((row, jj[p], x[row, col].astype(np.float64), col + a, np.ones(p.size)))
    rows_c = np.concatenate([c[0] for c in cand]) if cand else np.zeros(0, np.int64)
    cols_c = np.concatenate([c[1] for c in cand]) if cand else np.zeros(0, np.int64)
    values = x[rows_c, cols_c]
    tally.found = found
    return rows_c, cols_c, values


def _bytes_at(words: np.ndarray, padded: int, flip: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """``(row, column)`` of the bytes of ``words ^ flip`` that are nonzero (``words``: 64-bit words
    of rows of ``padded`` bytes): the words that differ from ``flip`` first (an eighth of the
    bytes to scan, through a bool mask: numpy's fast scan), then the bytes of those."""
    flat = words.reshape(-1)
    nz = np.flatnonzero(flat != flip)
    at = np.flatnonzero((flat[nz] ^ flip).view(np.uint8))
    return np.divmod(nz[at // 8] * 8 + at % 8, padded)


def _true_counts(sums: np.ndarray) -> np.ndarray:
    """The number of true bytes per row from the sums of its flags read as 64-bit words in
    groups (last axis) of at most 255 words: every byte of a group's sum is a count <= 255,
    folded into 16-bit, then 32-bit lanes, then summed over the groups."""
    w = sums.view(np.uint64)
    w = (w & _BYTES) + ((w >> np.uint64(8)) & _BYTES)
    w = (w & _PAIRS) + ((w >> np.uint64(16)) & _PAIRS)
    w = w.sum(-1, dtype=np.uint64)
    return ((w & _LOW) + (w >> np.uint64(32))).astype(np.int64)


def place(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, first: int,
    weight: float, a: int, tally: ChunkTally, record: bool = False,
) -> None:  # fmt: skip
    """Each score ``values`` (query ``rows``, item ``a + cols``) placed among its query's sorted
    edges from slot ``first`` on: ``#(lo_j <= v)`` and ``#(hi_j < v)`` (both counts of sorted
    edges, so the bands it is inside are the slots between them); the slots it is above count
    ``weight`` each, the bands hold it aside. With ``record``, ``tally.found`` gets each slot's
    count of scores at or above its lower edge."""
    q, deepest = lo.shape
    slots = deepest - first
    if slots <= 0 or rows.size == 0:
        return
    lo_t, hi_t = np.ascontiguousarray(lo[:, first:].T), np.ascontiguousarray(hi[:, first:].T)
    step = max(1, _sizes.SIZES.catalog_candidate_values // slots)
    hist = np.zeros(q * (slots + 1))
    counts_lo = np.zeros(slots + 1)
    for s in range(0, rows.size, step):
        r, v = rows[s : s + step], values[s : s + step]
        # (slots, candidates): the gathers and comparisons run along the candidates (4x rows)
        at_lo = np.add.reduce(v >= np.take(lo_t, r, axis=1), axis=0, dtype=np.int64)
        past = np.add.reduce(v > np.take(hi_t, r, axis=1), axis=0, dtype=np.int64)
        hist += np.bincount(r * (slots + 1) + past, minlength=q * (slots + 1))
        if record:
            counts_lo += np.bincount(at_lo, minlength=slots + 1)
        width = at_lo - past
        ins = np.nonzero(width > 0)[0]
        if ins.size:
            span = width[ins]
            pick = np.repeat(ins, span)
            step_in = np.arange(pick.size) - np.repeat(np.cumsum(span) - span, span)
            slot = past[pick] + step_in + first
            item = cols[s : s + step][pick] + a
            tally.kept.append((r[pick], slot, v[pick].astype(np.float64), item, np.full(pick.size, weight)))
    above = np.cumsum(hist.reshape(q, slots + 1)[:, ::-1], axis=1)[:, ::-1][:, 1:]
    tally.above[:, first:] += np.rint(weight * above).astype(np.int64)
    if record and tally.found is not None:
        tally.found[first:] = np.cumsum(counts_lo[::-1])[::-1][1:]
