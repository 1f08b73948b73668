"""Naive references and data for the Keras tests (python loops, float64, no rankstream import).

``keras_rs_mean`` follows keras-rs 0.4.0's documented and implemented semantics: labels < 0,
``mask=False`` and items weighted <= 0 are dropped; item weights enter DCG/IDCG and the AP sums;
the ideal ranking orders items by weight * gain; HitRate@k (a relevant item in the top k) and
R-precision (precision at R, the number of relevant items), not in keras-rs, are unweighted per
list; per-list weights are collapsed from the item weights by keras-rs's ``get_list_weights``
rule; the result is the weighted mean over lists (0 when all weights are 0). Ties among valid
items rank the earlier index first.
"""

from __future__ import annotations

import math

import numpy as np


def exp_gain(y: float) -> float:
    return 2.0**y - 1.0


def log_discount(j: int) -> float:
    return 1.0 / math.log2(j + 1)


def item_weights(sample_weight, shape):
    b, n = shape
    if sample_weight is None:
        return np.ones((b, n))
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.ndim == 0:
        return np.full((b, n), float(w))
    if w.ndim == 1:
        return np.repeat(w[:, None], n, axis=1)
    return np.broadcast_to(w, (b, n)).copy()  # (batch, list_size) or (batch, 1)


def keras_rs_mean(metric, scores, labels, k=None, **kw):
    num, den = keras_rs_sums(metric, scores, labels, k, **kw)
    return num / den if den > 0 else 0.0


