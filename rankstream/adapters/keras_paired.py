"""``rankstream.keras.PairedComparison``: rankers compared on the same lists inside ``fit`` and
``evaluate``, over the core :class:`~rankstream.core.lists.paired.PairedComparison`.

Keras hands a metric one ``y_pred``: here the rankers' scores stacked ``(batch, R, list_size)``
in the order of ``rankers``, so a model whose output is every ranker's scores is compared in one
pass. ``result()`` is the core's flat mapping, one key of the logs each
(``"ndcg@10/model-vs-popularity/p_value"``: Keras takes ``/`` in log keys, as TensorBoard takes
it for a scope).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.adapters.keras_args import Seed
from rankstream.adapters.keras_inputs import checked_tensor, keras_inputs
from rankstream.adapters.keras_lifecycle import KernelMetric, add_to, as_result, batch_sums, unconverted
from rankstream.adapters.keras_metrics import COLLECTION_DEFAULTS, keras_rs_conventions, seed_generator
from rankstream.core.backends.keras_ops import is_tracing
from rankstream.core.inputs import _shape, known_rank
from rankstream.core.lists.paired import PairedComparison as PairedKernel
from rankstream.core.uncertainty import DEFAULT_LEVEL

__all__ = ["PairedComparison"]


@keras.saving.register_keras_serializable(package="rankstream")
class PairedComparison(KernelMetric):
    """Paired comparison of two or more rankers on the same lists, for several list metrics:
    ``PairedComparison(["ndcg@10", "map@10"], rankers=["model", "popularity"])``.

    ``y_pred`` is the rankers' scores stacked ``(batch, len(rankers), list_size)`` in the order
    of ``rankers`` (one model output holding every ranker's scores); ``y_true`` the labels
    ``(batch, list_size)`` or ``{"labels": y, "mask": m}``, shared by every ranker; labels
    ``< 0``, NaN and -inf are padding, +inf is bad data. ``sample_weight`` is a scalar, per
    list or per item, as in keras-rs (per-item weights collapsed into list weights as keras-rs
    does). Each update ranks the batch once per ranker and adds, per metric name and pair of
    rankers, the sums of the per-list differences ``d = v_a - v_b`` (constant size; merged by
    distribution strategies as any metric's sums).

    ``result()`` is a dict, each key one key of the logs (after ``prefix``): per name each
    ranker's mean (``"ndcg@10/model"``), the number of lists compared (``"ndcg@10/count"``),
    and per pair ``"ndcg@10/model-vs-popularity/{diff,stderr,ci_low,ci_high,t,p_value}"``: the
    weighted mean difference ``m = sum(w d) / sum(w)``, its ratio-estimator standard error
    ``sqrt(n / (n - 1) * sum(w^2 (d - m)^2)) / sum(w)``, Student's t interval
    ``m -+ t_{(1 + confidence) / 2, n - 1} * stderr``, the paired t statistic ``m / stderr``
    (``scipy.stats.ttest_rel`` for unit weights) and its two-sided p-value; with three or more
    rankers also ``p_holm`` and ``p_bonferroni`` (adjusted over the pairs of one name). See
    `rankstream.core.lists.paired` for what the numbers assume.

    Where the state can be read back (eager: the final logs of ``fit`` and ``evaluate``, and
    every step on the torch backend), ``result()`` computes on the host in float64 with scipy's
    ``t`` distribution. Inside a compiled step (``jit``: JAX, TensorFlow graphs) it computes with
    ``keras.ops`` in the state's dtype: the means, ``diff``, ``stderr``, ``t`` and the interval
    (the ``t`` quantile as ``t_quantile_xp`` gives it), while ``p_value``, ``p_holm`` and
    ``p_bonferroni`` are NaN (the ``t`` tail probability needs scipy): the per-step logs of a
    progress bar show NaN there, the epoch's final logs the p-values.

    Each metric takes its class's defaults here, as `ListMetrics` (keras-rs's conventions).

    Args:
        metrics: the metric names, e.g. ``["ndcg@10", "map@5"]`` (as `ListMetrics`), each with
            one cut-off.
        rankers: the rankers' names (two or more, distinct, without ``/`` or ``-vs-``), in the
            order of the second axis of ``y_pred``. A difference is the earlier minus the later.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, for all.
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"paired_comparison"``).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is compared for no ranker), for all.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
        prefix: prepended to every key (two comparisons in one model).
        confidence: the confidence level of the intervals, in (0, 1) (default 0.95).
    """

    _config = ("metrics", "rankers", "shuffle_ties", "seed", "empty", "prefix", "confidence")

    def __init__(self, metrics: list[str], rankers: list[str], shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = "paired_comparison", dtype: Any = None, *, empty: str = "zero",
                 state_dtype: str | None = None, prefix: str = "",
                 confidence: float = DEFAULT_LEVEL) -> None:  # fmt: skip
        generator = seed_generator(shuffle_ties, seed)
        kernel = PairedKernel(
            metrics, rankers, COLLECTION_DEFAULTS, confidence=confidence, empty=empty,
            **keras_rs_conventions(shuffle_ties),
        )  # fmt: skip
        self.metrics, self.rankers, self.confidence = kernel.metrics, kernel.rankers, kernel.confidence
        self.shuffle_ties, self.seed, self.empty = shuffle_ties, seed, empty
        super().__init__(kernel, name, dtype, generator, state_dtype, prefix)

    # -- update --------------------------------------------------------------------------
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Add one batch; on error the state (and the random stream) is left as it was.
        ``y_pred`` the stacked scores ``(batch, len(rankers), list_size)``, ``y_true`` the
        labels ``(batch, list_size)`` or ``{"labels": y, "mask": m}``, ``sample_weight`` scalar,
        ``(batch,)``, ``(batch, 1)`` or ``(batch, list_size)``."""
        y_pred = checked_tensor(y_pred, "y_pred")
        shape = _shape(known_rank(y_pred, "y_pred"))
        r = len(self.rankers)
        if len(shape) != 3 or shape[1] != r:
            raise ValueError(
                f"y_pred must be the rankers' scores stacked (batch, {r}, list_size) in the order of "
                f"rankers={self.rankers}, got shape {shape}"
            )
        y_pred = K.cast(y_pred, self.dtype)
        # the labels, mask and weights read (and checked against one ranker's scores) as every
        # list metric reads them
        _, y, mask, weight = keras_inputs(y_true, y_pred[:, 0], sample_weight, self.dtype, False)
        sums = batch_sums(self._kernel, self._runtime, self._seed_generator, y_pred, y, mask, weight)
        if sums is None:  # no list: nothing changes, the random stream neither
            return
        for i, field in enumerate(self._fields):
            comp = self._compensations[i] if self._compensated else None
            add_to(self._totals[i], sums[field], comp)

    # -- result --------------------------------------------------------------------------
    def _result(self) -> Any:
        totals = self.totals()
        if not is_tracing(next(iter(totals.values()))):  # eager: scipy's t on the host, float64
            values = self._kernel.compute(self._sums(), np)
        else:
            values = self._kernel.compute(totals, K)  # p-values NaN: scipy's tail is host-only
        return as_result(values, self.dtype, self._prefix)

    def result(self) -> Any:
        """The flat dict of the comparison (keys as the class docstring lists them, ``prefix``
        on every key); p-values NaN inside a compiled step (see the class docstring)."""
        return unconverted(self._result)()
