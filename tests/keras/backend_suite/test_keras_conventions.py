"""Conventions beyond keras-rs: deterministic ties with a mask, seeded shuffles, and the
Ignite adapter's numbers reproduced in Keras with explicit arguments."""

from __future__ import annotations

import krs_reference as ref
import numpy as np
import pytest
import torch

from rankstream.ignite import MAP as IgniteMAP
from rankstream.ignite import NDCG as IgniteNDCG
from rankstream.keras import MAP, NDCG, MeanAveragePrecision


def tied_case(rng, b=6, n=10):
    scores = rng.integers(0, 3, (b, n)).astype("float32")  # many ties
    labels = rng.integers(-1, 4, (b, n)).astype("float32")
    mask = rng.random((b, n)) > 0.3
    return scores, labels, mask


@pytest.mark.parametrize("metric", ["ndcg", "map"])
def test_shuffle_ties_false_ranks_earlier_item_first_even_with_a_mask(metric):
    rng = np.random.default_rng(11)
    cls = NDCG if metric == "ndcg" else MAP
    for _ in range(3):
        s, y, m = tied_case(rng)
        ours = cls(k=4, shuffle_ties=False)
        ours.update_state({"labels": y, "mask": m}, s)
        expected = ref.keras_rs_mean(metric, s, y, 4, mask=m)  # ties: earlier index first
        assert float(ours.result()) == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_shuffle_ties_false_does_not_depend_on_the_seed():
    """keras-rs shuffles whenever a mask is present, even with shuffle_ties=False (its PR
    #205); here the seed plays no part then."""
    rng = np.random.default_rng(5)
    s, y, m = tied_case(rng, b=16, n=12)
    ours = {float(_update(NDCG(k=3, shuffle_ties=False, seed=seed), y, m, s).result()) for seed in range(6)}
    assert len(ours) == 1


def _update(metric, y, m, s):
    metric.update_state({"labels": y, "mask": m}, s)
    return metric


@pytest.mark.parametrize("cls", [NDCG, MAP])
def test_seeded_shuffle_is_reproducible(cls):
    rng = np.random.default_rng(3)
    batches = [tied_case(rng) for _ in range(3)]

    def stream(seed):
        metric = cls(k=3, seed=seed)
        out = []
        for s, y, m in batches:
            metric.update_state({"labels": y, "mask": m}, s)
            out.append(float(metric.result()))
        return out

    first = stream(1234)
    assert stream(1234) == first
    # A random tie order always gives a value between the worst and the best tie order.
    for (s, y, m), value in zip(batches[:1], first[:1], strict=True):
        best = ref.keras_rs_mean(cls.__name__.lower(), s + 1e-3 * (y > 0), y, 3, mask=m)
        worst = ref.keras_rs_mean(cls.__name__.lower(), s - 1e-3 * (y > 0), y, 3, mask=m)
        assert worst - 1e-6 <= value <= best + 1e-6


def test_mean_average_precision_is_map():
    assert MeanAveragePrecision is MAP


def _ignite(metric, batches):
    for s, y, m, w in batches:
        extra = {"mask": torch.from_numpy(m)}
        if w is not None:
            extra["sample_weight"] = torch.from_numpy(w)
        metric.update((torch.from_numpy(s), torch.from_numpy(y), extra))
    return metric.compute()[0]


def _keras(metric, batches):
    for s, y, m, w in batches:
        metric.update_state({"labels": y, "mask": m}, s, sample_weight=w)
    return float(metric.result())


def ignite_batches(rng, weighted, n_batches=3, b=7, n=12):
    out = []
    for _ in range(n_batches):
        s = rng.integers(0, 4, (b, n)).astype("float32")  # ties: both rank the earlier item first
        y = (rng.integers(0, 5, (b, n)) * (rng.random((b, n)) < 0.4)).astype("float32")
        m = rng.random((b, n)) > 0.2
        m[:, 0] = True  # no list is all masked
        y[0] = 0.0  # a list with no relevant item
        w = rng.uniform(0.0, 2.0, b).astype("float32") if weighted else None
        if weighted:
            w[1] = 0.0
        out.append((s, y, m, w))
    return out


@pytest.mark.parametrize("k", [1, 3, 20])
@pytest.mark.parametrize("weighted", [False, True])
def test_ignite_map_numbers_in_keras(k, weighted):
    batches = ignite_batches(np.random.default_rng(k + 10 * weighted), weighted)
    expected = _ignite(IgniteMAP(top_k=k), batches)
    got = _keras(
        MAP(k=k, shuffle_ties=False, denominator="min", relevance_threshold=None, empty="skip"), batches
    )
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
    if not weighted:  # lists without relevance counted as 0 (ignite ignore_zero_hits=False)
        expected = _ignite(IgniteMAP(top_k=k, ignore_zero_hits=False), batches)
        got = _keras(
            MAP(k=k, shuffle_ties=False, denominator="min", relevance_threshold=None, empty="zero"), batches
        )
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("k", [1, 3, 20])
@pytest.mark.parametrize("gain", ["exp_rank", "linear_rank"])
@pytest.mark.parametrize("weighted", [False, True])
def test_ignite_ndcg_numbers_in_keras(k, gain, weighted):
    batches = ignite_batches(np.random.default_rng(100 + k + 10 * weighted), weighted)
    expected = _ignite(IgniteNDCG(top_k=k, gain_function=gain), batches)
    got = _keras(NDCG(k=k, gain_fn=gain, shuffle_ties=False, relevance_threshold=1.0, empty="skip"), batches)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
