"""Paired comparison of rankers on the same lists, streamed from sums.

``PairedComparison(["ndcg@10", "map@5"], rankers=["bm25", "dense"])`` takes the scores of two or
more rankers for the same lists (one labels array, mask and weights for all of them) and keeps,
for every metric name and every pair of rankers ``(a, b)`` (``a`` before ``b`` in ``rankers``),
the sums of the per-list differences ``d_i = v_a[i] - v_b[i]``:

    sum(w d),   sum(w^2 d),   sum(w^2 d^2),   and per ranker sum(w v_r),

with ``sum(w)``, ``sum(w^2)`` and the count of lists. A list enters the sums only when it is
counted for every ranker (with the ``"skip"`` policy a list without a relevant item is counted
for none). The state is a bag of sums of constant size (``3 P + R + 4`` numbers per name for
``R`` rankers and ``P = R (R - 1) / 2`` pairs): it merges by addition, all-reduces and
checkpoints as any other metric's.

From the sums, per name and pair (lists are the sampling units; see
:mod:`rankstream.core.uncertainty`):

* ``diff``: the weighted mean difference ``m = sum(w d) / sum(w)`` (= the difference of the two
  rankers' means over the lists compared);
* ``stderr``: ``sqrt(n / (n - 1) * sum(w^2 (d - m)^2)) / sum(w)``, the ratio-estimator standard
  error, ``s_d / sqrt(n)`` for unit weights;
* ``ci_low``, ``ci_high``: ``m -+ t_{(1 + confidence) / 2, n - 1} * stderr`` (Student's t);
* ``t``: the paired t statistic ``m / stderr`` (``scipy.stats.ttest_rel`` for unit weights);
  ``p_value``: its two-sided p-value with ``n - 1`` degrees of freedom;
* with three or more rankers, ``p_holm`` and ``p_bonferroni``: the p-values adjusted over the
  pairs of that name (Bonferroni ``min(1, P p)``; Holm's step-down ``max_{j <= i} min(1,
  (P - j + 1) p_(j))`` over the p-values in increasing order). A pair without a p-value (all
  differences equal: ``stderr`` 0, ``t`` NaN or infinite) keeps NaN and counts among the ``P``.

The result is one flat mapping; its keys (:attr:`PairedComparison.reported`), for a name such as
``"ndcg@10"`` and rankers ``bm25``, ``dense``:

* ``"ndcg@10/bm25"``, ``"ndcg@10/dense"``: each ranker's mean over the lists compared;
* ``"ndcg@10/count"``: ``n``, the number of lists compared;
* ``"ndcg@10/bm25-vs-dense/diff"`` and ``.../stderr``, ``.../ci_low``, ``.../ci_high``,
  ``.../t``, ``.../p_value`` (and ``.../p_holm``, ``.../p_bonferroni`` with three or more
  rankers).

What the numbers assume: the lists are independent draws from the population of lists (queries,
users) and the mean difference is close to normal; the adjustments cover the pairs of one name,
not the several names or cut-offs reported together.

``y_pred`` is ``{ranker: scores (B, N)}`` (exactly the names of ``rankers``) or the stacked
scores ``(B, R, N)`` in the order of ``rankers``. The batch is validated and ranked once per
ranker, as :class:`~rankstream.core.lists.collection.ListMetrics` does for one; every name reads
its values from that ranker's one selection.

The statistics are computed on the host (numpy; the ``t`` distribution from scipy):
:meth:`PairedComparison.compute` takes numpy sums only.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops, Runtime, get_ops
from rankstream.core.execution import exported, read_batch, select_outputs
from rankstream.core.lists.base import ListKernel, ListOutput, quiet
from rankstream.core.lists.collection import COLLECTION_CONVENTIONS, ListMetrics
from rankstream.core.state import check_sums, kernel_config
from rankstream.core.uncertainty import (
    DEFAULT_LEVEL,
    check_level,
    interval,
    t_quantile,
    t_quantile_xp,
    t_two_sided_p,
    weighted_variance_of_mean,
)

__all__ = ["PairedComparison", "bonferroni", "holm"]

#: what each pair reports, in order (with three or more rankers, :data:`ADJUSTED` follow)
PAIR_STATS = ("diff", "stderr", "ci_low", "ci_high", "t", "p_value")
#: the adjusted p-values reported with three or more rankers
ADJUSTED = ("p_holm", "p_bonferroni")
#: the fields of one name: per ranker, per pair, and one number each
_RANKER_FIELDS = ("value_sum",)
_PAIR_FIELDS = ("diff_sum", "diff_w2_sum", "diff_sq_w2_sum")
_SCALAR_FIELDS = ("weight_sum", "weight_sq_sum", "count", "invalid")


def bonferroni(p: np.ndarray) -> np.ndarray:
    """``min(1, m p)`` over the last axis (``m`` its length); NaN stays NaN."""
    p = np.asarray(p, dtype=np.float64)
    return np.minimum(1.0, p * p.shape[-1])


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment over the last axis: with ``p_(1) <= ... <= p_(m)``,
    ``max_{j <= i} min(1, (m - j + 1) p_(j))`` for ``p_(i)``. NaN stays NaN and sorts last
    (it raises no other pair's value) while counting in ``m``."""
    p = np.asarray(p, dtype=np.float64)
    m = p.shape[-1]
    order = np.argsort(np.where(np.isnan(p), np.inf, p), axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    scaled = np.minimum(1.0, ranked * (m - np.arange(m)))
    stepped = np.fmax.accumulate(scaled, axis=-1)  # fmax: a NaN (last) raises nothing
    stepped = np.where(np.isnan(ranked), np.nan, stepped)
    out = np.empty_like(stepped)
    np.put_along_axis(out, order, stepped, axis=-1)
    return out


class _PairedRuntime(Runtime):
    """A runtime whose contexts read the backend and device of the first ranker's scores when
    ``y_pred`` is a mapping of rankers (the :class:`~rankstream.core.state.State` path)."""

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        if isinstance(like, Mapping) and like:
            like = next(iter(like.values()))
            ops = get_ops(like)  # the ops a caller picked from the mapping itself know nothing of it
        return super().context(like, ops)


class PairedComparison:
    """Paired comparison of two or more rankers on the same lists, for several list metrics.

    Args:
        metrics: names as :class:`~rankstream.core.lists.collection.ListMetrics` reads them
            (``["ndcg@10", "map@5"]``), or ``{name: kernel}``.
        rankers: the rankers' names (two or more, distinct, without ``"/"`` or ``"-vs-"``): the
            keys of a ``y_pred`` mapping, or the order of the second axis of stacked ``y_pred``
            ``(B, R, N)``. Pairs are ``(rankers[i], rankers[j])`` for ``i < j``; a difference
            is the first minus the second.
        defaults: per metric base name, keyword arguments for its kernel (as ``ListMetrics``).
        confidence: the confidence level of the intervals, in (0, 1) (default 0.95; the
            spelling of the option of every metric).
        empty, ties, seed, weighting, negative_labels, relevance_threshold: the conventions of
            every metric, as ``ListMetrics`` takes them (shared by every ranker).

    ``compute(sums)`` gives the flat mapping described in the module docstring
    (:attr:`reported` lists its keys).
    """

    name = "paired_comparison"
    #: the result is one flat mapping (:attr:`reported`): no ``"value"`` / quantity split
    quantities: tuple[str, ...] = ()

    def __init__(
        self,
        metrics: Sequence[str] | Mapping[str, ListKernel],
        rankers: Sequence[str],
        defaults: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        confidence: float = DEFAULT_LEVEL,
        **conventions: Any,
    ) -> None:
        unknown = [name for name in conventions if name not in COLLECTION_CONVENTIONS]
        if unknown:
            raise TypeError(f"PairedComparison.__init__() got an unexpected keyword argument {unknown[0]!r}")
        self.confidence = check_level(confidence, "confidence")
        self.rankers = _check_rankers(rankers)
        # the collection checks the names and that every metric reads the batch the same way
        collection = ListMetrics(metrics, defaults, **conventions)
        members = collection.members
        for name, kernel in members.items():
            if len(kernel.top_k) != 1:
                raise ValueError(f"metrics[{name!r}] must have one cut-off, got top_k={kernel.top_k}")
        self._members = members
        self.metrics = list(members)
        self.settings = {name: kernel_config(kernel) for name, kernel in members.items()}
        self._keys = {n: re.sub(r"\W", "_", n) for n in members}
        n = len(self.rankers)
        self.pairs = [(self.rankers[i], self.rankers[j]) for i in range(n) for j in range(i + 1, n)]
        self._pair_index = [(i, j) for i in range(n) for j in range(i + 1, n)]
        sizes = {"value_sum": (n,), **{f: (len(self.pairs),) for f in _PAIR_FIELDS}}
        sizes.update({f: () for f in _SCALAR_FIELDS})
        self.fields = {f"{self._keys[m]}__{f}": shape for m in members for f, shape in sizes.items()}

    # -- the keys --------------------------------------------------------------------------
    @property
    def pair_stats(self) -> tuple[str, ...]:
        """What each pair reports: :data:`PAIR_STATS`, and :data:`ADJUSTED` with three or more
        rankers."""
        return PAIR_STATS + (ADJUSTED if len(self.rankers) > 2 else ())

    def pair_key(self, name: str, a: str, b: str, stat: str) -> str:
        """The result's key of ``stat`` for the pair ``(a, b)`` of ``name``:
        ``"{name}/{a}-vs-{b}/{stat}"``."""
        return f"{name}/{a}-vs-{b}/{stat}"

    @property
    def reported(self) -> list[str]:
        """The keys of the result, per name: ``"{name}/{ranker}"`` per ranker, ``"{name}/count"``,
        then ``"{name}/{a}-vs-{b}/{stat}"`` per pair and statistic."""
        keys = []
        for name in self.metrics:
            keys += [f"{name}/{r}" for r in self.rankers] + [f"{name}/count"]
            keys += [self.pair_key(name, a, b, s) for a, b in self.pairs for s in self.pair_stats]
        return keys

    # -- one batch -------------------------------------------------------------------------
    @property
    def random_ties(self) -> bool:
        return next(iter(self._members.values())).random_ties

    def runtime(self, generator: Any = None) -> Runtime:
        first = next(iter(self._members.values()))
        return _PairedRuntime(first.random_ties, first.conventions.seed, generator)

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        return self.runtime().context(like, ops)

    def ranker_scores(self, y_pred: Any) -> list[Any]:
        """The rankers' ``(B, N)`` scores in the order of :attr:`rankers`, from a mapping
        ``{ranker: scores}`` or stacked ``(B, R, N)`` scores."""
        if isinstance(y_pred, Mapping):
            given = list(y_pred)
            if set(given) != set(self.rankers) or len(given) != len(self.rankers):
                raise ValueError(
                    f"y_pred must map exactly the rankers {self.rankers} to their scores, got keys {given}"
                )
            return [y_pred[r] for r in self.rankers]
        shape = tuple(getattr(y_pred, "shape", ()))
        if len(shape) != 3 or shape[1] != len(self.rankers):
            raise ValueError(
                f"y_pred must be a mapping {{ranker: scores (batch, list_size)}} or stacked scores of shape "
                f"(batch, {len(self.rankers)}, list_size) for the rankers {self.rankers}, got "
                f"{type(y_pred).__name__} of shape {shape}"
            )
        return [y_pred[:, r] for r in range(len(self.rankers))]

    def outputs(
        self, ctx: Context | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> tuple[Context, dict[str, list[ListOutput]]]:
        """Per name, every ranker's per-list output (one validation and selection per ranker),
        and the context they were computed in (the host ops' for small CPU batches)."""
        scores = self.ranker_scores(y_pred)
        ctx = ctx or self.context(scores[0], get_ops(*scores, y, mask, sample_weight))
        ctx, (first_scores, y, mask, sample_weight, *rest) = ctx.on_host(
            scores[0], y, mask, sample_weight, *scores[1:]
        )
        scores = [first_scores, *rest]
        first = next(iter(self._members.values()))
        outs: dict[str, list[ListOutput]] = {name: [] for name in self._members}
        kernels = list(self._members.values())
        for s in scores:
            batch = read_batch(ctx, first, s, y, mask, sample_weight)
            for name, out in zip(self._members, select_outputs(ctx, kernels, batch), strict=True):
                outs[name].append(out)
        return ctx, outs

    def _compared(self, ops: Ops, outs: list[ListOutput]) -> tuple[Array, Array, Array | None, Array | None]:
        """``(values (B, R), counted (B,), weights (B,) or None, invalid (B,) or None)`` of one
        name: a list is compared when it is counted (and valid) for every ranker."""
        values = ops.stack([o.values[:, 0] for o in outs], axis=1)
        counted, invalid = None, None
        for o in outs:
            c = o.counted if o.invalid is None else o.counted & ~o.invalid
            counted = c if counted is None else counted & c
            if o.invalid is not None:
                invalid = o.invalid if invalid is None else invalid | o.invalid
        return values, counted, outs[0].weights, invalid

    def batch_sums(
        self, ctx: Context | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None,
        flat: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Any:  # fmt: skip
        """Every name's sums of one batch (see the module docstring); with ``flat`` (the
        fields' shapes, in order) joined into one 1-D array."""
        with quiet():
            ctx, outs = self.outputs(ctx, y_pred, y, mask, sample_weight)
            ops = ctx.ops
            out: dict[str, Array] = {}
            for name, per_ranker in outs.items():
                values, counted, weights, invalid = self._compared(ops, per_ranker)
                if weights is None:
                    wc = ops.cast(counted, values.dtype)
                    wc2 = wc
                else:
                    wc = ops.where(counted, weights, 0.0)
                    wc2 = wc * wc
                v = ops.where(counted[:, None], values, 0.0)
                d = ops.stack([v[:, i] - v[:, j] for i, j in self._pair_index], axis=1)
                wd2 = wc2[:, None] * d
                key = self._keys[name]
                weight_sum = ops.sum(wc)
                out[f"{key}__value_sum"] = ops.sum(wc[:, None] * v, axis=0)
                out[f"{key}__diff_sum"] = ops.sum(wc[:, None] * d, axis=0)
                out[f"{key}__diff_w2_sum"] = ops.sum(wd2, axis=0)
                out[f"{key}__diff_sq_w2_sum"] = ops.sum(wd2 * d, axis=0)
                out[f"{key}__weight_sum"] = weight_sum
                out[f"{key}__weight_sq_sum"] = ops.sum(wc2)
                out[f"{key}__count"] = weight_sum if weights is None else ops.sum(ops.cast(wc > 0, wc.dtype))
                out[f"{key}__invalid"] = (
                    weight_sum * 0.0 if invalid is None else ops.sum(ops.cast(invalid, wc.dtype))
                )
        return exported(ops, out, flat)

    def per_list(
        self, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ctx: Context | None = None
    ) -> dict[str, tuple[Array, Array, Array]]:
        """Per name: the per-list values ``(B, R)`` (columns in the order of :attr:`rankers`),
        whether each list is compared ``(B,)`` bool (counted and valid for every ranker), and
        the list weights ``(B,)``: what the sums are made of."""
        with quiet():
            ctx, outs = self.outputs(ctx, y_pred, y, mask, sample_weight)
            ops = ctx.ops
            result = {}
            for name, per_ranker in outs.items():
                values, counted, weights, _ = self._compared(ops, per_ranker)
                if weights is None:
                    weights = ops.zeros((values.shape[0],), values, values.dtype) + 1.0
                result[name] = (ops.export(values), ops.export(counted), ops.export(weights))
        return result

    # -- from the sums ---------------------------------------------------------------------
    def part(self, sums: Mapping[str, Any], name: str, xp: Any = np) -> dict[str, Any]:
        """The sums of one metric name (``value_sum``, ``diff_sum``, ...: the fields without the
        name's prefix); float64 numpy arrays on numpy, the arrays as given on another ``xp``."""
        key = self._keys[name]
        fields = (*_RANKER_FIELDS, *_PAIR_FIELDS, *_SCALAR_FIELDS)
        if xp is np:
            return {f: np.asarray(sums[f"{key}__{f}"], dtype=np.float64) for f in fields}
        return {f: sums[f"{key}__{f}"] for f in fields}

    def compute(self, sums: Mapping[str, Any], xp: Any = np) -> dict[str, Any]:
        """The flat result keyed as :attr:`reported`, elementwise on ``xp``. NaN where a name saw
        invalid lists, and the statistics NaN with fewer than two lists. On numpy the ``t``
        distribution is scipy's; on ``keras.ops`` (a traced computation) the critical value is
        :func:`~rankstream.core.uncertainty.t_quantile_xp` and the p-values (and their
        adjustments) are NaN: the tail probability is computed on the host only."""
        host = xp is np
        out: dict[str, Any] = {}
        with np.errstate(all="ignore"):
            for name in self.metrics:
                s = self.part(sums, name, xp)
                n, w, bad = s["count"], s["weight_sum"], s["invalid"] > 0
                nan = float("nan") + 0.0 * w
                safe = xp.where(w > 0, w, 1.0 + 0.0 * w)
                means = xp.where(w > 0, s["value_sum"] / safe, 0.0 * s["value_sum"])
                diff = xp.where(w > 0, s["diff_sum"] / safe, 0.0 * s["diff_sum"])
                var = weighted_variance_of_mean(
                    n, w, s["weight_sq_sum"], s["diff_w2_sum"], s["diff_sq_w2_sum"], diff, xp
                )
                se = xp.sqrt(var)
                critical = (
                    t_quantile(self.confidence, n - 1.0)
                    if host
                    else t_quantile_xp(self.confidence, n - 1.0, xp)
                )
                low, high = interval(diff, se, critical)
                t = diff / se
                p = t_two_sided_p(t, n - 1.0) if host else nan + 0.0 * t
                stats = {"diff": diff, "stderr": se, "ci_low": low, "ci_high": high, "t": t, "p_value": p}
                if len(self.rankers) > 2:
                    stats["p_holm"], stats["p_bonferroni"] = (holm(p), bonferroni(p)) if host else (p, p)
                for r, ranker in enumerate(self.rankers):
                    out[f"{name}/{ranker}"] = xp.where(bad, nan, means[r])
                out[f"{name}/count"] = n
                for q, (a, b) in enumerate(self.pairs):
                    for stat in self.pair_stats:
                        out[self.pair_key(name, a, b, stat)] = xp.where(bad, nan, stats[stat][q])
        return out

    def select(self, values: Mapping[str, Array]) -> dict[str, Array]:
        return dict(values)

    def finalize(self, values: Mapping[str, Any]) -> dict[str, float]:
        return {key: float(np.asarray(v).reshape(-1)[0]) for key, v in values.items()}

    def check_computable(self, sums: Mapping[str, np.ndarray], name: str | None = None) -> None:
        bad = "NaN scores among their items, a NaN or infinite label, or a bad sample_weight"
        what = "list compared;lists seen with a relevant item and a positive weight, for every ranker"
        for member in self.metrics:
            check_sums(self.part(sums, member), f"{name or 'PairedComparison'}[{member!r}]", "weight_sum",
                       "list", bad, what)  # fmt: skip

    def __repr__(self) -> str:
        return f"PairedComparison({self.metrics}, rankers={self.rankers}, confidence={self.confidence})"


# the conventions are ListMetrics', named once there: the explicit signature shows them
PairedComparison.__init__.__signature__ = inspect.signature(
    PairedComparison.__init__
).replace(  # type: ignore[attr-defined]
    parameters=[
        *list(inspect.signature(PairedComparison.__init__).parameters.values())[:-1],
        *(inspect.signature(ListMetrics).parameters[name] for name in COLLECTION_CONVENTIONS),
    ]
)


def _check_rankers(rankers: Any) -> list[str]:
    """The ranker names as a list: two or more distinct non-empty strings without ``"/"`` or
    ``"-vs-"`` (they would make the result's keys ambiguous)."""
    if isinstance(rankers, (str, bytes)) or not isinstance(rankers, Sequence):
        raise TypeError(f"rankers must be a list of ranker names, got {rankers!r}")
    names = list(rankers)
    bad = [r for r in names if not isinstance(r, str) or not r or "/" in r or "-vs-" in r]
    if bad:
        raise ValueError(f"rankers must be non-empty strings without '/' or '-vs-', got {bad} in {names}")
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"rankers must name two or more distinct rankers, got {names}")
    return names
