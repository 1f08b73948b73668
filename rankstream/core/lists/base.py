"""The list metrics' base class, :class:`ListKernel`: the math of
:class:`~rankstream.core.lists.definition.ListDefinition` (what a list metric computes, its
state, conventions, standard error and chance terms: see that module) with the entry points of
one call (:meth:`ListKernel.batch_sums`, :meth:`ListKernel.per_list`, ...), each handing the
kernel to the execution layer (:mod:`rankstream.core.execution`), which owns their
implementation. This module also keeps the names the metric files and users import from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rankstream.core import execution
from rankstream.core.backends import Array, Context
from rankstream.core.execution import checked_values, exported, select_outputs, select_sums, selection_blocks
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.conventions import ListConventions
from rankstream.core.lists.definition import WHOLE_LIST, ListDefinition
from rankstream.core.lists.outputs import (
    INTERVAL_QUANTITIES,
    ListField,
    ListOutput,
    call_user,
    divided,
    joined_outputs,
    list_ones_of,
    list_sums,
    list_values_of,
    quiet,
    squared_list_values_of,
)
from rankstream.core.lists.selection import Selection
from rankstream.core.lists.shared import BatchShared

__all__ = [
    "INTERVAL_QUANTITIES",
    "WHOLE_LIST",
    "Array",
    "Context",
    "ListConventions",
    "ListField",
    "ListKernel",
    "ListOutput",
    "Selection",
    "call_user",
    "checked_values",
    "divided",
    "exported",
    "joined_outputs",
    "list_ones_of",
    "list_sums",
    "list_values_of",
    "quiet",
    "select_outputs",
    "select_sums",
    "selection_blocks",
    "squared_list_values_of",
]


class ListKernel(ListDefinition):
    """Base of the list metrics: subclasses implement :meth:`list_values` (a pure function of
    the selection) and set ``name`` (see :class:`~rankstream.core.lists.definition.ListDefinition`
    for the contract). The methods below are the entry points of one call outside an adapter;
    each hands the kernel to the execution layer (:mod:`rankstream.core.execution`), which owns
    what they do: a kernel computes nothing of a batch's flow itself."""

    def batch_sums(
        self, ctx: Context | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None,
        flat: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Any:  # fmt: skip
        """The state fields' sums of one batch (on the input's device); with ``flat`` (the
        fields' shapes, in order) joined into one 1-D array
        (:func:`~rankstream.core.execution.list_batch_sums`)."""
        return execution.list_batch_sums(self, ctx, y_pred, y, mask, sample_weight, flat=flat)

    def per_list(
        self, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ctx: Context | None = None
    ) -> tuple[Array, Array, Array]:
        """Per-list values ``(B, len(top_k))``, whether each list is counted ``(B,)`` bool,
        and the list weights ``(B,)``. Lists flagged invalid (possible only where values
        cannot be read back) get NaN values (:func:`~rankstream.core.execution.list_per_list`)."""
        return execution.list_per_list(self, y_pred, y, mask, sample_weight, ctx=ctx)

    def evaluate(
        self, ctx: Context, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> ListOutput:
        """The per-list output of one batch (:meth:`outputs`), with ``invalid`` the lists with
        bad data (None where the values were read back; :func:`~rankstream.core.execution.evaluate`)."""
        return execution.evaluate(self, ctx, y_pred, y, mask, sample_weight)

    def read_batch(
        self, ctx: Context, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> ListBatch:
        """The validated batch under this metric's conventions
        (:func:`~rankstream.core.execution.read_batch`)."""
        return execution.read_batch(ctx, self, y_pred, y, mask, sample_weight)

    def selection(
        self, ctx: Context, batch: ListBatch, k: int | None = None, shared: BatchShared | None = None
    ) -> Selection:
        """The top ``k`` (default: :meth:`depth`) of every list, once per batch
        (:func:`~rankstream.core.execution.select`)."""
        return execution.select(ctx, self, batch, k, shared)
