"""The block executor of the list metrics: every kernel's per-list outputs or state sums of
one batch from one selection (:func:`select_outputs`, :func:`select_sums`), the batch in one
piece or, where values are read back and its selection would be large, in blocks of rows
(:func:`selection_blocks`), small blocks on the host ops. Kernels are called by it
(:meth:`~rankstream.core.lists.definition.ListDefinition.depth`, ``outputs``, ``list_outputs``,
``weighed``, ``reduce``) and never call it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from rankstream.core.backends import Array, Context, Ops, value_bytes
from rankstream.core.execution.reading import checked_values, select
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.definition import ListDefinition
from rankstream.core.lists.outputs import ListOutput, joined_outputs
from rankstream.core.lists.selection import row_slices
from rankstream.core.lists.shared import BatchShared
from rankstream.core.state import join_flat, zero_sums


def _exported_output(ops: Ops, out: ListOutput) -> ListOutput:
    """A per-list output computed on the host ops with its arrays as the caller's."""
    arrays = {f.name: getattr(out, f.name) for f in fields(out)}
    return replace(out, **{name: ops.export(v) for name, v in arrays.items() if v is not None})


def _exported_sums(ops: Ops, sums: Mapping[str, Array]) -> dict[str, Array]:
    """State sums computed on the host ops as the caller's arrays."""
    return {name: ops.export(value) for name, value in sums.items()}


def _batch_arrays(batch: ListBatch) -> tuple[Any, ...]:
    """The arrays of a batch, in :class:`ListBatch`'s order after its ops."""
    return batch.scores, batch.labels, batch.valid, batch.weights, batch.item_weights


def exported(ops: Ops, sums: Mapping[str, Array], flat: Mapping[str, tuple[int, ...]] | None = None) -> Any:
    """The sums as the caller's arrays (``ops.export``: torch tensors from the host ops); with
    ``flat`` (the fields' shapes, in order), the fields joined into one 1-D array first
    (:func:`~rankstream.core.state.join_flat`): one export, where each field's costs a call."""
    if flat is not None:
        return ops.export(join_flat(ops, sums, flat))
    return {name: ops.export(value) for name, value in sums.items()}


def _depth(ctx: Context, kernels: list[ListDefinition], batch: ListBatch, shared: BatchShared) -> int:
    """The deepest of the kernels' depths on ``batch``."""
    if len(kernels) == 1:
        return kernels[0].depth(ctx, batch, shared)
    return max(kernel.depth(ctx, batch, shared) for kernel in kernels)


def select_outputs(ctx: Context, kernels: list[ListDefinition], batch: ListBatch) -> list[ListOutput]:
    """Every kernel's :meth:`ListDefinition.outputs` of one batch, read from one selection at the
    deepest of their depths (the kernels read the batch alike: the first one selects).

    Where values are read back and that selection would be large (:func:`selection_blocks`:
    ``B x K`` past an 8th of the scores' bytes, at trec_eval's depth of 1,000 or a whole-list
    metric), the rows go in blocks (:func:`_by_blocks`): the temporaries are those of one
    block's selection, and the values those of the one selection, summed in another order."""
    if batch.batch_size == 0:  # no list: nothing to read
        return [_no_lists(ctx.ops, kernel, batch) for kernel in kernels]
    shared = BatchShared()
    k, blocks = _blocks_of(ctx, kernels, batch, shared)
    if blocks is not None:
        return _by_blocks(ctx, kernels, batch, blocks, reduce=False)
    return _outputs(ctx, kernels, batch, k, shared)


