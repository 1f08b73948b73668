"""The rank-based metrics of ``rankstream.ignite``: all of them in one pass
(:class:`RankBasedMetrics`), and one class per rank family derived from the family registry.

Input of ``update``: ``(y_pred, y)`` or ``(y_pred, y, {"mask": m, "sample_weight": w})`` with
``y_pred`` scores ``(batch, num_candidates)`` and ``y`` either the index of the true candidate
``(batch,)`` or binary labels ``(batch, num_candidates)`` (every positive ranked against the
non-positives, the filtered setting). See `rankstream.core.ranks.kernel` for the definitions
and the state.

Each family of :data:`~rankstream.core.ranks.families.FAMILIES` gives one class
(:func:`rank_metric_class`): its name is PyKEEN's, the CamelCase of the family's result key
(``hits_at_k`` -> ``HitsAtK``), it takes ``k`` when the family has a cut-off, and its
``"adjusted"`` output is the family's re-indexed key. The registry does not carry a family's
docstring (the formula as a sentence) or its other public names (``GMR``): those are the two
declarations here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rankstream.adapters.ignite_derive import derived_class, docstring, from_arguments, parameters
from rankstream.adapters.ignite_metrics import (
    _CPU,
    FRAMEWORK_ARGS,
    FRAMEWORK_PARAMETERS,
    KernelMetric,
    _identity,
    _state_dtype,
)
from rankstream.core.ranks.families import FAMILIES, RankFamily
from rankstream.core.ranks.intervals import check_saved_statistics
from rankstream.core.ranks.kernel import KERNEL_METRICS, MEDIAN_BINS_PER_OCTAVE, MEDIAN_EXACT, RankKernel

#: the opening of each family's class docstring (the formula, PyKEEN's name, its conventions)
RANK_DOCS: dict[str, str] = {
    "hits": """\
        Hits@k: the (weighted) fraction of ranking tasks whose true candidate ranks at most
        ``k``, ``sum_i w_i [r_i <= k] / sum_i w_i`` (a float; a list ordered by ``k`` for a list
        of ``k``), PyKEEN's ``HitsAtK``.

        ``update`` takes ``(y_pred, y)`` or ``(y_pred, y, {"mask": m, "sample_weight": w})``:
        ``y_pred`` the scores ``(batch, num_candidates)``, ``y`` the index of the true candidate
        ``(batch,)`` or binary labels ``(batch, num_candidates)`` (every positive ranked against the
        non-positives, the filtered setting).
        """,
    "mrr": """\
        Mean reciprocal rank, ``sum_i w_i / r_i / sum_i w_i`` (MRR, PyKEEN's inverse harmonic
        mean rank: each positive ranked against the non-positives); ``update`` as in `HitsAtK`.
        """,
    "gmr": """\
        Geometric mean rank ``exp(sum_i w_i ln r_i / sum_i w_i)``; ``update`` as in `HitsAtK`.
        The expectation and variance are streamed from a cumulant series; a ``RuntimeWarning``
        says when its error bound exceeds 1e-3 (fewer than about ten tasks).
        """,
    "mr": """\
        Arithmetic mean rank ``sum_i w_i r_i / sum_i w_i``; ``update`` as in `HitsAtK`.
        """,
}
#: other public names of a family's class
RANK_ALSO: dict[str, tuple[str, ...]] = {"gmr": ("GMR",)}

#: the arguments of the one-family classes, described once (``{adjusted}``: the family's key)
RANK_ARGS: dict[str, str] = {
    "k": "the cut-off, a positive int or a list of them.",
    "rank_type": '``"realistic"`` (default: the mean of the two others), ``"optimistic"`` (tied '
    'candidates rank after the true one) or ``"pessimistic"`` (before it); ties are counted '
    "exactly, never broken at random.",
    "output": '``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking, from '
    "each task's number of candidates); ``\"adjusted\"`` (``(M - E) / (1 - E)``, PyKEEN's "
    '``{adjusted}``) or ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN\'s metric classes.',
    **FRAMEWORK_ARGS,
    "confidence": 'None (default) or a level such as 0.95: ``compute()`` then returns ``{"value", '
    '"stderr", "ci_low", "ci_high", "count"}`` (the engine gets ``name``, ``name_stderr``, '
    "``name_ci_low``, ``name_ci_high``, ``name_count``): the standard error of the mean over "
    "the ranking tasks and its Student-t interval at that level (`rankstream.core.ranks.kernel."
    'RankKernel`); with ``output="value"`` only.',
}
#: what a family's class adds to the description of ``confidence``
RANK_CONFIDENCE: dict[str, str] = {
    "gmr": " The ``stderr`` is that of the mean log rank (the log scale); ``ci_low`` and "
    "``ci_high`` are its interval mapped back by ``exp`` (the rank scale).",
}


class RankMetric(KernelMetric):
    """An ignite metric over a :class:`~rankstream.core.ranks.kernel.RankKernel`: a saved state
    without the sums of the standard errors loads into a metric with ``confidence``, its
    statistics unavailable (NaN) until reset; one with them is refused, saying so, by a metric
    without."""

    def _load_state_dict_per_rank(self, state_dict: Any) -> None:
        if isinstance(state_dict, Mapping):
            check_saved_statistics(self._kernel, state_dict.get("fields"), type(self).__name__, "state_dict")
        super()._load_state_dict_per_rank(state_dict)


def class_name(family: RankFamily) -> str:
    """PyKEEN's class name of a family: the CamelCase of its result key (``HitsAtK``)."""
    return "".join(part.capitalize() for part in family.key().split("_"))


