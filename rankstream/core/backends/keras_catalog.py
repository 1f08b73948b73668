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

:data:`DEFAULT_CHUNK_SIZE` is the one size this module owns (kept here as a named constant
until the project has one module of sizes): with 1,024 queries a float32 chunk of scores is
32 MiB.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends.keras_ops import is_tracing

#: candidates scored at a time; (B, DEFAULT_CHUNK_SIZE) scores in memory
DEFAULT_CHUNK_SIZE = 8192


def check_chunk_size(chunk_size: Any) -> int:
    """``chunk_size`` as a positive int, or a ValueError naming it and echoing what came in."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    return int(chunk_size)


def _chunk_counts(queries: Any, thresholds: Any, chunk: Any) -> tuple[Any, Any]:
    """The counts of one chunk: (B,) int32 ``#{j : s_ij > t_i}`` and (B,) bool ``any s_ij``
    NaN or +inf, with ``s = queries @ chunk.T`` (``(B, len(chunk))``, the only scores held)."""
    from keras import ops as K

    scores = K.matmul(queries, K.transpose(chunk))
    above = K.sum(K.cast(K.greater(scores, thresholds[:, None]), "int32"), axis=1)
    # NaN != NaN; +inf > the largest finite value: one pass for both
    bad = K.logical_or(K.not_equal(scores, scores), K.isinf(K.maximum(scores, 0.0)))
    return above, K.any(bad, axis=1)


def count_above(queries: Any, thresholds: Any, candidates: Any, chunk_size: int) -> tuple[Any, Any]:
    """``(counts, bad)``: for each query ``i`` the number of candidates ``j`` with
    ``queries[i] . candidates[j] > thresholds[i]`` (int32, ``(B,)``), and whether any of its
    candidate scores is NaN or +inf (bool, ``(B,)``), counted over chunks of ``chunk_size``
    candidates (the counts of the chunks add up). Static shapes: traceable and compilable."""
    from keras import ops as K

    n = int(candidates.shape[0])
    counts = K.zeros_like(thresholds, dtype="int32")
    bad = K.zeros_like(thresholds, dtype="bool")
    full, tail = divmod(n, chunk_size)
    d = int(candidates.shape[1])
    if full > 1 and not is_tracing(queries):  # eager: a plain loop (nothing to compile)
        for start in range(0, full * chunk_size, chunk_size):
            above, flag = _chunk_counts(queries, thresholds, candidates[start : start + chunk_size])
            counts, bad = K.add(counts, above), K.logical_or(bad, flag)
    elif full == 1:
        counts, bad = _chunk_counts(queries, thresholds, candidates[:chunk_size])
    elif full > 1:

        def body(i: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
            start = K.multiply(K.cast(i, "int32"), chunk_size)
            chunk = K.slice(candidates, (start, 0), (chunk_size, d))
            above, flag = _chunk_counts(queries, thresholds, chunk)
            return K.add(carry[0], above), K.logical_or(carry[1], flag)

        counts, bad = K.fori_loop(0, full, body, (counts, bad))
    if tail:
        above, flag = _chunk_counts(queries, thresholds, candidates[full * chunk_size :])
        counts, bad = K.add(counts, above), K.logical_or(bad, flag)
    return counts, bad
