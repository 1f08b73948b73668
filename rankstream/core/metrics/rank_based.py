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

(``*_mean`` fields hold ``sum w E_i`` and ``*_var`` fields ``sum w^2 Var_i``, so
``E = mean / weight`` and ``Var = var / weight^2``.) ``kappa_m(N)`` are the cumulants of
``ln r`` for ``r ~ U{1..N}``: ``ln E[GMR] = sum_i ln E[r_i^{a_i}]`` with ``a_i = w_i / W``
is not a sum over tasks (``a_i`` depends on the total ``W``), but its Taylor series in ``a`` is:
``sum_m F_m / (m! W^m)`` with ``F_m = sum_i w_i^m kappa_m(N_i)``
(:func:`rankstream.core.stats.gmr_stream_terms`), kept as the Taylor coefficients ``F_m / m!``
(``|kappa_m|`` grows like ``(m-1)!``: ``F_m`` itself would leave float32's range at weights
near 10 for large lists, ``F_m / m!`` only near ``(m 3.4e38)^(1/m)``); the variance uses the
same sums, and
``gmr_tail`` bounds the truncation error (:func:`rankstream.core.stats.gmr_moments_from_sums`,
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

import itertools
import math
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core import stats
from rankstream.core.inputs import _describe, _shape, as_array, check_positive_ints, static_list_size
from rankstream.core.ops import Array, Ops, get_ops, is_torch
from rankstream.core.state import NotComputableError

RANK_TYPES = ("optimistic", "pessimistic", "realistic")
#: metric families: Hits@k, MRR (inverse harmonic mean rank), GMR, arithmetic mean rank
METRICS = ("hits", "mrr", "gmr", "mr")
#: forms a single-metric output can take
OUTPUTS = ("value", "expected", "variance", "adjusted", "z")
#: expectation terms come from a cached per-N table up to this list width, else per task
TABLE_MAX = 1 << 17
#: PyKEEN's clip of denominators (``_safe_divide``)
EPSILON = 1.0e-12
#: default number of cumulant sums of the streamed GMR expectation
DEFAULT_GMR_ORDER = stats.MAX_GMR_ORDER
#: the order for float32 state: the sums hold w^m up to w^(M+1), which at M = 20 leave float32
#: (max 3.4e38) for task weights above about 68; at M = 8 the state holds weights from about
#: 1e-4 to 1.9e4 (within float32's normal range). Its truncation error is about n^-8 / 9 for n
#: equally weighted tasks (below float32's 6e-8 from 7 tasks on) and is reported as the bound.
FLOAT32_GMR_ORDER = 8
#: warn when the GMR expectation's error bound exceeds this (relative)
GMR_WARN_BOUND = 1e-3

#: tests set this to exercise the no-read-back (accelerator) path on CPU
FORCE_NO_READ = False

_LN2 = math.log(2.0)
_NEG_INF = float("-inf")


# ==========================================================================================
# input


@dataclass
class RankBatch:
    """A validated batch: ``scores`` (B, N) floating; exactly one of ``target`` (B,) ints and
    ``labels`` (B, N); ``valid`` (B, N) bool or None; ``weights`` (B,) acc dtype or None."""

    ops: Ops
    scores: Array
    target: Array | None
    labels: Array | None
    valid: Array | None
    weights: Array | None


def rank_batch(
    y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ops: Ops | None = None
) -> RankBatch:
    """Check shapes and dtypes (no device read; values are checked in :func:`task_ranks`)."""
    ops = ops or get_ops(y_pred, y, mask, sample_weight)
    y_pred = as_array(ops, y_pred, "y_pred")
    y = as_array(ops, y, "y", y_pred)
    if len(y_pred.shape) != 2:
        raise ValueError(f"y_pred must be 2-D (batch, num_candidates), got shape {_shape(y_pred)}")
    if ops.is_bool(y_pred) or not ops.is_numeric(y_pred):
        raise TypeError(f"y_pred must hold real scores, got dtype {ops.dtype_name(y_pred)}")
    if not ops.is_floating(y_pred):
        y_pred = ops.cast(y_pred, ops.acc_dtype(y_pred))
    b, n = _shape(y_pred)[0], static_list_size(y_pred, "num_candidates")
    if n == 0:
        raise ValueError(f"y_pred must have at least one candidate per row, got shape {_shape(y_pred)}")
    target = labels = None
    if _shape(y) == (b,):
        if ops.is_bool(y) or ops.is_floating(y) or not ops.is_numeric(y):
            raise TypeError(
                "y of shape (batch,) must hold integer indices of the true candidates, got dtype "
                f"{ops.dtype_name(y)} (for binary labels pass y of shape (batch, num_candidates))"
            )
        target = y
    elif _shape(y) == (b, n):
        if not ops.is_numeric(y):
            raise TypeError(f"y labels must be bool or numeric 0/1, got dtype {ops.dtype_name(y)}")
        labels = y
    else:
        raise ValueError(
            "y must be the indices of the true candidates, shape (batch,) = "
            f"({b},), or binary labels of the shape of y_pred {(b, n)}; got {_describe(y)}"
        )
    if mask is not None:
        mask = as_array(ops, mask, "mask", y_pred)
        if _shape(mask) != (b, n):
            raise ValueError(f"mask must have the shape of y_pred {(b, n)}, got {_shape(mask)}")
        if not ops.is_bool(mask):
            raise TypeError(
                "mask must be a bool array (True = the item is a candidate), got dtype "
                f"{ops.dtype_name(mask)}"
            )
    weights = None
    if sample_weight is not None:
        w = as_array(ops, sample_weight, "sample_weight", y_pred)
        if ops.is_bool(w) or not ops.is_numeric(w):
            raise TypeError(f"sample_weight must be numeric, got dtype {ops.dtype_name(w)}")
        acc = ops.acc_dtype(y_pred)
        if _shape(w) == ():
            w = ops.zeros((b,), y_pred, acc) + ops.cast(w, acc)
        elif _shape(w) != (b,):
            raise ValueError(
                f"sample_weight must be a scalar or have shape (batch,) = ({b},), got shape {_shape(w)}"
            )
        weights = ops.cast(w, acc)
    return RankBatch(ops=ops, scores=y_pred, target=target, labels=labels, valid=mask, weights=weights)


# ==========================================================================================
# array helpers (written once on Ops, with a torch-CPU fast path for the big passes)


def _xp(ops: Ops) -> Any:
    """The array namespace of ``ops`` for the elementwise stats functions."""
    if ops.name == "torch":
        import torch

        return torch
    if ops.name == "numpy":
        return np
    if ops.name == "keras":
        import keras

        return keras.ops
    raise TypeError(f"no array namespace for backend {ops.name!r}")  # pragma: no cover


def _int_dtype(ops: Ops) -> Any:
    if ops.name == "torch" or getattr(ops, "backend", None) == "torch":  # KerasOps on torch too
        import torch

        return torch.int64
    # keras: int32 (JAX has no int64 without x64; indices stay far below 2^31)
    return np.int64 if ops.name == "numpy" else "int32"


def _flat(ops: Ops, x: Array) -> Array:
    """``x`` as 1-D (TensorFlow tensors have no ``reshape`` method)."""
    if ops.name == "keras":
        return ops.k.reshape(x, (-1,))
    return x.reshape(-1)


def _log(ops: Ops, x: Array) -> Array:
    return ops.log2(x) * _LN2


def _is_torch_cpu(ops: Ops, x: Array) -> bool:
    """A torch tensor on the CPU (whichever Ops wraps it): the scratch-buffer fast path."""
    return is_torch(x) and x.device.type == "cpu"


class _Scratch(threading.local):
    """Reused CPU buffers: fresh 80 MB temporaries cost page faults on every batch. A buffer
    grows to the largest size asked for; smaller requests get a view of its start. One set
    per thread, so metrics updated from two threads never share a buffer."""

    def __init__(self) -> None:
        self._bufs: dict[str, Any] = {}

    def get(self, role: str, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        size = int(np.prod(shape, dtype=np.int64))
        buf = self._bufs.get(role)
        if buf is None or buf.numel() < size or buf.dtype != dtype:
            buf = torch.empty(size, dtype=dtype)
            self._bufs[role] = buf
        return buf[:size].view(shape)

    def ones(self, n: int, dtype: Any) -> Any:
        return self.get("ones", (n,), dtype).fill_(1.0)


_SCRATCH = _Scratch()


def _count_dtype(n: int) -> Any:
    import torch

    # 0/1 values summed in float32 are exact while a row total stays below 2^24.
    return torch.float32 if n < (1 << 24) else torch.float64


def _row_count(ops: Ops, cond: Array, acc: Any) -> Array:
    """Per row, the number of True entries of a (B, N) bool array, in ``acc``."""
    if _is_torch_cpu(ops, cond):
        import torch

        b, n = cond.shape
        buf = _SCRATCH.get("count", (b, n), _count_dtype(n))
        buf.copy_(cond)
        return torch.mv(buf, _SCRATCH.ones(n, buf.dtype)).to(acc)
    if ops.name == "torch":
        return cond.sum(dim=1).to(acc)
    if ops.name == "numpy":
        return np.count_nonzero(cond, axis=1).astype(acc)
    return ops.sum(ops.cast(cond, acc), axis=1)


def _compare_counts(
    ops: Ops, s: Array, t: Array, acc: Any, need: tuple[bool, bool] = (True, True)
) -> tuple[Array | None, Array | None]:
    """Per row ``(#(s > t), #(s >= t))`` for ``s`` (B, N) and thresholds ``t`` (B,); only the
    counts flagged in ``need`` are computed (``None`` otherwise).

    NaN entries (of ``s`` or ``t``) compare False. On torch CPU each comparison is written as
    0/1 floats into a reused buffer and reduced with a matrix-vector product."""
    tc = t[:, None]
    if _is_torch_cpu(ops, s):
        import torch

        b, n = s.shape
        buf = _SCRATCH.get("count", (b, n), _count_dtype(n))
        ones = _SCRATCH.ones(n, buf.dtype)
        out = []
        for flag, cmp in zip(need, (torch.gt, torch.ge), strict=True):
            if flag:
                cmp(s, tc, out=buf)
                out.append(torch.mv(buf, ones).to(acc))
            else:
                out.append(None)
        return out[0], out[1]
    gt = _row_count(ops, s > tc, acc) if need[0] else None
    ge = _row_count(ops, s >= tc, acc) if need[1] else None
    return gt, ge


def _exclude(ops: Ops, scores: Array, keep: Array | None, drop: Array | None = None) -> Array:
    """``scores`` with ``-inf`` where ``keep`` is False or ``drop`` is True (one of them given;
    a reused buffer on torch CPU)."""
    if _is_torch_cpu(ops, scores):
        import torch

        out = _SCRATCH.get("scores", tuple(scores.shape), scores.dtype)
        fill = torch.full((), _NEG_INF, dtype=scores.dtype)
        if keep is None:
            return torch.where(drop, fill, scores, out=out)
        return torch.where(keep, scores, fill, out=out)
    if keep is None:
        return ops.where(drop, _NEG_INF, scores)
    return ops.where(keep, scores, _NEG_INF)


def _row_sums(ops: Ops, x: Array) -> Array:
    """Per-row sum in the array's own dtype (NaN iff a NaN or both infinities occur)."""
    if ops.name == "numpy":
        with np.errstate(invalid="ignore", over="ignore"):
            return np.sum(x, axis=1)
    return ops.sum(x, axis=1)


def _not(x: Array) -> Array:
    return ~x


def _and_not(ops: Ops, a: Array, b: Array) -> Array:
    """``a & ~b`` of bool arrays (one pass as ``a > b`` where bool comparison exists; not on
    TensorFlow)."""
    return a & ~b if ops.name == "keras" else a > b


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


def _host_checks(batch: RankBatch, flags: dict[str, Array]) -> dict[str, bool]:
    """One host read of every deferred check (and of the weights); returns name -> bool."""
    ops = batch.ops
    if batch.weights is not None:
        w = batch.weights
        flags = {**flags, "weights": ops.any((w < 0) | ops.isnan(w) | (w == float("inf")))}
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


def _raise_if_nan(ops: Ops, scores: Array, valid: Array | None, rows_flag: Array) -> None:
    """Exact NaN check of the rows whose row sum was NaN (NaN or +inf and -inf in the row)."""
    rows = ops.nonzero(rows_flag)
    sub = ops.take(scores, rows, axis=0)
    bad = ops.isnan(sub)
    if valid is not None:
        bad = bad & ops.take(valid, rows, axis=0)
    if ops.host_bools(ops.any(bad))[0]:
        raise ValueError("y_pred contains NaN scores (among the candidates); NaN scores are not ranked")


def task_ranks(batch: RankBatch, rank_types: Sequence[str] = RANK_TYPES) -> RankTasks:
    """Ranks and candidate counts of every task of the batch (the optimistic rank needs one
    comparison pass, the pessimistic one another, the realistic rank both).

    Raises ``ValueError`` on NaN scores among the candidates, indices out of range, a masked
    true candidate, labels other than 0/1 and negative or non-finite weights."""
    need = _needs(rank_types)
    if batch.target is not None:
        return _ranks_of_targets(batch, need)
    return _ranks_of_labels(batch, need)


def _can_read(ops: Ops, x: Array) -> bool:
    """Whether values may be read back now (CPU, eager); else bad rows are counted."""
    return ops.can_read(x) and not FORCE_NO_READ


def _ranks_of_targets(batch: RankBatch, need: tuple[bool, bool]) -> RankTasks:
    ops, scores, valid = batch.ops, batch.scores, batch.valid
    b, n = _shape(scores)
    acc = ops.acc_dtype(scores)
    y = batch.target
    out_of_range = (y < 0) | (y >= n)
    yc = ops.cast(ops.minimum(ops.maximum(y, 0), n - 1), _int_dtype(ops))[:, None]
    t = ops.take_along(scores, yc)[:, 0]
    masked = None
    if valid is not None:
        masked = _not(ops.take_along(valid, yc)[:, 0])
        s_eff = _exclude(ops, scores, valid)
        n_keep = _row_count(ops, valid, acc)
    else:
        s_eff = scores
        n_keep = ops.zeros((b,), scores, acc) + float(n)
    gt, ge = _compare_counts(ops, s_eff, t, acc, need)
    w = batch.weights if batch.weights is not None else ops.zeros((b,), scores, acc) + 1.0
    invalid = None
    if _can_read(ops, scores):
        nan_rows = ops.isnan(_row_sums(ops, s_eff))  # cheap; exact check of flagged rows below
        flags = {"range": ops.any(out_of_range), "nan": ops.any(nan_rows)}
        if masked is not None:
            flags["masked"] = ops.any(masked)
        bad = _host_checks(batch, flags)
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
            _raise_if_nan(ops, scores, valid, nan_rows)
    else:
        # no read-back (accelerator, tracing): bad rows are counted, compute() raises
        invalid = out_of_range | ops.any(ops.isnan(s_eff), axis=1)
        if masked is not None:
            invalid = invalid | masked
        if batch.weights is not None:
            invalid = invalid | (w < 0) | ops.isnan(w) | (w == float("inf"))
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
        is_task=ops.ones_bool(n_keep[:, None]) if invalid is None else _not(invalid)[:, None],
        invalid=invalid,
    )


def _positive_slots(ops: Ops, pos: Array, like: Array) -> tuple[Array, Array, Array, np.ndarray]:
    """Column of every positive laid out in slots: ``idx`` (B, P) ints, ``has`` (B, P) bool,
    positives per row (B,) in the acc dtype (device) and on the host (P = the largest count,
    at least 1 column).

    One ``nonzero`` (a host read: the number of tasks is data-dependent); the O(tasks)
    layout is done on the host."""
    b, n = _shape(pos)
    flat = ops.to_numpy(ops.nonzero(_flat(ops, pos))).astype(np.int64)
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
    ops: Ops, s_eff: Array, t: Array, rows: np.ndarray, acc: Any, need: tuple[bool, bool]
) -> tuple[Array | None, Array | None]:
    """Counts of one positive slot (``t`` is NaN on the rows without it, so they count 0).

    When few rows have the slot, only those rows are copied out and compared (a copy and a
    comparison of a fraction f of the rows cost about as much as comparing all rows when
    f is around 0.6)."""
    b = int(s_eff.shape[0])
    if rows.size > 0.6 * b:
        return _compare_counts(ops, s_eff, t, acc, need)
    r = ops.asarray(rows, like=t)
    if _is_torch_cpu(ops, s_eff):
        import torch

        sub = _SCRATCH.get("rows", (int(rows.size), int(s_eff.shape[1])), s_eff.dtype)
        sub = torch.index_select(s_eff, 0, r, out=sub)
    else:
        sub = ops.take(s_eff, r, axis=0)
    gt, ge = _compare_counts(ops, sub, ops.take(t, r, axis=0), acc, need)
    zeros = ops.zeros((b,), t, acc)
    return (
        None if gt is None else ops.set_rows(zeros, r, gt),
        None if ge is None else ops.set_rows(zeros, r, ge),
    )


