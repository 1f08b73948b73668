"""A NaN score says where it is in Keras too (eagerly: where ``update_state`` reads values
back), through ``update_state`` and ``model.evaluate``: how many NaN scores among the items of
the lists (the candidates), the first one's row and item, the batch's shape. Masked items and
padding (labels < 0) holding NaN are not items of the lists, so they are neither counted nor
the first."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest

from rankstream.keras import MAP, NDCG, HitsAtK, RankBasedMetrics

B, N = 6, 5


def batch():
    rng = np.random.default_rng(0)
    scores = rng.random((B, N)).astype("float32")
    labels = rng.integers(0, 3, (B, N)).astype("float32")
    mask = np.ones((B, N), bool)
    for r, c in [(3, 1), (4, 4), (3, 3)]:
        scores[r, c] = np.nan
        labels[r, c] = max(labels[r, c], 1.0)
    scores[1, 2], mask[1, 2] = np.nan, False  # masked: not an item of its list
    scores[2, 0], labels[2, 0] = np.nan, -1.0  # padding under keras-rs's conventions
    return scores, labels, mask


def pattern(among: str, item: str = "item") -> str:
    return re.escape(f"y_pred contains 3 NaN scores {among} (first at row 3, {item} 1 of a ({B}, {N}) batch)")


@pytest.mark.parametrize("make", [lambda: NDCG(k=3, shuffle_ties=False), lambda: MAP(k=3)])
def test_list_metrics_say_where(make):
    s, y, m = batch()
    with pytest.raises(ValueError, match=pattern("among the items in the lists")):
        make().update_state({"labels": y, "mask": m}, s)


@pytest.mark.parametrize("make", [lambda: HitsAtK(k=1), lambda: RankBasedMetrics(ks=[1])])
def test_rank_metrics_say_where(make):
    s, _, m = batch()
    s[2, 0] = 0.5  # no padding for the rank metrics: index targets
    with pytest.raises(ValueError, match=pattern("among the candidates", "candidate")):
        make().update_state({"labels": np.eye(N, dtype="float32")[np.zeros(B, int)], "mask": m}, s)


def test_evaluate_says_where():
    s, y, _ = batch()
    s[1, 2] = 0.5  # no mask here: the masked NaN would be an item
    inp = keras.Input((N,))
    model = keras.Model(inp, keras.layers.Identity()(inp))
    model.compile(loss=lambda t, p: keras.ops.sum(p, axis=-1) * 0.0, metrics=[MAP(k=3)], run_eagerly=True)
    with pytest.raises(ValueError, match=pattern("among the items in the lists")):
        model.evaluate(s, y, batch_size=B, verbose=0)
