"""Every list metric of ONE ranking from its definition, and the rankings a list of tied scores
can take: the brute-force reference of the tie policies (no rankstream import).

A list's items are ranked by score, descending. Among equal scores:

* ``"first"``: the earlier index first (:func:`first_order`);
* ``"random"``: some order of each group of tied items (one of :func:`tie_orders`);
* ``"expected"``: the mean over every order of each group, all equally likely (McSherry and
  Najork, ECIR 2008): :func:`expected_value`.

:func:`tie_orders` enumerates the distinct arrangements of the items' ``(label, weight)`` pairs
within each group rather than every permutation: under a uniformly random permutation every
distinct arrangement of a multiset is equally likely, so the mean over the arrangements is the
mean over the permutations, at a fraction of the cost.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence

Item = tuple[float, float]  # (label, item weight)


def first_order(scores: Sequence[float], labels, weights, valid) -> list[Item]:
    """The ranking of the valid items with ties to the earlier index."""
    items = sorted((i for i in range(len(scores)) if valid[i]), key=lambda i: (-float(scores[i]), i))
    return [(float(labels[i]), float(weights[i])) for i in items]


def _arrangements(group: list[Item]) -> Iterator[tuple[Item, ...]]:
    """The distinct orders of a multiset of items, each once."""
    counts = Counter(group)
    keys = sorted(counts)
    n = len(group)

    def build(prefix: list[Item]) -> Iterator[tuple[Item, ...]]:
        if len(prefix) == n:
            yield tuple(prefix)
            return
        for key in keys:
            if counts[key]:
                counts[key] -= 1
                prefix.append(key)
                yield from build(prefix)
                prefix.pop()
                counts[key] += 1

    yield from build([])


def groups(scores: Sequence[float], labels, weights, valid) -> list[list[Item]]:
    """The valid items grouped by equal score, groups in descending score order."""
    items = [i for i in range(len(scores)) if valid[i]]
    levels = sorted({float(scores[i]) for i in items}, reverse=True)
    return [[(float(labels[i]), float(weights[i])) for i in items if float(scores[i]) == v] for v in levels]


def count_orders(scores: Sequence[float], labels, weights, valid) -> int:
    """How many distinct rankings :func:`tie_orders` yields (to bound the enumeration)."""
    total = 1
    for g in groups(scores, labels, weights, valid):
        c = Counter(g)
        total *= math.factorial(len(g)) // math.prod(math.factorial(m) for m in c.values())
    return total


def tie_orders(scores: Sequence[float], labels, weights, valid) -> Iterator[list[Item]]:
    """Every distinct ranking of the valid items over the orders of each group of tied scores."""
    for parts in itertools.product(*(list(_arrangements(g)) for g in groups(scores, labels, weights, valid))):
        yield [item for part in parts for item in part]


def relevant(y: float, threshold: float | None) -> bool:
    return y >= threshold if threshold is not None else y > 0


def one_ranking(name: str, ranking: list[Item], k: int | None, opts: dict) -> float:
    """The metric of ONE ranking (``(label, item weight)`` pairs in rank order) at ``k`` (None:
    the whole list), written from its definition. ``opts``: ``relevance_threshold``, ``gain``
    (``"exp_rank"`` / ``"linear_rank"``), ``denominator`` (``"k"``/``"valid"`` for precision,
    ``"min"``/``"all"`` for AP), ``item_weighted`` (keras-rs: the item weights weigh the gains
    and the relevant terms of nDCG, DCG and AP; DCG divided by the list weight), ``p`` and
    ``graded`` (RBP), ``max_grade`` (ERR). Lists without a relevant item are 0 here (the caller
    applies the ``empty`` policy)."""
    t = opts.get("relevance_threshold")
    ys = [y for y, _ in ranking]
    ws = [w for _, w in ranking] if opts.get("item_weighted") else [1.0] * len(ranking)
    n = len(ys)
    depth = n if k is None else k
    kk = min(depth, n)
    rel = [1.0 if relevant(y, t) else 0.0 for y in ys]
    n_rel = sum(rel)
    if name in ("ndcg", "dcg"):

        def gain(y: float) -> float:
            y = 0.0 if t is not None and y < t else y
            return 2.0**y - 1.0 if opts.get("gain", "exp_rank") == "exp_rank" else y

        g = [w * gain(y) for y, w in zip(ys, ws, strict=True)]
        dcg = math.fsum(g[j] / math.log2(j + 2) for j in range(kk))
        if name == "dcg":
            return dcg / opts["list_weight"] if opts.get("item_weighted") else dcg
        ideal = sorted(g, reverse=True)
        idcg = math.fsum(ideal[j] / math.log2(j + 2) for j in range(kk))
        return dcg / idcg if idcg > 0 else 0.0
    if name == "err":
        total, still, top = 0.0, 1.0, opts.get("max_grade", 4.0)
        for j in range(kk):
            g = ys[j] if t is None or ys[j] >= t else 0.0
            stop = (2.0 ** min(max(g, 0.0), top) - 1.0) / 2.0**top
            total += still * stop / (j + 1)
            still *= 1.0 - stop
        return total
    if name == "rbp":
        p = opts.get("p", 0.8)
        gains = [y * r for y, r in zip(ys, rel, strict=True)] if opts.get("graded") else rel
        return (1.0 - p) * math.fsum(gains[j] * p**j for j in range(kk))
    if n_rel == 0:
        return 0.0
    hits = sum(rel[:kk])
    if name == "precision":
        return hits / (depth if opts.get("denominator", "k") == "k" else kk)
    if name == "recall":
        return hits / n_rel
    if name == "f1":  # P@k over k even past the list's end
        return 2.0 * hits / (depth + n_rel)
    if name == "hit_rate":
        return float(hits > 0)
    if name == "reciprocal_rank":
        return next((1.0 / (j + 1) for j in range(kk) if rel[j]), 0.0)
    if name == "r_precision":
        return sum(rel[: int(n_rel)]) / n_rel
    if name == "map":
        num, seen = 0.0, 0.0
        for j in range(kk):
            seen += rel[j]
            num += ws[j] * rel[j] * seen / (j + 1)
        wr = sorted((w * r for w, r in zip(ws, rel, strict=True)), reverse=True)
        z = sum(wr) if opts.get("denominator", "min") == "all" else sum(wr[:kk])
        return num / z if z > 0 else 0.0
    raise AssertionError(name)


def values_over_orders(name: str, scores, labels, weights, valid, ks, opts: dict) -> list[tuple[float, ...]]:
    """The metric at every ``k`` of ``ks`` for each distinct ranking of the list."""
    return [
        tuple(one_ranking(name, r, k, opts) for k in ks) for r in tie_orders(scores, labels, weights, valid)
    ]


def expected_value(name: str, scores, labels, weights, valid, ks, opts: dict) -> list[float]:
    """The mean of the metric at every ``k`` of ``ks`` over every order of the tied items."""
    values = values_over_orders(name, scores, labels, weights, valid, ks, opts)
    return [math.fsum(v[i] for v in values) / len(values) for i in range(len(ks))]
