"""Keras 3 metrics: the list metrics of the one table
(:data:`~rankstream.core.lists.table.LIST_METRICS`), each class made from its row by
:func:`list_metric_class` (keras-rs's ``NDCG``, ``DCG``, ``MAP``, ``MeanReciprocalRank``,
``PrecisionAtK``, ``RecallAtK`` of ``keras_rs.metrics`` 0.4.0, with ``HitRateAtK`` and
``RPrecision`` in its conventions), and the collection :class:`ListMetrics`, over the one
lifecycle :class:`~rankstream.adapters.keras_lifecycle.KernelMetric`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import keras
from keras import ops as K

from rankstream.adapters.keras_args import Seed, args_section, describe, signature
from rankstream.adapters.keras_lifecycle import KernelMetric, query_ids_settings
from rankstream.core.beyond.items import ItemData
from rankstream.core.inputs import check_k
from rankstream.core.lists.collection import ListMetrics as ListMetricsKernel
from rankstream.core.lists.ndcg import GAIN_NAMES
from rankstream.core.lists.table import LIST_METRICS, WHOLE_LIST, ListMetricRow
from rankstream.core.topk import check_ties


@keras.saving.register_keras_serializable(package="rankstream")
def default_gain_fn(label: Any) -> Any:
    """``2^label - 1``."""
    return K.subtract(K.power(2.0, label), 1.0)


@keras.saving.register_keras_serializable(package="rankstream")
def default_rank_discount_fn(rank: Any) -> Any:
    """``1 / log2(rank + 1)`` of the 1-based rank."""
    return K.divide(1.0, K.log2(K.add(rank, 1.0)))


#: the kernel arguments every list metric sets the same way (the rest are the kernel's own
#: options, keyword-only in the class, with the row's peer defaults)
_SHARED = frozenset(
    "top_k gain discount relevance_threshold empty ties seed weighting negative_labels confidence "
    "chance".split()
)

#: the inputs of every list metric (added after a row's docstring opening unless it states them)
INPUTS = """\
``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
keras-rs."""


def tie_policy(shuffle_ties: bool, ties: str | None) -> str:
    """The tie policy: ``ties`` where given (``"first"``, ``"random"`` or ``"expected"``), else
    keras-rs's ``shuffle_ties`` (``"random"`` or ``"first"``)."""
    if ties is None:
        return "random" if shuffle_ties else "first"
    return check_ties(ties)


def keras_rs_conventions(shuffle_ties: bool, ties: str | None = None) -> dict[str, str]:
    """The list conventions of keras-rs: shuffled (or first-index) ties, per-item weights and
    list weights collapsed as ``get_list_weights`` does, labels below 0 (and NaN) as padding;
    ``ties`` (where given) overrides ``shuffle_ties``."""
    return {"ties": tie_policy(shuffle_ties, ties), "weighting": "keras_rs", "negative_labels": "mask"}


def seed_generator(shuffle_ties: bool, seed: Any) -> Any:
    """The Keras ``SeedGenerator`` of shuffled ties (None without shuffling)."""
    if not isinstance(shuffle_ties, bool):
        raise TypeError(f"shuffle_ties must be a bool, got {shuffle_ties!r}")
    if isinstance(seed, keras.random.SeedGenerator):
        return seed if shuffle_ties else None
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int, a keras.random.SeedGenerator or None, got {seed!r}")
    return keras.random.SeedGenerator(seed) if shuffle_ties else None


def check_gain_args(gain_fn: Any, rank_discount_fn: Any) -> None:
    """keras-rs's ``gain_fn`` (a callable or one of the named gains) and ``rank_discount_fn``
    (a callable), else ``TypeError`` / ``ValueError`` naming the argument."""
    if not callable(rank_discount_fn):
        raise TypeError(f"rank_discount_fn must be a callable of the rank, got {rank_discount_fn!r}")
    if not (callable(gain_fn) or gain_fn in GAIN_NAMES):
        kind = ValueError if isinstance(gain_fn, str) else TypeError
        raise kind(f"gain_fn must be a callable or one of {GAIN_NAMES}, got {gain_fn!r}")


