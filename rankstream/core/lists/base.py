"""The list metrics' base class, :class:`ListKernel`: the math of
:class:`~rankstream.core.lists.definition.ListDefinition` with the entry points of one call
(:meth:`ListKernel.batch_sums`, :meth:`ListKernel.per_list`, ...), each handing the kernel to the
execution layer (:mod:`rankstream.core.execution`), which owns their implementation. This module
also keeps the names the metric files and users import from it.

What a list metric computes:

A list metric is a pure function of one batch's :class:`Selection` (the labels of the top
``K = min(max(k), num_items)`` items in rank order, and the batch itself) returning a
:class:`ListOutput`: per-list values at every cut-off ``k_j``, whether each list holds a
relevant item, and the relevance keras-rs weighs lists by. The base turns those into the state

    value_sum[j] = sum_i w_i v[i, j],   weight_sum = sum_i w_i,   count = #{i : w_i > 0},
    invalid = lists with bad data found where update could not read values back,

over the lists that are counted; the result is ``value_sum / weight_sum``. Every ``k`` is read
from cumulative sums over the one selection (:meth:`ListKernel.cut`); no loop over rows or k.

With ``confidence=level`` (e.g. 0.95) the state also keeps ``w2v2_sum[j] = sum_i w_i^2 v[i, j]^2``,
``w2v_sum[j] = sum_i w_i^2 v[i, j]`` and ``w2_sum = sum_i w_i^2``, and the metric reports the
standard error of the weighted mean over the lists (the ratio-estimator variance
``n / (n - 1) * sum_i w_i^2 (v_i - m)^2 / (sum_i w_i)^2``, ``n`` the count), Student's ``t``
interval at that level with ``n - 1`` degrees of freedom, and the count
(:mod:`rankstream.core.uncertainty`; the derivation is in ``docs/statistics.md``).

With ``chance=True`` the state also keeps, under a uniformly random ranking of each list's items
(:mod:`rankstream.core.lists.chance`), ``chance_expected_sum[j] = sum_i w_i E[v_ij]``,
``chance_variance_sum[j] = sum_i w_i^2 Var[v_ij]`` and ``chance_best_sum[j] = sum_i w_i b_ij``
(``b`` the value under the ideal ranking), and the metric reports ``expected`` (``E``, the
weighted mean of the expectations), ``adjusted`` ``(M - E) / (M_best - E)`` (1 at the optimum,
0 by chance; ``M_best`` the weighted mean of ``b``) and ``z`` ``(M - E) / sqrt(Var)`` with
``Var = sum_i w_i^2 Var[v_i] / (sum_i w_i)^2`` (``docs/chance.md``).

The conventions are one frozen :class:`~rankstream.core.lists.conventions.ListConventions`
(each adapter picks its peer's).

A masked item behaves exactly as if it were not in the list, so a list whose items are all
masked (or padding) is not a list: it is never counted, whatever the ``empty`` policy (not
even as a list without a relevant item under ``"zero"``), and its weight enters no sum. ``k``
past the end of a list is clipped to the list.
"""

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
        self, ctx: Context, batch: ListBatch, k: int | None = None, shared: dict[Any, Any] | None = None
    ) -> Selection:
        """The top ``k`` (default: :meth:`depth`) of every list, once per batch
        (:func:`~rankstream.core.execution.select`)."""
        return execution.select(ctx, self, batch, k, shared)
