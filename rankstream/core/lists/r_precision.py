"""R-precision: precision at R, the list's number of relevant items.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores and
``R`` the number of relevant items of the list::

    RP = (1 / R) * sum_{j <= R} rel_j        (0 when R = 0)

(trec_eval ``Rprec``, torchmetrics ``RetrievalRPrecision``). There is no ``k``: ``R`` differs
per list. Relevance, masks, the ``empty`` policy and per-item weights as in
:mod:`~rankstream.core.lists.precision`; the result is one float.

Cost: where values are read back (CPU, eager), one counting pass gives ``R`` of every list
(row tiles, shared with the metric's own ``R``), and the selection is the top ``max R`` of the
batch (one host read of that maximum): a ``topk`` at the largest ``R``, never a sort of the
whole list, and the temporaries of a ``(B, max R)`` selection. Elsewhere (an accelerator, a
``jit`` trace) reading ``max R`` would be a device sync or impossible, so the selection is the
whole list: a top-``N`` of the scores, i.e. a sort of each row. Either way, one cumulative
comparison with ``R`` and a sum per list follow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends import Context
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.precision import BinaryListKernel

WHOLE_LIST = 2**31 - 1  # a top_k past the end of any list: the selection is the whole list


class RPrecisionKernel(BinaryListKernel):
    """R-precision. Args: the conventions of
    :class:`~rankstream.core.lists.base.ListConventions` as keywords."""

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

    def depth(self, ctx: Context, batch: ListBatch, shared: dict[Any, Any]) -> int:
        """The largest ``R`` of the batch (at least 1) where values are read back, kept with
        every list's ``R`` in ``shared``; elsewhere the whole list."""
        if not ctx.read_back:
            return WHOLE_LIST
        ops, t = ctx.ops, self.conventions.relevance_threshold
        n_rel = ops.count_relevant(
            batch.labels, 0.0 if t is None else t, t is None, batch.valid, ops.acc_dtype(batch.scores),
            ctx.workspace,
        )  # fmt: skip
        shared[("relevant", t)] = n_rel  # what ListKernel.count_relevant would compute
        top = np.asarray(ops.to_numpy(n_rel))
        deepest = max(int(top.max()) if top.size else 0, 1)
        shared[("r_precision_depth", t)] = deepest
        return deepest

    def list_values(self, sel: Selection) -> ListOutput:
        need = sel.shared.get(("r_precision_depth", self.conventions.relevance_threshold), sel.n)
        if sel.k < min(need, sel.n):
            raise ValueError(
                f"RPrecisionKernel reads the top R of every list: got a top-{sel.k} where R reaches "
                f"{need} of {sel.n} items"
            )
        rel, n_rel, w_rel = self.ranked_relevance(sel)
        in_top_r = sel.ops.where(sel.positions[None, :] <= n_rel[:, None], rel, 0.0)
        hits = sel.ops.sum(in_top_r, axis=1)
        return ListOutput(self.divide(sel, hits, n_rel)[:, None], n_rel > 0, n_rel, w_rel)

    def finalize(self, values: Any) -> float:  # type: ignore[override]
        return super().finalize(values)[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.conventions})"
