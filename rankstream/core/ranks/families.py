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
* its moments under random ranking: the per-task terms
  (:mod:`~rankstream.core.ranks.closed_forms`), the streaming contributions
  (:mod:`~rankstream.core.ranks.streamed_forms`), the closed forms over tasks;
* what the streamed kernel keeps for it: its state fields, the columns of unit-weight
  expectation terms it sums per task (with the power of the task weight each takes), and the
  reduction of those sums to the moments;
* the fields of the standard error of its mean over tasks (:attr:`RankFamily.stat_fields`,
  kept when a confidence level is asked for): ``sum w^2 f(r)`` and ``sum w^2 f(r)^2`` per rank
  type, with ``sum w^2`` (:data:`STAT_WEIGHT_FIELD`) and the task count shared.

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
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.ranks import closed_forms as cf
from rankstream.core.ranks import streamed_forms as sf

__all__ = [
    "EPSILON",
    "FAMILIES",
    "GMR",
    "HITS",
    "INVERSES",
    "METRICS",
    "MR",
    "MRR",
    "OUTPUTS",
    "RANK_OPTIMISTIC",
    "RANK_PESSIMISTIC",
    "RANK_REALISTIC",
    "RANK_TYPES",
    "STAT_WEIGHT_FIELD",
    "RankFamily",
    "affine",
    "check_rank_type",
    "get_family",
    "normalized_coefficients",
    "reindexed_coefficients",
    "safe_divide",
    "stat_state_fields",
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
# per-task values of each family, and its moments (closed and streamed forms) in the
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
    """``task_moments(n, xp, k)`` from ``closed_forms.*_terms``."""
    return terms(n, xp=xp, **_taken(terms, k=k))


def _stream_terms(
    terms: Callable[..., dict], n: Array, w: Array | None, xp: Any, k: Any = 10, order: int | None = None
) -> dict:
    """``stream_terms(n, w, xp, k=..., order=...)`` from ``streamed_forms.*_stream_terms``."""
    order = sf.DEFAULT_GMR_ORDER if order is None else order
    return terms(n, w, xp, **_taken(terms, k=k, order=order))


def _over_tasks(moment: Callable[..., float], num_candidates: Any, weights: Any = None, k: Any = 10) -> float:
    """``expectation`` / ``variance(num_candidates, weights=None, k=...)`` from the closed forms
    ``closed_forms.*_expectation`` / ``closed_forms.*_variance``."""
    return moment(num_candidates, weights=weights, **_taken(moment, k=k))


# the streamed kernel's state of a family: columns of unit-weight expectation terms
# ``(field, power of the task weight)`` (a field of shape (K,) or (M,) has K or M consecutive
# columns), the terms in that order, and the moments from the summed fields


def _linear_columns(fields: tuple[str, str], takes_k: bool, ks: Sequence[Any], order: int) -> tuple:
    """A weighted mean of ``f(r)``: ``sum w E_i`` (power 1) and ``sum w^2 Var_i`` (power 2),
    one column per cut-off."""
    count = len(ks) if takes_k else 1
    return ((fields[0], 1),) * count + ((fields[1], 2),) * count


def _linear_unit_terms(
    terms: Callable[..., dict], takes_k: bool, n: Array, xp: Any, ks: Sequence[Any], order: int
) -> list[Array]:
    """The ``mean`` and ``var`` streaming terms at unit weight (``w = None``)."""
    per_k = [terms(n, None, xp, k=float(k)) for k in ks] if takes_k else [terms(n, None, xp)]
    return [t["mean"] for t in per_k] + [t["var"] for t in per_k]


def _linear_moments(
    fields: tuple[str, str], s: Mapping[str, Any], total: Array, xp: Any, j: int | None
) -> tuple[Array, Array, dict[str, Array]]:
    """``E = sum w E_i / W`` and ``Var = sum w^2 Var_i / W^2`` (of cut-off ``j``)."""
    mean, var = (s[f] for f in fields)
    if j is not None:
        mean, var = mean[..., j], var[..., j]
    return (*sf.sum_moments(mean, var, total), {})


def _gmr_columns(ks: Sequence[Any], order: int) -> tuple:
    """The exact ``E``/``Var`` of one task's rank (for a single task), then the Taylor
    coefficients ``w^m kappa_m / m!`` (power ``m``) and the tail ``w^(M+1) I[N > 1]``."""
    moments = _linear_columns(("rank_mean", "rank_var"), False, ks, order)
    return (*moments, *(("gmr_cumulants", m) for m in range(1, order + 1)), ("gmr_tail", order + 1))


def _gmr_unit_terms(n: Array, xp: Any, ks: Sequence[Any], order: int) -> list[Array]:
    out = _linear_unit_terms(sf.mean_rank_stream_terms, False, n, xp, ks, order)
    t = sf.gmr_stream_terms(n, None, xp, order=order)
    # Taylor coefficients kappa_m / m! (magnitude about 1/m; see the kernel's module docstring)
    out += [t[f"cumulant_{m}"] / float(math.factorial(m)) for m in range(1, order + 1)]
    return [*out, t["tail"]]


def _gmr_moments(
    bound_key: str, s: Mapping[str, Any], total: Array, xp: Any, j: int | None
) -> tuple[Array, Array, dict[str, Array]]:
    """The one GMR reducer (:func:`~rankstream.core.ranks.streamed_forms.gmr_moments_xp`) of
    the cumulant sums, with its error bound under ``bound_key``; one task (of positive
    weight): the GMR is its rank, ``E`` and ``Var`` exact (bound 0)."""
    cumulants = s["gmr_cumulants"]
    coefficients = [cumulants[..., m] for m in range(int(cumulants.shape[-1]))]
    mean, var, bound = sf.gmr_moments_xp(total, coefficients, s["gmr_tail"], xp)
    one = s["count"] == 1.0
    mean1, var1, _ = _linear_moments(("rank_mean", "rank_var"), s, total, xp, None)
    return xp.where(one, mean1, mean), xp.where(one, var1, var), {bound_key: xp.where(one, 0.0, bound)}


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
        value: ``value(r, xp, k)``, the per-task value ``f(r)`` of a rank (Hits@k's ``k`` a
            number, or an array of cut-offs broadcast against ``r``: the kernel's every ``k`` at once).
        finish: ``finish(m, xp)``, applied to the weighted mean of ``value`` (``exp`` for GMR).
        task_moments: ``task_moments(n, xp, k) -> (E_i, Var_i)`` of ``f(r)`` for
            ``r ~ U{1..n}`` (:mod:`~rankstream.core.ranks.closed_forms`), or ``None`` where the
            metric is not a mean of ``f(r)`` (GMR: see ``stream_terms``).
        stream_terms: ``stream_terms(n, w, xp, k=..., order=...)``, the per-task streaming
            contributions (``streamed_forms.*_stream_terms``; for GMR the cumulant sums,
            reduced by :func:`~rankstream.core.ranks.streamed_forms.gmr_moments_from_sums` /
            ``gmr_moments_xp``).
        expectation, variance: ``(num_candidates, weights=None, k=...) -> float``, the exact
            moments over tasks (numpy, validated).
        value_field: the state field holding ``sum w f(r)``.
        fields: every state field the streamed kernel keeps for the family (besides
            ``weight``, ``count`` and ``invalid``).
        moment_fields: ``(E, Var)`` state fields for a mean of ``f(r)`` (``sum w E_i``,
            ``sum w^2 Var_i``); the GMR keeps ``rank_mean``/``rank_var`` for one task.
        columns: ``columns(ks, order)``, the streamed kernel's expectation columns: one
            ``(field, power of the task weight)`` per column (a field of shape (K,) or (M,)
            has K or M consecutive columns); families may share a field (the same sums).
        unit_terms: ``unit_terms(n, xp, ks, order)``, the per-task terms of those columns at
            unit weight, in their order (elementwise in ``n``: the kernel tabulates them per
            number of candidates).
        sum_moments: ``sum_moments(s, total, xp, j) -> (E, Var, extra)`` from the summed
            fields ``s`` (``total`` the summed weight, ``j`` the cut-off's index or None);
            ``extra`` maps further report keys to values (the GMR's error bound).
        stat_fields: the per-rank-type fields of the standard error of the weighted mean of
            ``f(r)`` over tasks: ``(sum w^2 f(r), sum w^2 f(r)^2)``, one name twice where
            ``f(r)^2 = f(r)`` (Hits@k: ``f(r)`` is 0 or 1); of shape ``(K,)`` for a family
            with a cut-off. Kept only when the kernel is given a confidence level.
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
    columns: Callable[[Sequence[Any], int], tuple[tuple[str, int], ...]]
    unit_terms: Callable[[Array, Any, Sequence[Any], int], list[Array]]
    sum_moments: Callable[[Mapping[str, Any], Array, Any, int | None], tuple[Array, Array, dict[str, Array]]]
    stat_fields: tuple[str, str]
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


#: each family's moment functions: the per-task ``(E, Var)`` of ``f(r)`` (closed forms; none
#: for the GMR, not a mean of ``f(r)``), the streaming contributions, and ``E`` and ``Var``
#: over tasks (closed forms)
_STATS: dict[str, tuple[Callable[..., Any] | None, ...]] = {
    "hits": (cf.hits_terms, sf.hits_stream_terms, cf.hits_expectation, cf.hits_variance),
    "mrr": (cf.reciprocal_rank_terms, sf.mrr_stream_terms, cf.mrr_expectation, cf.mrr_variance),
    "gmr": (None, sf.gmr_stream_terms, cf.gmr_expectation, cf.gmr_variance),
    "mr": (cf.rank_terms, sf.mean_rank_stream_terms, cf.mean_rank_expectation, cf.mean_rank_variance),
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
    and ``_var`` sums, the moment fields, streamed as a weighted mean of ``f(r)``;
    ``overrides`` replace or add any other :class:`RankFamily` field.
    """
    task_terms, stream_terms, expectation, variance = _STATS[name]
    moment_fields = (f"{value_field}_mean", f"{value_field}_var")
    takes_k = "{k}" in key_template
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
        "columns": functools.partial(_linear_columns, moment_fields, takes_k),
        "unit_terms": functools.partial(_linear_unit_terms, stream_terms, takes_k),
        "sum_moments": functools.partial(_linear_moments, moment_fields),
        "stat_fields": (f"{value_field}_w2", f"{value_field}_w2_sq"),
    }
    return RankFamily(**{**declared, **overrides})


# name, PyKEEN's result key, f(r), the state field of sum w f(r)
# Hits@k's f(r) is 0 or 1: sum w^2 f(r)^2 is sum w^2 f(r), one field
HITS = _declare(
    "hits", "hits_at_{k}", _hits_value, "hits", increasing=True, stat_fields=("hits_w2", "hits_w2")
)
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
    columns=_gmr_columns,
    unit_terms=_gmr_unit_terms,
    sum_moments=functools.partial(_gmr_moments, "geometric_mean_rank_error_bound"),
)
MR = _declare("mr", "arithmetic_mean_rank", _identity_value, "rank", increasing=False, normalized=True)

#: the families by name, in the order results are reported
FAMILIES: dict[str, RankFamily] = {f.name: f for f in (HITS, MRR, GMR, MR)}
#: their names: Hits@k, MRR (inverse harmonic mean rank), GMR, arithmetic mean rank
METRICS: tuple[str, ...] = tuple(FAMILIES)
#: PyKEEN's inverse forms ``1 / value`` of a family's value: (family, report key), in the order
#: they are reported
INVERSES: tuple[tuple[str, str], ...] = (
    ("mrr", "harmonic_mean_rank"),
    ("mr", "inverse_arithmetic_mean_rank"),
    ("gmr", "inverse_geometric_mean_rank"),
)


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


#: the shared field of the standard errors: ``sum w^2`` over tasks (with ``count``)
STAT_WEIGHT_FIELD = "weight_sq"


def stat_state_fields(metrics: Iterable[str], num_ks: int) -> dict[str, tuple[int, ...]]:
    """Field name -> shape of the standard errors' fields of the families ``metrics``:
    :data:`STAT_WEIGHT_FIELD`, then each family's :attr:`RankFamily.stat_fields` in registry
    order (``(num_ks,)`` for a family with a cut-off), after the fields of :func:`state_fields`."""
    out: dict[str, tuple[int, ...]] = {STAT_WEIGHT_FIELD: ()}
    for fam in FAMILIES.values():
        if fam.name in metrics:
            out.update(dict.fromkeys(fam.stat_fields, (num_ks,) if fam.takes_k else ()))
    return out
