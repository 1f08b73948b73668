"""State lifecycle: variables, update/reset, failed updates, config round trips, and the
float32 (compensated) state over millions of lists."""

from __future__ import annotations

import keras
import keras_rs
import krs_reference as ref
import numpy as np
import pytest

from rankstream.core.lists.map import MAPKernel
from rankstream.keras import MAP, NDCG, KernelMetric


def batch(seed, b=6, n=8, weights=None):
    s, y, m, w = ref.make_case(np.random.default_rng(seed), b, n, weights=weights)
    return {"labels": y, "mask": m}, s, w


@pytest.mark.parametrize("cls", [NDCG, MAP])
def test_one_sum_variable_per_field(cls):
    metric = cls(k=3, shuffle_ties=False)
    fields = metric.kernel.fields
    names = [v.name for v in metric.variables]
    x64 = keras.backend.backend() != "jax" or __import__("jax").config.jax_enable_x64
    expected = list(fields) if x64 else list(fields) + [f"{f}_compensation" for f in fields]
    assert names == expected
    for v in metric.variables:
        assert v.aggregation == "sum"
        assert keras.backend.standardize_dtype(v.dtype) == ("float64" if x64 else "float32")
        assert tuple(v.shape) == fields[v.name.replace("_compensation", "")]


def test_seed_generator_state_is_tracked_when_shuffling():
    metric = NDCG(k=3, seed=1)
    sums = {f"{f}{suffix}" for f in metric.kernel.fields for suffix in ("", "_compensation")}
    extra = [v for v in metric.variables if v.name not in sums]
    assert [v.name for v in extra] == ["seed_generator_state"]
    assert all(v.name in sums for v in NDCG(k=3, shuffle_ties=False).variables)


@pytest.mark.parametrize(
    "cls, peer_cls", [(NDCG, keras_rs.metrics.NDCG), (MAP, keras_rs.metrics.MeanAveragePrecision)]
)
def test_update_update_reset_update(cls, peer_cls):
    ours = cls(k=4)
    b1, b2, b3 = batch(1, weights="item"), batch(2, weights="list"), batch(3)
    for yt, s, w in (b1, b2):
        ours.update_state(yt, s, sample_weight=w)
    both = peer_cls(k=4)
    for yt, s, w in (b1, b2):
        both.update_state(yt, s, sample_weight=w)
    assert float(ours.result()) == pytest.approx(float(both.result()), rel=1e-5, abs=1e-6)
    ours.reset_state()
    assert float(ours.result()) == 0.0  # keras-rs's empty mean is 0
    for v in ours.variables:
        if v.name in ours.kernel.fields:
            assert not np.any(keras.ops.convert_to_numpy(v))
    yt, s, w = b3
    ours.update_state(yt, s, sample_weight=w)
    last = peer_cls(k=4)
    last.update_state(yt, s, sample_weight=w)
    assert float(ours.result()) == pytest.approx(float(last.result()), rel=1e-5, abs=1e-6)


def test_failed_update_leaves_the_state_as_it_was():
    metric = NDCG(k=3)
    yt, s, _ = batch(4)
    metric.update_state(yt, s)
    before = [keras.ops.convert_to_numpy(v).copy() for v in metric.variables]
    with pytest.raises(ValueError):
        metric.update_state(yt, s, sample_weight=np.ones((7,), "float32"))
    bad = s.copy()
    bad[0, :] = np.nan  # NaN among valid items
    yt_all = {"labels": np.abs(yt["labels"]), "mask": np.ones_like(yt["mask"])}
    with pytest.raises(ValueError, match="NaN"):
        metric.update_state(yt_all, bad)
    after = [keras.ops.convert_to_numpy(v) for v in metric.variables]
    for a, b_ in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b_)


@keras.saving.register_keras_serializable(package="rankstream_tests")
def cubic_gain(y):
    return keras.ops.power(y, 3.0)


@pytest.mark.parametrize(
    "metric",
    [
        NDCG(),
        NDCG(
            k=5, gain_fn="linear_rank", shuffle_ties=False, name="n5", relevance_threshold=1.0, empty="skip"
        ),
        NDCG(k=2, gain_fn=cubic_gain, seed=42),
        MAP(),
        MAP(
            k=7,
            shuffle_ties=False,
            seed=3,
            denominator="min",
            relevance_threshold=None,
            empty="skip",
            name="m7",
        ),
    ],
    ids=["ndcg-default", "ndcg-named-gain", "ndcg-custom-gain", "map-default", "map-conventions"],
)
def test_config_round_trip(metric):
    config = metric.get_config()
    for clone in (
        type(metric).from_config(config),
        keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric)),
    ):
        assert type(clone) is type(metric)
        assert clone.get_config() == config
    yt, s, w = batch(9, weights="item")
    clone = type(metric).from_config(config)
    for m in (metric, clone):
        m.update_state(yt, s, sample_weight=w)
    assert float(clone.result()) == pytest.approx(float(metric.result()), rel=1e-6, abs=1e-7)


