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

With ``ties="expected"``: ``E[RP] = (1 / R) sum_{j <= R} r_c(j) / t_c(j)``, each position's tie
group's relevant share (P@k at ``k = R`` of each list); the group straddling ``R`` is complete
in the selection or is its last group, counted by one comparison pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.base import WHOLE_LIST, Selection
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import binary_counts, r_precision_terms
from rankstream.core.lists.shared import BatchShared
from rankstream.core.relevant.moments import hits_moments
from rankstream.core.relevant.ranks import ratio


class RPrecisionKernel(BinaryListKernel):
    """R-precision. Args: the conventions of
    :class:`~rankstream.core.lists.conventions.ListConventions` as keywords."""

    name = "r_precision"
    # measured 41 in blocks of a deep selection (R of thousands); in short lists (R of about
    # ten) its per-list arrays add about 16 a ranked item (0.24x of 41,944 x 50 at 48)
    ranked_bytes = 64

    def __init__(self, **conventions: Any) -> None:
        super().__init__(WHOLE_LIST, **conventions)  # one value per list, from the whole list

    def depth(self, ctx: Context, batch: ListBatch, shared: BatchShared) -> int:
        """The largest ``R`` of the batch (at least 1) where values are read back, kept with
        every list's ``R`` in ``shared``; elsewhere the whole list."""
        if not ctx.read_back:
            return WHOLE_LIST
        ops, t = ctx.ops, self.conventions.relevance_threshold
        n_rel = ops.count_relevant(
            batch.labels, 0.0 if t is None else t, t is None, batch.valid, ops.acc_dtype(batch.scores),
            ctx.workspace,
        )  # fmt: skip
        shared.relevant[t] = n_rel  # what ListKernel.count_relevant would compute
        top = np.asarray(ops.to_numpy(n_rel))
        deepest = max(int(top.max()) if top.size else 0, 1)
        shared.r_precision_depth[t] = deepest
        return deepest

    def binary_values(self, sel: Selection, rel: Array, n_rel: Array) -> Array:
        need = sel.shared.r_precision_depth.get(self.conventions.relevance_threshold, sel.n)
        if sel.k < min(need, sel.n):
            raise ValueError(
                f"RPrecisionKernel reads the top R of every list: got a top-{sel.k} where R reaches "
                f"{need} of {sel.n} items"
            )
        rel = self.expected_relevance(sel, rel)  # each position's expected relevance (ties="expected")
        in_top_r = sel.ops.where(sel.positions[None, :] <= n_rel[:, None], rel, 0.0)
        return self.divide(sel, sel.ops.sum(in_top_r, axis=1), n_rel)[:, None]

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: precision at ``k = R``, ``E = R / N``; best 1 where ``R > 0``."""
        r, n, has = binary_counts(self, sel)
        return r_precision_terms(sel, n, r, has)

    def chance_from_ranks(self, ranks: Any) -> tuple[Any, Any, Any]:
        """:meth:`chance_moments` over relevant ranks: the hypergeometric hits at ``k = R`` over ``R``."""
        n, r, _ = self.rank_sizes(ranks)
        rr = r[:, None]
        mean, var = hits_moments(np.minimum(rr, n[:, None]), n, r)
        return ratio(mean, rr), ratio(var, rr * rr), (rr > 0) + 0.0

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        """``hits@R / R`` from the relevant ranks (each list's own ``R``)."""
        return ratio(self.rank_hits(ranks, rel, n_rel[:, None]), n_rel)[:, None]

    def to_python(self, value: Any) -> float:
        """The one value as a Python float."""
        return super().to_python(value)[0]

    def __repr__(self) -> str:
        level = "" if self.confidence is None else f", confidence={self.confidence}"
        return f"{type(self).__name__}({self.conventions}{level})"
