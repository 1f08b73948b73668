"""Keras 3 rank-based metrics, streamed from scores: one family each (``HitsAtK``,
``InverseHarmonicMeanRank``, ``GeometricMeanRank``, ``ArithmeticMeanRank``, PyKEEN's), or all of
them in one pass (``RankBasedMetrics``), over the streamed kernel
(:class:`~rankstream.core.ranks.kernel.RankKernel`). A float32 state keeps fewer GMR cumulants
(weights ~1e-4..1e4)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import keras

from rankstream.adapters.keras_args import args_section, describe
from rankstream.adapters.keras_lifecycle import KernelMetric
from rankstream.adapters.keras_state import resolve_state_dtype
from rankstream.core.inputs import check_k
from rankstream.core.ranks.intervals import check_saved_statistics
from rankstream.core.ranks.kernel import RankKernel

#: the inputs of every rank-based metric
TARGETS = """\
``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row."""


#: the ``confidence`` argument of the one-family classes (``{scale}``: the GMR's note)
CONFIDENCE = (
    "None (default) or a level such as 0.95: ``result()`` is then ``{{name: value, name_stderr, "
    "name_ci_low, name_ci_high, name_count}}`` (so the logs show them): the standard error of the "
    "mean over the ranking tasks and its Student-t interval at that level, NaN with fewer than "
    'two tasks; with ``output="value"`` only.{scale}'
)
#: what the geometric mean rank adds to it
GMR_SCALE = (
    " The ``stderr`` is that of the mean log rank (the log scale); ``ci_low`` and ``ci_high`` "
    "its interval mapped back by ``exp`` (the rank scale)."
)


def _rank_kernel(ks: Any, rank_type: Any, state_dtype: str | None, **kw: Any) -> RankKernel:
    return RankKernel(ks, rank_type, state_dtype=resolve_state_dtype(state_dtype), **kw)


def _rank_doc(opening: str, short: str, adjusted: str = "", k: bool = False, scale: str = "") -> str:
    """A single-family class's docstring: ``opening``, the inputs, and its ``Args:``."""
    params = (["k"] if k else []) + ["rank_type", "output", "name", "dtype", "state_dtype"]
    variants = {"k": "rank", "name": "rank"}
    args = [(p, describe(p, variants.get(p), short=short, adjusted=adjusted)) for p in params]
    args.append(("confidence", CONFIDENCE.format(scale=scale)))
    return f"{inspect.cleandoc(opening)}\n\n{TARGETS}\n\n{args_section(args)}\n"


class _RankMetric(KernelMetric):
    """A Keras metric over a :class:`~rankstream.core.ranks.kernel.RankKernel`: a saved state
    without the sums of the standard errors loads into a metric with ``confidence``, its
    statistics unavailable (NaN) until reset; one with them is refused, saying so, by a metric
    without."""

    _ranks = True
    _options: ClassVar[dict[str, Any]] = {"confidence": None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping):
            check_saved_statistics(self.kernel, state.get("fields"), type(self).__name__, "state")
        super().load_state_dict(state)


class _OneRankMetric(_RankMetric):
    """One rank family (``_family``, a key of the family registry) and one of its outputs."""

    _family = _short = ""
    _config = ("rank_type", "output")

    def __init__(self, rank_type: str = "realistic", output: str = "value", name: str | None = None,
                 dtype: Any = None, *, state_dtype: str | None = None,
                 confidence: float | None = None) -> None:  # fmt: skip
        fam, k = self._family, getattr(self, "k", 1)
        kernel = _rank_kernel(
            k, rank_type, state_dtype, metrics=(fam,), select=(fam, output), k_name="k", confidence=confidence
        )
        short = self._short.format(k=k)
        self.rank_type, self.output, self.confidence = rank_type, output, kernel.confidence
        name = name or (short if output == "value" else f"{output}_{short}")
        super().__init__(kernel, name=name, dtype=dtype, state_dtype=state_dtype)


