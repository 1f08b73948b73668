"""Same numbers as keras-rs 0.4.0 (the peer) and as a naive loop reference, on this backend.

Random tie-free cases (keras-rs breaks ties at random, so only tie-free data has one answer)
with masks, -1 padding labels, lists without relevance, all-padding lists, and the three
weight kinds (scalar, per list, per item), streamed over two batches.
"""

from __future__ import annotations

import zlib

import keras
import keras_rs
import krs_reference as ref
import numpy as np
import pytest

from rankstream.keras import MAP, NDCG

PEERS = {"ndcg": (NDCG, keras_rs.metrics.NDCG), "map": (MAP, keras_rs.metrics.MeanAveragePrecision)}
B, N = 8, 9


def seed_of(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def y_true(labels, mask):
    return labels if mask is None else {"labels": labels, "mask": mask}


@pytest.mark.parametrize("metric", ["ndcg", "map"])
@pytest.mark.parametrize("weights", [None, "scalar", "list", "item"])
@pytest.mark.parametrize("k", [None, 1, 4, 50])
def test_matches_keras_rs_and_reference(metric, weights, k):
    rng = np.random.default_rng(seed_of(metric, weights, k))
    ours_cls, peer_cls = PEERS[metric]
    ours, peer = ours_cls(k=k), peer_cls(k=k)
    num = den = 0.0
    for masked in (True, False):
        s, y, m, w = ref.make_case(rng, B, N, weights=weights, masked=masked)
        ours.update_state(y_true(y, m), s, sample_weight=w)
        peer.update_state(y_true(y, m), s, sample_weight=w)
        a, b = ref.keras_rs_sums(metric, s, y, k, mask=m, sample_weight=w)
        num, den = num + a, den + b
    got = float(ours.result())
    assert got == pytest.approx(float(peer.result()), rel=1e-5, abs=1e-6)
    assert got == pytest.approx(num / den, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("metric", ["ndcg", "map"])
@pytest.mark.parametrize("weights", [None, "scalar", "item"])
@pytest.mark.parametrize("masked", [False, True])
def test_unbatched_lists_match_keras_rs(metric, weights, masked):
    rng = np.random.default_rng(seed_of("1d", metric, weights, masked))
    ours_cls, peer_cls = PEERS[metric]
    ours, peer = ours_cls(k=5), peer_cls(k=5)
    for _ in range(3):
        s, y, m, w = ref.make_case(rng, 1, 11, weights=weights, masked=masked)
        y[0] = rng.integers(-1, 4, 11)  # make_case blanks the first list
        w1 = None if w is None else (w if np.ndim(w) == 0 else w[0])
        m1 = None if m is None else m[0]
        ours.update_state(y_true(y[0], m1), s[0], sample_weight=w1)
        peer.update_state(y_true(y[0], m1), s[0], sample_weight=w1)
    assert float(ours.result()) == pytest.approx(float(peer.result()), rel=1e-5, abs=1e-6)


def abs_gain(y):
    return keras.ops.abs(keras.ops.subtract(y, 1.5))  # not monotone, and 1.5 at label 0


def inverse_rank(rank):
    return keras.ops.divide(1.0, rank)


@pytest.mark.parametrize(
    "gain_fn, ref_gain",
    [(abs_gain, lambda y: abs(y - 1.5)), ("linear_rank", lambda y: y), (keras.ops.square, lambda y: y * y)],
)
@pytest.mark.parametrize("weights", [None, "item"])
def test_custom_gain_and_discount_match_keras_rs(gain_fn, ref_gain, weights):
    rng = np.random.default_rng(seed_of("gain", weights, str(gain_fn)))
    peer_gain = (lambda y: y) if gain_fn == "linear_rank" else gain_fn
    ours = NDCG(k=4, gain_fn=gain_fn, rank_discount_fn=inverse_rank)
    peer = keras_rs.metrics.NDCG(k=4, gain_fn=peer_gain, rank_discount_fn=inverse_rank)
    s, y, m, w = ref.make_case(rng, B, N, weights=weights)
    ours.update_state(y_true(y, m), s, sample_weight=w)
    peer.update_state(y_true(y, m), s, sample_weight=w)
    expected = ref.keras_rs_mean(
        "ndcg", s, y, 4, mask=m, sample_weight=w, gain=ref_gain, discount=lambda j: 1.0 / j
    )
    got = float(ours.result())
    assert got == pytest.approx(float(peer.result()), rel=1e-5, abs=1e-6)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("metric", ["ndcg", "map"])
def test_k_past_the_end_is_the_whole_list(metric):
    rng = np.random.default_rng(seed_of("clip", metric))
    ours_cls, peer_cls = PEERS[metric]
    s, y, m, _ = ref.make_case(rng, B, N)
    results = []
    for k in (None, N, N + 1, 1000):
        metric_ = ours_cls(k=k)
        metric_.update_state({"labels": y, "mask": m}, s)
        results.append(float(metric_.result()))
    peer = peer_cls(k=1000)
    peer.update_state({"labels": y, "mask": m}, s)
    assert results == pytest.approx([float(peer.result())] * 4, rel=1e-5, abs=1e-6)
