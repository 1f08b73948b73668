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
dense scores), nor is ``chance=True``. Both raise. Nothing is read back to the host: the
values are the backend's operations on the ranked ids (lookups, prefix sums, one weighted
``bincount`` of ``band * N + id`` for the counts: ``segment_sum`` with the static length
``len(top_k) * N`` on Keras), so the kernels trace under ``jit`` (Keras compiled steps on JAX
and TensorFlow). The keys are int32: ``len(top_k) * N < 2**31``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Ops
from rankstream.core.beyond.items import ItemData
from rankstream.core.beyond.measures import _LINEAR, CATALOG, PER_LIST, _item_values, catalog_value
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
        """Every list's value at every cut-off from the selection's ranked ids, with the
        backend's operations only (no read-back: it traces under ``jit``)."""
        ops = sel.ops
        if sel.n != self.num_items:
            raise ValueError(
                f"{self.metric}: the scores must have one column per item of ItemData "
                f"({self.num_items}), got {sel.n} columns"
            )
        if sel.indices is None:  # a selection made without this kernel's depth(): no ids kept
            raise ValueError(f"{self.metric} needs the ranked ids: select with its depth() first")
        like, acc = sel.positions, sel.positions.dtype
        ids = ops.cast(sel.indices, ops.int_dtype())
        valid = (ids >= 0) if sel.in_list is None else (sel.in_list > 0)
        safe = ops.where(valid, ids, ids * 0)
        vf = ops.cast(valid, acc)
        big_k = int(ids.shape[1])
        cols = ops.asarray(np.minimum(np.asarray(self.top_k), big_k) - 1, like, ops.int_dtype())
        length = ops.take(ops.cumsum(vf, axis=1), cols, axis=1)
        if self._catalog:
            values, relevant = length * 0.0, valid[:, 0]
        else:
            values = _traced_values(self.metric, ops, self._items, safe, valid, vf, length, cols, like)
            relevant = length[:, 0] >= (2 if self.metric in ("diversity", "ild") else 1)
        return BeyondOutput(values=values, relevant=relevant, ids=ops.where(valid, ids, ids * 0 - 1))

    def reduce(self, ops: Ops, out: ListOutput) -> dict[str, Array]:
        """The list kernels' sums, and the batch's ``item_count`` for a catalog-wide metric:
        one weighted ``bincount`` of ``band * N + id`` (each ranked item in the band of the
        smallest cut-off reaching it), summed up over the bands. Traceable."""
        sums = list_sums(ops, out, self._list_fields)
        if self._catalog:
            acc = sums["weight_sum"].dtype
            counted = out.counted if out.invalid is None else out.counted & ~out.invalid
            if out.weights is not None:
                counted = counted & (out.weights > 0)
            ids = out.ids
            big_k, n, nk = int(ids.shape[1]), self.num_items, len(self.top_k)
            ks = np.minimum(np.asarray(self.top_k), big_k)
            band = np.searchsorted(ks, np.arange(1, big_k + 1), side="left")  # (K,): nk = past every k
            like = sums["weight_sum"]
            offset = ops.asarray((band * n)[None, :], like, ops.int_dtype())
            keep = (ids >= 0) & counted[:, None] & ops.asarray((band < nk)[None, :], like)
            keys = ops.reshape(ops.where(keep, offset + ids, ids * 0), (-1,))  # dropped: key 0, weight 0
            counts = ops.bincount(keys, ops.reshape(ops.cast(keep, acc), (-1,)), nk * n)
            sums["item_count"] = ops.cumsum(ops.reshape(counts, (nk, n)), axis=0)
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


def _ratio(ops: Ops, num: Array, den: Array) -> Array:
    ok = den > 0
    return ops.where(ok, num / ops.where(ok, den, den * 0.0 + 1.0), num * 0.0)


def _traced_values(
    metric: str,
    ops: Ops,
    items: ItemData,
    safe: Array,
    valid: Array,
    vf: Array,
    length: Array,
    cols: Array,
    like: Array,
) -> Array:
    """``(B, len(ks))`` a per-list metric at every cut-off (the definitions of
    :mod:`rankstream.core.beyond.measures`) with the backend's operations: per-item values
    looked up and summed along the list; ``diversity`` from each position's earlier positions
    of its category (a ``(B, K, K)`` comparison, ``K`` the depth); ``ild`` from the prefix sums
    of the normalised embeddings."""
    acc = vf.dtype
    if metric in _LINEAR:
        table = ops.asarray(_item_values(metric, items), like, acc)
        cum = ops.take(ops.cumsum(ops.lookup(table, safe) * vf, axis=1), cols, axis=1)
        return cum if metric == "aclt" else _ratio(ops, cum, length)
    pairs = length * (length - 1.0) / 2.0
    if metric == "diversity":
        cats = ops.lookup(ops.asarray(items.categories, like, ops.int_dtype()), safe)
        big_k = int(safe.shape[1])
        earlier = ops.asarray(np.tri(big_k, big_k, -1, dtype=bool)[None], like)  # [j, i]: i < j
        both = valid[:, :, None] & valid[:, None, :]
        same = (cats[:, :, None] == cats[:, None, :]) & earlier & both
        shared = ops.take(ops.cumsum(ops.sum(ops.cast(same, acc), axis=2), axis=1), cols, axis=1)
        return ops.where(pairs > 0, 1.0 - _ratio(ops, shared, pairs), pairs * 0.0)
    emb = items.embeddings
    d = emb.shape[1]
    flat = ops.asarray(emb.reshape(-1), like, acc)
    at = safe[:, :, None] * d + ops.asarray(np.arange(d)[None, None, :], like, ops.int_dtype())
    u = ops.lookup(flat, at) * vf[:, :, None]
    s = ops.take(ops.cumsum(u, axis=1), cols, axis=1)  # (B, len(ks), d)
    dots = (ops.sum(s * s, axis=2) - length) / 2.0
    return ops.where(pairs > 0, 1.0 - _ratio(ops, dots, pairs), pairs * 0.0)


def beyond_kernel(name: str, items: ItemData | None, **conventions: Any) -> BeyondListKernel:
    """The kernel of ``"coverage@10"`` (a beyond-accuracy name with ``@k``)."""
    base, _, k = name.partition("@")
    k = k.strip()
    if not (k.isascii() and k.isdigit() and int(k) >= 1):
        raise ValueError(
            f"beyond-accuracy metric {name!r} needs a cut-off: write {base.strip()}@k with k >= 1"
        )
    return BeyondListKernel(int(k), metric=base.strip().lower(), items=items, **conventions)