@keras.saving.register_keras_serializable(package="rankstream")
class HitsAtK(_OneRankMetric):
    __doc__ = _rank_doc(
        """Hits@k: the (weighted) fraction of ranking tasks whose true candidate ranks at most
        ``k``, ``sum_i w_i [r_i <= k] / sum_i w_i``, PyKEEN's ``HitsAtK``.""",
        "hits_at_{k}",
        k=True,
    )
    _family, _short = "hits", "hits_at_{k}"
    _config = ("k", "rank_type", "output")

    def __init__(self, k: int = 10, rank_type: str = "realistic", output: str = "value",
                 name: str | None = None, dtype: Any = None, *,
                 state_dtype: str | None = None, confidence: float | None = None) -> None:  # fmt: skip
        self.k = check_k(k, allow_none=False, hint=" (for several k use RankBasedMetrics(ks=...))")
        super().__init__(rank_type, output, name, dtype, state_dtype=state_dtype, confidence=confidence)


@keras.saving.register_keras_serializable(package="rankstream")
class InverseHarmonicMeanRank(_OneRankMetric):
    __doc__ = _rank_doc(
        """Mean reciprocal rank of the true candidates, ``sum_i w_i / r_i / sum_i w_i`` (PyKEEN's
        inverse harmonic mean rank: each positive ranked against the non-positives).""",
        "mrr",
    )
    _family, _short = "mrr", "mrr"


@keras.saving.register_keras_serializable(package="rankstream")
class GeometricMeanRank(_OneRankMetric):
    __doc__ = _rank_doc(
        """Geometric mean rank ``exp(sum_i w_i ln r_i / sum_i w_i)``. The expectation is streamed
        from a cumulant series whose error bound `RankBasedMetrics` reports.""",
        "gmr",
        ", PyKEEN's adjusted GMR index",
        scale=GMR_SCALE,
    )
    _family, _short = "gmr", "gmr"


@keras.saving.register_keras_serializable(package="rankstream")
class ArithmeticMeanRank(_OneRankMetric):
    __doc__ = _rank_doc(
        "Arithmetic mean rank ``sum_i w_i r_i / sum_i w_i``.",
        "mean_rank",
        ", PyKEEN's adjusted mean rank index",
    )
    _family, _short = "mr", "mean_rank"


@keras.saving.register_keras_serializable(package="rankstream")
class RankBasedMetrics(_RankMetric):
    """Every rank-based metric in one pass: ``result()`` is a dict with the keys and numbers of
    `rankstream.ignite.RankBasedMetrics` (values, expectations, variances, adjusted and z forms,
    rank variance/std, median rank and MAD with error bounds, inverse forms, ``count``); Keras
    flattens it into the logs under each key.

    ``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
    labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
    the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row.

    Args:
        ks: the cut-offs of Hits@k, a positive int or a sequence of them.
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``, or a
            sequence of them (``RANK_TYPES``: all three from the same comparison passes); keys
            are then PyKEEN's ``"{side}.{rank_type}.{metric}"``.
        name: the metric's name (default ``"rank_based"``).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        prefix: prepended to every key (two collections in one model).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
        sides: None, or names of sides (``("head", "tail")``): ``y_pred``, ``y_true`` and
            ``sample_weight`` are then mappings of sides, keys PyKEEN's as above.
        filtered_scores: PyKEEN's filtered scores: NaN and -inf scores are not candidates.
        confidence: None (default), or a level such as 0.95: the state keeps the sums of the
            standard error of each family's mean over the ranking tasks (weighted as the mean),
            and the result adds ``key_stderr`` and the Student-t interval ``key_ci_low``,
            ``key_ci_high`` beside each family's value ``key`` (NaN with fewer than two tasks).
            The geometric mean rank's ``stderr`` is that of the mean log rank (the log scale),
            its interval that of the mean log rank mapped back by ``exp`` (the rank scale).
    """

    _config = ("ks", "rank_type", "prefix", "sides", "filtered_scores")

    def __init__(self, ks: int | Sequence[int] = (1, 3, 10), rank_type: str | Sequence[str] = "realistic",
                 name: str | None = "rank_based", dtype: Any = None, *, prefix: str = "",
                 state_dtype: str | None = None, sides: Sequence[str] | None = None,
                 filtered_scores: bool = False, confidence: float | None = None) -> None:  # fmt: skip
        kernel = _rank_kernel(
            ks, rank_type, state_dtype, sides=sides, filtered_scores=filtered_scores, confidence=confidence
        )
        super().__init__(kernel, name=name, dtype=dtype, state_dtype=state_dtype, prefix=prefix)
        self.ks, self.rank_type, self.sides = list(kernel.ks), rank_type, sides
        self.filtered_scores, self.confidence = filtered_scores, kernel.confidence


GMR = GeometricMeanRank
