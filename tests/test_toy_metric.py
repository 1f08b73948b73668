"""A list metric added outside the package (tests/toy_list_metric.py: one kernel class, one table
row, registered at runtime) gets the functional form, ``ListMetrics``, the Ignite and
torchmetrics classes and the tie and chance options it declares hooks for; each checked against
a naive one-list reference written here (the Keras class: tests/keras/backend_suite)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from toy_list_metric import ToyHitsKernel, registered

from rankstream.adapters import ignite_lists
from rankstream.adapters import torchmetrics_metrics as tm
from rankstream.core import functional
from rankstream.core.lists.chance import CHANCE_METRICS, declares_moments
from rankstream.core.lists.collection import ListMetrics
from rankstream.core.lists.table import LIST_METRICS, register

FORMS: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _toy_forms():
    """The toy's row registered and its Ignite and torchmetrics classes made for this module;
    every registry as it was afterwards."""
    more = (ignite_lists.CLASSES, ignite_lists.PEER_DEFAULTS, vars(ignite_lists), tm.CLASSES, vars(tm))
    with registered(*more) as row:
        FORMS.update(row=row, ignite=ignite_lists.register(row), tm=tm.register(row))
        yield
    FORMS.clear()


# -- the naive reference: one list at a time ---------------------------------------------------
def hits(scores, labels, k):
    """The relevant items among the top ``k`` of one list, ties to the earlier index."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: the earlier index first
    return sum(labels[i] > 0 for i in order[:k])


def tie_orders(scores):
    """Every order of one list's items that ranks no item above a higher score."""
    for perm in itertools.permutations(range(len(scores))):
        if all(scores[a] >= scores[b] for a, b in itertools.pairwise(perm)):
            yield perm


def under_orders(orders, labels, k):
    values = [sum(labels[i] > 0 for i in perm[:k]) for perm in orders]
    return float(np.mean(values)), float(np.var(values)), float(max(values))


def lists(draw_max=6):
    """A small tie-heavy batch: scores and labels in {0, 1, 2}, a mask (a list may have none)."""
    size = st.integers(1, draw_max)
    return st.integers(1, 4).flatmap(
        lambda b: size.flatmap(
            lambda n: st.tuples(
                st.lists(st.lists(st.integers(0, 2), min_size=n, max_size=n), min_size=b, max_size=b),
                st.lists(st.lists(st.integers(0, 2), min_size=n, max_size=n), min_size=b, max_size=b),
                st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=b, max_size=b),
            )
        )
    )


def valid_items(s, y, m):
    keep = [i for i in range(len(s)) if m[i]]
    return [float(s[i]) for i in keep], [float(y[i]) for i in keep]


@settings(max_examples=40, deadline=None)
@given(data=lists(), ks=st.lists(st.integers(1, 8), min_size=2, max_size=3, unique=True))
def test_functional_and_list_metrics_match_the_naive_reference(data, ks):
    s, y, m = (np.asarray(a, dtype=dt) for a, dt in zip(data, (float, float, bool), strict=True))
    ks = sorted(ks)
    want = np.array([[hits(*valid_items(s[i], y[i], m[i]), k) for k in ks] for i in range(len(s))])
    got = functional.toy_hits_at_k(s, y, ks, mask=m, empty="zero")
    np.testing.assert_allclose(got, want, atol=1e-12)
    # ListMetrics by name and alias, beside a built-in metric: the mean over the lists with a relevant item
    sums = ListMetrics([f"toy_hits@{ks[0]}", f"ToyHits@{ks[-1]}", "precision@2"]).batch_sums(None, s, y, m)
    counted = np.array([any(y[i][m[i]] > 0) for i in range(len(s))])
    for k, name in ((ks[0], f"toy_hits_{ks[0]}"), (ks[-1], f"ToyHits_{ks[-1]}")):
        assert float(sums[f"{name}__count"]) == counted.sum()
        col = ks.index(k)
        assert float(sums[f"{name}__value_sum"][0]) == pytest.approx(want[counted, col].sum(), abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(data=lists(5), ks=st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True))
