"""The streamed state of sampled evaluation: the histogram of sampled ranks, and its report.

Each positive is ranked among ``m`` negatives drawn uniformly without replacement from the other
``n - 1`` items of the catalog; its sampled rank ``r`` is in ``1..m+1``. The state is the
histogram ``h_r`` (``m + 1`` sums): merge adds histograms, reset zeros it, and every estimator of
:mod:`rankstream.core.sampled` is a function of it.

Ranks from scores (:func:`score_ranks`): ``o = 1 + #(neg > pos)`` and ``p = 1 + #(neg >= pos)``
(PyKEEN's optimistic and pessimistic ranks); ``ties="optimistic"`` counts ``o``,
``"pessimistic"`` counts ``p``, and ``"realistic"`` spreads the list's unit of mass evenly over
``o..p`` (the expectation over a uniformly random order of the tied items). That is PyKEEN's
realistic rank ``(o + p) / 2`` for the mean rank and differs from it for a metric that is not
linear in the rank (``1 / r``); without ties the three agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rankstream.core.sampled import (
    DEFAULT_GAMMA,
    ESTIMATORS,
    Design,
    check_gamma,
    check_sizes,
    design,
    estimates,
    metric_specs,
)
from rankstream.core.state import NotComputableError

#: the tie policies of ranks computed from scores
TIES = ("realistic", "optimistic", "pessimistic")


def batch_histogram(
    optimistic: Any,
    pessimistic: Any,
    num_negatives: int,
    xp: Any = np,
    weights: Any = None,
    dtype: str = "float64",
) -> Any:
    """The ``(m + 1,)`` histogram of one batch: each list puts ``1 / (p - o + 1)`` on every rank
    in ``o..p`` (``o = p``: a unit on ``o``), times its weight where ``weights`` (``(B,)``, 0 or
    1: a row counted or not) are given. Elementwise on ``xp`` (numpy or ``keras.ops``, there in
    ``dtype``): ``(B, m + 1)`` comparisons, no read of values."""
    if xp is np:
        cells = np.arange(1, num_negatives + 2, dtype=np.float64)
        o, p = np.reshape(optimistic, (-1, 1)), np.reshape(pessimistic, (-1, 1))
    else:  # one dtype throughout (TensorFlow does not promote)
        cells = xp.arange(1, num_negatives + 2, dtype=dtype)
        o = xp.cast(xp.reshape(optimistic, (-1, 1)), cells.dtype)
        p = xp.cast(xp.reshape(pessimistic, (-1, 1)), cells.dtype)
        weights = None if weights is None else xp.cast(weights, cells.dtype)
    inside = xp.where(xp.logical_and(cells >= o, cells <= p), 1.0 + 0.0 * o, 0.0 * o) / (p - o + 1.0)
    if weights is not None:
        inside = inside * xp.reshape(weights, (-1, 1))
    return xp.sum(inside, axis=0)


def score_ranks(pos_scores: Any, neg_scores: Any, ties: str) -> tuple[np.ndarray, np.ndarray]:
    """``(o, p)`` of each positive among its row of negatives (float64 numpy), for ``ties``:
    ``o = 1 + #(neg > pos)``, ``p = 1 + #(neg >= pos)``; optimistic gives ``(o, o)``,
    pessimistic ``(p, p)``."""
    pos = np.asarray(pos_scores, dtype=np.float64).reshape(-1, 1)
    neg = np.asarray(neg_scores, dtype=np.float64)
    o = 1.0 + (neg > pos).sum(axis=1)
    p = 1.0 + (neg >= pos).sum(axis=1)
    if ties == "optimistic":
        return o, o
    if ties == "pessimistic":
        return p, p
    return o, p


def candidate_ranks(scores: Any, true_index: Any, ties: str, xp: Any = np) -> tuple[Any, Any, Any]:
    """``(o, p, bad)`` of the true candidate of each row of ``scores`` ``(B, m + 1)`` (its
    index ``true_index`` ``(B,)``): ``o = 1 + #(s > s_true)``, ``p = #(s >= s_true)`` (the true
    one counts itself), narrowed by ``ties`` as in :func:`score_ranks`; ``bad`` flags rows whose
    index is not an integer in range or whose scores hold NaN (their ``o, p`` are meaningless).
    Elementwise on ``xp`` (numpy or ``keras.ops``), no read of values."""
    width = scores.shape[1]
    idx = xp.reshape(true_index, (-1,))
    ok = xp.logical_and(xp.logical_and(idx >= 0, idx <= width - 1), idx == xp.round(idx))
    safe = xp.where(ok, idx, 0)
    take = xp.reshape(safe.astype(np.int64) if xp is np else xp.cast(safe, "int32"), (-1, 1))
    pos = xp.take_along_axis(scores, take, axis=1)
    o = 1.0 + xp.sum(xp.where(scores > pos, 1.0, 0.0), axis=1)
    p = xp.sum(xp.where(scores >= pos, 1.0, 0.0), axis=1)
    nan = xp.any(xp.isnan(scores), axis=1)
    bad = xp.logical_or(xp.logical_not(ok), nan)
    if ties == "optimistic":
        p = o
    elif ties == "pessimistic":
        o = p
    return o, p, bad


def _host(x: Any, name: str) -> np.ndarray:
    """``x`` as a numpy array (torch tensors on any device, lists); a ``TypeError`` naming
    ``name`` for what is not numeric."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype} ({type(x).__name__})")
    return arr


