"""Every list metric under every tie policy it supports, against brute-force enumeration over the
orders of the tied items (:mod:`enumeration`), on lists the suite draws (hypothesis): 1-8 items,
scores from 2-3 values (ties everywhere), graded labels, masks (a list may lose every item),
per-list and per-item weights, every ``k`` from 1 to two past the list's end.

* the functional form (per-list values): ``"first"`` equals the ranking with ties to the earlier
  index, ``"expected"`` the mean over every order, ``"random"`` one of the orders (the same one at
  every ``k``);
* an Ignite ``Engine`` run over the lists cut into batches: the weighted mean of the reference's
  per-list values over the lists with a relevant item (ignite's ``ignore_zero_hits``).

The Keras side (``compile`` + ``evaluate`` under ``jit``) is in
``tests/keras/backend_suite/test_keras_ties_property.py``.
"""

from __future__ import annotations

import math

import enumeration as en
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ignite.engine import Engine

import rankstream.ignite as rignite
from rankstream.core.backends import read_back
from rankstream.core.lists.table import LIST_METRICS

import reference as ref

ROWS = {row.name: row for row in LIST_METRICS}
# (metric, kernel options, policies): every option that changes a value under ties
CASES = [
    ("ndcg", {"gain": "exp_rank"}),
    ("ndcg", {"gain": "linear_rank"}),
    ("dcg", {"gain": "exp_rank"}),
    ("map", {"denominator": "min"}),
    ("map", {"denominator": "all"}),
    ("precision", {"denominator": "k"}),
    ("precision", {"denominator": "valid"}),
    ("recall", {}),
    ("hit_rate", {}),
    ("mrr", {}),
    ("r_precision", {}),
    ("f1", {}),
    ("rbp", {"p": 0.5}),
    ("rbp", {"p": 0.8, "graded": True}),
    ("err", {"max_grade": 3.0}),
    ("auc", {}),
]
POLICIES = ("first", "random", "expected")
NO_EXPECTED = {"err"}  # no exact tie-expected form: refused by name
ORDER_FREE = {"auc"}  # counts a tie one half whatever the policy
MAX_ORDERS = 3_000  # distinct rankings per list, to keep the enumeration quick


def case_id(case: tuple[str, dict]) -> str:
    return "-".join([case[0], *map(str, case[1].values())])


def kernel_name(name: str) -> str:
    return {"mrr": "reciprocal_rank"}.get(name, name)


@st.composite
def tied_lists(draw, max_rows: int = 4):
    """A batch of 1-4 lists of one width (1-8), scores from 2-3 values, labels 0..3, a mask,
    per-list and per-item weights, and a sorted set of ``k`` in ``1 .. width + 2``."""
    b = draw(st.integers(1, max_rows))
    n = draw(st.integers(1, 8))
    levels = draw(st.lists(st.sampled_from([-1.0, 0.0, 0.25, 0.5, 2.0]), min_size=2, max_size=3, unique=True))
    scores = np.array(draw(st.lists(st.sampled_from(levels), min_size=b * n, max_size=b * n))).reshape(b, n)
    labels = np.array(draw(st.lists(st.integers(0, 3), min_size=b * n, max_size=b * n)), float).reshape(b, n)
    masked = draw(st.booleans())
    valid = (
        np.array(draw(st.lists(st.booleans(), min_size=b * n, max_size=b * n))).reshape(b, n)
        if masked
        else np.ones((b, n), bool)
    )
    list_w = np.array(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=b, max_size=b)))
    item_w = np.array(draw(st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=b * n, max_size=b * n)))
    ks = sorted(draw(st.sets(st.integers(1, n + 2), min_size=1, max_size=3)))
    threshold = draw(st.sampled_from([None, 2.0]))
    for i in range(b):
        assume(en.count_orders(scores[i], labels[i], item_w.reshape(b, n)[i], valid[i]) <= MAX_ORDERS)
    return scores, labels, valid if masked else None, list_w, item_w.reshape(b, n), ks, threshold


def options(name: str, opts: dict, threshold, policy: str) -> dict:
    out = {"relevance_threshold": threshold, "ties": policy, **opts}
    if policy == "random":
        out["seed"] = 7
    return out


def reference_opts(name: str, opts: dict, threshold) -> dict:
    return {"relevance_threshold": threshold, **opts}


