"""The messages about an Ignite metric's ``update`` input name exactly the keys the metric
accepts: every key a message lists is taken by that metric's ``update``, and every key it
takes is listed. The list and rank metrics take query ids (``indexes``) beside ``mask`` and
``sample_weight``; a comparison of rankers and a metric's named sides do not."""

from __future__ import annotations

import re

import pytest
import torch
from ignite.engine import Engine

from rankstream.ignite import (
    MAP,
    NDCG,
    HitsAtK,
    ListMetrics,
    MeanReciprocalRank,
    PairedComparison,
    RankBasedMetrics,
)

S = torch.tensor([[0.3, 0.2, 0.9], [0.1, 0.8, 0.4]], dtype=torch.float64)
LABELS = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True, False], [True, True, True]])
WEIGHT = torch.tensor([1.0, 2.0], dtype=torch.float64)
FLAT = (torch.tensor([0.3, 0.2, 0.9, 0.4]), torch.tensor([1.0, 0.0, 0.0, 1.0]))
IDS = torch.tensor([0, 0, 1, 1])

EVERY = {"mask", "sample_weight", "indexes"}
#: the metrics taking query ids, and the keys each takes: flat items with query ids alone where
#: the queries may span updates (``query_mode`` "sorted" or "any")
WITH_QUERY_IDS = {
    "MAP": (lambda: MAP(top_k=2), EVERY),
    "NDCG_sorted": (lambda: NDCG(top_k=2, query_mode="sorted"), {"indexes"}),
    "MeanReciprocalRank_any": (lambda: MeanReciprocalRank(top_k=2, query_mode="any"), {"indexes"}),
    "ListMetrics": (lambda: ListMetrics(["map@2", "ndcg@2"]), EVERY),
    "HitsAtK": (lambda: HitsAtK(k=1), EVERY),
    "RankBasedMetrics": (lambda: RankBasedMetrics(ks=[1]), EVERY),
}


def _fresh(make):
    metric = make()
    metric.reset()
    return metric


def _listed(message: str) -> set[str]:
    """The keys a message lists after ``allowed:`` / ``any of the keys`` or in a tuple form."""
    found = re.search(r"(?:allowed: |any of the keys )([\w, ]+?)(?:, got|$)", message)
    if found:
        return {k.strip() for k in found.group(1).split(",")}
    return set(re.findall(r"'(\w+)': \.\.\.", message))


def _update_with(metric, key: str) -> None:
    """One update whose input carries the option ``key`` (the form the metric reads it in)."""
    if key == "indexes":
        metric.update((*FLAT, {"indexes": IDS}))
    else:
        metric.update((S, LABELS, {key: {"mask": MASK, "sample_weight": WEIGHT}[key]}))


def _bad_inputs():
    """Inputs whose message lists the options: an unknown key in the third element and in a
    mapping, a third element that is not a dict, a sequence of four."""
    yield (S, LABELS, {"index": IDS}), ValueError
    yield {"y_pred": S, "y": LABELS, "index": IDS}, ValueError
    yield (S, LABELS, [IDS]), TypeError
    yield (S, LABELS, {}, IDS), ValueError


@pytest.mark.parametrize("name", sorted(WITH_QUERY_IDS))
def test_every_message_lists_exactly_the_keys_the_metric_takes(name):
    make, takes = WITH_QUERY_IDS[name]
    for output, exc in _bad_inputs():
        metric = _fresh(make)
        with pytest.raises(exc) as info:
            metric.update(output)
        listed = _listed(str(info.value)) - {"y_pred", "y"}
        assert listed == takes, str(info.value)
    for key in takes:  # each one listed is taken
        _update_with(_fresh(make), key)
    for key in EVERY - takes:  # and none other
        with pytest.raises(ValueError, match=rf"unknown keys \['{key}'\]; allowed: indexes$"):
            _update_with(_fresh(make), key)
    allowed = ", ".join(k for k in ("mask", "sample_weight", "indexes") if k in takes)
    with pytest.raises(ValueError, match=rf"unknown keys \['index'\]; allowed: {allowed}$"):
        _fresh(make).update((S, LABELS, {"index": IDS}))


@pytest.mark.parametrize("name", ["MAP", "RankBasedMetrics"])
def test_the_message_through_an_engine(name):
    engine = Engine(lambda e, b: b)
    WITH_QUERY_IDS[name][0]().attach(engine, "m")
    with pytest.raises(ValueError, match=r"unknown keys \['index'\]; allowed: mask, sample_weight, indexes"):
        engine.run([(*FLAT, {"index": IDS})])


def test_a_comparison_and_named_sides_list_no_query_ids():
    """``PairedComparison`` and a metric's named sides read no query ids: their messages list
    ``mask`` and ``sample_weight`` alone, and ``indexes`` is refused as unknown."""
    paired = _fresh(lambda: PairedComparison(["map@2"], ["a", "b"]))
    sided = _fresh(lambda: RankBasedMetrics(ks=[1], sides=("head", "tail")))
    scores = {"a": S, "b": S.flip(1)}
    wraps = (lambda extra: (scores, LABELS, extra), lambda extra: {"head": (S, LABELS, extra)})
    for metric, wrap in zip((paired, sided), wraps, strict=True):
        with pytest.raises(ValueError) as info:
            metric.update(wrap({"index": IDS}))
        assert _listed(str(info.value)) == {"mask", "sample_weight"}, str(info.value)
        with pytest.raises(ValueError, match=r"unknown keys \['indexes'\]; allowed: mask, sample_weight$"):
            metric.update(wrap({"indexes": IDS}))
        metric.update(wrap({"mask": MASK, "sample_weight": WEIGHT}))
