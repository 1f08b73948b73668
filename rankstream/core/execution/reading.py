"""Reading one batch for the list metrics: the validated batch under a kernel's conventions
(:func:`read_batch`), its top-``k`` selection (:func:`select`: the ranking with the tie policy,
the ranked labels, membership and item weights, the tie groups of ``ties="expected"``) and the
value checks that ride on the ranking's read (:func:`checked_values`)."""

from __future__ import annotations

from typing import Any

from rankstream.core.backends import Array, Context
from rankstream.core.inputs import (
    ListBatch,
    check_list_values,
    list_batch,
    list_values_ok,
    warn_swapped_inputs,
)
from rankstream.core.lists.definition import ListDefinition
from rankstream.core.lists.selection import Selection, positions
from rankstream.core.lists.shared import BatchShared
from rankstream.core.lists.ties import tie_groups
from rankstream.core.topk import top_ranked


def select(
    ctx: Context,
    kernel: ListDefinition,
    batch: ListBatch,
    k: int | None = None,
    shared: BatchShared | None = None,
) -> Selection:
    """The top ``k`` (default: :meth:`depth`) of every list, once per batch. Items not in
    the list never count, whatever their label: the ranked labels are 0 there, and the
    passes over the whole batch read the labels with the mask (no masked copy)."""
    ops = ctx.ops
    shared = BatchShared() if shared is None else shared
    scores, labels, valid = batch.scores, batch.labels, batch.valid
    n = batch.list_size
    k = min(k or kernel.depth(ctx, batch, shared), n)
    acc = ops.acc_dtype(scores)
    # where values are read back, the value checks ride on the ranking's one read
    # (a finite sum of every label, masked or not, clears the labels of the lists too;
    # else :func:`checked_values` looks again at the items of the lists)
    also = None
    if ctx.read_back:
        also = list_values_ok(ops, labels, batch.weights, batch.item_weights, valid, ctx.workspace)
    # the kernels read the labels and membership at each rank (and item weights, when given)
    # (not where a kernel reads the ranked ids: its depth() set shared.ranked_ids)
    key = labels if batch.item_weights is None and not shared.ranked_ids else None
    ranked = top_ranked(ctx, scores, k, valid=valid, ties=kernel.conventions.ties, also=also, labels=key)
    idx = ranked.indices
    lab_sel = ops.cast(ops.take_along(labels, idx), acc)
    in_list = None
    if valid is not None:
        member = ops.take_along(valid, idx)
        in_list = ops.cast(member, acc)
        lab_sel = ops.where(member, lab_sel, 0.0)  # whatever a masked item holds (NaN too)
    w_sel = None
    if batch.item_weights is not None:  # 0 where the ranked item is not in the list
        w_sel = ops.cast(ops.take_along(batch.item_weights, idx), acc)
        w_sel = w_sel if valid is None else ops.where(member, w_sel, 0.0)
    groups = None
    if ranked.values is not None:  # ties="expected": the tie groups of the selection
        groups = tie_groups(ctx, ranked.values, in_list, scores, n, acc, ranked.extends, ranked.extend_rows)
    return Selection(
        ctx=ctx,
        k=k,
        labels=lab_sel,
        in_list=in_list,
        positions=positions(ctx, k, scores, acc),
        weights=batch.weights,
        n=n,
        item_labels=labels,
        full_valid=valid,
        item_weights=w_sel,
        batch_item_weights=batch.item_weights,
        has_nan=ranked.has_nan,
        nan_rows=ranked.nan_rows,
        values_ok=ranked.also_ok,
        shared=shared,
        ties=groups,
        indices=idx if shared.ranked_ids else None,
    )


def read_batch(
    ctx: Context, kernel: ListDefinition, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
) -> ListBatch:
    """The validated batch under this metric's conventions."""
    conv = kernel.conventions
    keras_rs = conv.weighting == "keras_rs"
    batch = list_batch(
        y_pred, y, mask, sample_weight, ops=ctx.ops, item_weights=keras_rs,
        negative_labels=conv.negative_labels, read_back=ctx.read_back,
    )  # fmt: skip
    if ctx.read_back:  # values on the host already: are the arguments swapped? (once per instance)
        seen = ctx.workspace.get("swapped_inputs", None, dict)
        if not seen.get("decided"):
            seen["decided"] = warn_swapped_inputs(ctx.ops, batch)
    return batch


def checked_values(sel: Selection, negative_labels: str, batch: ListBatch) -> Array | None:
    """:func:`~rankstream.core.inputs.check_list_values` of a selection, skipped where the
    values were read back, no score is NaN and the labels and weights are fine: as the
    ranking's one read found (``list_values_ok`` of every label, masked or not), or, under a
    mask, as a second look at the labels of the lists' items finds (row sums over the mask,
    tile by tile). The full check reads the masked labels (:attr:`Selection.full_labels`, a
    full-size copy under a mask): it runs only where something is bad. ``batch``: the whole
    batch (``sel`` may select a block of its rows), where an error locates NaN scores."""
    if sel.nan_rows is None and not sel.has_nan:
        if sel.values_ok:
            return None
        if sel.full_valid is not None:
            ops = sel.ops
            ws = sel.ctx.workspace
            sums = ops.masked_row_sums(sel.item_labels, sel.full_valid, ws)
            ok = list_values_ok(ops, sums, sel.weights, sel.batch_item_weights, sel.full_valid, ws)
            if ops.host_bools(ok)[0]:
                return None
    return check_list_values(sel, batch, negative_labels)
