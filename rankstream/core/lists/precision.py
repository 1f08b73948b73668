"""Precision at k, and the binary relevance of the ranked items shared by the binary list metrics.

For one list with binary relevance ``rel_j`` of the item ranked ``j``-th by the scores::

    P@k = (1 / Z) * sum_{j <= k} rel_j

with ``Z`` a convention: ``denominator="k"``, ``Z = k`` (trec_eval ``P@k``, torchmetrics
``RetrievalPrecision``; a list shorter than ``k`` cannot reach 1) or ``denominator="valid"``,
``Z = min(k, n)`` with ``n`` the number of items of the list (keras-rs ``PrecisionAtK``).

An item is relevant when ``label > 0`` or, with ``relevance_threshold=t`` (``t > 0``), when
``label >= t``; masked items are not in the list. Lists with no relevant item have ``P@k = 0``
and are skipped or counted per the ``empty`` policy. Per-item weights (``weighting="keras_rs"``)
do not enter the per-list value; they give each list its weight as keras-rs does, from
``sum_i w_i rel_i / sum_i rel_i``. Cost: the base's one top-``max(k)`` selection, one cumulative
sum, one count of the relevant items.
"""

from __future__ import annotations

from rankstream.core.lists.base import Array, ListKernel, ListOutput, Selection


class BinaryListKernel(ListKernel):
    """A list metric of binary relevance: ``label > 0``, or ``label >= relevance_threshold > 0``."""

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        empty: str = "skip",
        ties: str = "first",
        seed: int | None = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        relevance_threshold: float | None = None,
    ) -> None:
        super().__init__(
            top_k,
            empty=empty,
            ties=ties,
            seed=seed,
            weighting=weighting,
            negative_labels=negative_labels,
            relevance_threshold=relevance_threshold,
        )
        if (t := self.conventions.relevance_threshold) is not None and not t > 0:
            raise ValueError(f"relevance_threshold must be > 0 or None (label > 0), got {t!r}")

    def ranked_relevance(self, sel: Selection) -> tuple[Array, Array, Array | None]:
        """``(rel, R, W)``: the 0/1 relevance ``(B, K)`` of the ranked items (0 past the list's
        items), ``R`` per list and, with per-item weights, ``W = sum_i w_i rel_i`` (else None)."""
        w = sel.full_item_weights
        w_rel = None if w is None else sel.ops.sum(self.is_relevant(sel, sel.full_labels) * w, axis=1)
        return self.is_relevant(sel, sel.labels), self.count_relevant(sel), w_rel


class PrecisionKernel(BinaryListKernel):
    """P@k for every ``k`` in ``top_k``. Args: ``top_k``; ``denominator`` (``"k"`` or
    ``"valid"``); the conventions of :class:`~rankstream.core.lists.base.ListConventions`."""

    name = "precision"

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        denominator: str = "k",
        empty: str = "skip",
        ties: str = "first",
        seed: int | None = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        relevance_threshold: float | None = None,
    ) -> None:
        super().__init__(
            top_k,
            empty=empty,
            ties=ties,
            seed=seed,
            weighting=weighting,
            negative_labels=negative_labels,
            relevance_threshold=relevance_threshold,
        )
        if denominator not in ("k", "valid"):
            raise ValueError(f"denominator must be 'k' or 'valid', got {denominator!r}")
        self.denominator = denominator

    def list_values(self, sel: Selection) -> ListOutput:
        ops, (rel, n_rel, w_rel) = sel.ops, self.ranked_relevance(sel)
        hits = self.cut(sel, ops.cumsum(rel, axis=1))
        if self.denominator == "k":
            den = ops.asarray([float(k) for k in self.top_k], like=hits, dtype=hits.dtype)
        else:  # min(k, n): the list's items within the top k (masked items rank last)
            listed = sel.positions[None, :] if sel.in_list is None else ops.cumsum(sel.in_list, axis=1)
            den = self.cut(sel, listed)
        return ListOutput(self.divide(sel, hits, den), n_rel > 0, n_rel, w_rel)
