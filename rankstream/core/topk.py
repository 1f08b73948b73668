"""Top-k selection with an explicit tie policy, done once per batch at ``max(k)``.

``top_ranked`` returns, for each row, the indices of the ``K`` best items in rank order:
valid items first by score (descending), masked items last, and ties among equal scores
resolved by the policy:

* ``"first"``: the item with the smaller index ranks first (a stable sort; ignite's rule);
* ``"random"``: a uniformly random order among tied items (keras-rs ``shuffle_ties=True``),
  reproducible with a seed;
* ``"expected"``: the metric is the exact expectation over every order of each group of tied
  items (McSherry & Najork, ECIR 2008; :mod:`rankstream.core.lists.ties`). Any order of the
  ``K`` selected items serves then, as long as masked items come last: the tie groups are read
  off equal adjacent scores of the selection, and the group straddling position ``K`` is
  completed by one comparison pass with its score. Where values are read back this is one
  ``topk`` at ``K`` (no re-ranking of tied rows, no stable sort); elsewhere the backend's exact
  ``topk_first``, as ``"first"``. :attr:`Ranked.values` holds the selected scores.

Cost: one ``topk`` at ``K + 1`` over the scores. Ties can only change the result when two of
the ``K + 1`` selected values are equal, which is read off the small ``(B, K + 1)``
selection; only those rows are re-ranked with a full stable sort (for random ties, after a
random column permutation: a uniformly random order among tied items in every row). Given the
labels (``labels=``), only the rows where tied items differ in label or membership are: the
other ties change nothing a list metric reads.

Host reads: where reading back is free (CPU, eager; ``ctx.read_back``), one read per batch: in
the common case one boolean (every row strictly decreasing over its ``K + 1`` selected values:
no tie, no NaN, and the caller's ``also`` check), else the NaN check, the tie branch and
``also`` in one transfer. Where it would be a device sync (an
accelerator) or is impossible (tracing under ``jit``), nothing is read: the backend's
``topk_first`` ranks exactly (torch: one stable ``topk`` over packed int64 keys; JAX and
TensorFlow: their ``topk`` is stable already), and NaN rows are returned as a device array for
the kernel to count into the state (``compute()`` raises on them).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.core.backends import Array, Context, Ops, value_bytes

TIE_POLICIES = ("first", "random", "expected")


@dataclass
class Ranked:
    """Result of :func:`top_ranked`: ``indices`` (B, K) in rank order. ``has_nan`` is a python
    bool when values could be read back (NaN among the valid scores), else ``None`` and
    ``nan_rows`` is a (B,) bool device array."""

    indices: Array
    has_nan: bool | None
    nan_rows: Array | None = None
    #: the ``also`` check of :func:`top_ranked` read back True (False: not read, or False)
    also_ok: bool = False
    #: ``ties="expected"``: the scores of the selected items (B, K) (None otherwise)
    values: Array | None = None
    #: ``ties="expected"``, read back: (B,) bool, the rows whose item at ``K`` ties with the
    #: next one (their last tie group goes on past the selection), and their indices; None:
    #: not known (every row may)
    extends: Array | None = None
    extend_rows: Array | None = None


def check_ties(ties: str) -> str:
    if ties not in TIE_POLICIES:
        raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
    return ties


def top_ranked(
    ctx: Context,
    scores: Array,
    k: int,
    valid: Array | None = None,
    ties: str = "first",
    also: Array | None = None,
    labels: Array | None = None,
) -> Ranked:
    """Indices of the top ``k`` items per row (``k`` already clipped to the list length).

    ``scores`` is (B, N) floating; ``valid`` an optional (B, N) bool mask (False = not in the
    list). Masked items are ranked after every valid item, so with ``k`` larger than the
    number of valid items the tail of the result points at masked items; callers zero them
    through the mask. Random ties draw from ``ctx.generator``. ``also``: a 0-d bool check of
    the caller's (e.g. "every label is finite") read back in the same transfer where values
    are read back (``Ranked.also_ok``), so an update reads the host once. ``labels``: (B, N),
    given when the caller reads nothing of the ranking but the labels and membership at each
    rank: a tie between items of equal label and membership then changes nothing, and only
    rows with another tie are re-ranked (the random stream is drawn as for any tie).
    """
    ops = ctx.ops
    if ties == "expected":
        return _top_any_order(ctx, scores, k, valid, also)
    if ctx.read_back:
        idx, has_nan, also_ok = _top_read_back(ctx, scores, k, valid, ties, also, labels)
        return Ranked(indices=idx, has_nan=has_nan, nan_rows=None, also_ok=also_ok)
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


def _top_read_back(
    ctx: Context, scores: Array, k: int, valid: Array | None, ties: str, also: Array | None,
    labels: Array | None = None,
) -> tuple[Array, bool, bool]:  # fmt: skip
    """CPU / eager: ``topk`` at ``k + 1``, then re-rank only the rows showing a tie (two
    equal values among the ``k + 1`` selected): a full stable sort of those rows, after a
    random column permutation of them for ``ties="random"``. Rows without such a tie have
    the same top ``k`` under every tie order, so the policy only matters for the others.

    The common case costs one comparison and one read: every row strictly decreasing over
    its ``k + 1`` selected values means no tie and no NaN (NaN ranks first and compares
    False), whatever the policy. Masked items get ``-inf`` tile by tile
    (:meth:`~rankstream.core.backends.Ops.masked_topk`): no masked copy of the scores.
    Returns ``(indices, has_nan, also_ok)``."""
    ops = ctx.ops
    n = scores.shape[-1]
    kq = min(k + 1, n)
    if valid is None:
        vals, idx = ops.topk(scores, kq)
    else:
        vals, idx = ops.masked_topk(scores, kq, valid, ctx.workspace, cap=ctx.tile_cap)
    if kq > 1:
        clean = ops.all(vals[:, :-1] > vals[:, 1:])
        if ops.host_bools(clean if also is None else clean & also)[0]:
            return idx[:, :k], False, also is not None
    nan_any = ops.any(ops.isnan(vals[:, 0]))
    checks = [nan_any] if also is None else [nan_any, also]
    if kq == 1 or (ops.native_stable and valid is None and ties == "first"):
        flags = ops.host_bools(ops.stack(checks))
        return idx[:, :k], flags[0], len(flags) > 1 and flags[1]
    eq = vals[:, 1:] == vals[:, :-1]
    tie_rows = ops.any(eq, axis=1)
    rerank = tie_rows if labels is None else _ties_matter(ops, eq, idx, labels, valid, kq < n)
    # "first" and "random" order the selection itself (no re-ranking of whole rows), unless a
    # valid -inf score may sit among masked items (which the -inf fill cannot tell apart)
    in_place = ties in IN_PLACE and kq > k
    if in_place and valid is not None:
        checks.append(ops.any(vals[:, k - 1] == float("-inf")))
    flags = ops.host_bools(ops.stack([*checks, ops.any(tie_rows), ops.any(rerank)]))
    has_nan, any_tie, any_rerank = flags[0], flags[-2], flags[-1]
    also_ok = also is not None and flags[1]
    if in_place and valid is not None:
        in_place = not flags[-3]
    # drawn whenever a score tie is seen, so the random stream does not depend on labels
    perm = _tie_permutation(ctx, scores) if any_tie and not has_nan and ties == "random" else None
    if in_place and any_tie and any_rerank and not has_nan:
        # random: the order of a stable sort after the column permutation perm, i.e. tied
        # items by their place in it (perm's inverse: an argsort of n values)
        key = None
        if perm is not None:
            key = ops.stable_argsort_desc([ops.reshape(-ops.cast(perm, ops.acc_dtype(scores)), (1, -1))])[0]
        ordered = _first_in_place(ctx, scores, vals, idx, k, valid, key, ops.nonzero(rerank))
        return ordered, has_nan, also_ok
    if any_tie and any_rerank and not has_nan:
        idx = _rerank_rows(ops, scores, idx, valid, ops.nonzero(rerank), perm, kq)
    return idx[:, :k], has_nan, also_ok


def _tie_permutation(ctx: Context, scores: Array) -> Array:
    """The random column permutation of ``ties="random"`` for a batch with a tie: drawn from
    ``ctx.generator``, or, for a later block of a batch (``ctx.perm``), the one its first tie
    drew."""
    held = ctx.perm
    if held is not None and held[0] is not None:
        return held[0]
    perm = ctx.ops.randperm(scores.shape[-1], scores, ctx.generator)
    if held is not None:
        held[0] = perm
    return perm


def _rerank_rows(
    ops: Ops, scores: Array, idx: Array, valid: Array | None, rows: Array, perm: Array | None, kq: int
) -> Array:
    """``idx`` with the rows ``rows`` re-ranked by a full stable sort of their scores (after
    the column permutation ``perm`` for ``ties="random"``), masked items last."""
    sub = ops.take(scores, rows, axis=0)
    sub_valid = None if valid is None else ops.take(valid, rows, axis=0)
    if sub_valid is not None:
        sub = ops.exclude(sub, sub_valid)
    if perm is not None:
        sub = ops.take(sub, perm, axis=1)
        sub_valid = None if sub_valid is None else ops.take(sub_valid, perm, axis=1)
    keys = [sub]
    if sub_valid is not None:  # a valid -inf score still ranks before a masked item
        keys.append(ops.cast(sub_valid, sub.dtype))
    order = ops.stable_argsort_desc(keys)[:, :kq]
    if perm is not None:
        order = ops.cast(ops.lookup(perm, order), idx.dtype)
    return ops.set_rows(idx, rows, order)


#: the tie policies whose order the read-back path makes in the top-(k + 1) selection itself
IN_PLACE = ("first", "random")


def _first_in_place(
    ctx: Context, scores: Array, vals: Array, idx: Array, k: int, valid: Array | None, key: Array | None,
    rows: Array,
) -> Array:  # fmt: skip
    """The ``"first"`` order of a top-``(k + 1)`` selection taken in any order among equal
    scores (``vals``, ``idx`` ``(B, k + 1)``; no NaN, no valid ``-inf`` among masked items):
    the selection sorted by score, then index (the ``(B, k + 1)`` arrays only); where the
    group of equal scores at place ``k`` goes on past the selection (``vals[:, k]`` equals
    ``vals[:, k - 1]``), its ``m`` places are the ``m`` smallest indices among the row's items
    of that score: one comparison pass over those rows, tile by tile (a
    ``Sizes.first_share``-th of the batch at most), and a ``topk`` of ``n - index`` on the equal
    items. No row is sorted whole. ``key`` ``(N,)``: each column's rank among equal scores in
    place of its index (``ties="random"``: its place in the batch's random permutation).
    ``rows``: the rows to order (those showing a tie that matters); the others keep the
    ``topk``'s order (strictly decreasing or tied among items alike). The rows go in pieces of
    at most a ``Sizes.tie_share``-th of the batch's scores' bytes at ``Sizes.tie_bytes`` per
    selected item (at least ``Sizes.tie_items_min`` selected items a piece; ``Context.tile_cap``
    values where this is a block of a batch: a 16th of the batch's), so the sort's temporaries
    are those of a piece."""
    ops, z = ctx.ops, ctx.sizes
    b, n = int(scores.shape[0]), int(scores.shape[1])
    itemsize = value_bytes(ops, scores)
    budget = (b * n // z.tie_share if ctx.tile_cap is None else ctx.tile_cap) * itemsize
    step = max(1, max(budget // z.tie_bytes, z.tie_items_min) // int(vals.shape[1]))
    outs = []
    for a in range(0, int(rows.shape[0]), step):
        t = rows[a : a + step]
        # the piece's copies passed on (not held here): let go once sorted
        outs.append(
            _first_rows(
                ops,
                scores,
                ops.take(vals, t, axis=0),
                ops.take(idx, t, axis=0),
                k,
                valid,
                key,
                t,
                z.first_share,
            )
        )
    ordered = outs.pop() if len(outs) == 1 else ops.concat(outs, axis=0)
    del outs  # the pieces let go before the copy of the whole
    return ops.set_rows(idx[:, :k], rows, ordered)


def _first_rows(
    ops: Ops, scores: Array, vals: Array, idx: Array, k: int, valid: Array | None, key: Array | None,
    rows: Array, share: int,
) -> Array:  # fmt: skip
    """:func:`_first_in_place` of the selection ``vals``, ``idx`` ``(r, k + 1)`` of the rows
    ``rows`` of ``scores``: their ``(r, k)`` indices in order (the boundary pass in tiles of a
    ``share``-th of the batch's values, at least one row)."""
    acc = ops.acc_dtype(scores)
    order = ops.order_first(vals, idx if key is None else ops.lookup(key, idx))
    idx, vals = ops.take_along(idx, order), ops.take_along(vals, order)
    del order
    out = idx[:, :k]
    ext = ops.nonzero(vals[:, k] == vals[:, k - 1])  # among these rows
    r = int(ext.shape[0])
    if r == 0:
        return out
    b, n = int(scores.shape[0]), int(scores.shape[1])
    v = ops.take(vals[:, k - 1], ext, axis=0)
    # the group's first place: the selection is sorted, so its equal values end at k - 1
    first = float(k) - ops.sum(ops.cast(ops.take(vals[:, :k], ext, axis=0) == v[:, None], acc), axis=1)
    batch_rows = ops.take(rows, ext, axis=0)  # the rows of scores
    del vals
    # n - index, larger for a smaller index: exact in float32 below 2^24 items (a 4-byte tile)
    key_dtype = scores.dtype if n < (1 << 24) and ops.dtype_name(scores) == "float32" else acc
    rank_key = float(n) - (ops.arange(0, n, scores, key_dtype) if key is None else ops.cast(key, key_dtype))
    step = max(1, (b * n) // share // n)
    found = []
    for a in range(0, r, step):
        t = batch_rows[a : a + step]
        equal = ops.take(scores, t, axis=0) == v[a : a + step, None]
        if valid is not None:
            equal = equal & ops.take(valid, t, axis=0)
        found.append(ops.topk(ops.where(equal, rank_key[None, :], 0.0), k)[1])
        del equal
    smallest = found[0] if len(found) == 1 else ops.concat(found, axis=0)  # (r, k) increasing
    del found
    place = ops.arange(0, k, first, acc)[None, :] - first[:, None]  # place within the group
    pick = ops.cast(ops.take_along(smallest, ops.cast(ops.maximum(place, 0.0), ops.int_dtype())), idx.dtype)
    del smallest
    return ops.set_rows(out, ext, ops.where(place >= 0.0, pick, ops.take(out, ext, axis=0)))


def _top_any_order(ctx: Context, scores: Array, k: int, valid: Array | None, also: Array | None) -> Ranked:
    """The top ``k`` in any order among equal scores, masked items last, with the selected
    scores (``ties="expected"``). Read back: one ``topk`` at ``k + 1`` (masked: tile by tile)
    and one read (NaN, ``also``, whether some row's item at ``k`` ties with the next, and
    whether a valid ``-inf`` score met a masked item, which the ``-inf`` fill cannot tell
    apart: then the exact ``"first"`` order); the rows whose last group goes on past ``k`` are
    read too (:attr:`Ranked.extend_rows`). Elsewhere: the backend's exact ``topk_first``."""
    ops = ctx.ops
    if not ctx.read_back:
        idx, nan_rows = ops.topk_first(scores, k, valid)
        return Ranked(idx, None, nan_rows, values=ops.take_along(scores, idx))
    n = scores.shape[-1]
    kq = min(k + 1, n)
    vals, idx = (
        ops.topk(scores, kq)
        if valid is None
        else ops.masked_topk(scores, kq, valid, ctx.workspace, cap=ctx.tile_cap)
    )
    checks = [ops.any(ops.isnan(vals[:, 0]))]
    if also is not None:
        checks.append(also)
    extends = vals[:, k] == vals[:, k - 1] if kq > k else None
    if extends is not None:
        checks.append(ops.any(extends))
    if valid is not None:  # -inf selected: a valid item scored -inf may sit after a masked one
        checks.append(ops.any(vals[:, k - 1] == float("-inf")))
    flags = ops.host_bools(ops.stack(checks))
    has_nan, also_ok = flags[0], also is not None and flags[1]
    vals, idx = vals[:, :k], idx[:, :k]
    if valid is not None and flags[-1] and not has_nan:
        idx, _, _ = _top_read_back(ctx, scores, k, valid, "first", None)
        return Ranked(idx, has_nan, None, also_ok, values=ops.take_along(scores, idx))
    if extends is None:  # the selection holds every item
        return Ranked(idx, has_nan, None, also_ok, values=vals)
    rows = ops.nonzero(extends) if flags[2 if also is not None else 1] else ops.nonzero(extends[:0])
    return Ranked(idx, has_nan, None, also_ok, values=vals, extends=extends, extend_rows=rows)


def _ties_matter(
    ops: Ops, eq: Array, idx: Array, labels: Array, valid: Array | None, open_end: bool
) -> Array:
    """(B,) rows where the order among tied scores can change the labels or membership seen at
    some rank: tied neighbours that differ in either, or (``open_end``: items past the ``k + 1``
    selected) a tie reaching the last selected place, whose run may go on unseen."""
    lab = ops.take_along(labels, idx)
    differ = lab[:, 1:] != lab[:, :-1]
    if valid is not None:
        member = ops.take_along(valid, idx)
        differ = differ | (member[:, 1:] != member[:, :-1])
    rows = ops.any(eq & differ, axis=1)
    return rows | eq[:, -1] if open_end else rows
