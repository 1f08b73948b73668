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
expectations are right for ragged lists.

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
    rank_histogram (H,)  sum w per bin of r (median rank and MAD; stats.rank_bins)

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
(:func:`rankstream.core.ranks.stats.gmr_stream_terms`), kept as the Taylor coefficients ``F_m / m!``
(``|kappa_m|`` grows like ``(m-1)!``: ``F_m`` itself would leave float32's range at weights
near 10 for large lists, ``F_m / m!`` only near ``(m 3.4e38)^(1/m)``); the variance uses the
same sums, and
``gmr_tail`` bounds the truncation error (:func:`rankstream.core.ranks.stats.gmr_moments_from_sums`,
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
import functools
import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops, Runtime, get_ops
from rankstream.core.inputs import RankBatch, _shape, check_positive_ints, rank_batch, unpack_output
from rankstream.core.ranks import stats
from rankstream.core.ranks.families import EPSILON as EPSILON
from rankstream.core.ranks.families import (
    FAMILIES,
    METRICS,
    OUTPUTS,
    RANK_TYPES,
    RankFamily,
    check_rank_type,
    safe_divide,
    state_fields,
)
from rankstream.core.ranks.stats import DEFAULT_GMR_ORDER as DEFAULT_GMR_ORDER
from rankstream.core.ranks.stats import FLOAT32_GMR_ORDER as FLOAT32_GMR_ORDER
from rankstream.core.state import check_sums

# RANK_TYPES (PyKEEN's order), METRICS (the families), OUTPUTS and EPSILON come from the
# rank-family registry, the GMR orders from stats (all re-exported here)

#: expectation terms come from a cached per-N table up to this list width, else per task
TABLE_MAX = 1 << 17
#: the per-N table is built this many widths at a time
_TABLE_CHUNK = 1 << 11
#: where values are read back, a per-N table of more terms than this (widths x columns) is
#: replaced by rows for the candidate counts seen (a 256 x 20,000 batch's table of 31 columns
#: would hold a quarter of its scores' bytes)
_DENSE_TABLE_MAX = 1 << 16
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
#: the side under which a kernel without named sides reports (PyKEEN's combined side)
BOTH = "both"
#: fields of one rank type (the rest of a side's fields depend only on the candidate counts
#: and weights, so every rank type shares them)
_TYPE_FIELDS = ("hits", "inverse_rank", "log_rank", "rank", "rank_squared", "rank_histogram")
#: warn when the GMR expectation's error bound exceeds this (relative)
GMR_WARN_BOUND = 1e-3

_NEG_INF = float("-inf")
_LN2 = math.log(2.0)


def _xp(ops: Ops) -> Any:
    """The elementwise namespace of ``ops`` (numpy, ``keras.ops``, torch)."""
    return ops.xp


# ==========================================================================================
# ranks


@dataclass
class RankTasks:
    """Per-task arrays of shape (B, P) in the accumulation dtype (P = 1 for index targets,
    the largest number of positives of a row for labels; slots past a row's positives have
    ``weights`` 0 and ``is_task`` False). ``optimistic`` or ``pessimistic`` is ``None`` when
    the rank types asked for do not need it."""

    ops: Ops
    optimistic: Array | None
    pessimistic: Array | None
    num_candidates: Array
    weights: Array
    is_task: Array
    invalid: Array | None = None  # (B,) rows with bad data, where update could not raise

    def ranks(self, rank_type: str) -> Array:
        if rank_type == "optimistic":
            return self.optimistic
        if rank_type == "pessimistic":
            return self.pessimistic
        return (self.optimistic + self.pessimistic) * 0.5


def _needs(rank_types: Sequence[str]) -> tuple[bool, bool]:
    """Which counts (#greater, #greater-or-equal) the rank types need."""
    for rt in rank_types:
        check_rank_type(rt)
    return (
        any(rt != "pessimistic" for rt in rank_types),
        any(rt != "optimistic" for rt in rank_types),
    )


def _host_checks(ctx: Context, batch: RankBatch, flags: dict[str, Array]) -> dict[str, bool]:
    """One host read of every deferred check (and of the weights); returns name -> bool."""
    ops = ctx.ops
    if batch.weights is not None:
        w = batch.weights
        flags = {**flags, "weights": ops.any((w < 0) | ~ops.isfinite(w))}
    if not flags or not ops.eager:
        return dict.fromkeys(flags, False)
    out = dict(zip(flags, ops.host_bools(ops.stack(list(flags.values()))), strict=True))
    if out.get("weights"):
        w = ops.to_numpy(batch.weights)
        raise ValueError(
            "sample_weight must be finite and >= 0 (a weight-0 row is not counted), got "
            f"{w[:8].tolist()}{'...' if w.shape[0] > 8 else ''}"
        )
    return out


def _raise_nan() -> None:
    raise ValueError("y_pred contains NaN scores (among the candidates); NaN scores are not ranked")


def task_ranks(ctx: Context, batch: RankBatch, rank_types: Sequence[str] = RANK_TYPES) -> RankTasks:
    """Ranks and candidate counts of every task of the batch (the optimistic rank needs one
    comparison pass, the pessimistic one another, the realistic rank both).

    Raises ``ValueError`` on NaN scores among the candidates, indices out of range, a masked
    true candidate, labels other than 0/1 and negative or non-finite weights (where values
    can be read back; else index targets' bad rows are counted in ``invalid``)."""
    need = _needs(rank_types)
    if batch.target is not None:
        return _ranks_of_targets(ctx, batch, need)
    return _ranks_of_labels(ctx, batch, need)


def _ranks_of_targets(ctx: Context, batch: RankBatch, need: tuple[bool, bool]) -> RankTasks:
    ops, ws = ctx.ops, ctx.workspace
    scores, valid = batch.scores, batch.valid
    b, n = _shape(scores)
    acc = ops.acc_dtype(scores)
    y = batch.target
    out_of_range = (y < 0) | (y >= n)
    yc = ops.cast(ops.minimum(ops.maximum(y, 0), n - 1), ops.int_dtype())[:, None]
    t = ops.take_along(scores, yc)[:, 0]
    masked = None
    if valid is not None:
        masked = ~ops.take_along(valid, yc)[:, 0]
        n_keep = ops.row_count(valid, acc, ws)
    else:
        n_keep = ops.zeros((b,), scores, acc) + float(n)
    # the removed candidates count as -inf scores; NaN among the candidates is counted
    gt, ge, nan = ops.rank_counts(scores, t, acc, need, keep=valid, ws=ws)
    w = batch.weights if batch.weights is not None else ops.zeros((b,), scores, acc) + 1.0
    invalid = None
    if ctx.read_back:
        flags = {"range": ops.any(out_of_range), "nan": ops.any(nan > 0)}
        if masked is not None:
            flags["masked"] = ops.any(masked)
        bad = _host_checks(ctx, batch, flags)
        if bad.get("range"):
            yn = ops.to_numpy(y)
            wrong = yn[(yn < 0) | (yn >= n)]
            raise ValueError(
                f"y holds indices out of range for {n} candidates (valid: 0..{n - 1}), got "
                f"{wrong[:8].tolist()}{'...' if wrong.shape[0] > 8 else ''}"
            )
        if bad.get("masked"):
            rows = np.nonzero(ops.to_numpy(masked))[0]
            raise ValueError(
                f"the true candidate of rows {rows[:8].tolist()} is masked out (mask False at y); "
                "a true candidate must be a candidate"
            )
        if bad.get("nan"):
            _raise_nan()
    else:
        # no read-back (accelerator, tracing): bad rows are counted, compute() raises
        invalid = out_of_range | (nan > 0)
        if masked is not None:
            invalid = invalid | masked
        if batch.weights is not None:
            invalid = invalid | (w < 0) | ~ops.isfinite(w)
        w = ops.where(invalid, 0.0, w)
    if valid is not None and ge is not None:
        # -inf fills the removed candidates: they compare >= a true score of -inf.
        ge = ge - ops.where(t == _NEG_INF, float(n) - n_keep, 0.0)
    return RankTasks(
        ops=ops,
        optimistic=None if gt is None else (gt + 1.0)[:, None],
        pessimistic=None if ge is None else ge[:, None],
        num_candidates=n_keep[:, None],
        weights=w[:, None],
        is_task=ops.ones_bool(n_keep[:, None]) if invalid is None else ~invalid[:, None],
        invalid=invalid,
    )


def _positive_slots(
    ops: Ops, pos: Array, like: Array, valid: Array | None = None
) -> tuple[Array, Array, Array, np.ndarray]:
    """Column of every positive (``pos``, and ``valid`` where given) laid out in slots:
    ``idx`` (B, P) ints, ``has`` (B, P) bool, positives per row (B,) in the acc dtype (device)
    and on the host (P = the largest count, at least 1 column).

    One ``nonzero`` (a host read: the number of tasks is data-dependent); the O(tasks)
    layout is done on the host."""
    b, n = _shape(pos)
    found = ops.nonzero(ops.reshape(pos, (-1,)))
    if valid is not None:  # the positives' membership, read with them: no (B, N) temporary
        found = ops.stack([found, ops.cast(ops.take(ops.reshape(valid, (-1,)), found, axis=0), found.dtype)])
        found = ops.to_numpy(found)
        flat = found[0][found[1] > 0].astype(np.int64)
    else:
        flat = ops.to_numpy(found).astype(np.int64)
    rows, cols = np.divmod(flat, n)
    per_row = np.bincount(rows, minlength=b)
    p_max = int(per_row.max()) if flat.size else 0
    starts = np.cumsum(per_row) - per_row
    slot = np.arange(flat.size) - starts[rows]
    idx = np.zeros((b, max(p_max, 1)), dtype=np.int64)
    has = np.zeros((b, max(p_max, 1)), dtype=bool)
    idx[rows, slot] = cols
    has[rows, slot] = True
    acc = ops.acc_dtype(like)
    return (
        ops.asarray(idx, like=like),
        ops.asarray(has, like=like),
        ops.asarray(per_row.astype(np.float64), like=like, dtype=acc),
        per_row,
    )


def _slot_counts(
    ctx: Context,
    scores: Array,
    keep: Array | None,
    drop: Array | None,
    t: Array,
    rows: np.ndarray,
    acc: Any,
    need: tuple[bool, bool],
) -> tuple[Array | None, Array | None]:
    """Counts of one positive slot (``t`` is NaN on the rows without it, so they count 0).

    When few rows have the slot, only those rows are compared (gathering a fraction f of the
    rows and comparing them costs about as much as comparing all rows when f is around 0.6)."""
    ops, ws = ctx.ops, ctx.workspace
    b = int(scores.shape[0])
    if rows.size > 0.6 * b:
        gt, ge, _ = ops.rank_counts(scores, t, acc, need, keep=keep, drop=drop, ws=ws)
        return gt, ge
    r = ops.asarray(rows, like=t)
    t = ops.take(t, r, axis=0)
    gt, ge, _ = ops.rank_counts(scores, t, acc, need, keep=keep, drop=drop, rows=r, ws=ws)
    zeros = ops.zeros((b,), t, acc)
    return (
        None if gt is None else ops.set_rows(zeros, r, gt),
        None if ge is None else ops.set_rows(zeros, r, ge),
    )


def _ranks_of_labels(ctx: Context, batch: RankBatch, need: tuple[bool, bool]) -> RankTasks:
    ops, ws = ctx.ops, ctx.workspace
    scores, valid, labels = batch.scores, batch.valid, batch.labels
    if not ops.eager:
        raise ValueError(
            "binary labels y of shape (batch, num_candidates) need eager execution (the number "
            "of ranking tasks is data-dependent); under jit pass the index of the true candidate, "
            "shape (batch,)"
        )
    b, n = _shape(scores)
    acc = ops.acc_dtype(scores)
    flags: dict[str, Array] = {}
    n_valid = ops.zeros((b,), scores, acc) + float(n) if valid is None else ops.row_count(valid, acc, ws)
    # pos may hold positives outside the mask: they are no tasks (_positive_slots) and no
    # candidates (rank_counts keeps the mask first)
    pos = labels if ops.is_bool(labels) else labels == 1
    idx, has, n_pos, per_row = _positive_slots(ops, pos, scores, valid)
    if not ops.is_bool(labels):
        # binary: every candidate's label is >= 0, and those > 0 are the ones equal to 1 (NaN
        # fails the first); counted in tiles, with no (batch, candidates) temporary but pos
        above = ops.count_relevant(labels, 0.0, True, valid, acc, ws)
        at_least = ops.count_relevant(labels, 0.0, False, valid, acc, ws)
        flags["labels"] = ops.any((at_least != n_valid) | (above != n_pos))
    bad = _host_checks(ctx, batch, flags)
    if bad.get("labels"):
        ln = ops.to_numpy(labels)
        odd = (ln != 0) & (ln != 1)
        if valid is not None:
            odd &= ops.to_numpy(valid)
        raise ValueError(
            "y labels must be binary (0/1 or bool) on the candidates, got values "
            f"{np.unique(ln[odd])[:8].tolist()}"
        )
    p_max = int(per_row.max()) if per_row.size else 0
    w = batch.weights if batch.weights is not None else ops.zeros((b,), scores, acc) + 1.0
    w = w[:, None] * ops.cast(has, acc)
    if p_max == 0:
        one = ops.zeros((b, 1), scores, acc) + 1.0
        return RankTasks(ops, one, one, one, w, has)
    n_keep = n_valid - n_pos  # the non-positive candidates
    # the candidates of a positive: valid non-positives (the others count as -inf scores)
    keep, drop = valid, pos
    t_all = ops.where(has, ops.take_along(scores, idx), float("nan"))
    gts, ges = [], []
    for c in range(p_max):
        t = t_all[:, c]
        if c == 0:  # every row with a positive has slot 0: its pass gives the NaN check too
            gt, ge, nan = ops.rank_counts(scores, t, acc, need, keep=keep, drop=drop, ws=ws)
            if ops.host_bools(ops.any(nan > 0) | ops.any(ops.isnan(t_all) & has))[0]:
                _raise_nan()
        else:
            gt, ge = _slot_counts(ctx, scores, keep, drop, t, np.nonzero(per_row > c)[0], acc, need)
        gts.append(gt)
        if ge is not None:
            ges.append(ge - ops.where(t == _NEG_INF, float(n) - n_keep, 0.0))
    return RankTasks(
        ops=ops,
        optimistic=ops.stack(gts, axis=1) + 1.0 if need[0] else None,
        pessimistic=ops.stack(ges, axis=1) + 1.0 if need[1] else None,
        num_candidates=(n_keep + 1.0)[:, None] + 0.0 * w,
        weights=w,
        is_task=has,
    )


# ==========================================================================================
# the kernel


def _safe_divide(x: Array, y: Array, xp: Any = np) -> Array:
    """PyKEEN's ``_safe_divide`` (:func:`rankstream.core.ranks.families.safe_divide`)."""
    return safe_divide(x, y, xp)


def _gmr_moments(total: Array, coefficients: list[Array], tail: Array, xp: Any) -> tuple[Array, Array, Array]:
    """The one GMR reducer, :func:`rankstream.core.ranks.stats.gmr_moments_xp` (numpy or
    ``keras.ops``, traceable); ``coefficients[m - 1]`` is ``F_m / m!`` (the ``gmr_cumulants``
    field)."""
    return stats.gmr_moments_xp(total, coefficients, tail, xp)


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


def _sides(sides: Any) -> tuple[str, ...] | None:
    """Validated side names (unique non-empty strings, none of them ``both``), or None."""
    if sides is None:
        return None
    if isinstance(sides, str) or not isinstance(sides, Sequence) or not sides:
        raise ValueError(f"sides must be a non-empty sequence of names like ('head', 'tail'), got {sides!r}")
    names = tuple(sides)
    bad = [s for s in names if not isinstance(s, str) or not s or "." in s or "__" in s or s == BOTH]
    if bad or len(set(names)) != len(names):
        raise ValueError(
            f"sides must be unique non-empty names without '.' or '__', other than {BOTH!r} (reported as the "
            f"sum of the sides), got {sides!r}"
        )
    return names


class RankKernel:
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
            chosen from ``state_dtype`` (:func:`rankstream.core.ranks.stats.default_gmr_order`).
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
            (:func:`rankstream.core.ranks.stats.rank_bins`); the bound of each median is reported.

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
    ) -> None:
        self.ks = sorted(set(check_positive_ints(ks, k_name)))
        self.rank_type, self.rank_types = _rank_types(rank_type)
        self.sides = _sides(sides)
        self.report = not isinstance(rank_type, str) or self.sides is not None
        metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        if not metrics or any(m not in KERNEL_METRICS for m in metrics):
            raise ValueError(f"metrics must be a non-empty subset of {KERNEL_METRICS}, got {metrics!r}")
        self.metrics = tuple(m for m in KERNEL_METRICS if m in metrics)
        if select is not None:
            fam, form = select
            if self.report:
                raise ValueError("select needs one rank type (a str) and no sides")
            if fam not in self.metrics or fam not in METRICS:
                raise ValueError(f"select names the family {fam!r}, not among metrics {self.metrics}")
            if form not in OUTPUTS:
                raise ValueError(f"output must be one of {OUTPUTS}, got {form!r}")
        self.selected = select  # (family, form) reported, or None for every value
        if not isinstance(filtered_scores, bool):
            raise TypeError(f"filtered_scores must be a bool, got {filtered_scores!r}")
        self.filtered_scores = filtered_scores
        # private: not part of the checkpointed config (gmr_order, which it picks, is)
        self._state_dtype = stats.state_dtype_name(state_dtype)
        if gmr_order is None:
            gmr_order = stats.default_gmr_order(self._state_dtype)
        top = stats.MAX_GMR_ORDER
        if isinstance(gmr_order, bool) or not isinstance(gmr_order, int) or not 1 <= gmr_order <= top:
            raise ValueError(f"gmr_order must be an int in [1, {stats.MAX_GMR_ORDER}], got {gmr_order!r}")
        self.gmr_order = gmr_order
        self.table_max = int(table_max)
        self._bins = None
        if "median" in self.metrics:
            self._bins = stats.rank_bins(median_exact, median_bins_per_octave)
            self.median_exact, self.median_bins_per_octave = median_exact, median_bins_per_octave
        self._families = tuple(m for m in self.metrics if m in METRICS)
        # the fields of one side and one rank type (rank_family registry, then the extras);
        # invalid: rows with bad data found where update could not raise (no read-back)
        unit = state_fields(self._families, len(self.ks), gmr_order)
        if "dispersion" in self.metrics:
            unit.setdefault("rank", ())
            unit["rank_squared"] = ()
        if self._bins is not None:
            unit["rank_histogram"] = (len(self._bins),)
        self._shared = {f: shape for f, shape in unit.items() if f not in _TYPE_FIELDS}
        self._typed = {f: shape for f, shape in unit.items() if f in _TYPE_FIELDS}
        # one side and type: the registry's order (as saved states have it); else side-major
        self.fields: dict[str, tuple[int, ...]] = {} if self.report else dict(unit)
        for side in self._side_names() if self.report else ():
            self.fields.update({self._field(side, None, f): shape for f, shape in self._shared.items()})
            for rt in self.rank_types:
                self.fields.update({self._field(side, rt, f): shape for f, shape in self._typed.items()})

    # -- layout ----------------------------------------------------------------------------
    def _side_names(self) -> tuple[str, ...]:
        return self.sides or (BOTH,)

    def _field(self, side: str, rank_type: str | None, field: str) -> str:
        """The state field ``field`` of a side (shared by its rank types when ``rank_type`` is
        None): the bare name without sides and rank-type list, else ``side__[type__]field``."""
        if not self.report:
            return field
        return f"{side}__{field}" if rank_type is None else f"{side}__{rank_type}__{field}"

    # -- per-N expectation terms ---------------------------------------------------------
    def _columns(self) -> list[tuple[str, int]]:
        """(field, power of the task weight) of each column of :meth:`_unit_terms`; a field
        of shape (K,) or (M,) has K or M consecutive columns."""
        cols: list[tuple[str, int]] = []
        if "hits" in self.metrics:
            cols += [("hits_mean", 1)] * len(self.ks) + [("hits_var", 2)] * len(self.ks)
        if "mrr" in self.metrics:
            cols += [("inverse_rank_mean", 1), ("inverse_rank_var", 2)]
        if "mr" in self.metrics or "gmr" in self.metrics:
            cols += [("rank_mean", 1), ("rank_var", 2)]
        if "gmr" in self.metrics:
            cols += [("gmr_cumulants", m) for m in range(1, self.gmr_order + 1)]
            cols += [("gmr_tail", self.gmr_order + 1)]
        return cols

    def _unit_terms(self, n: Array, xp: Any) -> list[Array]:
        """Per-task terms at unit weight (``stats`` streaming forms with ``w = None``), in
        the order of :meth:`_columns`. Weights enter as ``w`` (means), ``w^2`` (variances)
        and ``w^m`` (GMR cumulant ``m``; ``w^(M+1)`` for the tail), as in ``stats``."""
        out: list[Array] = []
        if "hits" in self.metrics:
            hits = [stats.hits_stream_terms(n, None, xp, k=float(k)) for k in self.ks]
            out += [h["mean"] for h in hits] + [h["var"] for h in hits]
        if "mrr" in self.metrics:
            t = stats.mrr_stream_terms(n, None, xp)
            out += [t["mean"], t["var"]]
        if "mr" in self.metrics or "gmr" in self.metrics:
            t = stats.mean_rank_stream_terms(n, None, xp)
            out += [t["mean"], t["var"]]
        if "gmr" in self.metrics:
            t = stats.gmr_stream_terms(n, None, xp, order=self.gmr_order)
            # Taylor coefficients kappa_m / m! (magnitude about 1/m), see the module docstring
            out += [t[f"cumulant_{m}"] / float(math.factorial(m)) for m in range(1, self.gmr_order + 1)]
            out += [t["tail"]]
        return out

    def _table(self, ctx: Context, like: Array, n: int, acc: Any) -> Array:
        """(n, F) terms for N = 1..n, built with numpy once per width and kept, on the device
        of ``like``, in the instance's workspace. While tracing (``ops.eager`` False) only the
        numpy table is kept: a tensor made inside a ``jit`` trace belongs to it."""
        ops = ctx.ops

        def build() -> np.ndarray:
            # in chunks of N (every term is elementwise in N): the temporaries of the terms'
            # arithmetic, a few dozen arrays per column, stay those of one chunk at any width
            table: np.ndarray | None = None
            for start in range(0, n, _TABLE_CHUNK):
                grid = np.arange(start + 1, min(start + _TABLE_CHUNK, n) + 1, dtype=np.float64)
                cols = self._unit_terms(grid, np)
                if table is None:
                    table = np.empty((n, len(cols)), dtype=np.float64)
                for j, col in enumerate(cols):
                    table[start : start + grid.shape[0], j] = col
            assert table is not None  # n >= 1
            return table

        host = ctx.workspace.get("rank_terms", n, build)
        if not ops.eager:
            return ops.asarray(host, like=like, dtype=acc)
        key = (ops.name, n, str(getattr(like, "device", "")), str(acc))
        return ctx.workspace.get("rank_terms_device", key, lambda: ops.asarray(host, like=like, dtype=acc))

    def _seen_terms(self, ctx: Context, nc: Array, n: int, like: Array) -> Array:
        """(tasks, columns) unit-weight terms where values are read back and the per-N table
        would be large: rows only for the candidate counts seen so far (kept, sorted, in the
        instance's workspace; a batch computes those of the counts it sees first), gathered
        by a search of the sorted counts. The terms are elementwise in N, so each row is the
        table's row of that N."""
        ops = ctx.ops
        acc = nc.dtype
        want = np.asarray(ops.to_numpy(nc), dtype=np.float64)
        want = np.clip(np.nan_to_num(want, nan=1.0), 1.0, float(n))
        seen = ctx.workspace.get("rank_terms_seen", None, dict)
        counts = seen.get("n", np.empty(0))
        new = np.setdiff1d(np.unique(want), counts, assume_unique=True)
        if new.size:
            cols = self._unit_terms(new, np)
            rows = np.empty((new.size, len(cols)), dtype=np.float64)
            for j, col in enumerate(cols):
                rows[:, j] = col
            counts = np.concatenate([counts, new])
            order = np.argsort(counts, kind="stable")
            seen["n"] = counts[order]
            seen["rows"] = np.concatenate([seen["rows"], rows])[order] if "rows" in seen else rows[order]
            seen.pop("device", None)
        key = (ops.name, str(getattr(like, "device", "")), str(acc))
        if seen.get("device", (None,))[0] != key:
            seen["device"] = (key, ops.asarray(seen["rows"], like=like, dtype=acc))
        idx = ops.asarray(np.searchsorted(seen["n"], want), like=like, dtype=ops.int_dtype())
        return ops.take(seen["device"][1], idx, axis=0)

    def _terms(self, ctx: Context, nc: Array, n: int, like: Array) -> Array:
        """(tasks, columns) unit-weight terms of every task (flat ``nc``), by table lookup or
        directly."""
        ops = ctx.ops
        acc = nc.dtype
        if ctx.read_back and n * len(self._columns()) > _DENSE_TABLE_MAX:
            return self._seen_terms(ctx, nc, n, like)
        if n <= self.table_max:
            table = self._table(ctx, like, n, acc)
            idx = ops.cast(ops.minimum(ops.maximum(nc, 1.0), float(n)) - 1.0, ops.int_dtype())
            return ops.take(table, idx, axis=0)
        return ops.stack([c + 0.0 * nc for c in self._unit_terms(ops.maximum(nc, 1.0), ops.xp)], axis=1)

    # -- Kernel protocol -------------------------------------------------------------------
    random_ties = False  # ties are counted exactly, never broken

    def runtime(self, generator: Any = None) -> Runtime:
        """What an instance of this metric owns across updates (its workspace)."""
        return Runtime()

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        """A context for one call outside an instance (a fresh workspace)."""
        return self.runtime().context(like, ops)

    def batch_sums(
        self, ctx: Context | None, y_pred: Any, y: Any = None, mask: Any = None, sample_weight: Any = None
    ) -> dict[str, Array]:
        """The state fields' sums of one batch (on the input's device). With named
        :attr:`sides`, ``y_pred`` may be a mapping ``{side: batch}`` (each batch a tuple
        ``(y_pred, y[, {"mask": m, "sample_weight": w}])`` or a mapping with those keys, as
        :func:`~rankstream.core.inputs.unpack_output` reads; ``y``, ``mask`` and
        ``sample_weight`` are then not given); sides missing from it add nothing."""
        if isinstance(y_pred, Mapping):
            if y is not None or mask is not None or sample_weight is not None:
                raise ValueError("a mapping of sides carries its own y, mask and sample_weight")
            batches = self.side_batches(y_pred)
        elif self.sides is not None and len(getattr(y_pred, "shape", ())) == 3:
            batches = self.stacked_batches(y_pred, y, mask, sample_weight)
        else:
            if self.sides is not None and len(self.sides) > 1:
                raise ValueError(
                    f"this metric has the sides {self.sides}: update it with a mapping {{side: batch}} "
                    f"(e.g. {{'{self.sides[0]}': (y_pred, y)}}) or stacked sides (y_pred of shape "
                    f"(batch, {len(self.sides)}, num_candidates)), got y_pred of shape "
                    f"{tuple(getattr(y_pred, 'shape', ()))}"
                )
            batches = {self._side_names()[0]: (y_pred, y, mask, sample_weight)}
        first = next(iter(batches.values()))[0]
        ctx = ctx or self.context(first, get_ops(*(v for b in batches.values() for v in b)))
        sums = {side: self._side_sums(ctx, *batch) for side, batch in batches.items()}
        return self._laid_out(ctx, sums)

    def side_batches(self, output: Mapping[str, Any]) -> dict[str, tuple[Any, Any, Any, Any]]:
        """``{side: (y_pred, y, mask, sample_weight)}`` of a mapping of sides (validated names;
        each value as :func:`~rankstream.core.inputs.unpack_output` reads it)."""
        if self.sides is None:
            raise ValueError(
                "a mapping of sides needs a metric with named sides (sides=('head', 'tail')); got "
                f"keys {sorted(map(str, output))}"
            )
        unknown = [k for k in output if k not in self.sides]
        if unknown or not output:
            raise ValueError(
                f"the sides of this metric are {self.sides}; got keys {sorted(map(str, output))}"
            )
        return {side: unpack_output(output[side]) for side in self.sides if side in output}

    def stacked_batches(
        self, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> dict[str, tuple[Any, Any, Any, Any]]:
        """``{side: (y_pred, y, mask, sample_weight)}`` of stacked sides: ``y_pred`` of shape
        ``(batch, S, N)`` with ``S = len(sides)`` (side ``i`` at ``[:, i]``, the form of a
        Keras model with one output per query and side), ``y`` ``(batch, S)`` indices or
        ``(batch, S, N)`` labels, ``mask`` ``(batch, S, N)``, ``sample_weight`` per row
        ``(batch,)`` (every side) or ``(batch, S)``."""
        sides = self.sides or ()
        size = len(sides)

        def shape(x: Any) -> tuple[int, ...]:
            return tuple(int(d) for d in getattr(x, "shape", ()))

        if shape(y_pred)[1] != size:
            raise ValueError(
                f"y_pred with stacked sides must have shape (batch, {size}, num_candidates) for the sides "
                f"{sides}, got {shape(y_pred)}"
            )
        for name, x, ranks in (
            ("y", y, (2, 3)),
            ("mask", mask, (3,)),
            ("sample_weight", sample_weight, (0, 1, 2)),
        ):
            if x is not None and (len(shape(x)) not in ranks or (len(shape(x)) >= 2 and shape(x)[1] != size)):
                raise ValueError(
                    f"{name} with stacked sides (y_pred of shape {shape(y_pred)}) must have the sides on "
                    f"axis 1 ({size} of them), got shape {shape(x)}"
                )

        def part(x: Any, i: int) -> Any:
            return x[:, i] if x is not None and len(shape(x)) >= 2 else x

        return {
            side: (y_pred[:, i], y[:, i], part(mask, i), part(sample_weight, i))
            for i, side in enumerate(sides)
        }

    def _side_sums(self, ctx: Context, y_pred: Any, y: Any, mask: Any, weight: Any) -> dict[Any, Array]:
        """Sums of one side's batch: shared fields by name, per-type fields by (type, name)."""
        batch = rank_batch(y_pred, y, mask, weight, ops=ctx.ops)
        if self.filtered_scores:
            # NaN > -inf and -inf > -inf are False: PyKEEN's filtered (and -inf) scores
            keep = batch.scores > _NEG_INF
            batch = dataclasses.replace(batch, valid=keep if batch.valid is None else batch.valid & keep)
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

    def sums_of_tasks(self, ctx: Context, tasks: RankTasks, n: int) -> dict[str, Array]:
        """Field sums of a set of tasks of the (only) side (``n`` bounds the candidate counts)."""
        return self._laid_out(ctx, {self._side_names()[0]: self._task_sums(ctx, tasks, n)})

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
        # the expectation terms: sum_t w_t^p(c) terms[t, c] for every column c in one reduction
        columns = self._columns()
        if columns:
            powers = [w]
            for _ in range(max(p for _, p in columns) - 1):
                powers.append(powers[-1] * w)
            weights = ops.stack([powers[p - 1] for _, p in columns], axis=1)
            col_sums = ops.sum(weights * self._terms(ctx, nc, n, w), axis=0)
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
        (one row per rank type) with weights ``w`` ``(tasks,)``: the per-task values side by side
        (``(T, tasks, F)``), weighted and summed in one reduction; the histogram in one pass."""
        ops = ctx.ops
        acc = w.dtype
        cols, sizes = [], []
        if "hits" in self.metrics:
            ks = ops.asarray(self.ks, like=r, dtype=acc)
            cols.append(ops.cast(r[:, :, None] <= ks, acc))
            sizes.append(("hits", len(self.ks)))
        for field, wanted, value in (
            ("inverse_rank", "mrr" in self.metrics, lambda: 1.0 / r),
            ("log_rank", "gmr" in self.metrics, lambda: ops.log2(r) * _LN2),  # as every version so far
            ("rank", "rank" in self._typed, lambda: r),
            ("rank_squared", "rank_squared" in self._typed, lambda: r * r),
        ):
            if wanted:
                cols.append(value()[:, :, None])
                sizes.append((field, 0))
        out: dict[str, Array] = {}
        if cols:
            values = cols[0] if len(cols) == 1 else ops.concat(cols, axis=2)
            sums = ops.sum(values * w[None, :, None], axis=1)  # (T, F)
            start = 0
            for field, size in sizes:
                out[field] = sums[:, start : start + size] if size else sums[:, start]
                start += max(size, 1)
        if self._bins is not None:
            out["rank_histogram"] = ops.histogram(r, w, self._edges(ctx, w))
        return out

    def _edges(self, ctx: Context, like: Array) -> Array:
        """The histogram's edges on the device and in the dtype of ``like`` (kept in the
        workspace; rebuilt while tracing, as :meth:`_table`)."""
        ops, edges = ctx.ops, self._bins.edges
        if not ops.eager:
            return ops.asarray(edges, like=like, dtype=like.dtype)
        key = (ops.name, str(getattr(like, "device", "")), str(like.dtype))
        return ctx.workspace.get("rank_edges", key, lambda: ops.asarray(edges, like=like, dtype=like.dtype))

    def _totals(self, sums: Mapping[str, Any]) -> dict[str, Any]:
        """``weight``, ``count`` and ``invalid`` over every side."""
        names = self._side_names()
        return {
            f: sum(np.asarray(sums[self._field(side, None, f)], dtype=np.float64) for side in names)
            for f in ("weight", "count", "invalid")
        }

    def check_computable(self, sums: Mapping[str, Any], name: str | None = None) -> None:
        """Raise when the sums give no number (see :func:`~rankstream.core.state.check_sums`)."""
        bad = (
            "NaN scores among their candidates, a true index out of range or masked out, "
            "or a negative/non-finite sample_weight"
        )
        what = "ranking task with a positive weight;tasks seen"
        check_sums(self._totals(sums), name or type(self).__name__, "weight", "row", bad, what)

    def compute(self, sums: Mapping[str, Any], ops: Ops | None = None) -> dict[str, Array]:
        """Every value, expectation, variance, adjusted index and z-score (and the extras), as
        0-d arrays of ``ops`` (numpy float64 by default; ``keras.ops`` tensors for the Keras
        adapter); keyed by metric, or ``"{side}.{rank_type}.{metric}"`` in report form.

        Elementwise arithmetic and sorts of the median's histogram only (every branch taken
        with ``where``), so it runs under ``jit``/``tf.function``. Without a task of positive
        weight every entry is 0 (the Keras convention of an empty mean; the Ignite adapter and
        :class:`State` raise in :meth:`check_computable` first), and with ``invalid`` rows
        every entry but ``count`` is NaN."""
        xp = ops.xp if isinstance(ops, Ops) else ops  # an Ops or an xp namespace
        if xp is None or xp is np:
            s = {k: np.asarray(v, dtype=np.float64) for k, v in sums.items()}
            with np.errstate(all="ignore"):
                return self._report(s, np)
        return self._report(sums, xp)

    def _report(self, s: Mapping[str, Any], xp: Any) -> dict[str, Array]:
        """:meth:`_compute` of every side (and ``both``, the sum of the named sides) and rank
        type, keyed by PyKEEN's flat keys; the plain dict without sides and type list."""
        if not self.report:
            return self._compute(s, xp)
        names = self._side_names()
        groups = [(side, (side,)) for side in names] + ([(BOTH, names)] if self.sides else [])
        combos: list[tuple[str, str, dict[str, Array]]] = []
        for label, members in groups:

            def total(rank_type: str | None, field: str, members: tuple[str, ...] = members) -> Array:
                parts = [s[self._field(side, rank_type, field)] for side in members]
                return functools.reduce(lambda a, b: a + b, parts)

            shared = {f: total(None, f) for f in self._shared}
            for rt in self.rank_types:
                combos.append((label, rt, {**shared, **{f: total(rt, f) for f in self._typed}}))
        # every (side, rank type) at once: each field stacked along a leading axis
        if xp is np:
            stack = np.stack
        else:  # (a field of one side may still be a Keras variable)
            stack = lambda xs: xp.stack([x + 0.0 for x in xs])  # noqa: E731
        values = self._compute({f: stack([c[2][f] for c in combos]) for f in combos[0][2]}, xp)
        out: dict[str, Array] = {}
        for i, (label, rt, _) in enumerate(combos):
            out.update({f"{label}.{rt}.{key}": v[i] for key, v in values.items()})
        return out

    def _compute(self, s: Mapping[str, Any], xp: Any) -> dict[str, Array]:
        """The values of one side and rank type on an array namespace ``xp`` (``numpy`` or
        ``keras.ops``; or of several, every field stacked along a leading axis): each family of
        the registry (:mod:`rankstream.core.ranks.families`) gives its value (``finish`` of
        the weighted mean), its moments, and its chance-adjusted forms by the one affine
        implementation (:meth:`RankFamily.results`); then the extras and PyKEEN's inverse forms."""
        weight = s["weight"]
        seen = weight > 0.0
        total = xp.where(seen, weight, 1.0)
        out: dict[str, Array] = {}

        def moments(fam: RankFamily, j: int | None = None) -> tuple[Array, Array]:
            # E = sum w E_i / W, Var = sum w^2 Var_i / W^2 (stats.moments_from_sums)
            mean, var = (s[f] for f in fam.moment_fields)
            if j is not None:
                mean, var = mean[..., j], var[..., j]
            return mean / total, var / (total * total)

        for name in self._families:
            fam = FAMILIES[name]
            if fam.takes_k:
                for j, k in enumerate(self.ks):
                    value = fam.finish(s[fam.value_field][..., j] / total, xp)
                    out.update(fam.results(value, *moments(fam, j), xp, k=k))
                continue
            value = fam.finish(s[fam.value_field] / total, xp)
            if name != "gmr":
                out.update(fam.results(value, *moments(fam), xp))
                continue
            cumulants = [s["gmr_cumulants"][..., m] for m in range(self.gmr_order)]
            mean, var, bound = _gmr_moments(total, cumulants, s["gmr_tail"], xp)
            # one task (of positive weight): GMR = its rank, E and Var are exact
            one = s["count"] == 1.0
            mean1, var1 = moments(fam)
            mean, var = xp.where(one, mean1, mean), xp.where(one, var1, var)
            out.update(fam.results(value, mean, var, xp))
            out[f"{fam.key()}_error_bound"] = xp.where(one, 0.0, bound)
        out.update(self._extras(s, total, out, xp))
        bad = s["invalid"] > 0.0
        if xp is np and np.ndim(bad) == 0:  # one host scalar: branch once rather than per entry
            if bad or not seen:
                out = dict.fromkeys(out, np.float64(math.nan if bad else 0.0))
        elif xp is np and not np.any(bad) and np.all(seen):  # host arrays, every entry kept
            pass
        else:
            out = {k: xp.where(bad, math.nan, xp.where(seen, v, 0.0)) for k, v in out.items()}
        out["count"] = s["count"] + 0.0 * weight
        return out

    def _extras(
        self, s: Mapping[str, Any], total: Array, values: Mapping[str, Array], xp: Any
    ) -> dict[str, Array]:
        """The rank's variance and standard deviation (population, weighted: ``sum w r^2 / W
        - (sum w r / W)^2``; PyKEEN's unweighted ``np.var``/``np.std`` with unit weights), the
        median rank and the median absolute deviation with their absolute error bounds
        (:func:`rankstream.core.ranks.stats.histogram_median_xp`), and PyKEEN's inverse forms:
        ``harmonic_mean_rank = 1 / MRR`` and ``inverse_{arithmetic,geometric,median}_rank``."""
        out: dict[str, Array] = {}
        if "dispersion" in self.metrics:
            mean = s["rank"] / total
            variance = xp.maximum(s["rank_squared"] / total - mean * mean, 0.0)
            out["variance"], out["standard_deviation"] = variance, xp.sqrt(variance)
        if self._bins is not None:
            hist = s["rank_histogram"]
            rows = [hist] if len(hist.shape) == 1 else [hist[i] for i in range(int(hist.shape[0]))]
            parts = [stats.histogram_median_xp(h, self._bins, xp) for h in rows]
            median, median_bound, mad, mad_bound = (
                part[0] if len(rows) == 1 else xp.stack(list(part)) for part in zip(*parts, strict=True)
            )
            out["median_rank"], out["median_rank_error_bound"] = median, median_bound
            out["median_absolute_deviation"], out["median_absolute_deviation_error_bound"] = mad, mad_bound
            out["inverse_median_rank"] = 1.0 / median
        for name, key, inverse in (
            ("mrr", FAMILIES["mrr"].key(), "harmonic_mean_rank"),
            ("mr", FAMILIES["mr"].key(), "inverse_arithmetic_mean_rank"),
            ("gmr", FAMILIES["gmr"].key(), "inverse_geometric_mean_rank"),
        ):
            if name in self.metrics:
                out[inverse] = 1.0 / values[key]
        return out

    def select_value(self, value: Mapping[str, Any]) -> Any:
        """What the metric reports from :meth:`compute`'s dict, as it is (arrays or floats):
        the dict itself, or with ``select=(family, form)`` the chosen entry (a list ordered by
        ``ks`` for Hits@k with several ``k``); keys from the rank-family registry."""
        if self.selected is None:
            return value
        name, form = self.selected
        fam = FAMILIES[name]
        vals = [value[fam.output_key(form, k)] for k in (self.ks if fam.takes_k else [None])]
        return vals[0] if len(vals) == 1 else vals

    def select(self, values: Mapping[str, Any]) -> Any:
        """The kernel contract's reporting step: :meth:`select_value`."""
        return self.select_value(values)

    def warn_if_inexact(self, value: Mapping[str, Any]) -> None:
        """``RuntimeWarning`` when a selected GMR expectation/variance/adjusted/z value rests on
        a streamed expectation whose error bound exceeds :data:`GMR_WARN_BOUND`."""
        if self.selected is None or self.selected[0] != "gmr" or self.selected[1] == "value":
            return
        bound = float(np.asarray(value[f"{FAMILIES['gmr'].key()}_error_bound"]))
        if bound > GMR_WARN_BOUND:
            warnings.warn(
                f"the streamed GMR expectation/variance is only known to within a relative "
                f"{bound:.3g} for so few (or so unevenly weighted) tasks",
                RuntimeWarning,
                stacklevel=3,
            )

    def finalize(self, value: Mapping[str, Any]) -> Any:
        """Host floats of :meth:`compute`'s dict, selected (see :meth:`select_value`)."""
        value = {k: float(v) for k, v in value.items()}
        self.warn_if_inexact(value)
        return self.select_value(value)

    def __repr__(self) -> str:
        sides = "" if self.sides is None else f", sides={self.sides}"
        return (
            f"RankKernel(ks={self.ks}, rank_type={self.rank_type!r}, metrics={self.metrics}, "
            f"select={self.selected!r}{sides})"
        )


def per_task_ranks(
    y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, rank_type: str = "realistic"
) -> tuple[Array, Array, Array]:
    """Ranks, candidate counts and weights of every task of one batch, flat (numpy or torch,
    as the input), in row order (a row's positives by column)."""
    check_rank_type(rank_type)
    batch = rank_batch(y_pred, y, mask, sample_weight)
    tasks = task_ranks(Context.of(batch.scores, batch.ops), batch, (rank_type,))
    ops = tasks.ops
    keep = ops.nonzero(tasks.is_task.reshape(-1))
    pick = lambda x: ops.take(x.reshape(-1), keep, axis=0)  # noqa: E731
    return pick(tasks.ranks(rank_type)), pick(tasks.num_candidates), pick(tasks.weights)
