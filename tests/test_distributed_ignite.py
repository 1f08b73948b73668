"""rankstream Ignite metrics on 2 and 3 real gloo processes (``idist.Parallel``), and the
helpers of ``rankstream.distributed``.

Expected values never come from the distributed code under test: they are the same
metric run in this (single, non-distributed) process over the union of the shards, and
the naive per-list references of ``tests/reference.py``. Each world size is spawned once
(``_dist_helpers.run_world`` is cached) and every scenario reads its results.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _dist_helpers import (
    CASES,
    PADDING_CASES,
    close,
    concat_batches,
    make_batch,
    naive,
    padding_dataset,
    run_world,
    single_process,
)
from _examples import printed_numbers, run_example
from torch.utils.data import DistributedSampler, SequentialSampler, TensorDataset

from rankstream import MAPKernel, State
from rankstream.distributed import (
    all_reduce_state,
    batch_padding_weights,
    padding_weights,
    real_sample_count,
)

WORLDS = [2, 3]
NAMES = list(CASES)


def _all_shards(cfg: dict) -> list:
    return [b for shard in cfg["shards"] for b in shard]


# ---------------------------------------------------------------------------------------
# Engine over uneven shards
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", NAMES)
def test_uneven_shards_match_single_process(world: int, name: str) -> None:
    out = run_world(world)
    cfg = out["config"]
    data = _all_shards(cfg)
    expected = single_process(name, data)
    # the independent sources agree with each other first
    assert close(single_process(name, data, concat=True), expected)
    ref = naive(name, data)
    if ref is not None:
        value = expected["value"] if isinstance(expected, dict) else expected  # with confidence
        assert close(ref, value), (ref, expected)
    for r, res in enumerate(out["ranks"]):
        assert close(res["engine"][name], expected), (r, res["engine"][name], expected)


# The statistics fields of each metric with a confidence level: case -> (its case without one
# or None, the keys of its values, the keys of its statistics).
CONFIDENCE_CASES = {
    "ndcg_ci": ("ndcg", ["value"], ["stderr", "ci_low", "ci_high", "count"]),
    "list_metrics_ci": (
        None,
        ["ndcg@3", "map@5", "mrr@10"],
        [f"{m}_{q}" for m in ("ndcg@3", "map@5", "mrr@10") for q in ("stderr", "ci_low", "ci_high", "count")],
    ),
    "hits_ci": ("hits", ["value"], ["stderr", "ci_low", "ci_high", "count"]),
    "paired": (
        None,
        ["ndcg@3/model", "map@5/other"],
        [
            f"{m}/model-vs-other/{q}"
            for m in ("ndcg@3", "map@5")
            for q in ("diff", "stderr", "ci_low", "ci_high", "t")
        ]
        + ["ndcg@3/count", "map@5/count"],
    ),
}


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", list(CONFIDENCE_CASES))
def test_statistics_fields_match_single_process(world: int, name: str) -> None:
    """value, stderr, interval and count of a metric with ``confidence=0.95`` (their extra
    sums all-reduced over uneven shards) equal one process's, key by key; the value equals
    the metric's without a confidence level, and the statistics are real numbers (not all
    zero), so the comparison has something to compare."""
    plain, values, stats = CONFIDENCE_CASES[name]
    out = run_world(world)
    data = _all_shards(out["config"])
    expected = single_process(name, data)
    assert isinstance(expected, dict)
    if plain is not None:
        assert close(expected["value"], single_process(plain, data))
    for key in values + stats:
        assert np.all(np.isfinite(expected[key])), (key, expected[key])
    assert any(np.any(np.asarray(expected[k]) > 0) for k in stats if "stderr" in k), expected
    for r, res in enumerate(out["ranks"]):
        got = res["engine"][name]
        for key in values + stats:
            assert close(got[key], expected[key]), (r, key, got[key], expected[key])
        assert close(res["all_reduce_state"][name]["value"], expected), r


def test_world3_has_an_empty_and_an_unusable_shard() -> None:
    """The world of 3 really exercises the edge cases: rank 1 has no batch, rank 2 only
    lists without a usable item (its own sums count nothing for the skip-policy metrics)."""
    cfg = run_world(3)["config"]
    assert cfg["shards"][1] == []
    m = CASES["map"].metric()
    m.reset()
    for b in cfg["shards"][2]:
        m.update(b)
    assert float(m.state_sums()["weight_sum"]) == 0.0


# ---------------------------------------------------------------------------------------
# Lifecycle: compute twice, update after compute (ignite PR #2803)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", NAMES)
def test_compute_twice_and_update_after_compute(world: int, name: str) -> None:
    out = run_world(world)
    cfg = out["config"]
    data = _all_shards(cfg)
    expected = single_process(name, data)
    extras = [b for b in cfg["extra"] if b is not None]
    expected_after = single_process(name, data + extras)
    assert not close(expected, expected_after)  # the extra batches change the result
    for res in out["ranks"]:
        life = res["lifecycle"][name]
        assert close(life["first"], expected)
        assert life["second"] == life["first"]
        assert life["local_untouched"], "compute() must not leave the all-reduced sums in the metric"
        assert close(life["third"], expected_after)


@pytest.mark.parametrize("world", WORLDS)
def test_no_usable_list_anywhere_raises_on_every_rank(world: int) -> None:
    for res in run_world(world)["ranks"]:
        for name in NAMES:
            assert res["nothing"][name]["error"] == "NotComputableError", res["nothing"][name]


# ---------------------------------------------------------------------------------------
# DistributedSampler padding
# ---------------------------------------------------------------------------------------
def _padded_stream(n: int, world: int) -> list[int]:
    """The dataset indices every rank's DistributedSampler yields, concatenated (with the
    padded duplicates), as the worker's sampler (shuffle=True, seed=7) lays them out."""
    ds = TensorDataset(torch.zeros(n))
    idx: list[int] = []
    for r in range(world):
        idx += list(DistributedSampler(ds, num_replicas=world, rank=r, shuffle=True, seed=7))
    return idx


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", PADDING_CASES)
def test_distributed_sampler_padding_skews_and_weights_fix_it(world: int, name: str) -> None:
    out = run_world(world)
    n = out["config"]["padding_n"]
    scores, labels = padding_dataset(n)
    ones = {
        "mask": torch.ones_like(labels, dtype=torch.bool),
        "sample_weight": torch.ones(n, dtype=torch.float64),
    }
    exact = single_process(name, [(scores, labels, ones)])
    ref = naive(name, [(scores, labels, ones)])
    assert close(ref, exact)

    stream = _padded_stream(n, world)
    assert len(stream) > n  # there is padding
    dup = torch.tensor(stream)
    k = len(stream)
    dup_extra = {
        "mask": torch.ones(k, labels.shape[1], dtype=torch.bool),
        "sample_weight": torch.ones(k).double(),
    }
    skewed = single_process(name, [(scores[dup], labels[dup], dup_extra)])
    assert not close(skewed, exact), "the data must make the padding visible"

    real = [res["padding"]["real"] for res in out["ranks"]]
    assert sum(real) == n
    for res in out["ranks"]:
        assert close(res["padding"]["plain"][name], skewed), "without weights: duplicates counted twice"
        assert close(res["padding"]["weighted"][name], exact), "with padding weights: the exact number"


