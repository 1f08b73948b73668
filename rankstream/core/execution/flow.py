"""One call's flow for a list metric: the batch read under the kernel's conventions
(:func:`~rankstream.core.execution.reading.read_batch`), moved to the host ops where they
compute it fastest (``Context.on_host``), selected and reduced to the state sums by the block
executor (:mod:`rankstream.core.execution.blocks`), and handed back as the caller's arrays.

:func:`batch_sums` is the one entry point of the adapters for every kernel: a list kernel's
sums come from this flow; any other kernel (the rank family's streamed kernel, ``ListMetrics``
and ``PairedComparison``, which run the block executor over their members themselves) computes
its own with its ``batch_sums``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rankstream.core.backends import Array, Context, get_ops
from rankstream.core.execution.blocks import exported, select_outputs, select_sums
from rankstream.core.execution.reading import read_batch
from rankstream.core.lists.definition import ListDefinition
from rankstream.core.lists.outputs import ListOutput, quiet


def batch_sums(kernel: Any, ctx: Context | None, *batch: Any, **options: Any) -> Any:
    """The state fields' sums of one batch for any kernel (the adapters' one call): a list
    kernel's by :func:`list_batch_sums`, any other kernel's by its own ``batch_sums(ctx,
    *batch, **options)``."""
    if isinstance(kernel, ListDefinition):
        return list_batch_sums(kernel, ctx, *batch, **options)
    return kernel.batch_sums(ctx, *batch, **options)


def list_batch_sums(
    kernel: ListDefinition, ctx: Context | None, y_pred: Any, y: Any, mask: Any = None,
    sample_weight: Any = None, flat: Mapping[str, tuple[int, ...]] | None = None,
) -> Any:  # fmt: skip
    """The state fields' sums of one batch of a list kernel (on the input's device); with
    ``flat`` (the fields' shapes, in order) joined into one 1-D array
    (:func:`~rankstream.core.execution.blocks.exported`). ``ctx`` None: a fresh context of the
    kernel (:meth:`~rankstream.core.lists.definition.ListDefinition.context`)."""
    ctx = ctx or kernel.context(y_pred, get_ops(y_pred, y, mask, sample_weight))
    ctx, (y_pred, y, mask, sample_weight) = ctx.on_host(y_pred, y, mask, sample_weight)
    with quiet():
        sums = select_sums(ctx, [kernel], read_batch(ctx, kernel, y_pred, y, mask, sample_weight))[0]
    return exported(ctx.ops, sums, flat)


def evaluate(
    kernel: ListDefinition, ctx: Context, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
) -> ListOutput:
    """The per-list output of one batch (``kernel.outputs``), with ``invalid`` the lists with
    bad data (None where the values were read back: bad data raises ``ValueError`` then,
    see :func:`~rankstream.core.inputs.check_list_values`)."""
    return select_outputs(ctx, [kernel], read_batch(ctx, kernel, y_pred, y, mask, sample_weight))[0]


def per_list(kernel: Any, *batch: Any, **options: Any) -> Any:
    """The per-list values of one batch for any kernel (the adapters' one call): a list
    kernel's by :func:`list_per_list`, any other kernel's (``PairedComparison``: per name) by
    its own ``per_list(*batch, **options)``."""
    if isinstance(kernel, ListDefinition):
        return list_per_list(kernel, *batch, **options)
    return kernel.per_list(*batch, **options)


def list_per_list(
    kernel: ListDefinition, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None,
    ctx: Context | None = None,
) -> tuple[Array, Array, Array]:  # fmt: skip
    """Per-list values ``(B, len(top_k))``, whether each list is counted ``(B,)`` bool, and the
    list weights ``(B,)``, as the caller's arrays. Lists flagged invalid (possible only where
    values cannot be read back) get NaN values."""
    ctx = ctx or kernel.context(y_pred, get_ops(y_pred, y, mask, sample_weight))
    ctx, (y_pred, y, mask, sample_weight) = ctx.on_host(y_pred, y, mask, sample_weight)
    ops = ctx.ops
    with quiet():
        out = evaluate(kernel, ctx, y_pred, y, mask, sample_weight)
        values, weights = out.values, out.weights
        if out.invalid is not None:
            values = ops.where(out.invalid[:, None], float("nan"), values)
        if weights is None:
            weights = ops.zeros((values.shape[0],), values, values.dtype) + 1.0
    return ops.export(values), ops.export(out.counted), ops.export(weights)
