r"""Ranking tasks: the rank of every task of a batch, by comparison passes over the scores.

A batch is ``scores`` ``(B, N)`` plus either the index of the true candidate of each row
(``(B,)`` integers: one task per row) or binary labels ``(B, N)`` (every valid positive is a
task, ranked against the valid non-positive candidates of its row). With ``s`` the true score
and ``C`` the candidates (itself included), PyKEEN's rank types are::

    optimistic  = 1 + #{c in C: s_c > s}      pessimistic = #{c in C: s_c >= s}
    realistic   = (optimistic + pessimistic) / 2,         N = |C| (number of candidates)

Ties are counted exactly, never broken by index. The optimistic count needs one comparison
pass, the pessimistic one another, the realistic rank both (``Ops.rank_counts``: 0/1 floats
summed per row); with labels the same passes once per positive slot. Bad values raise where
they can be read back (see :func:`task_ranks`), else index targets' bad rows are counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops
from rankstream.core.inputs import RankBatch, _shape, nan_scores_error, rank_batch
from rankstream.core.ranks.families import RANK_TYPES, check_rank_type

__all__ = ["RankTasks", "per_task_ranks", "task_ranks"]

_NEG_INF = float("-inf")


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


def _raise_nan(batch: RankBatch) -> None:
    """The error of NaN scores among the candidates, found by a comparison pass's count."""
    raise nan_scores_error(batch.ops, batch.scores, batch.valid, "among the candidates", "candidate")


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
            _raise_nan(batch)
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


def _positives_beyond(ops: Ops, has: Array, t_all: Array, acc: Any, strict: bool) -> Array:
    """``(B, P)``: for each positive slot ``c``, the row's positives ``j`` with a score above
    (``strict``) or at or above that of ``c``: one comparison of the small ``(B, P, P)`` array.
    A slot without a positive (NaN) counts 0."""
    other, this = t_all[:, None, :], t_all[:, :, None]
    beyond = (other > this) if strict else (other >= this)
    return ops.sum(ops.cast(beyond & has[:, None, :], acc), axis=2)


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
        gt, ge, _ = ops.rank_counts(scores, t, acc, need, keep=keep, drop=drop, ws=ws, nan=False)
        return gt, ge
    r = ops.asarray(rows, like=t)
    t = ops.take(t, r, axis=0)
    gt, ge, _ = ops.rank_counts(scores, t, acc, need, keep=keep, drop=drop, rows=r, ws=ws, nan=False)
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
        # binary: every candidate's label is 0 or 1 (NaN is neither), so the zeros and the ones
        # make up the candidates; one counting pass in tiles, with no (batch, candidates)
        # temporary but pos
        zeros = ops.count_equal(labels, 0.0, valid, acc, ws)
        flags["labels"] = ops.any(zeros + n_pos != n_valid)
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
    # the candidates of a positive are the valid non-positives: each pass counts every valid
    # item (the masked ones as -inf scores), and the row's positives, whose scores are known
    # ((B, P), small), are taken off after it: no pass over the batch masks them
    keep, ranked = valid, scores
    if valid is not None and p_max > 1 and b * n < ctx.sizes.one_masked_copy_below:
        # several passes: below 2^20 scores the masked scores are made once (at most 4 MiB),
        # where every pass would mask its tiles again
        ranked, keep = ops.exclude(scores, valid, ws=ws), None
    t_all = ops.where(has, ops.take_along(scores, idx), float("nan"))
    # per slot, the row's positives above it (and at or above it: itself too), (B, P) at once
    pos_above = _positives_beyond(ops, has, t_all, acc, strict=True) if need[0] else None
    pos_at_least = _positives_beyond(ops, has, t_all, acc, strict=False) if need[1] else None
    gts, ges = [], []
    for c in range(p_max):
        t = t_all[:, c]
        if c == 0:  # every row with a positive has slot 0: its pass gives the NaN check too
            gt, ge, nan = ops.rank_counts(ranked, t, acc, need, keep=keep, ws=ws)
            if ops.host_bools(ops.any(nan > 0) | ops.any(ops.isnan(t_all) & has))[0]:
                _raise_nan(batch)
        else:
            gt, ge = _slot_counts(ctx, ranked, keep, None, t, np.nonzero(per_row > c)[0], acc, need)
        if gt is not None:  # the positives above it are no candidates (NaN t: no row, 0)
            gt = gt - pos_above[:, c]
        gts.append(gt)
        if ge is not None:  # nor those tied with it or above (itself included), nor masked items at -inf
            ges.append(ge - pos_at_least[:, c] - ops.where(t == _NEG_INF, float(n) - n_valid, 0.0))
    return RankTasks(
        ops=ops,
        optimistic=ops.stack(gts, axis=1) + 1.0 if need[0] else None,
        pessimistic=ops.stack(ges, axis=1) + 1.0 if need[1] else None,
        num_candidates=(n_keep + 1.0)[:, None] + 0.0 * w,
        weights=w,
        is_task=has,
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
