"""Data, metric registry and naive expected values shared by the distributed Keras tests.

numpy only (no keras import): ``test_keras_distributed.py`` imports it in the pytest process to
compute expected values, ``worker.py`` imports it in each per-configuration subprocess to build
the same data.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "backend_suite"))

import krs_reference as ref

LIST_SIZE = 8
FEATURES = 3
BATCH = 16  # global batch: 8 lists per device on 2 devices, 4 on 4
N_LISTS = 48  # evaluate: 3 global batches
REMAINDER_LISTS = 41  # a last global batch of 9 lists: 9 % 2, 9 % 4 != 0 (TF, 4 replicas: 4, 4, 1, 0)
SHORT_LISTS = 9  # one global batch of 9 lists
VAL_LISTS = 48  # fit validation data
CKPT_SPLIT = 32  # checkpoint after the first 32 validation lists, continue with the rest
KAHAN_UNIT = 2.0**-24  # half the float32 ulp of 1.0: 1 + 2^-24 rounds back to 1 uncompensated
KAHAN_BATCHES = 8


@dataclass(frozen=True)
class Metric:
    """One metric under test (one line in ``METRICS``).

    ``make``: its constructor, evaluated in the worker with ``rk`` bound to
    ``rankstream.keras`` (deterministic on tie-free scores; the worker renames it ``name``).
    ``target``: what it reads, ``"labels"`` (graded labels, -1 padding: the list metrics) or
    ``"index"`` (the index of each list's best item, picked from the same labels: the
    rank-based metrics; a harness subclass hands it over, see ``worker.index_target``).
    ``reference``: the naive expected value: ``("ndcg" | "map", k, gain)`` (keras-rs
    semantics, ``krs_reference``), ``("hits", k)``, ``("mrr",)``, ``("gmr",)``, ``("mr",)`` or
    ``("rank_based", ks)`` (this module), or None: compared with the single-device run only.
    A metric whose ``result()`` is a dict logs ``"{name}.{key}"`` per key; one with a
    confidence level also ``name + suffix`` per ``QUANTITY_SUFFIXES``."""

    name: str
    make: str
    reference: tuple | None = None
    target: str = "labels"

    @property
    def item_weights(self) -> bool:
        """Takes (batch, list_size) sample weights (the rank-based metrics take (batch,))."""
        return self.target == "labels"


def linear_gain(y: float) -> float:
    return y


METRICS = [
    Metric("ndcg@3", "rk.NDCG(k=3, seed=7)", ("ndcg", 3, None)),  # random tie order (a SeedGenerator)
    Metric("map@2", "rk.MAP(k=2, shuffle_ties=False)", ("map", 2, None)),
    Metric("hits@3", "rk.HitsAtK(3)", ("hits", 3), target="index"),
    Metric("mrr", "rk.InverseHarmonicMeanRank()", ("mrr",), target="index"),
    Metric("gmr", "rk.GMR()", ("gmr",), target="index"),
    Metric("rank_based", "rk.RankBasedMetrics(ks=(1, 3))", ("rank_based", (1, 3)), target="index"),
    # With a confidence level: the value checked against the reference, its standard error,
    # interval and count (logged as ``name + "_stderr"``, ... : ``QUANTITY_SUFFIXES``) against
    # the single-device run. (No name here is another's prefix followed by "_".)
    Metric("ci_ndcg@3", "rk.NDCG(k=3, shuffle_ties=False, confidence=0.95)", ("ndcg", 3, None)),
    Metric("ci_lists", "rk.ListMetrics(['ndcg@3', 'map@2'], shuffle_ties=False, confidence=0.95)"),
    Metric("ci_hits@3", "rk.HitsAtK(3, confidence=0.95)", ("hits", 3), target="index"),
]

#: what a metric with a confidence level logs after its name (or after each name of a dict result)
QUANTITY_SUFFIXES = ("_stderr", "_ci_low", "_ci_high", "_count")


def tie_free_scores(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    return ref.tie_free_scores(rng, b, n)


def eval_data(seed: int = 0, n_lists: int = N_LISTS) -> dict[str, np.ndarray]:
    """Tie-free scores (the identity model's input and output), labels -1..3 (-1: padding,
    some lists all padding, some without a relevant item), a mask, list and item weights."""
    rng = np.random.default_rng(seed)
    scores = tie_free_scores(rng, n_lists, LIST_SIZE)
    labels = rng.integers(-1, 4, (n_lists, LIST_SIZE)).astype("float32")
    labels[3::7] = np.minimum(labels[3::7], 0)  # lists with no relevant item (score 0, keras-rs)
    labels[5::11] = -1.0  # lists that are all padding (weight 0)
    mask = rng.random((n_lists, LIST_SIZE)) > 0.25
    mask[:, 0] = True  # every list has a candidate (the rank-based metrics' target must be one)
    list_w = rng.uniform(0.2, 2.0, n_lists).astype("float32")
    list_w[::13] = 0.0
    item_w = rng.uniform(0.2, 2.0, (n_lists, LIST_SIZE)).astype("float32")
    item_w[rng.random((n_lists, LIST_SIZE)) < 0.15] = 0.0
    pad_w = np.ones(n_lists, "float32")
    return {
        "scores": scores,
        "labels": labels,
        "mask": mask,
        "list_w": list_w,
        "item_w": item_w,
        "pad_w": pad_w,
    }


def pad_lists(data: dict[str, np.ndarray], multiple: int) -> dict[str, np.ndarray]:
    """Append padding lists up to a multiple of ``multiple`` lists: labels -1 (no item: the
    list metrics skip them) and weight 0 (``pad_w``, ``list_w``, ``item_w``: no task for the
    rank-based metrics), so no field sum changes."""
    n = len(data["labels"])
    extra = (-n) % multiple
    scores = tie_free_scores(np.random.default_rng(99), extra, LIST_SIZE)
    return {
        "scores": np.concatenate([data["scores"], scores]),
        "labels": np.concatenate([data["labels"], np.full((extra, LIST_SIZE), -1.0, "float32")]),
        "mask": np.concatenate([data["mask"], np.ones((extra, LIST_SIZE), bool)]),
        "list_w": np.concatenate([data["list_w"], np.zeros(extra, "float32")]),
        "item_w": np.concatenate([data["item_w"], np.zeros((extra, LIST_SIZE), "float32")]),
        "pad_w": np.concatenate([data["pad_w"], np.zeros(extra, "float32")]),
    }


def fit_data(seed: int, n_lists: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels -1..3 of a learnable ranking task (for fit)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_lists, LIST_SIZE, FEATURES)).astype("float32")
    utility = x @ np.array([1.0, -0.5, 0.25]) + 0.5 * rng.normal(size=(n_lists, LIST_SIZE))
    y = np.digitize(utility, [0.0, 1.0, 2.0]).astype("float32")
    y[rng.random((n_lists, LIST_SIZE)) < 0.15] = -1.0
    return x, y


def dense_ranker_scores(weights: list, x: np.ndarray) -> np.ndarray:
    """The fit model's scores in numpy float64: Dense(4, tanh) then Dense(1) per item."""
    w1, b1, w2, b2 = (np.asarray(w, np.float64) for w in weights)
    return (np.tanh(x.astype(np.float64) @ w1 + b1) @ w2 + b2)[..., 0]


