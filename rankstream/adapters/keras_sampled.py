"""The Keras side of sampled evaluation: the histogram of sampled ranks as one
``aggregation="sum"`` variable, updated and read with ``keras.ops`` only, so the metric runs in
compiled steps (JAX jit, TensorFlow graphs, torch) as well as eagerly (lifecycle only; the math
is `rankstream.core.sampled`)."""

from __future__ import annotations

from collections.abc import Sequence  # noqa: F401  (the constructor's signature names it)
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.adapters.ignite_derive import core_init
from rankstream.adapters.keras_inputs import symbolic
from rankstream.core.backends.keras_ops import is_tracing, x64_enabled
from rankstream.core.sampled import (
    bias_variance_values,
    metric_specs,
    minimal_bias_values,
    sampled_values,
)
from rankstream.core.sampled_state import SampledRanks, batch_histogram, candidate_ranks, report
from rankstream.core.uncertainty import t_quantile_xp

#: the estimators result() computes in keras.ops: linear in the histogram (``fitted`` is not)
LINEAR_ESTIMATORS = ("sampled", "minimal_bias", "bias_variance")


@keras.saving.register_keras_serializable(package="rankstream")
class SampledRankMetrics(keras.metrics.Metric):
    """Sampled evaluation with corrected estimates of the full-catalog metrics, as a Keras
    metric: ``y_pred`` the scores ``(batch, num_negatives + 1)`` of the positive and its sampled
    negatives, ``y_true`` the index of the positive in each row ``(batch,)`` (or ``(batch, 1)``),
    ``sample_weight`` one weight per list (finite, ``>= 0``; default 1; Keras passes it to metrics
    given to ``compile(weighted_metrics=...)``).

    The state is the histogram ``h`` of sampled ranks (``m + 1`` sums of list weights), that of
    squared weights ``h2``, the number ``n`` of lists with a positive weight (``aggregation="sum"``
    variables: summed across replicas; float64 where the backend has it, float32 on JAX without
    x64) and a count of invalid rows (an index out of range, NaN scores, a negative or non-finite
    weight: an eager update raises and leaves the state; a compiled step cannot raise, so it
    counts them and ``result()`` is NaN while the count is above 0). Ranks are counted in
    ``keras.ops`` with the tie policy of `rankstream.core.sampled_state` (no host read in a
    compiled update).

    ``result()``: for every metric and the estimators ``sampled``, ``minimal_bias`` and
    ``bias_variance`` (each a mean over lists of a per-rank value ``c_r``), the key
    ``f"{metric}_{estimator}"`` = ``sum_r h_r c_r / W`` (``W = sum_r h_r``, the key ``count``);
    with ``confidence``, also ``_stderr`` = ``sqrt(n / (n - 1) sum_r h2_r (c_r - mean)^2) / W``
    and Student's t interval ``_ci_low``, ``_ci_high`` with ``n - 1`` degrees of freedom
    (`rankstream.core.uncertainty.t_quantile_xp`).
    The vectors ``c`` are constants of ``(num_items, num_negatives, ks, gamma)`` computed once at
    construction (numpy, ``rankstream.core.sampled``); result() multiplies the histogram by them
    in ``keras.ops``, the same in every backend and mode. What needs the host, the ``fitted``
    estimator's maximum-likelihood fit, is :meth:`report`, called eagerly (after ``evaluate``):
    the full dict of `rankstream.core.sampled_state.SampledRanks.compute`.

    Args:
        num_items: the catalog size ``n``.
        num_negatives: ``m``, the negatives sampled per positive.
        ks: cut-offs of hit_rate@k, ndcg@k, mrr@k (default ``(1, 5, 10)``).
        gamma: the bias-variance trade-off in ``[0, 1]`` (default 0.1).
        confidence: None or a level such as 0.95 (``_stderr``, ``_ci_low``, ``_ci_high``).
        ties: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``.
        name, dtype: Keras'.
    """

    @core_init(SampledRanks, (("name", "sampled", "str"), ("dtype", None, "Any")))
    def __init__(self, core: SampledRanks, a: dict[str, Any]) -> None:
        super().__init__(name=a["name"], dtype=a["dtype"])
        self._core = core
        self.num_items, self.num_negatives = core.num_items, core.num_negatives
        self.ks, self.gamma = list(core.ks), a["gamma"]
        self.confidence, self.ties = a["confidence"], a["ties"]
        specs = metric_specs(self._core.ks)
        d = self._core.design
        values = (
            sampled_values(specs, self.num_negatives),
            minimal_bias_values(d),
            bias_variance_values(d, self._core.gamma),
        )
        #: the result keys in the order of the columns of ``_values`` ((m + 1, 3 F) numpy)
        self._keys = [f"{s.key}_{e}" for e in LINEAR_ESTIMATORS for s in specs]
        self._values = np.concatenate(values, axis=1)
        self._state_dtype = "float64" if x64_enabled() else "float32"
        size = (self.num_negatives + 1,)
        dt = self._state_dtype
        self._hist = self.add_variable(size, "zeros", dt, aggregation="sum", name="histogram")
        self._squares = self.add_variable(size, "zeros", dt, aggregation="sum", name="squares")
        self._lists = self.add_variable((), "zeros", dt, aggregation="sum", name="lists")
        self._invalid = self.add_variable((), "zeros", dt, aggregation="sum", name="invalid")

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        if symbolic():
            return
        dt = self._state_dtype
        scores = K.convert_to_tensor(y_pred)
        width = self.num_negatives + 1
        if len(scores.shape) != 2 or scores.shape[1] != width:
            raise ValueError(
                f"{self.name}: y_pred must have shape (batch, num_negatives + 1 = {width}), "
                f"got {tuple(scores.shape)}"
            )
        index = K.cast(K.reshape(K.convert_to_tensor(y_true), (-1,)), dt)
        if index.shape[0] is not None and scores.shape[0] is not None and index.shape[0] != scores.shape[0]:
            raise ValueError(
                f"{self.name}: y_true must hold one index per row of y_pred, got {tuple(index.shape)}"
            )
        o, p, bad = candidate_ranks(K.cast(scores, dt), index, self.ties, K)
        w = K.ones_like(index) if sample_weight is None else K.cast(K.convert_to_tensor(sample_weight), dt)
        if sample_weight is not None:
            w = K.reshape(w, (-1,))
            if w.shape[0] is not None and index.shape[0] is not None and w.shape[0] != index.shape[0]:
                raise ValueError(
                    f"{self.name}: sample_weight must hold one weight per row of y_pred, got {tuple(w.shape)}"
                )
            bad = K.logical_or(bad, K.logical_not(K.logical_and(K.isfinite(w), w >= 0)))
        if not is_tracing(scores) and bool(K.convert_to_numpy(K.any(bad))):
            raise ValueError(
                f"{self.name}: y_true must index the positive in 0..{width - 1}, y_pred hold no NaN and "
                f"sample_weight be finite and >= 0; "
                f"{int(K.convert_to_numpy(K.sum(K.cast(bad, 'int32'))))} bad rows of {scores.shape[0]}"
            )
        w = K.where(bad, K.zeros_like(w), w)  # a bad row (compiled: not raised) adds nothing
        o, p = K.where(bad, K.ones_like(o), o), K.where(bad, K.ones_like(p), p)
        m = self.num_negatives
        self._hist.assign_add(K.cast(batch_histogram(o, p, m, K, weights=w, dtype=dt), dt))
        self._squares.assign_add(K.cast(batch_histogram(o, p, m, K, weights=w * w, dtype=dt), dt))
        self._lists.assign_add(K.sum(K.cast(w > 0, dt)))
        self._invalid.assign_add(K.sum(K.cast(bad, dt)))

    def reset_state(self) -> None:
        for v in (self._hist, self._squares, self._lists, self._invalid):
            v.assign(K.zeros(v.shape, dtype=self._state_dtype))

    def result(self) -> dict[str, Any]:
        """The linear estimators (class docstring) in ``keras.ops``, the same in every mode: NaN
        before any list and while invalid rows are counted (:meth:`report` raises then)."""
        dt = self._state_dtype
        h, invalid = K.convert_to_tensor(self._hist), K.convert_to_tensor(self._invalid)
        c = K.convert_to_tensor(self._values.astype(dt))
        total = K.sum(h)
        nan = K.convert_to_tensor(np.nan, dtype=dt)
        usable = K.logical_and(total > 0, invalid <= 0)
        safe_total = K.where(total > 0, total, K.ones_like(total))
        column = K.reshape(h, (-1, 1))  # a sum of products, not matmul (Keras' torch matmul is float32)
        mean = K.where(usable, K.sum(column * c, axis=0) / safe_total, nan)
        out = {key: mean[j] for j, key in enumerate(self._keys)}
        if self.confidence is not None:
            squares = K.reshape(K.convert_to_tensor(self._squares), (-1, 1))
            ss = K.sum(squares * K.square(c - K.reshape(mean, (1, -1))), axis=0)
            n = K.convert_to_tensor(self._lists)
            more = K.logical_and(usable, n > 1)
            dof = K.where(more, n - 1.0, K.ones_like(n))
            var = n / dof * ss / (safe_total * safe_total)  # K.where, not K.maximum (torch: float32)
            stderr = K.where(more, K.sqrt(K.where(var > 0, var, K.zeros_like(var))), nan)
            half = t_quantile_xp(self.confidence, K.where(more, n - 1.0, K.zeros_like(n)), K) * stderr
            for name, got in (("stderr", stderr), ("ci_low", mean - half), ("ci_high", mean + half)):
                out.update({f"{key}_{name}": got[j] for j, key in enumerate(self._keys)})
        out["count"] = total
        return out

    def report(self) -> dict[str, float]:
        """Eagerly, on the host: every metric under every estimator with intervals, the dict of
        `rankstream.core.sampled_state.SampledRanks.compute` (result()'s keys and the ``fitted``
        estimate); a ``ValueError`` while invalid rows are counted, ``NotComputableError``
        before any list."""
        if is_tracing(self._hist.value):
            raise RuntimeError(
                f"{self.name}: report() fits on the host (scipy) and cannot run inside a compiled "
                "step; call it after evaluate (result() is the compiled part)"
            )
        invalid = float(K.convert_to_numpy(self._invalid))
        if invalid > 0:
            raise ValueError(f"{self.name}: {invalid:g} invalid rows were counted; reset_state() first")
        hist, squares, lists = (np.asarray(K.convert_to_numpy(v), dtype=np.float64) for v in self._sums)
        core = self._core
        return report(
            hist, core.num_items, core.ks, core.gamma, core.confidence, squares, float(lists), core.design
        )

    @property
    def _sums(self) -> tuple[Any, Any, Any]:
        return self._hist, self._squares, self._lists

    def get_config(self) -> dict[str, Any]:
        base = super().get_config()
        mine = {
            k: getattr(self, k) for k in ("num_items", "num_negatives", "ks", "gamma", "confidence", "ties")
        }
        return {**base, **mine}
