"""The catalog's embeddings of the Keras catalog metrics (``FactorizedTopK``,
``CatalogMetrics``): fixed, a Keras variable or ``Embedding`` read at every update, or a
callable called at every update, and the JAX check that a live table is read where the
model's current weights are mapped; the per-query weights of both."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops as K

from rankstream.core.backends.keras_ops import is_tracing


def jax_reads_stale(variable: Any) -> bool:
    """Whether reading ``variable`` here gives a value the step does not hold: Keras' JAX
    trainer passes the model's weights into its step as arguments and updates the ``compile``
    metrics in a scope that maps only the metrics' variables, so a weight read there is the
    value it had before ``fit`` (a constant of the compiled step)."""
    if keras.backend.backend() != "jax":
        return False
    try:
        from keras.src.backend.common.stateless_scope import get_stateless_scope, in_stateless_scope
    except ImportError:  # pragma: no cover - a Keras that moved it: the check is skipped
        return False

    return in_stateless_scope() and get_stateless_scope().get_current_value(variable) is None


JAX_FIX = (
    "Keras' JAX trainer updates compile(metrics=...) outside the scope holding the model's current "
    "weights, so the candidates read there would be those from before fit. On JAX, update the "
    "metric where the weights are live, in the model's compute_loss (TFRS's own pattern, on every "
    "backend; see docs/factorized_top_k.md), or pass the candidates as a fixed (N, d) array"
)


class Source:
    """Holds the candidates (a variable, a callable or a tensor) out of Keras' tracking (a
    Keras metric tracks a variable held as an attribute, or in a list, as its own state)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def check_candidates(value: Any) -> None:
    """A ValueError unless ``value`` has a static ``(N, d)`` shape."""
    shape = tuple(value.shape)
    if len(shape) != 2 or shape[0] is None or shape[1] is None:
        raise ValueError(
            f"candidates must be the catalog's embeddings of static shape (N, d), got shape {shape}"
        )


def candidate_source(candidates: Any, dtype: Any) -> Source:
    """What ``candidates`` becomes: a variable (an ``Embedding``'s table), a callable, or a
    fixed ``(N, d)`` tensor in ``dtype``."""
    if isinstance(candidates, keras.layers.Embedding):
        if not candidates.built:
            raise ValueError(
                f"candidates: the Embedding layer {candidates.name!r} is not built yet (no table); "
                "build the model first, or pass a callable returning its embeddings"
            )
        candidates = candidates.embeddings
    dynamic = callable(candidates) and not hasattr(candidates, "shape")
    if isinstance(candidates, keras.Variable) or dynamic:
        return Source(candidates)
    fixed = K.convert_to_tensor(candidates, dtype=dtype)
    check_candidates(fixed)
    return Source(fixed)


def current_candidates(source: Source, queries: Any, dtype: Any, name: str, queries_arg: str) -> Any:
    """The ``(N, d)`` candidate embeddings for this update (no gradient), or a ValueError where
    JAX would read stale weights (:func:`jax_reads_stale`) or where their ``d`` is not that of
    the ``(batch, d)`` ``queries`` (given as the argument ``queries_arg``)."""
    src = source.value
    value = src() if callable(src) and not isinstance(src, keras.Variable) else src
    if isinstance(value, keras.Variable):
        if jax_reads_stale(value):
            raise ValueError(f"{name}: the candidates are read from the variable {value.path!r}. {JAX_FIX}")
        value = value.value
    elif value is not src and keras.backend.backend() == "jax":
        if is_tracing(queries) and not is_tracing(value):
            raise ValueError(
                f"{name}: the candidates callable returned a constant inside a compiled step. {JAX_FIX}"
            )
    value = K.stop_gradient(K.cast(K.convert_to_tensor(value), dtype))
    check_candidates(value)
    if queries.shape[1] != value.shape[1]:
        raise ValueError(
            f"{name}: {queries_arg} has d={queries.shape[1]} dimensions (shape {tuple(queries.shape)}) "
            f"but the candidates have {value.shape[1]} (shape {tuple(value.shape)})"
        )
    return value


def query_weights(sample_weight: Any, queries: Any, dtype: Any) -> Any:
    """Per-query weights ``(batch,)`` of ``dtype`` from None, a scalar, ``(batch,)`` or
    ``(batch, 1)`` (a ``ValueError`` naming ``sample_weight`` otherwise)."""
    ones = K.ones_like(queries[:, 0])
    if sample_weight is None:
        return ones
    w = K.cast(K.convert_to_tensor(sample_weight), dtype)
    shape, b = tuple(w.shape), queries.shape[0]
    if len(shape) == 2 and shape[1] == 1:
        w = K.reshape(w, (-1,))
    elif not (shape == () or len(shape) == 1):
        w = None
    if w is None or (shape and None not in (shape[0], b) and shape[0] != b):
        raise ValueError(
            f"sample_weight must be a scalar, (batch,) or (batch, 1) for a batch of {b} queries, "
            f"got shape {shape}"
        )
    return K.multiply(ones, w)