def check_ranks(ranks: Any, num_negatives: int) -> np.ndarray:
    """Sampled ranks as a float64 ``(B,)`` array of integers in ``1..m+1``; a ``ValueError``
    echoing what came in otherwise."""
    r = _host(ranks, "ranks")
    if r.ndim != 1:
        raise ValueError(f"ranks must be a 1-d array of sampled ranks, got shape {r.shape}")
    r = r.astype(np.float64)
    bad = ~np.isfinite(r) | (r < 1) | (r > num_negatives + 1) | (r != np.round(r))
    if bad.any():
        raise ValueError(
            f"ranks must be integers in 1..num_negatives + 1 = {num_negatives + 1}, "
            f"got {r[bad][:5].tolist()} "
            f"({int(bad.sum())} bad of {r.size})"
        )
    return r


def check_scores(pos_scores: Any, neg_scores: Any, num_negatives: int) -> tuple[np.ndarray, np.ndarray]:
    """``(pos (B,), neg (B, m))`` as numpy arrays; a ``ValueError`` for shapes or NaN."""
    pos, neg = _host(pos_scores, "pos_scores"), _host(neg_scores, "neg_scores")
    if pos.ndim != 1 or neg.ndim != 2 or neg.shape != (pos.shape[0], num_negatives):
        raise ValueError(
            f"pos_scores must have shape (B,) and neg_scores (B, num_negatives={num_negatives}), got "
            f"{pos.shape} and {neg.shape}"
        )
    for name, x in (("pos_scores", pos), ("neg_scores", neg)):
        if np.isnan(x.astype(np.float64)).any():
            raise ValueError(f"{name} holds NaN ({int(np.isnan(x.astype(np.float64)).sum())} values)")
    return pos, neg


def check_weights(weights: Any, rows: int) -> np.ndarray:
    """List weights as a float64 ``(rows,)`` array of finite values ``>= 0``; a ``ValueError``
    naming ``weights`` and echoing what came in otherwise."""
    w = _host(weights, "weights").astype(np.float64)
    if w.shape != (rows,):
        raise ValueError(f"weights must have shape ({rows},), one per list, got {w.shape}")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        raise ValueError(f"weights must be finite and >= 0, got {w[bad][:5].tolist()} ({int(bad.sum())} bad)")
    return w


def check_ks(ks: Any) -> tuple[int, ...]:
    """The cut-offs as a tuple of positive ints (a ``ValueError`` naming ``ks`` otherwise)."""
    given = (ks,) if isinstance(ks, (int, np.integer)) else tuple(ks) if isinstance(ks, Sequence) else None
    if not given or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in given):
        raise ValueError(f"ks must be a positive int or a non-empty sequence of them, got {ks!r}")
    return tuple(sorted({int(k) for k in given}))


