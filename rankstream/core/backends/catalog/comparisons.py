"""One chunk's counts: each score compared with the band edges of its query's slots.

For a query's slots sorted by their scores alone ``t'_0 <= t'_1 <= ...`` (padding last, at
``+inf``), each with the band ``[lo_j, hi_j] = [t'_j - b, t'_j + b]``, a chunk's score ``x`` is
*above* slot ``j`` where ``x > hi_j``, *inside* its band where ``lo_j <= x <= hi_j`` (kept aside
with its value and item: compared with the slot's exact score at the end), below otherwise. The
edges are taken in the chunk's dtype rounded so that the comparisons mean the same
(:func:`edges_in`): ``x < lo`` as ``x < up(lo)``, ``x <= hi`` as ``x <= down(hi)``, exact.

Two ways share a chunk, split per block of rows at one sorted slot ``D`` (:func:`dense_costs`):

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
follows a cost model (:func:`dense_costs`) fed by each query's counts, in the previous chunk, of
scores at or above each slot's lower edge (for the first chunk, those of a sample of its items,
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
    and ``found`` ``(Q, M)``, each query's scores at or above each slot's lower edge in the last
    chunk, over its width, for the next chunk's split."""

    above: np.ndarray
    kept: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    found: np.ndarray | None = None
    _buffers: dict[tuple[int, ...], tuple[Any, ...]] = field(default_factory=dict)

    def buffers(self, records: int, width: int) -> tuple[Any, Any]:
        """``(flags, words)``: ``records`` rows of flags of ``width`` bytes padded to 64-bit words
        (the padding false: not counted), as bytes ``(records, padded)`` and as torch 64-bit words
        ``(records, groups, span)`` (:func:`_layout`); made once per shape and reused by the
        chunks and blocks (fresh pages for every chunk cost their faults each time, and
        fragment the heap)."""
        key = (records, width)
        if key not in self._buffers:
            import torch

            groups, span, padded = _layout(width)
            self._buffers.clear()
            flags = np.zeros((records, padded), dtype=bool)
            words = torch.from_numpy(flags.view(np.int64)).view(records, groups, span)
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


