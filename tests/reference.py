"""Naive one-list-at-a-time references, written from the formulas (no rankstream import).

They are deliberately slow and plain: python loops over items, ties broken explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def ranked_items(scores: Sequence[float], valid: Sequence[bool] | None = None) -> list[int]:
    """Indices of the valid items by score descending, ties by index ascending."""
    n = len(scores)
    items = [i for i in range(n) if valid is None or valid[i]]
    return sorted(items, key=lambda i: (-float(scores[i]), i))


def average_precision(
    scores: Sequence[float],
    labels: Sequence[float],
    k: int,
    *,
    valid: Sequence[bool] | None = None,
    denominator: str = "min",
    threshold: float | None = None,
) -> float | None:
    """AP@k of one list, or None when the list holds no relevant item."""

    def rel(y: float) -> bool:
        return y > 0 if threshold is None else y >= threshold

    order = ranked_items(scores, valid)
    relevant = [i for i in order if rel(labels[i])]
    r = len(relevant)
    if r == 0:
        return None
    hits = 0
    total = 0.0
    for j, i in enumerate(order[:k], start=1):
        if rel(labels[i]):
            hits += 1
            total += hits / j
    z = min(r, k) if denominator == "min" else r
    return total / z


def ndcg(
    scores: Sequence[float],
    labels: Sequence[float],
    k: int,
    *,
    valid: Sequence[bool] | None = None,
    gain: Callable[[float], float] = lambda y: 2.0**y - 1.0,
    discount: Callable[[int], float] = lambda j: 1.0 / math.log2(j + 1),
    threshold: float | None = 1.0,
) -> float | None:
    """nDCG@k of one list (labels below ``threshold`` count as 0), or None when no label
    reaches the threshold (no relevant item)."""

    def relevance(y: float) -> float:
        return y if threshold is None or y >= threshold else 0.0

    order = ranked_items(scores, valid)
    rels = [relevance(float(labels[i])) for i in order]
    has_rel = any((y > 0 if threshold is None else y >= threshold) for y in (float(labels[i]) for i in order))
    if not has_rel:
        return None
    dcg = sum(gain(y) * discount(j) for j, y in enumerate(rels[:k], start=1))
    ideal = sorted((gain(y) for y in rels), reverse=True)  # the best order of the gains
    idcg = sum(g * discount(j) for j, g in enumerate(ideal[:k], start=1))
    return dcg / idcg if idcg > 0 else 0.0


def mean_over_lists(
    per_list: Callable[..., float | None],
    scores: Sequence[Sequence[float]],
    labels: Sequence[Sequence[float]],
    k: int,
    *,
    masks: Sequence[Sequence[bool]] | None = None,
    weights: Sequence[float] | None = None,
    empty: str = "skip",
    **kw: object,
) -> float | None:
    """Weighted mean of a per-list metric; lists with no relevant item skipped or 0. A list
    whose items are all masked is no list: never counted."""
    num = 0.0
    den = 0.0
    for b in range(len(scores)):
        if masks is not None and not any(masks[b]):
            continue
        v = per_list(scores[b], labels[b], k, valid=None if masks is None else masks[b], **kw)
        w = 1.0 if weights is None else float(weights[b])
        if v is None:
            if empty == "skip":
                continue
            v = 0.0
        num += w * v
        den += w
    return num / den if den > 0 else None


def _relevant(y: float, threshold: float | None) -> bool:
    return y > 0 if threshold is None else y >= threshold


def precision(
    scores: Sequence[float],
    labels: Sequence[float],
    k: int,
    *,
    valid: Sequence[bool] | None = None,
    denominator: str = "k",
    threshold: float | None = None,
) -> float | None:
    """P@k of one list (over ``k``, or over ``min(k, n)`` for ``"valid"``), or None when the
    list holds no relevant item."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    hits = sum(1 for i in order[:k] if _relevant(labels[i], threshold))
    return hits / (k if denominator == "k" else min(k, len(order)))


def recall(scores, labels, k, *, valid=None, threshold=None) -> float | None:
    """R@k of one list, or None when it holds no relevant item."""
    order = ranked_items(scores, valid)
    r = sum(1 for i in order if _relevant(labels[i], threshold))
    if r == 0:
        return None
    return sum(1 for i in order[:k] if _relevant(labels[i], threshold)) / r


def hit_rate(scores, labels, k, *, valid=None, threshold=None) -> float | None:
    """1.0 when a relevant item is in the top k, else 0.0; None without a relevant item."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    return 1.0 if any(_relevant(labels[i], threshold) for i in order[:k]) else 0.0


def reciprocal_rank(scores, labels, k, *, valid=None, threshold=None) -> float | None:
    """1 / rank of the first relevant item if within the top k, else 0; None without one."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    for j, i in enumerate(order[:k], start=1):
        if _relevant(labels[i], threshold):
            return 1.0 / j
    return 0.0


