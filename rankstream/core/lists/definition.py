"""What a list metric is: :class:`ListDefinition`, the math of one metric (per-list values from
a selection, the state fields, the result from the sums), which the execution layer
(:mod:`rankstream.core.execution`) calls; :class:`~rankstream.core.lists.base.ListKernel` adds
the entry points of one call.

A list metric is a pure function of one batch's :class:`Selection` (the labels of the top
``K = min(max(k), num_items)`` items in rank order, and the batch itself) returning a
:class:`ListOutput`: per-list values at every cut-off ``k_j``, whether each list holds a
relevant item, and the relevance keras-rs weighs lists by. The base turns those into the state

    value_sum[j] = sum_i w_i v[i, j],   weight_sum = sum_i w_i,   count = #{i : w_i > 0},
    invalid = lists with bad data found where update could not read values back,

over the lists that are counted; the result is ``value_sum / weight_sum``. Every ``k`` is read
from cumulative sums over the one selection (:meth:`ListKernel.cut`); no loop over rows or k.

With ``confidence=level`` (e.g. 0.95) the state also keeps ``w2v2_sum[j] = sum_i w_i^2 v[i, j]^2``,
``w2v_sum[j] = sum_i w_i^2 v[i, j]`` and ``w2_sum = sum_i w_i^2``, and the metric reports the
standard error of the weighted mean over the lists (the ratio-estimator variance
``n / (n - 1) * sum_i w_i^2 (v_i - m)^2 / (sum_i w_i)^2``, ``n`` the count), Student's ``t``
interval at that level with ``n - 1`` degrees of freedom, and the count
(:mod:`rankstream.core.uncertainty`; the derivation is in ``docs/statistics.md``).

With ``chance=True`` the state also keeps, under a uniformly random ranking of each list's items
(:mod:`rankstream.core.lists.chance`), ``chance_expected_sum[j] = sum_i w_i E[v_ij]``,
``chance_variance_sum[j] = sum_i w_i^2 Var[v_ij]`` and ``chance_best_sum[j] = sum_i w_i b_ij``
(``b`` the value under the ideal ranking), and the metric reports ``expected`` (``E``, the
weighted mean of the expectations), ``adjusted`` ``(M - E) / (M_best - E)`` (1 at the optimum,
0 by chance; ``M_best`` the weighted mean of ``b``) and ``z`` ``(M - E) / sqrt(Var)`` with
``Var = sum_i w_i^2 Var[v_i] / (sum_i w_i)^2`` (``docs/chance.md``).

The conventions are one frozen :class:`~rankstream.core.lists.conventions.ListConventions`
(each adapter picks its peer's).

A masked item behaves exactly as if it were not in the list, so a list whose items are all
masked (or padding) is not a list: it is never counted, whatever the ``empty`` policy (not
even as a list without a relevant item under ``"zero"``), and its weight enters no sum. ``k``
past the end of a list is clipped to the list.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops, Runtime
from rankstream.core.inputs import ListBatch, check_positive_ints
from rankstream.core.lists.chance import (
    CHANCE_QUANTITIES,
    best_of,
    chance_quantities,
    chance_terms,
    check_chance,
    expected_of,
    variance_of,
)
from rankstream.core.lists.conventions import CONVENTION_NAMES, ListConventions, explicit_signature
from rankstream.core.lists.outputs import (
    INTERVAL_QUANTITIES,
    ListField,
    ListOutput,
    divided,
    list_ones_of,
    list_sums,
    list_values_of,
    squared_list_values_of,
)
from rankstream.core.lists.selection import Selection
from rankstream.core.lists.shared import BatchShared
from rankstream.core.state import check_sums
from rankstream.core.uncertainty import (
    check_level,
    interval,
    t_quantile,
    t_quantile_xp,
    weighted_variance_of_mean,
)

#: ``top_k`` of a metric read over the whole list (a name without ``@k``, R-precision): past
#: the end of any list, so the selection is the whole list
WHOLE_LIST = 2**31 - 1


class ListDefinition:
    """Base of the list metrics: subclasses implement :meth:`list_values` (a pure function of
    the selection) and set ``name``. Kernels are immutable definitions: per-call state lives
    in the :class:`Context` (ops, read-back, tie generator, workspace).

    A subclass's ``__init__`` declares only its own options (keyword-only) and passes
    ``**conventions`` on; the class gets an explicit signature with every option and
    convention (``inspect.signature``). It may add state fields (:meth:`list_fields`) and
    reported quantities (``quantities``, :meth:`compute`) with no change anywhere else.

    ``confidence`` (every list kernel; None by default): a level in (0, 1), e.g. 0.95, adds
    the fields of the standard error (``w2v2_sum``, ``w2v_sum``, ``w2_sum``) and makes the metric
    report ``stderr``, ``ci_low``, ``ci_high`` and ``count`` beside its value (see the module
    docstring). None: the fields, results and settings of the metric alone.

    ``chance`` (every list kernel; False by default): True adds the fields of the metric under
    a uniformly random ranking (``chance_expected_sum``, ``chance_variance_sum``,
    ``chance_best_sum``) and makes it report ``expected``, ``adjusted`` and ``z`` beside its
    value (after the interval's quantities when both are on; see the module docstring)."""

    name = "list"
    #: bytes per ranked item of an unmasked batch this kernel's update holds at its peak: the
    #: selection (top-k values and indices, labels and their float64 cast) and the kernel's
    #: (B, K) arrays; an upper bound of the measured (2,048 x 1,024 at k = 20, 512 x 4,096 at
    #: k = 100: 23-30 for MAP, recall, precision, hit rate, F1, RBP, DCG), which sizes the blocks
    #: of rows of a large selection (:func:`_selection_bytes`)
    ranked_bytes = 32
    #: whether per-item weights scale the per-list values themselves (an unnormalised sum such
    #: as DCG): under keras-rs weighting such a value is divided by the list's weight, as
    #: keras-rs does, so the weighted mean is ``sum(value) / sum(weight)``
    weighted_values = False

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        confidence: float | None = None,
        chance: bool = False,
        **conventions: Any,
    ) -> None:
        unknown = [name for name in conventions if name not in CONVENTION_NAMES]
        if unknown:
            name = f"{type(self).__name__}.__init__()"
            raise TypeError(f"{name} got an unexpected keyword argument {unknown[0]!r}")
        self.top_k = check_positive_ints(top_k, "top_k")
        self.ks = self.top_k  # as RankKernel's; part of the saved settings (kernel_config)
        self.conventions = ListConventions(**conventions)
        # private: not a saved setting (the level reads the same sums); the fields tell the
        # states with the standard error's sums from those without
        self._confidence = None if confidence is None else check_level(confidence, "confidence")
        if not isinstance(chance, bool):
            raise TypeError(f"chance must be a bool, got {chance!r}")
        self._chance = chance  # private as the level: the fields tell the states apart
        if chance:
            check_chance(self)

    #: the hook of ``chance=True``, declared by the kernel file of a metric whose moments under a
    #: uniformly random ranking are known: a method ``chance_moments(self, sel) -> (E, Var, best)``,
    #: each ``(B, len(top_k))`` (per list, the expected value and the variance of the metric at
    #: every ``k`` under a random ranking of its items, and its value under the ideal ranking),
    #: built from the helpers of :mod:`~rankstream.core.lists.chance`; None (``chance=True``
    #: refused, naming the metrics that declare it) where the metric declares none
    chance_moments: Any = None

    @property
    def confidence(self) -> float | None:
        """The level of the reported interval (None: no standard error, no interval)."""
        return self._confidence

    @property
    def chance(self) -> bool:
        """Whether the metric reports its expectation under random ranking, the adjusted index
        and the z-score."""
        return self._chance

    @property
    def quantities(self) -> tuple[str, ...]:
        """What the metric reports besides ``"value"`` (names of :meth:`compute`'s results):
        ``("stderr", "ci_low", "ci_high", "count")`` with a ``confidence`` level, then
        ``("expected", "adjusted", "z")`` with ``chance``, else none.
        With any, :meth:`select` and :meth:`finalize` give ``{"value": ..., q: ...}``. A
        subclass may set its own as a class attribute."""
        interval_q = INTERVAL_QUANTITIES if self._confidence is not None else ()
        return interval_q + (CHANCE_QUANTITIES if self._chance else ())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        explicit_signature(cls, ListDefinition)

    def __getattr__(self, name: str) -> Any:  # the conventions read as attributes
        if name in CONVENTION_NAMES:
            return getattr(self.conventions, name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    # -- the state -----------------------------------------------------------------------
    def list_fields(self) -> dict[str, ListField]:
        """The state fields summed from the per-list output (see :class:`ListField`):
        ``value_sum``, the weighted sum of the values at every ``k``, and with a ``confidence``
        level ``w2v2_sum`` and ``w2v_sum`` (``sum w^2 v^2`` and ``sum w^2 v`` at every ``k``) and
        ``w2_sum`` (``sum w^2``). A subclass adds its own
        (``{**super().list_fields(), "value_sq_sum": ...}``); ``weight_sum``, ``count`` and
        ``invalid`` follow them in every list metric's state."""
        per_k = (len(self.top_k),)
        fields = {"value_sum": ListField(per_k, list_values_of)}
        if self._confidence is not None:
            fields["w2v2_sum"] = ListField(per_k, squared_list_values_of, power=2)
            fields["w2v_sum"] = ListField(per_k, list_values_of, power=2)
            fields["w2_sum"] = ListField((), list_ones_of, power=2)
        if self._chance:
            fields["chance_expected_sum"] = ListField(per_k, expected_of)
            fields["chance_variance_sum"] = ListField(per_k, variance_of, power=2)
            fields["chance_best_sum"] = ListField(per_k, best_of)
        return fields

    @property
    def statistic_fields(self) -> frozenset[str]:
        """The fields only the standard error reads (none without a ``confidence`` level): a
        state saved without them still loads, with the statistics unavailable (NaN)."""
        return frozenset(("w2v2_sum", "w2v_sum", "w2_sum")) if self._confidence is not None else frozenset()

    @cached_property
    def fields(self) -> dict[str, tuple[int, ...]]:
        """State field name -> shape: :meth:`list_fields`, then ``weight_sum``, ``count``,
        ``invalid``."""
        own = {name: f.shape for name, f in self.list_fields().items()}
        return {**own, "weight_sum": (), "count": (), "invalid": ()}

    # -- the metric ----------------------------------------------------------------------
    def list_values(self, sel: Selection) -> ListOutput:
        """Per-list values of one batch (see :class:`ListOutput`)."""
        raise NotImplementedError

    # -- helpers for list_values --------------------------------------------------------
    def cut(self, sel: Selection, cum: Array) -> Array:
        """Columns of a cumulative ``(B, K)`` array at every ``k`` (clipped to ``K``)."""
        if len(self.top_k) == 1:
            k = min(self.top_k[0], sel.k)
            return cum[:, k - 1 : k]
        return sel.ops.stack([cum[:, min(k, sel.k) - 1] for k in self.top_k], axis=1)

    def cut_weights(self, sel: Selection, w: Array) -> Array:
        """``(K, len(top_k))``: the weights ``w`` ``(K,)`` of the ranks, truncated after each
        ``k`` (clipped to ``K``), so ``x @ cut_weights`` is ``sum_{j <= k} x[:, j] w[j]`` at
        every ``k``: one matrix product where a product, a cumulative sum and a cut are three
        passes over ``(B, K)`` (most of the cost with whole lists)."""
        ops, pos = sel.ops, sel.positions
        ks = ops.asarray([min(k, sel.k) for k in self.top_k], pos, pos.dtype)
        return ops.where(pos[:, None] <= ks[None, :], ops.cast(w, pos.dtype)[:, None], 0.0)

    def is_relevant(self, sel: Selection, labels: Array) -> Array:
        """0/1 relevance of ``labels`` (``>= t``, or ``> 0`` without a threshold)."""
        t = self.conventions.relevance_threshold
        return sel.ops.cast(labels > 0 if t is None else labels >= t, sel.positions.dtype)

    def count_relevant(self, sel: Selection) -> Array:
        """``R`` per list: the number of relevant items, one pass over the labels."""
        t = self.conventions.relevance_threshold
        return sel.once(
            "relevant",
            lambda: sel.ops.count_relevant(
                sel.item_labels, 0.0 if t is None else t, t is None, sel.full_valid, sel.positions.dtype,
                sel.ctx.workspace,
            ),
            t,
        )  # fmt: skip

    @staticmethod
    def divide(sel: Selection, num: Array, den: Array) -> Array:
        """``num / den``, 0 where ``den`` is 0."""
        return divided(sel.ops, num, den)

    # -- one batch -----------------------------------------------------------------------
    @property
    def random_ties(self) -> bool:
        return self.conventions.ties == "random"

    def runtime(self, generator: Any = None) -> Runtime:
        """What an instance of this metric owns across updates (workspace, tie generator)."""
        return Runtime(self.random_ties, self.conventions.seed, generator)

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        """A context for one call outside an instance (a fresh generator and workspace)."""
        return self.runtime().context(like, ops)

    def depth(self, ctx: Context, batch: ListBatch, shared: BatchShared) -> int:
        """How many ranked items of each list this metric reads on this batch (clipped to the
        list by :meth:`selection`): its largest ``k``. A metric whose depth depends on the
        batch may compute it from the batch, keeping what it computed in ``shared`` (the
        selection's :attr:`Selection.shared`)."""
        return self.top_k[-1]

    def outputs(self, sel: Selection, invalid: Array | None) -> ListOutput:
        """:meth:`list_values` of a selection (which may reach past this metric's largest
        ``k``: a collection selects once for all its metrics) with what the reducer reads:
        ``counted`` (the empty policy; never a list without an item), the list ``weights``
        (None: all 1) and ``invalid``: :meth:`weighed` of :meth:`list_outputs` (where there is
        anything to weigh: :attr:`_weighs`)."""
        out = self.list_outputs(sel, invalid)
        return self.weighed(sel.ops, out, sel.batch_item_weights is not None) if self._weighs else out

    @cached_property
    def _weighs(self) -> bool:
        """Whether :meth:`weighed` changes an output: keras-rs weighting, or a kernel of its own
        :meth:`weighed` (one call fewer per update elsewhere)."""
        return self.conventions.weighting == "keras_rs" or type(self).weighed is not ListDefinition.weighed

    def list_outputs(self, sel: Selection, invalid: Array | None) -> ListOutput:
        """The part of :meth:`outputs` computed list by list (so block by block of rows):
        :meth:`list_values`, ``counted``, ``listed``, the per-list ``weights`` as given,
        ``invalid``, the empty policy's zeros and the chance terms."""
        conv, ops = self.conventions, sel.ops
        out = self.list_values(sel)
        counted = out.relevant if conv.empty == "skip" else ops.ones_bool(out.relevant)
        listed = None
        if sel.in_list is not None:  # a list with no item (all masked) is not a list: never counted
            listed = sel.in_list[:, 0] > 0
            counted = counted & listed
        values = out.values
        if conv.empty == "zero" and conv.negative_labels == "keep":
            # a list without a relevant item scores 0, a DCG of negative labels' gains too (with
            # keras-rs's conventions negative labels are padding, and a list keeps the value
            # keras-rs gives it, whatever its gain of 0)
            values = ops.where(out.relevant[:, None], values, 0.0)
        if self._chance:
            out.expected, out.variance, out.best = chance_terms(self, sel)
        out.values, out.counted, out.weights, out.invalid = values, counted, sel.weights, invalid
        out.listed = listed
        return out

    def weighed(self, ops: Ops, out: ListOutput, item_weighted: bool) -> ListOutput:
        """The part of :meth:`outputs` read over the batch's lists (after the blocks' outputs
        are joined): under keras-rs weighting the list weights (:meth:`list_weights`, a mean
        over the batch's lists) and the division of values weighted by the items
        (``item_weighted``: the batch has per-item weights); else ``out`` as it is."""
        if self.conventions.weighting != "keras_rs":
            return out
        w = self.list_weights(ops, out)
        if self.weighted_values and item_weighted:  # keras-rs divides it
            out.values = divided(ops, out.values, w[:, None])
            if self._chance:  # the same division (squared for the variance)
                out.expected = divided(ops, out.expected, w[:, None])
                out.variance = divided(ops, out.variance, (w * w)[:, None])
                out.best = divided(ops, out.best, w[:, None])
        out.weights = w
        return out

    def reduce(self, ops: Ops, out: ListOutput) -> dict[str, Array]:
        """The state fields' sums of one batch's per-list output (:func:`list_sums` of
        :meth:`list_fields`)."""
        return list_sums(ops, out, self._list_fields)

    @cached_property
    def _list_fields(self) -> dict[str, ListField]:
        """:meth:`list_fields`, made once (the settings it reads are fixed at construction)."""
        return self.list_fields()

    def list_weights(self, ops: Ops, out: ListOutput) -> Array:
        """Per-list weights ``(B,)`` collapsed from the item weights as keras-rs's
        ``get_list_weights`` does, within one batch (``out`` its lists' :meth:`list_outputs`,
        ``out.weights`` the per-list weights as given): a list with no item of positive weight
        gets 0; a list with relevance gets ``sum_j W_ij R_ij / sum_j R_ij``; a list without
        relevance gets the mean of those over the batch's lists having both (1.0 when none
        has). Lists with bad data never enter that mean."""
        given, invalid = out.weights, out.invalid
        relevance = out.relevance if out.relevance is not None else ops.cast(out.relevant, out.values.dtype)
        rel_pos = relevance > 0
        if out.weighted_relevance is not None:
            plw = divided(ops, out.weighted_relevance, relevance)
            if given is not None:
                plw = plw * given
        else:
            plw = ops.where(rel_pos, 1.0 if given is None else given, 0.0 * relevance)
        w_pos = ops.ones_bool(rel_pos) if out.listed is None else out.listed
        if given is not None:
            w_pos = w_pos & (given > 0)
        if invalid is not None:
            w_pos = w_pos & ~invalid
            plw = ops.where(invalid, 0.0, plw)
        both = ops.cast(w_pos & rel_pos, plw.dtype)
        n_both = ops.sum(both)
        avg = ops.where(n_both > 0, ops.sum(plw) / ops.where(n_both > 0, n_both, 1.0), 1.0)
        return ops.where(w_pos, ops.where(rel_pos, plw, avg), 0.0)

    def compute(self, sums: Mapping[str, Any], xp: Any = np) -> dict[str, Array]:
        """``{"value": value_sum / weight_sum}`` (0 before any list; NaN while ``invalid``
        lists were counted), elementwise on ``xp`` (numpy or ``keras.ops``). A subclass with
        ``quantities`` adds one entry per quantity.

        With a ``confidence`` level, also ``stderr`` (the square root of
        :func:`~rankstream.core.uncertainty.weighted_variance_of_mean`; NaN below two lists),
        ``ci_low`` and ``ci_high`` (``value -+ t * stderr``, ``t`` Student's two-sided critical
        value with ``count - 1`` degrees of freedom: scipy's on numpy,
        :func:`~rankstream.core.uncertainty.t_quantile_xp` on ``keras.ops``, where the count may
        be traced) and ``count`` (the lists counted), each of the value's shape."""
        w = sums["weight_sum"]
        safe = xp.where(w > 0, w, 1.0)
        value = xp.where(w > 0, sums["value_sum"] / safe, 0.0 * sums["value_sum"])
        value = xp.where(sums["invalid"] > 0, float("nan"), value)
        out = {"value": value}
        if self._confidence is not None:
            out.update(self._interval(sums, value, xp))
        if self._chance:
            out.update(chance_quantities(sums, value, xp))
        return out

    def _interval(self, sums: Mapping[str, Any], value: Array, xp: Any) -> dict[str, Array]:
        """``stderr``, ``ci_low``, ``ci_high`` and ``count`` of :meth:`compute`."""
        w = sums["weight_sum"]
        n = sums["count"]
        var = weighted_variance_of_mean(n, w, sums["w2_sum"], sums["w2v_sum"], sums["w2v2_sum"], value, xp)
        stderr = xp.sqrt(var)
        critical = (
            t_quantile(self._confidence, n - 1.0)
            if xp is np
            else t_quantile_xp(self._confidence, n - 1.0, xp)
        )
        low, high = interval(value, stderr, critical)
        return {"stderr": stderr, "ci_low": low, "ci_high": high, "count": n + 0.0 * value}

    def select(self, values: Mapping[str, Array]) -> Any:
        """What the metric reports: the value at every ``k`` (ordered by ``top_k``); with
        ``quantities``, ``{"value": ..., q: ...}`` of the same shape."""
        if not self.quantities:
            return values["value"]
        return {q: values[q] for q in ("value", *self.quantities)}

    def finalize(self, values: Mapping[str, Any]) -> Any:
        """The selected value as Python floats, one per ``k`` (:meth:`to_python`); with
        ``quantities``, ``{"value": ..., q: ...}`` of those."""
        selected = self.select(values)
        if not self.quantities:
            return self.to_python(selected)
        return {q: self.to_python(v) for q, v in selected.items()}

    def to_python(self, value: Any) -> Any:
        """One reported array as Python floats, one per ``k``."""
        return [float(v) for v in np.asarray(value).reshape(-1)]

    def check_computable(self, sums: Mapping[str, np.ndarray], name: str | None = None) -> None:
        """Raise when the sums give no number (see :func:`~rankstream.core.state.check_sums`)."""
        bad = "NaN scores among their items, a NaN or infinite label, or a bad sample_weight"
        what = "usable list;lists seen with a relevant item and a positive weight"
        check_sums(sums, name or type(self).__name__, "weight_sum", "list", bad, what)

    def __repr__(self) -> str:
        level = "" if self._confidence is None else f", confidence={self._confidence}"
        level += ", chance=True" if self._chance else ""
        return f"{type(self).__name__}(top_k={self.top_k}, {self.conventions}{level})"


explicit_signature(ListDefinition, ListDefinition)
