"""The list metric classes of ``rankstream.ignite``, derived from the table of list metrics.

Each row of :data:`~rankstream.core.lists.table.LIST_METRICS` gives one class
(:func:`list_metric_class`): its name and other names, its docstring's opening and the
defaults of its peer come from the row's ``ignite`` presentation, its options from the kernel's
signature. The signature is ignite's, in ignite's order::

    (top_k, ignore_zero_hits, [relevance_threshold, gain_function,] output_transform, device,
     skip_unrolling, *, <the kernel's own options>, [relevance_threshold,] ties, seed, confidence,
     chance)

``top_k`` only for a metric with a cut-off; ``relevance_threshold`` and ``gain_function`` (the
kernel's ``gain``) positional for a graded metric (a kernel with a gain), as ignite's ``NDCG``.
``ignore_zero_hits`` is the kernel's ``empty`` policy (``"skip"`` / ``"zero"``); lists are
weighted per list and negative labels kept, as ignite. ``confidence`` (every list kernel's, the
next to last option) adds the standard error, interval and count to ``compute()``; ``chance`` (the
last) adds the expectation under random ranking, the adjusted index and the z-score.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rankstream.adapters.ignite_derive import derived_class, docstring, from_arguments, parameters
from rankstream.adapters.ignite_metrics import (
    _CPU,
    FRAMEWORK_ARGS,
    FRAMEWORK_PARAMETERS,
    KernelMetric,
    _identity,
)
from rankstream.core.beyond.items import ItemData
from rankstream.core.lists.base import ListConventions
from rankstream.core.lists.collection import ListMetrics as CollectionKernel
from rankstream.core.lists.table import LIST_METRICS, ListMetricRow

#: every argument of the list metric classes, described once; ``{default}`` stands for the
#: class's default, and a mapping holds one description per default where the meaning of the
#: argument depends on it (a kernel's ``denominator``, a graded metric's threshold)
LIST_ARGS: dict[str, Any] = {
    "top_k": "the cut-off ``k``, a positive int or a list of them (default {default}); ``k`` past the "
    "end of a list is clipped to the list.",
    "ignore_zero_hits": "skip lists with no relevant item (True, ignite's) or count them as 0.",
    "relevance_threshold": {
        None: "None (relevant means ``y > 0``, ignite's) or ``t`` (``y >= t``, ``t > 0``).",
        1.0: "labels below it count as 0 (default {default}, as ignite's ``NDCG``); None keeps the "
        "labels as they are.",
    },
    "gain_function": '``"exp_rank"`` (``2^y - 1``, default), ``"linear_rank"`` (``y``) or a callable '
    "of the labels.",
    **FRAMEWORK_ARGS,
    "output_transform": "ignite's: turns the engine's output into ``(y_pred, y)``, "
    '``(y_pred, y, {"mask": m, "sample_weight": w})`` or a mapping with those keys.',
    "denominator": {
        "min": '``"min"`` (``Z = min(R, k)``, default) or ``"all"`` (``Z = R``).',
        "k": '``"k"`` (default) or ``"valid"`` (``min(k, items in the list)``).',
    },
    "discount": "a callable of the 1-based rank replacing ``1 / log2(rank + 1)``, or None.",
    "max_grade": "the maximum grade ``g_max`` of ``R_j = (2^g - 1) / 2^g_max`` (default {default}, "
    "gdeval's); labels above it count as ``g_max``.",
    "p": "the persistence, in (0, 1) (default {default}, ir_measures').",
    "graded": "False (default: binary gains) or True (the labels of the relevant items as gains, ranx's).",
    "residual": "False (default: the value alone) or True: ``compute()`` also reports the mean residual "
    "``p^min(k, n)`` (a mapping of ``value`` and ``residual``; the engine gets ``name_residual``).",
    "weight_by_size": {
        False: "False (default: each list weighs its ``sample_weight``) or True (times its number of "
        "items: the impression-weighted GAUC).",
        True: "True (default: each list weighs its number of items times its ``sample_weight``, the "
        "impression-weighted GAUC) or False (its ``sample_weight`` alone).",
    },
    "ties": '``"first"`` (the earlier index ranks first among equal scores, default), ``"random"`` '
    '(a random order, seeded by ``seed``) or ``"expected"`` (the exact mean over every order of the '
    "tied items: the reproducible choice where scores tie).",
    "seed": "seed of the random tie order (None: a random seed).",
    "confidence": "None (default: ``compute()`` returns the value alone, as ignite) or a level in (0, 1), "
    'e.g. 0.95: ``compute()`` returns ``{"value", "stderr", "ci_low", "ci_high", "count"}`` (the '
    "standard error of the mean over the lists, Student's t interval at that level with ``count - 1`` "
    "degrees of freedom, the lists counted), each a list ordered by sorted ``top_k`` (a float without "
    "``top_k``); attached as ``name``, the engine gets ``name`` and ``name_stderr``, "
    "``name_ci_low``, ``name_ci_high``, ``name_count``.",
    "chance": 'False (default) or True: ``compute()`` returns a mapping with ``"expected"`` (the mean '
    'value under a uniformly random ranking of each list\'s items), ``"adjusted"`` (``(M - E) / (M_best - '
    'E)``: 1 at the ideal ranking, 0 by chance) and ``"z"`` (``(M - E) / sqrt(Var)``) beside ``"value"`` '
    "(after the interval's quantities with ``confidence``); the engine gets ``name_expected``, "
    "``name_adjusted``, ``name_z`` (see docs/chance.md).",
}

#: ignite's names of kernel arguments (ignite's ``NDCG``: ``gain_function``)
IGNITE_NAMES = {"gain": "gain_function"}
#: the kernel arguments that are positional in ignite's order, for a graded metric
GRADED_POSITIONAL = ("relevance_threshold", "gain")


#: the ignite arguments that set the metric rather than its kernel
def empty_policy(ignore_zero_hits: Any) -> str:
    """The kernel's ``empty`` policy of ignite's ``ignore_zero_hits`` (a bool, or 0 / 1: anything
    else, such as a mapping passed in its place, is a ``TypeError`` echoing it)."""
    if not isinstance(ignore_zero_hits, (bool, np.bool_)) and not (
        isinstance(ignore_zero_hits, int) and ignore_zero_hits in (0, 1)
    ):
        raise TypeError(f"ignore_zero_hits must be True or False, got {ignore_zero_hits!r}")
    return "skip" if ignore_zero_hits else "zero"


_METRIC_ARGS = (
    "self", "top_k", "ignore_zero_hits", "output_transform", "device", "skip_unrolling", "query_mode"
)  # fmt: skip
_CONVENTIONS = frozenset(f.name for f in dataclasses.fields(ListConventions))
_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def list_signature(row: ListMetricRow) -> inspect.Signature:
    """The constructor's signature (``self`` first) of the class of ``row``: ignite's order,
    the kernel's options and annotations, the row's ignite defaults where they differ."""
    kernel = inspect.signature(row.kernel).parameters
    graded = "gain" in kernel

    def spec(name: str) -> tuple[str, Any, Any]:
        annotation = str(kernel[name].annotation).replace("Array", "Any")  # the caller's arrays
        return IGNITE_NAMES.get(name, name), row.ignite.defaults.get(name, kernel[name].default), annotation

    positional = GRADED_POSITIONAL if graded else ()
    last = ("confidence", "chance")  # every list kernel's: after ignite's options
    own = [
        n for n in kernel if n != "top_k" and n not in _CONVENTIONS and n not in positional and n not in last
    ]
    keyword = [*own, *(() if graded else ("relevance_threshold",)), "ties", "seed", *last]
    params = [
        inspect.Parameter("self", _POSITIONAL),
        *parameters([spec("top_k")] if row.takes_k else []),
        *parameters([("ignore_zero_hits", True, "bool")]),
        *parameters(spec(n) for n in positional),
        *FRAMEWORK_PARAMETERS,
        *parameters((spec(n) for n in keyword), inspect.Parameter.KEYWORD_ONLY),
        *parameters([("query_mode", "contiguous", "str")], inspect.Parameter.KEYWORD_ONLY),
    ]
    return inspect.Signature(params, return_annotation="None")


def _described(signature: inspect.Signature) -> dict[str, str]:
    """:data:`LIST_ARGS` for ``signature``: one description per argument, by its default
    where it depends on it."""
    out = {}
    for name, param in signature.parameters.items():
        text = LIST_ARGS.get(name)
        out[name] = text.get(param.default) if isinstance(text, dict) else text
        if name != "self" and out[name] is None:
            raise KeyError(f"no description of the argument {name!r} with default {param.default!r}")
    return out


def _builder(row: ListMetricRow, signature: inspect.Signature) -> Callable[[Any, dict[str, Any]], None]:
    """The constructor's body: the kernel from the bound arguments, then the metric."""
    kernel_args = {name: name for name in signature.parameters if name not in _METRIC_ARGS}
    kernel_args |= {ignite: kernel for kernel, ignite in IGNITE_NAMES.items() if ignite in kernel_args}
    # the public attributes: the metric's positional arguments but the framework's (and top_k,
    # read back from the kernel)
    shown = [
        name
        for name, p in signature.parameters.items()
        if p.kind is _POSITIONAL and (name == "ignore_zero_hits" or name not in _METRIC_ARGS)
    ]

    def build(self: KernelMetric, arguments: dict[str, Any]) -> None:
        options = {kernel_args[name]: arguments[name] for name in kernel_args}
        empty = empty_policy(arguments["ignore_zero_hits"])
        k = (arguments["top_k"],) if row.takes_k else ()
        kernel = row.kernel(*k, empty=empty, **options)
        if row.takes_k:
            self.top_k = kernel.top_k
        for name in shown:
            setattr(self, name, arguments[name])
        KernelMetric.__init__(
            self,
            kernel,
            arguments["output_transform"],
            arguments["device"],
            arguments["skip_unrolling"],
            query_mode=arguments["query_mode"],
        )

    return build