def per_list_reference(name, opts, threshold, scores, labels, valid, item_w, ks, weighted=False):
    """Per list: ``(first, expected, every order's values, counted)``."""
    b, n = scores.shape
    valid = np.ones((b, n), bool) if valid is None else valid
    iw = item_w if weighted else np.ones((b, n))
    out = []
    for i in range(b):
        ropts = reference_opts(name, opts, threshold) | {"item_weighted": weighted}
        if name == "dcg" and weighted:  # keras-rs divides DCG by the list weight from its gains
            ropts["list_weight"] = _gain_list_weight(labels[i], iw[i], valid[i], opts, threshold)
        kname = kernel_name(name)
        k_of = [None] if name == "r_precision" else ks
        if not valid[i].any():
            out.append(None)
            continue
        orders = en.values_over_orders(kname, scores[i], labels[i], iw[i], valid[i], k_of, ropts)
        first = tuple(en.one_ranking(kname, en.first_order(scores[i], labels[i], iw[i], valid[i]), k, ropts)
                      for k in k_of)  # fmt: skip
        expected = tuple(math.fsum(v[j] for v in orders) / len(orders) for j in range(len(k_of)))
        counted = any(en.relevant(y, threshold) for y, ok in zip(labels[i], valid[i], strict=True) if ok)
        out.append((first, expected, orders, counted))
    return out


def _gain_list_weight(labels, w, valid, opts, threshold) -> float:
    def gain(y):
        y = 0.0 if threshold is not None and y < threshold else y
        return 2.0**y - 1.0 if opts.get("gain", "exp_rank") == "exp_rank" else y

    g = [gain(y) for y, ok in zip(labels, valid, strict=True) if ok]
    ws = [x for x, ok in zip(w, valid, strict=True) if ok]
    return sum(a * c for a, c in zip(ws, g, strict=True)) / sum(g) if sum(g) > 0 else 1.0


def kernel_of(name: str, opts: dict, threshold, policy: str, ks, **more):
    row = ROWS[name]
    args = (ks,) if row.takes_k else ()
    return row.kernel(*args, **options(name, opts, threshold, policy), **more)


def auc_reference(scores, labels, valid, threshold):
    b, n = scores.shape
    valid = np.ones((b, n), bool) if valid is None else valid
    return [ref.auc(scores[i].tolist(), labels[i].tolist(), valid=valid[i].tolist(), threshold=threshold)
            for i in range(b)]  # fmt: skip


def check_per_list(name, opts, policy, got, want) -> None:
    for i, w in enumerate(want):
        if w is None:  # no item in the list: no list
            assert not np.any(got[i]), (i, got[i])
            continue
        first, expected, orders, _ = w
        row = tuple(float(x) for x in got[i])
        if policy == "first":
            np.testing.assert_allclose(row, first, rtol=1e-12, atol=1e-12, err_msg=f"list {i}")
        elif policy == "expected":
            np.testing.assert_allclose(row, expected, rtol=1e-12, atol=1e-12, err_msg=f"list {i}")
        else:  # one order of the tied items, the same at every k
            assert any(np.allclose(row, v, rtol=1e-12, atol=1e-12) for v in orders), (i, row, orders[:5])


@pytest.mark.parametrize(("name", "opts"), CASES, ids=[case_id(c) for c in CASES])
@given(data=tied_lists())
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
def test_functional_form_equals_the_enumeration_under_every_policy(name, opts, data) -> None:
    scores, labels, valid, _, _, ks, threshold = data
    row = ROWS[name]
    fn = getattr(__import__("rankstream"), row.function)
    if name in ORDER_FREE:
        want = auc_reference(scores, labels, valid, threshold)
        for policy in POLICIES:
            got, counted = fn(scores, labels, mask=valid, return_counted=True,
                              **options(name, opts, threshold, policy))  # fmt: skip
            for i, w in enumerate(want):
                assert bool(counted[i]) == (w is not None), i
                if w is not None:
                    assert got[i] == pytest.approx(w, abs=1e-12), (policy, i)
        return
    want = per_list_reference(name, opts, threshold, scores, labels, valid, None, ks)
    for policy in POLICIES:
        if policy == "expected" and name in NO_EXPECTED:
            with pytest.raises(ValueError, match="ties='expected'"):
                kernel_of(name, opts, threshold, policy, ks)
            continue
        kw = (
            {"k": ks, **options(name, opts, threshold, policy)}
            if row.takes_k
            else options(name, opts, threshold, policy)
        )
        got, counted = fn(scores, labels, mask=valid, return_counted=True, **kw)
        check_per_list(name, opts, policy, np.asarray(got).reshape(len(scores), -1), want)
        for i, w in enumerate(want):
            assert bool(counted[i]) == (w is not None and w[3]), (policy, i)
        # torch tensors on the path of an accelerator or a trace (no value read back)
        t_mask = None if valid is None else torch.tensor(valid)
        with read_back(False):
            got = fn(torch.tensor(scores), torch.tensor(labels), mask=t_mask, **kw)
        check_per_list(name, opts, policy, got.numpy().reshape(len(scores), -1), want)


ITEM_WEIGHTED = [c for c in CASES if c[0] in ("ndcg", "dcg", "map")]


