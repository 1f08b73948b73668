"""PyTorch-Ignite adapter: lifecycle only (reset / update / compute / state_dict).

One generic :class:`KernelMetric` holds a kernel's state fields as ONE flat tensor
``_sums`` on ``device`` (float64, float32 on MPS). ``update`` adds the kernel's batch sums,
``compute`` all-reduces ``_sums`` through ``ignite.distributed`` (``sync_all_reduce``: one
collective for the whole state) and hands the totals to the kernel. The public classes are
derived from declarations: the list metrics from the table of list metrics
(:mod:`~rankstream.adapters.ignite_lists`), the rank metrics from the rank family registry
(:mod:`~rankstream.adapters.ignite_ranks`).

A kernel reporting more than its value (``kernel.quantities``, e.g. ``("stderr",)``) makes
``compute()`` return ``{"value": ..., "stderr": ...}``; attached as ``name``, the metric puts
the value under ``name`` and each quantity ``q`` under ``f"{name}_{q}"`` in
``engine.state.metrics``, and the collision checks know those keys.
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import EpochWise, Metric, MetricUsage, reinit__is_reduced, sync_all_reduce

from rankstream.adapters.ignite_derive import docstring
from rankstream.adapters.ignite_queries import (
    QUERY_STATE,
    check_distributed,
    gathered_pending,
    query_state,
    saved_queries,
)
from rankstream.core import execution
from rankstream.core.backends import torch_ops
from rankstream.core.grouping import group_by_query
from rankstream.core.inputs import ARRAY_KEYS, OPTION_KEYS, as_array, unpack_output
from rankstream.core.query_stream import Kept, QueryStream
from rankstream.core.state import (
    Kernel,
    flat_size,
    pack_state,
    result,
    split_flat,
    statistic_fields,
    unpack_state,
)
from rankstream.core.state import NotComputableError as CoreNotComputable

__all__ = ["FRAMEWORK_ARGS", "FRAMEWORK_PARAMETERS", "KernelMetric", "check_collisions"]

#: the descriptions of the arguments every metric of ``rankstream.ignite`` takes
FRAMEWORK_ARGS: dict[str, str] = {
    "output_transform": "ignite's: turns the engine's output into the ``update`` input.",
    "device": "where the state's sums are kept (float64; float32 on MPS).",
    "skip_unrolling": "ignite's: pass a list of per-sample outputs to ``update`` as it is.",
    "prefix": "prepended to every key of a dict result (two metrics on one engine).",
    "query_mode": 'with flat items and query ids (``indexes`` in the output): ``"contiguous"`` (default: '
    "a query's items come together, in any order within an update, and the query of an update's last "
    "item may continue into the next: its items are kept, and the ids of the closed queries, so that an "
    'id coming back is a ``ValueError`` naming ``"any"``), ``"whole"`` (each update holds whole '
    'queries; nothing kept, nothing checked), ``"sorted"`` (ids arrive sorted, a query may continue '
    'into the next update: only the open query is kept) or ``"any"`` (any order: every item is kept '
    "until ``compute()``; memory grows with the items). Lists without ``indexes`` are whole in every "
    'mode (``"sorted"`` and ``"any"`` refuse them).',
}

_CPU = torch.device("cpu")


def _state_dtype(device: str | torch.device) -> str:
    """The dtype the state is kept in on ``device`` (float32 on MPS, which lacks float64)."""
    return "float32" if torch.device(device).type == "mps" else "float64"


def _identity(x: Any) -> Any:
    return x


def _to_tensor(x: Any, name: str) -> Any:
    """``x`` as a torch tensor (None stays None); strings, objects, complex numbers and ragged
    lists are a ``TypeError`` naming ``name`` (the core's :func:`as_array`)."""
    if x is None or isinstance(x, torch.Tensor):
        return x
    return as_array(torch_ops(), x, name)


_OUTPUT_KEYS = (*ARRAY_KEYS, *OPTION_KEYS)
#: the key of the query ids (one per flat item) in an update input, beside :data:`_OUTPUT_KEYS`
QUERY_IDS = "indexes"


def _query_ids(output: Any) -> tuple[Any, Any]:
    """``(output without its query ids, the ids or None)``: :data:`QUERY_IDS` (one query id
    per item) in the output mapping or in the third element's dict."""
    if isinstance(output, Mapping) and QUERY_IDS in output:
        return {k: v for k, v in output.items() if k != QUERY_IDS}, output[QUERY_IDS]
    if (
        isinstance(output, Sequence)
        and not isinstance(output, (str, bytes))
        and len(output) == 3
        and isinstance(output[2], Mapping)
        and QUERY_IDS in output[2]
    ):
        extra = {k: v for k, v in output[2].items() if k != QUERY_IDS}
        return (output[0], output[1], extra), output[2][QUERY_IDS]
    return output, None


def _check_flat_output(y_pred: Any, y: Any, mask: Any, weight: Any) -> None:
    """Flat items ``(N,)`` come without a mask or weights (a ``ValueError`` otherwise)."""
    if mask is not None or weight is not None:
        raise ValueError(
            f"with {QUERY_IDS} (flat items grouped by query) the output takes no {' or '.join(OPTION_KEYS)}: "
            f"got mask={'given' if mask is not None else None}, "
            f"sample_weight={'given' if weight is not None else None}"
        )
    for name, x in (("y_pred", y_pred), ("y", y)):
        if x is None or x.ndim != 1:
            raise ValueError(
                f"with {QUERY_IDS}, {name} must be flat items of shape (num_items,), got shape "
                f"{None if x is None else tuple(x.shape)}"
            )


def _engine_mapping(output: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """The keys of an engine's mapping output that the metric reads. Other keys (``x``,
    ``loss``, ...) are left alone, as ignite does; a key that looks like a misspelt ``mask``
    or ``sample_weight`` is an error rather than silently ignored."""
    odd = [
        k
        for k in output
        if k not in _OUTPUT_KEYS and isinstance(k, str) and ("mask" in k.lower() or "weight" in k.lower())
    ]
    if odd:
        raise ValueError(
            f"{metric}: the engine's output mapping has keys {odd}; the metric reads "
            f"{', '.join(map(repr, (*_OUTPUT_KEYS, QUERY_IDS)))} (got keys {sorted(map(str, output))})"
        )
    return {k: output[k] for k in (*_OUTPUT_KEYS, QUERY_IDS) if k in output}


def _engine_side(batch: Any, metric: str) -> Any:
    """One side's batch of an engine's output: a mapping read as :func:`_engine_mapping`."""
    return _engine_mapping(batch, metric) if isinstance(batch, Mapping) else batch


def _batched(x: Any) -> torch.Tensor:
    return x.unsqueeze(0) if isinstance(x, torch.Tensor) else torch.as_tensor([x])


def _is_sample_list(x: Any) -> bool:
    """ignite's unrolled form: a list of per-sample tensors or numbers."""
    return (
        isinstance(x, Sequence)
        and not isinstance(x, (str, bytes))
        and len(x) > 0
        and all(isinstance(v, (torch.Tensor, int, float)) for v in x)
    )


def _attached_metrics(engine: Any) -> list[tuple[Metric, str]]:
    """Every ``(metric, name)`` attached to ``engine``: the metrics whose ``completed`` is a
    handler of one of its events (ignite's ``attach``), filtered events included."""
    found: list[tuple[Metric, str]] = []
    for handlers in getattr(engine, "_event_handlers", {}).values():
        for handler, args, _ in handlers:
            parent = getattr(handler, "_parent", None)  # an event filter's wrapper
            handler = parent() if callable(parent) else handler
            owner = getattr(handler, "__self__", None)
            if (
                isinstance(owner, Metric)
                and getattr(handler, "__name__", "") == "completed"
                and args
                and isinstance(args[-1], str)
                and (owner, args[-1]) not in found
            ):
                found.append((owner, args[-1]))
    return found


def _written_keys(metric: Metric, name: str) -> set[str]:
    """The keys of ``engine.state.metrics`` that ``metric`` attached as ``name`` writes (see
    :meth:`KernelMetric.written_keys`). Other metrics: the name (their keys are not known
    before they compute)."""
    return set(metric.written_keys(name)) if isinstance(metric, KernelMetric) else {name}


def check_collisions(engine: Any, metric: KernelMetric, name: str) -> None:
    """``ValueError`` naming both metrics when ``metric`` attached as ``name`` and another
    metric attached to ``engine`` write one key of ``engine.state.metrics`` (the later would
    silently replace the earlier's value), whichever was attached first."""
    mine = _written_keys(metric, name)
    for other, other_name in _attached_metrics(engine):
        if other is metric:
            continue
        shared = mine & _written_keys(other, other_name)
        if shared:
            mapping = [m for m in (metric, other) if isinstance(m, KernelMetric) and m.result_keys()]
            hint = f" or give {type(mapping[0]).__name__} a prefix=" if mapping else ""
            raise ValueError(
                f"{type(metric).__name__} attached as {name!r} and {type(other).__name__} attached as "
                f"{other_name!r} both write engine.state.metrics{sorted(shared)}: one value would "
                f"silently replace the other. Attach one under another name{hint}"
            )


class KernelMetric(Metric):
    """An ignite ``Metric`` over any rankstream kernel.

    ``update`` accepts ``(y_pred, y)``, ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a
    mapping with those keys; attached to an ``Engine`` whose (transformed) output is a
    mapping, the metric reads its ``y_pred``, ``y``, ``mask`` and ``sample_weight`` keys. An
    update that raises leaves the state untouched.

    Threads: separate instances are independent (no shared buffers). One instance must not
    be updated from two threads at once (its sums would race): give each thread its own and
    add them up (``merge`` their state sums, or ``idist`` in a distributed run).

    A kernel with ``quantities`` (names of what it reports besides its value) makes
    ``compute()`` return ``{"value": v, q: ...}``; attached as ``name``, the engine gets
    ``engine.state.metrics[name] = v`` and ``engine.state.metrics[f"{name}_{q}"]`` for each.
    """

    _state_dict_all_req_keys = ("_sums",)

    def __init__(
        self,
        kernel: Kernel,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        prefix: str = "",
        *,
        query_mode: str = "contiguous",
    ) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        self.query_mode = query_mode
        self._queries = QueryStream(query_mode, owner=f"{type(self).__name__}: ")
        self._kernel = kernel
        self._fields = dict(kernel.fields)
        self._runtime = kernel.runtime()
        self.prefix = prefix
        super().__init__(output_transform, device=device, skip_unrolling=skip_unrolling)

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    @property
    def quantities(self) -> tuple[str, ...]:
        """What the kernel reports besides its value (``kernel.quantities``; none by default)."""
        return tuple(getattr(self._kernel, "quantities", ()))

    def _dtype(self) -> torch.dtype:
        held = self.__dict__.get("_held_dtype")  # (device, dtype): read on every update
        if held is None or held[0] != self._device:
            held = self._held_dtype = (self._device, getattr(torch, _state_dtype(self._device)))
        return held[1]

    @reinit__is_reduced
    def reset(self) -> None:
        self._sums = torch.zeros(flat_size(self._fields), dtype=self._dtype(), device=self._device)
        self._queries.clear()

    def result_keys(self) -> tuple[str, ...] | None:
        """The keys of ``compute()``'s mapping (``prefix`` included; of its ``"value"`` with
        :attr:`quantities`), or None when it returns a value or a list: read from the kernel on
        an empty state, once."""
        if "_result_keys" not in self.__dict__:
            zeros = split_flat(np.zeros(flat_size(self._fields)), self._fields)
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    value = self._kernel.select(self._kernel.compute(zeros, np))
                except Exception:  # a kernel that cannot compute an empty state: keys unknown
                    value = None
            if self.quantities and isinstance(value, Mapping):  # {"value": ..., q: ...}
                value = value["value"]
            keys = tuple(self.prefix + str(k) for k in value) if isinstance(value, Mapping) else None
            self._result_keys = keys
        return self._result_keys

    def _suffixes(self) -> tuple[str, ...]:
        """What each reported quantity appends to a key: ``""`` for the value, ``"_q"``."""
        return ("", *(f"_{q}" for q in self.quantities))

    def written_keys(self, name: str) -> list[str]:
        """The keys of ``engine.state.metrics`` this metric writes when attached as ``name``:
        ``name`` and, for a mapping result, its keys (as ignite's ``metrics_result_mode`` puts
        them); with :attr:`quantities`, each of them again with ``_{q}`` appended."""
        keys = self.result_keys()
        mode = getattr(self, "_metrics_result_mode", "both")
        named = [name] if keys is None or mode in ("named", "both") else []
        flat = list(keys) if keys is not None and mode in ("flatten", "both") else []
        return [key + suffix for suffix in self._suffixes() for key in named + flat]

    def attach(self, engine: Any, name: str, usage: str | MetricUsage = EpochWise()) -> None:  # noqa: B008
        """As ignite's ``attach``; a ``ValueError`` naming both metrics when this one and
        another metric attached to ``engine`` would write one key of ``engine.state.metrics``
        (its name, or a key of a mapping such as `rankstream.ignite.ListMetrics`'), and when
        ``name`` is one of this metric's own keys."""
        written = self.written_keys(name)
        if len(set(written)) < len(written):
            keys = self.result_keys() or written
            raise ValueError(
                f"{type(self).__name__} attached as {name!r}: the name is also one of its keys {list(keys)}; "
                "attach it under another name"
            )
        check_collisions(engine, self, name)
        super().attach(engine, name, usage)

    def completed(self, engine: Any, name: str) -> None:
        """As ignite's ``completed``, after checking again that no metric attached since
        writes one of this metric's keys (see :meth:`attach`); with :attr:`quantities`, the
        value under ``name`` and each quantity ``q`` under ``f"{name}_{q}"``."""
        check_collisions(engine, self, name)
        if not self.quantities:
            super().completed(engine, name)
            return
        reported = self.compute()
        mode = getattr(self, "_metrics_result_mode", "both")
        for quantity, suffix in zip(("value", *self.quantities), self._suffixes(), strict=True):
            part = reported[quantity]
            if isinstance(part, Mapping) and mode in ("flatten", "both"):
                engine.state.metrics.update({key + suffix: v for key, v in part.items()})
            if not isinstance(part, Mapping) or mode in ("named", "both"):
                engine.state.metrics[name + suffix] = part

    def _side_output(self, output: Any) -> bool:
        """Whether ``output`` is a mapping of the kernel's named sides (``{"head": batch, ...}``)."""
        if not isinstance(output, Mapping) or "y_pred" in output:
            return False
        return bool(getattr(self._kernel, "sides", None))

    @property
    def _options(self) -> tuple[str, ...]:
        """The keys an update input takes beside ``y_pred`` and ``y``: the mask, the sample
        weight and the query ids; the query ids alone where ``query_mode`` is ``"sorted"`` or
        ``"any"`` (which read flat items only)."""
        return (QUERY_IDS,) if self.query_mode in ("sorted", "any") else (*OPTION_KEYS, QUERY_IDS)

    def _batch_flat(self, output: Any) -> torch.Tensor:
        """The flat sums of one ``update`` input (of the queries it closes, with query ids)."""
        return self._batch(output)[0]

    def _batch(self, output: Any) -> tuple[torch.Tensor, Kept | None]:
        """``(the flat sums of one update input, the query stream's next content or None)``:
        nothing changes here (see :meth:`update`)."""
        plain = type(output) is tuple and (  # (y_pred, y[, options]): no sides, no query ids
            len(output) == 2 or (len(output) == 3 and type(output[2]) is dict and QUERY_IDS not in output[2])
        )
        if not plain and self._side_output(output):
            batches = self._kernel.side_batches(output)
            batches = {
                side: {
                    k: _to_tensor(v, f"{k} of side {side!r}")
                    for k, v in zip(_OUTPUT_KEYS, batch, strict=True)
                }
                for side, batch in batches.items()
            }
            first = next(iter(batches.values()))["y_pred"]
            ctx = self._runtime.context(first, torch_ops())
            flat = execution.batch_sums(self._kernel, ctx, batches, flat=self._fields)
            return flat.to(device=self._device, dtype=self._dtype()), None
        output, indexes = (output, None) if plain else _query_ids(output)
        y_pred, y, mask, weight = (
            _to_tensor(v, k) for k, v in zip(_OUTPUT_KEYS, unpack_output(output, self._options), strict=True)
        )
        if indexes is None:
            if self.query_mode in ("sorted", "any"):
                raise ValueError(
                    f"{type(self).__name__}(query_mode={self.query_mode!r}) reads flat items with query ids: "
                    f'give the output as (y_pred, y, {{"{QUERY_IDS}": ids}}) or a mapping with the key '
                    f'"{QUERY_IDS}"'
                )
            return self._lists_flat(y_pred, y, mask, weight), None
        _check_flat_output(y_pred, y, mask, weight)
        ready, kept = self._queries.feed(_to_tensor(indexes, QUERY_IDS), y_pred, y)
        if ready is None:  # query_mode="any", or only the open query: kept
            return torch.zeros(flat_size(self._fields), dtype=self._dtype(), device=self._device), kept
        return self._queries_flat(ready), kept

    def _queries_flat(self, items: tuple[Any, Any, Any]) -> torch.Tensor:
        """The flat sums of whole queries of flat items ``(indexes, preds, target)``, grouped
        into padded lists (:func:`rankstream.core.grouping.group_by_query`)."""
        scores, labels, valid, _ = group_by_query(*items)
        return self._lists_flat(scores, labels, valid, None)

    def _lists_flat(self, y_pred: Any, y: Any, mask: Any, weight: Any) -> torch.Tensor:
        ctx = self._runtime.context(y_pred, torch_ops())
        flat = execution.batch_sums(self._kernel, ctx, y_pred, y, mask, weight, flat=self._fields)
        return flat.to(device=self._device, dtype=self._dtype())

    def iteration_completed(self, engine: Any) -> None:
        """Read the engine's output: a mapping keeps its ``mask`` and ``sample_weight``
        (ignite's default would pass only ``y_pred`` and ``y``); sequences as ignite does."""
        for update_input in self._engine_inputs(engine.state.output):
            self.update(update_input)

    def _engine_inputs(self, engine_output: Any) -> list[Any]:
        """The ``update`` inputs of one engine output, after ``output_transform``: one, or one
        per sample of ignite's unrolled form (two lists of per-sample tensors). What
        :meth:`iteration_completed` updates with, and what
        `rankstream.ignite.PerListValues` reads."""
        output = self._output_transform(engine_output)
        if self._side_output(output):
            return [{side: _engine_side(batch, type(self).__name__) for side, batch in output.items()}]
        if isinstance(output, Mapping):
            return [_engine_mapping(output, type(self).__name__)]
        if (
            not self._skip_unrolling
            and isinstance(output, Sequence)
            and len(output) == 2
            and all(_is_sample_list(o) for o in output)
        ):
            if len(output[0]) != len(output[1]):
                raise ValueError(
                    f"output as lists of samples must have two lists of one length, got {len(output[0])} "
                    f"and {len(output[1])}"
                )
            return [(_batched(a), _batched(b)) for a, b in zip(output[0], output[1], strict=True)]
        return [output]

    @reinit__is_reduced
    def update(self, output: Any) -> None:
        # Everything that can fail happens before the state changes. A new tensor (not an
        # in-place add) so a state_dict() taken earlier stays a snapshot.
        flat, kept = self._batch(output)
        self._sums = self._sums + flat
        if kept is not None:
            self._queries.commit(kept)

    def started(self, engine: Any) -> None:
        """Reset at the start of an epoch, except when an engine resumes mid-epoch (ignite fires
        ``EPOCH_STARTED`` again then): a state loaded with ``load_state_dict`` before ``run()``
        is kept, so the resumed epoch gives the uninterrupted result."""
        state = engine.state
        length = getattr(state, "epoch_length", None)
        if length and state.iteration % length != 0 and getattr(self, "_loaded", False):
            self._loaded = False
            return
        self._loaded = False
        super().started(engine)

    def _state_dict_per_rank(self) -> OrderedDict:
        """This rank's state: the flat sums plus what they belong to (metric, settings,
        field layout, format version; see :func:`rankstream.core.state.pack_state`). Plain
        tensors, strings and numbers, so ``torch.load(weights_only=True)`` reads it."""
        zeros = split_flat(np.zeros(flat_size(self._fields)), self._fields)
        meta = pack_state(self._kernel, zeros, metric=type(self).__name__)
        del meta["sums"]
        state = OrderedDict(_sums=self._sums.detach().clone(), **{k: meta[k] for k in sorted(meta)})
        state.update(query_state(self._queries))  # the open (or stored) items, the closed ids
        return state

    def _load_state_dict_per_rank(self, state_dict: Any) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict of {type(self).__name__} must be a mapping, got {type(state_dict)}")
        kept = saved_queries(state_dict, self.query_mode, type(self).__name__)
        rest = {k: v for k, v in state_dict.items() if k != "_sums" and k not in QUERY_STATE}
        sums = state_dict.get("_sums")
        expected = flat_size(self._fields)
        layout = self._saved_without_statistics(rest, sums, expected) or self._fields
        if not isinstance(sums, torch.Tensor) or tuple(sums.shape) != (flat_size(layout),):
            got = tuple(sums.shape) if isinstance(sums, torch.Tensor) else type(sums).__name__
            raise ValueError(
                f"state_dict does not fit {type(self).__name__} with fields {self._fields}: expected "
                f"'_sums' of shape ({expected},), got {got}"
            )
        flat = sums.detach().cpu()  # complex kept complex: refused, not cast to its real part
        flat = flat.to(torch.complex128 if flat.is_complex() else torch.float64).numpy()
        # Validated whole (metric, settings, layout, real finite sums that fit the state's
        # dtype) before anything is assigned.
        checked = unpack_state(
            self._kernel,
            {**rest, "sums": split_flat(flat, layout)},
            metric=type(self).__name__,
            owner="state_dict",
            state_dtype=_state_dtype(self._device),
        )
        if layout is not self._fields:  # the statistics' places are NaN: unavailable until reset
            sums = torch.from_numpy(np.concatenate([np.ravel(checked[n]) for n in self._fields]))
        self._sums = sums.detach().to(device=self._device, dtype=self._dtype()).clone()
        self._queries.commit(kept)
        self._loaded = True

    def _saved_without_statistics(
        self, rest: Mapping[str, Any], sums: Any, expected: int
    ) -> dict[str, tuple[int, ...]] | None:
        """The layout of a flat state saved without the sums of the standard error (by this
        metric without a confidence level, or by an older version): this metric's fields less
        its statistics'; None for anything else."""
        saved = rest.get("fields")
        if not isinstance(sums, torch.Tensor) or sums.ndim != 1 or sums.shape[0] == expected:
            return None
        if not isinstance(saved, Mapping):
            return None
        layout = {n: shape for n, shape in self._fields.items() if n not in self._kernel_statistics}
        saved_fields = {str(k): list(v) for k, v in saved.items()}
        if not self._kernel_statistics or saved_fields != {n: list(s) for n, s in layout.items()}:
            return None
        return layout

    @property
    def _kernel_statistics(self) -> frozenset[str]:
        return statistic_fields(self._kernel)

    def compute(self) -> Any:
        """The result of the sums (all-reduced over the processes of a distributed run), with
        the queries still open (``query_mode="contiguous"``, ``"sorted"``) or stored (``"any"``)
        counted in, not closed: a later update may still continue the open query. In a
        distributed run those items are gathered from every process (one query where several
        hold its items, as torchmetrics' ``"cat"`` states); with ``"contiguous"``, a query
        closed by two processes (its items dealt to both) is a ``ValueError`` naming
        ``query_mode='any'`` on every process."""
        check_distributed(self._queries, type(self).__name__)
        pending = gathered_pending(self._queries)  # every process's, in a distributed run
        if pending is None:
            return self._reduced_result()
        kept = self._sums
        # the pending items are every process's: each adds their sums to the all-reduce but the
        # first, which adds them once (computed everywhere: an error is raised everywhere)
        first = idist.get_rank() == 0
        self._sums = kept + self._queries_flat(pending) * first
        try:
            return self._reduced_result()
        finally:
            self._sums = kept

    @sync_all_reduce("_sums")
    def _reduced_result(self) -> Any:
        sums = split_flat(self._sums.detach().cpu().numpy().astype(np.float64), self._fields)
        try:
            value = result(self._kernel, sums, name=type(self).__name__)
        except CoreNotComputable as exc:
            raise NotComputableError(str(exc)) from exc
        if self.quantities:  # {"value": ..., q: ...}: each part as a value alone
            return {q: self._prefixed(value[q]) for q in ("value", *self.quantities)}
        return self._prefixed(value)

    def _prefixed(self, value: Any) -> Any:
        """A mapping result with ``prefix`` before its keys; anything else as it is."""
        if self.prefix and isinstance(value, Mapping):
            return {self.prefix + key: v for key, v in value.items()}
        return value

    def state_sums(self) -> dict[str, np.ndarray]:
        """This process's (un-reduced) field sums as numpy arrays."""
        return split_flat(self._sums.detach().cpu().numpy().astype(np.float64), self._fields)


KERNEL_ARGS: dict[str, str] = {
    "kernel": "the metric's definition, e.g. ``rankstream.MAPKernel(top_k=[5, 10])`` (any kernel of "
    "`rankstream` or `rankstream.core.ranks.kernel.RankKernel`).",
    **FRAMEWORK_ARGS,
}
KernelMetric.__doc__ = docstring(KernelMetric.__doc__ or "", inspect.signature(KernelMetric), KERNEL_ARGS)
#: the framework's arguments as :class:`KernelMetric` takes them (the derived classes' too)
FRAMEWORK_PARAMETERS: list[inspect.Parameter] = [
    p
    for p in inspect.signature(KernelMetric).parameters.values()
    if p.name in ("output_transform", "device", "skip_unrolling")
]
