"""Swapped arguments (labels passed as scores, scores as labels) give plausible numbers; where
the values are on the host already, rankstream warns once per metric instance with
``rankstream.SwappedInputsWarning`` (a category users can filter), and never on real data whose
scores merely are binary beside binary labels. Where nothing is read back (an accelerator,
``read_back(False)``) nothing is checked, and nothing is read for it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from ignite.engine import Engine

import rankstream
from rankstream import map_at_k, ndcg_at_k
from rankstream.core.backends import read_back
from rankstream.ignite import MAP, NDCG, ListMetrics

import reference as R

pytestmark = pytest.mark.usefixtures("list_path")


def _data(seed: int, b: int = 12, n: int = 10):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(b, n))  # a model's scores: real, some negative
    labels = rng.integers(0, 4, size=(b, n)).astype(np.float64)
    labels[:, 0] = 3.0  # every list has a relevant item
    return torch.from_numpy(scores), torch.from_numpy(labels)


def _run(metric, batches):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = Engine(lambda engine, batch: batch)
        metric.attach(ev, "m")
        value = ev.run(batches).metrics["m"]
    return value, [w for w in caught if issubclass(w.category, rankstream.SwappedInputsWarning)]


def test_swapped_engine_output_warns_once_per_instance():
    s, y = _data(0)
    batches = [(y[:6], s[:6]), (y[6:], s[6:])] * 2  # (labels, scores): swapped
    value, caught = _run(MAP(top_k=5, relevance_threshold=None), batches)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "swapped" in message and "SwappedInputsWarning" in message
    # what the metric computed is the metric of the swapped arguments (not an error)
    want = R.mean_over_lists(R.average_precision, y.tolist() * 2, s.tolist() * 2, 5)
    assert value[0] == pytest.approx(want, rel=1e-12)
    # a second instance warns again (once)
    _, again = _run(NDCG(top_k=5, relevance_threshold=None), batches)
    assert len(again) == 1


def test_right_order_does_not_warn_and_gives_the_reference():
    s, y = _data(1)
    value, caught = _run(NDCG(top_k=5), [(s[:6], y[:6]), (s[6:], y[6:])])
    assert caught == []
    assert value[0] == pytest.approx(R.mean_over_lists(R.ndcg, s.tolist(), y.tolist(), 5), rel=1e-12)


@pytest.mark.parametrize(
    "scores, labels",
    [
        ("binary", "binary"),  # a classifier's 0/1 predictions beside 0/1 labels
        ("binary", "graded"),
        ("ints", "negative_grades"),  # integer scores beside trec_eval's judgments (-2..3)
        ("real", "graded"),
        ("real", "binary"),
    ],
)
def test_real_data_never_warns(scores, labels):
    rng = np.random.default_rng(3)
    b, n = 16, 12
    s = {
        "binary": rng.integers(0, 2, (b, n)),
        "ints": rng.integers(0, 5, (b, n)),
        "real": rng.random((b, n)),
    }[scores].astype(np.float64)
    y = {
        "binary": rng.integers(0, 2, (b, n)),
        "graded": rng.integers(0, 5, (b, n)),
        "negative_grades": rng.integers(-2, 4, (b, n)),
    }[labels].astype(np.float64)
    y[:, 0] = 1.0
    _, caught = _run(ListMetrics(["map@5", "ndcg@3"]), [(torch.from_numpy(s), torch.from_numpy(y))])
    assert caught == []


def test_silenced_with_a_filter():
    s, y = _data(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=rankstream.SwappedInputsWarning)
        ev = Engine(lambda engine, batch: batch)
        MAP(top_k=3, relevance_threshold=None).attach(ev, "m")
        ev.run([(y, s)])
    assert caught == []


def test_functional_forms_warn():
    s, y = _data(3)
    with pytest.warns(rankstream.SwappedInputsWarning, match="swapped"):
        map_at_k(y.numpy(), s.numpy(), k=5)
    with pytest.warns(rankstream.SwappedInputsWarning):
        ndcg_at_k(y, s, k=5, relevance_threshold=None)


def test_nothing_checked_where_values_are_not_read_back():
    s, y = _data(4)
    with read_back(False):
        value, caught = _run(MAP(top_k=5, relevance_threshold=None), [(y, s)])
    assert caught == []
    assert value[0] == pytest.approx(R.mean_over_lists(R.average_precision, y.tolist(), s.tolist(), 5))


def test_masked_items_are_not_looked_at():
    """Binary scores beside binary labels on the items of the lists, swapped-looking labels
    (non-integer) only on masked items: no warning; without the mask, the warning."""
    rng = np.random.default_rng(5)
    y_pred = torch.from_numpy(rng.integers(0, 2, (8, 9)).astype(np.float64))
    labels = torch.from_numpy(rng.integers(0, 2, (8, 9)).astype(np.float64))
    labels[:, 0] = 1.0
    labels[:, -2:] = 0.37
    mask = torch.ones_like(y_pred, dtype=torch.bool)
    mask[:, -2:] = False
    _, caught = _run(MAP(top_k=3), [(y_pred, labels, {"mask": mask})])
    assert caught == []
    _, caught = _run(MAP(top_k=3), [(y_pred, labels)])
    assert len(caught) == 1
