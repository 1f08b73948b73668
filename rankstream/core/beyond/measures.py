"""The math of the beyond-accuracy metrics (docs/beyond_accuracy.md derives and checks it).

Two kinds of metric, both streamed as plain sums:

* **per-list means** (``novelty``, ``arp``, ``aplt``, ``aclt``, ``diversity``, ``ild``): a value
  per list, averaged over the lists (:func:`prefix_values` gives every list's value at every
  cut-off ``k`` from one pass over its ``K`` ranked ids);
* **catalog-wide** ones (``coverage``, ``entropy``, ``gini``, ``personalization``): functions of
  the per-item recommendation counts ``c_i`` (how many lists hold item ``i`` in their top ``k``),
  a ``(N,)`` vector per cut-off that adds over batches and processes
  (:func:`item_counts`, :func:`catalog_value`).

Ids are ``(Q, K)`` integers in rank order with ``valid`` ``(Q, K)`` bool (False: no item there);
a list's length at ``k`` is ``L = #valid among its first k``.

Definitions at a cut-off ``k`` (``U_i`` the normalised embedding of item ``i``):

* ``novelty = sum_j -log2(p_(j)) / L`` with ``p_i = max(popularity_i, 1) / num_users``;
* ``arp = sum_j popularity_(j) / L``; ``aplt = #tail items / L``; ``aclt = #tail items``;
* ``diversity = 1 - S / C(L, 2)``, ``S = sum_c C(n_c, 2)`` the pairs sharing a category
  (``n_c`` the list's count of category ``c``): the share of pairs of different categories;
* ``ild = 1 - [(|sum_j U_(j)|^2 - L) / 2] / C(L, 2)``: one minus the mean pairwise cosine, since
  ``sum_{i<j} U_i.U_j = (|sum U|^2 - sum |U_i|^2) / 2`` and ``|U_i| = 1``;
* ``coverage = #{i : c_i > 0} / N``; ``entropy = -sum_i (c_i / T) log2(c_i / T)``, ``T = sum c``
  (bits; Shani & Gunawardana's distributional coverage); ``gini = sum_i (2i - N - 1) c_(i) / (N T)``
  over the counts sorted ascending (RecBole's ``GiniIndex``, zeros included);
* ``personalization = 1 - sum_i C(c_i, 2) / (C(Q, 2) k)``: ``sum_i C(c_i, 2)`` is the sum over
  unordered pairs of lists of their overlap ``|L_a ∩ L_b|`` (an item held by ``c_i`` lists is
  shared by ``C(c_i, 2)`` pairs), so this is one minus the mean overlap share of two users'
  lists, normalised by ``k`` as PyG's ``LinkPredPersonalization`` (lists shorter than ``k``
  share at most their length: they count as more personal).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.beyond.items import ItemData

__all__ = ["CATALOG", "PER_LIST", "catalog_value", "item_counts", "prefix_values"]

#: the metrics read from the per-item counts
CATALOG = ("coverage", "entropy", "gini", "personalization")
#: the metrics that are means over lists
PER_LIST = ("novelty", "arp", "aplt", "aclt", "diversity", "ild")
#: the per-list metrics whose value is a mean of one number per ranked item
_LINEAR = ("novelty", "arp", "aplt", "aclt")


def _item_values(metric: str, items: ItemData) -> np.ndarray:
    if metric == "novelty":
        return items.self_information
    if metric == "arp":
        return items.popularity
    return items.long_tail.astype(np.float64)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def prefix_values(
    metric: str, ids: np.ndarray, valid: np.ndarray, items: ItemData, ks: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """``(values, lengths)``, each ``(Q, len(ks))``: every list's value of ``metric`` at every
    cut-off (clipped to ``K``) and its length there. A list of length 0 (1 for ``diversity``
    and ``ild``) has no value: 0 here, and its caller leaves it out of the mean."""
    big_k = ids.shape[1]
    cols = np.minimum(np.asarray(ks), big_k) - 1
    safe = np.where(valid, ids, 0)
    vf = valid.astype(np.float64)
    length = np.cumsum(vf, axis=1)[:, cols]
    if metric in _LINEAR:
        cum = np.cumsum(_item_values(metric, items)[safe] * vf, axis=1)[:, cols]
        return (cum if metric == "aclt" else _ratio(cum, length)), length
    pairs = length * (length - 1.0) / 2.0
    if metric == "diversity":
        same = np.cumsum(_earlier_same(items.categories[safe], valid), axis=1)[:, cols]
        return np.where(pairs > 0, 1.0 - _ratio(same, pairs), 0.0), length
    u = items.embeddings[safe] * vf[:, :, None]
    s = np.stack([u[:, : c + 1].sum(axis=1) for c in cols], axis=1)  # (Q, len(ks), d): few cut-offs
    dots = (np.einsum("qkd,qkd->qk", s, s) - length) / 2.0
    return np.where(pairs > 0, 1.0 - _ratio(dots, pairs), 0.0), length


def _earlier_same(cats: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``(Q, K)``: for each position, how many earlier valid positions of its list hold its
    category (0 at invalid positions): one stable sort per row, each position's place in its
    run of equal categories. Its cumulative sum along the list is ``sum_c C(n_c, 2)``."""
    q, k = cats.shape
    key = np.where(valid, cats, -1 - np.arange(k)[None, :])  # an empty slot ties with nothing
    order = np.argsort(key, axis=1, kind="stable")
    sorted_key = np.take_along_axis(key, order, axis=1)
    pos = np.broadcast_to(np.arange(k), (q, k))
    starts = np.ones((q, k), dtype=bool)
    starts[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    run_start = np.maximum.accumulate(np.where(starts, pos, 0), axis=1)
    out = np.empty((q, k), dtype=np.float64)
    np.put_along_axis(out, order, (pos - run_start).astype(np.float64), axis=1)
    return out


def item_counts(ids: np.ndarray, valid: np.ndarray, ks: list[int], num_items: int) -> np.ndarray:
    """``(len(ks), N)`` float64: per cut-off, how many lists hold each item in their top ``k``.
    One ``bincount``: each ranked item is counted in the band of the smallest ``k`` reaching it,
    and the bands are summed up (``ks`` ascending)."""
    big_k = ids.shape[1]
    band = np.searchsorted(np.minimum(np.asarray(ks), big_k), np.arange(1, big_k + 1), side="left")
    keep = valid & (band < len(ks))[None, :]
    flat = (band[None, :] * num_items + ids)[keep]
    counts = np.bincount(flat, minlength=len(ks) * num_items).astype(np.float64)
    return np.cumsum(counts.reshape(len(ks), num_items), axis=0)


def catalog_value(metric: str, counts: Any, lists: Any, ks: Any, xp: Any = np) -> Any:
    """One catalog-wide metric ``(len(ks),)`` from the counts ``(len(ks), N)``, the number of
    lists and the cut-offs (elementwise on ``xp``: numpy or ``keras.ops``)."""
    n = counts.shape[-1]
    total = xp.sum(counts, axis=-1)
    safe_total = xp.where(total > 0, total, 1.0 + 0.0 * total)
    if metric == "coverage":
        return xp.sum(xp.where(counts > 0, 1.0 + 0.0 * counts, 0.0 * counts), axis=-1) / n
    if metric == "entropy":
        p = counts / safe_total[..., None]
        logs = xp.log2(xp.where(counts > 0, p, 1.0 + 0.0 * p))
        return -xp.sum(p * logs, axis=-1)
    if metric == "gini":
        ranked = xp.sort(counts, axis=-1)
        i = xp.cumsum(xp.ones_like(ranked), axis=-1)
        return xp.sum((2.0 * i - n - 1.0) * ranked, axis=-1) / (n * safe_total)
    shared = xp.sum(counts * (counts - 1.0), axis=-1) / 2.0
    pairs = lists * (lists - 1.0) / 2.0
    ok = pairs > 0
    value = 1.0 - shared / (xp.where(ok, pairs, 1.0 + 0.0 * pairs) * ks)
    return xp.where(ok, value, float("nan") + 0.0 * value)
