"""``rankstream.ignite.PerListValues``: the per-list values behind a metric, through an Ignite
``Engine`` run. They equal the naive reference's value of every list (every list metric, two
cut-offs, masks and list weights, engine mappings and ignite's unrolled samples); their weighted
mean over the counted lists is the metric's own value; ``scipy.stats.ttest_rel`` on two rankers'
values is `PairedComparison`'s test; the handler leaves the metric's sums as they are, keeps
nothing with a callback, and starts over each epoch."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from scipy import stats
from test_list_stderr import IGNITE  # ignite class, the reference's function, its options

from rankstream.ignite import (
    MAP,
    NDCG,
    HitsAtK,
    ListMetrics,
    PairedComparison,
    PerList,
    PerListValues,
)

import reference as ref

# every test on both paths of a CPU torch batch (numpy views and torch itself)
pytestmark = pytest.mark.usefixtures("list_path")

KS = [2, 5]
#: ListMetrics names, with the reference's function, k and options (the classes' defaults)
NAMES = {
    "ndcg@5": (ref.ndcg, 5, {"threshold": 1.0}),
    "map@3": (ref.average_precision, 3, {}),
    "recall@4": (ref.recall, 4, {}),
    "precision@2": (ref.precision, 2, {}),
    "mrr@5": (ref.reciprocal_rank, 5, {}),
}


def data(seed: int, n_batches: int = 3, b: int = 12, n: int = 8):
    """Engine outputs (mappings) of tie-free scores, graded labels (some lists without a
    relevant item), masks (one list wholly masked) and list weights (some 0)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        labels = rng.integers(1, 4, size=(b, n)).astype(float) * (rng.random((b, n)) < 0.35)
        mask = rng.random((b, n)) < 0.8
        mask[0] = False
        weights = rng.uniform(0.2, 3.0, size=b)
        weights[rng.random(b) < 0.15] = 0.0
        out.append({
            "y_pred": torch.from_numpy(rng.normal(size=(b, n))), "y": torch.from_numpy(labels),
            "mask": torch.from_numpy(mask), "sample_weight": torch.from_numpy(weights),
        })  # fmt: skip
    return out


def reference_lists(per_list, kw, batches, k):
    """The reference's value of every list (None: not counted) and its weight, in order."""
    values, weights = [], []
    for batch in batches:
        for s, y, m, w in zip(
            *(batch[key].numpy() for key in ("y_pred", "y", "mask", "sample_weight")), strict=True
        ):
            values.append(per_list(s, y, k, valid=m, **kw))
            weights.append(float(w))
    return values, np.array(weights)


def assert_matches_reference(got: np.ndarray, counted: np.ndarray, want: list, what: str) -> None:
    """``got`` equals the reference on every counted list; a list is counted iff the reference
    gives it a value."""
    np.testing.assert_array_equal(counted, [v is not None for v in want], err_msg=f"{what}: counted")
    np.testing.assert_allclose(got[counted], [v for v in want if v is not None], rtol=1e-12, atol=1e-14)


def weighted_mean(part: PerList) -> np.ndarray:
    """The weighted mean over the counted lists, written here."""
    w = part.weights.numpy() * part.counted.numpy()
    v = np.where(
        part.counted.numpy()[:, None] if part.values.ndim == 2 else part.counted.numpy(), part.values, 0
    )
    return (w.reshape(-1, *([1] * (v.ndim - 1))) * v).sum(0) / w.sum()


def run(pairs, batches, epochs: int = 1):
    """Attach every (metric, handler) to one engine and run it; the engine's metrics."""
    engine = Engine(lambda e, batch: batch)
    for i, (metric, handler) in enumerate(pairs):
        metric.attach(engine, f"m{i}")
        if handler is not None:
            handler.attach(engine)
    return engine.run(batches, max_epochs=epochs).metrics


@pytest.mark.parametrize("name", list(IGNITE))
def test_every_list_metric_gives_the_reference_per_list_values(name):
    cls, per_list, kw = IGNITE[name]
    takes_k = "top_k" in inspect.signature(cls).parameters
    metric = cls(KS) if takes_k else cls()
    handler = PerListValues(metric)
    batches = data(seed=len(name))
    metrics = run([(metric, handler)], batches)
    got = handler.collected()
    assert len(handler.batches) == len(batches)
    ks = KS if takes_k else [None]
    assert got.values.shape == (sum(len(b["y"]) for b in batches), len(ks))
    for j, k in enumerate(ks):
        want, weights = reference_lists(per_list, kw, batches, k)
        assert_matches_reference(got.values[:, j].numpy(), got.counted.numpy(), want, f"{name}@{k}")
        np.testing.assert_array_equal(got.weights.numpy(), weights)
    np.testing.assert_allclose(weighted_mean(got), np.reshape(metrics["m0"], -1), rtol=1e-12)


