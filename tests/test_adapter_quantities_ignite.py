"""The reported-quantities contract through an Ignite ``Engine``: a kernel that reports a
second quantity per metric (``quantities = ("twice",)``) gets it into ``engine.state.metrics``
as ``f"{name}_{q}"`` beside its value under ``name``, with no change to the adapter; the
collision checks know the new key. Values from the naive reference (tests/reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream import MAPKernel
from rankstream.ignite import MAP, KernelMetric

import reference as R

KS = [3, 5]


class TwiceMAPKernel(MAPKernel):
    """MAP@k reporting ``twice`` (2 * MAP@k) too: the contract's shape of a kernel with a
    second quantity (a standard error would be computed from its own state field)."""

    quantities = ("twice",)

    def compute(self, sums, xp=np):
        values = super().compute(sums, xp)
        return {**values, "twice": 2.0 * values["value"]}

    def select(self, values):
        return {q: values[q] for q in ("value", *self.quantities)}

    def finalize(self, values):
        return {q: [float(v) for v in np.asarray(values[q]).reshape(-1)] for q in ("value", *self.quantities)}


def _data():
    g = torch.Generator().manual_seed(3)
    s = torch.rand(20, 9, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (20, 9), generator=g).double()
    return [(s[:8], y[:8]), (s[8:], y[8:])], s, y


def _expected(s, y):
    return [R.mean_over_lists(R.average_precision, s.tolist(), y.tolist(), k) for k in KS]


def _run(metrics):
    batches, _, _ = _data()
    engine = Engine(lambda e, batch: batch)
    for name, metric in metrics.items():
        metric.attach(engine, name)
    return engine.run(batches).metrics


def test_a_second_quantity_reaches_the_engine_beside_the_value():
    _, s, y = _data()
    expected = _expected(s, y)
    got = _run({"map": KernelMetric(TwiceMAPKernel(KS)), "plain": MAP(KS)})
    assert got["plain"] == pytest.approx(expected, abs=1e-12)
    assert got["map"] == pytest.approx(expected, abs=1e-12)
    assert got["map_twice"] == pytest.approx([2 * v for v in expected], abs=1e-12)
    assert got["map"] == got["plain"]  # the value is the plain metric's, to the bit
    assert set(got) == {"map", "map_twice", "plain"}


def test_compute_returns_the_value_and_each_quantity():
    batches, s, y = _data()
    metric = KernelMetric(TwiceMAPKernel(KS))
    for batch in batches:
        metric.update(batch)
    out = metric.compute()
    assert set(out) == {"value", "twice"}
    assert out["value"] == pytest.approx(_expected(s, y), abs=1e-12)
    assert out["twice"] == pytest.approx([2 * v for v in out["value"]], abs=1e-15)


def test_a_quantity_key_is_checked_for_collisions():
    engine = Engine(lambda e, batch: batch)
    KernelMetric(TwiceMAPKernel(KS)).attach(engine, "map")
    with pytest.raises(ValueError, match=r"MAP attached as 'map_twice' and KernelMetric attached as 'map'"):
        MAP(KS).attach(engine, "map_twice")
    MAP(KS).attach(engine, "map_thrice")  # another key: fine
