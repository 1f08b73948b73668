"""The Keras side of sampled evaluation: the histogram of sampled ranks as one
``aggregation="sum"`` variable (lifecycle only; the math is `rankstream.core.sampled`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.adapters.keras_inputs import symbolic
from rankstream.core.backends.keras_ops import is_tracing
from rankstream.core.sampled import DEFAULT_GAMMA
from rankstream.core.sampled_state import SampledRanks, batch_histogram, candidate_ranks, report


@keras.saving.register_keras_serializable(package="rankstream")
class SampledRankMetrics(keras.metrics.Metric):
    """Sampled evaluation with corrected estimates of the full-catalog metrics, as a Keras
    metric: ``y_pred`` the scores ``(batch, num_negatives + 1)`` of the positive and its sampled
    negatives, ``y_true`` the index of the positive in each row ``(batch,)`` (or ``(batch, 1)``);
    no ``sample_weight``. The state is the histogram of sampled ranks (a float64
    ``aggregation="sum"`` variable, summed across replicas) and a count of invalid rows (an index
    out of range or NaN scores, counted where a compiled step cannot raise: ``result()`` raises
    while it is above 0). ``result()`` is the dict of
    `rankstream.core.sampled_state.SampledRanks.compute`, computed on the host (scipy): eager
    only. The torch backend runs ``evaluate`` and ``fit`` eagerly; on JAX and TensorFlow compile
    with ``run_eagerly=True`` (``result()`` raises inside a compiled step).

    Args:
        num_items: the catalog size ``n``.
        num_negatives: ``m``, the negatives sampled per positive.
        ks: cut-offs of hit_rate@k, ndcg@k, mrr@k (default ``(1, 5, 10)``).
        gamma: the bias-variance trade-off in ``[0, 1]`` (default 0.1).
        confidence: None or a level such as 0.95 (``_stderr``, ``_ci_low``, ``_ci_high``).
        ties: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``.
        name, dtype: Keras'.
    """

    def __init__(
        self,
        num_items: int,
        num_negatives: int,
        ks: int | Sequence[int] = (1, 5, 10),
        gamma: float = DEFAULT_GAMMA,
        confidence: float | None = None,
        ties: str = "realistic",
        name: str = "sampled",
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self._core = SampledRanks(num_items, num_negatives, ks, gamma, confidence, ties)
        self.num_items, self.num_negatives = self._core.num_items, self._core.num_negatives
        self.ks, self.gamma, self.confidence, self.ties = list(self._core.ks), gamma, confidence, ties
        size = (self.num_negatives + 1,)
        self._hist = self.add_variable(size, "zeros", "float64", aggregation="sum", name="histogram")
        self._invalid = self.add_variable((), "zeros", "float64", aggregation="sum", name="invalid")

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        if sample_weight is not None:
            raise ValueError(f"{self.name}: sample_weight is not supported (one list, one count), got one")
        if symbolic():
            return
        scores = K.convert_to_tensor(y_pred)
        width = self.num_negatives + 1
        if len(scores.shape) != 2 or scores.shape[1] != width:
            raise ValueError(
                f"{self.name}: y_pred must have shape (batch, num_negatives + 1 = {width}), "
                f"got {tuple(scores.shape)}"
            )
        index = K.cast(K.reshape(K.convert_to_tensor(y_true), (-1,)), "float64")
        if index.shape[0] is not None and index.shape[0] != scores.shape[0]:
            raise ValueError(
                f"{self.name}: y_true must hold one index per row of y_pred, got {tuple(index.shape)}"
            )
        o, p, bad = candidate_ranks(K.cast(scores, "float64"), index, self.ties, K)
        if not is_tracing(scores) and bool(K.convert_to_numpy(K.any(bad))):
            raise ValueError(
                f"{self.name}: y_true must index the positive in 0..{width - 1} and y_pred hold no NaN; "
                f"{int(K.convert_to_numpy(K.sum(K.cast(bad, 'int32'))))} bad rows of {scores.shape[0]}"
            )
        keep = K.where(bad, 0.0, 1.0)  # a bad row (compiled: not raised) adds nothing, counted apart
        o, p = K.where(bad, 1.0, o), K.where(bad, 1.0, p)
        hist = batch_histogram(o, p, self.num_negatives, K, weights=keep)
        self._hist.assign_add(K.cast(hist, "float64"))
        self._invalid.assign_add(K.cast(K.sum(1.0 - keep), "float64"))

    def reset_state(self) -> None:
        self._hist.assign(K.zeros(self._hist.shape, dtype="float64"))
        self._invalid.assign(K.zeros((), dtype="float64"))

    def result(self) -> dict[str, Any]:
        if is_tracing(self._hist.value):
            raise RuntimeError(
                f"{self.name}: result() fits the corrections on the host (scipy) and cannot run inside a "
                "compiled step (JAX jit, a TensorFlow graph); compile the model with run_eagerly=True "
                "(the torch backend runs eagerly by default)"
            )
        hist = np.asarray(K.convert_to_numpy(self._hist), dtype=np.float64)
        invalid = float(K.convert_to_numpy(self._invalid))
        if invalid > 0:
            raise ValueError(
                f"{self.name}: {invalid:g} invalid rows were counted; reset_state() before computing"
            )
        if not hist.sum() > 0:
            return {}
        core = self._core
        return report(hist, core.num_items, core.ks, core.gamma, core.confidence)

    def get_config(self) -> dict[str, Any]:
        base = super().get_config()
        mine = {
            k: getattr(self, k) for k in ("num_items", "num_negatives", "ks", "gamma", "confidence", "ties")
        }
        return {**base, **mine}