def _ranks_of_labels(batch: RankBatch, need: tuple[bool, bool]) -> RankTasks:
    ops, scores, valid, labels = batch.ops, batch.scores, batch.valid, batch.labels
    if not ops.eager:
        raise ValueError(
            "binary labels y of shape (batch, num_candidates) need eager execution (the number "
            "of ranking tasks is data-dependent); under jit pass the index of the true candidate, "
            "shape (batch,)"
        )
    b, n = _shape(scores)
    acc = ops.acc_dtype(scores)
    flags: dict[str, Array] = {}
    if ops.is_bool(labels):
        pos = labels
    else:
        pos = labels == 1
        nonbinary = _and_not(ops, labels != 0, pos)  # True where label not in {0, 1}
        flags["labels"] = ops.any(nonbinary if valid is None else nonbinary & valid)
    if valid is not None:
        pos = pos & valid
    bad = _host_checks(batch, flags)
    if bad.get("labels"):
        ln = ops.to_numpy(labels)
        odd = (ln != 0) & (ln != 1)
        if valid is not None:
            odd &= ops.to_numpy(valid)
        raise ValueError(
            "y labels must be binary (0/1 or bool) on the candidates, got values "
            f"{np.unique(ln[odd])[:8].tolist()}"
        )
    idx, has, n_pos, per_row = _positive_slots(ops, pos, scores)
    p_max = int(per_row.max()) if per_row.size else 0
    w = batch.weights if batch.weights is not None else ops.zeros((b,), scores, acc) + 1.0
    w = w[:, None] * ops.cast(has, acc)
    if p_max == 0:
        one = ops.zeros((b, 1), scores, acc) + 1.0
        return RankTasks(ops, one, one, one, w, has)
    n_valid = ops.zeros((b,), scores, acc) + float(n) if valid is None else _row_count(ops, valid, acc)
    n_keep = n_valid - n_pos  # the non-positive candidates
    # the candidates of a positive: valid non-positives
    if valid is None:
        s_eff = _exclude(ops, scores, None, pos)
    else:
        s_eff = _exclude(ops, scores, _and_not(ops, valid, pos))
    t_all = ops.where(has, ops.take_along(scores, idx), float("nan"))
    nan_rows = ops.isnan(_row_sums(ops, s_eff)) | ops.any(ops.isnan(t_all) & has, axis=1)
    if ops.eager and ops.host_bools(ops.any(nan_rows))[0]:
        _raise_if_nan(ops, scores, valid, nan_rows)
    gts, ges = [], []
    for c in range(p_max):
        t = t_all[:, c]
        gt, ge = _slot_counts(ops, s_eff, t, np.nonzero(per_row > c)[0], acc, need)
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


