"""The execution layer of the list metrics, apart from their math.

One batch goes: validated under the kernel's conventions (:func:`read_batch`), selected once at
the deepest of the kernels' depths (:func:`select`: the top ``k`` with the tie policy), in one
piece or in blocks of rows, on the batch's ops or the host's (:func:`select_outputs`), each
kernel's per-list output reduced to its state sums (:func:`select_sums`), the sums handed back
as the caller's arrays (:func:`batch_sums`). Kernels
(:class:`~rankstream.core.lists.definition.ListDefinition`) are called by this layer and never
call it; the adapters, ``ListMetrics`` and ``PairedComparison`` call it.
"""

from rankstream.core.execution.blocks import exported, select_outputs, select_sums, selection_blocks
from rankstream.core.execution.flow import batch_sums, evaluate, list_batch_sums, list_per_list, per_list
from rankstream.core.execution.reading import checked_values, read_batch, select

__all__ = [
    "batch_sums",
    "checked_values",
    "evaluate",
    "exported",
    "list_batch_sums",
    "list_per_list",
    "per_list",
    "read_batch",
    "select",
    "select_outputs",
    "select_sums",
    "selection_blocks",
]