def rank_signature(family: RankFamily) -> inspect.Signature:
    """``(self, [k,] rank_type, output, output_transform, device, skip_unrolling, *,
    confidence)``."""
    specs = [("rank_type", "realistic", "str"), ("output", "value", "str")]
    if family.takes_k:
        specs.insert(0, ("k", 10, "int | list[int]"))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *parameters(specs)]
    keyword = parameters([("confidence", None, "float | None")], inspect.Parameter.KEYWORD_ONLY)
    return inspect.Signature([*params, *FRAMEWORK_PARAMETERS, *keyword], return_annotation="None")


def _builder(family: RankFamily) -> Callable[[Any, dict[str, Any]], None]:
    def build(self: KernelMetric, arguments: dict[str, Any]) -> None:
        rank_type, output, device = arguments["rank_type"], arguments["output"], arguments["device"]
        if family.takes_k:
            self.k = arguments["k"]
        kernel = RankKernel(
            arguments.get("k", 1),
            rank_type,
            metrics=(family.name,),
            select=(family.name, output),
            k_name="k",
            state_dtype=_state_dtype(device),
            confidence=arguments["confidence"],
        )
        self.rank_type, self.output, self.confidence = rank_type, output, kernel.confidence
        KernelMetric.__init__(
            self, kernel, arguments["output_transform"], device, arguments["skip_unrolling"]
        )

    return build


def rank_metric_class(family: RankFamily, module: str = __name__) -> type[KernelMetric]:
    """The ignite metric class of one rank family (defined in ``module``)."""
    signature = rank_signature(family)
    described = {**RANK_ARGS, "output": RANK_ARGS["output"].replace("{adjusted}", family.adjusted_key())}
    described["confidence"] += RANK_CONFIDENCE.get(family.name, "")
    doc = docstring(RANK_DOCS[family.name], signature, described)
    return derived_class(class_name(family), RankMetric, module, signature, doc, _builder(family))


def _classes() -> dict[str, type[RankMetric]]:
    out: dict[str, type[RankMetric]] = {}
    for family in FAMILIES.values():
        cls = rank_metric_class(family)
        out.update(dict.fromkeys((cls.__name__, *RANK_ALSO.get(family.name, ())), cls))
    return out


#: the one-family classes by public name, other names included (``GMR``), in registry order
CLASSES: dict[str, type[RankMetric]] = _classes()
globals().update(CLASSES)  # where pickle looks a class up: this module, by its name


