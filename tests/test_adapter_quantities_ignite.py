"""The reported-quantities contract through an Ignite ``Engine``: a kernel that reports a
second quantity per metric (``quantities = ("twice",)``) gets it into ``engine.state.metrics``
as ``f"{name}_{q}"`` beside its value under ``name``, with no change to the adapter; the
collision checks know the new key. Values from the naive reference (tests/reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from toy_kernels import MAPWithStderr

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


def test_a_kernel_with_its_own_state_field_and_stderr_runs_on_an_engine():
    """The toy kernel adds ``value_sq_sum`` and reports ``stderr``: attached as it is, with no
    change to the adapter, the engine gets both; the stderr is numpy's ``std(ddof=1) / sqrt(n)``
    of the naive reference's per-list values (every list here holds a relevant item)."""
    _, s, y = _data()
    y[:, 0] = 1.0  # every list has a relevant item: every list is counted
    engine = Engine(lambda e, batch: batch)
    KernelMetric(MAPWithStderr(KS)).attach(engine, "map")
    MAP(KS).attach(engine, "plain")
    got = engine.run([(s[:8], y[:8]), (s[8:], y[8:])]).metrics
    assert set(got) == {"map", "map_stderr", "plain"}
    assert got["map"] == got["plain"]
    for j, k in enumerate(KS):
        per_list = np.array(
            [R.average_precision(a, b, k) for a, b in zip(s.tolist(), y.tolist(), strict=True)]
        )
        assert got["map"][j] == pytest.approx(per_list.mean(), rel=1e-12)
        assert got["map_stderr"][j] == pytest.approx(per_list.std(ddof=1) / np.sqrt(per_list.size), rel=1e-10)