def check_rank_type(rank_type: Any) -> str:
    if rank_type not in RANK_TYPES:
        raise ValueError(f"rank_type must be one of {RANK_TYPES}, got {rank_type!r}")
    return rank_type


def _safe_divide(x: Array, y: Array, xp: Any) -> Array:
    """PyKEEN's ``_safe_divide``: divide by ``y`` clipped away from 0 (sign kept)."""
    size = xp.maximum(xp.abs(y), EPSILON)
    return x / xp.where(y < 0.0, -size, size)


def _gmr_moments(total: Array, coefficients: list[Array], tail: Array, xp: Any) -> tuple[Array, Array, Array]:
    """:func:`rankstream.core.stats.gmr_moments_from_sums` as elementwise array code (numpy
    or ``keras.ops``, traceable): every branch is computed and chosen with ``where``.
    ``coefficients[m - 1]`` is ``F_m / m!`` (the ``gmr_cumulants`` field)."""
    order = len(coefficients)
    inverse = 1.0 / total
    scale = inverse  # W^-i (an O(M) graph, not i divisions per term)
    log_e = upsilon = 0.0
    for i, coefficient in enumerate(coefficients, start=1):
        term = coefficient * scale
        log_e = log_e + term
        if i >= 2:
            upsilon = upsilon + (2.0**i - 2.0) * term
        scale = scale * inverse
    upsilon = xp.maximum(upsilon, 0.0)
    expectation = xp.exp(log_e)
    variance = xp.exp(2.0 * log_e) * xp.expm1(upsilon)
    # truncation bounds (see stats.gmr_moments_from_sums)
    base = tail * scale  # tail / W^(M+1)

    def eps(c: float) -> Array:
        q_sum = c ** (order + 1) * base
        q_max = xp.power(xp.maximum(q_sum, 0.0), 1.0 / (order + 1))
        bounded = stats.GMR_CUMULANT_BOUND * q_sum / xp.where(q_max < 1.0, 1.0 - q_max, 1.0)
        return xp.where(base <= 0.0, 0.0, xp.where(q_max < 1.0, bounded, math.inf))

    eps_l, eps_u = eps(2.0), eps(4.0)
    rel_e = xp.expm1(eps_l)
    positive = upsilon > 0.0
    den = xp.where(positive, xp.expm1(upsilon), 1.0)
    hi = xp.expm1(2.0 * eps_l) + xp.exp(2.0 * eps_l) * (xp.expm1(upsilon + eps_u) / den - 1.0)
    lo = 1.0 - xp.exp(-2.0 * eps_l) * xp.expm1(xp.maximum(upsilon - eps_u, 0.0)) / den
    bound = xp.maximum(rel_e, xp.where(positive, xp.maximum(hi, lo), math.inf))
    bound = xp.where(xp.isinf(eps_l) | xp.isinf(eps_u) | xp.isinf(variance), math.inf, bound)
    bound = xp.where((eps_l == 0.0) & (eps_u == 0.0), 0.0, bound)
    return expectation, variance, bound


