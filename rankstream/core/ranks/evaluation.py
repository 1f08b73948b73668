"""What the metrics of :mod:`rankstream.pykeen` are built on (host numpy, over arrays of ranks):
the value range, PyKEEN's metric metadata and the affine-parameter types, validated inputs,
the weighted mean of a family's per-task value, and the moments under random ranking
(``r_i ~ U{1..N_i}``): closed forms where a metric has them, else sampled, with bootstrap
intervals."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from rankstream.core.ranks.closed_forms import check_num_candidates, check_ranks, check_weights
from rankstream.core.ranks.families import RankFamily

__all__ = [
    "AffineTransformationParameters",
    "MetricMetadata",
    "NoClosedFormError",
    "RandomRankingMoments",
    "ValueRange",
    "affine_parameters",
    "evaluate_family",
    "prepare_inputs",
    "validate_moment_inputs",
]

#: ``evaluate(ranks (S, T), num_candidates (T,) or None, weights (T,) or None) -> (S,)``
Evaluate = Callable[[np.ndarray, "np.ndarray | None", "np.ndarray | None"], np.ndarray]


@dataclass
class ValueRange:
    """The range a metric's values lie in; ``None`` bounds are unbounded (PyKEEN's
    ``ValueRange``: ``x in value_range``, :meth:`approximate`, :meth:`notate`)."""

    lower: float | None = None
    lower_inclusive: bool = False
    upper: float | None = None
    upper_inclusive: bool = False

    def __contains__(self, x: float) -> bool:
        if self.lower is not None and (x < self.lower or (x == self.lower and not self.lower_inclusive)):
            return False
        if self.upper is not None and (x > self.upper or (x == self.upper and not self.upper_inclusive)):
            return False
        return True

    def approximate(self, epsilon: float) -> ValueRange:
        """This range widened by ``epsilon`` at each finite bound (an unbounded side stays
        unbounded, each bound keeps whether it is inclusive): for checks of computed values
        that may miss a bound by a rounding error."""
        return ValueRange(
            lower=None if self.lower is None else self.lower - epsilon,
            lower_inclusive=self.lower_inclusive,
            upper=None if self.upper is None else self.upper + epsilon,
            upper_inclusive=self.upper_inclusive,
        )

    @staticmethod
    def _coerce(n: float | None, low: bool) -> str:
        """A bound as text: ``-inf`` / ``inf`` where unbounded, whole numbers without ``.0``."""
        if n is None:
            return "-inf" if low else "inf"
        if not isinstance(n, int) and n.is_integer():
            return str(int(n))
        return str(n)

    def notate(self, lower: str | None = None, upper: str | None = None) -> str:
        """Interval notation, e.g. ``[0, 1]`` or ``(0, 1]``; ``lower`` / ``upper`` replace the
        numeric bounds in the text (a data-dependent bound such as ``-E[f]/(1-E[f])``)."""
        left = "[" if self.lower is not None and self.lower_inclusive else "("
        right = "]" if self.upper is not None and self.upper_inclusive else ")"
        low = self._coerce(self.lower, True) if lower is None else lower
        high = self._coerce(self.upper, False) if upper is None else upper
        return f"{left}{low}, {high}{right}"


class MetricMetadata:
    """What PyKEEN's ``Metric`` says about a metric besides its values: its name, link and
    description (also as ``__docdata__``, the dict PyKEEN's ``docdata`` reads, on every class
    with a link), value range, direction and capabilities, and its ``repr``."""

    #: display name (as in PyKEEN)
    name: ClassVar[str]
    #: one-line description (see :meth:`get_description`)
    description: ClassVar[str] = ""
    #: where the metric is described (see :meth:`get_link`; None on the abstract classes)
    link: ClassVar[str | None] = None
    #: alternative names (as in PyKEEN)
    synonyms: ClassVar[Collection[str]] = ()
    #: the values the metric can take
    value_range: ClassVar[ValueRange]
    #: whether larger values are better
    increasing: ClassVar[bool]
    #: whether the metric needs binarized scores (never, for rank-based metrics)
    binarize: ClassVar[bool] = False
    #: whether ``expected_value`` has a closed form
    closed_expectation: ClassVar[bool] = False
    #: whether ``variance`` has a closed form
    closed_variance: ClassVar[bool] = False
    #: whether per-task weights are supported
    supports_weights: ClassVar[bool] = False
    #: data-dependent bounds shown by :meth:`get_range` instead of the numeric ones
    tight_lower: ClassVar[str | None] = None
    tight_upper: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "link" in cls.__dict__:
            docdata = {"link": cls.link, "description": cls.get_description()}
            tight = {"tight_lower": cls.tight_lower, "tight_upper": cls.tight_upper}
            cls.__docdata__ = {**docdata, **{key: v for key, v in tight.items() if v is not None}}

    @classmethod
    def get_description(cls) -> str:
        """A one-line description of the metric."""
        if cls.description:
            return cls.description
        return (cls.__doc__ or cls.__name__).strip().splitlines()[0]

    @classmethod
    def get_link(cls) -> str:
        """Where the metric is described; ``TypeError`` on a class without one (as PyKEEN's
        abstract classes, which have no docdata)."""
        if cls.link is None:
            raise TypeError(f"{cls.__name__} has no link")
        return cls.link

    @classmethod
    def get_range(cls) -> str:
        """Interval notation of the value range (with data-dependent bounds where tight)."""
        return cls.value_range.notate(cls.tight_lower, cls.tight_upper).replace("inf", "∞")

    def iter_extra_repr(self) -> Iterable[str]:
        """Components of the ``repr`` beyond the class name."""
        return ()

    def extra_repr(self) -> str:
        """The part of the ``repr`` inside the parentheses."""
        return ", ".join(self.iter_extra_repr())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class NoClosedFormError(ValueError):
    """Raised when a moment has no closed form and no number of samples was given."""


class AffineTransformationParameters(NamedTuple):
    """``M* = scale * M + offset``."""

    scale: float = 1.0
    offset: float = 0.0


def affine_parameters(pair: tuple[Any, Any]) -> AffineTransformationParameters:
    """Python floats of ``(scale, offset)`` from :mod:`rankstream.core.ranks.families`'s
    affine coefficients (computed with numpy on Python floats: the same IEEE operations)."""
    return AffineTransformationParameters(scale=float(pair[0]), offset=float(pair[1]))


class _Inputs(NamedTuple):
    """Validated float64 inputs of a metric, flat."""

    ranks: np.ndarray  # shape (num_tasks,)
    num_candidates: np.ndarray | None
    weights: np.ndarray | None


def prepare_inputs(ranks: Any, num_candidates: Any, weights: Any) -> _Inputs:
    """``ranks`` (>= 1, at most ``num_candidates`` where given), candidate counts and positive
    weights of the same shape, validated and flattened."""
    r = check_ranks(ranks, num_candidates)
    n = None if num_candidates is None else check_num_candidates(num_candidates).reshape(-1)
    w = check_weights(weights, shape=r.shape)
    return _Inputs(r.reshape(-1), n, None if w is None else w.reshape(-1))


def validate_moment_inputs(num_candidates: Any, weights: Any) -> None:
    """Validate inputs of moments that do not depend on them (constant 0 / 1)."""
    n = check_num_candidates(num_candidates)
    check_weights(weights, shape=n.shape)


def _weighted_mean(values: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """Mean over the last axis, weighted like numpy.average."""
    if weights is None:
        return values.mean(axis=-1)
    return (values * weights).sum(axis=-1) / weights.sum()


def evaluate_family(
    family: RankFamily, ranks: np.ndarray, weights: np.ndarray | None, k: int | None = None
) -> np.ndarray:
    """``finish(sum_i w_i f(r_i) / W)`` over the last axis, ``f``/``finish`` the family's."""
    return family.finish(_weighted_mean(family.value(ranks, np, k), weights), np)


