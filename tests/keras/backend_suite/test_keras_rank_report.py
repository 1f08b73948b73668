"""PyKEEN's report in one Keras metric: every rank type, sides stacked in one model output
(``(batch, sides, num_candidates)``) or given as mappings, PyKEEN's flat keys with ``prefix``.

Expected numbers: ranks counted naively task by task and PyKEEN's metric classes
(:mod:`pykeen_reference`). Scores are an ``Embedding`` lookup of item ids with duplicated ids,
so the ties are exact whatever the batch size or compiler."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rankstream.core.ranks.families import RANK_TYPES
from rankstream.keras import RankBasedMetrics

from pykeen_reference import naive_tasks, pykeen_report

BACKEND = keras.backend.backend()
SIDES = ("head", "tail")
ITEMS, N, KS = 12, 8, (1, 3)
TOL = {"rel": 2e-5, "abs": 1e-6}  # float32 results (and float32 state on JAX without x64)


def expected(pred, y, w=None, prefix=""):
    """PyKEEN's flat keys of ``pred`` (batch, 2, N) with true indices ``y`` (batch, 2)."""
    tasks = {side: naive_tasks(pred[:, i], y[:, i], weights=w) for i, side in enumerate(SIDES)}
    return pykeen_report(tasks, KS, prefix)


def assert_close(got, want):
    assert set(want) <= set(got), sorted(set(want) - set(got))[:5]
    bad = {k: (got[k], v) for k, v in want.items() if got[k] != pytest.approx(v, **TOL)}
    assert not bad, list(bad.items())[:5]


def data(seed, b):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, ITEMS, (b, 2, N)).astype("int32")
    x[..., -2:] = x[..., :2]  # duplicated items: exactly tied scores
    return x, rng.integers(0, N, (b, 2)).astype("int32"), rng.choice([0.5, 1.0, 2.0], b).astype("float32")


def side_model():
    """One output with the sides stacked: ``(batch, 2, N)`` scores looked up by item id."""
    inp = keras.Input((2, N), dtype="int32")
    out = keras.layers.Reshape((2, N))(keras.layers.Embedding(ITEMS, 1, name="item_score")(inp))
    return keras.Model(inp, out)


def test_compiled_model_reports_pykeens_keys_for_stacked_sides():
    xv, yv, wv = data(1, 30)
    model = side_model()
    # a table of distinct scores (ties come from duplicated ids); the compiled train step with
    # RankBasedMetrics is test_keras_rank.py's, this test's is the evaluate step's report
    model.get_layer("item_score").set_weights([np.random.default_rng(5).permutation(ITEMS)[:, None] / 7.0])
    model.compile(
        "sgd",
        loss=lambda yt, yp: keras.ops.mean(yp * yp),
        metrics=[RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES, prefix="kg/")],
        weighted_metrics=[RankBasedMetrics(ks=KS, rank_type=("realistic",), sides=SIDES, prefix="w/")],
        jit_compile=BACKEND != "torch",
    )
    logs = model.evaluate(xv, yv, sample_weight=wv, batch_size=10, verbose=0, return_dict=True)
    table = keras.ops.convert_to_numpy(model.get_layer("item_score").embeddings)[:, 0].astype(np.float64)
    pred = table[xv]
    assert any(o < p for o, p, _, _ in naive_tasks(pred[:, 0], yv[:, 0]))  # tied true candidates
    assert_close(logs, expected(pred, yv, prefix="kg/"))
    weighted = {k: v for k, v in expected(pred, yv, wv, prefix="w/").items() if ".realistic." in k}
    assert_close(logs, weighted)
    assert not any(k.startswith("w/") and ".optimistic." in k for k in logs)


def test_mapping_of_sides_equals_stacked_sides():
    _, yv, wv = data(2, 16)
    pred = np.random.default_rng(3).integers(0, 4, (16, 2, N)).astype("float32")
    stacked = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    mapped = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES)
    stacked.update_state(yv, pred, wv)
    mapped.update_state(
        {"head": yv[:, 0], "tail": yv[:, 1]},
        {"head": pred[:, 0], "tail": pred[:, 1]},
        {"head": wv, "tail": wv},
    )
    want = expected(pred.astype(np.float64), yv, wv)
    for metric in (stacked, mapped):
        assert_close({k: float(v) for k, v in metric.result().items()}, want)
    with pytest.raises(ValueError, match="y_true must be a mapping with the same keys"):
        mapped.update_state(yv, {"head": pred[:, 0], "tail": pred[:, 1]})
    with pytest.raises(ValueError, match="stacked sides"):
        stacked.update_state(yv[:, :1], pred)


def test_config_round_trip_keeps_sides_and_rank_types():
    metric = RankBasedMetrics(ks=KS, rank_type=RANK_TYPES, sides=SIDES, prefix="p/", filtered_scores=True)
    again = RankBasedMetrics.from_config(metric.get_config())
    assert list(again.sides) == list(SIDES) and list(again.rank_type) == list(RANK_TYPES)
    assert again.prefix == "p/" and again.filtered_scores is True
    assert again.kernel.fields == metric.kernel.fields