@pytest.mark.parametrize(
    ("n", "world", "drop_last", "shuffle"),
    [
        (7, 2, False, True),
        (7, 3, False, False),
        (10, 4, False, True),
        (2, 5, False, False),
        (7, 3, True, True),
        (9, 3, False, True),
        (1, 1, False, False),
    ],
)
def test_padding_weights_mark_exactly_the_duplicates(
    n: int, world: int, drop_last: bool, shuffle: bool
) -> None:
    """Independent check of the layout: the samples of weight 1 over all ranks are each
    dataset index once (all of them unless drop_last), whatever the shuffle."""
    ds = TensorDataset(torch.zeros(n))
    kept: list[int] = []
    for r in range(world):
        s = DistributedSampler(ds, num_replicas=world, rank=r, shuffle=shuffle, seed=3, drop_last=drop_last)
        idx = list(s)
        w = padding_weights(s, range(len(idx)))
        assert w.dtype == torch.float64 and w.shape == (len(idx),)
        assert real_sample_count(s) == int(w.sum())
        kept += [i for i, wi in zip(idx, w.tolist(), strict=True) if wi == 1.0]
        # batches cover the stream in order, the last one shorter
        for bs in (1, 2, 3):
            nb = -(-len(idx) // bs)
            joined = torch.cat([batch_padding_weights(s, b, bs) for b in range(nb)])
            assert torch.equal(joined, w)
    assert len(kept) == len(set(kept))
    if drop_last:
        assert len(kept) == (n // world) * world
    else:
        assert sorted(kept) == list(range(n))


def test_padding_weights_other_inputs() -> None:
    ds = TensorDataset(torch.zeros(7))
    s = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)  # positions 0..3, the last padded
    assert padding_weights(s, 3).shape == ()
    assert float(padding_weights(s, 3)) == 0.0
    assert padding_weights(s, slice(None)).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert padding_weights(s, torch.tensor([3, 0]), dtype=torch.float32).tolist() == [0.0, 1.0]
    assert padding_weights(s, []).shape == (0,)
    # a plain sampler (what idist.auto_dataloader uses on one process) pads nothing
    assert padding_weights(SequentialSampler(ds), range(7)).tolist() == [1.0] * 7
    # ignite's DistributedProxySampler has the same layout
    from ignite.distributed.auto import DistributedProxySampler

    proxy = DistributedProxySampler(SequentialSampler(ds), num_replicas=3, rank=2)
    assert list(proxy) == [2, 5, 1] and padding_weights(proxy, slice(None)).tolist() == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="positions"):
        padding_weights(s, 4)
    with pytest.raises(ValueError, match="batch 2 of size 2"):
        batch_padding_weights(s, 2, 2)
    with pytest.raises(ValueError, match="batch_size"):
        batch_padding_weights(s, 0, 0)
    with pytest.raises(ValueError, match="batch_index"):
        batch_padding_weights(s, 1.0, 2)
    assert batch_padding_weights(s, np.int64(1), torch.tensor(2)).tolist() == [1.0, 0.0]
    with pytest.raises(TypeError, match="length"):
        real_sample_count(iter([1, 2]))


