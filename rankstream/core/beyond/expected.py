"""``ties="expected"``: the beyond-accuracy metrics' expectation over every order of tied
scores (each row's orders equally likely and independent across rows), in closed form.

Per row and cut-off ``k`` (``k`` clipped to the row's valid items): ``A`` the items scoring
above the ``k``-th score ``v``, ``G`` the ``t`` items scoring ``v``; the top ``k`` holds ``A``
and ``s = k - |A|`` of ``G``, every ``s``-subset of ``G`` equally likely. So an item's inclusion
probability is ``p_i = 1`` on ``A``, ``s / t`` on ``G``, 0 elsewhere, and a pair of ``G`` is
included with probability ``s (s - 1) / (t (t - 1))``. From these (docs/beyond_accuracy.md):

* the per-list means linear in the items (novelty, ARP, APLT, ACLT): ``sum_i p_i x_i / k``;
* the pair sums of diversity and ild: within ``A`` + ``(s / t)`` x the pairs between ``A`` and
  ``G`` + ``s (s - 1) / (t (t - 1))`` x the pairs within ``G``, each from category counts or
  sums of unit vectors as in the deterministic case (the list's number of pairs is fixed);
* personalization: ``E[sum over pairs of lists of the overlap] = sum_i (c_i^2 - q_i) / 2``
  with ``c_i = sum_a p_ai`` (the expected counts) and ``q_i = sum_a p_ai^2`` (rows independent);
* coverage: ``E[#covered] = sum_i [1 - prod_a (1 - p_ai)]``, kept as a count of certain
  inclusions and a sum of ``log(1 - p_ai)`` per item (plain sums);
* entropy and Gini have no closed form (they are not linear in the counts): with
  ``ties="expected"`` they are those of the expected counts ``c_i`` (a plug-in value), not
  expectations.
"""

from __future__ import annotations

import numpy as np

from rankstream.core.beyond.items import ItemData

__all__ = ["EXPECTED_FIELDS", "expected_sums", "inclusion"]

#: the per-item fields ``ties="expected"`` adds, each ``(len(ks), N)``
EXPECTED_FIELDS = ("item_sq", "item_certain", "item_log_miss")


def inclusion(scores: np.ndarray, valid: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(above, group, share)``: ``(Q, N)`` bool ``A`` and ``G`` and ``(Q,)`` ``s / t`` (0 for a
    row with no valid item) at cut-off ``k``."""
    masked = np.where(valid, scores, -np.inf)
    count = valid.sum(axis=1)
    kk = np.minimum(k, count)
    ranked = -np.sort(-masked, axis=1)
    v = np.take_along_axis(ranked, np.maximum(kk - 1, 0)[:, None], axis=1)
    above = valid & (masked > v)
    group = valid & (masked == v) & (kk > 0)[:, None]
    t = group.sum(axis=1)
    share = np.where(t > 0, (kk - above.sum(axis=1)) / np.maximum(t, 1), 0.0)
    return above, group, share


def _pairs(metric: str, items: ItemData, above: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row: the same-category pairs (or dot products of unit vectors) within ``A``, between
    ``A`` and ``G`` and within ``G``."""
    a, g = above.astype(np.float64), group.astype(np.float64)
    if metric == "diversity":
        onehot = np.zeros((items.num_items, int(items.categories.max()) + 1))
        onehot[np.arange(items.num_items), items.categories] = 1.0
        na, ng = a @ onehot, g @ onehot
        return (na * (na - 1)).sum(1) / 2, (na * ng).sum(1), (ng * (ng - 1)).sum(1) / 2
    sa, sg = a @ items.embeddings, g @ items.embeddings
    return ((sa * sa).sum(1) - a.sum(1)) / 2, (sa * sg).sum(1), ((sg * sg).sum(1) - g.sum(1)) / 2


def _per_list(metric: str, items: ItemData, above: np.ndarray, group: np.ndarray, share: np.ndarray,
              length: np.ndarray) -> np.ndarray:  # fmt: skip
    """Every row's expected value of a per-list metric (0 where it has none)."""
    if metric in ("novelty", "arp", "aplt", "aclt"):
        x = {"novelty": items.self_information, "arp": items.popularity}.get(metric)
        x = items.long_tail.astype(np.float64) if x is None else x
        total = above.astype(np.float64) @ x + share * (group.astype(np.float64) @ x)
        return total if metric == "aclt" else np.where(length > 0, total / np.maximum(length, 1), 0.0)
    within_a, between, within_g = _pairs(metric, items, above, group)
    t = group.sum(axis=1)
    s = share * t
    both = np.where(t > 1, s * (s - 1) / np.maximum(t * (t - 1), 1), 0.0)
    same = within_a + share * between + both * within_g
    pairs = length * (length - 1) / 2
    return np.where(pairs > 0, 1.0 - same / np.maximum(pairs, 1), 0.0)


def expected_sums(
    scores: np.ndarray, valid: np.ndarray, ks: list[int], items: ItemData, per_list: list[str]
) -> dict[str, np.ndarray]:
    """The fields of :class:`~rankstream.core.beyond.stream.BeyondAccuracy` with
    :data:`EXPECTED_FIELDS` for one batch of dense scores under ``ties="expected"``."""
    n = scores.shape[1]
    nk = len(ks)
    out = {name: np.zeros((nk, n)) for name in ("item_count", *EXPECTED_FIELDS)}
    listed = valid.any(axis=1)
    out["lists"] = np.float64(listed.sum())
    for name in per_list:
        out.update(
            {f"{name}_sum": np.zeros(nk), f"{name}_sq_sum": np.zeros(nk), f"{name}_count": np.zeros(nk)}
        )
    for j, k in enumerate(ks):
        above, group, share = inclusion(scores, valid, k)
        p = above + group * share[:, None]
        out["item_count"][j] = p.sum(axis=0)
        out["item_sq"][j] = (p * p).sum(axis=0)
        out["item_certain"][j] = (p >= 1.0).sum(axis=0)
        out["item_log_miss"][j] = np.log1p(-np.where(p < 1.0, p, 0.0)).sum(axis=0)
        length = np.minimum(k, valid.sum(axis=1)).astype(np.float64)
        for name in per_list:
            has = length >= (2 if name in ("diversity", "ild") else 1)
            values = np.where(has, _per_list(name, items, above, group, share, length), 0.0)
            out[f"{name}_sum"][j], out[f"{name}_sq_sum"][j] = values.sum(), (values * values).sum()
            out[f"{name}_count"][j] = has.sum()
    return out


def expected_catalog(metric: str, sums: dict[str, np.ndarray], ks: np.ndarray) -> np.ndarray | None:
    """Coverage and personalization from the fields of ``ties="expected"`` (``(len(ks),)``);
    None for entropy and Gini (read from the expected counts as they are)."""
    c = sums["item_count"]
    n = c.shape[-1]
    if metric == "coverage":
        covered = np.where(sums["item_certain"] > 0, 1.0, -np.expm1(sums["item_log_miss"]))
        return covered.sum(axis=-1) / n
    if metric == "personalization":
        shared = ((c * c - sums["item_sq"]) / 2.0).sum(axis=-1)
        lists = sums["lists"]
        pairs = lists * (lists - 1.0) / 2.0
        return np.where(pairs > 0, 1.0 - shared / (np.where(pairs > 0, pairs, 1.0) * ks), np.nan)
    return None