def flat_report(nested: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float]:
    """``{f"{metric}_{estimator}": value, f"{metric}_{estimator}_{q}": ...}`` from
    :func:`~rankstream.core.sampled.estimates`."""
    out: dict[str, float] = {}
    for metric, row in nested.items():
        for estimator, got in row.items():
            for q, v in got.items():
                if q == "count":  # one count for the whole report
                    continue
                out[f"{metric}_{estimator}" + ("" if q == "value" else f"_{q}")] = v
    return out


class SampledRanks:
    """Sampled evaluation with corrected estimates of the full-catalog metrics.

    The state is the histogram of sampled ranks ``h`` (``m + 1`` sums of list weights), the
    histogram of squared weights ``h2`` (``squares``) and the number of lists with a positive
    weight (``lists``); with unit weights ``h2 = h`` and ``lists = sum h``. ``compute()`` returns, for
    every metric (``hit_rate@k`` = Recall@k, ``ndcg@k``, ``mrr@k`` for each ``k`` of ``ks``;
    ``mrr``, ``ap`` (= ``mrr`` with one relevant item), ``mean_rank``) and every estimator
    (``sampled``: the metric of the sampled rank; ``minimal_bias`` and ``bias_variance``:
    Krichene and Rendle's corrections; ``fitted``: the expectation under the maximum-likelihood
    distribution of full ranks), the key ``f"{metric}_{estimator}"`` (``"ndcg@10_fitted"``), and
    ``count`` (lists). See :mod:`rankstream.core.sampled` and ``docs/sampled.md``.

    Args:
        num_items: ``n``, the catalog size (the positive and the ``n - 1`` items it competes
            with in the full ranking).
        num_negatives: ``m``, negatives sampled per positive (``1 <= m <= n - 1``).
        ks: the cut-offs (default ``(1, 5, 10)``).
        gamma: the bias-variance trade-off in ``[0, 1]`` (default 0.1).
        confidence: None, or a level such as 0.95: the ``sampled``, ``minimal_bias`` and
            ``bias_variance`` keys get ``_stderr``, ``_ci_low``, ``_ci_high`` (Student's t over
            the lists: the estimator's sampling variance given the catalog, not its bias, which
            no interval covers). ``fitted`` has no interval.
        ties: for :meth:`update` from scores: ``"realistic"`` (default), ``"optimistic"``,
            ``"pessimistic"`` (module docstring).
    """

    def __init__(
        self,
        num_items: int,
        num_negatives: int,
        ks: int | Sequence[int] = (1, 5, 10),
        gamma: float = DEFAULT_GAMMA,
        confidence: float | None = None,
        ties: str = "realistic",
    ) -> None:
        self.num_items, self.num_negatives = check_sizes(num_items, num_negatives)
        self.ks = check_ks(ks)
        self.gamma = check_gamma(gamma)
        if confidence is not None:
            from rankstream.core.uncertainty import check_level

            confidence = check_level(confidence)
        self.confidence = confidence
        if ties not in TIES:
            raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
        self.ties = ties
        self._design: Design | None = None
        self.reset()

    def reset(self) -> None:
        """Zero the state."""
        self.histogram = np.zeros(self.num_negatives + 1)
        self.squares = np.zeros(self.num_negatives + 1)
        self.lists = 0.0

    def batch(self, ranks_or_pos_scores: Any, neg_scores: Any = None, weights: Any = None) -> np.ndarray:
        """One batch's state as one vector ``[h (m + 1), h2 (m + 1), lists]`` (the state is not
        touched; :func:`split_state` splits it): from sampled ranks ``(B,)``, or from
        ``pos_scores (B,)`` and ``neg_scores (B, m)`` with the tie policy; ``weights`` ``(B,)``
        finite and ``>= 0`` (default 1: each list counts once). A list of weight ``w`` puts
        ``w / (p - o + 1)`` on each rank of ``o..p`` in ``h`` and ``w^2 / (p - o + 1)`` in ``h2``."""
        m = self.num_negatives
        if neg_scores is None:
            o = p = check_ranks(ranks_or_pos_scores, m)
        else:
            o, p = score_ranks(*check_scores(ranks_or_pos_scores, neg_scores, m), self.ties)
        w = np.ones(o.shape[0]) if weights is None else check_weights(weights, o.shape[0])
        h, h2 = batch_histogram(o, p, m, weights=w), batch_histogram(o, p, m, weights=w * w)
        return np.concatenate([h, h2, [float(np.count_nonzero(w))]])

    def update(self, ranks_or_pos_scores: Any, neg_scores: Any = None, weights: Any = None) -> SampledRanks:
        """Add a batch (see :meth:`batch`); an empty batch is a no-op, a bad one raises and
        leaves the state as it was."""
        h, h2, lists = split_state(self.batch(ranks_or_pos_scores, neg_scores, weights), self.num_negatives)
        self.histogram, self.squares, self.lists = self.histogram + h, self.squares + h2, self.lists + lists
        return self

    def merge(self, other: SampledRanks) -> SampledRanks:
        """Add ``other``'s histogram (same ``num_items`` and ``num_negatives``)."""
        if not isinstance(other, SampledRanks):
            raise TypeError(f"other must be a SampledRanks, got {type(other).__name__}")
        if (other.num_items, other.num_negatives) != (self.num_items, self.num_negatives):
            raise ValueError(
                f"cannot merge a state of num_items={other.num_items}, "
                f"num_negatives={other.num_negatives} into one of num_items={self.num_items}, "
                f"num_negatives={self.num_negatives}"
            )
        self.histogram = self.histogram + other.histogram
        self.squares, self.lists = self.squares + other.squares, self.lists + other.lists
        return self

    def compute(self) -> dict[str, float]:
        """Every metric under every estimator (class docstring); ``NotComputableError`` before
        any list."""
        return report(
            self.histogram, self.num_items, self.ks, self.gamma, self.confidence, self.squares, self.lists,
            self.design,
        )  # fmt: skip

    @property
    def design(self) -> Design:
        """What the corrections need of ``P(r | R)`` for this state's ``num_items``,
        ``num_negatives`` and metrics (:func:`~rankstream.core.sampled.design`: a pass over every
        full rank, about 2 s at 100,000 items), computed on first use and kept: a constant of the
        constructor's arguments, never of the data."""
        if self._design is None:
            self._design = design(self.num_items, self.num_negatives, metric_specs(self.ks))
        return self._design


