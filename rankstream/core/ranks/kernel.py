r"""Streamed rank-based metrics: Hits@k, MRR, geometric and arithmetic mean rank, each with its
expectation and variance under random ranking, its adjusted index and its z-score.

**Ranking tasks.** A batch is ``scores`` ``(B, N)`` plus either

* the index of the true candidate of each row, ``(B,)`` integers: one task per row, ranked
  against every other valid candidate of the row; or
* binary labels ``(B, N)`` (the filtered setting): every valid positive is a task, ranked
  against the valid *non-positive* candidates of its row (the other positives are removed).

An optional bool ``mask`` ``(B, N)`` removes candidates (False = not a candidate), and an
optional per-row ``sample_weight`` (scalar or ``(B,)``, finite and >= 0; a weight-0 row counts
for nothing) weights every task of the row. With ``s`` the true score and ``C`` the candidates
the task is ranked against (itself included), PyKEEN's rank types (MATH.md) are::

    optimistic  = 1 + #{c in C: s_c > s}      pessimistic = #{c in C: s_c >= s}
    realistic   = (optimistic + pessimistic) / 2,         N = |C| (number of candidates)

Ties are counted exactly, never broken by index; ``N`` comes from the mask, so the
expectations are right for ragged lists (:mod:`~rankstream.core.ranks.tasks`).

**State** (one :class:`RankKernel`, every field a plain sum over tasks; ``w`` the task weight,
``r`` its rank of the chosen type; ``K = len(ks)``, ``M = gmr_order``)::

    weight ()            sum w                     count ()          #tasks with w > 0
    hits (K,)            sum w I[r <= k]           hits_mean (K,)    sum w p_k,  p_k = min(k, N)/N
    hits_var (K,)        sum w^2 p_k (1 - p_k)
    inverse_rank ()      sum w / r                 inverse_rank_mean, inverse_rank_var: E, Var of 1/r
    rank ()              sum w r                   rank_mean, rank_var:                 E, Var of r
    log_rank ()          sum w ln r
    gmr_cumulants (M,)   sum w^m kappa_m(N) / m!   gmr_tail ()       sum w^(M+1) I[N > 1]

    rank_squared ()      sum w r^2  (the rank's variance and standard deviation)
    rank_histogram (H,)  sum w per bin of r (median rank and MAD; median.rank_bins)

With a ``confidence`` level, the standard error of each family's mean over tasks
(:mod:`~rankstream.core.ranks.intervals`), from the registry's ``stat_fields``::

    weight_sq ()         sum w^2 (shared)          hits_w2 (K,)       sum w^2 I[r <= k]
    inverse_rank_w2, inverse_rank_w2_sq            sum w^2 / r, sum w^2 / r^2
    log_rank_w2, log_rank_w2_sq                    sum w^2 ln r, sum w^2 (ln r)^2
    rank_w2, rank_w2_sq                            sum w^2 r, sum w^2 r^2

Several rank types (``rank_type=RANK_TYPES``) share every field that depends only on the
candidate counts and weights (``weight``, ``count``, ``invalid``, the ``*_mean``/``*_var``
expectation sums, the GMR cumulants); each type keeps its own ``hits``, ``inverse_rank``,
``log_rank``, ``rank``, ``rank_squared`` and ``rank_histogram``, all filled from the same two
comparison passes. Named ``sides`` each keep a copy of the whole layout (fields
``{side}__{field}`` and ``{side}__{type}__{field}``); the ``both`` side is their sum, formed in
``compute``.

(``*_mean`` fields hold ``sum w E_i`` and ``*_var`` fields ``sum w^2 Var_i``, so
``E = mean / weight`` and ``Var = var / weight^2``.) ``kappa_m(N)`` are the cumulants of
``ln r`` for ``r ~ U{1..N}``: ``ln E[GMR] = sum_i ln E[r_i^{a_i}]`` with ``a_i = w_i / W``
is not a sum over tasks (``a_i`` depends on the total ``W``), but its Taylor series in ``a`` is:
``sum_m F_m / (m! W^m)`` with ``F_m = sum_i w_i^m kappa_m(N_i)``
(:func:`rankstream.core.ranks.streamed_forms.gmr_stream_terms`), kept as the Taylor coefficients ``F_m / m!``
(``|kappa_m|`` grows like ``(m-1)!``: ``F_m`` itself would leave float32's range at weights
near 10 for large lists, ``F_m / m!`` only near ``(m 3.4e38)^(1/m)``); the variance uses the
same sums, and
``gmr_tail`` bounds the truncation error (:func:`rankstream.core.ranks.streamed_forms.gmr_moments_from_sums`,
reported as ``geometric_mean_rank_error_bound``: below 1e-13 relative from about 30 equally
weighted tasks on with the default order 20; large or ``inf`` for a handful of tasks).

**Cost per batch** (torch CPU): with one true index per row, one comparison pass over the
scores per count the rank type needs (``#(s > s_true)`` for the optimistic rank,
``#(s >= s_true)`` for the pessimistic one, both for the realistic one), written as 0/1 floats
into a reused buffer and summed per row with a matrix-vector product (bool reductions are
several times slower on CPU); one row sum for the NaN check; one pass to apply a mask and one
to count it. With binary labels, the same passes once per positive *slot*, each on the rows
that have that many positives. The expectation terms are read from a per-``N`` table built
once per list width (cached), so the per-task work is a gather. No Python loop over rows.

**Host reads**: where reading back is cheap (CPU, eager) one read per batch validates the
values and ``update`` raises on bad data. Elsewhere (an accelerator, tracing) nothing is read
for index targets: rows with bad data are dropped and counted in the ``invalid`` field, and
``compute()`` raises. Binary labels always need one read (``nonzero``: the number of tasks is
data-dependent), so they work eagerly only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops, Runtime, get_ops
from rankstream.core.inputs import check_positive_ints, rank_batch
from rankstream.core.ranks import median as median_histogram
from rankstream.core.ranks import streamed_forms
from rankstream.core.ranks.families import EPSILON as EPSILON
from rankstream.core.ranks.families import (
    FAMILIES,
    METRICS,
    OUTPUTS,
    RANK_TYPES,
    STAT_WEIGHT_FIELD,
    check_rank_type,
    stat_state_fields,
    state_fields,
)
from rankstream.core.ranks.intervals import STATISTICS
from rankstream.core.ranks.report import GMR_WARN_BOUND as GMR_WARN_BOUND
from rankstream.core.ranks.report import RankReport
from rankstream.core.ranks.series import DEFAULT_GMR_ORDER as DEFAULT_GMR_ORDER
from rankstream.core.ranks.series import FLOAT32_GMR_ORDER as FLOAT32_GMR_ORDER
from rankstream.core.ranks.series import MAX_GMR_ORDER
from rankstream.core.ranks.sides import BOTH, check_sides, side_batches, side_inputs
from rankstream.core.ranks.streamed_forms import gmr_moments_xp as _gmr_moments  # noqa: F401 (the one GMR reducer)
from rankstream.core.ranks.tasks import RankTasks, task_ranks
from rankstream.core.ranks.term_table import TABLE_MAX, TermTable
from rankstream.core.state import join_flat, zero_sums
from rankstream.core.uncertainty import check_level

# RANK_TYPES (PyKEEN's order), METRICS (the families), OUTPUTS and EPSILON come from the
# rank-family registry, the GMR orders from the series (all re-exported here)

#: statistics streamed besides the families: the rank's variance and standard deviation
#: (``dispersion``: sums of ``w r`` and ``w r^2``) and the median rank and median absolute
#: deviation (``median``: a bounded histogram of ranks)
EXTRAS: tuple[str, ...] = ("dispersion", "median")
#: everything :class:`RankKernel` can keep (its default)
KERNEL_METRICS: tuple[str, ...] = (*METRICS, *EXTRAS)
#: ranks below this are binned exactly in the median's histogram (then log-spaced bins)
MEDIAN_EXACT = 1024
#: log-spaced histogram bins per doubling of the rank above :data:`MEDIAN_EXACT`
MEDIAN_BINS_PER_OCTAVE = 64
#: fields of one rank type (the rest of a side's fields depend only on the candidate counts
#: and weights, so every rank type shares them)
_TYPE_FIELDS = ("hits", "inverse_rank", "log_rank", "rank", "rank_squared", "rank_histogram")
#: warn when the GMR expectation's error bound exceeds this (relative)

_NEG_INF = float("-inf")


def _identity(r: Array, xp: Any, k: Any) -> Array:
    return r


def _square(r: Array, xp: Any, k: Any) -> Array:
    return r * r


#: the per-task values an extra sums per rank type: (field, ``value(r, xp, k)``)
_EXTRA_VALUES: dict[str, tuple[tuple[str, Callable[..., Array]], ...]] = {
    "dispersion": (("rank", _identity), ("rank_squared", _square)),
    "median": (),  # a histogram of the ranks (rank_histogram)
}


def _rank_types(rank_type: Any) -> tuple[str | list[str], tuple[str, ...]]:
    """``(rank_type as configured, the rank types in PyKEEN's order)`` of a rank type or a
    sequence of them."""
    if isinstance(rank_type, str):
        return check_rank_type(rank_type), (rank_type,)
    if not isinstance(rank_type, Sequence) or not rank_type:
        raise ValueError(
            f"rank_type must be one of {RANK_TYPES} or a non-empty sequence of them, got {rank_type!r}"
        )
    for rt in rank_type:
        check_rank_type(rt)
    types = tuple(rt for rt in RANK_TYPES if rt in rank_type)
    return list(types), types


class RankKernel(RankReport):
    """Every rank-based metric of one or several rank types, for one or several named sides,
    from one rank computation per batch and side.

    Args:
        ks: the cut-offs of Hits@k (a positive int or a list of them).
        rank_type: ``"optimistic"``, ``"pessimistic"`` or ``"realistic"`` (default); or a
            sequence of them (``RANK_TYPES`` for all three): every type from the same
            comparison passes (the optimistic count ``#(s > s_true)`` and the pessimistic
            ``#(s >= s_true)`` give the realistic rank too).
        metrics: what the state keeps, a subset of :data:`KERNEL_METRICS`: the families
            ``("hits", "mrr", "gmr", "mr")`` and the extras ``"dispersion"`` (the rank's
            variance and standard deviation) and ``"median"`` (median rank, median absolute
            deviation, from a bounded histogram).
        select: ``None`` (``compute`` returns the dict of every value) or ``(family, form)``
            with ``form`` in ``("value", "expected", "variance", "adjusted", "z")`` (a float,
            or a list ordered by ``ks`` for Hits@k with several ``k``); one rank type, no sides.
        gmr_order: number of cumulant sums for the GMR expectation (1..20); by default
            chosen from ``state_dtype`` (:func:`rankstream.core.ranks.streamed_forms.default_gmr_order`).
        state_dtype: the dtype the adapter keeps the state in (``"float64"`` or
            ``"float32"``; numpy/torch/keras dtype objects work too): float32 state gets
            :data:`FLOAT32_GMR_ORDER` (8) cumulant sums, float64 :data:`DEFAULT_GMR_ORDER` (20).
        table_max: widest list whose expectation terms come from a cached per-N table.
        sides: ``None``, or the names of the sides a batch can belong to (PyKEEN's
            ``("head", "tail")``): each side has its own sums; an update is then a mapping
            ``{side: batch}`` (a plain batch with one side only), and the report has every side
            plus ``"both"``, the sum of the sides (PyKEEN's combined side).
        filtered_scores: accept PyKEEN's filtered scores: NaN and ``-inf`` scores are not
            candidates (as a ``mask`` False there; PyKEEN counts the candidates with
            ``isfinite``: a ``-inf`` score never outranks a finite true score, so it changes
            only the number of candidates). Without it a NaN score among the candidates is an
            error and ``-inf`` is the lowest score, a candidate.
        median_exact, median_bins_per_octave: the median's histogram: ranks below
            ``median_exact`` exactly, then ``median_bins_per_octave`` log-spaced bins per doubling
            (:func:`rankstream.core.ranks.median.rank_bins`); the bound of each median is reported.
        confidence: ``None`` (default: no statistics, the state and report as without the
            option), or a level in (0, 1) such as 0.95: the state also keeps, per rank type and
            side, the sums of the standard error of each family's mean over tasks (the sampling
            units, weighted as the mean weighs them), and the report adds ``<key>_stderr``,
            ``<key>_ci_low`` and ``<key>_ci_high`` beside each family's value ``<key>``
            (``hits_at_10``, ``inverse_harmonic_mean_rank``, ``geometric_mean_rank``,
            ``arithmetic_mean_rank``): the ratio-estimator standard error
            ``sqrt(n / (n - 1) * sum w^2 (v - m)^2) / sum w`` of the weighted mean ``m`` of the
            per-task values ``v`` (``s / sqrt(n)`` for unit weights) and the Student-t interval
            ``m +- t_{(1 + level) / 2, n - 1} * se`` (``n = count``, the tasks of positive
            weight). The geometric mean rank is ``exp`` of the mean log rank: its
            ``_stderr`` is on the log scale (that of the mean of ``ln r``), its ``_ci_low`` and
            ``_ci_high`` on the rank scale (the log-scale interval mapped by ``exp``). NaN with
            fewer than two tasks. With ``select``, the report is
            ``{"value", "stderr", "ci_low", "ci_high", "count"}`` (:attr:`quantities`); only
            the ``"value"`` form then.

    **Report keys.** With one rank type given as a string and no sides, ``compute`` keys by
    metric (``hits_at_10``, ...). With a sequence of rank types or with sides, keys are
    PyKEEN's flat ones, ``"{side}.{rank_type}.{metric}"`` (``RankBasedMetricResults.
    to_flat_dict()``), the side ``"both"`` when there are no named sides.
    """

    name = "rank_based"

    def __init__(
        self,
        ks: int | Sequence[int] = (1, 3, 10),
        rank_type: str | Sequence[str] = "realistic",
        *,
        metrics: Sequence[str] = KERNEL_METRICS,
        select: tuple[str, str] | None = None,
        gmr_order: int | None = None,
        state_dtype: Any = "float64",
        table_max: int = TABLE_MAX,
        k_name: str = "ks",
        sides: Sequence[str] | None = None,
        filtered_scores: bool = False,
        median_exact: int = MEDIAN_EXACT,
        median_bins_per_octave: int = MEDIAN_BINS_PER_OCTAVE,
        confidence: float | None = None,
    ) -> None:
        self.ks = sorted(set(check_positive_ints(ks, k_name)))
        # private: no field of the saved config (the sums do not depend on the level), so a
        # state without statistics is saved exactly as without the option
        self._confidence = None if confidence is None else check_level(confidence)
        self.rank_type, self.rank_types = _rank_types(rank_type)
        self.sides = check_sides(sides)
        self.report = not isinstance(rank_type, str) or self.sides is not None
        metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        if not metrics or any(m not in KERNEL_METRICS for m in metrics):
            raise ValueError(f"metrics must be a non-empty subset of {KERNEL_METRICS}, got {metrics!r}")
        self.metrics = tuple(m for m in KERNEL_METRICS if m in metrics)
        if select is not None:
            self._check_select(select, confidence)
        self.selected = select  # (family, form) reported, or None for every value
        if not isinstance(filtered_scores, bool):
            raise TypeError(f"filtered_scores must be a bool, got {filtered_scores!r}")
        self.filtered_scores = filtered_scores
        # private: not part of the checkpointed config (gmr_order, which it picks, is)
        self._state_dtype = streamed_forms.state_dtype_name(state_dtype)
        if gmr_order is None:
            gmr_order = streamed_forms.default_gmr_order(self._state_dtype)
        top = MAX_GMR_ORDER
        if isinstance(gmr_order, bool) or not isinstance(gmr_order, int) or not 1 <= gmr_order <= top:
            raise ValueError(f"gmr_order must be an int in [1, {MAX_GMR_ORDER}], got {gmr_order!r}")
        self.gmr_order = gmr_order
        self.table_max = int(table_max)
        self._bins = None
        if "median" in self.metrics:
            self._bins = median_histogram.rank_bins(median_exact, median_bins_per_octave)
            self.median_exact, self.median_bins_per_octave = median_exact, median_bins_per_octave
        self._families = tuple(FAMILIES[m] for m in self.metrics if m in METRICS)
        # the expectation columns of the families, summed per task from a per-N table
        self._term_table = TermTable(self._families, self.ks, gmr_order, self.table_max)
        self._declare_fields()

    def _check_select(self, select: tuple[str, str], confidence: float | None) -> None:
        """Raise where ``select`` (family, form) names no reported value of this kernel."""
        fam, form = select
        if self.report:
            raise ValueError("select needs one rank type (a str) and no sides")
        if fam not in self.metrics or fam not in METRICS:
            raise ValueError(f"select names the family {fam!r}, not among metrics {self.metrics}")
        if form not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {form!r}")
        if self._confidence is not None and form != "value":
            raise ValueError(
                f"confidence gives the standard error and interval of the value only: it needs "
                f"output='value', got output={form!r} with confidence={confidence!r}"
            )

    def _declare_fields(self) -> None:
        """The per-task values summed per rank type, the state fields (one side and type: the
        registry's order, as saved states have it; else side-major) and the columns of the
        standard errors (with a ``confidence`` level)."""
        # the per-task values summed per rank type: (field, value(r, xp, k), takes k), each
        # family's then the extras' (a field two of them sum is computed once)
        values = [(fam.value_field, fam.value, fam.takes_k) for fam in self._families]
        values += [(f, value, False) for m in self.metrics for f, value in _EXTRA_VALUES.get(m, ())]
        self._values = [v for i, v in enumerate(values) if v[0] not in {u[0] for u in values[:i]}]
        # the fields of one side and one rank type (the registry's, then the extras');
        # invalid: rows with bad data found where update could not raise (no read-back)
        unit = state_fields([fam.name for fam in self._families], len(self.ks), self.gmr_order)
        for field, _, _ in self._values:
            unit.setdefault(field, ())
        if self._bins is not None:
            unit["rank_histogram"] = (len(self._bins),)
        # the standard errors' fields (after every other, so the rest keep their places)
        self._stat_columns: list[tuple[str, str | None, int]] = []
        stat_only: set[str] = set()
        if self._confidence is not None:
            stat_only = set(stat_state_fields(self.metrics, len(self.ks))) - set(unit)
            unit.update(stat_state_fields(self.metrics, len(self.ks)))
            start = 0
            for fam in self._families:  # whose values are the first columns of _values
                w2v, w2v2 = fam.stat_fields
                self._stat_columns.append((w2v, None if w2v2 == w2v else w2v2, start))
                start += len(self.ks) if fam.takes_k else 1
            self._stat_width = start
        typed = {*_TYPE_FIELDS, *(f for fam in self._families for f in fam.stat_fields)}
        self._shared = {f: shape for f, shape in unit.items() if f not in typed}
        self._typed = {f: shape for f, shape in unit.items() if f in typed}
        # one side and type: the registry's order (as saved states have it); else side-major
        self.fields: dict[str, tuple[int, ...]] = {} if self.report else dict(unit)
        for side in self._side_names() if self.report else ():
            self.fields.update({self._field(side, None, f): shape for f, shape in self._shared.items()})
            for rt in self.rank_types:
                self.fields.update({self._field(side, rt, f): shape for f, shape in self._typed.items()})
        #: the fields only the statistics read (a state saved without them still loads: see
        #: :func:`~rankstream.core.state.unpack_state`)
        self.statistic_fields = frozenset(
            name for name in self.fields if name.rsplit("__", 1)[-1] in stat_only
        )

    @property
    def confidence(self) -> float | None:
        """The level of the intervals, or None (no statistics kept)."""
        return self._confidence

    @property
    def quantities(self) -> tuple[str, ...]:
        """What a selected family reports besides its value: with ``confidence``,
        ``("stderr", "ci_low", "ci_high", "count")``; none otherwise (and with no ``select``:
        the dict of every value carries ``<key>_stderr``... itself)."""
        if self._confidence is None or self.selected is None:
            return ()
        return (*STATISTICS, "count")

    # -- layout ----------------------------------------------------------------------------
    def _side_names(self) -> tuple[str, ...]:
        return self.sides or (BOTH,)

    def _field(self, side: str, rank_type: str | None, field: str) -> str:
        """The state field ``field`` of a side (shared by its rank types when ``rank_type`` is
        None): the bare name without sides and rank-type list, else ``side__[type__]field``."""
        if not self.report:
            return field
        return f"{side}__{field}" if rank_type is None else f"{side}__{rank_type}__{field}"

    # -- Kernel protocol -------------------------------------------------------------------
    random_ties = False  # ties are counted exactly, never broken

    def runtime(self, generator: Any = None) -> Runtime:
        """What an instance of this metric owns across updates (its workspace)."""
        return Runtime()

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        """A context for one call outside an instance (a fresh workspace)."""
        return self.runtime().context(like, ops)

    def batch_sums(
        self, ctx: Context | None, y_pred: Any, y: Any = None, mask: Any = None, sample_weight: Any = None,
        flat: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Any:  # fmt: skip
        """The state fields' sums of one batch (on the input's device). With named
        :attr:`sides`, ``y_pred`` may be a mapping ``{side: batch}`` (each batch a tuple
        ``(y_pred, y[, {"mask": m, "sample_weight": w}])`` or a mapping with those keys, as
        :func:`~rankstream.core.inputs.unpack_output` reads; ``y``, ``mask`` and
        ``sample_weight`` are then not given); sides missing from it add nothing. With ``flat``
        (the fields' shapes, in order) joined into one 1-D array."""
        batches = side_inputs(self.sides, y_pred, y, mask, sample_weight)
        first = next(iter(batches.values()))[0]
        ctx = ctx or self.context(first, get_ops(*(v for b in batches.values() for v in b)))
        sums = {side: self._side_sums(ctx, *batch) for side, batch in batches.items()}
        laid = self._laid_out(ctx, sums)
        return laid if flat is None else join_flat(ctx.ops, laid, flat)

    def side_batches(self, output: Mapping[str, Any]) -> dict[str, tuple[Any, Any, Any, Any]]:
        """``{side: (y_pred, y, mask, sample_weight)}`` of a mapping of sides (validated names;
        each value as :func:`~rankstream.core.inputs.unpack_output` reads it)."""
        return side_batches(self.sides, output)

    def rank_sums(
        self,
        optimistic: Any,
        pessimistic: Any,
        num_candidates: Any,
        weights: Any = None,
        side: str | None = None,
    ) -> dict[str, Array]:
        """The state fields' sums of tasks given by their ranks, not by scores (a catalog counted
        chunk by chunk, :func:`rankstream.catalog.rank_types`): flat arrays of each task's
        ``optimistic = 1 + #{c: s_c > s}`` and ``pessimistic = #{c: s_c >= s}`` ranks (the
        realistic rank is their mean) and its number of candidates ``N``, optional weights
        (default 1), for one ``side`` (None: the only side; the other sides add zeros). NumPy
        float64 arrays, by field name; the caller has checked ``1 <= optimistic <= pessimistic
        <= N``."""
        side = side if side is not None else self._side_names()[0]
        if side not in self._side_names():
            raise ValueError(f"side must be one of {self._side_names()}, got {side!r}")
        opt, pes, nc = (
            np.asarray(a, dtype=np.float64).reshape(-1, 1) for a in (optimistic, pessimistic, num_candidates)
        )
        w = np.ones_like(nc) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1, 1)
        ops = get_ops(nc)
        ctx = self.context(nc, ops)
        if nc.shape[0] == 0:
            shapes = {
                **self._shared,
                **{(rt, f): s for rt in self.rank_types for f, s in self._typed.items()},
            }
            sums = zero_sums(ops, shapes, nc)
        else:
            tasks = RankTasks(ops, opt, pes, nc, w, np.ones(nc.shape, dtype=bool))
            sums = self._task_sums(ctx, tasks, n=int(nc.max()))
        return self._laid_out(ctx, {side: sums})

    def _side_sums(self, ctx: Context, y_pred: Any, y: Any, mask: Any, weight: Any) -> dict[Any, Array]:
        """Sums of one side's batch: shared fields by name, per-type fields by (type, name)."""
        batch = rank_batch(y_pred, y, mask, weight, ops=ctx.ops)
        if self.filtered_scores:
            # NaN > -inf and -inf > -inf are False: PyKEEN's filtered (and -inf) scores
            keep = batch.scores > _NEG_INF
            batch = dataclasses.replace(batch, valid=keep if batch.valid is None else batch.valid & keep)
        if batch.scores.shape[0] == 0:  # no task: nothing to read, the sums are zeros (an update's no-op)
            shapes = {
                **self._shared,
                **{(rt, f): s for rt in self.rank_types for f, s in self._typed.items()},
            }
            return zero_sums(ctx.ops, shapes, batch.scores)
        tasks = task_ranks(ctx, batch, self.rank_types)
        return self._task_sums(ctx, tasks, n=int(batch.scores.shape[1]))

    def _laid_out(self, ctx: Context, sums: Mapping[str, Mapping[Any, Array]]) -> dict[str, Array]:
        """Every field of :attr:`fields` from per-side sums (zeros for absent sides)."""
        ops = ctx.ops
        like = next(iter(next(iter(sums.values())).values()))
        out: dict[str, Array] = {}
        for side in self._side_names():
            got = sums.get(side)
            for rt in (None, *self.rank_types):
                for f, shape in (self._shared if rt is None else self._typed).items():
                    name = self._field(side, rt, f)
                    if got is None:
                        out[name] = ops.zeros(shape, like, like.dtype)
                    else:
                        out[name] = got[f] if rt is None else got[(rt, f)]
        return out

    def _task_sums(self, ctx: Context, tasks: RankTasks, n: int) -> dict[Any, Array]:
        ops = ctx.ops
        w = ops.reshape(tasks.weights, (-1,))
        is_task = ops.reshape(tasks.is_task, (-1,))
        nc = ops.where(is_task, ops.reshape(tasks.num_candidates, (-1,)), 1.0)
        acc = w.dtype
        out: dict[Any, Array] = {"weight": ops.sum(w), "count": ops.sum(ops.cast(w > 0, acc))}
        out["invalid"] = (
            out["weight"] * 0.0 if tasks.invalid is None else ops.sum(ops.cast(tasks.invalid, acc))
        )
        if self._confidence is not None:
            out[STAT_WEIGHT_FIELD] = ops.sum(w * w)
        # the expectation terms: sum_t w_t^p(c) terms[t, c] for every column c in one reduction
        columns = self._term_table.columns
        if columns:
            powers = [w]
            for _ in range(max(p for _, p in columns) - 1):
                powers.append(powers[-1] * w)
            weights = ops.stack([powers[p - 1] for _, p in columns], axis=1)
            col_sums = ops.sum(weights * self._term_table.terms(ctx, nc, n, w), axis=0)
            start = 0
            for field, group in itertools.groupby(columns, key=lambda c: c[0]):
                size = len(list(group))
                out[field] = col_sums[start : start + size] if self._shared[field] else col_sums[start]
                start += size
        # the values of every rank type at once, stacked (T, tasks): one op per quantity
        ranks = [ops.where(is_task, ops.reshape(tasks.ranks(rt), (-1,)), 1.0) for rt in self.rank_types]
        for field, value in self._value_sums(ctx, ops.stack(ranks), w).items():
            out.update({(rt, field): value[i] for i, rt in enumerate(self.rank_types)})
        return out

    def _value_sums(self, ctx: Context, r: Array, w: Array) -> dict[str, Array]:
        """The per-rank-type fields, each of shape ``(T, ...)``, of ranks ``r`` ``(T, tasks)``
        (one row per rank type) with weights ``w`` ``(tasks,)``: the per-task values of the
        families (the registry's ``value``, Hits@k's for every cut-off at once) and the extras
        side by side (``(T, tasks, F)``), weighted and summed in one reduction; the histogram in
        one pass."""
        ops = ctx.ops
        acc = w.dtype
        xp, r3 = ops.xp, r[:, :, None]
        ks = ops.asarray(self.ks, like=r, dtype=acc) if any(v[2] for v in self._values) else None
        cols = [value(r3, xp, ks if takes_k else None) for _, value, takes_k in self._values]
        sizes = [(field, len(self.ks) if takes_k else 0) for field, _, takes_k in self._values]
        out: dict[str, Array] = {}
        if cols:
            values = cols[0] if len(cols) == 1 else ops.concat(cols, axis=2)
            sums = ops.sum(values * w[None, :, None], axis=1)  # (T, F)
            start = 0
            for field, size in sizes:
                out[field] = sums[:, start : start + size] if size else sums[:, start]
                start += max(size, 1)
            if self._stat_columns:  # the families' values come first: sum w^2 v, sum w^2 v^2
                out.update(self._stat_sums(ctx, values[:, :, : self._stat_width], w))
        if self._bins is not None:
            out["rank_histogram"] = ops.histogram(r, w, self._edges(ctx, w))
        return out

    def _stat_sums(self, ctx: Context, values: Array, w: Array) -> dict[str, Array]:
        """The standard errors' per-rank-type fields from the families' per-task values
        ``values`` ``(T, tasks, F)``: ``sum w^2 v`` and ``sum w^2 v^2`` of each column."""
        ops = ctx.ops
        wv = values * (w * w)[None, :, None]
        first, second = ops.sum(wv, axis=1), ops.sum(wv * values, axis=1)  # (T, F)
        out: dict[str, Array] = {}
        size = len(self.ks)
        for fam, (w2v, w2v2, start) in zip(self._families, self._stat_columns, strict=True):
            part = (lambda a, s=start: a[:, s : s + size]) if fam.takes_k else (lambda a, s=start: a[:, s])
            out[w2v] = part(first)
            if w2v2 is not None:
                out[w2v2] = part(second)
        return out

    def _edges(self, ctx: Context, like: Array) -> Array:
        """The histogram's edges on the device and in the dtype of ``like`` (kept in the
        workspace; rebuilt while tracing, as the term table)."""
        ops, edges = ctx.ops, self._bins.edges
        if not ops.eager:
            return ops.asarray(edges, like=like, dtype=like.dtype)
        key = (ops.name, str(getattr(like, "device", "")), str(like.dtype))
        return ctx.workspace.get("rank_edges", key, lambda: ops.asarray(edges, like=like, dtype=like.dtype))

    def __repr__(self) -> str:
        sides = "" if self.sides is None else f", sides={self.sides}"
        return (
            f"RankKernel(ks={self.ks}, rank_type={self.rank_type!r}, metrics={self.metrics}, "
            f"select={self.selected!r}{sides})"
        )
