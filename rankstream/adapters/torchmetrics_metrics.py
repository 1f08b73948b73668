"""``torchmetrics.Metric`` subclasses over the core list kernels (:mod:`rankstream.torchmetrics`).

Each metric takes torchmetrics' flat input, ``update(preds, target, indexes)`` (any shape, one
shape for the three; flattened), groups the items into lists by query id on the input's device
(:func:`~rankstream.core.grouping.group_by_query`) and evaluates every list with a core kernel,
or (precision, recall, MAP, MRR, hit rate, nDCG, with few relevant items per query) ranks the
relevant items by comparison (:mod:`~rankstream.adapters.torchmetrics_flat`: the same values;
the checked, grouped batch shared by the metrics updated with the same tensors). The classes
are derived from the rows of :mod:`rankstream.core.lists.table` that have a torchmetrics
presentation (:class:`~rankstream.core.lists.table.RetrievalPresentation`). Its state is sums
(``dist_reduce_fx="sum"``) and a running maximum and minimum (``"max"``/``"min"``) of the
per-query values, so DDP, ``MetricCollection``, Lightning's ``self.log`` and ``torch.save`` of
``state_dict()`` work as for any torchmetrics metric:

* ``value_sum = sum_q w_q v_q`` and ``weight_sum = sum_q w_q`` over the queries with a relevant
  item (``w_q = 1``; GAUC: the query's number of items),
* ``empty_weight = sum_q w_q`` and ``empty_count`` over the queries without one (torchmetrics'
  "empty target": ``target.sum() == 0``; AUC and GAUC: a query missing either class),
* ``value_max``, ``value_min``: the extremes of ``v_q`` over the queries with a relevant item.

``compute()`` applies ``empty_target_action`` and ``aggregation`` to these: with ``"mean"``,
``"neg"`` gives ``value_sum / (weight_sum + empty_weight)``, ``"pos"``
``(value_sum + empty_weight) / (weight_sum + empty_weight)``, ``"skip"``
``value_sum / weight_sum``, ``"error"`` raises when ``empty_count > 0``; ``"max"``/``"min"`` take
the extreme of ``value_max``/``value_min`` and, unless skipped, 0 (``"neg"``) or 1 (``"pos"``)
for the empty queries; no query at all gives 0, as torchmetrics. These conventions have no core
option (the kernels run with ``empty="zero"`` and the adapter keeps the empty queries apart).

``query_mode`` (:data:`~rankstream.core.grouping.QUERY_MODES`): ``"contiguous"`` (the default:
a query's items come together, in any order within an update, and the query of an update's
last item may continue into the next; that open query is kept, as list states with
``dist_reduce_fx="cat"``, and evaluated when it closes or at ``compute()``; the ids of the
closed queries are kept too, ``closed_ids``, so that an id coming back is a ``ValueError``
naming ``query_mode='any'``, and at ``compute()`` after a distributed sync an id counted by
two processes is one), ``"whole"`` (each ``update`` holds whole queries; constant state, no
check), ``"sorted"`` (ids sorted across updates; the one open query is kept) or ``"any"``
(every item is kept, as torchmetrics does, and evaluated at ``compute()``: this mode stores
the predictions).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torchmetrics import Metric

from rankstream.adapters.ignite_derive import derived_class, parameters
from rankstream.adapters.torchmetrics_flat import FlatQueries, checked_items, flat_queries, relevant_ranks
from rankstream.adapters.torchmetrics_queries import QueryModes
from rankstream.core import execution
from rankstream.core.grouping import check_query_mode, group_by_query
from rankstream.core.lists.base import WHOLE_LIST, ListKernel
from rankstream.core.lists.retrieved import RETRIEVED
from rankstream.core.lists.table import LIST_METRICS, ListMetricRow, RetrievalPresentation
from rankstream.core.relevant import per_list
from rankstream.core.state import kernel_config

EMPTY_TARGET_ACTIONS = ("neg", "pos", "skip", "error")
AGGREGATIONS = ("mean", "max", "min")
_SUMS = ("value_sum", "weight_sum", "empty_weight", "empty_count")


def _check_top_k(top_k: int | None) -> int | None:
    if top_k is not None and not (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    return top_k


class RetrievalListMetric(QueryModes, Metric):
    """The base of the adapter's metrics (see the module docstring). A subclass sets
    ``graded`` (targets other than 0/1 allowed), ``coded`` (the kernel reads labels coded
    0/1/2 for torchmetrics' non-positive scores, :mod:`~rankstream.adapters.torchmetrics_kernels`)
    ``both_classes`` (a query is empty unless it holds both classes) and ``ranked`` (the kernel
    reads the relevant items' counts where they are few, :meth:`flat_values`), and builds its
    kernel (with ``empty="zero"``) in ``__init__``."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    graded = False
    coded = False
    both_classes = False
    #: the per-query values come from the relevant items' counts where they are few
    #: (:meth:`flat_values`), else from the kernel over the padded lists
    ranked = False

    def __init__(
        self,
        kernel: ListKernel,
        *,
        empty_target_action: str,
        ignore_index: int | None,
        aggregation: str,
        query_mode: str,
        nonpositive_retrieved: bool,
        metric_args: dict[str, Any],
    ) -> None:
        super().__init__(**metric_args)
        if empty_target_action not in EMPTY_TARGET_ACTIONS:
            raise ValueError(
                f"empty_target_action must be one of {EMPTY_TARGET_ACTIONS}, got {empty_target_action!r}"
            )
        if ignore_index is not None and (not isinstance(ignore_index, int) or isinstance(ignore_index, bool)):
            raise ValueError(f"ignore_index must be an integer or None, got {ignore_index!r}")
        if aggregation not in AGGREGATIONS:
            hint = (
                ": a median of the per-query values needs every value (torchmetrics' own metric keeps "
                "them), and the streamed state keeps sums, a maximum and a minimum only"
                if aggregation == "median" or callable(aggregation)
                else ""
            )
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}{hint}")
        if not isinstance(nonpositive_retrieved, bool):
            raise TypeError(f"nonpositive_retrieved must be a bool, got {nonpositive_retrieved!r}")
        self.kernel = kernel
        self.empty_target_action = empty_target_action
        self.ignore_index = ignore_index
        self.aggregation = aggregation
        self.query_mode = check_query_mode(query_mode)
        self.nonpositive_retrieved = nonpositive_retrieved
        dt = torch.float64
        for name in _SUMS:
            self.add_state(name, default=torch.zeros((), dtype=dt), dist_reduce_fx="sum")
        self.add_state("value_max", default=torch.full((), -torch.inf, dtype=dt), dist_reduce_fx="max")
        self.add_state("value_min", default=torch.full((), torch.inf, dtype=dt), dist_reduce_fx="min")
        self._add_query_states()  # the open query's items, the closed ids (torchmetrics_queries)
        # MetricCollection's compute groups merge metrics whose states are equal after their
        # first update (one update then serves the group). Equal states mean equal inputs for
        # torchmetrics' own metrics, not for ours: two metrics' sums can agree on one batch (no
        # relevant item anywhere) and part later. A state named after the metric's identity (its
        # class, kernel and options) keeps apart metrics that are not the same metric.
        identity = f"identity_{self._identity()}"
        self.add_state(identity, default=torch.zeros((), dtype=dt), dist_reduce_fx="sum")

    def _identity(self) -> str:
        """A digest of what the metric computes: its class, kernel settings and options."""
        what = (
            type(self).__qualname__,
            kernel_config(self.kernel),
            self.empty_target_action,
            self.ignore_index,
            self.aggregation,
            self.query_mode,
            self.nonpositive_retrieved,
        )
        return hashlib.sha1(repr(what).encode()).hexdigest()[:16]

    # -- input ----------------------------------------------------------------------------
    def _flat(self, preds: Any, target: Any, indexes: Any) -> FlatQueries:
        """The checked flat items, ``ignore_index`` removed (shared with the other metrics
        updated with the same tensors: :func:`~rankstream.adapters.torchmetrics_flat.flat_queries`)."""
        if indexes is None:
            raise ValueError("indexes cannot be None: pass the query id of every item")
        for name, x in (("preds", preds), ("target", target), ("indexes", indexes)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if not (preds.shape == target.shape == indexes.shape):
            raise ValueError(
                "preds, target and indexes must have one shape, got "
                f"{tuple(preds.shape)}, {tuple(target.shape)} and {tuple(indexes.shape)}"
            )
        if indexes.dtype != torch.long:
            raise ValueError(f"indexes must be a tensor of long integers, got dtype {indexes.dtype}")
        if not preds.is_floating_point():
            raise ValueError(f"preds must be a floating point tensor, got dtype {preds.dtype}")
        if target.dtype not in (torch.bool, torch.int32, torch.long) and not target.is_floating_point():
            raise ValueError(
                f"target must be a tensor of booleans, integers or floats, got dtype {target.dtype}"
            )
        fq = flat_queries(
            (preds, target, indexes),
            self.ignore_index,
            lambda: checked_items(preds, target, indexes, self.ignore_index),
            self,
        )
        if fq.indexes.numel() == 0:  # no item: no value to check
            return fq
        if not self.graded and (bad := fq.bad_binary()) is not None:
            raise ValueError(f"target must hold binary values (0 or 1) for {type(self).__name__}, got {bad}")
        if self.graded and (low := fq.target_min()) < 0:
            raise ValueError(f"target must be >= 0, got {low}")
        return fq

    # -- one group of items ---------------------------------------------------------------
    def flat_values(self, fq: FlatQueries) -> torch.Tensor | None:
        """The per-query values ``(Q,)`` float64 from the relevant items' counts (the core's
        relevant-ranks producer, :func:`~rankstream.adapters.torchmetrics_flat.relevant_ranks`,
        with this metric's kernel), where the class reads them (``ranked``) and the relevant
        items are few (:meth:`FlatQueries.sparse`); None where the kernel evaluates the padded
        lists."""
        k = getattr(self, "top_k", None)
        if not self.ranked or not fq.sparse(False, k):
            return None
        labels = fq.sorted_items()[1]
        if self.coded:  # as the padded lists code them: 2 retrieved, 1 relevant scored <= 0
            p = fq.sorted_items()[0]
            code = RETRIEVED if self.nonpositive_retrieved else torch.where(p > 0, RETRIEVED, 1.0)
            labels = labels * code
        values = per_list(self.kernel, relevant_ranks(fq, k, labels))[:, 0]
        return torch.as_tensor(values, dtype=torch.float64, device=fq.preds.device)

    @property
    def _retrieved_only(self) -> bool:
        return self.coded and not self.nonpositive_retrieved

    def _stats(
        self, indexes: torch.Tensor, preds: torch.Tensor, target: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The state's terms of the queries of these items (each query whole)."""
        return self._stats_of(FlatQueries(indexes, preds, target))

    def _stats_of(self, fq: FlatQueries, keep: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The state's terms of the queries of ``fq`` (each whole), of those where ``keep``
        (bool ``(Q,)``, the rows of :meth:`FlatQueries.query_ids`) is True only, if given."""
        dt = torch.float64
        dev = fq.preds.device
        out = {name: torch.zeros((), dtype=dt, device=dev) for name in _SUMS}
        out["value_max"] = torch.full((), -torch.inf, dtype=dt, device=dev)
        out["value_min"] = torch.full((), torch.inf, dtype=dt, device=dev)
        if fq.indexes.numel() == 0:
            return out
        v = self.flat_values(fq)
        if v is not None:
            empty = fq.relevant_count() == 0
            w = torch.ones_like(v)
        else:
            indexes, preds, target = fq.indexes, fq.preds, fq.target
            if self.coded:  # 2: relevant and retrieved; 1: relevant, scored <= 0 (on the flat items)
                target = target * (
                    RETRIEVED if self.nonpositive_retrieved else torch.where(preds > 0, RETRIEVED, 1.0)
                )
            scores, labels, mask, _ = group_by_query(indexes, preds, target)
            positives = labels.sum(dim=1)  # padding holds 0
            empty = positives == 0
            if self.both_classes:
                empty = empty | (positives == mask.sum(dim=1))
            values, _, weights = execution.per_list(self.kernel, scores, labels, mask)
            v = values[:, 0].to(dt)
            w = weights.to(dt)
        if keep is not None:
            empty = empty & keep
        full = ~empty if keep is None else ~empty & keep
        out["value_sum"] = torch.where(full, w * v, 0.0).sum()
        out["weight_sum"] = torch.where(full, w, 0.0).sum()
        out["empty_weight"] = torch.where(empty, w, 0.0).sum()
        out["empty_count"] = empty.sum().to(dt)
        out["value_max"] = torch.where(full, v, -torch.inf).max()
        out["value_min"] = torch.where(full, v, torch.inf).min()
        return out

    def _add(self, stats: dict[str, torch.Tensor]) -> None:
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + stats[name])
        self.value_max = torch.maximum(self.value_max, stats["value_max"])
        self.value_min = torch.minimum(self.value_min, stats["value_min"])

    # -- the Metric API -------------------------------------------------------------------
    def forward(self, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
        """Update with the batch and return the batch's own value (torchmetrics' ``forward``;
        in ``"contiguous"`` and ``"sorted"`` mode through the full-state path: the batch's first
        query may continue one carried in from the earlier batches)."""
        if self.query_mode in ("contiguous", "sorted"):
            return self._forward_full_state_update(preds, target, indexes)
        return super().forward(preds, target, indexes)

    def update(self, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor) -> None:
        """Add a batch of flat items: ``preds`` (scores), ``target`` (relevance) and ``indexes``
        (the query id of each item), one shape for the three. Bad input raises before the
        state changes; no item (after ``ignore_index`` too) changes nothing."""
        fq = self._flat(preds, target, indexes)
        if fq.indexes.numel() == 0:
            return
        self._update_queries(fq)

    def compute(self) -> torch.Tensor:
        """The aggregate over the queries (see the module docstring), a float64 scalar."""
        sums = {name: getattr(self, name) for name in (*_SUMS, "value_max", "value_min")}
        more = self._pending_stats()
        if more is not None:
            sums = {
                **{name: sums[name] + more[name] for name in _SUMS},
                "value_max": torch.maximum(sums["value_max"], more["value_max"]),
                "value_min": torch.minimum(sums["value_min"], more["value_min"]),
            }
        return self._aggregate(sums)

    def _aggregate(self, s: dict[str, torch.Tensor]) -> torch.Tensor:
        action = self.empty_target_action
        if action == "error" and float(s["empty_count"]) > 0:
            raise ValueError(
                f"{type(self).__name__}.compute(): {int(s['empty_count'])} queries have no positive target "
                "(empty_target_action='error')"
            )
        has_empty = float(s["empty_count"]) > 0 and action in ("neg", "pos")
        fill = 1.0 if action == "pos" else 0.0
        zero = torch.zeros((), dtype=torch.float64, device=s["value_sum"].device)
        if self.aggregation == "mean":
            num, den = s["value_sum"], s["weight_sum"]
            if has_empty:
                num, den = num + fill * s["empty_weight"], den + s["empty_weight"]
            return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), zero)
        pick = torch.maximum if self.aggregation == "max" else torch.minimum
        extreme = s["value_max"] if self.aggregation == "max" else s["value_min"]
        if has_empty:
            extreme = pick(extreme, zero + fill)
        return torch.where(torch.isfinite(extreme), extreme, zero)


# ------------------------------------------------------------------------------------------
# The metrics, under torchmetrics' names and arguments: one class per row of the table of list
# metrics that has a torchmetrics presentation (core/lists/table.py)
# ------------------------------------------------------------------------------------------
def _k(top_k: int | None) -> int:
    return WHOLE_LIST if top_k is None else top_k


_ARGS_DOC = """
    Args:
        empty_target_action: a query without a relevant item counts 0 (``"neg"``, default),
            1 (``"pos"``), is skipped (``"skip"``) or makes ``compute()`` raise (``"error"``).
        ignore_index: items whose target equals it are dropped (None: none).
        aggregation: over the queries, ``"mean"`` (default), ``"max"`` or ``"min"``; a median
            is refused (the streamed state keeps sums and extremes only).
        query_mode: ``"contiguous"`` (default: a query's items come together, in any order
            within an update, and an update's last query may continue into the next: its items
            are kept, and one id per closed query, so that an id coming back is a ``ValueError``
            naming ``"any"``), ``"whole"`` (each update holds whole queries; constant memory; a
            cut query counts as two), ``"sorted"`` (ids sorted across updates; the open query is
            carried) or ``"any"`` (every item kept until ``compute()``, as torchmetrics: stores
            the predictions). See docs/torchmetrics.md.
        compute_on_cpu, dist_sync_on_step, process_group, dist_sync_fn, sync_on_compute,
            compute_with_cache: as ``torchmetrics.Metric``."""

#: torchmetrics.Metric's own arguments, last and keyword-only in every signature
_METRIC_ARGS = (
    ("compute_on_cpu", False, "bool"),
    ("dist_sync_on_step", False, "bool"),
    ("process_group", None, "Any"),
    ("dist_sync_fn", None, "Callable[..., Any] | None"),
    ("sync_on_compute", True, "bool"),
    ("compute_with_cache", True, "bool"),
)


def _presented(row: ListMetricRow) -> RetrievalPresentation:
    """The torchmetrics presentation of ``row``; a ``ValueError`` where it has none."""
    if not isinstance(row, ListMetricRow):
        raise TypeError(f"row must be a ListMetricRow, got {row!r}")
    if row.torchmetrics is None:
        raise ValueError(f"row {row.name!r} has no torchmetrics presentation (its torchmetrics=None)")
    return row.torchmetrics


def _signature(row: ListMetricRow) -> inspect.Signature:
    """The constructor's signature (``self`` first): torchmetrics' positional arguments, then
    the presentation's options, ``query_mode``, ``nonpositive_retrieved`` and the Metric's own."""
    tm = _presented(row)
    positional = [("empty_target_action", tm.empty, "str"), ("ignore_index", None, "int | None")]
    positional += [("top_k", None, "int | None")] if row.takes_k else []
    positional += [("adaptive_k", False, "bool")] if tm.adaptive_k else []
    positional += [("aggregation", "mean", "str")]
    keyword = [*tm.options, ("query_mode", "contiguous", "str")]
    keyword += [("nonpositive_retrieved", False, "bool")] if tm.nonpositive else []
    return inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *parameters(positional),
            *parameters([*keyword, *_METRIC_ARGS], inspect.Parameter.KEYWORD_ONLY),
        ],
        return_annotation="None",
    )


def _kernel(row: ListMetricRow, metric: Any, top_k: int | None, adaptive_k: bool) -> ListKernel:
    """The metric's kernel: the presentation's (else the row's) with its ``defaults``, the
    options the metric holds and ``empty="zero"``; the items scored ``<= 0`` coded
    (``relevance_threshold=RETRIEVED``) where they are not retrieved; precision's denominator
    ``min(k, n)`` with ``adaptive_k`` or without ``top_k``."""
    tm = _presented(row)
    options: dict[str, Any] = {**tm.defaults, **{name: getattr(metric, name) for name, _, _ in tm.options}}
    if tm.retrieved:
        options["relevance_threshold"] = RETRIEVED
    if tm.adaptive_k:
        options["denominator"] = "valid" if top_k is None or adaptive_k else "k"
    kernel = tm.kernel or row.kernel
    if not row.takes_k:
        return kernel(**options, empty="zero")
    return kernel(_k(top_k), **options, empty="zero")


def _builder(row: ListMetricRow) -> Callable[[Any, dict[str, Any]], None]:
    """The constructor's body: the checked options, the kernel, then the metric."""
    tm = _presented(row)

    def build(self: RetrievalListMetric, arguments: dict[str, Any]) -> None:
        if tm.adaptive_k and not isinstance(arguments["adaptive_k"], bool):
            raise ValueError(f"adaptive_k must be a bool, got {arguments['adaptive_k']!r}")
        if row.takes_k:
            self.top_k = _check_top_k(arguments["top_k"])
        if tm.adaptive_k:
            self.adaptive_k = arguments["adaptive_k"]
        for name, _, _ in tm.options:
            setattr(self, name, arguments[name])
        RetrievalListMetric.__init__(
            self,
            _kernel(row, self, arguments.get("top_k"), arguments.get("adaptive_k", False)),
            empty_target_action=arguments["empty_target_action"],
            ignore_index=arguments["ignore_index"],
            aggregation=arguments["aggregation"],
            query_mode=arguments["query_mode"],
            # no option: every item retrieved (the metrics without top_k), else as in torchmetrics
            nonpositive_retrieved=arguments.get("nonpositive_retrieved", not row.takes_k),
            metric_args={name: arguments[name] for name, _, _ in _METRIC_ARGS},
        )

    return build


def _metric_class(row: ListMetricRow) -> type[RetrievalListMetric]:
    """The class of ``row``: a subclass of its presentation's ``parent`` (else
    :class:`RetrievalListMetric`) with the presentation's name, signature, flags and docstring
    (the opening and the arguments)."""
    tm = _presented(row)
    parent = CLASSES[tm.parent] if tm.parent else RetrievalListMetric
    cls = derived_class(tm.name, parent, __name__, _signature(row), "", _builder(row))
    first, *rest = inspect.cleandoc(tm.doc).splitlines()
    cls.__doc__ = first + "".join(f"\n    {line}" for line in rest) + "\n" + _ARGS_DOC
    flags = {"coded": tm.retrieved, "graded": tm.graded, "both_classes": tm.both_classes, "ranked": tm.ranked}
    for flag, value in flags.items():
        if value:  # the base class's are False
            setattr(cls, flag, value)
    return cls


#: the classes by name, in the table's order: one per row with a torchmetrics presentation
CLASSES: dict[str, type[RetrievalListMetric]] = {}
for _row in LIST_METRICS:
    if _row.torchmetrics is not None:
        CLASSES[_row.torchmetrics.name] = _metric_class(_row)
globals().update(CLASSES)  # where pickle looks a class up: this module, by its name


def register(row: ListMetricRow) -> type[RetrievalListMetric]:
    """The torchmetrics class of a list metric defined outside the table (its row registered
    with :func:`rankstream.core.lists.table.register` for the other forms, its
    ``torchmetrics`` presentation set): made as the table's own rows' (:func:`_metric_class`),
    bound here under the presentation's name (where pickle finds it). A ``TypeError`` for a
    row that is not a ``ListMetricRow``, a ``ValueError`` for a row without a torchmetrics
    presentation or a name taken already."""
    name = _presented(row).name
    if name in CLASSES or name in globals():
        raise ValueError(f"a torchmetrics class named {name!r} exists already")
    cls = _metric_class(row)
    CLASSES[name] = cls
    globals()[name] = cls
    return cls