def list_metric_class(row: ListMetricRow, module: str = __name__) -> type[KernelMetric]:
    """The ignite metric class of ``row`` (named ``row.ignite.name``, defined in ``module``)."""
    signature = list_signature(row)
    doc = docstring(row.ignite.doc, signature, _described(signature))
    return derived_class(row.ignite.name, KernelMetric, module, signature, doc, _builder(row, signature))


def _classes() -> dict[str, type[KernelMetric]]:
    out: dict[str, type[KernelMetric]] = {}
    for row in LIST_METRICS:
        cls = list_metric_class(row)
        out.update(dict.fromkeys((row.ignite.name, *row.ignite.also), cls))
    return out


#: the list metric classes by public name, other names included (``MRR``), in table order
CLASSES: dict[str, type[KernelMetric]] = _classes()
globals().update(CLASSES)  # where pickle looks a class up: this module, by its name

#: each metric's ignite defaults for the collection's kernels (``top_k`` comes from the name)
PEER_DEFAULTS: dict[str, dict[str, Any]] = {
    row.name: {k: v for k, v in row.ignite.defaults.items() if k != "top_k"} for row in LIST_METRICS
}


def register(row: ListMetricRow) -> type[KernelMetric]:
    """The ignite class of a row registered at runtime (:func:`rankstream.core.lists.table.register`):
    made as the table's (:func:`list_metric_class`), bound in this module under its names (where
    pickle finds it) and its defaults given to the collection (``ListMetrics``)."""
    cls = list_metric_class(row)
    named = dict.fromkeys((row.ignite.name, *row.ignite.also), cls)
    CLASSES.update(named)
    globals().update(named)
    PEER_DEFAULTS[row.name] = {k: v for k, v in row.ignite.defaults.items() if k != "top_k"}
    return cls


