"""Counting over a catalog of candidate embeddings with ``keras.ops``, chunk by chunk, on any
Keras backend and inside compiled steps (``jax.jit``, XLA, ``tf.function``).

For queries ``q`` (``(B, d)``), per-query thresholds ``t`` (``(B,)``) and candidates ``E``
(``(N, d)``), :func:`count_above` returns

    c_i = #{ j : q_i . E_j > t_i }      (strictly greater: a candidate tied with t_i is not counted)

summed over chunks of ``chunk_size`` candidates, so that the scores in memory at any time are
one ``(B, chunk_size)`` block, never the ``(B, N)`` matrix, and no top-k heap is kept. The full
chunks run in one ``keras.ops.fori_loop`` over a dynamic slice of static size (one traced
body whatever ``N``), the last ``N mod chunk_size`` candidates in one static slice, so the
shapes are static and the step compiles.

It also flags each query for which a candidate score is NaN or ``+inf`` (TFRS's
``tf.math.in_top_k`` gives no hit to a row holding a non-finite score; see
``docs/factorized_top_k.md``).

:data:`DEFAULT_CHUNK_SIZE` is ``SIZES.keras_catalog_chunk`` of :mod:`rankstream.core.sizes` (the
one owner of sizes): with 1,024 queries a float32 chunk of scores is 16 MiB (eagerly, with its
comparisons, at most about 16 bytes per score: 64 MiB).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends.keras_ops import is_tracing
from rankstream.core.sizes import SIZES

#: candidates scored at a time; (B, DEFAULT_CHUNK_SIZE) scores in memory
DEFAULT_CHUNK_SIZE = SIZES.keras_catalog_chunk


def check_chunk_size(chunk_size: Any) -> int:
    """``chunk_size`` as a positive int, or a ValueError naming it and echoing what came in."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    return int(chunk_size)


def _rows(x: Any, start: Any, size: int) -> Any:
    """Rows ``[start, start + size)`` of ``x``: a static slice for an int ``start``, a dynamic
    slice of static size for a traced one."""
    from keras import ops as K

    if isinstance(start, int):
        return x[start : start + size]
    return K.slice(x, (start,) + (0,) * (len(x.shape) - 1), (size, *x.shape[1:]))


def over_chunks(n: int, chunk_size: int, step: Any, carry: Any, traced: bool) -> Any:
    """``carry = step(start, size, carry)`` over the chunks ``[start, start + size)`` of
    ``range(n)``: eagerly a plain loop, traced one ``keras.ops.fori_loop`` over the full chunks
    (one traced body whatever ``n``, ``start`` a traced int32) and a static last chunk of
    ``n mod chunk_size``. The carry holds per-query sums, so the chunks' results add up."""
    from keras import ops as K

    full, tail = divmod(n, chunk_size)
    if full and (not traced or full == 1):
        for start in range(0, full * chunk_size, chunk_size):
            carry = step(start, chunk_size, carry)
    elif full:

        def body(i: Any, c: Any) -> Any:
            return step(K.multiply(K.cast(i, "int32"), chunk_size), chunk_size, c)

        carry = K.fori_loop(0, full, body, carry)
    if tail:
        carry = step(full * chunk_size, tail, carry)
    return carry


def _positions(start: Any, size: int) -> Any:
    from keras import ops as K

    return K.add(K.arange(size, dtype="int32"), start)