def select_sums(ctx: Context, kernels: list[ListDefinition], batch: ListBatch) -> list[dict[str, Array]]:
    """Every kernel's state sums of one batch (:meth:`ListDefinition.reduce` of
    :func:`select_outputs`). Where the batch goes in blocks of rows and no kernel reads over
    the batch's lists (:meth:`ListDefinition.weighed`), each block's per-list outputs are reduced
    as they come and the blocks' sums added: the per-list arrays held are one block's. (A
    kernel's are about 18 bytes a list, its values, relevance and flags: in lists of 100 items,
    with a few kernels, about the scores' own size once joined over the batch.)"""
    if batch.batch_size == 0:  # no list: nothing to read, the sums are zeros (an update's no-op)
        return [zero_sums(ctx.ops, kernel.fields, batch.scores) for kernel in kernels]
    shared = BatchShared()
    k, blocks = _blocks_of(ctx, kernels, batch, shared)
    if blocks is not None and not any(kernel._weighs for kernel in kernels):
        return _by_blocks(ctx, kernels, batch, blocks, reduce=True)
    if blocks is not None:
        outs = _by_blocks(ctx, kernels, batch, blocks, reduce=False)
    else:
        outs = _outputs(ctx, kernels, batch, k, shared)
    return [kernel.reduce(ctx.ops, out) for kernel, out in zip(kernels, outs, strict=True)]


def _no_lists(ops: Ops, kernel: ListDefinition, batch: ListBatch) -> ListOutput:
    """The per-list output of a batch of no list: every per-list array with 0 rows."""
    values = ops.zeros((0, len(kernel.top_k)), batch.scores, ops.acc_dtype(batch.scores))
    none = values[:, 0] > 0
    return ListOutput(values, none, counted=none, weights=batch.weights)


def _blocks_of(
    ctx: Context, kernels: list[ListDefinition], batch: ListBatch, shared: BatchShared
) -> tuple[int, list[slice] | None]:
    """The depth of the kernels on ``batch`` and the blocks of rows it is selected in (None:
    in one piece; :func:`selection_blocks`)."""
    first = kernels[0]
    k = first.depth(ctx, batch, shared) if len(kernels) == 1 else _depth(ctx, kernels, batch, shared)
    if ctx.read_back and int(batch.scores.shape[0]) * k >= ctx.sizes.select_blocks_from:  # else one
        return k, selection_blocks(ctx, batch, k, _selection_bytes(ctx, kernels, batch.valid is not None))
    return k, None


def _outputs(
    ctx: Context, kernels: list[ListDefinition], batch: ListBatch, k: int, shared: BatchShared
) -> list[ListOutput]:
    """Every kernel's :meth:`ListDefinition.outputs` of the batch in one piece."""
    first = kernels[0]
    sel = select(ctx, first, batch, k=k, shared=shared)
    invalid = checked_values(sel, first.conventions.negative_labels, batch)
    return [kernel.outputs(sel, invalid) for kernel in kernels]


def _selection_bytes(ctx: Context, kernels: list[ListDefinition], masked: bool) -> int:
    """Bytes per ranked item the kernels' selection and arrays hold together (an upper bound
    of the measured ones; see :attr:`ListDefinition.ranked_bytes`, what each kernel declares):
    the largest kernel's, ``Sizes.selection_bytes_per_kernel`` more per other kernel (each lets
    its arrays go before the next runs), ``Sizes.selection_bytes_masked`` more with a mask (the
    membership and its cast, the masked ideal ranking)."""
    z = ctx.sizes
    most = max(kernel.ranked_bytes for kernel in kernels)
    return (
        most + z.selection_bytes_per_kernel * (len(kernels) - 1) + (z.selection_bytes_masked if masked else 0)
    )


