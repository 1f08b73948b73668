"""PyTorch-Ignite adapter: lifecycle only (reset / update / compute / state_dict).

One generic :class:`KernelMetric` holds a kernel's state fields as ONE flat tensor
``_sums`` on ``device`` (float64, float32 on MPS). ``update`` adds the kernel's batch sums,
``compute`` all-reduces ``_sums`` through ``ignite.distributed`` (``sync_all_reduce``: one
collective for the whole state) and hands the totals to the kernel. Each public metric is a
few lines choosing a kernel with ignite's defaults.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import EpochWise, Metric, MetricUsage, reinit__is_reduced, sync_all_reduce

from rankstream.core.backends import torch_ops
from rankstream.core.inputs import as_array, unpack_output
from rankstream.core.lists import (
    DCGKernel,
    HitRateKernel,
    MAPKernel,
    NDCGKernel,
    PrecisionKernel,
    RecallKernel,
    ReciprocalRankKernel,
    RPrecisionKernel,
)
from rankstream.core.lists.base import ListKernel
from rankstream.core.lists.collection import ListMetrics as CollectionKernel
from rankstream.core.ranks.kernel import (
    KERNEL_METRICS,
    MEDIAN_BINS_PER_OCTAVE,
    MEDIAN_EXACT,
    RankKernel,
)
from rankstream.core.state import Kernel, flat_size, join_flat, pack_state, result, split_flat, unpack_state
from rankstream.core.state import NotComputableError as CoreNotComputable

__all__ = [
    "DCG",
    "GMR",
    "MAP",
    "MRR",
    "NDCG",
    "ArithmeticMeanRank",
    "GeometricMeanRank",
    "HitRate",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "KernelMetric",
    "MeanReciprocalRank",
    "Precision",
    "RPrecision",
    "RankBasedMetrics",
    "Recall",
]


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


_OUTPUT_KEYS = ("y_pred", "y", "mask", "sample_weight")


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
            f"{metric}: the engine's output mapping has keys {odd}; the metric reads 'y_pred', 'y', "
            f"'mask' and 'sample_weight' (got keys {sorted(map(str, output))})"
        )
    return {k: output[k] for k in _OUTPUT_KEYS if k in output}


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
    """The keys of ``engine.state.metrics`` that ``metric`` attached as ``name`` writes: its
    name, and for a rankstream metric returning a mapping the mapping's keys (as ignite's
    ``metrics_result_mode`` puts them). Other metrics: the name (their keys are not known
    before they compute)."""
    keys = metric.result_keys() if isinstance(metric, KernelMetric) else None
    if keys is None:
        return {name}
    mode = getattr(metric, "_metrics_result_mode", "both")
    return ({name} if mode in ("named", "both") else set()) | (
        set(keys) if mode in ("flatten", "both") else set()
    )


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

    Args:
        kernel: the metric's definition, e.g. ``rankstream.MAPKernel(top_k=[5, 10])`` (any
            kernel of `rankstream` or `rankstream.core.ranks.kernel.RankKernel`).
        output_transform: ignite's: turns the engine's output into the ``update`` input.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        prefix: prepended to every key of a dict result (two metrics on one engine).
    """

    _state_dict_all_req_keys = ("_sums",)

    def __init__(
        self,
        kernel: Kernel,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        prefix: str = "",
    ) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        self._kernel = kernel
        self._fields = dict(kernel.fields)
        self._runtime = kernel.runtime()
        self.prefix = prefix
        super().__init__(output_transform, device=device, skip_unrolling=skip_unrolling)

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    def _dtype(self) -> torch.dtype:
        held = self.__dict__.get("_held_dtype")  # (device, dtype): read on every update
        if held is None or held[0] != self._device:
            held = self._held_dtype = (self._device, getattr(torch, _state_dtype(self._device)))
        return held[1]

    @reinit__is_reduced
    def reset(self) -> None:
        self._sums = torch.zeros(flat_size(self._fields), dtype=self._dtype(), device=self._device)

    def result_keys(self) -> tuple[str, ...] | None:
        """The keys of ``compute()``'s mapping (``prefix`` included), or None when it returns a
        value or a list: read from the kernel on an empty state, once."""
        if "_result_keys" not in self.__dict__:
            zeros = split_flat(np.zeros(flat_size(self._fields)), self._fields)
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    value = self._kernel.select(self._kernel.compute(zeros, np))
                except Exception:  # a kernel that cannot compute an empty state: keys unknown
                    value = None
            keys = tuple(self.prefix + str(k) for k in value) if isinstance(value, Mapping) else None
            self._result_keys = keys
        return self._result_keys

    def attach(self, engine: Any, name: str, usage: str | MetricUsage = EpochWise()) -> None:  # noqa: B008
        """As ignite's ``attach``; a ``ValueError`` naming both metrics when this one and
        another metric attached to ``engine`` would write one key of ``engine.state.metrics``
        (its name, or a key of a mapping such as :class:`ListMetrics`'), and when ``name`` is
        one of this metric's own keys."""
        keys = self.result_keys()
        mode = getattr(self, "_metrics_result_mode", "both")
        if keys is not None and name in keys and mode == "both":
            raise ValueError(
                f"{type(self).__name__} attached as {name!r}: the name is also one of its keys {list(keys)}; "
                "attach it under another name"
            )
        check_collisions(engine, self, name)
        super().attach(engine, name, usage)

    def completed(self, engine: Any, name: str) -> None:
        """As ignite's ``completed``, after checking again that no metric attached since
        writes one of this metric's keys (see :meth:`attach`)."""
        check_collisions(engine, self, name)
        super().completed(engine, name)

    def _side_output(self, output: Any) -> bool:
        """Whether ``output`` is a mapping of the kernel's named sides (``{"head": batch, ...}``)."""
        if not isinstance(output, Mapping) or "y_pred" in output:
            return False
        return bool(getattr(self._kernel, "sides", None))

    def _batch_flat(self, output: Any) -> torch.Tensor:
        if self._side_output(output):
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
            sums = self._kernel.batch_sums(ctx, batches)
            return join_flat(ctx.ops, sums, self._fields).to(device=self._device, dtype=self._dtype())
        y_pred, y, mask, weight = (
            _to_tensor(v, k) for k, v in zip(_OUTPUT_KEYS, unpack_output(output), strict=True)
        )
        ctx = self._runtime.context(y_pred, torch_ops())
        sums = self._kernel.batch_sums(ctx, y_pred, y, mask, weight)
        return join_flat(ctx.ops, sums, self._fields).to(device=self._device, dtype=self._dtype())

    def iteration_completed(self, engine: Any) -> None:
        """Read the engine's output: a mapping keeps its ``mask`` and ``sample_weight``
        (ignite's default would pass only ``y_pred`` and ``y``); sequences as ignite does."""
        output = self._output_transform(engine.state.output)
        if self._side_output(output):
            self.update({side: _engine_side(batch, type(self).__name__) for side, batch in output.items()})
        elif isinstance(output, Mapping):
            self.update(_engine_mapping(output, type(self).__name__))
        elif (
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
            for a, b in zip(output[0], output[1], strict=True):
                self.update((_batched(a), _batched(b)))
        else:
            self.update(output)

    @reinit__is_reduced
    def update(self, output: Any) -> None:
        # Everything that can fail happens before the state changes. A new tensor (not an
        # in-place add) so a state_dict() taken earlier stays a snapshot.
        flat = self._batch_flat(output)
        self._sums = self._sums + flat

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
        return OrderedDict(_sums=self._sums.detach().clone(), **{k: meta[k] for k in sorted(meta)})

    def _load_state_dict_per_rank(self, state_dict: Any) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict of {type(self).__name__} must be a mapping, got {type(state_dict)}")
        rest = {k: v for k, v in state_dict.items() if k != "_sums"}
        sums = state_dict.get("_sums")
        expected = flat_size(self._fields)
        if not isinstance(sums, torch.Tensor) or tuple(sums.shape) != (expected,):
            got = tuple(sums.shape) if isinstance(sums, torch.Tensor) else type(sums).__name__
            raise ValueError(
                f"state_dict does not fit {type(self).__name__} with fields {self._fields}: expected "
                f"'_sums' of shape ({expected},), got {got}"
            )
        flat = sums.detach().cpu()  # complex kept complex: refused, not cast to its real part
        flat = flat.to(torch.complex128 if flat.is_complex() else torch.float64).numpy()
        # Validated whole (metric, settings, layout, real finite sums that fit the state's
        # dtype) before anything is assigned.
        unpack_state(
            self._kernel,
            {**rest, "sums": split_flat(flat, self._fields)},
            metric=type(self).__name__,
            owner="state_dict",
            state_dtype=_state_dtype(self._device),
        )
        self._sums = sums.detach().to(device=self._device, dtype=self._dtype()).clone()
        self._loaded = True

    @sync_all_reduce("_sums")
    def compute(self) -> Any:
        sums = split_flat(self._sums.detach().cpu().numpy().astype(np.float64), self._fields)
        try:
            value = result(self._kernel, sums, name=type(self).__name__)
        except CoreNotComputable as exc:
            raise NotComputableError(str(exc)) from exc
        if self.prefix and isinstance(value, Mapping):
            return {self.prefix + key: v for key, v in value.items()}
        return value

    def state_sums(self) -> dict[str, np.ndarray]:
        """This process's (un-reduced) field sums as numpy arrays."""
        return split_flat(self._sums.detach().cpu().numpy().astype(np.float64), self._fields)


class MAP(KernelMetric):
    """Mean Average Precision at k with ignite's argument names and defaults.

    Per list, ``AP@k = (1 / Z) * sum_{j<=k} rel_j * P@j``, with ``rel_j`` the relevance of the
    item ranked ``j``-th by ``y_pred`` and ``P@j`` the precision at ``j``. ``Z = min(R, k)``
    (``R`` the list's number of relevant items; an AP of 1 is reachable at every ``k``) or, with
    ``denominator="all"``, ``Z = R`` (keras-rs, trec_eval). MAP@k is the mean of ``AP@k`` over
    the lists (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted
    ``top_k``.

    ignite 0.5.5 has no MAP (its ``ignite.metrics.rec_sys`` holds ``HitRate`` and ``NDCG``); a
    ``rec_sys.MAP`` exists only on ignite's master branch, unreleased. The defaults here follow
    ignite's released ``rec_sys`` metrics (``top_k``, ``ignore_zero_hits=True``, relevant meaning
    ``y > 0``, ties to the earlier index as ignite's ``NDCG``) with ``Z = min(R, k)``.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them; ``k`` past the end of a list
            is clipped to the list.
        ignore_zero_hits: skip lists with no relevant item (True, ignite's) or count them as 0.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        denominator: ``"min"`` (``Z = min(R, k)``, default) or ``"all"`` (``Z = R``).
        relevance_threshold: None (relevant means ``y > 0``) or ``t`` (``y >= t``, ``t > 0``).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        denominator: str = "min",
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        kernel = MAPKernel(
            top_k,
            denominator=denominator,
            relevance_threshold=relevance_threshold,
            empty="skip" if ignore_zero_hits else "zero",
            ties=ties,
            seed=seed,
        )
        self.top_k = kernel.top_k
        self.ignore_zero_hits = ignore_zero_hits
        super().__init__(kernel, output_transform, device, skip_unrolling)


class NDCG(KernelMetric):
    """Normalised DCG at k, a drop-in for ``ignite.metrics.rec_sys.NDCG`` (0.5.5).

    Per list ``nDCG@k = DCG@k / IDCG@k`` with ``DCG@k = sum_{j<=k} g(y_(j)) * d(j)``, ``y_(j)``
    the label of the item ranked ``j``-th by ``y_pred``, ``g`` the gain, ``d(j) = 1 / log2(j + 1)``
    the discount, and ``IDCG@k`` the same over the items sorted by label; the mean over the lists.
    Ties among equal scores go to the earlier index, as ignite's stable sort, so the numbers are
    ignite's. ``compute()`` returns a list ordered by sorted ``top_k``.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them; ``k`` past the end of a list
            is clipped to the list.
        ignore_zero_hits: skip lists with no relevant item (True, ignite's) or count them as 0.
        relevance_threshold: labels below it count as 0 (default 1.0, ignite's); None keeps the
            labels as they are.
        gain_function: ``"exp_rank"`` (``2^y - 1``, default), ``"linear_rank"`` (``y``) or a
            callable of the labels.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        discount: a callable of the 1-based rank replacing ``1 / log2(rank + 1)``, or None.
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        relevance_threshold: float | None = 1.0,
        gain_function: str | Callable[[Any], Any] = "exp_rank",
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        discount: Callable[[Any], Any] | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        kernel = NDCGKernel(
            top_k,
            gain=gain_function,
            discount=discount,
            relevance_threshold=relevance_threshold,
            empty="skip" if ignore_zero_hits else "zero",
            ties=ties,
            seed=seed,
        )
        self.top_k = kernel.top_k
        self.ignore_zero_hits = ignore_zero_hits
        self.relevance_threshold = relevance_threshold
        self.gain_function = gain_function
        super().__init__(kernel, output_transform, device, skip_unrolling)


class _ListMetric(KernelMetric):
    """The binary list metrics' constructor: ``_kernel_cls`` with ignite's arguments and the
    keyword-only conventions (each public subclass states its own signature and arguments)."""

    _kernel_cls: type[ListKernel]

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
        **options: Any,
    ) -> None:
        empty = "skip" if ignore_zero_hits else "zero"
        conventions = dict(relevance_threshold=relevance_threshold, empty=empty, ties=ties, seed=seed)
        kernel = self._kernel_cls(top_k, **options, **conventions)
        self.top_k, self.ignore_zero_hits = kernel.top_k, ignore_zero_hits
        super().__init__(kernel, output_transform, device, skip_unrolling)


class Precision(_ListMetric):
    """Precision at k: per list, the relevant items among the top ``k`` over ``k``
    (``denominator="k"``, default: trec_eval ``P@k``, torchmetrics ``RetrievalPrecision``) or over
    ``min(k, items in the list)`` (``"valid"``, keras-rs); the mean over the lists (weighted by
    ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them; ``k`` past the end of a list
            is clipped to the list.
        ignore_zero_hits: skip lists with no relevant item (True) or count them as 0.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        denominator: ``"k"`` (default) or ``"valid"`` (``min(k, items in the list)``).
        relevance_threshold: None (relevant means ``y > 0``) or ``t`` (``y >= t``, ``t > 0``).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    _kernel_cls = PrecisionKernel

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        denominator: str = "k",
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        super().__init__(
            top_k, ignore_zero_hits, output_transform, device, skip_unrolling,
            relevance_threshold=relevance_threshold, ties=ties, seed=seed, denominator=denominator,
        )  # fmt: skip


class Recall(_ListMetric):
    """Recall at k: per list, the relevant items among the top ``k`` over all relevant items of
    the list (trec_eval ``recall_k``, torchmetrics ``RetrievalRecall``); the mean over the lists
    (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them; ``k`` past the end of a list
            is clipped to the list.
        ignore_zero_hits: skip lists with no relevant item (True) or count them as 0.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        relevance_threshold: None (relevant means ``y > 0``) or ``t`` (``y >= t``, ``t > 0``).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    _kernel_cls = RecallKernel

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        super().__init__(
            top_k, ignore_zero_hits, output_transform, device, skip_unrolling,
            relevance_threshold=relevance_threshold, ties=ties, seed=seed,
        )  # fmt: skip


class HitRate(_ListMetric):
    """Hit rate at k with the arguments and defaults of ``ignite.metrics.rec_sys.HitRate``
    (0.5.5): per list 1 when a relevant item is among the top ``k``, else 0; the mean over the
    lists (weighted by ``sample_weight``). ``compute()`` returns a list ordered by sorted
    ``top_k``. ``k`` past the end of a list is clipped to the list, where ignite raises.

    Ties: ignite's ``HitRate`` takes ``torch.topk``'s order, which leaves the order among equal
    scores unspecified; here ``ties="first"`` ranks the earlier index first. The two agree
    wherever no tie straddles the ``k``-th place.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them (default 1, ignite's).
        ignore_zero_hits: skip lists with no relevant item (True, ignite's) or count them as 0.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        relevance_threshold: None (relevant means ``y > 0``, ignite's) or ``t`` (``y >= t``,
            ``t > 0``).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    _kernel_cls = HitRateKernel

    def __init__(
        self,
        top_k: int | list[int] = 1,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        super().__init__(
            top_k, ignore_zero_hits, output_transform, device, skip_unrolling,
            relevance_threshold=relevance_threshold, ties=ties, seed=seed,
        )  # fmt: skip


class MeanReciprocalRank(_ListMetric):
    """MRR at k, list-wise: per list ``1 / rank`` of the first relevant item within the top
    ``k`` (0 if none), the mean over the lists (weighted by ``sample_weight``), as keras-rs
    ``MeanReciprocalRank``, torchmetrics ``RetrievalMRR`` and trec_eval ``recip_rank``.
    ``compute()`` returns a list ordered by sorted ``top_k``. PyKEEN's per-positive MRR is
    `InverseHarmonicMeanRank`.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them; ``k`` past the end of a list
            is clipped to the list.
        ignore_zero_hits: skip lists with no relevant item (True) or count them as 0.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        relevance_threshold: None (relevant means ``y > 0``) or ``t`` (``y >= t``, ``t > 0``).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    _kernel_cls = ReciprocalRankKernel

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        super().__init__(
            top_k, ignore_zero_hits, output_transform, device, skip_unrolling,
            relevance_threshold=relevance_threshold, ties=ties, seed=seed,
        )  # fmt: skip


class DCG(_ListMetric):
    """Unnormalised DCG at k, the numerator of `NDCG`: per list
    ``DCG@k = sum_{j<=k} g(y_(j)) * d(j)`` (``y_(j)`` the label of the item ranked ``j``-th by
    ``y_pred``, ``g`` the gain, ``d(j) = 1 / log2(j + 1)``), the mean over the lists (weighted
    by ``sample_weight``). ``compute()`` returns a list ordered by sorted ``top_k``.

    Args:
        top_k: the cut-off ``k``, a positive int or a list of them; ``k`` past the end of a list
            is clipped to the list.
        ignore_zero_hits: skip lists with no relevant item (True) or count them as 0.
        relevance_threshold: labels below it count as 0 (default 1.0, as `NDCG`); None keeps
            the labels as they are.
        gain_function: ``"exp_rank"`` (``2^y - 1``, default), ``"linear_rank"`` (``y``) or a
            callable of the labels.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        discount: a callable of the 1-based rank replacing ``1 / log2(rank + 1)``, or None.
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    _kernel_cls = DCGKernel

    def __init__(
        self,
        top_k: int | list[int] = 10,
        ignore_zero_hits: bool = True,
        relevance_threshold: float | None = 1.0,
        gain_function: str | Callable[[Any], Any] = "exp_rank",
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        discount: Callable[[Any], Any] | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        self.relevance_threshold, self.gain_function = relevance_threshold, gain_function
        super().__init__(
            top_k, ignore_zero_hits, output_transform, device, skip_unrolling,
            relevance_threshold=relevance_threshold, ties=ties, seed=seed,
            gain=gain_function, discount=discount,
        )  # fmt: skip


class RPrecision(KernelMetric):
    """R-precision: per list the precision at ``R``, the list's number of relevant items
    (trec_eval ``Rprec``, torchmetrics ``RetrievalRPrecision``); the mean over the lists
    (weighted by ``sample_weight``). ``compute()`` returns a float. Each list is ranked whole
    (a sort per list), so there is no ``top_k``.

    Args:
        ignore_zero_hits: skip lists with no relevant item (True) or count them as 0.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        relevance_threshold: None (relevant means ``y > 0``) or ``t`` (``y >= t``, ``t > 0``).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``).
        seed: seed of the random tie order (None: a random seed).
    """

    def __init__(
        self,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        relevance_threshold: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        empty = "skip" if ignore_zero_hits else "zero"
        kernel = RPrecisionKernel(relevance_threshold=relevance_threshold, empty=empty, ties=ties, seed=seed)
        self.ignore_zero_hits = ignore_zero_hits
        super().__init__(kernel, output_transform, device, skip_unrolling)


class ListMetrics(KernelMetric):
    """Several list metrics from one validation and one top-k selection per batch:
    ``ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5", "hit_rate@10"])``.
    ``compute()`` returns ``{name: value}``; attached to an ``Engine``, each name is also put in
    ``engine.state.metrics`` (after ``prefix``).

    Names are written as ranx and ir_measures write them, case-insensitive: ``ndcg``, ``dcg``,
    ``map`` (``ap``), ``precision`` (``p``), ``recall`` (``r``), ``mrr`` (``rr``), ``hit_rate``
    (``hitrate``, ``success``), ``r_precision`` (``rprec``), each with ``@k`` or without (the whole list; see
    `rankstream.core.lists.collection`). Each metric takes the defaults of its class here
    (`MAP`: ``Z = min(R, k)``; `NDCG`, `DCG`: ``2^y - 1`` gains, labels below 1.0 count as 0;
    `Precision`: over ``k``; relevant meaning ``y > 0`` otherwise).

    Args:
        metrics: the metric names, e.g. ``["ndcg@10", "map@5"]``.
        ignore_zero_hits: skip lists with no relevant item (True) or count them as 0, for all.
        output_transform: ignite's: turns the engine's output into ``(y_pred, y)``,
            ``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
        ties: ``"first"`` (the earlier index ranks first among equal scores, default) or
            ``"random"`` (a random order, seeded by ``seed``), for all.
        seed: seed of the random tie order (None: a random seed).
        prefix: prepended to every name (two collections on one engine).
    """

    def __init__(
        self,
        metrics: list[str],
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        ties: str = "first",
        seed: int | None = None,
        prefix: str = "",
    ) -> None:
        empty = "skip" if ignore_zero_hits else "zero"
        defaults = {"dcg": {"relevance_threshold": 1.0}}  # as rankstream.ignite.DCG (as NDCG)
        kernel = CollectionKernel(metrics, defaults, empty=empty, ties=ties, seed=seed)
        self.metrics, self.ignore_zero_hits = kernel.metrics, ignore_zero_hits
        super().__init__(kernel, output_transform, device, skip_unrolling, prefix)


MRR = MeanReciprocalRank


# ------------------------------------------------------------------------------------------
# Rank-based metrics (Hits@k, MRR, GMR, mean rank) streamed from scores. Input of ``update``:
# ``(y_pred, y)`` or ``(y_pred, y, {"mask": m, "sample_weight": w})`` with ``y_pred`` scores
# (batch, num_candidates) and ``y`` either the index of the true candidate (batch,) or binary
# labels (batch, num_candidates) (every positive ranked against the non-positives, the filtered
# setting). See rankstream.core.ranks.kernel for the definitions and the state.


class RankBasedMetrics(KernelMetric):
    """Every rank-based metric in one pass: ``compute()`` returns a dict (ignite flattens it
    into ``engine.state.metrics``) with, for ``key`` in ``hits_at_{k}`` (each ``k`` of ``ks``),
    ``inverse_harmonic_mean_rank`` (MRR), ``geometric_mean_rank`` and ``arithmetic_mean_rank``:
    ``key``, ``expected_key``, ``variance_key`` (under random ranking, from each task's number
    of candidates), ``adjusted_key`` (``(M - E) / (1 - E)``; ``..._index`` for the two rank
    means) and ``z_key`` (``(M - E) / sqrt(Var)``, larger is better), as PyKEEN's metric
    classes; plus ``adjusted_arithmetic_mean_rank`` (``M / E``),
    ``geometric_mean_rank_error_bound`` (relative, of the streamed GMR expectation), PyKEEN's
    ``variance`` and ``standard_deviation`` of the rank, ``median_rank`` and
    ``median_absolute_deviation`` (each with its absolute ``..._error_bound``, 0 below
    ``median_exact``), ``harmonic_mean_rank`` and ``inverse_{arithmetic,geometric,median}_rank``,
    and ``count`` (tasks with a positive weight).

    **PyKEEN's report in one metric.** ``rank_type=RANK_TYPES`` computes all three rank types
    from the same comparison passes, and ``sides=("head", "tail")`` keeps separate sums per side;
    the engine's output is then a mapping ``{"head": batch, "tail": batch}`` (each batch a
    mapping with ``y_pred``, ``y``, ``mask``, ``sample_weight`` or a tuple). Keys are then
    PyKEEN's ``"{side}.{rank_type}.{metric}"`` with the side ``"both"`` (all sides together).

    Args:
        ks: cut-offs of Hits@k.
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``, or a
            sequence of them (``rankstream.ignite.RANK_TYPES``: all three).
        output_transform, device, skip_unrolling: as in every ignite metric.
        sides: names of the sides (``("head", "tail")``), or None.
        prefix: prepended to every key (several instances on one engine).
        filtered_scores: PyKEEN's filtered scores: NaN and ``-inf`` scores are not candidates
            (without it a NaN score is an error and ``-inf`` the lowest score, a candidate).
        metrics: what is kept and reported, a subset of ``("hits", "mrr", "gmr", "mr",
            "dispersion", "median")`` (all by default): the four families, the rank's variance
            and standard deviation, the median rank and median absolute deviation.
        median_exact: ranks below it are counted exactly in the median's histogram (1024).
        median_bins_per_octave: log-spaced histogram bins per doubling of the rank above
            ``median_exact`` (64); the median's error bound follows from them.

    The state's sums and their report are those of
    `rankstream.core.ranks.kernel.RankKernel`.
    """

    def __init__(
        self,
        ks: int | list[int] | tuple[int, ...] = (1, 3, 10),
        rank_type: str | Sequence[str] = "realistic",
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        sides: Sequence[str] | None = None,
        prefix: str = "",
        filtered_scores: bool = False,
        metrics: Sequence[str] = KERNEL_METRICS,
        median_exact: int = MEDIAN_EXACT,
        median_bins_per_octave: int = MEDIAN_BINS_PER_OCTAVE,
    ) -> None:
        kernel = RankKernel(
            ks,
            rank_type,
            state_dtype=_state_dtype(device),
            sides=sides,
            filtered_scores=filtered_scores,
            metrics=metrics,
            median_exact=median_exact,
            median_bins_per_octave=median_bins_per_octave,
        )
        self.ks, self.rank_type, self.sides = kernel.ks, kernel.rank_type, kernel.sides
        super().__init__(kernel, output_transform, device, skip_unrolling, prefix)


class _OneRankMetric(KernelMetric):
    """One rank family (``_family``) and one ``output``; ``rank_type``, ``output``,
    ``output_transform``, ``device``, ``skip_unrolling`` as in :class:`HitsAtK`."""

    _family = ""

    def __init__(
        self,
        rank_type: str = "realistic",
        output: str = "value",
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
    ) -> None:
        fam, k = self._family, self.__dict__.get("k", 1)
        kernel = RankKernel(
            k, rank_type, metrics=(fam,), select=(fam, output), k_name="k", state_dtype=_state_dtype(device)
        )
        self.rank_type, self.output = rank_type, output
        super().__init__(kernel, output_transform, device, skip_unrolling)


class HitsAtK(_OneRankMetric):
    """Hits@k: the (weighted) fraction of ranking tasks whose true candidate ranks at most
    ``k``, ``sum_i w_i [r_i <= k] / sum_i w_i`` (a float; a list ordered by ``k`` for a list
    of ``k``), PyKEEN's ``HitsAtK``.

    ``update`` takes ``(y_pred, y)`` or ``(y_pred, y, {"mask": m, "sample_weight": w})``:
    ``y_pred`` the scores ``(batch, num_candidates)``, ``y`` the index of the true candidate
    ``(batch,)`` or binary labels ``(batch, num_candidates)`` (every positive ranked against the
    non-positives, the filtered setting).

    Args:
        k: the cut-off, a positive int or a list of them.
        rank_type: ``"realistic"`` (default: the mean of the two others), ``"optimistic"``
            (tied candidates rank after the true one) or ``"pessimistic"`` (before it); ties are
            counted exactly, never broken at random.
        output: ``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking,
            from each task's number of candidates); ``"adjusted"`` (``(M - E) / (1 - E)``) or
            ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN's metric classes.
        output_transform: ignite's: turns the engine's output into the ``update`` input.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
    """

    _family = "hits"

    def __init__(
        self,
        k: int | list[int] = 10,
        rank_type: str = "realistic",
        output: str = "value",
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
    ) -> None:
        self.k = k
        super().__init__(rank_type, output, output_transform, device, skip_unrolling)


class InverseHarmonicMeanRank(_OneRankMetric):
    """Mean reciprocal rank, ``sum_i w_i / r_i / sum_i w_i`` (MRR, PyKEEN's inverse harmonic
    mean rank: each positive ranked against the non-positives); ``update`` as in `HitsAtK`.

    Args:
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"`` (as in
            `HitsAtK`).
        output: ``"value"`` (default), ``"expected"``, ``"variance"``, ``"adjusted"`` or ``"z"``
            (as in `HitsAtK`).
        output_transform: ignite's: turns the engine's output into the ``update`` input.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
    """

    _family = "mrr"


class GeometricMeanRank(_OneRankMetric):
    """Geometric mean rank ``exp(sum_i w_i ln r_i / sum_i w_i)``; ``update`` as in `HitsAtK`.
    The expectation and variance are streamed from a cumulant series; a ``RuntimeWarning``
    says when its error bound exceeds 1e-3 (fewer than about ten tasks).

    Args:
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"`` (as in
            `HitsAtK`).
        output: ``"value"`` (default), ``"expected"``, ``"variance"``, ``"adjusted"`` (PyKEEN's
            adjusted GMR index) or ``"z"`` (as in `HitsAtK`).
        output_transform: ignite's: turns the engine's output into the ``update`` input.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
    """

    _family = "gmr"


class ArithmeticMeanRank(_OneRankMetric):
    """Arithmetic mean rank ``sum_i w_i r_i / sum_i w_i``; ``update`` as in `HitsAtK`.

    Args:
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"`` (as in
            `HitsAtK`).
        output: ``"value"`` (default), ``"expected"``, ``"variance"``, ``"adjusted"`` (PyKEEN's
            adjusted mean rank index) or ``"z"`` (as in `HitsAtK`).
        output_transform: ignite's: turns the engine's output into the ``update`` input.
        device: where the state's sums are kept (float64; float32 on MPS).
        skip_unrolling: ignite's: pass a list of per-sample outputs to ``update`` as it is.
    """

    _family = "mr"


GMR = GeometricMeanRank
