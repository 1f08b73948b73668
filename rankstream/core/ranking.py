"""Top-k selection with an explicit tie policy, done once per batch at ``max(k)``.

``top_ranked`` returns, for each row, the indices of the ``K`` best items in rank order:
valid items first by score (descending), masked items last, and ties among equal scores
resolved by the policy:

* ``"first"``: the item with the smaller index ranks first (a stable sort; ignite's rule);
* ``"random"``: a uniformly random order among tied items (keras-rs ``shuffle_ties=True``),
  reproducible with a seed.

Cost: one ``topk`` at ``K + 1`` over the scores. Ties can only change the result when two of
the ``K + 1`` selected values are equal, which is read off the small ``(B, K + 1)``
selection; only those rows are re-ranked with a full stable sort (for random ties, after a
random column permutation: a uniformly random order among tied items in every row).

Host reads: where reading back is free (CPU, eager; ``ctx.read_back``), the NaN check and the
tie branch read two booleans back in one transfer. Where it would be a device sync (an
accelerator) or is impossible (tracing under ``jit``), nothing is read: the backend's
``topk_first`` ranks exactly (torch: one stable ``topk`` over packed int64 keys; JAX and
TensorFlow: their ``topk`` is stable already), and NaN rows are returned as a device array for
the kernel to count into the state (``compute()`` raises on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rankstream.core.backends import Array, Context, Ops

TIE_POLICIES = ("first", "random")


@dataclass
class Ranked:
    """Result of :func:`top_ranked`: ``indices`` (B, K) in rank order. ``has_nan`` is a python
    bool when values could be read back (NaN among the valid scores), else ``None`` and
    ``nan_rows`` is a (B,) bool device array."""

    indices: Array
    has_nan: bool | None
    nan_rows: Array | None = None


def check_ties(ties: str) -> str:
    if ties not in TIE_POLICIES:
        raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
    return ties


def top_ranked(
    ctx: Context, scores: Array, k: int, valid: Array | None = None, ties: str = "first"
) -> Ranked:
    """Indices of the top ``k`` items per row (``k`` already clipped to the list length).

    ``scores`` is (B, N) floating; ``valid`` an optional (B, N) bool mask (False = not in the
    list). Masked items are ranked after every valid item, so with ``k`` larger than the
    number of valid items the tail of the result points at masked items; callers zero them
    through the mask. Random ties draw from ``ctx.generator``.
    """
    ops = ctx.ops
    if ctx.read_back:
        idx, has_nan = _top_read_back(ops, scores, k, valid, ties, ctx.generator)
        return Ranked(indices=idx, has_nan=has_nan, nan_rows=None)
    n = scores.shape[-1]
    perm = None
    if ties == "random" and n > 1:
        # No read-back, so no branch on tied rows: one random column permutation for the
        # batch (a uniformly random order among tied items in every row), then "first".
        perm = ops.randperm(n, scores, ctx.generator)
        scores = ops.take(scores, perm, axis=1)
        if valid is not None:
            valid = ops.take(valid, perm, axis=1)
    idx, nan_rows = ops.topk_first(scores, k, valid)
    if perm is not None:
        idx = ops.lookup(perm, idx)
    return Ranked(indices=idx, has_nan=None, nan_rows=nan_rows)


def _masked(ops: Ops, scores: Array, valid: Array | None) -> Array:
    return scores if valid is None else ops.where(valid, scores, float("-inf"))


def _top_read_back(
    ops: Ops, scores: Array, k: int, valid: Array | None, ties: str, generator: Any
) -> tuple[Array, bool]:
    """CPU / eager: ``topk`` at ``k + 1``, then re-rank only the rows showing a tie (two
    equal values among the ``k + 1`` selected): a full stable sort of those rows, after a
    random column permutation of them for ``ties="random"``. Rows without such a tie have
    the same top ``k`` under every tie order, so the policy only matters for the others."""
    n = scores.shape[-1]
    s = _masked(ops, scores, valid)
    kq = min(k + 1, n)
    vals, idx = ops.topk(s, kq)
    nan_any = ops.any(ops.isnan(vals[:, 0]))
    if kq == 1 or (ops.native_stable and valid is None and ties == "first"):
        return idx[:, :k], ops.host_bools(nan_any)[0]
    tie_rows = ops.any(vals[:, 1:] == vals[:, :-1], axis=1)
    has_nan, any_tie = ops.host_bools(ops.stack([nan_any, ops.any(tie_rows)]))
    if any_tie and not has_nan:
        rows = ops.nonzero(tie_rows)
        sub = ops.take(s, rows, axis=0)
        sub_valid = None if valid is None else ops.take(valid, rows, axis=0)
        perm = None
        if ties == "random":
            perm = ops.randperm(n, scores, generator)
            sub = ops.take(sub, perm, axis=1)
            sub_valid = None if sub_valid is None else ops.take(sub_valid, perm, axis=1)
        keys = [sub]
        if sub_valid is not None:  # a valid -inf score still ranks before a masked item
            keys.append(ops.cast(sub_valid, sub.dtype))
        order = ops.stable_argsort_desc(keys)[:, :kq]
        if perm is not None:
            order = ops.cast(ops.lookup(perm, order), idx.dtype)
        idx = ops.set_rows(idx, rows, order)
    return idx[:, :k], has_nan
