"""The Keras 3 lifecycle of every rankstream metric: :class:`KernelMetric` (update_state /
result / reset_state / get_config / state_dict) over any kernel, and the logs of ``fit`` and
``evaluate`` that keep every metric's value (:func:`unique_logs`).

The state is one ``aggregation="sum"`` variable per field (replicas and distribution strategies
add them up): float64 where the backend has it (torch, TensorFlow, JAX with x64), else float32
with Kahan compensation (``<field>_compensation`` variables). Under ``jit`` nothing is read back:
lists (rows) with bad data are left out of the sums and counted, and ``result()`` is NaN while
:attr:`KernelMetric.invalid_count` is above 0. ``result()`` computes on the host in float64 when
the state can be read back (eager, CPU), else with ``keras.ops`` in the state's dtype. A kernel
that reports more quantities than its value (``kernel.quantities``) gives a dict result,
``{name: value, f"{name}_{q}": ...}``, so the logs show ``ndcg@10`` and ``ndcg@10_stderr``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import keras
import numpy as np
from keras import ops as K

from rankstream.adapters.keras_inputs import in_keras_terms, keras_inputs, query_inputs, symbolic
from rankstream.adapters.keras_state import (
    add_to,
    read_sums,
    resolve_state_dtype,
    state_variables,
    total_tensors,
    write_sums,
)
from rankstream.core import execution
from rankstream.core.backends.keras_grouping import batch_stats, group_query_items
from rankstream.core.backends.keras_ops import is_tracing, keras_ops
from rankstream.core.grouping import check_query_mode
from rankstream.core.state import Kernel, pack_state, unpack_state


def unique_logs(results: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Metric results ``(name, value)``, a value or a dict of values (a ``ListMetrics``
    result), flattened into one dict without losing a value: a key already taken, by another
    metric or another dict, becomes ``key_1``, ``key_2``, ... as Keras names two plain metrics
    of one name, the first in ``compile``'s order keeping the plain name. (Keras flattens dicts
    into the logs one over another, so a ``ListMetrics`` key and a metric of the same name,
    ``"map@5"``, would leave one value.)"""
    out: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for inner, v in value.items():
                put(inner, v)
            return
        name, i = key, 1
        while name in out:
            name, i = f"{key}_{i}", i + 1
        out[name] = value

    for key, value in results:
        put(key, value)
    return out


def _install_unique_logs() -> None:
    """Make Keras' ``Model.get_metrics_result`` (the logs of ``fit``, ``evaluate`` and the
    callbacks, on every backend, compiled or not) flatten the metrics' results with
    :func:`unique_logs`: where no two keys meet, the same logs as Keras'."""
    owner = next((c for c in keras.Model.__mro__ if "get_metrics_result" in c.__dict__), None)
    if owner is None or getattr(owner.get_metrics_result, "_rankstream_unique", False):
        return
    original = owner.get_metrics_result

    def get_metrics_result(self: Any) -> dict[str, Any]:
        return unique_logs((metric.name, metric.result()) for metric in self.metrics)

    get_metrics_result._rankstream_unique = True  # type: ignore[attr-defined]
    get_metrics_result.__doc__ = original.__doc__
    owner.get_metrics_result = get_metrics_result


_install_unique_logs()


def read_only(attribute: str, annotation: str) -> Any:
    """A metric's public read-only setting: a property with no setter that returns
    ``self.<attribute>`` (the private attribute the constructor checked and kept), its getter's
    return annotation ``annotation``."""

    def getter(self: Any) -> Any:
        return getattr(self, attribute)

    getter.__annotations__ = {"return": annotation}
    return property(getter)


