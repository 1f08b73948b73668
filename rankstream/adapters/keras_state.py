"""The state of a Keras metric: one ``aggregation="sum"`` variable per kernel field, float64
where the backend has it, else float32 with Kahan compensation (``<field>_compensation``
variables holding what each float32 addition lost), and the reads and writes of its sums."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.core.backends.keras_ops import x64_enabled

STATE_DTYPES = ("float64", "float32")


def resolve_state_dtype(state_dtype: str | None) -> str:
    """The state dtype a metric gets: ``state_dtype``, or (None) float64 where the backend has
    it (not JAX without x64, not torch on MPS) and compensated float32 elsewhere. Asking for
    float64 where it is not available is an error, not a silent float32."""
    has64 = x64_enabled() and not (keras.backend.backend() == "torch" and K.zeros(()).device.type == "mps")
    if state_dtype is None:
        return "float64" if has64 else "float32"
    if state_dtype not in STATE_DTYPES:
        raise ValueError(f"state_dtype must be 'float64', 'float32' or None, got {state_dtype!r}")
    if state_dtype == "float64" and not has64:
        raise ValueError(
            f"state_dtype='float64' is not available on the {keras.backend.backend()} backend here "
            "(JAX needs jax_enable_x64, e.g. JAX_ENABLE_X64=1; torch's MPS has no float64); "
            "use state_dtype=None or 'float32' (compensated float32)"
        )
    return state_dtype


def state_variables(
    metric: Any, fields: Mapping[str, Any], dtype: str, compensated: bool
) -> tuple[list, list]:
    """A metric's state: one zero ``aggregation="sum"`` variable per field, and (``compensated``)
    one ``<field>_compensation`` variable per field (else no compensation variables)."""
    add = metric.add_variable
    totals = [add(shape, "zeros", dtype, aggregation="sum", name=f) for f, shape in fields.items()]
    if not compensated:
        return totals, []
    names = [(f"{f}_compensation", shape) for f, shape in fields.items()]
    return totals, [add(shape, "zeros", dtype, aggregation="sum", name=f) for f, shape in names]


def float64_numpy(x: Any) -> np.ndarray:
    """A tensor or variable as a float64 numpy array (a host read)."""
    return np.asarray(K.convert_to_numpy(K.convert_to_tensor(x)), dtype=np.float64)


def read_sums(totals: list[Any], compensations: list[Any]) -> list[np.ndarray]:
    """Float64 numpy values of state variables, ``total - compensation`` when compensated
    (in float64: float32 would round the difference again)."""
    if not compensations:
        return [float64_numpy(t) for t in totals]
    return [float64_numpy(t) - float64_numpy(c) for t, c in zip(totals, compensations, strict=True)]


def write_sums(values: list[np.ndarray], totals: list[Any], compensations: list[Any]) -> None:
    """Assign float64 ``values`` to state variables; a float32 compensation keeps what the
    float32 rounding of each value lost."""
    for i, value in enumerate(values):
        total = value.astype(totals[i].dtype)
        totals[i].assign(total)
        if compensations:  # total - compensation: the float64 value, to float32's precision twice
            compensations[i].assign((total.astype(np.float64) - value).astype(totals[i].dtype))


def total_tensors(totals: list[Any], compensations: list[Any]) -> list[Any]:
    """State variables as tensors, ``total - compensation`` when compensated."""
    if not compensations:
        return [K.convert_to_tensor(t) for t in totals]
    return [
        K.subtract(K.convert_to_tensor(t), K.convert_to_tensor(c))
        for t, c in zip(totals, compensations, strict=True)
    ]


def add_to(total: Any, x: Any, compensation: Any = None) -> None:
    """``total += x`` for a variable; with a float32 ``compensation`` variable, Kahan's
    compensated addition (the compensation keeps what the float32 addition lost)."""
    x = K.cast(K.reshape(x, total.shape), total.dtype)
    if compensation is None:
        total.assign_add(x)
        return
    t = K.convert_to_tensor(total)
    y = K.subtract(x, compensation)
    new = K.add(t, y)
    compensation.assign(K.subtract(K.subtract(new, t), y))
    total.assign(new)