# ---------------------------------------------------------------------------------------
# torch.distributed recipe on core states
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", NAMES)
def test_all_reduce_state_gloo(world: int, name: str) -> None:
    out = run_world(world)
    cfg = out["config"]
    expected = single_process(name, _all_shards(cfg))
    for res in out["ranks"]:
        got = res["all_reduce_state"][name]
        assert close(got["value"], expected), got
        assert got["again"] == got["value"]
        assert got["local_untouched"]
    if world >= 3:
        sub = single_process(name, cfg["shards"][0] + cfg["shards"][1])
        for res in out["ranks"][:2]:
            assert close(res["subgroup"][name], sub)
        assert out["ranks"][2]["subgroup"] == {}


def test_all_reduce_state_outside_a_process_group_is_a_copy() -> None:
    y_pred, y, extra = concat_batches([make_batch(99, 5)])
    st = State(MAPKernel([1, 5]))
    st.update(y_pred, y, extra["mask"], extra["sample_weight"])
    total = all_reduce_state(st)
    assert total is not st and total.compute() == st.compute()
    total.sums["count"] += 1
    assert float(st.sums["count"]) != float(total.sums["count"])
    with pytest.raises(TypeError, match="State"):
        all_reduce_state({"count": 1})


# ---------------------------------------------------------------------------------------
# The example
# ---------------------------------------------------------------------------------------
def test_example_distributed_ignite_prints_single_process_numbers() -> None:
    proc = run_example("distributed_ignite.py")

    def numbers(prefix: str) -> list[float]:
        return printed_numbers(proc.stdout, prefix)

    for metric in ("MAP@[1, 5, 10]", "nDCG@[1, 5, 10]"):
        single = numbers(f"single process   {metric}")
        assert np.allclose(numbers(f"2 gloo workers   {metric}"), single, rtol=0, atol=2e-12)
        assert not np.allclose(numbers(f"  padding counted {metric}"), single, rtol=0, atol=1e-6)
    assert "OK: distributed == single process" in proc.stdout
