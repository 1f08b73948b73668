"""Discounted cumulative gain at k (unnormalised).

For one list, with ``g(.)`` the gain, ``d(j)`` the discount of rank ``j`` and ``y_(j)`` the
label of the item ranked ``j``-th by the scores::

    DCG@k = sum_{j <= k} g(y_(j)) * d(j)

Defaults as keras-rs ``DCG``: ``g(y) = 2^y - 1`` (``gain="exp_rank"``; ``"linear_rank"`` is
``g(y) = y``, or any callable on arrays) and ``d(j) = 1 / log2(j + 1)`` (or any callable of the
1-based rank); the gain and discount code is :class:`~rankstream.core.lists.ndcg.NDCGKernel`'s,
so ``nDCG@k = DCG@k / IDCG@k`` of the same options. With ``relevance_threshold=t`` labels below
``t`` count as 0 before the gain; ``None`` (default) uses the labels as they are. A list is
relevant when it holds a label ``> 0`` (``>= t``); lists without one are skipped or count 0
per the ``empty`` policy. Per-item weights (``weighting="keras_rs"``) weigh every gain,
``DCG@k = sum_{j <= k} w_(j) g(y_(j)) d(j)``, and give each list its weight from its gains as
keras-rs does. Cost: one top-``max(k)`` selection, one cumulative sum, one count of the relevant
items (and one pass over the gains for keras-rs weighting).
"""

from __future__ import annotations

from collections.abc import Callable  # noqa: F401  (NDCGKernel's options, in the signature, name it)
from typing import Any

import numpy as np

from rankstream.core.backends import Array
from rankstream.core.lists.base import ListOutput, Selection
from rankstream.core.lists.chance import dcg_terms, share_gain_pass
from rankstream.core.lists.ndcg import NDCGKernel


class DCGKernel(NDCGKernel):
    """DCG@k for every ``k`` in ``top_k``. Args as :class:`~rankstream.core.lists.ndcg.NDCGKernel`
    (``relevance_threshold`` default None: the labels as they are, keras-rs's)."""

    name = "dcg"
    weighted_values = True

    def __init__(
        self, top_k: int | list[int] = 10, *, relevance_threshold: float | None = None, **options: Any
    ) -> None:
        super().__init__(top_k, relevance_threshold=relevance_threshold, **options)

    def list_values(self, sel: Selection) -> ListOutput:
        if self.chance:  # the count of relevant items from the pass of the gains chance makes
            share_gain_pass(self, sel)
        _, dcg = self.dcg(sel)
        relevant = self.count_relevant(sel) > 0
        if self.conventions.weighting != "keras_rs":
            return ListOutput(dcg, relevant)
        _, _, wg_sum, g_in = self.item_gain_rows(sel, top=False)
        return ListOutput(dcg, relevant, g_in, wg_sum)

    def chance_moments(self, sel: Selection) -> tuple[Array, Array, Array]:
        """Under a random ranking: DCG@k's mean and variance (Hoeffding), best ``IDCG@k``
        (:func:`~rankstream.core.lists.chance_gains.dcg_terms`)."""
        return dcg_terms(self, sel, normalised=False)

    def chance_from_ranks(self, ranks: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`chance_moments` over relevant ranks (best ``IDCG@k``;
        :meth:`~rankstream.core.lists.ndcg.NDCGKernel.rank_chance`)."""
        return self.rank_chance(ranks, normalised=False)

    def from_ranks(self, ranks: Any) -> ListOutput:
        """``DCG@k`` from the relevant ranks (:meth:`~rankstream.core.lists.ndcg.NDCGKernel.rank_dcg`)."""
        gains = np.where(ranks.present, self.rank_gains(ranks.labels), 0.0)
        relevant = ranks.count(ranks.relevant(self.conventions.relevance_threshold)) > 0
        return ListOutput(self.rank_dcg(ranks, gains), relevant, ranks.count(gains))
