"""Every list metric under ``ties="first"`` and ``ties="expected"`` through Keras ``compile`` +
``evaluate`` (under ``jit_compile`` on JAX and TensorFlow) at every ``k`` from 1 to two past the
longest list, against brute-force enumeration over the orders of the tied items
(``tests/enumeration.py``), on batches the suite draws (hypothesis): lists of 1-8 valid items
padded with -1 labels (keras-rs's masking), scores from 2-3 values, graded labels, a weight per
list, with keras-rs's conventions (lists without a relevant item score 0 at the batch's mean
list weight; a list without an item is no list)."""

from __future__ import annotations

import math
import os
import sys

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import rankstream.keras as rkeras
from rankstream.core.lists.table import LIST_METRICS
from rankstream.keras import ListMetrics

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import enumeration as en

BACKEND = keras.backend.backend()
X64 = BACKEND != "jax" or __import__("jax").config.jax_enable_x64
RTOL, ATOL = (1e-12, 1e-12) if X64 else (3e-5, 3e-6)
ROWS, WIDTH = 4, 8
KS = range(1, WIDTH + 3)
METRICS = ["ndcg", "dcg", "map", "precision", "recall", "hit_rate", "mrr", "f1", "rbp"]
NAMES = [f"{m}@{k}" for m in METRICS for k in KS] + ["r_precision"]
# each metric alone (its own selection, as deep as its k), every other one at the padded width and
# the others past it, where a metric that reads only the hits selects one place (every k of every
# metric is in the collection's one selection); one compiled model holds them all
ALONE = [f"{m}@{WIDTH + 2 * (i % 2)}" for i, m in enumerate(METRICS)] + ["r_precision"]
CLASSES = {row.name: getattr(rkeras, row.keras.name) for row in LIST_METRICS}
MODELS: dict[str, tuple[keras.Model, dict]] = {}


def model_for(policy: str) -> tuple[keras.Model, dict]:
    """One compiled identity model per policy (its scores as given), kept for every example:
    each metric alone at a few ``k`` (``ALONE``) (its own selection, as deep as its ``k``) and every one in
    a ``ListMetrics`` (one shared selection, every ``k``), whose logs are prefixed ``lm_``."""
    if policy not in MODELS:
        inputs = keras.Input((WIDTH,), dtype="float64")
        model = keras.Model(inputs, inputs)
        alone = {}
        for name in ALONE:
            base, _, k = name.partition("@")
            cls = CLASSES["mrr" if base == "mrr" else base]
            args = (int(k),) if k else ()
            alone[name] = cls(*args, ties=policy, dtype="float64", name=name)
        collection = ListMetrics(NAMES, ties=policy, dtype="float64", prefix="lm_")
        model.compile(
            loss=lambda yt, yp: keras.ops.mean(yp * 0.0),
            weighted_metrics=[*alone.values(), collection],
            jit_compile=BACKEND != "torch",
        )
        kernels = {name: m.kernel for name, m in alone.items()}
        MODELS[policy] = model, {**kernels, **{f"lm_{n}": k for n, k in collection.kernel.members.items()}}
    return MODELS[policy]


@st.composite
def padded_lists(draw):
    """``ROWS`` lists of 0-8 valid items (the rest -1 padding), scores from 2-3 values, labels
    0..3, a weight per list."""
    levels = draw(st.lists(st.sampled_from([-1.0, 0.0, 0.25, 0.5, 2.0]), min_size=2, max_size=3, unique=True))
    size = ROWS * WIDTH
    scores = np.array(draw(st.lists(st.sampled_from(levels), min_size=size, max_size=size))).reshape(
        ROWS, WIDTH
    )
    labels = np.array(draw(st.lists(st.integers(0, 3), min_size=size, max_size=size)), float)
    labels = labels.reshape(ROWS, WIDTH)
    lengths = draw(st.lists(st.integers(0, WIDTH), min_size=ROWS, max_size=ROWS))
    for i, n in enumerate(lengths):
        labels[i, n:] = -1.0
    weights = np.array(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=ROWS, max_size=ROWS)))
    ones = np.ones(WIDTH)
    for i in range(ROWS):
        assume(en.count_orders(scores[i], labels[i], ones, labels[i] >= 0) <= 3_000)
    return scores, labels, weights


def member_options(kernel) -> dict:
    """The options the reference needs, read off a collection member's settings."""
    opts = {"relevance_threshold": kernel.conventions.relevance_threshold}
    for attr in ("gain", "denominator", "p", "graded", "max_grade"):
        if hasattr(kernel, attr):
            opts[attr] = getattr(kernel, attr)
    return opts


def keras_rs_mean(values: list[float | None], relevant: list[bool], weights) -> float:
    """keras-rs's weighted mean over one batch: a list with a relevant item weighs its weight,
    one without scores 0 at the mean weight of the others; a list without an item is no list."""
    both = [weights[i] for i, v in enumerate(values) if v is not None and relevant[i]]
    fill = sum(both) / len(both) if both else 1.0
    num = den = 0.0
    for i, v in enumerate(values):
        if v is None:
            continue
        w = weights[i] if relevant[i] else fill
        num += w * (v if relevant[i] else 0.0)
        den += w
    return num / den if den > 0 else 0.0


def reference(policy: str, kname: str, opts: dict, scores, labels) -> list[tuple[list[float], bool] | None]:
    """Per list: its values at every ``k`` of ``KS`` (and the whole list) under ``policy``, and
    whether it holds a relevant item; None for a list without an item."""
    ones, ks, out = np.ones(WIDTH), [*KS, None], []
    for i in range(ROWS):
        valid = labels[i] >= 0
        if not valid.any():
            out.append(None)
            continue
        if policy == "first":
            ranking = en.first_order(scores[i], labels[i], ones, valid)
            values = [en.one_ranking(kname, ranking, k, opts) for k in ks]
        else:
            values = en.expected_value(kname, scores[i], labels[i], ones, valid, ks, opts)
        t = opts["relevance_threshold"]
        out.append((values, any(en.relevant(y, t) for y in labels[i][valid])))
    return out


@pytest.mark.parametrize("policy", ["first", "expected"])
@given(data=padded_lists())
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
def test_evaluate_equals_the_enumeration_at_every_k(policy, data) -> None:
    scores, labels, weights = data
    model, kernels = model_for(policy)
    logs = model.evaluate(scores, labels, sample_weight=weights, batch_size=ROWS, verbose=0, return_dict=True)
    cache: dict = {}
    for name, kernel in kernels.items():
        base, _, k = name.removeprefix("lm_").partition("@")
        opts = member_options(kernel)
        kname = {"mrr": "reciprocal_rank"}.get(base, base)
        key = (kname, tuple(sorted(opts.items())))
        if key not in cache:
            cache[key] = reference(policy, kname, opts, scores, labels)
        at = int(k) - 1 if k else len(KS)
        lists = cache[key]
        values = [None if x is None else x[0][at] for x in lists]
        relevant = [x is not None and x[1] for x in lists]
        want = keras_rs_mean(values, relevant, weights)
        assert math.isclose(logs[name], want, rel_tol=RTOL, abs_tol=ATOL), (name, logs[name], want)
