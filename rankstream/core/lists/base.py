"""The list metrics' base: one top-k selection per batch, per-list values, three sums.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops, Runtime, get_ops
from rankstream.core.inputs import (
    ListBatch,
    check_list_values,
    check_positive_ints,
    list_batch,
    list_values_ok,
    warn_swapped_inputs,
)
from rankstream.core.lists import selection as selection_module
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
from rankstream.core.lists.selection import (
    BLOCK_TILE_SHARE,
    HOST_BLOCKS,
    Selection,
    join_rows,
    positions,
    row_slices,
    selection_blocks,
)
from rankstream.core.state import check_sums, join_flat, zero_sums
from rankstream.core.topk import top_ranked
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


@dataclass
class ListOutput:
    """The per-list output of one batch, one object from the metric to the reducer.

    :meth:`ListKernel.list_values` fills ``values`` ``(B, len(top_k))``; ``relevant`` ``(B,)``
    bool (the list holds a relevant item: the empty policy); ``relevance`` ``(B,)``, the sum
    of the relevance keras-rs weighs lists by (None: ``relevant``), and ``weighted_relevance``
    ``(B,)`` its sum weighted by the item weights (per-item weights). :meth:`ListKernel.outputs`
    adds what the reducer needs: ``counted`` ``(B,)`` bool (the lists that enter the sums),
    ``weights`` ``(B,)`` (the list weights; None: all 1) and ``invalid`` ``(B,)`` (lists with
    bad data; None where values were read back) and ``listed`` ``(B,)`` bool (the list holds an
    item; None: every list does). A kernel may return a subclass carrying more per-list arrays
    (an expectation, a second value) for its :meth:`ListKernel.list_fields`: every field is
    ``(B, ...)`` or None, so the outputs of blocks of rows join along the rows
    (:func:`joined_outputs`)."""

    values: Array
    relevant: Array
    relevance: Array | None = None
    weighted_relevance: Array | None = None
    counted: Array | None = None
    weights: Array | None = None
    invalid: Array | None = None
    listed: Array | None = None
    #: with ``chance=True``: per list ``(B, len(top_k))`` the expectation and variance under a
    #: uniformly random ranking and the value under the ideal ranking (:meth:`ListKernel.outputs`)
    expected: Array | None = None
    variance: Array | None = None
    best: Array | None = None


def joined_outputs(ops: Ops, parts: list[ListOutput]) -> ListOutput:
    """The per-list outputs of consecutive blocks of rows joined into the batch's (every
    field concatenated along the rows; the small ``(B, ...)`` arrays only)."""
    names = [f.name for f in fields(parts[0])]
    joined = join_rows(ops, [[getattr(p, name) for name in names] for p in parts])
    return type(parts[0])(**dict(zip(names, joined, strict=True)))


def _exported_output(ops: Ops, out: ListOutput) -> ListOutput:
    """A per-list output computed on the host ops with its arrays as the caller's."""
    arrays = {f.name: getattr(out, f.name) for f in fields(out)}
    return replace(out, **{name: ops.export(v) for name, v in arrays.items() if v is not None})


def _exported_sums(ops: Ops, sums: Mapping[str, Array]) -> dict[str, Array]:
    """State sums computed on the host ops as the caller's arrays."""
    return {name: ops.export(value) for name, value in sums.items()}


def _batch_arrays(batch: ListBatch) -> tuple[Any, ...]:
    """The arrays of a batch, in :class:`ListBatch`'s order after its ops."""
    return batch.scores, batch.labels, batch.valid, batch.weights, batch.item_weights


def divided(ops: Ops, num: Array, den: Array) -> Array:
    """``num / den``, 0 where ``den`` is 0."""
    pos = den > 0
    return ops.where(pos, num / ops.where(pos, den, 1.0), 0.0)


def list_values_of(out: ListOutput) -> Array:
    """The per-list values of an output (the term of ``value_sum``)."""
    return out.values


def squared_list_values_of(out: ListOutput) -> Array:
    """The squared per-list values of an output (the term of ``w2v2_sum``)."""
    return out.values * out.values