# The fit model's float32 scores differ in the last bits (about 1e-7 here) between device
# counts (another batch split, another gradient all-reduce order, so other weights) and from
# the float64 reference. Every metric here depends on each list's order only, so the fit
# checks compare numbers across those paths only where no two scores of a list are closer
# than MIN_GAP (checked: ``min_gap`` on the reference scores, the worker's ``near_ties``
# metric on the outputs the metrics saw; these lists' closest pairs are about 1e-4 apart).
MIN_GAP = 1e-5


def min_gap(scores: np.ndarray) -> float:
    """The smallest distance between two scores of one list."""
    s = np.asarray(scores, np.float64)
    n = s.shape[-1]
    return float(np.abs(s[:, :, None] - s[:, None, :])[:, ~np.eye(n, dtype=bool)].min())


def kahan_data() -> dict[str, np.ndarray]:
    """Batches of BATCH lists for the compensated-summation check: list 0 of batch 0 weighs 1,
    list 0 of every later batch KAHAN_UNIT = 2^-24, the other lists 0. Uncompensated, every
    2^-24 is lost in float32 (1 + 2^-24 rounds to 1); compensated, the weight total is
    ``total - compensation`` = 1 + (KAHAN_BATCHES - 1) 2^-24 exactly. (Small weights rather
    than a large one: the rank-based state holds powers of the weights, w^(M+1) in the GMR
    expectation, which overflow float32 for weights above about 2^14.)"""
    n = KAHAN_BATCHES * BATCH
    rng = np.random.default_rng(5)
    scores = tie_free_scores(rng, n, LIST_SIZE)
    labels = np.full((n, LIST_SIZE), -1.0, "float32")
    labels[::BATCH] = rng.integers(0, 4, (KAHAN_BATCHES, LIST_SIZE))
    labels[::BATCH, 0] = 3.0  # every weighted list holds a relevant item
    w = np.zeros(n, "float32")
    w[::BATCH] = KAHAN_UNIT
    w[0] = 1.0
    return {"scores": scores, "labels": labels, "list_w": w, "mask": np.ones((n, LIST_SIZE), bool)}


# -- naive expected values (python loops in krs_reference, numpy here) ------------------------