def test_float32_state_stays_accurate_over_millions_of_lists():
    """4,000,000 lists in 250 batches of a compiled ``evaluate`` (``jit_compile`` where the
    backend has it) through a float32 (compensated) state: the streamed mean stays within
    float32 rounding of the float64 truth, where a plain float32 running sum of the same batch
    sums drifts an order of magnitude further."""
    kernel = MAPKernel(
        2,
        denominator="all",
        relevance_threshold=1.0,
        empty="zero",
        weighting="keras_rs",
        negative_labels="mask",
    )
    metric = KernelMetric(kernel, state_dtype="float32", name="map")
    assert len(metric.variables) == 2 * len(kernel.fields)
    rng = np.random.default_rng(0)
    b, updates = 16000, 250
    first = rng.random((updates, b)) < 0.5  # AP is 1 (relevant item first) or 1/2
    w = rng.uniform(0.5, 1.5, (updates, b)).astype("float32")
    scores = np.where(first.reshape(-1, 1), [[1.0, 0.0]], [[0.0, 1.0]]).astype("float32")
    labels = np.tile(np.array([[1.0, 0.0]], "float32"), (updates * b, 1))
    inputs = keras.Input((2,), dtype="float32")
    model = keras.Model(inputs, inputs)
    model.compile(
        loss=lambda yt, yp: keras.ops.mean(yp * 0.0),
        weighted_metrics=[metric],
        jit_compile=keras.backend.backend() != "torch",
    )
    model.evaluate(scores, labels, sample_weight=w.reshape(-1), batch_size=b, verbose=0)
    num = np.sum(w.astype(np.float64) * np.where(first, 1.0, 0.5), axis=1)  # per batch
    den = np.sum(w.astype(np.float64), axis=1)
    truth = float(np.sum(num) / np.sum(den))
    naive_num = naive_den = np.float32(0.0)
    for a, c in zip(num, den, strict=True):  # a plain float32 running sum of the batch sums
        naive_num, naive_den = np.float32(naive_num + np.float32(a)), np.float32(naive_den + np.float32(c))
    ours_err = abs(float(metric.result()) - truth) / truth
    naive_err = abs(float(naive_num) / float(naive_den) - truth) / truth
    print(f"float32 state: relative error {ours_err:.2e}; plain float32 running sum: {naive_err:.2e}")
    assert ours_err < 1e-7, (ours_err, naive_err)
    assert naive_err > 4 * ours_err, (ours_err, naive_err)


@pytest.mark.parametrize("state_dtype", ["float32", None])
@pytest.mark.parametrize(
    "cls, peer_cls", [(NDCG, keras_rs.metrics.NDCG), (MAP, keras_rs.metrics.MeanAveragePrecision)]
)
def test_state_dict_resumes_an_interrupted_stream(cls, peer_cls, state_dtype):
    """state_dict() after two batches, load_state_dict() into a fresh metric of the same
    config, one more batch: keras-rs's number over the three batches."""
    batches = [batch(11, weights="item"), batch(12, weights="list"), batch(13)]
    first = cls(k=4, state_dtype=state_dtype)
    for yt, s, w in batches[:2]:
        first.update_state(yt, s, sample_weight=w)
    saved = first.state_dict()
    assert saved["metric"] == cls.__name__
    assert sorted(saved["sums"]) == sorted(first.kernel.fields)
    assert all(v.dtype == np.float64 for v in saved["sums"].values())
    kept = {f: v.copy() for f, v in saved["sums"].items()}
    first.update_state(*batches[2][:2])  # saved is a snapshot
    assert all(np.array_equal(saved["sums"][f], kept[f]) for f in kept)
    resumed = cls.from_config(first.get_config())
    resumed.load_state_dict(saved)
    for f, v in resumed.state_dict()["sums"].items():  # float32 state: value + compensation hold it
        np.testing.assert_allclose(v, saved["sums"][f], rtol=1e-12)
    yt, s, w = batches[2]
    resumed.update_state(yt, s, sample_weight=w)
    peer = peer_cls(k=4)
    for yt, s, w in batches:
        peer.update_state(yt, s, sample_weight=w)
    assert float(resumed.result()) == pytest.approx(float(peer.result()), rel=1e-5, abs=1e-6)


def test_load_state_dict_checks_before_assigning():
    metric = MAP(k=3, shuffle_ties=False, state_dtype="float32")
    metric.update_state(*batch(14)[:2])
    before = metric.state_dict()
    good = before["sums"]
    bad_cases = [
        ({k: v for k, v in good.items() if k != "weight_sum"}, r"MAP.*fields"),
        ({**good, "extra": np.zeros(())}, r"MAP.*fields"),
        ({**good, "weight_sum": np.zeros(2)}, r"'weight_sum' must have shape \(\), got \(2,\)"),
        ({**good, "weight_sum": np.array(np.nan)}, r"'weight_sum' must be finite"),
    ]
    for sums, pattern in bad_cases:
        with pytest.raises(ValueError, match=pattern):
            metric.load_state_dict({**before, "sums": sums})
        after = metric.state_dict()["sums"]
        assert all(np.array_equal(after[f], good[f]) for f in good)
    with pytest.raises(TypeError, match=r"state must be a mapping"):
        metric.load_state_dict([1.0, 2.0])
    # a value float32 cannot hold: kept as total - compensation
    one = {**before, "sums": {**good, "weight_sum": np.array(1.0 + 2.0**-30)}}
    metric.load_state_dict(one)
    assert metric.state_dict()["sums"]["weight_sum"] == 1.0 + 2.0**-30