def list_ones_of(out: ListOutput) -> Array:
    """1 per list ``(B,)`` (the term of ``w2_sum``)."""
    return out.values[:, 0] * 0.0 + 1.0


#: what a list metric with a confidence level reports besides its value
INTERVAL_QUANTITIES = ("stderr", "ci_low", "ci_high", "count")


@dataclass(frozen=True)
class ListField:
    """A state field summed over the counted lists: ``sum_i w_i^power term(out)[i]``.

    Attributes:
        shape: the field's shape (``(len(top_k),)`` for one number per ``k``; ``()`` for one
            per list).
        term: the per-list ``(B, *shape)`` array of a :class:`ListOutput`.
        power: how the list weight ``w_i`` enters: 1 (a weighted sum, ``value_sum``), 2 (the
            squared weights of a standard error's variance) or 0 (unweighted, over the counted
            lists); unit weights give every power the same sum.
    """

    shape: tuple[int, ...]
    term: Callable[[ListOutput], Array]
    power: int = 1


def call_user(ops: Ops, fn: Any, x: Array) -> Array:
    """``fn(x)`` for a user's callable (a gain, a discount), which may know only the caller's
    arrays (a torch or ``keras.ops`` function): on ops computing on other arrays than the
    caller's (the host ops' numpy views) it gets the caller's arrays, and its result comes back.
    The result is cast to ``x``'s dtype (the working dtype), whatever dtype the callable
    returns (float16/32/64, integers, a Python number): the one place a user's callable's
    result enters the arithmetic, so no backend mixes float32 with float64."""
    given = ops.export(x)
    return ops.cast(ops.asarray(fn(given), x), x.dtype)


def quiet() -> Any:
    """Silence numpy's floating-point warnings in a kernel's arithmetic (as torch and Keras
    are silent): bad data is found by explicit checks, which raise or count it."""
    return np.errstate(all="ignore")


def exported(ops: Ops, sums: Mapping[str, Array], flat: Mapping[str, tuple[int, ...]] | None = None) -> Any:
    """The sums as the caller's arrays (``ops.export``: torch tensors from the host ops); with
    ``flat`` (the fields' shapes, in order), the fields joined into one 1-D array first
    (:func:`~rankstream.core.state.join_flat`): one export, where each field's costs a call."""
    if flat is not None:
        return ops.export(join_flat(ops, sums, flat))
    return {name: ops.export(value) for name, value in sums.items()}


def checked_values(sel: Selection, negative_labels: str, batch: ListBatch) -> Array | None:
    """:func:`~rankstream.core.inputs.check_list_values` of a selection, skipped where the
    values were read back, no score is NaN and the labels and weights are fine: as the
    ranking's one read found (``list_values_ok`` of every label, masked or not), or, under a
    mask, as a second look at the labels of the lists' items finds (row sums over the mask,
    tile by tile). The full check reads the masked labels (:attr:`Selection.full_labels`, a
    full-size copy under a mask): it runs only where something is bad. ``batch``: the whole
    batch (``sel`` may select a block of its rows), where an error locates NaN scores."""
    if sel.nan_rows is None and not sel.has_nan:
        if sel.values_ok:
            return None
        if sel.full_valid is not None:
            ops = sel.ops
            ws = sel.ctx.workspace
            sums = ops.masked_row_sums(sel.item_labels, sel.full_valid, ws)
            ok = list_values_ok(ops, sums, sel.weights, sel.batch_item_weights, sel.full_valid, ws)
            if ops.host_bools(ok)[0]:
                return None
    return check_list_values(sel, batch, negative_labels)


#: per number of a field's dimensions, the index that turns a (B,) array into (B, 1, ...)
_ROWS = [(slice(None),) + (None,) * n for n in range(8)]


