"""Two metrics attached to one Ignite ``Engine`` that would write one key of
``engine.state.metrics`` (a name, or a key of a ``ListMetrics`` / ``RankBasedMetrics`` mapping)
are an error naming both, in either attach order, at ``attach`` or (for a metric attached
later that rankstream does not know) when the epoch completes: never a silent overwrite.
Values from the naive references (tests/reference.py)."""

from __future__ import annotations

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.metrics.rec_sys import NDCG as IgniteNDCG

from rankstream.ignite import MAP, NDCG, ListMetrics, RankBasedMetrics

import reference as R


def _batches():
    g = torch.Generator().manual_seed(0)
    s = torch.rand(12, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (12, 10), generator=g).double()
    y[:, 0] = 2.0
    return [(s[:7], y[:7]), (s[7:], y[7:])], s, y


@pytest.mark.parametrize("first", ["map", "lists"])
def test_map_and_list_metrics_on_one_key(first):
    ev = Engine(lambda engine, batch: batch)
    attach = {
        "map": lambda: MAP(top_k=5).attach(ev, "map@5"),
        "lists": lambda: ListMetrics(["map@5", "ndcg@3"]).attach(ev, "lists"),
    }
    attach[first]()
    with pytest.raises(ValueError, match=r"(?s)(MAP.*ListMetrics|ListMetrics.*MAP).*'map@5'"):
        attach["lists" if first == "map" else "map"]()


def test_two_list_metrics_sharing_a_key_and_a_prefix_to_tell_them_apart():
    ev = Engine(lambda engine, batch: batch)
    ListMetrics(["map@5", "ndcg@3"]).attach(ev, "a")
    with pytest.raises(ValueError, match=r"ListMetrics attached as 'b' and ListMetrics attached as 'a'"):
        ListMetrics(["map@5"]).attach(ev, "b")
    ListMetrics(["map@5"], prefix="b/").attach(ev, "b")
    batches, s, y = _batches()
    metrics = ev.run(batches).metrics
    want = R.mean_over_lists(R.average_precision, s.tolist(), y.tolist(), 5)
    assert metrics["map@5"] == pytest.approx(want, rel=1e-12)
    assert metrics["b/map@5"] == pytest.approx(want, rel=1e-12)


def test_distinct_names_keep_both_values():
    """The user's own MAP (another denominator) beside a collection's map@5: both kept."""
    ev = Engine(lambda engine, batch: batch)
    MAP(top_k=5, denominator="all").attach(ev, "my_map@5")
    ListMetrics(["map@5", "ndcg@3"]).attach(ev, "lists")
    batches, s, y = _batches()
    metrics = ev.run(batches).metrics
    mine = R.mean_over_lists(R.average_precision, s.tolist(), y.tolist(), 5, denominator="all")
    theirs = R.mean_over_lists(R.average_precision, s.tolist(), y.tolist(), 5)
    assert mine != pytest.approx(theirs)  # the case matters: two different numbers
    assert metrics["my_map@5"] == [pytest.approx(mine, rel=1e-12)]
    assert metrics["map@5"] == pytest.approx(theirs, rel=1e-12)


def test_plain_metrics_of_one_name():
    ev = Engine(lambda engine, batch: batch)
    MAP(top_k=5).attach(ev, "m")
    with pytest.raises(ValueError, match=r"NDCG attached as 'm' and MAP attached as 'm'"):
        NDCG(top_k=5).attach(ev, "m")


def test_a_foreign_metric_attached_later_is_caught_when_the_epoch_completes():
    """ignite's own NDCG attached after the collection, under one of its keys: rankstream
    cannot see it at its attach, so the epoch's completion raises, naming both."""
    ev = Engine(lambda engine, batch: batch)
    ListMetrics(["ndcg@3", "map@5"]).attach(ev, "lists")
    IgniteNDCG(top_k=[3]).attach(ev, "ndcg@3")
    batches, _, _ = _batches()
    with pytest.raises(ValueError, match=r"ListMetrics attached as 'lists' and NDCG attached as 'ndcg@3'"):
        ev.run(batches)


def test_a_foreign_metric_attached_first_is_caught_at_attach():
    ev = Engine(lambda engine, batch: batch)
    IgniteNDCG(top_k=[3]).attach(ev, "ndcg@3")
    with pytest.raises(ValueError, match=r"ListMetrics attached as 'lists' and NDCG attached as 'ndcg@3'"):
        ListMetrics(["ndcg@3"]).attach(ev, "lists")


def test_filtered_events_and_rank_metrics():
    """A metric attached on a filtered event is seen too; RankBasedMetrics' keys as well."""
    ev = Engine(lambda engine, batch: batch)
    RankBasedMetrics(ks=[1]).attach(ev, "rank")
    with pytest.raises(ValueError, match=r"RankBasedMetrics attached as 'rank2' and RankBasedMetrics"):
        RankBasedMetrics(ks=[1]).attach(ev, "rank2")
    RankBasedMetrics(ks=[1], prefix="other/").attach(ev, "rank2")
    ev2 = Engine(lambda engine, batch: batch)
    metric = MAP(top_k=5)
    ev2.add_event_handler(Events.EPOCH_COMPLETED(every=2), metric.completed, "m")
    with pytest.raises(ValueError, match=r"NDCG attached as 'm' and MAP attached as 'm'"):
        NDCG(top_k=5).attach(ev2, "m")


def test_a_name_that_is_one_of_its_own_keys():
    ev = Engine(lambda engine, batch: batch)
    with pytest.raises(ValueError, match=r"ListMetrics attached as 'map@5'.*own keys|also one of its keys"):
        ListMetrics(["map@5", "ndcg@3"]).attach(ev, "map@5")


def test_detached_metrics_no_longer_collide():
    ev = Engine(lambda engine, batch: batch)
    first = MAP(top_k=5)
    first.attach(ev, "map@5")
    first.detach(ev)
    ListMetrics(["map@5"]).attach(ev, "lists")
    batches, s, y = _batches()
    want = R.mean_over_lists(R.average_precision, s.tolist(), y.tolist(), 5)
    assert ev.run(batches).metrics["map@5"] == pytest.approx(want, rel=1e-12)
