r"""PyKEEN-compatible rank-based metrics over arrays of ranks.

The classes mirror the public API of ``pykeen.metrics.ranking`` (1.11.1): calling a metric on
ranks (optionally with the number of candidates and per-task weights) gives a float, and
``expected_value`` / ``variance`` / ``std`` give the moments under random ranking
(``r_i ~ U{1..N_i}``, tasks independent).  Closed forms are O(1) per task
(:mod:`rankstream.core.ranks.closed_forms`), where PyKEEN builds prefix sums up to ``max N``.

Base metrics (weights are scaling factors as in :func:`numpy.average`, ``W = sum w_i``):

* :class:`HitsAtK`: ``sum_i w_i I[r_i <= k] / W``
* :class:`InverseHarmonicMeanRank` (:data:`MRR`): ``sum_i w_i / r_i / W``
* :class:`GeometricMeanRank` (:data:`GMR`): ``exp(sum_i w_i ln r_i / W)``
* :class:`ArithmeticMeanRank` (:data:`MeanRank`, :data:`AMR`): ``sum_i w_i r_i / W``

Chance-adjusted metrics are affine maps ``M* = scale * M + offset`` whose coefficients depend
only on the candidate counts and weights:

* re-indexed (``Adjusted*``): ``(M - E[M]) / (1 - E[M])``; 1 is the best value of every base
  metric here (Hits@k and MRR reach 1, GMR and mean rank reach 1 from above), so the result is
  1 at the optimum, 0 in expectation, and increasing;
* z-scores (``Z*``): ``(M - E[M]) / sqrt(Var[M])``, negated for decreasing base metrics;
* expectation-normalised :class:`AdjustedArithmeticMeanRank`: ``M / E[M]``.

The base metrics' values, directions, keys and moments, and the affine coefficients of the
chance-adjusted ones, come from the rank-family registry
(:mod:`rankstream.core.ranks.families`), which the streamed kernel reads too.

A resolver turns names into metric objects: :func:`resolve` (alias :func:`get_metric`) knows
class names, PyKEEN's synonyms and keys, and ``name@k`` forms (``"hits@10"``, ``"h@3"``,
``"hits_at_5"``); :func:`register` adds names or ``@k`` prefixes (``register("map@", f)`` makes
``resolve("map@5")`` call ``f(5)``).

.. note::
    As in PyKEEN, the synonym ``"amr"`` names the *adjusted* arithmetic mean rank
    (:class:`AdjustedArithmeticMeanRank`), while the Python alias :data:`AMR` is the plain
    :class:`ArithmeticMeanRank`; ``resolve("mr")`` / ``resolve("mean_rank")`` give the latter.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from rankstream.core.ranks import families as _family
from rankstream.core.ranks.evaluation import (
    AffineTransformationParameters,
    MetricMetadata,
    NoClosedFormError,
    RandomRankingMoments,
    ValueRange,
    affine_parameters,
    evaluate_family,
    prepare_inputs,
    validate_moment_inputs,
)
from rankstream.core.ranks.families import (
    RANK_OPTIMISTIC,
    RANK_PESSIMISTIC,
    RANK_REALISTIC,
    RANK_TYPES,
    RankFamily,
)
from rankstream.core.ranks.names import _EXACT as _EXACT  # the registry's tables (tests clean them up)
from rankstream.core.ranks.names import _PREFIX as _PREFIX
from rankstream.core.ranks.names import (
    camel_to_snake,
    check_k,
    lookup,
    metric_names,
    register,
    register_classes,
)
from rankstream.core.sampled_state import sampled_rank_metrics

__all__ = [
    "GMR",
    "MRR",
    "RANK_OPTIMISTIC",
    "RANK_PESSIMISTIC",
    "RANK_REALISTIC",
    "RANK_TYPES",
    "AdjustedArithmeticMeanRank",
    "AdjustedArithmeticMeanRankIndex",
    "AdjustedGeometricMeanRankIndex",
    "AdjustedHitsAtK",
    "AdjustedInverseHarmonicMeanRank",
    "AffineTransformationParameters",
    "ArithmeticMeanRank",
    "DerivedRankBasedMetric",
    "ExpectationNormalizedMetric",
    "GeometricMeanRank",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "MeanRank",
    "NoClosedFormError",
    "RankBasedMetric",
    "ReindexedMetric",
    "ValueRange",
    "ZArithmeticMeanRank",
    "ZGeometricMeanRank",
    "ZHitsAtK",
    "ZInverseHarmonicMeanRank",
    "ZMetric",
    "get_metric",
    "metric_names",
    "register",
    "resolve",
    "sampled_rank_metrics",
]


class RankBasedMetric(RandomRankingMoments, MetricMetadata, ABC):
    """A metric computed from the ranks of the true items of independent ranking tasks.

    Its metadata are PyKEEN's (:class:`~rankstream.core.ranks.evaluation.MetricMetadata`:
    ``name``, ``synonyms``, ``value_range``, ``increasing``, ``get_link()``, ...). Its moments
    under random ranking (:meth:`expected_value`, :meth:`variance`, :meth:`std`) come from
    closed forms where the metric has them, else from sampled ranks
    (:meth:`get_sampled_values`, :meth:`numeric_expected_value`, :meth:`numeric_variance`, and
    their bootstrap intervals)."""

    #: whether ``__call__`` needs the number of candidates of each task
    needs_candidates: ClassVar[bool] = False
    #: the rank types (optimistic / realistic / pessimistic) the metric may be applied to
    supported_rank_types: ClassVar[Collection[str]] = RANK_TYPES
    #: the rank family a base metric evaluates (:mod:`rankstream.core.ranks.families`)
    family: ClassVar[RankFamily | None] = None

    # -- metadata ---------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """Key for result dictionaries (as in PyKEEN): the family's key for the base metrics
        (``hits_at_<k>``, ``inverse_harmonic_mean_rank``, ...), else the class name in snake
        case."""
        if self.family is not None:
            return self.family.key(getattr(self, "k", None))
        return camel_to_snake(type(self).__name__)

    def _takes_weights(self) -> bool:
        """Whether ``__call__`` takes weights (a derived metric's base decides)."""
        return self.supports_weights

    # -- evaluation -------------------------------------------------------------------------
    @abstractmethod
    def _evaluate(
        self, ranks: np.ndarray, num_candidates: np.ndarray | None, weights: np.ndarray | None
    ) -> np.ndarray:
        """The metric for each row of ``ranks`` (shape ``(S, num_tasks)``) -> shape ``(S,)``."""

    def __call__(self, ranks: Any, num_candidates: Any = None, weights: Any = None) -> float:
        """Evaluate the metric on ranks (any shape; ``num_candidates``/``weights`` alike)."""
        if weights is not None and not self._takes_weights():
            raise ValueError(f"{type(self).__name__} does not support weights, got weights")
        if self.needs_candidates and num_candidates is None:
            raise ValueError(f"{type(self).__name__} requires num_candidates, got None")
        inp = prepare_inputs(ranks, num_candidates, weights)
        return float(self._evaluate(inp.ranks[None, :], inp.num_candidates, inp.weights)[0])


# ==========================================================================================
# base metrics

#: where the metrics are described (PyKEEN's links): its evaluation tutorial, the paper of the
#: chance-adjusted metrics (Hoyt et al. 2022) and that of the adjusted mean rank (Berrendorf et
#: al. 2020)
_EVALUATION = "https://pykeen.readthedocs.io/en/stable/tutorial/understanding_evaluation.html"
_ADJUSTED = "https://arxiv.org/abs/2203.07544"
_MEAN_RANK_INDEX = "https://arxiv.org/abs/2002.06914"


class _FamilyMetric(RankBasedMetric):
    """A base metric of the rank family: value, direction, key and closed-form moments all
    read from its :class:`~rankstream.core.ranks.families.RankFamily`."""

    family: ClassVar[RankFamily]
    supports_weights = True
    closed_expectation = True
    closed_variance = True

    def _k(self) -> int | None:
        return getattr(self, "k", None) if self.family.takes_k else None

    def _evaluate(
        self, ranks: np.ndarray, num_candidates: np.ndarray | None, weights: np.ndarray | None
    ) -> np.ndarray:
        return evaluate_family(self.family, ranks, weights, self._k())

    def _moment(
        self, moment: str, num_candidates: Any, num_samples: int | None, weights: Any, kwargs: dict[str, Any]
    ) -> float:
        closed_form = self.family.expectation if moment == "expectation" else self.family.variance
        return closed_form(num_candidates, weights, k=self._k())


class HitsAtK(_FamilyMetric):
    r"""Hits@k: the (weighted) fraction of tasks whose true item is ranked at most ``k``.

    ``E = sum_i w_i p_i / W`` and ``Var = sum_i w_i^2 p_i (1 - p_i) / W^2`` with
    ``p_i = min(k, N_i) / N_i``.
    """

    name = "Hits @ K"
    link = f"{_EVALUATION}#hits-k"
    description = "Fraction of ranking tasks whose true item is ranked within the top k."
    value_range = ValueRange(lower=0, lower_inclusive=True, upper=1, upper_inclusive=True)
    synonyms: ClassVar[Collection[str]] = ("h@k", "hits@k", "h@", "hits@", "hits_at_", "h_at_")
    family = _family.HITS
    increasing = _family.HITS.increasing

    def __init__(self, k: int = 10) -> None:
        self.k = check_k(k)

    def iter_extra_repr(self) -> Iterable[str]:
        yield f"k={self.k}"


class InverseHarmonicMeanRank(_FamilyMetric):
    r"""Mean reciprocal rank: ``sum_i w_i / r_i / W`` (the inverse harmonic mean rank).

    ``E[1/r] = H_N / N`` and ``Var[1/r] = H2_N / N - (H_N / N)^2`` per task.
    """

    name = "Mean Reciprocal Rank (MRR)"
    link = "https://en.wikipedia.org/wiki/Mean_reciprocal_rank"
    description = "Mean of the reciprocal ranks, i.e. the inverse of the harmonic mean rank."
    value_range = ValueRange(lower=0, lower_inclusive=False, upper=1, upper_inclusive=True)
    synonyms: ClassVar[Collection[str]] = ("mean_reciprocal_rank", "mrr")
    family = _family.MRR
    increasing = _family.MRR.increasing


class GeometricMeanRank(_FamilyMetric):
    r"""Geometric mean rank ``exp(sum_i w_i ln r_i / W)``.

    With ``a_i = w_i / W``: ``E = exp(sum_i [ln S_{a_i}(N_i) - ln N_i])`` (a product of
    ``E[r_i^{a_i}]``, not a difference of exponentials) and
    ``Var = E^2 expm1(sum_i [ln S_{2a_i}(N_i) - 2 ln S_{a_i}(N_i) + ln N_i])``,
    ``S_a(N) = sum_{j<=N} j^a``.
    """

    name = "Geometric Mean Rank (GMR)"
    link = _ADJUSTED
    description = "Geometric mean of the ranks."
    value_range = ValueRange(lower=1, lower_inclusive=True, upper=math.inf)
    synonyms: ClassVar[Collection[str]] = ("gmr",)
    family = _family.GMR
    increasing = _family.GMR.increasing


class ArithmeticMeanRank(_FamilyMetric):
    r"""(Arithmetic) mean rank ``sum_i w_i r_i / W``.

    ``E[r] = (N + 1) / 2`` and ``Var[r] = (N^2 - 1) / 12`` per task.
    """

    name = "Mean Rank (MR)"
    link = f"{_EVALUATION}#mean-rank"
    description = "Arithmetic mean of the ranks."
    value_range = ValueRange(lower=1, lower_inclusive=True, upper=math.inf)
    synonyms: ClassVar[Collection[str]] = ("mean_rank", "mr")
    family = _family.MR
    increasing = _family.MR.increasing


# ==========================================================================================
# derived (chance-adjusted) metrics


class DerivedRankBasedMetric(RankBasedMetric):
    r"""An affine transform ``M* = scale * M + offset`` of a base metric.

    ``scale`` and ``offset`` depend on the candidate counts and weights only, so
    ``E[M*] = scale E[M] + offset`` and ``Var[M*] = scale^2 Var[M]``.
    """

    #: the base metric class (None on the generic transforms: PyKEEN's default, the MRR)
    base_cls: ClassVar[type[RankBasedMetric] | None] = None
    needs_candidates = True
    #: moments that are constants by construction (``"expectation"`` / ``"variance"`` -> value);
    #: the others follow from the base metric's
    _constant_moments: ClassVar[Mapping[str, float]] = {}

    def __init_subclass__(cls, base: type[RankBasedMetric] | None = None, **kwargs: Any) -> None:
        """``class X(ZMetric, base=HitsAtK)`` sets ``base_cls`` and takes the base's
        ``supports_weights`` (as PyKEEN's classes declare them)."""
        super().__init_subclass__(**kwargs)
        if base is not None:
            cls.base_cls = base
            cls.supports_weights = base.supports_weights

    def __init__(self, base_cls: type[RankBasedMetric] | str | None = None, **kwargs: Any) -> None:
        """The transform of ``base_cls(**kwargs)``, as PyKEEN's ``DerivedRankBasedMetric``.

        Args:
            base_cls: the base metric: None (the class's own, e.g. `HitsAtK` for
                `AdjustedHitsAtK`; the MRR for the generic `ZMetric`, `ReindexedMetric` and
                `ExpectationNormalizedMetric`, as in PyKEEN), a `RankBasedMetric` subclass, or
                a name `resolve` knows.
            **kwargs: the base metric's constructor arguments (``k`` for Hits@k; none for
                MRR, GMR and mean rank), forwarded as they are.
        """
        if base_cls is None:
            self.base = (self.base_cls or InverseHarmonicMeanRank)(**kwargs)
        elif isinstance(base_cls, str):
            self.base = resolve(base_cls, **kwargs)
        else:
            self.base = base_cls(**kwargs)

    @property
    def k(self) -> int:
        """The base metric's ``k`` (for Hits@k based metrics)."""
        try:
            return self.base.k  # type: ignore[attr-defined]
        except AttributeError:
            raise AttributeError(f"{type(self).__name__} has no k (base {self.base!r})") from None

    def _takes_weights(self) -> bool:
        return self.base._takes_weights()

    @abstractmethod
    def get_coefficients(self, num_candidates: Any, weights: Any = None) -> AffineTransformationParameters:
        """``(scale, offset)`` of the transform for these candidate counts and weights."""

    def adjust(self, base_metric_result: Any, num_candidates: Any, weights: Any = None) -> Any:
        """Apply the transform to a base metric value (or array of values)."""
        params = self.get_coefficients(num_candidates=num_candidates, weights=weights)
        return params.scale * base_metric_result + params.offset

    def _evaluate(
        self, ranks: np.ndarray, num_candidates: np.ndarray | None, weights: np.ndarray | None
    ) -> np.ndarray:
        return self.adjust(self.base._evaluate(ranks, num_candidates, weights), num_candidates, weights)

    def _sampled_values(
        self, num_candidates: Any, num_samples: int, weights: Any, generator: Any, memory_intense: bool
    ) -> np.ndarray:
        values = self.base.get_sampled_values(
            num_candidates=num_candidates,
            num_samples=num_samples,
            weights=weights,
            generator=generator,
            memory_intense=memory_intense,
        )
        return self.adjust(values, num_candidates, weights)

    def _moment(
        self, moment: str, num_candidates: Any, num_samples: int | None, weights: Any, kwargs: dict[str, Any]
    ) -> float:
        if moment in self._constant_moments:
            validate_moment_inputs(num_candidates, weights)
            return self._constant_moments[moment]
        base_kwargs = dict(num_candidates=num_candidates, num_samples=num_samples, weights=weights, **kwargs)
        if moment == "expectation":
            return float(self.adjust(self.base.expected_value(**base_kwargs), num_candidates, weights))
        scale = self.get_coefficients(num_candidates=num_candidates, weights=weights).scale
        return scale * scale * self.base.variance(**base_kwargs)


class ReindexedMetric(DerivedRankBasedMetric):
    r"""``(M - E[M]) / (1 - E[M])``: 0 in expectation, 1 at the optimum, larger is better."""

    increasing = True
    supported_rank_types: ClassVar[Collection[str]] = (RANK_REALISTIC,)
    #: at most 1 (the optimum); the lower bound depends on the data
    value_range = ValueRange(lower=None, lower_inclusive=False, upper=1, upper_inclusive=True)
    tight_lower: ClassVar[str | None] = r"\frac{-E[f]}{1-E[f]}"
    closed_expectation = True
    _constant_moments: ClassVar[Mapping[str, float]] = {"expectation": 0.0}

    def get_coefficients(self, num_candidates: Any, weights: Any = None) -> AffineTransformationParameters:
        mean = self.base.expected_value(num_candidates=num_candidates, weights=weights)
        return affine_parameters(_family.reindexed_coefficients(mean))


class ZMetric(DerivedRankBasedMetric):
    r"""``(M - E[M]) / sqrt(Var[M])``, negated for decreasing base metrics (larger is better)."""

    increasing = True
    supported_rank_types: ClassVar[Collection[str]] = (RANK_REALISTIC,)
    value_range = ValueRange(lower=None, upper=None)
    closed_expectation = True
    closed_variance = True
    _constant_moments: ClassVar[Mapping[str, float]] = {"expectation": 0.0, "variance": 1.0}

    def get_coefficients(self, num_candidates: Any, weights: Any = None) -> AffineTransformationParameters:
        mean = self.base.expected_value(num_candidates=num_candidates, weights=weights)
        std = self.base.std(num_candidates=num_candidates, weights=weights)
        return affine_parameters(_family.z_coefficients(mean, std, self.base.increasing))


class ExpectationNormalizedMetric(DerivedRankBasedMetric):
    r"""``M / E[M]``: 1 in expectation."""

    closed_expectation = True
    _constant_moments: ClassVar[Mapping[str, float]] = {"expectation": 1.0}

    def get_coefficients(self, num_candidates: Any, weights: Any = None) -> AffineTransformationParameters:
        mean = self.base.expected_value(num_candidates=num_candidates, weights=weights)
        return affine_parameters(_family.normalized_coefficients(mean))


# the constructor of the metrics derived from Hits@k (``k`` first, default 10, as PyKEEN's)
def _at_k_init(self, k: int = 10, base_cls: type[RankBasedMetric] | str | None = None) -> None:
    DerivedRankBasedMetric.__init__(self, base_cls=base_cls, k=k)


# each family's derived metrics, in the registry's order


class AdjustedHitsAtK(ReindexedMetric, base=HitsAtK):
    """Re-indexed Hits@k, ``(H - E[H]) / (1 - E[H])``.

    As in PyKEEN, ``key`` is ``"adjusted_hits_at_k"`` whatever ``k`` is.
    """

    name = "Adjusted Hits at K"
    link = _ADJUSTED
    description = "Hits@k re-indexed so that random ranking scores 0 and perfect ranking 1."
    synonyms: ClassVar[Collection[str]] = (
        "ahk",
        "ah@k",
        "ahits@k",
        "ah@",
        "ahits@",
        "ahits_at_",
        "ah_at_",
        "adjusted_hits_at_",
    )
    __init__ = _at_k_init


class ZHitsAtK(ZMetric, base=HitsAtK):
    """z-scored Hits@k (``key`` is ``"z_hits_at_k"`` whatever ``k`` is, as in PyKEEN)."""

    name = "z-Hits at K"
    link = _ADJUSTED
    description = "Hits@k standardised by its mean and standard deviation under random ranking."
    synonyms: ClassVar[Collection[str]] = ("z_hits_at_", "zahk")
    __init__ = _at_k_init


class AdjustedInverseHarmonicMeanRank(ReindexedMetric, base=InverseHarmonicMeanRank):
    """Re-indexed MRR, ``(MRR - E[MRR]) / (1 - E[MRR])``."""

    name = "Adjusted Inverse Harmonic Mean Rank"
    link = _ADJUSTED
    description = "MRR re-indexed so that random ranking scores 0 and perfect ranking 1."
    synonyms: ClassVar[Collection[str]] = (
        "amrr",
        "aihmr",
        "adjusted_mrr",
        "adjusted_mean_reciprocal_rank",
    )


class ZInverseHarmonicMeanRank(ZMetric, base=InverseHarmonicMeanRank):
    """z-scored MRR."""

    name = "z-Mean Reciprocal Rank (zMRR)"
    link = _ADJUSTED
    description = "MRR standardised by its mean and standard deviation under random ranking."
    synonyms: ClassVar[Collection[str]] = ("zmrr", "zihmr")


class AdjustedGeometricMeanRankIndex(ReindexedMetric, base=GeometricMeanRank):
    """Re-indexed GMR, ``(GMR - E[GMR]) / (1 - E[GMR])`` (1 is the best GMR)."""

    name = "Adjusted Geometric Mean Rank Index (AGMRI)"
    link = _MEAN_RANK_INDEX
    description = "Geometric mean rank re-indexed so that random ranking scores 0 and perfect ranking 1."
    synonyms: ClassVar[Collection[str]] = ("gmri", "agmri")


class ZGeometricMeanRank(ZMetric, base=GeometricMeanRank):
    """z-scored GMR (sign flipped: larger is better)."""

    name = "z-Geometric Mean Rank (zGMR)"
    link = _ADJUSTED
    description = "Geometric mean rank standardised under random ranking, larger is better."
    synonyms: ClassVar[Collection[str]] = ("zgmr",)


class AdjustedArithmeticMeanRankIndex(ReindexedMetric, base=ArithmeticMeanRank):
    """Re-indexed mean rank, ``(MR - E[MR]) / (1 - E[MR])``, in ``[-1, 1]``."""

    name = "Adjusted Arithmetic Mean Rank Index (AAMRI)"
    link = _MEAN_RANK_INDEX
    description = "Mean rank re-indexed so that random ranking scores 0 and perfect ranking 1."
    synonyms: ClassVar[Collection[str]] = ("adjusted_mean_rank_index", "amri", "aamri")
    value_range = ValueRange(lower=-1, lower_inclusive=True, upper=1, upper_inclusive=True)
    tight_lower = None


class AdjustedArithmeticMeanRank(ExpectationNormalizedMetric, base=ArithmeticMeanRank):
    """Mean rank divided by its expectation, in ``[0, 2)``, smaller is better."""

    name = "Adjusted Arithmetic Mean Rank (AAMR)"
    link = _MEAN_RANK_INDEX
    description = "Mean rank divided by its expected value under random ranking."
    synonyms: ClassVar[Collection[str]] = ("adjusted_mean_rank", "amr", "aamr")
    value_range = ValueRange(lower=0, lower_inclusive=True, upper=2, upper_inclusive=False)
    supported_rank_types: ClassVar[Collection[str]] = (RANK_REALISTIC,)
    increasing = False


class ZArithmeticMeanRank(ZMetric, base=ArithmeticMeanRank):
    """z-scored mean rank (sign flipped: larger is better)."""

    name = "z-Mean Rank (zMR)"
    link = _ADJUSTED
    description = "Mean rank standardised under random ranking, larger is better."
    synonyms: ClassVar[Collection[str]] = ("zamr", "zmr")


#: aliases
MRR = InverseHarmonicMeanRank
GMR = GeometricMeanRank
MeanRank = ArithmeticMeanRank

# ==========================================================================================
# resolver


def resolve(query: Any = None, **kwargs: Any) -> Any:
    """Turn a metric name, synonym, key or ``name@k`` into a metric object.

    Accepts a :class:`RankBasedMetric` instance (returned as is), a metric class (instantiated
    with ``kwargs``), ``None`` (the MRR, PyKEEN's default) or a string such as ``"hits@10"``,
    ``"h@3"``, ``"hits_at_5"``, ``"mrr"``, ``"mean_reciprocal_rank"``, ``"gmr"``, ``"amrr"``,
    ``"zgmr"``, ``"aamri"`` or a class name.  ``kwargs`` go to the factory (e.g. ``k=``).
    Raises ``ValueError`` for unknown names, listing the known ones.
    """
    if query is None:
        return InverseHarmonicMeanRank(**kwargs)
    if isinstance(query, RankBasedMetric):
        if kwargs:
            raise ValueError(f"cannot apply {kwargs} to the metric instance {query!r}")
        return query
    if isinstance(query, type):
        return query(**kwargs)
    if not isinstance(query, str):
        raise ValueError(f"query must be a metric name, class or instance, got {query!r}")
    return lookup(query, kwargs)


get_metric = resolve


_BUILTIN: tuple[type[RankBasedMetric], ...] = (
    HitsAtK,
    InverseHarmonicMeanRank,
    GeometricMeanRank,
    ArithmeticMeanRank,
    AdjustedHitsAtK,
    AdjustedInverseHarmonicMeanRank,
    AdjustedGeometricMeanRankIndex,
    AdjustedArithmeticMeanRankIndex,
    AdjustedArithmeticMeanRank,
    ZHitsAtK,
    ZInverseHarmonicMeanRank,
    ZGeometricMeanRank,
    ZArithmeticMeanRank,
)
_K_CLASSES = (HitsAtK, AdjustedHitsAtK, ZHitsAtK)


register_classes(_BUILTIN, _K_CLASSES)


def _register_list_metrics() -> None:
    """``"map@k"`` and ``"ndcg@k"`` resolve to the core list-metric kernels (over scores and
    labels, not ranks), so one resolver names every metric of the library."""
    from rankstream.core.lists.map import MAPKernel
    from rankstream.core.lists.ndcg import NDCGKernel

    register("map@", lambda k: MAPKernel(k), default_k=10)
    register("ndcg@", lambda k: NDCGKernel(k), default_k=10)


_register_list_metrics()