def _spelled(row: ListMetricRow) -> str:
    aliases = ", ".join(f"``{a}``" for a in row.aliases)
    return f"``{row.name}``" + (f" ({aliases})" if aliases else "")


class ListMetrics(KernelMetric):
    """Several list metrics from one validation and one top-k selection per batch:
    ``ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5", "hit_rate@10"])``.
    ``compute()`` returns ``{name: value}``; attached to an ``Engine``, each name is also put in
    ``engine.state.metrics`` (after ``prefix``). With ``confidence=0.95`` every name is followed
    by ``"{name}_stderr"``, ``"{name}_ci_low"``, ``"{name}_ci_high"`` and ``"{name}_count"``; with
    ``chance=True`` by ``"{name}_expected"``, ``"{name}_adjusted"`` and ``"{name}_z"``.

    Names are written as ranx and ir_measures write them, case-insensitive, each with ``@k`` or
    without (the whole list; see `rankstream.core.lists.collection`):

    {names}.

    Each metric takes the defaults of its class here (`MAP`: ``Z = min(R, k)``; `NDCG`, `DCG`:
    ``2^y - 1`` gains, labels below 1.0 count as 0; `Precision`: over ``k``; relevant meaning
    ``y > 0`` otherwise).
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
        confidence: float | None = None,
        chance: bool = False,
        query_mode: str = "contiguous",
        items: ItemData | None = None,
    ) -> None:
        kernel = from_arguments(
            CollectionKernel, locals(), defaults=PEER_DEFAULTS, empty=empty_policy(ignore_zero_hits)
        )
        self.metrics, self.ignore_zero_hits, self.confidence = kernel.metrics, ignore_zero_hits, confidence
        self.chance, self.items = chance, items
        super().__init__(kernel, output_transform, device, skip_unrolling, prefix, query_mode=query_mode)


ListMetrics.__doc__ = docstring(
    inspect.cleandoc(ListMetrics.__doc__ or "").replace(
        "{names}", textwrap.fill(", ".join(map(_spelled, LIST_METRICS)), 92, break_on_hyphens=False)
    ),
    inspect.signature(ListMetrics),
    {
        **LIST_ARGS,
        "metrics": 'the metric names, e.g. ``["ndcg@10", "map@5"]``.',
        "ignore_zero_hits": LIST_ARGS["ignore_zero_hits"].removesuffix(".") + ", for all.",
        "ties": LIST_ARGS["ties"].removesuffix(".") + ", for all.",
        "prefix": "prepended to every name (two collections on one engine).",
        "confidence": "None (default) or a level in (0, 1), e.g. 0.95: every name is followed by "
        '``"{name}_stderr"``, ``"{name}_ci_low"``, ``"{name}_ci_high"`` and ``"{name}_count"`` (the standard '
        "error of the mean over the lists, Student's t interval at that level, the lists counted).",
        "chance": 'False (default) or True: every name is followed by ``"{name}_expected"``, '
        '``"{name}_adjusted"`` and ``"{name}_z"`` (the mean under a uniformly random ranking, the '
        "chance-adjusted index and the z-score; see docs/chance.md).",
        "items": "None (default) or the catalog's ``ItemData``: then the beyond-accuracy names "
        '(``"coverage@10"``, ``"novelty@10"``, ...; docs/beyond_accuracy.md) may stand beside the '
        "accuracy names, over the same top-k selection (score columns are the item ids).",
    },
)
