"""Issue 12, structurally (no timing): a list metric's update keeps the top-k kernel of its
backend and never sorts every row (what a narrow slice of the top-k values used to turn JAX's
top-k into under ``jit``, 40x slower). JAX and TensorFlow: the optimised HLO of the compiled
update (a sort of every row appears nowhere; only the tie shuffle's one permutation of the
columns, a 1-D sort); torch: the eager update's operators (``torch.profiler``)."""

import re

import keras
import numpy as np
import pytest

from rankstream.keras import MAP, NDCG

BACKEND = keras.backend.backend()
METRICS = [lambda: NDCG(k=10), lambda: NDCG(k=10, shuffle_ties=False), lambda: MAP(k=5)]


def _data(lists=64, items=500):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((lists, items)).astype("float32")
    y = ((rng.random((lists, items)) < 0.05) * rng.integers(1, 4, (lists, items))).astype("float32")
    return y, x


def _compiled_update_hlo(metric) -> str:
    """The optimised HLO of the compiled update (JAX ``jit`` or TensorFlow XLA)."""
    y, x = _data()
    if BACKEND == "jax":
        import jax

        values = [v.value for v in metric.variables]
        step = jax.jit(lambda v, yy, xx: metric.stateless_update_state(v, yy, xx))
        return step.lower(values, y, x).compile().as_text()
    import tensorflow as tf

    step = tf.function(lambda yy, xx: metric.update_state(yy, xx), jit_compile=True)
    return step.experimental_get_compiler_ir(tf.constant(y), tf.constant(x))(stage="optimized_hlo")


def _torch_ops_of_update(metric) -> list[str]:
    """The names of the operators an eager update runs (torch backend)."""
    import torch

    y, x = _data()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        metric.update_state(y, x)
    return [event.name for event in prof.events()]


@pytest.mark.parametrize("metric", METRICS)
def test_update_keeps_the_topk_kernel(metric):
    if BACKEND == "torch":
        names = _torch_ops_of_update(metric())
        assert "aten::topk" in names
        assert not [n for n in names if n in ("aten::sort", "aten::argsort")], sorted(set(names))
        return
    hlo = _compiled_update_hlo(metric())
    sorted_rows = [li for li in hlo.splitlines() if " sort(" in li and re.search(r"\[\d+,\d+\]", li)]
    assert not sorted_rows, f"a sort of every row in the compiled update: {sorted_rows[0][:200]}"
    assert re.search(r"TopK|topk", hlo), "no top-k kernel in the compiled update"
