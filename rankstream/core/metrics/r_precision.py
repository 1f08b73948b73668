"""R-precision: precision at R, the list's number of relevant items.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores and
``R`` the number of relevant items of the list::

    RP = (1 / R) * sum_{j <= R} rel_j        (0 when R = 0)

(trec_eval ``Rprec``, torchmetrics ``RetrievalRPrecision``). There is no ``k``: ``R`` differs
per list. Relevance, masks, the ``empty`` policy and per-item weights as in
:mod:`~rankstream.core.metrics.precision`; the result is one float.

Cost: the selection is the whole list (``top_k`` is past the end of any list): a top-``N`` of
the scores, i.e. a sort of each row, ``O(N log N)`` per list against ``O(N log k)`` for the
metrics at ``k``; then one cumulative sum and one elementwise comparison with ``R``. Selecting
only the top ``max R`` of the batch would need ``R`` read back to the host in every update (no
host sync, and impossible under ``jit``), so the whole list it is.
"""

from __future__ import annotations

from typing import Any

from rankstream.core.metrics.lists import ListOutput, Selection
from rankstream.core.metrics.precision import BinaryListKernel

WHOLE_LIST = 2**31 - 1  # a top_k past the end of any list: the selection is the whole list


class RPrecisionKernel(BinaryListKernel):
    """R-precision. Args: the conventions of
    :class:`~rankstream.core.metrics.lists.ListConventions` as keywords."""

    name = "r_precision"

    def __init__(
        self,
        *,
        empty: str = "skip",
        ties: str = "first",
        seed: int | None = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        relevance_threshold: float | None = None,
    ) -> None:
        super().__init__(  # one value per list, from the whole list
            WHOLE_LIST,
            empty=empty,
            ties=ties,
            seed=seed,
            weighting=weighting,
            negative_labels=negative_labels,
            relevance_threshold=relevance_threshold,
        )

    def list_values(self, sel: Selection) -> ListOutput:
        if sel.k < sel.n:
            raise ValueError(f"RPrecisionKernel reads the whole list: got a top-{sel.k} of {sel.n} items")
        rel, n_rel, w_rel = self.ranked_relevance(sel)
        in_top_r = sel.ops.where(sel.positions[None, :] <= n_rel[:, None], rel, 0.0)
        hits = sel.ops.sum(in_top_r, axis=1)
        return ListOutput(self.divide(sel, hits, n_rel)[:, None], n_rel > 0, n_rel, w_rel)

    def finalize(self, values: Any) -> float:  # type: ignore[override]
        return super().finalize(values)[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.conventions})"
