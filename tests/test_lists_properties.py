"""Invariants of the list metrics (DESIGN.md), checked with hypothesis on both backends."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankstream import MAPKernel, NDCGKernel, State

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")

KERNELS = {
    "map_min": lambda ks: MAPKernel(ks),
    "map_all_zero": lambda ks: MAPKernel(ks, denominator="all", empty="zero"),
    "ndcg": lambda ks: NDCGKernel(ks),
    "ndcg_linear_nothr": lambda ks: NDCGKernel(
        ks, gain="linear_rank", relevance_threshold=None, empty="zero"
    ),
    # keras-rs list weights are batch dependent only through lists without a relevant item
    # (they get their batch's mean weight): skipping those makes any batching give one number
    "ndcg_keras_rs_skip": lambda ks: NDCGKernel(
        ks, weighting="keras_rs", negative_labels="mask", empty="skip"
    ),
    "map_keras_rs_skip": lambda ks: MAPKernel(
        ks, denominator="all", weighting="keras_rs", negative_labels="mask", empty="skip"
    ),
}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def datasets(draw, ties=True):
    b = draw(st.integers(1, 12))
    n = draw(st.integers(1, 10))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if ties:
        scores = rng.integers(0, 4, size=(b, n)).astype(np.float64)
    else:
        scores = rng.permuted(np.tile(np.arange(n, dtype=np.float64), (b, 1)), axis=1) + rng.random((b, 1))
    labels = rng.integers(0, 4, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.5)
    mask = rng.random((b, n)) < 0.8
    weights = rng.integers(0, 4, size=b).astype(np.float64)
    ks = sorted(set(draw(st.lists(st.integers(1, n + 3), min_size=1, max_size=3))))
    return scores, labels, mask, weights, ks


def state_of(kernel, parts, to):
    st_ = State(kernel)
    for s, y, m, w in parts:
        st_.update(to(s), to(y), to(m), to(w))
    return st_


def result_or_none(state):
    try:
        return state.compute()
    except Exception:  # NotComputable: every metric must agree on it
        return None


BACKENDS = {"numpy": np.asarray, "torch": torch.from_numpy}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNELS)
@SETTINGS
@given(data=datasets(), cuts=st.lists(st.integers(0, 12), max_size=4), order_seed=st.integers(0, 100))
def test_any_batch_split_and_order_gives_the_same_result(backend, name, data, cuts, order_seed):
    s, y, m, w, ks = data
    to = BACKENDS[backend]
    whole = result_or_none(state_of(KERNELS[name](ks), [(s, y, m, w)], to))
    bounds = sorted({0, len(s), *[c for c in cuts if c < len(s)]})
    parts = [(s[a:b], y[a:b], m[a:b], w[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
    np.random.default_rng(order_seed).shuffle(parts)
    split = result_or_none(state_of(KERNELS[name](ks), parts, to))
    # Also as separate states merged (map-reduce).
    merged = [state_of(KERNELS[name](ks), [p], to) for p in parts]
    total = merged[0]
    for other in merged[1:]:
        total = total.merge(other)
    if whole is None:
        assert split is None and result_or_none(total) is None
    else:
        assert split == pytest.approx(whole, abs=1e-12)
        assert result_or_none(total) == pytest.approx(whole, abs=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNELS)
@SETTINGS
@given(data=datasets(), pad=st.integers(1, 6), pad_seed=st.integers(0, 1000))
def test_padding_plus_mask_equals_the_unpadded_lists(backend, name, data, pad, pad_seed):
    s, y, _, w, ks = data
    to = BACKENDS[backend]
    rng = np.random.default_rng(pad_seed)
    b, n = s.shape
    # Pad columns at random positions with arbitrary scores (NaN and +inf too) and labels.
    sp = np.concatenate([s, rng.choice([np.nan, np.inf, 5.0, -1.0], size=(b, pad))], axis=1)
    yp = np.concatenate([y, rng.integers(0, 4, size=(b, pad)).astype(np.float64)], axis=1)
    mp = np.concatenate([np.ones((b, n), bool), np.zeros((b, pad), bool)], axis=1)
    perm = rng.permutation(n + pad)
    # Keep the relative order of the real items (the tie rule looks at indices).
    real = np.sort(perm[:n])
    cols = np.empty(n + pad, dtype=int)
    cols[real] = np.arange(n)
    cols[np.setdiff1d(np.arange(n + pad), real)] = np.arange(n, n + pad)
    sp, yp, mp = sp[:, cols], yp[:, cols], mp[:, cols]
    plain = result_or_none(state_of(KERNELS[name](ks), [(s, y, np.ones_like(s, bool), w)], to))
    padded = result_or_none(state_of(KERNELS[name](ks), [(sp, yp, mp, w)], to))
    assert padded == (None if plain is None else pytest.approx(plain, abs=1e-12))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNELS)
@SETTINGS
@given(data=datasets(ties=False), perm_seed=st.integers(0, 1000))
def test_permuting_items_without_ties_changes_nothing(backend, name, data, perm_seed):
    s, y, m, w, ks = data
    to = BACKENDS[backend]
    perm = np.random.default_rng(perm_seed).permutation(s.shape[1])
    a = result_or_none(state_of(KERNELS[name](ks), [(s, y, m, w)], to))
    b = result_or_none(state_of(KERNELS[name](ks), [(s[:, perm], y[:, perm], m[:, perm], w)], to))
    assert b == (None if a is None else pytest.approx(a, abs=1e-12))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNELS)
@SETTINGS
@given(data=datasets())
def test_integer_weight_equals_repeating_the_list(backend, name, data):
    s, y, m, w, ks = data
    to = BACKENDS[backend]
    reps = w.astype(int)
    weighted = result_or_none(state_of(KERNELS[name](ks), [(s, y, m, w)], to))
    rs, ry, rm = np.repeat(s, reps, 0), np.repeat(y, reps, 0), np.repeat(m, reps, 0)
    if len(rs) == 0:
        assert weighted is None
        return
    repeated = result_or_none(state_of(KERNELS[name](ks), [(rs, ry, rm, np.ones(len(rs)))], to))
    assert weighted == (None if repeated is None else pytest.approx(repeated, abs=1e-12))


@pytest.mark.parametrize("name", KERNELS)
@SETTINGS
@given(data=datasets())
def test_numpy_and_torch_agree(name, data):
    s, y, m, w, ks = data
    a = result_or_none(state_of(KERNELS[name](ks), [(s, y, m, w)], np.asarray))
    b = result_or_none(state_of(KERNELS[name](ks), [(s, y, m, w)], torch.from_numpy))
    assert b == (None if a is None else pytest.approx(a, abs=1e-12))