class _ListMetric(KernelMetric):
    """A list metric with keras-rs's conventions (per-item weights, -1 padding, shuffled ties)
    over the kernel of its table row; each public class is made by :func:`list_metric_class`."""

    _row: ClassVar[ListMetricRow]
    _gain: ClassVar[bool] = False  # the kernel takes a gain and a discount (NDCG, DCG)
    threshold: ClassVar[float | None] = 1.0  # the default relevance_threshold

    def _setup(self, *, shuffle_ties: bool, seed: Any, name: str | None, dtype: Any, relevance_threshold: Any,
               empty: str, state_dtype: str | None, confidence: float | None, chance: bool = False,
               ties: str | None = None,
               query_ids: bool = False, max_queries: int | None = None,
               max_query_length: int | None = None, query_mode: str = "whole",
               k: int | None = None,
               gain_fn: Callable[[Any], Any] | str | None = None,
               rank_discount_fn: Callable[[Any], Any] | None = None, **options: Any) -> None:  # fmt: skip
        """The constructor of every list metric, given all of its class's arguments by name
        (``options``: the kernel's own, such as ``denominator``)."""
        kernel_kw = dict(options)
        if self._gain:
            check_gain_args(gain_fn, rank_discount_fn)
            self.gain_fn, self.rank_discount_fn = gain_fn, rank_discount_fn
            gain = "exp_rank" if gain_fn is default_gain_fn else gain_fn  # named: one topk of the labels
            kernel_kw.update(gain=gain, discount=rank_discount_fn)
        self.relevance_threshold, self.empty, self.confidence = relevance_threshold, empty, confidence
        for key, value in options.items():  # the kernel's own options: public settings
            setattr(self, key, value)
        self.k, self.shuffle_ties, self.seed, self.ties = check_k(k), shuffle_ties, seed, ties
        seed_generator(shuffle_ties, seed)  # the arguments checked as given
        generator = seed_generator(tie_policy(shuffle_ties, ties) == "random", seed)
        conv = {"relevance_threshold": relevance_threshold, "empty": empty, **kernel_kw}
        if confidence is not None:
            conv["confidence"] = confidence
        self.chance = chance
        if chance is not False:  # the kernel checks it is a bool
            conv["chance"] = chance
        conv.update(keras_rs_conventions(shuffle_ties, ties))
        query = query_ids_settings(query_ids, max_queries, max_query_length, query_mode)
        top_k = [WHOLE_LIST if k is None else k] if self._row.takes_k else []
        kernel = self._row.kernel(*top_k, **conv)
        short = self._row.name
        name = name if name is not None else short if self.k is None else f"{short}@{self.k}"
        super().__init__(kernel, name=name, dtype=dtype, seed_generator=generator, state_dtype=state_dtype)
        self._set_query_ids(query, query_ids, max_queries, max_query_length, query_mode)

    def get_config(self) -> dict[str, Any]:
        return with_query_ids(
            with_confidence(super().get_config(), self.confidence, self.chance, self.ties), self
        )


def with_query_ids(config: dict[str, Any], metric: KernelMetric) -> dict[str, Any]:
    """A metric's config with its query-id settings where ``query_ids`` is on (without it, the
    config is as it always was)."""
    if getattr(metric, "query_ids", False):
        for key in QUERY_SETTINGS:
            config[key] = getattr(metric, key)
    return config


#: the query-id settings of every list metric (keyword-only)
QUERY_SETTINGS = ("query_ids", "max_queries", "max_query_length", "query_mode")


def with_confidence(
    config: dict[str, Any], confidence: float | None, chance: bool = False, ties: str | None = None
) -> dict[str, Any]:
    """A metric's config with its ``confidence`` level where one is set, ``chance`` where it is
    on and its ``ties`` policy where one is given (without them, the config of a metric reporting
    its value alone is as it always was)."""
    if confidence is not None:
        config["confidence"] = confidence
    if chance:
        config["chance"] = chance
    if ties is not None:
        config["ties"] = ties
    return config


def _list_signature(row: ListMetricRow) -> tuple[inspect.Signature, dict[str, Any], bool]:
    """The class's ``__init__`` signature in keras-rs's order, its kernel options (name ->
    default) and whether it takes a gain."""
    kernel = inspect.signature(row.kernel).parameters
    gain = "gain" in kernel
    peer = row.keras.defaults
    options = {n: (p.annotation, peer.get(n, p.default)) for n, p in kernel.items() if n not in _SHARED}
    threshold = peer.get("relevance_threshold", kernel["relevance_threshold"].default)
    positional: dict[str, tuple[str, Any]] = {"k": ("int | None", None)} if row.takes_k else {}
    if gain:
        positional["gain_fn"] = ("Callable[[Any], Any] | str", default_gain_fn)
        positional["rank_discount_fn"] = ("Callable[[Any], Any]", default_rank_discount_fn)
    positional.update(
        shuffle_ties=("bool", True), seed=("Seed", None), name=("str | None", None), dtype=("Any", None)
    )
    keyword = {
        **options,
        "relevance_threshold": ("float | None", threshold),
        "empty": ("str", "zero"),
        "state_dtype": ("str | None", None),
        "confidence": ("float | None", None),
        "chance": ("bool", False),
        "ties": ("str | None", None),
        "query_ids": ("bool", False),
        "max_queries": ("int | None", None),
        "max_query_length": ("int | None", None),
        "query_mode": ("str", "whole"),
    }
    return signature(positional, keyword), {n: d for n, (_, d) in options.items()}, gain


