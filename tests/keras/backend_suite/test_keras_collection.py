"""Keras ``ListMetrics``: one selection for several metrics gives each metric's own numbers (the
single metrics, themselves checked against keras-rs in test_keras_list_family.py), inside
``compile`` + ``evaluate`` (each name a key of the logs) and through ``update_state``."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rankstream.keras import (
    DCG,
    MAP,
    NDCG,
    HitRateAtK,
    ListMetrics,
    MeanReciprocalRank,
    PrecisionAtK,
    RecallAtK,
    RPrecision,
)

SINGLES = {
    "ndcg@5": lambda: NDCG(k=5, shuffle_ties=False),
    "map@3": lambda: MAP(k=3, shuffle_ties=False),
    "recall@4": lambda: RecallAtK(k=4, shuffle_ties=False),
    "mrr@5": lambda: MeanReciprocalRank(k=5, shuffle_ties=False),
    "precision@2": lambda: PrecisionAtK(k=2, shuffle_ties=False),
    "hit_rate@1": lambda: HitRateAtK(k=1, shuffle_ties=False),
    "dcg@3": lambda: DCG(k=3, shuffle_ties=False),
    "r_precision": lambda: RPrecision(shuffle_ties=False),
}


def _data(seed: int, b: int = 24, n: int = 8):
    rng = np.random.default_rng(seed)
    s = rng.permutation(b * n).reshape(b, n).astype("float32") / (b * n)  # no ties
    y = ((rng.random((b, n)) < 0.35) * rng.integers(1, 4, size=(b, n))).astype("float32")
    y[rng.random((b, n)) < 0.1] = -1.0  # padding
    w = rng.integers(1, 3, size=(b, n)).astype("float32")
    return s, y, w


@pytest.mark.parametrize("per_item", [False, True])
def test_update_state_gives_each_metrics_own_number(per_item):
    s, y, w = _data(1)
    weight = w if per_item else w[:, 0]
    both = ListMetrics(list(SINGLES), shuffle_ties=False)
    for part in (slice(0, 10), slice(10, 24)):
        both.update_state(y[part], s[part], weight[part])
    got = {k: float(v) for k, v in both.result().items()}
    for name, make in SINGLES.items():
        single = make()  # the same batches: keras-rs's list weights depend on the batch
        for part in (slice(0, 10), slice(10, 24)):
            single.update_state(y[part], s[part], weight[part])
        assert got[name] == pytest.approx(float(single.result()), rel=1e-5, abs=1e-6), name


def test_compiled_evaluate_logs_every_name():
    s, y, _ = _data(2)
    x = s[..., None]
    model = keras.Sequential([keras.Input((8, 1)), keras.layers.Flatten()])  # the scores are the inputs
    singles = [make() for make in SINGLES.values()]
    for metric, name in zip(singles, SINGLES, strict=True):
        assert metric.name == name  # default names show k
    model.compile(
        loss="mse", metrics=[ListMetrics(list(SINGLES), shuffle_ties=False, prefix="all/"), *singles]
    )
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    for name in SINGLES:
        assert logs[f"all/{name}"] == pytest.approx(logs[name], rel=1e-5, abs=1e-6), name


def test_config_round_trip_and_bad_names():
    m = ListMetrics(["ndcg@10", "mrr@3"], seed=3, empty="skip")
    again = ListMetrics.from_config(m.get_config())
    assert again.metrics == ["ndcg@10", "mrr@3"] and again.empty == "skip"
    with pytest.raises(ValueError, match="list metric"):
        ListMetrics(["auc@3"])