def best_item(labels: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The index of each list's highest label (among the mask's items), the first on ties."""
    y = np.asarray(labels, np.float64)
    if mask is not None:
        y = np.where(mask, y, -2.0)
    return np.argmax(y - 1e-3 * np.arange(y.shape[1]), axis=1)


def reference(metric: Metric, data: dict, *, mask=False, weights=None, splits=None) -> dict[str, float]:
    """Expected logs ``{log key: value}`` of ``metric`` over ``data`` (empty without a
    reference). ``weights``: the key of ``data`` holding ``sample_weight``; ``splits``: the
    list batches the metric saw (keras-rs collapses item weights to list weights per batch;
    the rank-based metrics do not care); None: one batch per BATCH lists."""
    if metric.reference is None:
        return {}
    kind = metric.reference[0]
    if kind in ("ndcg", "map"):
        return {metric.name: _keras_rs(metric, data, mask, weights, splits)}
    values = _rank_based(data, mask, weights)
    if kind == "rank_based":
        keys = [f"hits_at_{k}" for k in metric.reference[1]]
        keys += ["inverse_harmonic_mean_rank", "geometric_mean_rank", "arithmetic_mean_rank", "count"]
        keys += [f"expected_hits_at_{k}" for k in metric.reference[1]]
        keys += ["expected_inverse_harmonic_mean_rank", "expected_arithmetic_mean_rank"]
        return {f"{metric.name}.{key}": values[key] for key in keys}
    key = {"hits": f"hits_at_{metric.reference[-1]}", "mrr": "inverse_harmonic_mean_rank"}.get(kind)
    key = key or {"gmr": "geometric_mean_rank", "mr": "arithmetic_mean_rank"}[kind]
    return {metric.name: values[key]}


def _keras_rs(metric: Metric, data: dict, mask: bool, weights, splits) -> float:
    kind, k, gain = metric.reference
    n = len(data["labels"])
    if splits is None:
        splits = [(i, min(i + BATCH, n)) for i in range(0, n, BATCH)]
    num = den = 0.0
    for lo, hi in splits:
        if hi <= lo:
            continue
        a, b = ref.keras_rs_sums(
            kind,
            data["scores"][lo:hi],
            data["labels"][lo:hi],
            k,
            mask=data["mask"][lo:hi] if mask else None,
            sample_weight=None if weights is None else data[weights][lo:hi],
            **({"gain": linear_gain} if gain == "linear" else {}),
        )
        num += a
        den += b
    return num / den if den > 0 else 0.0


def _rank_based(data: dict, mask: bool, weights) -> dict[str, float]:
    """One task per list: the best item (``best_item``) ranked among the list's candidates
    (all items, or the mask's); scores are tie-free, so every rank type gives the same rank.
    Expectations under random ranking of ``N`` candidates: Hits@k ``min(k, N) / N``, MRR
    ``H_N / N``, mean rank ``(N + 1) / 2``."""
    scores = np.asarray(data["scores"], np.float64)
    valid = np.asarray(data["mask"], bool) if mask else np.ones(scores.shape, bool)
    target = best_item(data["labels"], valid if mask else None)
    w = np.ones(len(scores)) if weights is None else np.asarray(data[weights], np.float64)
    s_t = scores[np.arange(len(scores)), target]
    rank = 1.0 + np.sum(valid & (scores > s_t[:, None]), axis=1)
    n_cand = valid.sum(axis=1).astype(np.float64)
    harmonic = np.array([sum(1.0 / j for j in range(1, int(c) + 1)) for c in n_cand])

    def mean(v):
        return float(np.sum(w * v) / np.sum(w))

    out = {
        "inverse_harmonic_mean_rank": mean(1.0 / rank),
        "geometric_mean_rank": math.exp(mean(np.log(rank))),
        "arithmetic_mean_rank": mean(rank),
        "count": float(np.sum(w > 0)),
        "expected_inverse_harmonic_mean_rank": mean(harmonic / n_cand),
        "expected_arithmetic_mean_rank": mean((n_cand + 1) / 2),
    }
    for k in (1, 3):
        out[f"hits_at_{k}"] = mean(rank <= k)
        out[f"expected_hits_at_{k}"] = mean(np.minimum(k, n_cand) / n_cand)
    return out


def replica_splits(n: int, batch: int, replicas: int) -> list[tuple[int, int]]:
    """The per-replica slices of each global batch under tf.distribute (each global batch cut
    into per-replica batches of ``batch // replicas`` lists, in order; a short last batch
    leaves the last replicas with fewer lists or none)."""
    per = batch // replicas
    out = []
    for lo in range(0, n, batch):
        hi = min(lo + batch, n)
        for r in range(replicas):
            out.append((min(lo + r * per, hi), min(lo + (r + 1) * per, hi)))
    return out
