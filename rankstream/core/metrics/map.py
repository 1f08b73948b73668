"""Mean average precision at k.

For one list with binary relevance ``rel_j`` of the item at rank ``j``::

    AP@k = (1 / Z) * sum_{j <= k} rel_j * P@j,    P@j = (1 / j) * sum_{i <= j} rel_i

and ``MAP@k`` is the (weighted) mean of ``AP@k`` over the counted lists. The denominator
``Z`` is a convention:

* ``denominator="min"``: ``Z = min(R, k)`` with ``R`` the number of relevant items of the
  list (ignite's ``rec_sys.MAP``; an AP of 1 is reachable at every k);
* ``denominator="all"``: ``Z = R`` (keras-rs ``MeanAveragePrecision``, scikit-learn's
  ``average_precision_score`` at ``k = num_items``).

An item is relevant when ``label > 0`` (ignite) or, with ``relevance_threshold=t``, when
``label >= t`` (keras-rs uses ``t = 1``). Lists with ``R = 0`` have ``AP = 0`` and are
skipped or counted per the ``empty`` policy.

With per-item weights ``w`` (``weighting="keras_rs"`` and a ``(batch, num_items)``
``sample_weight``, keras-rs's convention), ``P@j`` stays unweighted and
``AP@k = (1 / Z) * sum_{j <= k} w_(j) rel_j * P@j`` with ``Z = sum_i w_i rel_i`` (``"all"``)
or, for ``"min"``, the sum of the ``k`` largest ``w_i rel_i`` (the best reachable numerator;
``min(R, k)`` for unit weights).
"""

from __future__ import annotations

from typing import Any

from rankstream.core.metrics.lists import ListKernel, Selection
from rankstream.core.ops import Array

DENOMINATORS = ("min", "all")


class MAPKernel(ListKernel):
    """MAP@k for every ``k`` in ``top_k`` from one top-``max(k)`` selection."""

    name = "map"

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        denominator: str = "min",
        relevance_threshold: float | None = None,
        empty: str = "skip",
        ties: str = "first",
        seed: Any = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        generator: Any = None,
    ) -> None:
        super().__init__(
            top_k,
            empty=empty,
            ties=ties,
            seed=seed,
            weighting=weighting,
            negative_labels=negative_labels,
            generator=generator,
        )
        if denominator not in DENOMINATORS:
            raise ValueError(f"denominator must be one of {DENOMINATORS}, got {denominator!r}")
        if relevance_threshold is not None and not relevance_threshold > 0:
            raise ValueError(
                f"relevance_threshold must be > 0 or None (label > 0), got {relevance_threshold!r}"
            )
        self.denominator = denominator
        self.relevance_threshold = relevance_threshold

    def _relevant(self, sel: Selection, labels: Array, in_list: Array | None) -> Array:
        ops = sel.ops
        t = self.relevance_threshold
        rel = ops.cast(labels > 0 if t is None else labels >= t, labels.dtype)
        return rel if in_list is None else rel * in_list

    def has_relevant(self, sel: Selection) -> Array:
        return sel.cache["n_rel"] > 0

    def list_relevance(self, sel: Selection) -> tuple[Array, Array]:
        ops = sel.ops
        n_rel = sel.cache["n_rel"]
        rel_pos = n_rel > 0
        if sel.full_item_weights is not None:
            w_rel = sel.cache["w_rel"]
            return rel_pos, ops.where(rel_pos, w_rel / ops.where(rel_pos, n_rel, 1.0), 0.0)
        # Constant weight over a list's items: sum_j W R / sum_j R is that weight.
        w = 1.0 if sel.weights is None else sel.weights
        return rel_pos, ops.where(rel_pos, w, 0.0 * n_rel)

    def values(self, sel: Selection) -> Array:
        ops = sel.ops
        rel = self._relevant(sel, sel.labels, sel.in_list)
        precision = ops.cumsum(rel, axis=1) / sel.positions
        hits = precision * rel if sel.item_weights is None else precision * rel * sel.item_weights
        sum_prec = self._cut(sel, ops.cumsum(hits, axis=1))
        t = self.relevance_threshold
        n_rel = ops.count_relevant(  # R, one pass over the labels
            sel.full_labels, 0.0 if t is None else t, t is None, sel.full_valid, sel.positions.dtype
        )
        sel.cache["n_rel"] = n_rel
        if sel.full_item_weights is not None:
            acc = sel.positions.dtype
            full = ops.cast(sel.full_labels, acc)
            w_rel = ops.cast(full > 0 if t is None else full >= t, acc) * sel.full_item_weights
            sel.cache["w_rel"] = ops.sum(w_rel, axis=1)
            if self.denominator == "min":
                best = ops.cumsum(ops.topk(w_rel, sel.k)[0], axis=1)
                denom = self._cut(sel, best)
            else:
                denom = sel.cache["w_rel"][:, None]
        elif self.denominator == "min":
            denom = ops.stack([ops.minimum(n_rel, float(k)) for k in self.top_k], axis=1)
        else:
            denom = n_rel[:, None]
        safe = ops.where(denom > 0, denom, 1.0)
        return ops.where(denom > 0, sum_prec / safe, 0.0)

    def __repr__(self) -> str:
        return (
            f"MAPKernel(top_k={self.top_k}, denominator={self.denominator!r}, "
            f"relevance_threshold={self.relevance_threshold!r}, empty={self.empty!r}, ties={self.ties!r})"
        )