def list_sums(ops: Ops, out: ListOutput, list_fields: Mapping[str, ListField]) -> dict[str, Array]:
    """The fields' sums of one batch: every :class:`ListField` of ``list_fields`` over the
    counted lists of ``out`` (lists with bad data left out), then ``weight_sum``, ``count``
    and ``invalid``."""
    invalid, weights = out.invalid, out.weights
    counted = out.counted if invalid is None else out.counted & ~invalid
    if weights is None:  # 0/1 weights: the terms are weighted once masked, the weights' sum is the count
        wc = ops.cast(counted, out.values.dtype)
        weight_sum = ops.sum(wc)
        count = weight_sum
    else:
        wc = ops.where(counted, weights, 0.0)
        weight_sum = ops.sum(wc)
        count = ops.sum(ops.cast(wc > 0, wc.dtype))
    sums = {}
    for name, f in list_fields.items():
        rows = _ROWS[len(f.shape)]  # (B,) -> (B, 1, ...) against the term
        term = ops.where(counted[rows], f.term(out), 0.0)
        if weights is not None and f.power:
            term = term * (wc if f.power == 1 else wc**f.power)[rows]
        sums[name] = ops.sum(term, axis=0)
    sums["weight_sum"], sums["count"] = weight_sum, count
    sums["invalid"] = weight_sum * 0.0 if invalid is None else ops.sum(ops.cast(invalid, wc.dtype))
    return sums


