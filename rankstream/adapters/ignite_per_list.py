"""``rankstream.ignite.PerListValues``: the per-list values behind a list metric, on request.

A metric keeps only sums. For a test of one's own (a bootstrap, a Wilcoxon test, a plot of
the distribution), :class:`PerListValues` is an event handler that, on each iteration,
computes the batch's per-list values of a metric's kernel from the engine's output read
exactly as the metric reads it, and stores them (on the CPU) or hands them to a callback. It
never touches the metric: its sums, its state and its random tie order are the metric's own,
and a metric without a handler does no per-list work at all.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from ignite.engine import Engine
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import EpochWise, MetricUsage

from rankstream.adapters.ignite_derive import docstring
from rankstream.adapters.ignite_metrics import KernelMetric, _to_tensor
from rankstream.core import execution
from rankstream.core.backends import torch_ops
from rankstream.core.inputs import unpack_output

__all__ = ["PerList", "PerListValues"]


class PerList(NamedTuple):
    """The per-list values of some lists (a batch, or every batch collected).

    ``values``: ``(B, len(top_k))`` for a list metric (columns ordered by sorted ``top_k``),
    ``(B,)`` per name of `rankstream.ignite.ListMetrics`, ``(B, len(rankers))`` per name of
    `rankstream.ignite.PairedComparison` (columns in the order of ``rankers``); NaN for a list
    with bad data (where it could not be refused). ``counted``: whether the list enters the
    metric (the ``ignore_zero_hits`` policy; never a list whose items are all masked; for a
    comparison, counted for every ranker). ``weights``: 1 without ``sample_weight``.

    The metric's value is the weighted mean over the counted lists,
    ``sum_i w_i v_i / sum_i w_i`` over ``i`` with ``counted[i]``; its standard error and the
    paired tests count the lists with ``counted[i]`` and ``w_i > 0``.

    Args:
        values: the per-list values (see above).
        counted: whether each list enters the metric, ``(B,)`` bool.
        weights: the list weights, ``(B,)``.
    """

    values: torch.Tensor
    counted: torch.Tensor
    weights: torch.Tensor


def _cat(parts: list[PerList]) -> PerList:
    return PerList(*(torch.cat([getattr(p, f) for p in parts]) for f in PerList._fields))


class PerListValues:
    """The per-list values of a list metric, batch by batch, through an ``Engine``:
    ``PerListValues(NDCG([5, 10])).attach(engine)``.

    On each ``ITERATION_COMPLETED`` the handler reads the engine's output as ``metric`` reads it
    (its ``output_transform``; a mapping's ``y_pred``, ``y``, ``mask`` and ``sample_weight``;
    ignite's unrolled lists of samples) and computes the batch's per-list values with the
    metric's kernel (same ``top_k``, thresholds, gains, ``ignore_zero_hits``): a `PerList`
    ``(values, counted, weights)`` for a list metric, ``{name: PerList}`` for
    `rankstream.ignite.ListMetrics` and `rankstream.ignite.PairedComparison`. Without
    ``callback`` it keeps them (on the CPU; :attr:`batches`, joined by :meth:`collected`) and
    clears them when the metric's usage starts over (each epoch by default); with ``callback``
    it calls ``callback(engine, values)`` and keeps nothing.

    ``metric`` need not be attached, and is never changed: the handler computes its values apart
    from the metric's update (an opt-in cost of one more top-k selection per batch, per name
    for `rankstream.ignite.ListMetrics`). With ``ties="random"`` it draws its own tie order
    (from the metric's ``seed``), so on tied scores its values may differ from those in the
    metric's sums. Rank-based metrics have no per-list values (a ``TypeError``).

    What they are for: a test of one's own on the lists (a bootstrap, a Wilcoxon or a
    permutation test). The weighted mean of ``values`` over the counted lists is the metric's
    value, and ``scipy.stats.ttest_rel`` on two rankers' values over the lists counted for both
    is `rankstream.ignite.PairedComparison`'s test.
    """

    def __init__(
        self,
        metric: KernelMetric,
        callback: Callable[[Engine, PerList | dict[str, PerList]], None] | None = None,
    ) -> None:
        if not isinstance(metric, KernelMetric):
            raise TypeError(f"metric must be a rankstream.ignite list metric, got {metric!r}")
        kernel = metric.kernel
        members = getattr(kernel, "members", None)
        if not hasattr(kernel, "per_list") and not (
            isinstance(members, Mapping) and all(hasattr(k, "per_list") for k in members.values())
        ):
            raise TypeError(
                f"metric must be a list metric (its kernel gives per-list values), got "
                f"{type(metric).__name__} "
                f"with kernel {kernel!r}"
            )
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be None or a callable (engine, values), got {callback!r}")
        self.metric = metric
        self.callback = callback
        self._members = None if hasattr(kernel, "per_list") else dict(members)
        self._runtime = kernel.runtime()  # its own tie generator: the metric's is left alone
        self._batches: list[PerList | dict[str, PerList]] = []

    @property
    def batches(self) -> list[PerList | dict[str, PerList]]:
        """The values kept, one entry per iteration since the last :meth:`reset` (a copy of the
        list; empty with a ``callback``)."""
        return list(self._batches)

    def reset(self) -> None:
        """Forget the values kept."""
        self._batches = []

    def attach(self, engine: Engine, usage: str | MetricUsage = EpochWise()) -> None:  # noqa: B008
        """Compute each iteration's values on ``usage``'s ``ITERATION_COMPLETED`` and
        :meth:`reset` on its ``STARTED`` (ignite's usages: ``"epoch_wise"`` by default, as the
        metric's)."""
        usage = self.metric._check_usage(usage)
        if not engine.has_event_handler(self.reset, usage.STARTED):
            engine.add_event_handler(usage.STARTED, self.reset)
        if not engine.has_event_handler(self.iteration_completed, usage.ITERATION_COMPLETED):
            engine.add_event_handler(usage.ITERATION_COMPLETED, self.iteration_completed)

    def iteration_completed(self, engine: Engine) -> None:
        """The values of the engine's output (:meth:`batch_values`), kept or passed on."""
        values = self.batch_values(engine.state.output)
        if self.callback is not None:
            self.callback(engine, values)
            return
        if isinstance(values, PerList):
            self._batches.append(PerList(*(t.detach().cpu() for t in values)))
        else:
            self._batches.append({n: PerList(*(t.detach().cpu() for t in v)) for n, v in values.items()})

    def batch_values(self, engine_output: Any) -> PerList | dict[str, PerList]:
        """The per-list values of one engine output (before the metric's ``output_transform``),
        on the device of its scores: a `PerList`, or ``{name: PerList}``."""
        parts = [self._values(update_input) for update_input in self.metric._engine_inputs(engine_output)]
        if len(parts) == 1:
            return parts[0]
        if isinstance(parts[0], PerList):
            return _cat(parts)
        return {name: _cat([p[name] for p in parts]) for name in parts[0]}

    def collected(self) -> PerList | dict[str, PerList]:
        """Every kept batch joined along the lists (in the order seen): a `PerList`, or
        ``{name: PerList}``. ``NotComputableError`` before any batch (or with a ``callback``)."""
        if not self._batches:
            why = "it passes them to its callback" if self.callback is not None else "no batch was seen"
            raise NotComputableError(f"PerListValues has kept no per-list values: {why}")
        first = self._batches[0]
        if isinstance(first, PerList):
            return _cat(self._batches)  # type: ignore[arg-type]
        return {name: _cat([b[name] for b in self._batches]) for name in first}  # type: ignore[index]

    def _values(self, update_input: Any) -> PerList | dict[str, PerList]:
        """One update input's values, as the kernel (or each member) gives them."""
        y_pred, *rest = unpack_output(update_input)
        if isinstance(y_pred, Mapping):  # a comparison's {ranker: scores}
            y_pred = {r: _to_tensor(v, f"y_pred[{r!r}]") for r, v in y_pred.items()}
            like = next(iter(y_pred.values()), None)
        else:
            y_pred = like = _to_tensor(y_pred, "y_pred")
        y, mask, weight = (
            _to_tensor(v, k) for k, v in zip(("y", "mask", "sample_weight"), rest, strict=True)
        )
        ctx = self._runtime.context(like, torch_ops())
        if self._members is not None:  # a collection: each name's values, one cut-off each
            out = {}
            for name, kernel in self._members.items():
                values, counted, weights = execution.per_list(kernel, y_pred, y, mask, weight, ctx=ctx)
                out[name] = PerList(values[:, 0], counted, weights)
            return out
        got = execution.per_list(self.metric.kernel, y_pred, y, mask, weight, ctx=ctx)
        if isinstance(got, Mapping):
            return {name: PerList(*v) for name, v in got.items()}
        return PerList(*got)


PerListValues.__doc__ = docstring(
    inspect.cleandoc(PerListValues.__doc__ or ""),
    inspect.signature(PerListValues),
    {
        "metric": "a list metric of `rankstream.ignite` (`rankstream.ignite.NDCG`, ..., "
        "`rankstream.ignite.ListMetrics`, `rankstream.ignite.PairedComparison`): its kernel and "
        "``output_transform`` give the values.",
        "callback": "None (default: keep the values) or ``callback(engine, values)`` called each "
        "iteration with the batch's values (nothing kept).",
    },
)