def keras_rs_sums(
    metric,
    scores,
    labels,
    k=None,
    *,
    mask=None,
    sample_weight=None,
    gain=exp_gain,
    discount=log_discount,
    rel_threshold=1.0,
):
    """One batch's (sum of list weight * value, sum of list weights)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    b, n = scores.shape
    w_all = item_weights(sample_weight, (b, n))
    values, w_pos, rel_pos, plw = [], [], [], []
    for r in range(b):
        valid = [
            labels[r, i] >= 0 and (mask is None or bool(mask[r, i])) and w_all[r, i] > 0 for i in range(n)
        ]
        y = [labels[r, i] if valid[i] else 0.0 for i in range(n)]
        w = [w_all[r, i] if valid[i] else 0.0 for i in range(n)]
        order = sorted((i for i in range(n) if valid[i]), key=lambda i: (-scores[r, i], i))
        kk = n if k is None else min(k, n)
        if metric == "ndcg":
            dcg = sum(w[i] * gain(y[i]) * discount(j) for j, i in enumerate(order[:kk], start=1))
            ideal = sorted((w[i] * gain(y[i]) for i in range(n)), reverse=True)
            idcg = sum(v * discount(j) for j, v in enumerate(ideal[:kk], start=1))
            values.append(dcg / idcg if idcg != 0 else 0.0)
            rel = [gain(y[i]) for i in range(n)]
        elif metric in ("hit_rate", "r_precision"):  # not in keras-rs: its conventions
            rel = [1.0 if y[i] >= rel_threshold else 0.0 for i in range(n)]
            cut = order[:kk] if metric == "hit_rate" else order[: round(sum(rel))]
            hits = sum(rel[i] for i in cut)
            values.append(float(hits > 0) if metric == "hit_rate" else (hits / len(cut) if cut else 0.0))
        else:
            rel = [1.0 if y[i] >= rel_threshold else 0.0 for i in range(n)]
            hits, total = 0, 0.0
            for j, i in enumerate(order[:kk], start=1):
                if rel[i]:
                    hits += 1
                    total += w[i] * hits / j
            z = sum(w[i] * rel[i] for i in range(n))
            values.append(total / z if z != 0 else 0.0)
        rsum = sum(rel)
        w_pos.append(sum(w) > 0)
        rel_pos.append(rsum > 0)
        plw.append(sum(w[i] * rel[i] for i in range(n)) / rsum if rsum != 0 else 0.0)
    n_both = sum(1 for a, c in zip(w_pos, rel_pos, strict=True) if a and c)
    avg = sum(plw) / n_both if n_both > 0 else 1.0
    list_w = [(p if rp else avg) if wp else 0.0 for wp, rp, p in zip(w_pos, rel_pos, plw, strict=True)]
    return sum(v * lw for v, lw in zip(values, list_w, strict=True)), sum(list_w)


def tie_free_scores(rng, b, n):
    """Distinct scores in (-0.5, 0.5), gaps well above float32 resolution (keras-rs pushes
    masked items to min - 1e-7, which must stay below every valid score)."""
    return ((rng.permutation(b * n).reshape(b, n) + rng.uniform(0.1, 0.9, (b, n))) / (b * n) - 0.5).astype(
        "float32"
    )


def make_case(rng, b, n, *, weights=None, masked=True, max_label=3):
    """Scores (tie-free), labels in -1..max_label, a mask, and weights of the given kind."""
    scores = tie_free_scores(rng, b, n)
    labels = rng.integers(-1, max_label + 1, (b, n)).astype("float32")
    labels[0] = np.maximum(labels[0], 0) * 0  # one list with no relevant item
    if b > 2:
        labels[1] = -1  # one list that is all padding
    mask = rng.random((b, n)) > 0.25 if masked else None
    if weights is None:
        w = None
    elif weights == "scalar":
        w = np.float32(1.7)
    elif weights == "list":
        w = rng.uniform(0.2, 2.0, b).astype("float32")
        w[-1] = 0.0
    elif weights == "item":
        w = rng.uniform(0.2, 2.0, (b, n)).astype("float32")
        w[rng.random((b, n)) < 0.2] = 0.0
    else:
        raise ValueError(weights)
    return scores, labels, mask, w


def naive_rank_sums(scores, targets, weights=None, ks=(1, 3)):
    """Realistic ranks counted task by task (python loops, ties counted exactly; one task per
    row, ``targets`` the index of the true candidate): the weighted sums
    ``{"weight", "count", "hits": [..per k..], "inverse_rank", "log_rank", "rank"}`` of the
    rows of positive weight."""
    scores = np.asarray(scores, dtype=np.float64)
    out = {"weight": 0.0, "count": 0.0, "hits": [0.0] * len(ks), "inverse_rank": 0.0, "log_rank": 0.0}
    out["rank"] = 0.0
    for i in range(scores.shape[0]):
        w = 1.0 if weights is None else float(np.asarray(weights, dtype=np.float64).reshape(-1)[i])
        if not w > 0:
            continue
        t = int(targets[i])
        better = sum(1 for j in range(scores.shape[1]) if j != t and scores[i, j] > scores[i, t])
        equal = sum(1 for j in range(scores.shape[1]) if j != t and scores[i, j] == scores[i, t])
        r = 1 + better + equal / 2.0
        out["weight"] += w
        out["count"] += 1
        out["hits"] = [h + w * (r <= k) for h, k in zip(out["hits"], ks, strict=True)]
        out["inverse_rank"] += w / r
        out["log_rank"] += w * math.log(r)
        out["rank"] += w * r
    return out


def naive_rank_values(sums, ks=(1, 3)):
    """The rank-based values of :func:`naive_rank_sums` (added over batches): Hits@k, MRR,
    GMR and the arithmetic mean rank (0 without a task of positive weight)."""
    w = sums["weight"]
    if not w > 0:
        values = dict.fromkeys([f"hits_at_{k}" for k in ks], 0.0)
        values.update(inverse_harmonic_mean_rank=0.0, geometric_mean_rank=0.0, arithmetic_mean_rank=0.0)
        return values
    values = {f"hits_at_{k}": h / w for k, h in zip(ks, sums["hits"], strict=True)}
    values["inverse_harmonic_mean_rank"] = sums["inverse_rank"] / w
    values["geometric_mean_rank"] = math.exp(sums["log_rank"] / w)
    values["arithmetic_mean_rank"] = sums["rank"] / w
    return values


def add_sums(a, b):
    """Field-wise sum of two dicts of :func:`naive_rank_sums`."""
    return {
        key: [x + y for x, y in zip(a[key], b[key], strict=True)]
        if isinstance(a[key], list)
        else a[key] + b[key]
        for key in a
    }
