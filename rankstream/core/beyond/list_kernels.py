"""The beyond-accuracy metrics as list kernels, for ``ListMetrics(["coverage@10", ...], items=...)``.

Each reads the ranked item ids of the collection's one top-k selection of a batch of dense
score rows (the columns are the item ids ``0 .. N - 1``, so a batch must have ``N =
items.num_items`` columns), with the batch's tie policy (``"first"``: the lower id first;
``"random"``: seeded). The math is :mod:`rankstream.core.beyond.measures`.

* The per-list means (``novelty``, ``arp``, ``aplt``, ``aclt``, ``diversity``, ``ild``) keep the
  list kernels' sums (``value_sum``, ``weight_sum``, ``count``, and with ``confidence=`` the
  standard error's), over the lists holding at least one item (two for ``diversity`` and
  ``ild``), whatever their labels: the ``empty`` policy does not apply.
* The catalog-wide ones (``coverage``, ``entropy``, ``gini``, ``personalization``) add the
  field ``item_count`` ``(len(top_k), N)``: per cut-off, how many lists hold each item in their
  top ``k`` (each list with a positive weight counts once: weights do not scale the counts).
  It is O(N) memory per cut-off and merges by addition. They are not means over lists: they
  report no standard error. ``personalization`` normalises by ``min(k, N)``.

``ties="expected"`` is not offered here (its closed forms, in
:mod:`rankstream.core.beyond.expected`, read every item of a row's tie group at the cut-off,
past the selection: :class:`~rankstream.core.beyond.stream.BeyondAccuracy` computes them from
dense scores), nor is ``chance=True``. Both raise. The ids are read back to the host (one
``(B, k)`` integer copy per batch), so these kernels run eagerly (not under ``jit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Ops
from rankstream.core.beyond.items import ItemData
from rankstream.core.beyond.measures import CATALOG, PER_LIST, catalog_value, item_counts, prefix_values
from rankstream.core.lists.base import ListKernel, ListOutput, list_sums
from rankstream.core.lists.selection import Selection

__all__ = ["BEYOND_NAMES", "BeyondListKernel", "beyond_kernel", "is_beyond_name"]

#: the names ``ListMetrics`` reads as beyond-accuracy metrics (each with ``@k``)
BEYOND_NAMES = CATALOG + PER_LIST


def is_beyond_name(name: Any) -> bool:
    """Whether ``name`` (``"coverage@10"``) names a beyond-accuracy metric."""
    return isinstance(name, str) and name.split("@")[0].strip().lower() in BEYOND_NAMES


@dataclass
class BeyondOutput(ListOutput):
    """A list output with the ranked ids ``(B, K)`` (-1 where no item), for ``item_count``."""

    ids: Array | None = None


class BeyondListKernel(ListKernel):
    """One beyond-accuracy metric over the top-k selection (see the module docstring).

    Args:
        top_k: the cut-off(s).
        metric: one of :data:`BEYOND_NAMES`.
        items: the catalog's :class:`~rankstream.core.beyond.items.ItemData`.
    """

    name = "beyond"

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        metric: str = "coverage",
        items: ItemData | None = None,
        confidence: float | None = None,
        chance: bool = False,
        **conventions: Any,
    ) -> None:
        if metric not in BEYOND_NAMES:
            raise ValueError(f"metric must be one of {BEYOND_NAMES}, got {metric!r}")
        if not isinstance(items, ItemData):
            raise TypeError(f"{metric} needs items=ItemData(...) (the catalog's data), got {items!r}")
        items.needs(metric)
        if chance:
            raise ValueError(f"{metric} has no form under random ranking: chance=True is not supported")
        if conventions.get("ties") == "expected":
            raise ValueError(
                f"{metric} in ListMetrics supports ties='first' or 'random', got 'expected' "
                "(see docs/beyond_accuracy.md)"
            )
        conventions.pop("relevance_threshold", None)
        conventions["empty"] = "skip"  # counted: the lists holding an item (two for diversity, ild)
        catalog = metric in CATALOG
        super().__init__(top_k, confidence=None if catalog else confidence, **conventions)
        if metric in ("diversity", "ild") and self.top_k[0] < 2:
            raise ValueError(f"{metric} reads pairs of items: k must be at least 2, got top_k={self.top_k}")
        self.metric = metric
        self.num_items = items.num_items
        self._items = items
        self._catalog = catalog

    @cached_property
    def fields(self) -> dict[str, tuple[int, ...]]:
        """The list kernels' fields, and for a catalog-wide metric ``item_count``."""
        own = dict(super().fields)
        if self._catalog:
            own["item_count"] = (len(self.top_k), self.num_items)
        return own

    def depth(self, ctx: Any, batch: Any, shared: Any) -> int:
        """The largest ``k``; and the selection must order every tie by the policy (it may
        otherwise leave ties of equal labels in any order, which no accuracy metric sees)."""
        shared.ranked_ids = True
        return self.top_k[-1]

    def list_values(self, sel: Selection) -> ListOutput:
        ops = sel.ops
        if not ops.eager:
            raise ValueError(f"{self.metric} reads the ranked ids back: run it eagerly (not under jit)")
        if sel.n != self.num_items:
            raise ValueError(
                f"{self.metric}: the scores must have one column per item of ItemData "
                f"({self.num_items}), got {sel.n} columns"
            )
        if sel.indices is None:  # a selection made without this kernel's depth(): no ids kept
            raise ValueError(f"{self.metric} needs the ranked ids: select with its depth() first")
        ids = ops.to_numpy(sel.indices).astype(np.int64)
        valid = np.ones(ids.shape, dtype=bool) if sel.in_list is None else ops.to_numpy(sel.in_list) > 0
        like, acc = sel.positions, sel.positions.dtype
        need = 2 if self.metric in ("diversity", "ild") else 1
        if self._catalog:
            values = np.zeros((ids.shape[0], len(self.top_k)))
            relevant = valid[:, 0]
        else:
            values, length = prefix_values(self.metric, ids, valid, self._items, self.top_k)
            relevant = length[:, 0] >= need
        return BeyondOutput(
            values=ops.asarray(values, like, acc),
            relevant=ops.asarray(relevant, like),
            ids=ops.asarray(np.where(valid, ids, -1), like),
        )

    def reduce(self, ops: Ops, out: ListOutput) -> dict[str, Array]:
        """The list kernels' sums, and the batch's ``item_count`` for a catalog-wide metric."""
        sums = list_sums(ops, out, self._list_fields)
        if self._catalog:
            counted = out.counted if out.invalid is None else out.counted & ~out.invalid
            if out.weights is not None:
                counted = counted & (out.weights > 0)
            keep = ops.to_numpy(counted).astype(bool)
            ids = ops.to_numpy(out.ids)[keep]
            counts = item_counts(np.maximum(ids, 0), ids >= 0, self.top_k, self.num_items)
            sums["item_count"] = ops.asarray(counts, sums["weight_sum"], sums["weight_sum"].dtype)
        return sums

    def compute(self, sums: Any, xp: Any = np) -> dict[str, Array]:
        """The mean over the lists (per-list metrics, with the standard error's quantities where
        asked), or the catalog-wide value from ``item_count``."""
        if not self._catalog:
            return super().compute(sums, xp)
        ks = np.minimum(np.asarray(self.top_k, dtype=np.float64), self.num_items)
        value = catalog_value(self.metric, sums["item_count"], sums["count"], ks, xp)
        return {"value": xp.where(sums["invalid"] > 0, float("nan"), value)}

    def __repr__(self) -> str:
        return f"BeyondListKernel({self.metric!r}, top_k={self.top_k}, {self._items!r})"


def beyond_kernel(name: str, items: ItemData | None, **conventions: Any) -> BeyondListKernel:
    """The kernel of ``"coverage@10"`` (a beyond-accuracy name with ``@k``)."""
    base, _, k = name.partition("@")
    k = k.strip()
    if not (k.isascii() and k.isdigit() and int(k) >= 1):
        raise ValueError(
            f"beyond-accuracy metric {name!r} needs a cut-off: write {base.strip()}@k with k >= 1"
        )
    return BeyondListKernel(int(k), metric=base.strip().lower(), items=items, **conventions)
