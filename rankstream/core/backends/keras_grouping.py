"""Flat items with a query id per item, grouped into padded lists with ``keras.ops`` (the Keras
side of :mod:`rankstream.core.grouping`), eagerly or inside a compiled step.

A compiled step (JAX ``jit``, a TensorFlow graph or XLA, ``torch.compile``) needs static
shapes, so the lists are ``(max_queries, max_len)``, bounds the caller gives; eagerly the
bounds are read from the batch (``Q`` its queries, ``L`` its longest query: host reads).
With ``N`` items and ids ``q_i``, the same arithmetic serves both:

1. ``new_i = [i = 0 or q_i != q_(i-1)]``, ``run_i = cumsum(new)_i - 1``: each item's run of
   equal ids (``R = sum(new)`` runs; a segment id per item, from a cumulative sum);
2. the ids are *grouped* when no query has two runs: ``R <= Q`` and the ``R`` run ids (a sort
   of at most ``Q`` values, not of the items) hold no duplicate. Grouped ids skip the sort;
   otherwise one stable sort of the items by id (inside a compiled step a ``cond``: the sort
   runs only for batches that need it), so the items of a query keep their order of arrival
   and ``ties="first"`` ranks the earlier item first, as on pre-padded lists;
3. ``counts_q = segment_sum(1, run)``, ``start_q = cumsum(counts)_q - counts_q``, and each
   list slot ``(q, j)`` gathers item ``start_q + j`` where ``j < counts_q`` (the mask); padding
   holds label 0, weight 0 and is masked, so a masked item is not in the list and a row
   without items is no list at all (it is never counted).

A batch over a bound (more than ``Q`` distinct ids, a query longer than ``L``) is reported in
``overflow`` (a bool scalar) rather than silently cut: the eager caller raises, the compiled
caller leaves the batch out of the sums and counts it as invalid (the metric reads NaN).
"""

from __future__ import annotations

from typing import Any

Array = Any


def _stable_argsort(ids: Array) -> Array:
    """A stable argsort (TensorFlow's default sort is not stable; JAX's and torch's in Keras are)."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.argsort(ids, stable=True)
    return keras.ops.argsort(ids)


def _runs(ids: Array, num: int) -> tuple[Array, Array, Array, Array]:
    """``(run, n_runs, counts, starts)``: each item's run of equal ids, the number of runs,
    and the length and start of runs ``0 .. num - 1`` (runs past ``num`` are lumped into the
    last; the caller flags ``n_runs > num``)."""
    from keras import ops as K

    same = K.equal(ids[1:], ids[:-1])
    new = K.concatenate([K.ones((1,), "int32"), K.cast(K.logical_not(same), "int32")])
    run = K.cumsum(new) - 1
    n_runs = K.sum(new)
    seg = K.minimum(run, num - 1)
    counts = K.segment_sum(K.ones_like(seg), seg, num_segments=num)
    starts = K.cumsum(counts) - counts
    return run, n_runs, counts, starts


def _grouped(ids: Array, n_runs: Array, starts: Array, num: int) -> Array:
    """Whether no query id has two runs among the first ``num`` (``n_runs <= num``, and the
    run ids, sorted, hold no duplicate)."""
    from keras import ops as K

    n = K.shape(ids)[0]
    run_ids = K.take(ids, K.minimum(starts, n - 1))
    valid = K.arange(num, dtype="int32") < n_runs
    order = K.argsort(run_ids)
    s, v = K.take(run_ids, order), K.take(valid, order)
    dup = K.logical_and(K.equal(s[1:], s[:-1]), K.logical_and(v[1:], v[:-1]))
    return K.logical_and(n_runs <= num, K.logical_not(K.any(dup)))


def _gather(items: tuple[Array, ...], counts: Array, starts: Array, width: int) -> tuple[Array, Array]:
    """The items into ``(Q, width)`` lists (slot ``(q, j)``: item ``start_q + j``) and the mask."""
    from keras import ops as K

    j = K.arange(width, dtype="int32")[None, :]
    mask = j < counts[:, None]
    idx = K.where(mask, starts[:, None] + j, 0)
    lists = tuple(K.where(mask, K.take(x, idx), K.zeros((), x.dtype)) for x in items)
    return lists, mask


def group_query_items(
    ids: Array,
    items: tuple[Array, ...],
    max_queries: int | None,
    max_len: int | None,
    static: bool,
    traced: bool = True,
) -> tuple[tuple[Array, ...], Array, Array, tuple[int, int]]:
    """Flat items ``(N,)`` (``ids`` integer query ids, ``items`` e.g. scores, labels, weights)
    grouped into lists: ``(lists, mask, overflow, (Q, L))``, each list array ``(Q, L)``, ``mask``
    True on the items, ``overflow`` a bool scalar (more than ``max_queries`` distinct ids or a
    query longer than ``max_len``).

    ``static`` (a compiled step): ``Q, L = max_queries, max_len`` (both required). Eagerly,
    ``Q`` and ``L`` are the batch's own (the bounds, where given, only checked through
    ``overflow``). ``traced``: inside a compiled step (the sort behind a ``cond``); eagerly a
    Python branch on the one host read. ``N`` must be at least 1."""
    from keras import ops as K

    if static:
        num = int(max_queries)  # type: ignore[arg-type]
        _, n_runs, counts, starts = _runs(ids, num)
        grouped = _grouped(ids, n_runs, starts, num)

        def keep() -> tuple[Array, ...]:
            return (ids, *items)

        def sort() -> tuple[Array, ...]:
            order = _stable_argsort(ids)
            return tuple(K.take(x, order) for x in (ids, *items))

        if traced:
            ids, *rest = K.cond(grouped, keep, sort)
        else:
            ids, *rest = keep() if bool(K.convert_to_numpy(grouped)) else sort()
        items = tuple(rest)
        _, n_runs, counts, starts = _runs(ids, num)
        width = int(max_len)  # type: ignore[arg-type]
    else:
        run = _runs_eager_count(ids)
        _, n_runs, counts, starts = _runs(ids, run)
        if not bool(K.convert_to_numpy(_grouped(ids, n_runs, starts, run))):
            order = _stable_argsort(ids)
            ids, items = K.take(ids, order), tuple(K.take(x, order) for x in items)
            num = _runs_eager_count(ids)
            _, n_runs, counts, starts = _runs(ids, num)
        else:
            num = run
        width = int(K.convert_to_numpy(K.max(counts)))
    longest = K.max(counts)
    over = K.greater(n_runs, num)
    if max_queries is not None:
        over = K.logical_or(over, K.greater(n_runs, max_queries))
    if max_len is not None:
        over = K.logical_or(over, K.greater(longest, max_len))
    over = K.logical_or(over, K.greater(longest, width))
    lists, mask = _gather(items, counts, starts, width)
    return lists, mask, over, (num, width)


def _runs_eager_count(ids: Array) -> int:
    """The number of runs of equal ids (a host read)."""
    from keras import ops as K

    same = K.equal(ids[1:], ids[:-1])
    return 1 + int(K.convert_to_numpy(K.sum(K.cast(K.logical_not(same), "int32"))))


def batch_stats(ids: Array) -> tuple[int, int]:
    """Eagerly: the batch's number of distinct query ids and its longest query (host reads),
    for error messages."""
    import numpy as np
    from keras import ops as K

    _, counts = np.unique(np.asarray(K.convert_to_numpy(ids)), return_counts=True)
    return int(counts.shape[0]), int(counts.max()) if counts.size else 0