def count_above(
    queries: Any,
    thresholds: Any,
    candidates: Any,
    chunk_size: int,
    before: Any = None,
    inf_is_bad: bool = True,
) -> tuple[Any, Any]:
    """``(counts, bad)``, per query ``i`` (``(B,)`` each): ``counts_i = #{j : s_ij > t_i}``
    (int32), plus ``#{j < before_i : s_ij == t_i}`` when ``before`` is given (the candidates
    tied with ``t_i`` that an order by index puts first), with ``s_ij = queries[i] .
    candidates[j]``; ``bad_i`` whether any ``s_ij`` is NaN (or ``+inf``, with ``inf_is_bad``).
    Counted over chunks of ``chunk_size`` candidates: the scores held are one ``(B, chunk)``
    block. Static shapes: traceable and compilable."""
    from keras import ops as K

    def step(start: Any, size: int, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        scores = K.matmul(queries, K.transpose(_rows(candidates, start, size)))
        t = thresholds[:, None]
        above = K.sum(K.cast(K.greater(scores, t), "int32"), axis=1)
        if before is not None:
            earlier = K.less(_positions(start, size)[None, :], before[:, None])
            above = K.add(above, K.sum(K.cast(K.logical_and(K.equal(scores, t), earlier), "int32"), axis=1))
        # NaN != NaN; +inf: the only value whose max with 0 is infinite
        flag = K.not_equal(scores, scores)
        if inf_is_bad:
            flag = K.logical_or(flag, K.isinf(K.maximum(scores, 0.0)))
        return K.add(carry[0], above), K.logical_or(carry[1], K.any(flag, axis=1))

    init = (K.zeros_like(thresholds, dtype="int32"), K.zeros_like(thresholds, dtype="bool"))
    return over_chunks(int(candidates.shape[0]), chunk_size, step, init, is_tracing(queries))


def best_match(
    queries: Any, candidates: Any, candidate_ids: Any, true_ids: Any, chunk_size: int
) -> tuple[Any, Any, Any]:
    """``(found, score, index)`` per query ``i``: whether a candidate has the id ``true_ids[i]``,
    and of those the highest score ``s_ij`` and, among the candidates of that score, the lowest
    index ``j`` (the one a stable top-k lists first). Over chunks of ``chunk_size``."""
    from keras import ops as K

    def step(start: Any, size: int, carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        found, best, index = carry
        scores = K.matmul(queries, K.transpose(_rows(candidates, start, size)))
        match = K.equal(_rows(candidate_ids, start, size)[None, :], true_ids[:, None])
        top = K.max(K.where(match, scores, float("-inf")), axis=1)
        first = K.argmax(K.cast(K.logical_and(match, K.equal(scores, top[:, None])), "int32"), axis=1)
        has = K.any(match, axis=1)
        take = K.logical_and(has, K.logical_or(K.logical_not(found), K.greater(top, best)))
        index = K.where(take, K.add(K.cast(first, "int32"), start), index)
        return K.logical_or(found, has), K.where(take, top, best), index

    init = (
        K.zeros_like(true_ids, dtype="bool"),
        K.full_like(queries[:, 0], float("-inf")),
        K.zeros_like(true_ids, dtype="int32"),
    )
    return over_chunks(int(candidates.shape[0]), chunk_size, step, init, is_tracing(queries))


def slot_scores(queries: Any, candidates: Any, ids: Any, chunk_size: int) -> tuple[Any, Any]:
    """``(scores, bad)``: per query ``i`` and slot ``s`` (``ids`` ``(B, M)`` int32, -1 padding)
    the score ``queries[i] . candidates[ids[i, s]]`` as the chunk's matrix product gives it
    (the same product the count of :func:`slot_counts` compares, so an item is tied with
    itself), and per query whether any candidate's score is NaN. Over chunks of
    ``chunk_size``."""
    from keras import ops as K

    def step(start: Any, size: int, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        scores = K.matmul(queries, K.transpose(_rows(candidates, start, size)))
        local = K.subtract(ids, start)
        inside = K.logical_and(K.greater_equal(local, 0), K.less(local, size))
        picked = K.take_along_axis(scores, K.clip(local, 0, size - 1), axis=1)
        bad = K.any(K.not_equal(scores, scores), axis=1)
        return K.where(inside, picked, carry[0]), K.logical_or(carry[1], bad)

    init = (K.zeros(tuple(ids.shape), dtype=queries.dtype), K.zeros_like(queries[:, 0], dtype="bool"))
    return over_chunks(int(candidates.shape[0]), chunk_size, step, init, is_tracing(queries))


def slot_counts(
    queries: Any, candidates: Any, ids: Any, chunk_size: int, exclude: Any = None
) -> tuple[Any, Any, Any, Any]:
    """``(above, tied, tied_before, bad)`` per slot ``(B, M)`` int32 (``bad`` ``(B,)``): of the
    candidates, those scoring strictly above the slot's item, the others tied with it, and
    those tied with it at a lower index, for the relevant ids ``ids`` ``(B, M)`` (-1: padding,
    whose counts are meaningless); ``bad``: a NaN score in the query's row. Two passes over
    chunks of ``chunk_size`` (the slots' scores, then the counts); the memory of one pass is a
    ``(B, chunk)`` block of scores and a ``(B, M, chunk)`` comparison.

    ``exclude`` ``(B, E)`` int32: items left out of each query's list (-1: none; each id at most
    once per row and none a relevant id of its row, which the caller ensures). Their scores
    come with the slots' in the first pass; their contributions to the three counts (``x_e >
    t_s``, ``x_e = t_s``, ``x_e = t_s`` with ``e < s``) are subtracted after the second."""
    from keras import ops as K

    m = int(ids.shape[1])
    both = ids if exclude is None else K.concatenate([ids, K.cast(exclude, ids.dtype)], axis=1)
    target, bad = slot_scores(queries, candidates, both, chunk_size)
    target, excluded = target[:, :m], target[:, m:]
    t = target[:, :, None]

    def step(start: Any, size: int, carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        scores = K.matmul(queries, K.transpose(_rows(candidates, start, size)))[:, None, :]
        equal = K.equal(scores, t)
        earlier = K.less(_positions(start, size)[None, None, :], ids[:, :, None])
        above = K.sum(K.cast(K.greater(scores, t), "int32"), axis=2)
        tied = K.sum(K.cast(equal, "int32"), axis=2)
        before = K.sum(K.cast(K.logical_and(equal, earlier), "int32"), axis=2)
        return K.add(carry[0], above), K.add(carry[1], tied), K.add(carry[2], before)

    zero = K.zeros(tuple(ids.shape), dtype="int32")
    above, tied, before = over_chunks(
        int(candidates.shape[0]), chunk_size, step, (zero, zero, zero), is_tracing(queries)
    )
    if exclude is not None and int(exclude.shape[1]):
        real = K.greater_equal(exclude, 0)[:, None, :]
        x = excluded[:, None, :]
        equal = K.logical_and(K.equal(x, t), real)
        earlier = K.logical_and(equal, K.less(exclude[:, None, :], ids[:, :, None]))
        above = K.subtract(above, K.sum(K.cast(K.logical_and(K.greater(x, t), real), "int32"), axis=2))
        tied = K.subtract(tied, K.sum(K.cast(equal, "int32"), axis=2))
        before = K.subtract(before, K.sum(K.cast(earlier, "int32"), axis=2))
    return above, K.maximum(K.subtract(tied, 1), 0), before, bad