@pytest.mark.parametrize(("name", "opts"), ITEM_WEIGHTED, ids=[case_id(c) for c in ITEM_WEIGHTED])
@given(data=tied_lists())
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
def test_keras_rs_item_weights_equal_the_enumeration(name, opts, data) -> None:
    """keras-rs per-item weights weigh each order's gains (nDCG, DCG) and relevant terms (AP)."""
    scores, labels, valid, _, item_w, ks, threshold = data
    want = per_list_reference(name, opts, threshold, scores, labels, valid, item_w, ks, weighted=True)
    for policy in POLICIES:
        kernel = kernel_of(name, opts, threshold, policy, ks, weighting="keras_rs")
        got = kernel.per_list(scores, labels, mask=valid, sample_weight=item_w)[0]
        check_per_list(name, opts, policy, np.asarray(got), want)


def ignite_metric(name: str, opts: dict, threshold, policy: str, ks):
    row = ROWS[name]
    cls = getattr(rignite, row.ignite.name)
    kw = options(name, opts, threshold, policy)
    if "gain" in kw:
        kw["gain_function"] = kw.pop("gain")
    return cls(ks, **kw) if row.takes_k else cls(**kw)


RANKED = [c for c in CASES if c[0] not in ORDER_FREE]


@pytest.mark.parametrize(("name", "opts"), RANKED, ids=[case_id(c) for c in RANKED])
@given(data=tied_lists(max_rows=6), cut=st.integers(1, 6))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
def test_an_ignite_engine_run_equals_the_enumeration(name, opts, data, cut) -> None:
    """The lists in batches of ``cut`` through an ``Engine``: the weighted mean over the lists with
    a relevant item of the reference's per-list values (``"random"``: between the smallest and
    the largest mean any orders give)."""
    scores, labels, valid, list_w, _, ks, threshold = data
    want = per_list_reference(name, opts, threshold, scores, labels, valid, None, ks)
    counted = [i for i, w in enumerate(want) if w is not None and w[3]]
    assume(counted)
    mask = np.ones(scores.shape, bool) if valid is None else valid
    batches = [
        (torch.tensor(scores[a : a + cut]), torch.tensor(labels[a : a + cut]),
         {"mask": torch.tensor(mask[a : a + cut]), "sample_weight": torch.tensor(list_w[a : a + cut])})
        for a in range(0, len(scores), cut)
    ]  # fmt: skip
    total = sum(list_w[i] for i in counted)
    for policy in POLICIES:
        if policy == "expected" and name in NO_EXPECTED:
            continue
        engine = Engine(lambda e, batch: batch)
        ignite_metric(name, opts, threshold, policy, ks).attach(engine, "m")
        got = np.atleast_1d(np.asarray(engine.run(batches).metrics["m"], float))
        if policy == "random":
            for j in range(len(got)):
                low = sum(list_w[i] * min(v[j] for v in want[i][2]) for i in counted) / total
                high = sum(list_w[i] * max(v[j] for v in want[i][2]) for i in counted) / total
                assert low - 1e-12 <= got[j] <= high + 1e-12, (j, low, got[j], high)
            continue
        at = 0 if policy == "first" else 1
        mean = [sum(list_w[i] * want[i][at][j] for i in counted) / total for j in range(len(got))]
        np.testing.assert_allclose(got, mean, rtol=1e-12, atol=1e-12, err_msg=policy)


CHANCE = [
    c
    for c in CASES
    if c[0] in ("ndcg", "dcg", "map", "precision", "recall", "hit_rate", "mrr", "r_precision")
]


@pytest.mark.parametrize(("name", "opts"), CHANCE, ids=[case_id(c) for c in CHANCE])
@given(data=tied_lists())
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
def test_chance_expectation_equals_the_enumeration_with_every_score_equal(name, opts, data) -> None:
    """``chance=True``'s expected value under a uniformly random ranking of each list is the
    mean over every order of its items: the enumeration with every score tied, averaged over
    the lists with a relevant item (the default ``empty="skip"``)."""
    scores, labels, valid, _, _, ks, threshold = data
    tied = np.zeros_like(scores)
    want = per_list_reference(name, opts, threshold, tied, labels, valid, None, ks)
    counted = [w for w in want if w is not None and w[3]]
    assume(counted)
    row = ROWS[name]
    kw = options(name, opts, threshold, "first")
    if row.takes_k:
        kw["k"] = ks
    got = getattr(__import__("rankstream"), row.function)(scores, labels, mask=valid, chance=True, **kw)
    mean = [math.fsum(w[1][j] for w in counted) / len(counted) for j in range(len(counted[0][1]))]
    np.testing.assert_allclose(np.atleast_1d(got["expected"]), mean, rtol=1e-12, atol=1e-12)