class ListKernel:
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
        explicit_signature(cls, ListKernel)

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
            ("relevant", t),
            lambda: sel.ops.count_relevant(
                sel.item_labels, 0.0 if t is None else t, t is None, sel.full_valid, sel.positions.dtype,
                sel.ctx.workspace,
            ),
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

    def depth(self, ctx: Context, batch: ListBatch, shared: dict[Any, Any]) -> int:
        """How many ranked items of each list this metric reads on this batch (clipped to the
        list by :meth:`selection`): its largest ``k``. A metric whose depth depends on the
        batch may compute it from the batch, keeping what it computed in ``shared`` (the
        selection's :attr:`Selection.shared`)."""
        return self.top_k[-1]

    def selection(
        self, ctx: Context, batch: ListBatch, k: int | None = None, shared: dict[Any, Any] | None = None
    ) -> Selection:
        """The top ``k`` (default: :meth:`depth`) of every list, once per batch. Items not in
        the list never count, whatever their label: the ranked labels are 0 there, and the
        passes over the whole batch read the labels with the mask (no masked copy)."""
        ops = ctx.ops
        shared = {} if shared is None else shared
        scores, labels, valid = batch.scores, batch.labels, batch.valid
        n = batch.list_size
        k = min(k or self.depth(ctx, batch, shared), n)
        acc = ops.acc_dtype(scores)
        # where values are read back, the value checks ride on the ranking's one read
        # (a finite sum of every label, masked or not, clears the labels of the lists too;
        # else :func:`checked_values` looks again at the items of the lists)
        also = None
        if ctx.read_back:
            also = list_values_ok(ops, labels, batch.weights, batch.item_weights, valid, ctx.workspace)
        # the kernels read the labels and membership at each rank (and item weights, when given)
        # (not where a kernel reads the ranked ids: its depth() set shared["ranked_ids"])
        key = labels if batch.item_weights is None and not shared.get("ranked_ids") else None
        ranked = top_ranked(ctx, scores, k, valid=valid, ties=self.conventions.ties, also=also, labels=key)
        idx = ranked.indices
        lab_sel = ops.cast(ops.take_along(labels, idx), acc)
        in_list = None
        if valid is not None:
            member = ops.take_along(valid, idx)
            in_list = ops.cast(member, acc)
            lab_sel = ops.where(member, lab_sel, 0.0)  # whatever a masked item holds (NaN too)
        w_sel = None
        if batch.item_weights is not None:  # 0 where the ranked item is not in the list
            w_sel = ops.cast(ops.take_along(batch.item_weights, idx), acc)
            w_sel = w_sel if valid is None else ops.where(member, w_sel, 0.0)
        groups = None
        if ranked.values is not None:  # ties="expected": the tie groups of the selection
            from rankstream.core.lists.ties import tie_groups

            groups = tie_groups(
                ctx, ranked.values, in_list, scores, n, acc, ranked.extends, ranked.extend_rows
            )
        return Selection(
            ctx=ctx,
            k=k,
            labels=lab_sel,
            in_list=in_list,
            positions=positions(ctx, k, scores, acc),
            weights=batch.weights,
            n=n,
            item_labels=labels,
            full_valid=valid,
            item_weights=w_sel,
            batch_item_weights=batch.item_weights,
            has_nan=ranked.has_nan,
            nan_rows=ranked.nan_rows,
            values_ok=ranked.also_ok,
            shared=shared,
            ties=groups,
            indices=idx if shared.get("ranked_ids") else None,
        )

    def read_batch(
        self, ctx: Context, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> ListBatch:
        """The validated batch under this metric's conventions."""
        conv = self.conventions
        keras_rs = conv.weighting == "keras_rs"
        batch = list_batch(
            y_pred, y, mask, sample_weight, ops=ctx.ops, item_weights=keras_rs,
            negative_labels=conv.negative_labels, read_back=ctx.read_back,
        )  # fmt: skip
        if ctx.read_back:  # values on the host already: are the arguments swapped? (once per instance)
            seen = ctx.workspace.get("swapped_inputs", None, dict)
            if not seen.get("decided"):
                seen["decided"] = warn_swapped_inputs(ctx.ops, batch)
        return batch

    def evaluate(
        self, ctx: Context, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> ListOutput:
        """The per-list output of one batch (:meth:`outputs`), with ``invalid`` the lists with
        bad data (None where the values were read back: bad data raises ``ValueError`` then,
        see :func:`~rankstream.core.inputs.check_list_values`)."""
        return select_outputs(ctx, [self], self.read_batch(ctx, y_pred, y, mask, sample_weight))[0]

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
        return self.conventions.weighting == "keras_rs" or type(self).weighed is not ListKernel.weighed

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

    def batch_sums(
        self, ctx: Context | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None,
        flat: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Any:  # fmt: skip
        """The state fields' sums of one batch (on the input's device); with ``flat`` (the
        fields' shapes, in order) joined into one 1-D array (:func:`exported`)."""
        ctx = ctx or self.context(y_pred, get_ops(y_pred, y, mask, sample_weight))
        ctx, (y_pred, y, mask, sample_weight) = ctx.on_host(y_pred, y, mask, sample_weight)
        with quiet():
            sums = select_sums(ctx, [self], self.read_batch(ctx, y_pred, y, mask, sample_weight))[0]
        return exported(ctx.ops, sums, flat)

    def per_list(
        self, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ctx: Context | None = None
    ) -> tuple[Array, Array, Array]:
        """Per-list values ``(B, len(top_k))``, whether each list is counted ``(B,)`` bool,
        and the list weights ``(B,)``. Lists flagged invalid (possible only where values
        cannot be read back) get NaN values."""
        ctx = ctx or self.context(y_pred, get_ops(y_pred, y, mask, sample_weight))
        ctx, (y_pred, y, mask, sample_weight) = ctx.on_host(y_pred, y, mask, sample_weight)
        ops = ctx.ops
        with quiet():
            out = self.evaluate(ctx, y_pred, y, mask, sample_weight)
            values, weights = out.values, out.weights
            if out.invalid is not None:
                values = ops.where(out.invalid[:, None], float("nan"), values)
            if weights is None:
                weights = ops.zeros((values.shape[0],), values, values.dtype) + 1.0
        return ops.export(values), ops.export(out.counted), ops.export(weights)

    # -- from the sums -------------------------------------------------------------------
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


explicit_signature(ListKernel, ListKernel)


def _depth(ctx: Context, kernels: list[ListKernel], batch: ListBatch, shared: dict[Any, Any]) -> int:
    """The deepest of the kernels' depths on ``batch``."""
    if len(kernels) == 1:
        return kernels[0].depth(ctx, batch, shared)
    return max(kernel.depth(ctx, batch, shared) for kernel in kernels)


def select_outputs(ctx: Context, kernels: list[ListKernel], batch: ListBatch) -> list[ListOutput]:
    """Every kernel's :meth:`ListKernel.outputs` of one batch, read from one selection at the
    deepest of their depths (the kernels read the batch alike: the first one selects).

    Where values are read back and that selection would be large (:func:`selection_blocks`:
    ``B x K`` past an 8th of the scores' bytes, at trec_eval's depth of 1,000 or a whole-list
    metric), the rows go in blocks (:func:`_by_blocks`): the temporaries are those of one
    block's selection, and the values those of the one selection, summed in another order."""
    if batch.batch_size == 0:  # no list: nothing to read
        return [_no_lists(ctx.ops, kernel, batch) for kernel in kernels]
    shared: dict[Any, Any] = {}
    k, blocks = _blocks_of(ctx, kernels, batch, shared)
    if blocks is not None:
        return _by_blocks(ctx, kernels, batch, blocks, reduce=False)
    return _outputs(ctx, kernels, batch, k, shared)


def select_sums(ctx: Context, kernels: list[ListKernel], batch: ListBatch) -> list[dict[str, Array]]:
    """Every kernel's state sums of one batch (:meth:`ListKernel.reduce` of
    :func:`select_outputs`). Where the batch goes in blocks of rows and no kernel reads over
    the batch's lists (:meth:`ListKernel.weighed`), each block's per-list outputs are reduced
    as they come and the blocks' sums added: the per-list arrays held are one block's. (A
    kernel's are about 18 bytes a list, its values, relevance and flags: in lists of 100 items,
    with a few kernels, about the scores' own size once joined over the batch.)"""
    if batch.batch_size == 0:  # no list: nothing to read, the sums are zeros (an update's no-op)
        return [zero_sums(ctx.ops, kernel.fields, batch.scores) for kernel in kernels]
    shared: dict[Any, Any] = {}
    k, blocks = _blocks_of(ctx, kernels, batch, shared)
    if blocks is not None and not any(kernel._weighs for kernel in kernels):
        return _by_blocks(ctx, kernels, batch, blocks, reduce=True)
    if blocks is not None:
        outs = _by_blocks(ctx, kernels, batch, blocks, reduce=False)
    else:
        outs = _outputs(ctx, kernels, batch, k, shared)
    return [kernel.reduce(ctx.ops, out) for kernel, out in zip(kernels, outs, strict=True)]


def _no_lists(ops: Ops, kernel: ListKernel, batch: ListBatch) -> ListOutput:
    """The per-list output of a batch of no list: every per-list array with 0 rows."""
    values = ops.zeros((0, len(kernel.top_k)), batch.scores, ops.acc_dtype(batch.scores))
    none = values[:, 0] > 0
    return ListOutput(values, none, counted=none, weights=batch.weights)


def _blocks_of(
    ctx: Context, kernels: list[ListKernel], batch: ListBatch, shared: dict[Any, Any]
) -> tuple[int, list[slice] | None]:
    """The depth of the kernels on ``batch`` and the blocks of rows it is selected in (None:
    in one piece; :func:`selection_blocks`)."""
    first = kernels[0]
    k = first.depth(ctx, batch, shared) if len(kernels) == 1 else _depth(ctx, kernels, batch, shared)
    if ctx.read_back and int(batch.scores.shape[0]) * k >= selection_module.SELECT_BLOCKS_FROM:  # else one
        return k, selection_blocks(ctx, batch, k, _selection_bytes(kernels, batch.valid is not None))
    return k, None


def _outputs(
    ctx: Context, kernels: list[ListKernel], batch: ListBatch, k: int, shared: dict[Any, Any]
) -> list[ListOutput]:
    """Every kernel's :meth:`ListKernel.outputs` of the batch in one piece."""
    first = kernels[0]
    sel = first.selection(ctx, batch, k=k, shared=shared)
    invalid = checked_values(sel, first.conventions.negative_labels, batch)
    return [kernel.outputs(sel, invalid) for kernel in kernels]


def _selection_bytes(kernels: list[ListKernel], masked: bool) -> int:
    """Bytes per ranked item the kernels' selection and arrays hold together (an upper bound
    of the measured ones; see :attr:`ListKernel.ranked_bytes`): the largest kernel's, 4 more
    per other kernel (each lets its arrays go before the next runs), 20 more with a mask (the
    membership and its cast, the masked ideal ranking)."""
    most = max(kernel.ranked_bytes for kernel in kernels)
    return most + 4 * (len(kernels) - 1) + (20 if masked else 0)


def _by_blocks(
    ctx: Context, kernels: list[ListKernel], batch: ListBatch, blocks: list[slice], reduce: bool
) -> Any:
    """:func:`select_outputs` by blocks of rows: each block is selected at its own depth (its
    largest ``R`` for R-precision; what the depths compute is the block's) and gives its
    per-list outputs (:meth:`ListKernel.list_outputs`); the blocks' outputs are joined
    (``(B, ...)`` arrays), and the part read over the batch's lists (:meth:`ListKernel.weighed`:
    keras-rs's list weights) follows. ``reduce`` (no kernel weighs): each block's outputs
    reduced to the state sums instead, and the blocks' sums added (:func:`select_sums`)."""
    first, ops = kernels[0], ctx.ops
    if first.conventions.ties == "random":  # one column permutation for the batch's blocks
        ctx = replace(ctx, perm=[None])
    # blocks small enough for the host ops (numpy views) take them, as a small batch does: a
    # call there costs a few microseconds less, and a block makes about a hundred; only blocks
    # of a 16th of the rows at most, whose numpy temporaries (a few of the block's size) stay
    # far inside the quarter of the scores an update may hold. A batch already cut in 8 blocks
    # or more is cut in 16 (measured: MAP@1000 at 256 x 5,000, 10 blocks on torch 1.06x 16 on
    # the host)
    on, b = ctx, int(batch.scores.shape[0])
    if HOST_BLOCKS // 2 <= len(blocks) < HOST_BLOCKS and b >= HOST_BLOCKS:
        blocks = row_slices(b, -(-b // HOST_BLOCKS))
    if HOST_BLOCKS * (blocks[0].stop - blocks[0].start) <= b:
        on, _ = ctx.on_host(*_batch_arrays(batch.rows(blocks[0])))
    ws, cap = ctx.workspace, ctx.workspace.cap
    ws.cap = max(int(batch.scores.shape[0]) * int(batch.scores.shape[1]) // BLOCK_TILE_SHARE, 1)
    try:
        outs = _blocks_joined(ctx, on, kernels, batch, blocks, reduce)
    finally:
        ws.cap = cap
    if reduce:
        return outs if on is ctx else [_exported_sums(on.ops, sums) for sums in outs]
    if on is not ctx:  # the joined outputs back as the batch's arrays
        outs = [_exported_output(on.ops, out) for out in outs]
    item_weighted = batch.item_weights is not None
    return [kernel.weighed(ops, out, item_weighted) for kernel, out in zip(kernels, outs, strict=True)]


def _blocks_joined(
    ctx: Context, on: Context, kernels: list[ListKernel], batch: ListBatch, blocks: list[slice], reduce: bool
) -> list[Any]:
    """The per-list outputs of each block of rows, selected on the ops of ``on`` (the batch's
    own or the host's), joined along the rows; ``reduce``: their state sums, added."""
    first = kernels[0]
    outs: list[Any] = []
    for rows in blocks:
        block, shared = batch.rows(rows), {}
        if on is not ctx:
            held = (None if a is None else on.ops.asarray(a) for a in _batch_arrays(block))
            block = ListBatch(on.ops, *held)
        sel = first.selection(on, block, k=_depth(on, kernels, block, shared), shared=shared)
        invalid = checked_values(sel, first.conventions.negative_labels, batch)
        part = [kernel.list_outputs(sel, invalid) for kernel in kernels]
        del sel
        if reduce:
            sums = [kernel.reduce(on.ops, out) for kernel, out in zip(kernels, part, strict=True)]
            del part
            outs = [{n: o[n] + s[n] for n in o} for o, s in zip(outs, sums, strict=True)] if outs else sums
            continue
        # joined block by block: a block's outputs may be views of its (rows, K) arrays (a
        # column of the ideal gains), which the copy of a join lets go before the next block
        outs = [joined_outputs(on.ops, [o, p]) for o, p in zip(outs, part, strict=True)] if outs else part
    return outs