def _list_doc(row: ListMetricRow, sig: inspect.Signature, gain: bool) -> str:
    """The row's docstring opening, the inputs paragraph, and the ``Args:`` section."""
    doc = inspect.cleandoc(row.keras.doc) + "\n\n" + INPUTS
    variants = {
        "name": None if row.takes_k else "whole",
        "denominator": row.name,
        "relevance_threshold": "gain" if gain else None,
    }
    args = [(p, describe(p, variants.get(p), short=row.name)) for p in list(sig.parameters)[1:]]
    return f"{doc}\n\n{args_section(args)}\n"


def list_metric_class(row: ListMetricRow) -> type[KernelMetric]:
    """The Keras metric class of one row of the table: its name, signature (keras-rs's order:
    ``k`` where the metric has a cut-off, ``gain_fn`` and ``rank_discount_fn`` where the kernel
    takes a gain, ``shuffle_ties``, ``seed``, ``name``, ``dtype``, then keyword-only the kernel's
    own options, ``relevance_threshold``, ``empty`` and ``state_dtype``), defaults (the row's
    peer defaults), docstring and config, registered with Keras under its name."""
    sig, options, gain = _list_signature(row)
    config = ("shuffle_ties", "seed", "relevance_threshold", "empty")
    config = (("k",) if row.takes_k else ()) + config + (("gain_fn", "rank_discount_fn") if gain else ())

    def __init__(self: _ListMetric, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as exc:  # as Python words it for a written signature
            raise TypeError(f"{type(self).__name__}.__init__() {exc}") from None
        bound.apply_defaults()
        self._setup(**{key: value for key, value in bound.arguments.items() if key != "self"})

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    namespace = {
        "__init__": __init__,
        "__doc__": _list_doc(row, sig, gain),
        "__module__": __name__,
        "_row": row,
        "_gain": gain,
        "_config": config,
        "_options": options,
        "threshold": sig.parameters["relevance_threshold"].default,
    }
    cls = type(row.keras.name, (_ListMetric,), namespace)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return keras.saving.register_keras_serializable(package="rankstream")(cls)


#: every list metric class by its public name, its other names included (``MRR``)
LIST_CLASSES: dict[str, type[KernelMetric]] = {}
for _row in LIST_METRICS:
    _cls = list_metric_class(_row)
    LIST_CLASSES.update(dict.fromkeys((_row.keras.name, *_row.keras.also), _cls))
globals().update(LIST_CLASSES)  # each class where its __module__ and __qualname__ say
del _row, _cls

#: each list metric's defaults in a collection: its class's
COLLECTION_DEFAULTS = {
    row.name: {"relevance_threshold": cls.threshold, **cls._options}
    for row in LIST_METRICS
    for cls in [LIST_CLASSES[row.keras.name]]
}


def register(row: ListMetricRow) -> type[KernelMetric]:
    """The Keras class of a row registered at runtime (:func:`rankstream.core.lists.table.register`):
    made and registered with Keras as the table's (:func:`list_metric_class`), bound in this
    module under its names and its defaults given to the collection (``ListMetrics``)."""
    cls = list_metric_class(row)
    named = dict.fromkeys((row.keras.name, *row.keras.also), cls)
    LIST_CLASSES.update(named)
    globals().update(named)
    COLLECTION_DEFAULTS[row.name] = {"relevance_threshold": cls.threshold, **cls._options}
    return cls


@keras.saving.register_keras_serializable(package="rankstream")
class ListMetrics(KernelMetric):
    """Several list metrics from one selection per batch, ``ListMetrics(["ndcg@10", "map@5",
    "recall@20", "mrr@10", "precision@5", "hit_rate@10", "dcg@10"])``: ``result()`` is
    ``{name: value}``, each name a key of the logs (after ``prefix``).

    Names are written as ranx and ir_measures write them, case-insensitive: ``ndcg``, ``dcg``,
    ``map`` (``ap``), ``precision`` (``p``), ``recall`` (``r``), ``mrr`` (``rr``), ``hit_rate``
    (``hitrate``, ``success``), ``r_precision`` (``rprec``), each with ``@k`` or without (the
    whole list). Each metric takes its class's defaults here (`NDCG`, `DCG`: labels as they
    are; `MAP`: ``Z`` the weighted relevant count; `PrecisionAtK`: over ``min(k, valid
    items)``; relevant meaning ``y >= 1`` otherwise). With ``confidence=0.95`` every name is
    followed by ``name + "_stderr"``, ``"_ci_low"``, ``"_ci_high"`` and ``"_count"``; with
    ``chance=True`` by ``"_expected"``, ``"_adjusted"`` and ``"_z"``.

    Args:
        metrics: the metric names, e.g. ``["ndcg@10", "map@5"]``.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, for all.
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"list_metrics"``).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"``, for all.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
        prefix: prepended to every name (two collections in one model).
        confidence: None (default) or a level in (0, 1), e.g. 0.95: every name is followed by
            ``name + "_stderr"``, ``"_ci_low"``, ``"_ci_high"`` and ``"_count"`` in the result and
            the logs (the standard error of the mean over the lists, Student's t interval at
            that level, the lists counted).
        chance: False (default) or True: every name is followed by ``name + "_expected"``,
            ``"_adjusted"`` and ``"_z"`` (the mean under a uniformly random ranking of each
            list's items, ``(M - E) / (M_best - E)`` and ``(M - E) / sqrt(Var)``; see
            docs/chance.md).
        ties: None (default: as ``shuffle_ties`` says) or the tie policy, overriding it:
            ``"first"``, ``"random"`` or ``"expected"`` (the exact mean over every order of
            the tied items: reproducible where scores tie).
        query_ids: False (default: lists, as keras-rs) or True: flat items with a query id
            each, grouped into lists per batch (see docs/query_ids.md).
        max_queries: with ``query_ids``: the most distinct queries in one batch (required in
            a compiled step; eagerly a checked bound), or None.
        max_query_length: with ``query_ids``: the most items of one query in one batch
            (required in a compiled step; eagerly a checked bound), or None.
        query_mode: ``"whole"`` (each batch holds whole queries, unchecked: a query cut by a
            batch counts as two; the only mode in Keras).
        items: None (default) or the catalog's ``ItemData``: then the beyond-accuracy names
            (``"coverage@10"``, ``"novelty@10"``, ...; docs/beyond_accuracy.md) may stand beside
            the accuracy names, over the same top-k selection (``y_pred``'s columns are the
            item ids); in compiled steps too. Not part of ``get_config`` (give it again to
            ``from_config``'s class).
    """

    _config = ("metrics", "shuffle_ties", "seed", "empty", "prefix")

    def __init__(self, metrics: list[str], shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = "list_metrics", dtype: Any = None, *, empty: str = "zero",
                 state_dtype: str | None = None, prefix: str = "",
                 confidence: float | None = None, chance: bool = False,
                 ties: str | None = None, query_ids: bool = False, max_queries: int | None = None,
                 max_query_length: int | None = None, query_mode: str = "whole",
                 items: ItemData | None = None) -> None:  # fmt: skip
        query = query_ids_settings(query_ids, max_queries, max_query_length, query_mode)
        self.metrics, self.shuffle_ties, self.seed, self.empty = list(metrics), shuffle_ties, seed, empty
        self.confidence, self.chance, self.ties, self.items = confidence, chance, ties, items
        conventions = keras_rs_conventions(shuffle_ties, ties)
        kernel = ListMetricsKernel(
            metrics, COLLECTION_DEFAULTS, empty=empty, confidence=confidence, chance=chance, items=items,
            **conventions,
        )  # fmt: skip
        seed_generator(shuffle_ties, seed)  # the arguments checked as given
        generator = seed_generator(conventions["ties"] == "random", seed)
        super().__init__(kernel, name, dtype, generator, state_dtype, prefix)
        self._set_query_ids(query, query_ids, max_queries, max_query_length, query_mode)

    def get_config(self) -> dict[str, Any]:
        return with_query_ids(
            with_confidence(super().get_config(), self.confidence, self.chance, self.ties), self
        )