class RankBasedMetrics(RankMetric):
    """Every rank-based metric in one pass: ``compute()`` returns a dict (ignite flattens it
    into ``engine.state.metrics``) with, for ``key`` in ``hits_at_{k}`` (each ``k`` of ``ks``),
    ``inverse_harmonic_mean_rank`` (MRR), ``geometric_mean_rank`` and ``arithmetic_mean_rank``:
    ``key``, ``expected_key``, ``variance_key`` (under random ranking, from each task's number
    of candidates), ``adjusted_key`` (``(M - E) / (1 - E)``; ``..._index`` for the two rank
    means) and ``z_key`` (``(M - E) / sqrt(Var)``, larger is better), as PyKEEN's metric
    classes; plus ``adjusted_arithmetic_mean_rank`` (``M / E``),
    ``geometric_mean_rank_error_bound`` (relative, of the streamed GMR expectation), PyKEEN's
    ``variance`` and ``standard_deviation`` of the rank, ``median_rank`` and
    ``median_absolute_deviation`` (each with its absolute ``..._error_bound``, 0 below
    ``median_exact``), ``harmonic_mean_rank`` and ``inverse_{arithmetic,geometric,median}_rank``,
    and ``count`` (tasks with a positive weight). With ``confidence``, each family's value
    ``key`` (``hits_at_{k}``, ``inverse_harmonic_mean_rank``, ``geometric_mean_rank``,
    ``arithmetic_mean_rank``) has ``key_stderr``, ``key_ci_low`` and ``key_ci_high`` beside it.

    **PyKEEN's report in one metric.** ``rank_type=RANK_TYPES`` computes all three rank types
    from the same comparison passes, and ``sides=("head", "tail")`` keeps separate sums per side;
    the engine's output is then a mapping ``{"head": batch, "tail": batch}`` (each batch a
    mapping with ``y_pred``, ``y``, ``mask``, ``sample_weight`` or a tuple). Keys are then
    PyKEEN's ``"{side}.{rank_type}.{metric}"`` with the side ``"both"`` (all sides together).

    Args:
        ks: cut-offs of Hits@k.
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``, or a
            sequence of them (``rankstream.ignite.RANK_TYPES``: all three).
        output_transform, device, skip_unrolling: as in every ignite metric.
        sides: names of the sides (``("head", "tail")``), or None.
        prefix: prepended to every key (several instances on one engine).
        filtered_scores: PyKEEN's filtered scores: NaN and ``-inf`` scores are not candidates
            (without it a NaN score is an error and ``-inf`` the lowest score, a candidate).
        metrics: what is kept and reported, a subset of ``("hits", "mrr", "gmr", "mr",
            "dispersion", "median")`` (all by default): the four families, the rank's variance
            and standard deviation, the median rank and median absolute deviation.
        median_exact: ranks below it are counted exactly in the median's histogram (1024).
        median_bins_per_octave: log-spaced histogram bins per doubling of the rank above
            ``median_exact`` (64); the median's error bound follows from them.
        confidence: None (default), or a level such as 0.95: the state keeps the sums of the
            standard error of each family's mean over the ranking tasks (weighted as the mean),
            and the report adds ``key_stderr`` and the Student-t interval ``key_ci_low``,
            ``key_ci_high`` at that level (NaN with fewer than two tasks). The geometric mean
            rank's ``stderr`` is that of the mean log rank (the log scale), its interval that of
            the mean log rank mapped back by ``exp`` (the rank scale).

    The state's sums and their report are those of
    `rankstream.core.ranks.kernel.RankKernel`.
    """

    def __init__(
        self,
        ks: int | list[int] | tuple[int, ...] = (1, 3, 10),
        rank_type: str | Sequence[str] = "realistic",
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        sides: Sequence[str] | None = None,
        prefix: str = "",
        filtered_scores: bool = False,
        metrics: Sequence[str] = KERNEL_METRICS,
        median_exact: int = MEDIAN_EXACT,
        median_bins_per_octave: int = MEDIAN_BINS_PER_OCTAVE,
        confidence: float | None = None,
    ) -> None:
        kernel = from_arguments(RankKernel, locals(), state_dtype=_state_dtype(device))
        self.ks, self.rank_type, self.sides = kernel.ks, kernel.rank_type, kernel.sides
        self.confidence = kernel.confidence
        super().__init__(kernel, output_transform, device, skip_unrolling, prefix)