def _by_blocks(
    ctx: Context, kernels: list[ListDefinition], batch: ListBatch, blocks: list[slice], reduce: bool
) -> Any:
    """:func:`select_outputs` by blocks of rows: each block is selected at its own depth (its
    largest ``R`` for R-precision; what the depths compute is the block's) and gives its
    per-list outputs (:meth:`ListDefinition.list_outputs`); the blocks' outputs are joined
    (``(B, ...)`` arrays), and the part read over the batch's lists (:meth:`ListDefinition.weighed`:
    keras-rs's list weights) follows. ``reduce`` (no kernel weighs): each block's outputs
    reduced to the state sums instead, and the blocks' sums added (:func:`select_sums`)."""
    first, ops, z = kernels[0], ctx.ops, ctx.sizes
    # a block's scratch tiles hold at most a share of the whole batch's values (its own
    # thresholds would let a masked top-k copy the block whole)
    b, n = int(batch.scores.shape[0]), int(batch.scores.shape[1])
    ctx = replace(ctx, tile_cap=max(b * n // z.block_tile_share, 1))
    if first.conventions.ties == "random":  # one column permutation for the batch's blocks
        ctx = replace(ctx, perm=[None])
    # blocks small enough for the host ops (numpy views) take them, as a small batch does: a
    # call there costs a few microseconds less, and a block makes about a hundred; only blocks
    # of a 16th of the rows at most, whose numpy temporaries (a few of the block's size) stay
    # far inside the quarter of the scores an update may hold. A batch already cut in 8 blocks
    # or more is cut in 16 (measured: MAP@1000 at 256 x 5,000, 10 blocks on torch 1.06x 16 on
    # the host)
    on, host = ctx, z.host_blocks
    if host // 2 <= len(blocks) < host and b >= host:
        blocks = row_slices(b, -(-b // host))
    if host * (blocks[0].stop - blocks[0].start) <= b:
        on, _ = ctx.on_host(*_batch_arrays(batch.rows(blocks[0])))
    outs = _blocks_joined(ctx, on, kernels, batch, blocks, reduce)
    if reduce:
        return outs if on is ctx else [_exported_sums(on.ops, sums) for sums in outs]
    if on is not ctx:  # the joined outputs back as the batch's arrays
        outs = [_exported_output(on.ops, out) for out in outs]
    item_weighted = batch.item_weights is not None
    return [kernel.weighed(ops, out, item_weighted) for kernel, out in zip(kernels, outs, strict=True)]


def _blocks_joined(
    ctx: Context,
    on: Context,
    kernels: list[ListDefinition],
    batch: ListBatch,
    blocks: list[slice],
    reduce: bool,
) -> list[Any]:
    """The per-list outputs of each block of rows, selected on the ops of ``on`` (the batch's
    own or the host's), joined along the rows; ``reduce``: their state sums, added."""
    first = kernels[0]
    outs: list[Any] = []
    for rows in blocks:
        block, shared = batch.rows(rows), BatchShared()
        if on is not ctx:
            held = (None if a is None else on.ops.asarray(a) for a in _batch_arrays(block))
            block = ListBatch(on.ops, *held)
        sel = select(on, first, block, k=_depth(on, kernels, block, shared), shared=shared)
        invalid = checked_values(sel, first.conventions.negative_labels, batch)
        part = [kernel.list_outputs(sel, invalid) for kernel in kernels]
        del sel
        if reduce:
            sums = [kernel.reduce(on.ops, out) for kernel, out in zip(kernels, part, strict=True)]
            del part
            outs = [{n: o[n] + s[n] for n in o} for o, s in zip(outs, sums, strict=True)] if outs else sums
            continue
        # joined block by block: a block's outputs may be views of its (rows, K) arrays (a
        # column of the ideal gains), which the copy of a join lets go before the next block
        outs = [joined_outputs(on.ops, [o, p]) for o, p in zip(outs, part, strict=True)] if outs else part
    return outs


def selection_blocks(
    ctx: Context, batch: ListBatch, k: int, per_item: int | None = None
) -> list[slice] | None:
    """The blocks of rows a batch is selected and evaluated in, at depth ``k`` (clipped to the
    list), where values are read back (eager: the batch size is known): None (the batch in one
    piece) where the ``B x K`` selection is small at ``per_item`` bytes per ranked item
    (``Sizes.selected_bytes`` by default; at least ``Sizes.selected_row_bytes`` a row; see
    ``Sizes.select_share``); else consecutive blocks of rows whose selection holds at most
    ``Sizes.select_share`` of the scores' bytes. Reads only shapes and the scores' dtype."""
    z = ctx.sizes
    per_item = z.selected_bytes if per_item is None else per_item
    shape = batch.scores.shape
    b, n = int(shape[0]), int(shape[1])
    items = b * min(k, n)
    if items < z.select_blocks_from:
        return None
    budget = int(b * n * value_bytes(ctx.ops, batch.scores) * z.select_share)
    per_row = max(per_item * min(k, n), z.selected_row_bytes)
    if b * per_row <= budget:
        return None
    return row_slices(b, max(1, budget // per_row))