def test_tie_expectation_and_chance_match_enumeration(data, ks):
    s, y, m = (np.asarray(a, dtype=dt) for a, dt in zip(data, (float, float, bool), strict=True))
    ks = sorted(ks)
    kernel = ToyHitsKernel(ks, ties="expected", chance=True, empty="zero")
    sums = kernel.batch_sums(None, s, y, m)
    value = np.zeros(len(ks))
    moments = np.zeros((3, len(ks)))
    for i in range(len(s)):
        vs, vy = valid_items(s[i], y[i], m[i])
        if not vs:  # a list with no item is no list
            continue
        ties = [under_orders(list(tie_orders(vs)), vy, k)[0] for k in ks]
        chance = [under_orders(list(itertools.permutations(range(len(vs)))), vy, k) for k in ks]
        value += ties
        moments += np.array(chance).T
    np.testing.assert_allclose(sums["value_sum"], value, atol=1e-9)
    np.testing.assert_allclose(sums["chance_expected_sum"], moments[0], atol=1e-9)
    np.testing.assert_allclose(sums["chance_variance_sum"], moments[1], atol=1e-9)
    np.testing.assert_allclose(sums["chance_best_sum"], moments[2], atol=1e-9)


def batches(seed, b=5, n=7):
    """Lists with distinct positive scores and at least one relevant item each."""
    rng = np.random.default_rng(seed)
    scores = rng.permutation(b * n).reshape(b, n).astype(np.float64) + 1.0
    labels = rng.integers(0, 3, size=(b, n)).astype(np.float64)
    labels[:, 0] = np.maximum(labels[:, 0], 1.0)
    return scores, labels


def test_ignite_class_through_an_engine_matches_the_naive_reference():
    data = [batches(seed) for seed in range(3)]
    engine = Engine(lambda e, batch: tuple(torch.as_tensor(a) for a in batch))
    FORMS["ignite"](top_k=[1, 3, 20]).attach(engine, "hits")
    got = engine.run(data).metrics["hits"]
    want = [
        np.mean([hits(s, y, k) for s, y in zip(*np.concatenate(data, axis=1), strict=True)])
        for k in (1, 3, 20)
    ]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_ignite_class_with_tie_expectation_and_chance_matches_enumeration():
    rng = np.random.default_rng(3)
    data = [tuple(rng.integers(0, 3, size=(4, 5)).astype(np.float64) for _ in range(2)) for _ in range(2)]
    engine = Engine(lambda e, batch: tuple(torch.as_tensor(a) for a in batch))
    FORMS["ignite"](top_k=[1, 4], ties="expected", chance=True).attach(engine, "hits")
    got = engine.run(data).metrics
    scores, labels = np.concatenate([d[0] for d in data]), np.concatenate([d[1] for d in data])
    kept = [i for i in range(len(scores)) if labels[i].any()]  # ignore_zero_hits: lists with a hit
    for col, k in enumerate((1, 4)):
        ties = [under_orders(list(tie_orders(scores[i])), labels[i], k)[0] for i in kept]
        chance = [under_orders(list(itertools.permutations(range(5))), labels[i], k) for i in kept]
        assert got["hits"][col] == pytest.approx(np.mean(ties), abs=1e-6)
        assert got["hits_expected"][col] == pytest.approx(np.mean([c[0] for c in chance]), abs=1e-6)
        z = (np.mean(ties) - np.mean([c[0] for c in chance])) / np.sqrt(
            sum(c[1] for c in chance) / len(kept) ** 2
        )
        assert got["hits_z"][col] == pytest.approx(z, rel=1e-6)


def test_torchmetrics_class_matches_the_naive_reference():
    scores, labels = batches(7, b=6, n=5)
    indexes = torch.arange(6).repeat_interleave(5)
    metric = FORMS["tm"](top_k=3)
    metric.update(torch.as_tensor(scores.ravel()), torch.as_tensor(labels.ravel() > 0), indexes=indexes)
    want = np.mean([hits(s, y, 3) for s, y in zip(scores, labels, strict=True)])
    assert float(metric.compute()) == pytest.approx(want, abs=1e-6)


def test_torchmetrics_register_takes_a_table_row():
    assert FORMS["tm"].__name__ == "RetrievalToyHits"
    assert isinstance(FORMS["tm"](top_k=2).kernel, ToyHitsKernel)
    with pytest.raises(TypeError, match="ListMetricRow"):
        tm.register("RetrievalToyHits")
    bare = dataclasses.replace(FORMS["row"], name="toy_bare", aliases=(), torchmetrics=None)
    with pytest.raises(ValueError, match="no torchmetrics presentation"):
        tm.register(bare)
    with pytest.raises(ValueError, match="exists already"):
        tm.register(FORMS["row"])


def test_chance_hook_declared_by_the_kernel_and_the_message_lists_the_table():
    assert declares_moments(ToyHitsKernel(3)) and not declares_moments(LIST_METRICS[-1].kernel)
    table = {row.name for row in LIST_METRICS if declares_moments(row.kernel)}
    assert table == set(CHANCE_METRICS)  # the names chance=True's refusal prints
    with pytest.raises(ValueError, match="taken already"):
        register(FORMS["row"])