class RankKernel:
    """Every rank-based metric of one rank type from one rank computation per batch.

    Args:
        ks: the cut-offs of Hits@k (a positive int or a list of them).
        rank_type: ``"optimistic"``, ``"pessimistic"`` or ``"realistic"`` (default).
        metrics: the families kept in the state, a subset of ``("hits", "mrr", "gmr", "mr")``.
        select: ``None`` (``compute`` returns the dict of every value) or ``(family, form)``
            with ``form`` in ``("value", "expected", "variance", "adjusted", "z")`` (a float,
            or a list ordered by ``ks`` for Hits@k with several ``k``).
        gmr_order: number of cumulant sums for the GMR expectation (1..20).
        table_max: widest list whose expectation terms come from a cached per-N table.
    """

    name = "rank_based"

    def __init__(
        self,
        ks: int | Sequence[int] = (1, 3, 10),
        rank_type: str = "realistic",
        *,
        metrics: Sequence[str] = METRICS,
        select: tuple[str, str] | None = None,
        gmr_order: int = DEFAULT_GMR_ORDER,
        table_max: int = TABLE_MAX,
        k_name: str = "ks",
    ) -> None:
        self.ks = sorted(set(check_positive_ints(ks, k_name)))
        self.rank_type = check_rank_type(rank_type)
        metrics = tuple(metrics)
        if not metrics or any(m not in METRICS for m in metrics):
            raise ValueError(f"metrics must be a non-empty subset of {METRICS}, got {metrics!r}")
        self.metrics = tuple(m for m in METRICS if m in metrics)
        if select is not None:
            fam, form = select
            if fam not in self.metrics:
                raise ValueError(f"select names the family {fam!r}, not among metrics {self.metrics}")
            if form not in OUTPUTS:
                raise ValueError(f"output must be one of {OUTPUTS}, got {form!r}")
        self.select = select
        top = stats.MAX_GMR_ORDER
        if isinstance(gmr_order, bool) or not isinstance(gmr_order, int) or not 1 <= gmr_order <= top:
            raise ValueError(f"gmr_order must be an int in [1, {stats.MAX_GMR_ORDER}], got {gmr_order!r}")
        self.gmr_order = gmr_order
        self.table_max = int(table_max)
        k = len(self.ks)
        # invalid: rows with bad data found where update could not raise (no read-back)
        fields: dict[str, tuple[int, ...]] = {"weight": (), "count": (), "invalid": ()}
        if "hits" in self.metrics:
            fields.update(hits=(k,), hits_mean=(k,), hits_var=(k,))
        if "mrr" in self.metrics:
            fields.update(inverse_rank=(), inverse_rank_mean=(), inverse_rank_var=())
        if "gmr" in self.metrics:
            fields.update(log_rank=(), gmr_cumulants=(gmr_order,), gmr_tail=())
        if "mr" in self.metrics:
            fields.update(rank=())
        if "mr" in self.metrics or "gmr" in self.metrics:
            # E and Var of r: the mean rank's, and the GMR's exact moments for a single task
            fields.update(rank_mean=(), rank_var=())
        self.fields = fields
        self._tables: dict[int, np.ndarray] = {}
        self._device_tables: dict[Any, Any] = {}

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

    def _table(self, ops: Ops, like: Array, n: int, acc: Any) -> Array:
        """(n, F) terms for N = 1..n, built with numpy once per width and kept on the device
        of ``like``. While tracing (``ops.eager`` False) only the numpy table is kept: a
        tensor made inside a ``jit`` trace or a ``tf.function`` graph belongs to it."""
        host = self._tables.get(n)
        if host is None:
            grid = np.arange(1, n + 1, dtype=np.float64)
            terms = self._unit_terms(grid, np)
            cols = [np.broadcast_to(np.asarray(c, dtype=np.float64), grid.shape) for c in terms]
            host = np.stack(cols, axis=1)
            self._tables = {n: host}  # keep only the latest width
        if not ops.eager:
            return ops.asarray(host, like=like, dtype=acc)
        key = (ops.name, n, str(getattr(like, "device", "")), str(acc))
        table = self._device_tables.get(key)
        if table is None:
            table = ops.asarray(host, like=like, dtype=acc)
            self._device_tables = {key: table}
        return table

    def _terms(self, ops: Ops, nc: Array, n: int, like: Array) -> Array:
        """(tasks, columns) unit-weight terms of every task (flat ``nc``), by table lookup or
        directly."""
        acc = nc.dtype
        if n <= self.table_max:
            table = self._table(ops, like, n, acc)
            idx = ops.cast(ops.minimum(ops.maximum(nc, 1.0), float(n)) - 1.0, _int_dtype(ops))
            return ops.take(table, idx, axis=0)
        xp = _xp(ops)
        return ops.stack([c + 0.0 * nc for c in self._unit_terms(ops.maximum(nc, 1.0), xp)], axis=1)

    # -- Kernel protocol -------------------------------------------------------------------
    def batch_sums(
        self, ops: Ops | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> dict[str, Array]:
        batch = rank_batch(y_pred, y, mask, sample_weight, ops=ops)
        tasks = task_ranks(batch, (self.rank_type,))
        return self.sums_of_tasks(tasks, n=int(batch.scores.shape[1]))

    def sums_of_tasks(self, tasks: RankTasks, n: int) -> dict[str, Array]:
        """Field sums of a set of tasks (``n`` bounds the candidate counts)."""
        ops = tasks.ops
        w = _flat(ops, tasks.weights)
        is_task = _flat(ops, tasks.is_task)
        r = ops.where(is_task, _flat(ops, tasks.ranks(self.rank_type)), 1.0)
        nc = ops.where(is_task, _flat(ops, tasks.num_candidates), 1.0)
        acc = w.dtype
        out: dict[str, Array] = {"weight": ops.sum(w), "count": ops.sum(ops.cast(w > 0, acc))}
        out["invalid"] = (
            out["weight"] * 0.0 if tasks.invalid is None else ops.sum(ops.cast(tasks.invalid, acc))
        )
        # the expectation terms: sum_t w_t^p(c) terms[t, c] for every column c in one reduction
        columns = self._columns()
        powers = [w]
        for _ in range(max(p for _, p in columns) - 1):
            powers.append(powers[-1] * w)
        weights = ops.stack([powers[p - 1] for _, p in columns], axis=1)
        col_sums = ops.sum(weights * self._terms(ops, nc, n, w), axis=0)
        start = 0
        for field, group in itertools.groupby(columns, key=lambda c: c[0]):
            size = len(list(group))
            out[field] = col_sums[start : start + size] if self.fields[field] else col_sums[start]
            start += size
        # the values
        if "hits" in self.metrics:
            ks = ops.asarray(self.ks, like=r, dtype=acc)
            hit = ops.cast(r[:, None] <= ks[None, :], acc)
            out["hits"] = ops.sum(hit * w[:, None], axis=0)
        if "mrr" in self.metrics:
            out["inverse_rank"] = ops.sum(w / r)
        if "gmr" in self.metrics:
            out["log_rank"] = ops.sum(w * _log(ops, r))
        if "mr" in self.metrics:
            out["rank"] = ops.sum(w * r)
        return out

    def check_computable(self, sums: Mapping[str, Any], name: str | None = None) -> None:
        """As :meth:`ListKernel.check_computable`; ``name`` is the public metric's name."""
        name = name or type(self).__name__
        bad = float(np.asarray(sums.get("invalid", 0.0)))
        if bad > 0:
            raise ValueError(
                f"{name}: {int(bad)} row(s) had NaN scores among their candidates, a true index out of "
                "range or masked out, or a negative/non-finite sample_weight. On accelerators and "
                "under jit, update() does not read values back (no device sync), so such rows "
                "are counted and reported here instead of raising in update()."
            )
        if not float(np.asarray(sums["weight"])) > 0:
            raise NotComputableError(
                f"{name} must have at least one ranking task with a positive weight "
                f"before compute() (tasks seen: {int(np.asarray(sums['count']))})"
            )

    def compute(self, sums: Mapping[str, Any], ops: Ops | None = None) -> dict[str, Array]:
        """Every value, expectation, variance, adjusted index and z-score, as 0-d arrays of
        ``ops`` (numpy float64 by default; ``keras.ops`` tensors for the Keras adapter).

        Elementwise arithmetic only (every branch taken with ``where``), so it runs under
        ``jit``/``tf.function``. Without a task of positive weight every entry is 0 (the
        Keras convention of an empty mean; the Ignite adapter and :class:`State` raise in
        :meth:`check_computable` first), and with ``invalid`` rows every entry but ``count``
        is NaN."""
        if ops is None or ops.name == "numpy":
            s = {k: np.asarray(v, dtype=np.float64) for k, v in sums.items()}
            with np.errstate(all="ignore"):
                return self._compute(s, np)
        return self._compute(sums, _xp(ops))

    def _compute(self, s: Mapping[str, Any], xp: Any) -> dict[str, Array]:
        weight = s["weight"]
        seen = weight > 0.0
        total = xp.where(seen, weight, 1.0)
        out: dict[str, Array] = {}

        def add(key: str, value: Array, mean: Array, var: Array, increasing: bool, index: bool) -> None:
            out[key] = value
            out[f"expected_{key}"] = mean
            out[f"variance_{key}"] = var
            # PyKEEN: ReindexedMetric (M - E) / (1 - E), ZMetric (M - E) / std, sign-flipped
            # for metrics where smaller is better; both with _safe_divide.
            scale = _safe_divide(1.0, 1.0 - mean, xp)
            out[("adjusted_" + key + ("_index" if index else ""))] = scale * value - scale * mean
            zscale = _safe_divide(1.0, xp.sqrt(xp.maximum(var, 0.0)), xp)
            if not increasing:
                zscale = -zscale
            out[f"z_{key}"] = zscale * value - zscale * mean

        def linear(prefix: str, j: int | None = None) -> tuple[Array, Array]:
            mean, var = s[f"{prefix}_mean"], s[f"{prefix}_var"]
            if j is not None:
                mean, var = mean[j], var[j]
            return mean / total, var / (total * total)  # stats.moments_from_sums

        if "hits" in self.metrics:
            for j, k in enumerate(self.ks):
                mean, var = linear("hits", j)
                add(f"hits_at_{k}", s["hits"][j] / total, mean, var, True, False)
        if "mrr" in self.metrics:
            mean, var = linear("inverse_rank")
            add("inverse_harmonic_mean_rank", s["inverse_rank"] / total, mean, var, True, False)
        if "gmr" in self.metrics:
            cumulants = [s["gmr_cumulants"][m] for m in range(self.gmr_order)]
            mean, var, bound = _gmr_moments(total, cumulants, s["gmr_tail"], xp)
            # one task (of positive weight): GMR = its rank, E and Var are exact
            one = s["count"] == 1.0
            mean1, var1 = linear("rank")
            mean, var = xp.where(one, mean1, mean), xp.where(one, var1, var)
            add("geometric_mean_rank", xp.exp(s["log_rank"] / total), mean, var, False, True)
            out["geometric_mean_rank_error_bound"] = xp.where(one, 0.0, bound)
        if "mr" in self.metrics:
            mean, var = linear("rank")
            value = s["rank"] / total
            add("arithmetic_mean_rank", value, mean, var, False, True)
            out["adjusted_arithmetic_mean_rank"] = _safe_divide(value, mean, xp)
        bad = s["invalid"] > 0.0
        out = {k: xp.where(bad, math.nan, xp.where(seen, v, 0.0)) for k, v in out.items()}
        out["count"] = s["count"] + 0.0 * weight
        return out

    def select_value(self, value: Mapping[str, Any]) -> Any:
        """What the metric reports from :meth:`compute`'s dict, as it is (arrays or floats):
        the dict itself, or with ``select=(family, form)`` the chosen entry (a list ordered by
        ``ks`` for Hits@k with several ``k``)."""
        if self.select is None:
            return value
        fam, form = self.select
        keys = {
            "hits": [f"hits_at_{k}" for k in self.ks],
            "mrr": ["inverse_harmonic_mean_rank"],
            "gmr": ["geometric_mean_rank"],
            "mr": ["arithmetic_mean_rank"],
        }[fam]

        def one(key: str) -> Any:
            if form == "value":
                return value[key]
            if form in ("expected", "variance", "z"):
                return value[f"{form}_{key}"]
            index = "_index" if fam in ("gmr", "mr") else ""
            return value[f"adjusted_{key}{index}"]

        vals = [one(key) for key in keys]
        return vals[0] if len(vals) == 1 else vals

    def warn_if_inexact(self, value: Mapping[str, Any]) -> None:
        """``RuntimeWarning`` when a selected GMR expectation/variance/adjusted/z value rests on
        a streamed expectation whose error bound exceeds :data:`GMR_WARN_BOUND`."""
        if self.select is None or self.select[0] != "gmr" or self.select[1] == "value":
            return
        bound = float(np.asarray(value["geometric_mean_rank_error_bound"]))
        if bound > GMR_WARN_BOUND:
            warnings.warn(
                f"the streamed GMR expectation/variance is only known to within a relative "
                f"{bound:.3g} for so few (or so unevenly weighted) tasks",
                RuntimeWarning,
                stacklevel=3,
            )

    def finalize(self, value: Mapping[str, Any]) -> Any:
        """Host floats of :meth:`compute`'s dict, selected (see :meth:`select_value`)."""
        value = {k: float(np.asarray(v)) for k, v in value.items()}
        self.warn_if_inexact(value)
        return self.select_value(value)

    def __repr__(self) -> str:
        return (
            f"RankKernel(ks={self.ks}, rank_type={self.rank_type!r}, metrics={self.metrics}, "
            f"select={self.select!r})"
        )


def per_task_ranks(
    y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, rank_type: str = "realistic"
) -> tuple[Array, Array, Array]:
    """Ranks, candidate counts and weights of every task of one batch, flat (numpy or torch,
    as the input), in row order (a row's positives by column)."""
    check_rank_type(rank_type)
    batch = rank_batch(y_pred, y, mask, sample_weight)
    tasks = task_ranks(batch, (rank_type,))
    ops = tasks.ops
    keep = ops.nonzero(tasks.is_task.reshape(-1))
    pick = lambda x: ops.take(x.reshape(-1), keep, axis=0)  # noqa: E731
    return pick(tasks.ranks(rank_type)), pick(tasks.num_candidates), pick(tasks.weights)