def dense_costs(found: np.ndarray, width: int) -> np.ndarray:
    """``(Q, deepest + 1)``: what counting a query's row of the chunk costs with its ``D`` lowest
    slots dense, in comparisons of one score with one edge: two per score per dense slot, and
    ``SIZES.catalog_candidate_cost`` per candidate, the scores at or above ``lo_D`` (as the last
    chunk had them per item of width: ``found``); ``inf`` past what a row's flags fit in
    :func:`flag_bytes` (per query: a whole chunk's budget over its rows)."""
    q, deepest = found.shape
    most = max(0, (flag_bytes(q, width) // _layout(width)[2] - 1) // 2)
    d = np.arange(deepest + 1)
    cost = 2.0 * d + _sizes.SIZES.catalog_candidate_cost * np.concatenate([found, np.zeros((q, 1))], 1)
    cost[:, d > most] = np.inf
    return cost * width


def sample_found(x: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Per query and sorted slot, the scores at or above its lower edge per item of width,
    estimated on every ``SIZES.catalog_sample_step``-th item of the chunk ``x`` (for the first
    chunk's split, before any chunk was counted)."""
    part = x[:, :: _sizes.SIZES.catalog_sample_step]
    below = np.less(part[:, None, :], lo[:, :, None])  # (Q, deepest, sampled)
    return 1.0 - below.sum(-1) / max(part.shape[1], 1)


def count_chunk(
    x: np.ndarray, a: int, lo: np.ndarray, hi: np.ndarray, cost: np.ndarray, tally: ChunkTally
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Count the chunk ``x`` ``(Q, W)`` (items ``a...``) against the sorted edges ``lo``, ``hi``
    ``(Q, deepest)`` in its dtype (:func:`edges_in`), a block of rows at a time: each block's
    lowest ``D`` slots dense, ``D`` the least total of its rows' ``cost`` (:func:`dense_costs`),
    the rest by candidates. Adds to ``tally``; returns each row's ``D`` and the candidates
    ``(rows, cols, values)`` (NaN among them where the chunk holds any) for :func:`place`."""
    q, width = x.shape
    deepest = lo.shape[1]
    groups, span, padded = _layout(width)
    records = max(1, flag_bytes(q, width) // padded)  # rows of flags the budget holds
    widest = 1 + 2 * int(np.argmin(cost, axis=1).max(initial=0))  # the deepest row's flags
    rows = max(1, min(q, records // widest))
    fits = max(0, (records // rows - 1) // 2)  # dense slots a block of rows can take
    buf, buf_words = tally.buffers(records, width)
    first = np.zeros(q, np.int64)
    tally.found = np.zeros((q, deepest))
    cand: list[tuple[np.ndarray, np.ndarray]] = []
    for r0 in range(0, q, rows):
        r1 = min(r0 + rows, q)
        n = r1 - r0
        dense = int(np.argmin(cost[r0:r1, : fits + 1].sum(0)))
        first[r0:r1] = dense
        k = 1 + 2 * dense
        flags = buf[: k * n].reshape(k, n, padded)
        words = flags.view(np.uint64)  # (k, n, padded / 8)
        part = x[r0:r1]
        thr = lo[r0:r1, dense] if dense < deepest else np.full(n, np.inf, x.dtype)
        np.less(part, thr[None, :, None], out=flags[:1, :, :width])
        if dense:
            np.less(part, lo[r0:r1, :dense].T[:, :, None], out=flags[1 : 1 + dense, :, :width])
            np.less_equal(part, hi[r0:r1, :dense].T[:, :, None], out=flags[1 + dense :, :, :width])
        true = _true_counts(buf_words[: k * n].view(k, n, groups, span).sum(-1).numpy())  # (k, n)
        if (true[0] < width).any():  # the scores not below lo_D (or NaN): the false bytes
            rr, cc = _bytes_at(words[0], padded, _ONES)
            keep = cc < width  # the padding is false too
            cand.append((rr[keep] + r0, cc[keep]))
        if dense:
            lt, le = true[1 : 1 + dense], true[1 + dense :]
            tally.above[r0:r1, :dense] += (width - le).T
            tally.found[r0:r1, :dense] = (width - lt).T
            jj, ii = np.nonzero(le > lt)  # slots with scores inside their band
            if jj.size:  # x < lo false, x <= hi true
                p, col = _bytes_at(words[1 + jj, ii] ^ words[1 + dense + jj, ii], padded, _ZERO)
                row = ii[p] + r0
                tally.kept.append((row, jj[p], x[row, col].astype(np.float64), col + a, np.ones(p.size)))
    rows_c = np.concatenate([c[0] for c in cand]) if cand else np.zeros(0, np.int64)
    cols_c = np.concatenate([c[1] for c in cand]) if cand else np.zeros(0, np.int64)
    return first, rows_c, cols_c, x[rows_c, cols_c]


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
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
    first: np.ndarray | None, weight: float, a: int, tally: ChunkTally, record: bool = False,
) -> None:  # fmt: skip
    """Each score ``values`` (query ``rows``, item ``a + cols``) placed among its query's sorted
    edges from slot ``first[row]`` on (every slot where ``first`` is None): ``#(lo_j <= v)`` and
    ``#(hi_j < v)`` (both counts of sorted edges, the slots below ``first`` taken as ``-inf``, so
    the bands it is inside are the slots between them); the slots it is above count ``weight``
    each, the bands hold it aside. With ``record``, ``tally.found`` gets each query's count of
    scores at or above the lower edge of its slots from ``first`` on."""
    q, deepest = lo.shape
    if deepest == 0 or rows.size == 0:
        return
    below = None
    if first is not None:  # the dense slots: below every candidate (already counted)
        below = np.arange(deepest)[None, :] < first[:, None]
        lo, hi = np.where(below, -np.inf, lo), np.where(below, -np.inf, hi)
    lo_t, hi_t = np.ascontiguousarray(lo.T), np.ascontiguousarray(hi.T)
    step = max(1, _sizes.SIZES.catalog_candidate_values // deepest)
    hist = np.zeros(q * (deepest + 1))
    at_lo_hist = np.zeros(q * (deepest + 1))
    for s in range(0, rows.size, step):
        r, v = rows[s : s + step], values[s : s + step]
        # (slots, candidates): the gathers and comparisons run along the candidates (4x rows)
        at_lo = np.add.reduce(v >= np.take(lo_t, r, axis=1), axis=0, dtype=np.int64)
        past = np.add.reduce(v > np.take(hi_t, r, axis=1), axis=0, dtype=np.int64)
        hist += np.bincount(r * (deepest + 1) + past, minlength=q * (deepest + 1))
        if record:
            at_lo_hist += np.bincount(r * (deepest + 1) + at_lo, minlength=q * (deepest + 1))
        width = at_lo - past
        ins = np.nonzero(width > 0)[0]
        if ins.size:
            span = width[ins]
            pick = np.repeat(ins, span)
            step_in = np.arange(pick.size) - np.repeat(np.cumsum(span) - span, span)
            slot = past[pick] + step_in
            item = cols[s : s + step][pick] + a
            tally.kept.append((r[pick], slot, v[pick].astype(np.float64), item, np.full(pick.size, weight)))
    above = _above_each(hist, q, deepest)
    if below is not None:
        above[below] = 0
    tally.above += np.rint(weight * above).astype(np.int64)
    if record and tally.found is not None:
        found = _above_each(at_lo_hist, q, deepest)
        tally.found[:] = found if below is None else np.where(below, tally.found, found)


def _above_each(hist: np.ndarray, q: int, deepest: int) -> np.ndarray:
    """``(Q, deepest)``: per slot ``j``, the count of values above ``j`` from a histogram of
    ``(query, bucket)`` (``bucket``: the number of sorted edges below the value)."""
    return np.cumsum(hist.reshape(q, deepest + 1)[:, ::-1], axis=1)[:, ::-1][:, 1:]