class KernelMetric(keras.metrics.Metric):
    """A Keras ``Metric`` over any rankstream kernel (its ``fields`` become the variables).

    :meth:`state_dict` / :meth:`load_state_dict` read and write the state as float64 arrays
    saying which metric and settings they belong to (a ``.keras`` file keeps no metric state,
    and ``evaluate`` resets the metrics). Bad data raises naming the argument and leaves the
    state as it was; where nothing can be read back it is counted (see the module docstring).

    Args:
        kernel: the metric's definition, e.g. ``rankstream.MAPKernel(top_k=[5, 10])``.
        name: the metric's name, as for every Keras metric.
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        seed_generator: the ``keras.random.SeedGenerator`` of random tie orders (in
            ``variables``, so it advances under JAX ``jit``), or None.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
        prefix: prepended to every key of a dict result.
    """

    #: how ``update_state`` reads its arguments: keras-rs's list layout, or rank targets
    _ranks = False
    #: the public settings written by ``get_config`` (attribute names), with those of ``_options``
    _config: tuple[str, ...] = ()
    _options: ClassVar[dict[str, Any]] = {}  # keyword-only settings: their defaults

    def __init__(
        self,
        kernel: Kernel,
        name: str | None = None,
        dtype: Any = None,
        seed_generator: keras.random.SeedGenerator | None = None,
        state_dtype: str | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        self._requested_state_dtype = state_dtype
        self._state_dtype = resolve_state_dtype(state_dtype)
        self._kernel = kernel
        self._fields = dict(kernel.fields)
        self._compensated = self._state_dtype == "float32"
        self._prefix = prefix
        self._seed_generator = seed_generator
        self._runtime = kernel.runtime(seed_generator)

        self._totals, self._compensations = state_variables(
            self, self._fields, self._state_dtype, self._compensated
        )
        self._query: QueryIds | None = None

    kernel = read_only("_kernel", "Kernel")
    prefix = read_only("_prefix", "str")

    @property
    def state_dtype(self) -> str:
        """The dtype of the state variables (``"float64"`` or compensated ``"float32"``)."""
        return self._state_dtype

    @property
    def variables(self) -> list[Any]:
        extra = [] if self._seed_generator is None else [self._seed_generator.state]
        return super().variables + extra

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        # as asked (None: the loading backend's default), so a saved model loads anywhere
        config["state_dtype"] = self._requested_state_dtype
        config.update({key: serialize(getattr(self, key)) for key in (*self._config, *self._options)})
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> KernelMetric:
        return cls(**deserialize_config(config))

    # -- the state -----------------------------------------------------------------------
    def _sums(self) -> dict[str, Any]:
        """The field sums as float64 numpy arrays (compensation applied; a host read)."""
        return dict(zip(self._fields, read_sums(self._totals, self._compensations), strict=True))

    def state_dict(self) -> dict[str, Any]:
        """A snapshot: ``{"format", "metric", "config", "fields", "sums"}``
        (:func:`rankstream.core.state.pack_state`), e.g. ``state_dict()["sums"]["invalid"]``."""
        return pack_state(self._kernel, self._sums(), metric=type(self).__name__)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Set the state to ``state`` (from :meth:`state_dict` of a metric of the same class and
        settings), validated whole before anything is assigned. To continue an interrupted
        ``evaluate``, load after Keras' reset, e.g. in a callback's ``on_test_batch_begin`` at
        batch 0 (``on_test_begin`` runs before the reset)."""
        values = unpack_state(
            self._kernel, state, metric=type(self).__name__, owner="state", state_dtype=self._state_dtype
        )
        write_sums([values[f] for f in self._fields], self._totals, self._compensations)

    @property
    def invalid_count(self) -> int:
        """How many lists (rank-based metrics: rows) with bad data were counted where
        ``update_state`` could not raise; ``result()`` is NaN while this is above 0, until
        ``reset_state()``. A host read (call it outside ``jit``)."""
        return round(float(self._sums()["invalid"])) if "invalid" in self._fields else 0

    def reset_state(self) -> None:
        for v in self._totals + self._compensations:
            v.assign(K.zeros(v.shape, dtype=v.dtype))

    # -- update --------------------------------------------------------------------------
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Add one batch; on error the state (and the random stream) is left as it was.
        Lists: ``y_true`` labels or ``{"labels": y, "mask": m}``, ``y_pred`` scores, both
        ``(batch, list_size)`` or ``(list_size,)``; ``sample_weight`` scalar, ``(batch,)``,
        ``(batch, 1)`` or ``(batch, list_size)``. Rank metrics: ``y_true`` the true index
        ``(batch,)`` (or ``(batch, 1)``), binary labels ``(batch, num_candidates)`` (eager only:
        the number of tasks is data-dependent) or the dict; ``sample_weight`` per row."""
        if self._ranks and symbolic():  # Keras inferring shapes: no data, nothing to add
            return
        if self._query is not None:  # flat items with query ids: grouped into lists first
            self._update_query_ids(y_true, y_pred, sample_weight)
            return
        y_pred, y, mask, weight = keras_inputs(y_true, y_pred, sample_weight, self.dtype, self._ranks)
        sums = batch_sums(self._kernel, self._runtime, self._seed_generator, y_pred, y, mask, weight)
        if sums is None:  # no list: nothing changes, the random stream neither
            return
        for i, field in enumerate(self._fields):  # nothing here can fail on data
            comp = self._compensations[i] if self._compensated else None
            add_to(self._totals[i], sums[field], comp)

    def _set_query_ids(
        self,
        query: QueryIds | None,
        query_ids: bool,
        max_queries: Any,
        max_query_length: Any,
        query_mode: str,
    ) -> None:
        """Read flat items with query ids (``query`` from :func:`query_ids_settings`; None: lists)."""
        self._query = query
        self.query_ids, self.max_queries, self.max_query_length = query_ids, max_queries, max_query_length
        self.query_mode = query_mode

    def _update_query_ids(self, y_true: Any, y_pred: Any, sample_weight: Any) -> None:
        """Add one batch of flat items with query ids (:func:`query_inputs`), grouped into lists
        (:func:`group_query_items`): eagerly any number of queries, a bound exceeded or bad ids
        raising; in a compiled step ``(max_queries, max_query_length)`` lists, a batch over a
        bound (or with ids that are not exact integers) left out of the sums and counted in
        ``invalid``, so that ``result()`` reads NaN rather than a value missing items."""
        if symbolic():  # Keras inferring shapes: no data, nothing to add
            return
        q = self._query
        traced = is_tracing(y_pred) or is_tracing(
            next(iter(y_true.values())) if isinstance(y_true, Mapping) else y_true
        )
        ids, scores, labels, mask, weight, bad = unconverted(query_inputs)(
            y_true, y_pred, sample_weight, self.dtype, not traced
        )
        bounded = q.max_queries is not None and q.max_query_length is not None
        if traced and not bounded:
            raise ValueError(
                f"{self.name}: query ids inside a compiled step (jit_compile, a TensorFlow graph, "
                "torch.compile) need static bounds: give max_queries (the most queries in a batch) and "
                f"max_query_length (the longest query), got max_queries={q.max_queries}, "
                f"max_query_length={q.max_query_length}; or run eagerly (run_eagerly=True)"
            )
        if not traced and ids.shape[0] == 0:  # no item: nothing changes
            return
        per_item = weight is not None and len(weight.shape) == 1
        items = (scores, labels) + ((mask,) if mask is not None else ()) + ((weight,) if per_item else ())
        # with both bounds the lists are (max_queries, max_query_length), eager or compiled: the
        # same arithmetic, and no host read of the batch's shape
        lists, valid, over, _ = group_query_items(
            ids, items, q.max_queries, q.max_query_length, bounded, traced
        )
        if not traced and bool(K.convert_to_numpy(over)):
            n_q, longest = batch_stats(ids)
            exceeded = [
                f"{name}={bound}"
                for name, bound, got in (
                    ("max_queries", q.max_queries, n_q),
                    ("max_query_length", q.max_query_length, longest),
                )
                if bound is not None and got > bound
            ]
            raise ValueError(
                f"{self.name}: a batch of {n_q} queries (the longest of {longest} items) exceeds "
                f"{' and '.join(exceeded)}; raise the bound, and batch whole queries (fit shuffles "
                "arrays unless shuffle=False). In a compiled step such a batch is left out of the sums "
                "and counted as invalid"
            )
        scores, labels = lists[0], lists[1]
        if mask is not None:
            valid = K.logical_and(valid, lists[2])
        if per_item:
            weight = lists[-1]
        sums = batch_sums(self._kernel, self._runtime, self._seed_generator, scores, labels, valid, weight)
        if sums is None:
            return
        if traced:
            flag = over if bad is None else K.logical_or(over, bad)
            sums = {f: K.where(flag, K.zeros_like(v), v) for f, v in sums.items()}
            if "invalid" in sums:
                sums["invalid"] = K.add(sums["invalid"], K.cast(flag, sums["invalid"].dtype))
        for i, field in enumerate(self._fields):
            comp = self._compensations[i] if self._compensated else None
            add_to(self._totals[i], sums[field], comp)

    # -- result --------------------------------------------------------------------------
    def totals(self) -> dict[str, Any]:
        """The state's field sums as tensors (compensation applied)."""
        return dict(zip(self._fields, total_tensors(self._totals, self._compensations), strict=True))

    def result(self) -> Any:
        """The metric: a scalar (one ``k``), a vector, or a dict of scalars (``prefix`` on
        every key). 0 before any list or task (the Keras convention of an empty mean). A kernel
        reporting ``quantities`` beside its value gives ``{name: value, f"{name}_{q}": ...}``
        (``prefix`` on every key), each entry as the value alone would be."""
        return unconverted(self._result)()

    def _result(self) -> Any:
        totals = self.totals()
        first = next(iter(totals.values()))
        if keras_ops(first).can_read(first):  # eager, CPU: float64 on the host
            values = self._kernel.compute(self._sums(), np)
        else:
            values = self._kernel.compute(totals, K)
        selected = self._kernel.select(values)
        quantities = getattr(self._kernel, "quantities", ())
        if not quantities or not isinstance(selected, Mapping) or "value" not in selected:
            return as_result(selected, self.dtype, self._prefix)
        named = {self.name: selected["value"], **{f"{self.name}_{q}": selected[q] for q in quantities}}
        return {f"{self._prefix}{key}": as_result(v, self.dtype) for key, v in named.items()}


# ------------------------------------------------------------------------------------------
# query ids


class QueryIds:
    """How a list metric reads flat items with query ids (``query_ids=True``): the static bounds
    of a compiled step and the query mode (``"whole"`` only: see :func:`query_ids_settings`)."""

    def __init__(self, max_queries: int | None, max_query_length: int | None) -> None:
        self.max_queries, self.max_query_length = max_queries, max_query_length


def _bound(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return int(value)


def query_ids_settings(
    query_ids: bool, max_queries: Any, max_query_length: Any, query_mode: str
) -> QueryIds | None:
    """The checked query-id settings of a list metric (None: lists, as keras-rs). Only
    ``query_mode="whole"`` (each batch holds whole queries): ``"contiguous"`` and ``"sorted"``
    carry an open query between batches (and ``"contiguous"`` the ids of the closed queries),
    ``"any"`` stores every item until the result, none of which is a fixed-shape sum that Keras'
    ``aggregation="sum"`` variables can hold, add up across replicas or keep inside a compiled
    step."""
    if not isinstance(query_ids, bool):
        raise TypeError(f"query_ids must be a bool, got {query_ids!r}")
    check_query_mode(query_mode)
    if query_mode != "whole":
        raise ValueError(
            f"query_mode={query_mode!r} is not available in Keras: only 'whole' (each batch holds whole "
            "queries). Keras metric state is fixed-shape variables summed across replicas, so neither an "
            "open query carried to the next batch with the ids of the closed ones ('contiguous', 'sorted') "
            "nor every item stored until result() ('any') fits it; batch the items by query (e.g. "
            "tf.data's group_by_window or a dataset sorted by query id cut at query boundaries), or use "
            "rankstream.ignite / rankstream.torchmetrics"
        )
    bounds = _bound(max_queries, "max_queries"), _bound(max_query_length, "max_query_length")
    if not query_ids:
        if bounds != (None, None):
            raise ValueError(
                "max_queries and max_query_length bound flat items with query ids: pass query_ids=True "
                f"too (got max_queries={max_queries!r}, max_query_length={max_query_length!r})"
            )
        return None
    return QueryIds(*bounds)


# ------------------------------------------------------------------------------------------
# running kernel code inside a Keras step, and a metric's config


def unconverted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run as plain Python inside a TensorFlow graph: AutoGraph would otherwise rewrite
    every function the kernel calls, its numpy code too (about 3 s to trace one update of
    ``RankBasedMetrics``, 0.2 s without); the kernels have no data-dependent Python control
    flow to convert."""
    if keras.backend.backend() != "tensorflow":
        return fn
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def batch_sums(kernel: Any, runtime: Any, gen: Any, y_pred: Any, *batch: Any) -> dict[str, Any] | None:
    """The execution layer's ``batch_sums`` of one batch (an error names the arguments as Keras users write
    them), with the ``SeedGenerator`` ``gen`` rolled back when it raises or when the batch has
    no list (None then: nothing to add, and the random stream does not advance)."""
    seed_state = None if gen is None else K.copy(gen.state.value)
    like = next(iter(y_pred.values()))["y_pred"] if isinstance(y_pred, Mapping) else y_pred
    try:
        ctx = runtime.context(like, keras_ops(like))
        sums = unconverted(execution.batch_sums)(kernel, ctx, y_pred, *batch)
    except Exception as exc:
        if seed_state is not None:
            gen.state.assign(seed_state)
        renamed = in_keras_terms(exc)
        if renamed is exc:
            raise
        raise renamed from exc
    if like.shape[0] == 0 and not isinstance(y_pred, Mapping):
        if seed_state is not None:
            gen.state.assign(seed_state)
        return None
    return sums


def as_result(value: Any, dtype: Any, prefix: str = "") -> Any:
    """A kernel's selected value as a Keras ``result()``: a dict of scalars (``prefix`` on
    every key), a vector, or a scalar (a one-element vector too), cast to ``dtype``."""
    if isinstance(value, Mapping):
        return {f"{prefix}{key}": K.cast(v, dtype) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        value = K.stack([K.convert_to_tensor(v) for v in value])
    if tuple(value.shape) == (1,):
        value = K.reshape(value, ())
    return K.cast(value, dtype)


def serialize(value: Any) -> Any:
    """A metric setting as Keras config (callables serialized; a generator is not config)."""
    if isinstance(value, keras.random.SeedGenerator):
        return None  # a generator is not config: a reloaded metric draws a fresh stream
    return keras.saving.serialize_keras_object(value) if callable(value) else value


def deserialize_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A metric's config with its serialized callables (gain, discount) deserialized."""
    de = keras.saving.deserialize_keras_object
    return {k: de(v) if isinstance(v, dict) and "class_name" in v else v for k, v in config.items()}