def dcg(
    scores,
    labels,
    k,
    *,
    valid=None,
    gain: Callable[[float], float] = lambda y: 2.0**y - 1.0,
    discount: Callable[[int], float] = lambda j: 1.0 / math.log2(j + 1),
    threshold: float | None = None,
) -> float | None:
    """DCG@k of one list (labels below ``threshold`` count as 0), or None when it holds no
    relevant item (a label > 0, or >= threshold)."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    rel = [float(labels[i]) if threshold is None or labels[i] >= threshold else 0.0 for i in order]
    return sum(gain(y) * discount(j) for j, y in enumerate(rel[:k], start=1))


def r_precision(scores, labels, k=None, *, valid=None, threshold=None) -> float | None:
    """Precision at R (the list's number of relevant items); ``k`` is ignored (it lets
    :func:`mean_over_lists` call it). None without a relevant item."""
    order = ranked_items(scores, valid)
    r = sum(1 for i in order if _relevant(labels[i], threshold))
    if r == 0:
        return None
    return sum(1 for i in order[:r] if _relevant(labels[i], threshold)) / r


def counted_values(
    per_list: Callable[..., float | None],
    scores: Sequence[Sequence[float]],
    labels: Sequence[Sequence[float]],
    k: int,
    *,
    weights: Sequence[float] | None = None,
    empty: str = "skip",
    **kw: object,
) -> tuple[list[float], list[float]]:
    """The per-list values and weights of the lists that :func:`mean_over_lists` averages
    (lists with no relevant item skipped or 0; lists of weight 0 left out: they are no unit)."""
    values, ws = [], []
    for b in range(len(scores)):
        v = per_list(scores[b], labels[b], k, **kw)
        w = 1.0 if weights is None else float(weights[b])
        if v is None:
            if empty == "skip":
                continue
            v = 0.0
        if w > 0:
            values.append(v)
            ws.append(w)
    return values, ws


def weighted_mean_stderr(values: Sequence[float], weights: Sequence[float]) -> tuple[float, float]:
    """``(m, se)`` of the weighted mean ``m = sum(w v) / sum(w)`` over ``n`` units, with the
    linearised (ratio-estimator) standard error written from its definition, two passes:
    ``se^2 = n / (n - 1) * sum(w^2 (v - m)^2) / sum(w)^2`` (``s / sqrt(n)`` for unit weights)."""
    n = len(values)
    total_w = math.fsum(weights)
    m = math.fsum(w * v for v, w in zip(values, weights, strict=True)) / total_w
    ss = math.fsum((w * (v - m)) ** 2 for v, w in zip(values, weights, strict=True))
    return m, math.sqrt(n / (n - 1) * ss / total_w**2)


def f1(scores, labels, k, *, valid=None, threshold=None) -> float | None:
    """F1@k of one list, ``2 P R / (P + R)`` with ``P`` over ``k`` (the list's size when ``k`` is
    None), 0 when both are 0; None when the list holds no relevant item."""
    order = ranked_items(scores, valid)
    n_rel = sum(1 for i in order if _relevant(labels[i], threshold))
    if n_rel == 0:
        return None
    depth = len(order) if k is None else k
    hits = sum(1 for i in order[:depth] if _relevant(labels[i], threshold))
    p, r = hits / depth, hits / n_rel
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def err(scores, labels, k, *, valid=None, threshold=None, max_grade: float = 4.0) -> float | None:
    """ERR@k of one list (Chapelle et al. 2009): grades below 0 (or the threshold) count 0,
    grades above ``max_grade`` count ``max_grade``; a running product of ``1 - R``."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    total, still = 0.0, 1.0
    for j, i in enumerate(order[:k], start=1):
        g = float(labels[i])
        if threshold is not None and g < threshold:
            g = 0.0
        g = min(max(g, 0.0), max_grade)
        r = (2.0**g - 1.0) / 2.0**max_grade
        total += still * r / j
        still *= 1.0 - r
    return total


def rbp(
    scores, labels, k, *, valid=None, threshold=None, p: float = 0.8, graded: bool = False
) -> float | None:
    """RBP of one list read to depth ``k`` (None: the whole list): ``(1 - p) sum_j r_j p^(j-1)``,
    ``r_j`` the binary relevance or (graded) the label of a relevant item."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    depth = len(order) if k is None else k
    total = 0.0
    for j, i in enumerate(order[:depth]):
        if _relevant(labels[i], threshold):
            total += (float(labels[i]) if graded else 1.0) * p**j
    return (1.0 - p) * total


def rbp_residual(scores, labels, k, *, valid=None, threshold=None, p: float = 0.8) -> float | None:
    """The RBP residual of one list read to depth ``k``: ``(1 - p) sum_{j >= d} p^j`` summed
    term by term to a negligible tail, ``d = min(k, n)``."""
    order = ranked_items(scores, valid)
    if not any(_relevant(labels[i], threshold) for i in order):
        return None
    depth = len(order) if k is None else min(k, len(order))
    return (1.0 - p) * math.fsum(p**j for j in range(depth, depth + 2000))


def auc(scores, labels, k=None, *, valid=None, threshold=None) -> float | None:
    """The ROC AUC of one list by counting every (relevant, non-relevant) pair, ties one half;
    None when the list lacks one of the classes."""
    items = [i for i in range(len(scores)) if valid is None or valid[i]]
    pos = [float(scores[i]) for i in items if _relevant(labels[i], threshold)]
    neg = [float(scores[i]) for i in items if not _relevant(labels[i], threshold)]
    if not pos or not neg:
        return None
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return wins / (len(pos) * len(neg))
