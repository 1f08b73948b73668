r"""The rank family, declared once: Hits@k, MRR, geometric and arithmetic mean rank.

One frozen :class:`RankFamily` per family (:data:`HITS`, :data:`MRR`, :data:`GMR`, :data:`MR`,
looked up by name in :data:`FAMILIES`) holds what defines the metric:

* its result key (PyKEEN's: ``hits_at_{k}``, ``inverse_harmonic_mean_rank``,
  ``geometric_mean_rank``, ``arithmetic_mean_rank``) and the keys derived from it
  (``expected_*``, ``variance_*``, ``adjusted_*`` with ``_index`` for GMR and mean rank,
  ``z_*``, and for the mean rank the expectation-normalised ``adjusted_arithmetic_mean_rank``);
* its direction (``increasing``);
* the per-task value ``f(r)`` of a rank (``I[r <= k]``, ``1/r``, ``ln r``, ``r``) and the finish
  of the weighted mean (``exp`` for the GMR), on an array namespace ``xp``;
* its moments under random ranking: the per-task terms and streaming contributions
  (:mod:`rankstream.core.ranks.stats`), the closed forms over tasks, and the state fields the
  streamed kernel keeps for it.

Both the PyKEEN-compatible classes (:mod:`rankstream.pykeen`) and the streamed kernel
(:class:`rankstream.core.ranks.kernel.RankKernel`) read it, and both use the one
implementation of the chance adjustments below: affine maps ``M* = scale * M + offset``
whose coefficients are computed on ``xp`` (``numpy``, ``keras.ops``, or Python floats through
numpy):

* re-indexed: ``(M - E) / (1 - E)`` (:func:`reindexed_coefficients`);
* z-score: ``(M - E) / sqrt(Var)``, sign-flipped when the base metric is not increasing
  (:func:`z_coefficients`);
* expectation-normalised: ``M / E`` (:func:`normalized_coefficients`);

every division by PyKEEN's :func:`safe_divide` (``|y|`` floored at 1e-12, keeping its sign bit).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.ranks import stats

__all__ = [
    "EPSILON",
    "FAMILIES",
    "GMR",
    "HITS",
    "METRICS",
    "MR",
    "MRR",
    "OUTPUTS",
    "RANK_OPTIMISTIC",
    "RANK_PESSIMISTIC",
    "RANK_REALISTIC",
    "RANK_TYPES",
    "RankFamily",
    "affine",
    "check_rank_type",
    "families",
    "get_family",
    "normalized_coefficients",
    "reindexed_coefficients",
    "safe_divide",
    "state_fields",
    "std_of",
    "z_coefficients",
]

Array = Any

RANK_OPTIMISTIC = "optimistic"
RANK_REALISTIC = "realistic"
RANK_PESSIMISTIC = "pessimistic"
#: PyKEEN's rank types, in PyKEEN's order
RANK_TYPES: tuple[str, ...] = (RANK_OPTIMISTIC, RANK_REALISTIC, RANK_PESSIMISTIC)

#: forms a single-metric output can take (see :meth:`RankFamily.output_key`)
OUTPUTS: tuple[str, ...] = ("value", "expected", "variance", "adjusted", "z")

#: PyKEEN's floor of the divisors of the affine coefficients (``_safe_divide``)
EPSILON = 1.0e-12


def check_rank_type(rank_type: Any) -> str:
    """``rank_type`` if it is one of :data:`RANK_TYPES`, else ``ValueError``."""
    if rank_type not in RANK_TYPES:
        raise ValueError(f"rank_type must be one of {RANK_TYPES}, got {rank_type!r}")
    return rank_type


# ==========================================================================================
# the chance adjustments (one implementation, on xp)


def safe_divide(x: Array, y: Array, xp: Any = np) -> Array:
    """PyKEEN's ``_safe_divide``: ``x / (sign(y) * max(|y|, 1e-12))``.

    The sign is ``y``'s sign *bit*, as ``math.copysign(1.0, y)`` in PyKEEN: ``-0.0`` divides
    as ``-1e-12``, ``+0.0`` as ``+1e-12``; a NaN ``y`` gives NaN.  ``xp`` is ``numpy``
    (Python floats work) or ``keras.ops``."""
    size = xp.maximum(xp.abs(y), EPSILON)
    return x / xp.where(xp.signbit(y), -size, size)


def std_of(variance: Array, xp: Any = np) -> Array:
    """``sqrt(max(Var, 0))`` (a variance summed in floating point may come out as -0.0 or
    a tiny negative number)."""
    return xp.sqrt(xp.maximum(variance, 0.0))


def reindexed_coefficients(mean: Array, xp: Any = np) -> tuple[Array, Array]:
    """``(scale, offset)`` of ``(M - E) / (1 - E)`` (PyKEEN's ``ReindexedMetric``): 1 is the
    best value of every base metric of the family, so the result is 1 at the optimum and 0 in
    expectation."""
    scale = safe_divide(1.0, 1.0 - mean, xp)
    return scale, -scale * mean


def z_coefficients(mean: Array, std: Array, increasing: bool, xp: Any = np) -> tuple[Array, Array]:
    """``(scale, offset)`` of ``(M - E) / std`` (PyKEEN's ``ZMetric``), negated when the base
    metric is not ``increasing`` so that larger is better.  ``std`` as PyKEEN's
    ``base.std(...)`` (see :func:`std_of`)."""
    scale = safe_divide(1.0, std, xp)
    if not increasing:
        scale = -scale
    return scale, -scale * mean


def normalized_coefficients(mean: Array, xp: Any = np) -> tuple[Array, float]:
    """``(scale, offset)`` of ``M / E`` (PyKEEN's ``ExpectationNormalizedMetric``)."""
    return safe_divide(1.0, mean, xp), 0.0


def affine(value: Array, coefficients: tuple[Array, Array]) -> Array:
    """``scale * value + offset`` (PyKEEN's ``DerivedRankBasedMetric.adjust``)."""
    scale, offset = coefficients
    return scale * value + offset


# ==========================================================================================
# per-task values of each family, and its moments (from :mod:`~rankstream.core.ranks.stats`) in the
# registry's calling convention (module-level functions and partials: picklable)


def _hits_value(r: Array, xp: Any, k: Any) -> Array:
    # in r's dtype (for finite r): 1.0 where r <= k, else 0.0
    zero = r * 0.0
    return xp.where(r <= k, zero + 1.0, zero)


def _reciprocal(r: Array, xp: Any, k: Any) -> Array:
    return 1.0 / r


def _log(r: Array, xp: Any, k: Any) -> Array:
    return xp.log(r)


def _identity_value(r: Array, xp: Any, k: Any) -> Array:
    return r


def _identity(x: Array, xp: Any) -> Array:
    return x


def _exp(x: Array, xp: Any) -> Array:
    return xp.exp(x)


@functools.cache
def _parameters(func: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(func).parameters)


def _taken(func: Callable[..., Any], **options: Any) -> dict[str, Any]:
    """The ``options`` that ``func`` takes: every family is given Hits@k's ``k`` (and the
    streaming terms the GMR's series ``order``); a function without the parameter ignores it."""
    parameters = _parameters(func)
    return {key: value for key, value in options.items() if key in parameters}


def _task_moments(
    terms: Callable[..., tuple[Array, Array]], n: Array, xp: Any, k: Any
) -> tuple[Array, Array]:
    """``task_moments(n, xp, k)`` from ``stats.*_terms``."""
    return terms(n, xp=xp, **_taken(terms, k=k))


def _stream_terms(
    terms: Callable[..., dict], n: Array, w: Array | None, xp: Any, k: Any = 10, order: int | None = None
) -> dict:
    """``stream_terms(n, w, xp, k=..., order=...)`` from ``stats.*_stream_terms``."""
    order = stats.DEFAULT_GMR_ORDER if order is None else order
    return terms(n, w, xp, **_taken(terms, k=k, order=order))


def _over_tasks(moment: Callable[..., float], num_candidates: Any, weights: Any = None, k: Any = 10) -> float:
    """``expectation`` / ``variance(num_candidates, weights=None, k=...)`` from the closed forms
    ``stats.*_expectation`` / ``stats.*_variance``."""
    return moment(num_candidates, weights=weights, **_taken(moment, k=k))


# ==========================================================================================
# the registry


@dataclass(frozen=True)
class RankFamily:
    """One rank-based metric family.

    Attributes:
        name: the short name (``"hits"``, ``"mrr"``, ``"gmr"``, ``"mr"``).
        key_template: PyKEEN's result key, ``{k}`` standing for Hits@k's cut-off.
        increasing: whether larger values are better.
        index: whether the re-indexed key takes ``_index`` (``adjusted_geometric_mean_rank_index``).
        normalized: whether the expectation-normalised ``M / E`` is reported too (under
            ``adjusted_<key>``: PyKEEN's ``AdjustedArithmeticMeanRank``).
        value: ``value(r, xp, k)``, the per-task value ``f(r)`` of a rank.
        finish: ``finish(m, xp)``, applied to the weighted mean of ``value`` (``exp`` for GMR).
        task_moments: ``task_moments(n, xp, k) -> (E_i, Var_i)`` of ``f(r)`` for
            ``r ~ U{1..n}`` (:mod:`~rankstream.core.ranks.stats` closed forms), or ``None`` where the
            metric is not a mean of ``f(r)`` (GMR: see ``stream_terms``).
        stream_terms: ``stream_terms(n, w, xp, k=..., order=...)``, the per-task streaming
            contributions (``stats.*_stream_terms``; for GMR the cumulant sums, reduced by
            :func:`rankstream.core.ranks.stats.gmr_moments_from_sums` / ``gmr_moments_xp``).
        expectation, variance: ``(num_candidates, weights=None, k=...) -> float``, the exact
            moments over tasks (numpy, validated).
        value_field: the state field holding ``sum w f(r)``.
        fields: every state field the streamed kernel keeps for the family (besides
            ``weight``, ``count`` and ``invalid``).
        moment_fields: ``(E, Var)`` state fields for a mean of ``f(r)`` (``sum w E_i``,
            ``sum w^2 Var_i``); the GMR keeps ``rank_mean``/``rank_var`` for one task.
    """

    name: str
    key_template: str
    increasing: bool
    index: bool
    value: Callable[[Array, Any, Any], Array]
    finish: Callable[[Array, Any], Array]
    task_moments: Callable[[Array, Any, Any], tuple[Array, Array]] | None
    stream_terms: Callable[..., dict[str, Array]]
    expectation: Callable[..., float]
    variance: Callable[..., float]
    value_field: str
    fields: tuple[str, ...]
    moment_fields: tuple[str, str]
    normalized: bool = False

    @property
    def takes_k(self) -> bool:
        """Whether the family has a cut-off ``k`` (Hits@k)."""
        return "{k}" in self.key_template

    def key(self, k: Any = None) -> str:
        """The result key, e.g. ``hits_at_10``; ``k=None`` gives PyKEEN's class-level form
        ``hits_at_k``."""
        return self.key_template.format(k="k" if k is None else k)

    def expected_key(self, k: Any = None) -> str:
        return f"expected_{self.key(k)}"

    def variance_key(self, k: Any = None) -> str:
        return f"variance_{self.key(k)}"

    def adjusted_key(self, k: Any = None) -> str:
        """The re-indexed metric's key (PyKEEN's ``Adjusted*`` classes)."""
        return f"adjusted_{self.key(k)}" + ("_index" if self.index else "")

    def z_key(self, k: Any = None) -> str:
        """The z-scored metric's key (PyKEEN's ``Z*`` classes)."""
        return f"z_{self.key(k)}"

    def normalized_key(self, k: Any = None) -> str:
        """The expectation-normalised metric's key (``adjusted_arithmetic_mean_rank``)."""
        if not self.normalized:
            raise ValueError(f"the {self.name!r} family has no expectation-normalised form")
        return f"adjusted_{self.key(k)}"

    def output_key(self, form: str, k: Any = None) -> str:
        """The key of one of :data:`OUTPUTS` (``value``, ``expected``, ``variance``,
        ``adjusted``, ``z``)."""
        if form == "value":
            return self.key(k)
        if form == "expected":
            return self.expected_key(k)
        if form == "variance":
            return self.variance_key(k)
        if form == "adjusted":
            return self.adjusted_key(k)
        if form == "z":
            return self.z_key(k)
        raise ValueError(f"output must be one of {OUTPUTS}, got {form!r}")

    def result_keys(self, k: Any = None) -> list[str]:
        """The keys :meth:`results` writes, in order."""
        keys = [self.key(k), self.expected_key(k), self.variance_key(k), self.adjusted_key(k), self.z_key(k)]
        return keys + ([self.normalized_key(k)] if self.normalized else [])

    def results(self, value: Array, mean: Array, var: Array, xp: Any = np, k: Any = None) -> dict[str, Array]:
        """The value, its expectation and variance and the chance-adjusted forms (re-indexed,
        z-score and, for the mean rank, ``M / E``), keyed by :meth:`result_keys`."""
        out = {self.key(k): value, self.expected_key(k): mean, self.variance_key(k): var}
        out[self.adjusted_key(k)] = affine(value, reindexed_coefficients(mean, xp))
        out[self.z_key(k)] = affine(value, z_coefficients(mean, std_of(var, xp), self.increasing, xp))
        if self.normalized:
            out[self.normalized_key(k)] = affine(value, normalized_coefficients(mean, xp))
        return out


#: each family's :mod:`~rankstream.core.ranks.stats` functions: the per-task ``(E, Var)`` of ``f(r)``
#: (none for the GMR, not a mean of ``f(r)``), the streaming contributions, and ``E`` and
#: ``Var`` over tasks
_STATS: dict[str, tuple[Callable[..., Any] | None, ...]] = {
    "hits": (stats.hits_terms, stats.hits_stream_terms, stats.hits_expectation, stats.hits_variance),
    "mrr": (stats.reciprocal_rank_terms, stats.mrr_stream_terms, stats.mrr_expectation, stats.mrr_variance),
    "gmr": (None, stats.gmr_stream_terms, stats.gmr_expectation, stats.gmr_variance),
    "mr": (
        stats.rank_terms,
        stats.mean_rank_stream_terms,
        stats.mean_rank_expectation,
        stats.mean_rank_variance,
    ),
}


def _declare(
    name: str,
    key_template: str,
    value: Callable[[Array, Any, Any], Array],
    value_field: str,
    *,
    increasing: bool,
    **overrides: Any,
) -> RankFamily:
    """The family ``name`` with result key ``key_template`` and per-task value ``value``, summed
    in the state field ``value_field``; its moments from its :data:`_STATS` functions.

    By default the re-indexed key of a decreasing family takes ``_index`` (PyKEEN's AGMRI and
    AAMRI), ``finish`` is the identity, and the state keeps ``value_field`` and its ``_mean``
    and ``_var`` sums, the moment fields; ``overrides`` replace or add any other
    :class:`RankFamily` field.
    """
    task_terms, stream_terms, expectation, variance = _STATS[name]
    moment_fields = (f"{value_field}_mean", f"{value_field}_var")
    declared: dict[str, Any] = {
        "name": name,
        "key_template": key_template,
        "increasing": increasing,
        "index": not increasing,
        "value": value,
        "finish": _identity,
        "task_moments": None if task_terms is None else functools.partial(_task_moments, task_terms),
        "stream_terms": functools.partial(_stream_terms, stream_terms),
        "expectation": functools.partial(_over_tasks, expectation),
        "variance": functools.partial(_over_tasks, variance),
        "value_field": value_field,
        "fields": (value_field, *moment_fields),
        "moment_fields": moment_fields,
    }
    return RankFamily(**{**declared, **overrides})


# name, PyKEEN's result key, f(r), the state field of sum w f(r)
HITS = _declare("hits", "hits_at_{k}", _hits_value, "hits", increasing=True)
MRR = _declare("mrr", "inverse_harmonic_mean_rank", _reciprocal, "inverse_rank", increasing=True)
GMR = _declare(
    "gmr",
    "geometric_mean_rank",
    _log,
    "log_rank",
    increasing=False,
    finish=_exp,
    # rank_mean / rank_var: the exact E and Var of a single task's rank
    fields=("log_rank", "gmr_cumulants", "gmr_tail", "rank_mean", "rank_var"),
    moment_fields=("rank_mean", "rank_var"),
)
MR = _declare("mr", "arithmetic_mean_rank", _identity_value, "rank", increasing=False, normalized=True)

#: the families by name, in the order results are reported
FAMILIES: dict[str, RankFamily] = {f.name: f for f in (HITS, MRR, GMR, MR)}
#: their names: Hits@k, MRR (inverse harmonic mean rank), GMR, arithmetic mean rank
METRICS: tuple[str, ...] = tuple(FAMILIES)


def get_family(name: str) -> RankFamily:
    """The family called ``name`` (one of :data:`METRICS`)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown rank family {name!r}; known: {METRICS}") from None


# state fields: every one a plain sum; their order (as the streamed kernel declares them)
_COMMON_FIELDS = ("weight", "count", "invalid")
_FIELD_ORDER = (
    *_COMMON_FIELDS,
    "hits",
    "hits_mean",
    "hits_var",
    "inverse_rank",
    "inverse_rank_mean",
    "inverse_rank_var",
    "log_rank",
    "gmr_cumulants",
    "gmr_tail",
    "rank",
    "rank_mean",
    "rank_var",
)


def state_fields(metrics: Iterable[str], num_ks: int, gmr_order: int) -> dict[str, tuple[int, ...]]:
    """Field name -> shape of the state of the families ``metrics`` (``weight``, ``count``
    and ``invalid`` always; Hits@k fields have shape ``(num_ks,)``, ``gmr_cumulants``
    ``(gmr_order,)``, the rest are scalars)."""
    wanted = set(_COMMON_FIELDS)
    for name in metrics:
        wanted.update(get_family(name).fields)
    shapes = {"hits": (num_ks,), "hits_mean": (num_ks,), "hits_var": (num_ks,), "gmr_cumulants": (gmr_order,)}
    return {f: shapes.get(f, ()) for f in _FIELD_ORDER if f in wanted}


def families(metrics: Sequence[str]) -> list[RankFamily]:
    """The families named in ``metrics``, in :data:`METRICS` order."""
    return [FAMILIES[m] for m in METRICS if m in metrics]