def split_state(vector: Any, num_negatives: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``(h, h2, lists)`` of a state vector ``[h (m + 1), h2 (m + 1), lists]``."""
    v = np.asarray(vector, dtype=np.float64)
    m1 = int(num_negatives) + 1
    return v[:m1], v[m1 : 2 * m1], float(v[2 * m1])


def report(
    histogram: Any,
    num_items: int,
    ks: Sequence[int],
    gamma: float = DEFAULT_GAMMA,
    confidence: float | None = None,
    squares: Any = None,
    lists: float | None = None,
    prepared: Design | None = None,
) -> dict[str, float]:
    """The flat report of :meth:`SampledRanks.compute` from a histogram (what adapters call, with
    the state's :attr:`SampledRanks.design` as ``prepared``);
    ``squares`` and ``lists`` of weighted lists (default: unit weights, ``squares = histogram``,
    ``lists = sum(histogram)``). ``count`` is the sum of the weights."""
    h = np.asarray(histogram, dtype=np.float64)
    if not h.sum() > 0:
        raise NotComputableError("sampled ranks: no list has been seen; update with at least one")
    out = flat_report(estimates(h, num_items, metric_specs(ks), gamma, confidence, squares, lists, prepared))
    out["count"] = float(h.sum())
    return out


def sampled_rank_metrics(
    ranks: Any,
    num_items: int,
    num_negatives: int,
    ks: int | Sequence[int] = (1, 5, 10),
    gamma: float = DEFAULT_GAMMA,
    confidence: float | None = None,
    weights: Any = None,
) -> dict[str, float]:
    """PyKEEN-style: every metric x estimator (:class:`SampledRanks`) of an array of sampled
    ranks ``(num_lists,)`` in ``1..num_negatives + 1`` (``weights`` one per list, default 1)."""
    state = SampledRanks(num_items, num_negatives, ks, gamma, confidence)
    return state.update(ranks, weights=weights).compute()


__all__ = [
    "ESTIMATORS",
    "TIES",
    "SampledRanks",
    "batch_histogram",
    "report",
    "sampled_rank_metrics",
    "split_state",
]