def test_list_metrics_give_each_name_its_values():
    metric = ListMetrics(list(NAMES), confidence=0.9)
    handler = PerListValues(metric)
    batches = data(seed=7)
    metrics = run([(metric, handler)], batches)
    got = handler.collected()
    assert list(got) == list(NAMES)
    for name, (per_list, k, kw) in NAMES.items():
        want, weights = reference_lists(per_list, kw, batches, k)
        part = got[name]
        assert part.values.shape == (len(want),)
        assert_matches_reference(part.values.numpy(), part.counted.numpy(), want, name)
        np.testing.assert_array_equal(part.weights.numpy(), weights)
        assert float(weighted_mean(part)) == pytest.approx(metrics[name], rel=1e-12)
        units = part.counted.numpy() & (part.weights.numpy() > 0)
        assert metrics[f"{name}_count"] == units.sum()


def test_two_rankers_values_give_paired_comparisons_t_test():
    rng = np.random.default_rng(3)
    batches = []
    for _ in range(4):
        labels = rng.integers(0, 4, size=(30, 20)).astype(float) * (rng.random((30, 20)) < 0.25)
        batches.append({
            "y_pred": {
                "model": torch.from_numpy(labels * 0.6 + rng.normal(size=labels.shape)),
                "popularity": torch.from_numpy(labels * 0.3 + rng.normal(size=labels.shape)),
            },
            "y": torch.from_numpy(labels),
        })  # fmt: skip
    rankers = ["model", "popularity"]
    names = ["ndcg@10", "map@5"]
    paired = PairedComparison(names, rankers=rankers)
    on_paired = PerListValues(paired)
    alone = {
        (r, cls.__name__): PerListValues(
            cls(k, output_transform=lambda o, r=r: {"y_pred": o["y_pred"][r], "y": o["y"]})
        )
        for r in rankers
        for cls, k in ((NDCG, 10), (MAP, 5))
    }
    metrics = run([(paired, on_paired), *((h.metric, h) for h in alone.values())], batches)
    from_paired = on_paired.collected()
    for name, cls in zip(names, ("NDCG", "MAP"), strict=True):
        a, b = (alone[r, cls].collected() for r in rankers)
        both = (a.counted & b.counted).numpy()
        test = stats.ttest_rel(a.values[both, 0].numpy(), b.values[both, 0].numpy())
        key = f"{name}/model-vs-popularity"
        assert metrics[f"{key}/p_value"] == pytest.approx(test.pvalue, rel=1e-9)
        assert metrics[f"{key}/t"] == pytest.approx(test.statistic, rel=1e-9)
        part = from_paired[name]  # the comparison's own: (lists, rankers), counted for both
        np.testing.assert_array_equal(part.counted.numpy(), both)
        np.testing.assert_array_equal(
            part.values[both].numpy(), np.stack([a.values[both, 0], b.values[both, 0]], 1)
        )


def test_the_metric_is_untouched_and_a_callback_keeps_nothing():
    batches = data(seed=11)
    seen = []
    with_handler, alone = NDCG(KS), NDCG(KS)
    handler = PerListValues(
        with_handler, callback=lambda engine, values: seen.append((engine.state.iteration, values))
    )
    metrics = run([(with_handler, handler), (alone, None)], batches)
    assert metrics["m0"] == metrics["m1"]
    mine, theirs = with_handler.state_sums(), alone.state_sums()
    assert mine.keys() == theirs.keys()
    for field, sums in theirs.items():
        np.testing.assert_array_equal(mine[field], sums, err_msg=field)
    assert [i for i, _ in seen] == [1, 2, 3]
    want, _ = reference_lists(ref.ndcg, {"threshold": 1.0}, batches, KS[1])
    got = torch.cat([v.values for _, v in seen])[:, 1].numpy()
    assert_matches_reference(got, torch.cat([v.counted for _, v in seen]).numpy(), want, "callback")
    assert handler.batches == []
    with pytest.raises(NotComputableError, match="callback"):
        handler.collected()


def test_each_epoch_starts_over_and_unrolled_samples_are_read_as_the_metric_reads_them():
    batches = data(seed=2, n_batches=2)
    metric = MAP(3)
    handler = PerListValues(metric)
    with pytest.raises(NotComputableError, match="no batch"):
        handler.collected()
    run([(metric, handler)], batches, epochs=3)
    assert len(handler.batches) == 2  # the last epoch's
    # ignite's unrolled form: two lists of per-sample tensors, one list each
    s, y = batches[0]["y_pred"], batches[0]["y"]
    unrolled = MAP(3)
    samples = PerListValues(unrolled)
    metrics = run([(unrolled, samples)], [(list(s), list(y))])
    got = samples.collected()
    want = [ref.average_precision(a, b, 3) for a, b in zip(s.numpy(), y.numpy(), strict=True)]
    assert_matches_reference(got.values[:, 0].numpy(), got.counted.numpy(), want, "unrolled")
    assert float(weighted_mean(got)[0]) == pytest.approx(metrics["m0"][0], rel=1e-12)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match=r"metric must be a rankstream\.ignite list metric, got 'ndcg'"):
        PerListValues("ndcg")
    with pytest.raises(TypeError, match=r"metric must be a list metric .* HitsAtK"):
        PerListValues(HitsAtK(10))
    with pytest.raises(TypeError, match=r"callback must be None or a callable .* got 3"):
        PerListValues(NDCG(5), callback=3)
    handler = PerListValues(NDCG(5))
    with pytest.raises(ValueError, match="y_pred"):
        handler.batch_values((torch.zeros(2, 3), torch.zeros(2, 4)))