class RandomRankingMoments:
    """Moments of a rank metric under random ranking (``r_i ~ U{1..N_i}``, tasks independent),
    for a class whose ``_evaluate(ranks (S, T), num_candidates, weights) -> (S,)`` evaluates it
    (:class:`rankstream.pykeen.RankBasedMetric`): closed forms where a subclass overrides
    ``_moment``, else Monte-Carlo estimates from sampled ranks, with bootstrap intervals."""

    _evaluate: Evaluate

    def expected_value(
        self, num_candidates: Any, num_samples: int | None = None, weights: Any = None, **kwargs: Any
    ) -> float:
        """Expected value under random ranking (closed form if available, else sampled)."""
        return self._moment("expectation", num_candidates, num_samples, weights, kwargs)

    def variance(
        self, num_candidates: Any, num_samples: int | None = None, weights: Any = None, **kwargs: Any
    ) -> float:
        """Variance under random ranking (closed form if available, else sampled)."""
        return self._moment("variance", num_candidates, num_samples, weights, kwargs)

    def std(
        self, num_candidates: Any, num_samples: int | None = None, weights: Any = None, **kwargs: Any
    ) -> float:
        """Standard deviation under random ranking, ``sqrt(variance(...))``."""
        return math.sqrt(
            self.variance(num_candidates=num_candidates, num_samples=num_samples, weights=weights, **kwargs)
        )

    def _moment(
        self, moment: str, num_candidates: Any, num_samples: int | None, weights: Any, kwargs: dict[str, Any]
    ) -> float:
        """The ``moment`` (``"expectation"`` or ``"variance"``) behind :meth:`expected_value` and
        :meth:`variance`; subclasses with closed forms override it.  Here: sampled
        (:meth:`numeric_expected_value` / :meth:`numeric_variance`, ``kwargs`` passed on), or
        :class:`NoClosedFormError` without ``num_samples``."""
        if num_samples is None:
            raise NoClosedFormError(f"{type(self).__name__} has no closed-form {moment}; pass num_samples")
        numeric = self.numeric_expected_value if moment == "expectation" else self.numeric_variance
        return numeric(num_candidates=num_candidates, num_samples=num_samples, weights=weights, **kwargs)

    def get_sampled_values(
        self,
        num_candidates: Any,
        num_samples: int,
        weights: Any = None,
        generator: np.random.Generator | int | None = None,
        memory_intense: bool = True,
    ) -> np.ndarray:
        """The metric on ``num_samples`` rank vectors drawn from ``U{1..N_i}``, shape ``(S,)``.

        ``memory_intense=True`` draws all samples at once (``num_samples * num_tasks`` ranks in
        memory); ``False`` draws and evaluates one rank vector at a time.
        """
        return self._sampled_values(num_candidates, num_samples, weights, generator, memory_intense)

    def _sampled_values(
        self, num_candidates: Any, num_samples: int, weights: Any, generator: Any, memory_intense: bool
    ) -> np.ndarray:
        """Behind :meth:`get_sampled_values`: the metric on drawn ranks (a derived metric
        adjusts its base metric's sampled values instead)."""
        if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        n = check_num_candidates(num_candidates)
        w = check_weights(weights, shape=n.shape)
        n = n.reshape(-1)
        w = None if w is None else w.reshape(-1)
        rng = np.random.default_rng(generator)
        high = n.astype(np.int64) + 1
        if memory_intense:
            ranks = rng.integers(1, high, size=(int(num_samples), n.size)).astype(np.float64)
            return self._evaluate(ranks, n, w)
        out = np.empty(int(num_samples), dtype=np.float64)
        for s in range(int(num_samples)):
            ranks = rng.integers(1, high).astype(np.float64)
            out[s] = self._evaluate(ranks[None, :], n, w)[0]
        return out

    def numeric_expected_value(self, **kwargs: Any) -> float:
        """Monte-Carlo estimate of the expectation (kwargs go to :meth:`get_sampled_values`)."""
        return float(self.get_sampled_values(**kwargs).mean())

    def numeric_variance(self, **kwargs: Any) -> float:
        """Monte-Carlo estimate of the variance (unbiased, ``ddof=1``)."""
        return float(self.get_sampled_values(**kwargs).var(ddof=1))

    def _bootstrap(
        self,
        func: Callable[[np.ndarray], Any],
        num_candidates: Any,
        num_samples: int,
        confidence_level: float = 95.0,
        n_boot: int = 1_000,
        generator: np.random.Generator | int | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        if not 50.0 < confidence_level < 100.0:
            raise ValueError(f"confidence_level must lie in (50, 100), got {confidence_level!r}")
        rng = np.random.default_rng(generator)
        values = self.get_sampled_values(
            num_candidates=num_candidates, num_samples=num_samples, generator=rng, **kwargs
        )
        size = values.shape[0]
        resampled = values[rng.integers(size, size=(int(n_boot), size))]
        estimates = np.asarray([func(row) for row in resampled])
        half = confidence_level / 2.0
        return np.percentile(estimates, [50.0 - half, 50.0, 50.0 + half])

    def numeric_expected_value_with_ci(self, **kwargs: Any) -> np.ndarray:
        """Bootstrap ``[low, median, high]`` of the sampled mean (``confidence_level=95``)."""
        return self._bootstrap(func=np.mean, **kwargs)

    def numeric_variance_with_ci(self, **kwargs: Any) -> np.ndarray:
        """Bootstrap ``[low, median, high]`` of the sampled variance."""
        return self._bootstrap(func=np.var, **kwargs)
