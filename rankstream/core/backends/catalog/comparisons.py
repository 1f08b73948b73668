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


def exact_edges(lo: np.ndarray, hi: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted edges ``lo``, ``hi`` ``(Q, deepest)`` (:func:`edges_in`, in the chunk's dtype)
    narrowed by the slots' exact scores known so far (``exact``, float64 in the same order, NaN
    where the slot's chunk was not counted yet, or where the score is not a value of the dtype):
    a known slot's band becomes its score ``t`` alone, ``lo'_j = min_{k >= j} t~_k``, ``hi'_j =
    max_{k <= j} t~_k`` (``t~``: ``t`` where known, else ``lo``, resp. ``hi``), so that both stay
    sorted and ``lo'_j <= t_j <= hi'_j``: a score below ``lo'_j`` is below the slot, one above
    ``hi'_j`` above it, and the rest are kept aside and compared with ``t`` as before. A slot's
    in-band scores in the chunks after its own are then only its exact ties."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = exact.astype(lo.dtype)
    known = t == exact  # NaN (not known) and values the dtype rounds are left banded
    if not known.any():
        return lo, hi
    lo2 = np.minimum.accumulate(np.where(known, t, lo)[:, ::-1], axis=1)[:, ::-1]
    hi2 = np.maximum.accumulate(np.where(known, t, hi), axis=1)
    return np.ascontiguousarray(lo2), np.ascontiguousarray(hi2)


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

    def buffers(self, records: int, width: int) -> tuple[Any, Any, np.ndarray]:
        """``(flags, words, full)``: ``records`` rows of flags of ``width`` bytes padded to 64-bit
        words (the padding false: not counted), as bytes ``(records, padded)`` and as torch 64-bit
        words ``(records, groups, span)`` (:func:`_layout`), and ``full`` ``(groups,)``, the word
        sums of a row of ``width`` true flags; made once per shape and reused by the chunks and
        blocks (fresh pages for every chunk cost their faults each time, and fragment the heap)."""
        key = (records, width)
        if key not in self._buffers:
            import torch

            groups, span, padded = _layout(width)
            self._buffers.clear()
            flags = np.zeros((records, padded), dtype=bool)
            words = torch.from_numpy(flags.view(np.int64)).view(records, groups, span)
            row = np.zeros(padded, dtype=bool)
            row[:width] = True
            full = row.view(np.int64).reshape(groups, span).sum(-1)
            self._buffers[key] = (flags, words, full)
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
    ``(rows, cols, values)`` (NaN among them where the chunk holds any) for :func:`place`.

    The dense flags' word sums of every block go into one array, counted once for the chunk
    (:func:`_true_counts`); a block only compares their raw sums to find the rows with scores
    inside a band."""
    q, width = x.shape
    deepest = lo.shape[1]
    records = max(1, flag_bytes(q, width) // _layout(width)[2])  # rows of flags the budget holds
    blocks = _blocks(cost, records)
    first = np.concatenate([np.full(r1 - r0, dense) for r0, r1, dense in blocks])
    deep = max(dense for _, _, dense in blocks)
    sums = np.zeros((2, deep, q, _layout(width)[0]), np.int64)  # x < lo_j, x <= hi_j
    cand: list[tuple[np.ndarray, np.ndarray]] = []
    for r0, r1, dense in blocks:
        _count_block(x, a, r0, r1, dense, lo, hi, tally, records, sums, cand)
    lt, le = _true_counts(sums)  # (deep, Q) each; zero past a row's dense slots
    dense_slot = np.arange(deep)[None, :] < first[:, None]
    tally.above[:, :deep] += np.where(dense_slot, width - le.T, 0)
    tally.found = np.zeros((q, deepest))
    tally.found[:, :deep] = np.where(dense_slot, width - lt.T, 0)
    rows_c = np.concatenate([c[0] for c in cand]) if cand else np.zeros(0, np.int64)
    cols_c = np.concatenate([c[1] for c in cand]) if cand else np.zeros(0, np.int64)
    return first, rows_c, cols_c, x[rows_c, cols_c]


def _blocks(cost: np.ndarray, records: int) -> list[tuple[int, int, int]]:
    """``(r0, r1, D)`` per block of rows: from each block's first row, the most rows whose number
    times the planes of flags of the widest among them (each row's at its own best split,
    :func:`dense_costs`) the ``records`` rows of flags hold (so rows that want few dense slots go
    in long blocks: fewer, larger numpy calls); ``D`` the least total cost of the block's rows
    among the splits that fit."""
    q = cost.shape[0]
    want = 1 + 2 * np.argmin(cost, axis=1)  # each row's planes of flags at its own best split
    out, r0, same = [], 0, q > 0 and bool(want.min() == want.max())
    while r0 < q:  # the most rows whose count times their widest row's planes fit
        if same:  # one width for all (every slot dense, say): blocks of equal rows
            n = max(1, records // int(want[r0]))
        else:
            widest = np.maximum.accumulate(want[r0 : r0 + records])
            n = max(1, int(np.count_nonzero(np.arange(1, widest.size + 1) * widest <= records)))
        n = min(n, q - r0)
        fits = max(0, (records // n - 1) // 2)  # dense slots n rows of flags can take
        out.append((r0, r0 + n, int(np.argmin(cost[r0 : r0 + n, : fits + 1].sum(0)))))
        r0 += n
    return out


def _count_block(
    x: np.ndarray, a: int, r0: int, r1: int, dense: int, lo: np.ndarray, hi: np.ndarray,
    tally: ChunkTally, records: int, sums: np.ndarray, cand: list[tuple[np.ndarray, np.ndarray]],
) -> None:  # fmt: skip
    """The rows ``r0...r1`` of the chunk ``x`` with their ``dense`` lowest slots dense: their flags'
    raw word sums into ``sums[:, :dense, r0:r1]``, the scores inside a dense slot's band into
    ``tally.kept``, the candidates (scores not below ``lo_D``; where every slot is dense, not below
    ``+inf``: every NaN, and ``+inf``, placed among no slot) into ``cand``.

    One ``np.less`` per block writes a row's flags side by side, ``(rows, edges, width)`` (the
    row's scores stay in the L1 cache over its edges): ``x < lo_D`` (or ``+inf``), ``x < lo_j``,
    and ``x <= hi_j`` as ``x < next(hi_j)`` (the next value of the dtype above ``hi_j``: the same
    for every ``x``, NaN and the infinities included, where ``hi_j`` is finite). A ``+inf`` score
    is always a candidate (not below any edge), so where a dense ``hi_j`` is ``+inf`` (padding, or
    a relevant item scored ``+inf``) and a candidate is ``+inf``, ``x <= hi_j`` is compared again
    as such (a second call) before the flags are counted."""
    n, width = r1 - r0, x.shape[1]
    groups, span, padded = _layout(width)
    buf, buf_words, full = tally.buffers(records, width)
    part = x[r0:r1]
    k = 1 + 2 * dense
    tops = hi[r0:r1, :dense]
    first = lo[r0:r1, dense : dense + 1] if dense < lo.shape[1] else np.full((n, 1), np.inf, x.dtype)
    thr = np.concatenate([first, lo[r0:r1, :dense], np.nextafter(tops, tops.dtype.type(np.inf))], axis=1)
    flags = buf[: k * n].reshape(n, k, padded)
    np.less(part[:, None, :], thr[:, :, None], out=flags[:, :, :width])
    got = buf_words[: k * n].view(n, k, groups, span).sum(-1).numpy()  # (n, k, groups)
    words = flags.view(np.uint64)  # (n, k, padded / 8)
    if (got[:, 0] != full).any():  # some row's first plane is not all true: its false bytes
        rr, cc = _bytes_at(words[:, 0, : -(-width // 8)], _ONES)  # the words holding scores
        keep = cc < width  # a last word's padding (false) cut
        rr, cc = rr[keep], cc[keep]
        cand.append((rr + r0, cc))
        if np.isposinf(tops).any() and np.isposinf(part[rr, cc]).any():
            np.less_equal(part[:, None, :], tops[:, :, None], out=flags[:, 1 + dense :, :width])
            got = buf_words[: k * n].view(n, k, groups, span).sum(-1).numpy()
    if dense:
        lt, le = got[:, 1 : 1 + dense], got[:, 1 + dense :]
        sums[0, :dense, r0:r1], sums[1, :dense, r0:r1] = lt.transpose(1, 0, 2), le.transpose(1, 0, 2)
        # every byte of lt is at most le's (x < lo implies x <= hi), so the lanes of the sums are
        # too, and equal sums mean equal counts: unequal ones, a group of words with scores
        # inside the band (only those groups' words are scanned)
        ii, jj, gg = np.nonzero(lt != le)
        if ii.size:  # x < lo false, x <= hi true
            spans = words.reshape(n, k, groups, span)
            p, at = _bytes_at(spans[ii, 1 + jj, gg] ^ spans[ii, 1 + dense + jj, gg], _ZERO)
            row, col = ii[p] + r0, gg[p] * (8 * span) + at
            tally.kept.append((row, jj[p], x[row, col].astype(np.float64), col + a, np.ones(p.size)))


def _bytes_at(words: np.ndarray, flip: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """``(row, byte)`` of the nonzero bytes of ``words ^ flip`` (``words``: ``(rows, per_row)``
    64-bit words, any strides: a plane of the block's flags is read where it lies), in no set
    order: the words that differ from ``flip`` first (an eighth of the bytes to scan, through a
    bool mask: numpy's fast scan), then the bytes of those."""
    nz = np.flatnonzero(words != flip)
    row, word = np.divmod(nz, words.shape[1])
    at = np.flatnonzero((words[row, word] ^ flip).view(np.uint8))
    hit = at >> 3
    return row[hit], word[hit] * 8 + (at & 7)


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
