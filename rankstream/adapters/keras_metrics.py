"""Keras 3 adapter: one lifecycle (:class:`KernelMetric`: update_state / result / reset_state /
get_config / state_dict) over any kernel, and the public metrics as declarations: a kernel with
keras-rs's conventions (``NDCG``, ``DCG``, ``MAP``, ``MeanReciprocalRank``, ``PrecisionAtK``,
``RecallAtK`` of ``keras_rs.metrics`` 0.4.0; ``HitRateAtK``, ``RPrecision``) or a PyKEEN rank
family, their signature and their config.

The state is one ``aggregation="sum"`` variable per field (replicas and distribution strategies
add them up): float64 where the backend has it (torch, TensorFlow, JAX with x64), else float32
with Kahan compensation (``<field>_compensation`` variables). Under ``jit`` nothing is read back:
lists (rows) with bad data are left out of the sums and counted, and ``result()`` is NaN while
:attr:`KernelMetric.invalid_count` is above 0. ``result()`` computes on the host in float64 when
the state can be read back (eager, CPU), else with ``keras.ops`` in the state's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import keras
import numpy as np
from keras import ops as K

from rankstream.core import lists as km
from rankstream.core.backends import keras_ops as kb
from rankstream.core.inputs import check_k
from rankstream.core.lists.ndcg import GAIN_NAMES
from rankstream.core.ranks.kernel import RankKernel
from rankstream.core.state import Kernel, pack_state, unpack_state

# k=None (the whole list): a cut-off past any list's end, which the kernels clip to the list.
WHOLE_LIST = 2**31 - 1
Seed = int | keras.random.SeedGenerator | None


@keras.saving.register_keras_serializable(package="rankstream")
def default_gain_fn(label: Any) -> Any:
    """``2^label - 1``."""
    return K.subtract(K.power(2.0, label), 1.0)


@keras.saving.register_keras_serializable(package="rankstream")
def default_rank_discount_fn(rank: Any) -> Any:
    """``1 / log2(rank + 1)`` of the 1-based rank."""
    return K.divide(1.0, K.log2(K.add(rank, 1.0)))


def unique_logs(results: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Metric results ``(name, value)``, a value or a dict of values (a :class:`ListMetrics`
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
        self._state_dtype = kb.resolve_state_dtype(state_dtype)
        self._kernel = kernel
        self._fields = dict(kernel.fields)
        self._compensated = self._state_dtype == "float32"
        self._prefix = prefix
        self._seed_generator = seed_generator
        self._runtime = kernel.runtime(seed_generator)

        self._totals, self._compensations = kb.state_variables(
            self, self._fields, self._state_dtype, self._compensated
        )

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    @property
    def prefix(self) -> str:
        return self._prefix

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
        config.update({key: kb.serialize(getattr(self, key)) for key in (*self._config, *self._options)})
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> KernelMetric:
        return cls(**kb.deserialize_config(config))

    # -- the state -----------------------------------------------------------------------
    def _sums(self) -> dict[str, Any]:
        """The field sums as float64 numpy arrays (compensation applied; a host read)."""
        return dict(zip(self._fields, kb.read_sums(self._totals, self._compensations), strict=True))

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
        kb.write_sums([values[f] for f in self._fields], self._totals, self._compensations)

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
        if self._ranks and kb.symbolic():  # Keras inferring shapes: no data, nothing to add
            return
        y_pred, y, mask, weight = kb.keras_inputs(y_true, y_pred, sample_weight, self.dtype, self._ranks)
        sums = kb.batch_sums(self._kernel, self._runtime, self._seed_generator, y_pred, y, mask, weight)
        if sums is None:  # no list: nothing changes, the random stream neither
            return
        for i, field in enumerate(self._fields):  # nothing here can fail on data
            comp = self._compensations[i] if self._compensated else None
            kb.add_to(self._totals[i], sums[field], comp)

    # -- result --------------------------------------------------------------------------
    def totals(self) -> dict[str, Any]:
        """The state's field sums as tensors (compensation applied)."""
        return dict(zip(self._fields, kb.total_tensors(self._totals, self._compensations), strict=True))

    def result(self) -> Any:
        """The metric: a scalar (one ``k``), a vector, or a dict of scalars (``prefix`` on
        every key). 0 before any list or task (the Keras convention of an empty mean)."""
        return kb.unconverted(self._result)()

    def _result(self) -> Any:
        totals = self.totals()
        first = next(iter(totals.values()))
        if kb.keras_ops(first).can_read(first):  # eager, CPU: float64 on the host
            values = self._kernel.compute(self._sums(), np)
        else:
            values = self._kernel.compute(totals, K)
        return kb.as_result(self._kernel.select(values), self.dtype, self._prefix)


class _ListMetric(KernelMetric):
    """The list metrics' constructor with keras-rs's conventions (per-item weights, -1 padding,
    shuffled ties): a kernel (``_kernel_cls``), keras-rs's signature and defaults, and the
    keyword-only ``_options`` (each public subclass states its own signature and arguments)."""

    _kernel_cls: Any = None
    _short, threshold = "", 1.0  # the name's stem; the default relevance_threshold
    _config: tuple[str, ...] = ("k", "shuffle_ties", "seed", "relevance_threshold", "empty")

    def __init__(self, k: int | None = None, shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = None, dtype: Any = None, *, relevance_threshold: float | None = 1.0,
                 empty: str = "zero", state_dtype: str | None = None, **options: Any) -> None:  # fmt: skip
        if unknown := sorted(set(options) - set(self._options)):
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments {unknown}")
        self.relevance_threshold, self.empty = relevance_threshold, empty
        options = {**self._options, **options}
        for key, value in options.items():  # public settings (in the config)
            setattr(self, key, value)
        self._build(k, shuffle_ties, seed, name, dtype, state_dtype, **options)

    def _build(self, k: Any, shuffle_ties: bool, seed: Any, name: Any, dtype: Any, state_dtype: Any,
               **kernel_kw: Any) -> None:  # fmt: skip
        self.k, self.shuffle_ties, self.seed = check_k(k), shuffle_ties, seed
        generator = kb.seed_generator(shuffle_ties, seed)
        conv = {"relevance_threshold": self.relevance_threshold, "empty": self.empty, **kernel_kw}
        conv.update(kb.keras_rs_conventions(shuffle_ties))
        top_k = [WHOLE_LIST if k is None else k] if "k" in self._config else []
        kernel = self._kernel_cls(*top_k, **conv)
        name = kb.list_metric_name(name, self._short, self.k)
        super().__init__(kernel, name=name, dtype=dtype, seed_generator=generator, state_dtype=state_dtype)


class _GainMetric(_ListMetric):  # NDCG, DCG
    _config = (*_ListMetric._config, "gain_fn", "rank_discount_fn")
    threshold = None

    def __init__(self, k: int | None = None, gain_fn: Callable[[Any], Any] | str = default_gain_fn,
                 rank_discount_fn: Callable[[Any], Any] = default_rank_discount_fn, shuffle_ties: bool = True,
                 seed: Seed = None, name: str | None = None, dtype: Any = None, *,
                 relevance_threshold: float | None = None, empty: str = "zero",
                 state_dtype: str | None = None) -> None:  # fmt: skip
        kb.check_gain_args(gain_fn, rank_discount_fn, GAIN_NAMES)
        self.gain_fn, self.rank_discount_fn = gain_fn, rank_discount_fn
        self.relevance_threshold, self.empty = relevance_threshold, empty
        gain = "exp_rank" if gain_fn is default_gain_fn else gain_fn  # named: one topk of the labels
        self._build(k, shuffle_ties, seed, name, dtype, state_dtype, gain=gain, discount=rank_discount_fn)


@keras.saving.register_keras_serializable(package="rankstream")
class NDCG(_GainMetric):
    """Normalised discounted cumulative gain at ``k``: a drop-in for ``keras_rs.metrics.NDCG``.

    Per list ``nDCG@k = DCG@k / IDCG@k`` (0 when ``IDCG@k = 0``),
    ``DCG@k = sum_{j<=k} w_(j) gain_fn(y_(j)) rank_discount_fn(j)`` over the items ranked by
    ``y_pred``, ``IDCG@k`` the same over the items ordered by ``w_i gain_fn(y_i)`` (``w``
    per-item weights, 1 without ``sample_weight``); the mean over the lists, weighted as keras-rs.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        gain_fn: a callable of the labels (default ``2^y - 1``), or ``"exp_rank"`` /
            ``"linear_rank"``.
        rank_discount_fn: a callable of the 1-based rank (default ``1 / log2(rank + 1)``).
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"ndcg@k"``, e.g. ``"ndcg@10"``; ``"ndcg"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        relevance_threshold: labels below it count as 0 (default None: the labels as they
            are).
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short = km.NDCGKernel, "ndcg"


@keras.saving.register_keras_serializable(package="rankstream")
class DCG(_GainMetric):
    """Discounted cumulative gain at ``k``: a drop-in for ``keras_rs.metrics.DCG``.

    Per list ``DCG@k = sum_{j<=k} w_(j) gain_fn(y_(j)) rank_discount_fn(j)`` over the items
    ranked by ``y_pred`` (``w`` per-item weights, 1 without ``sample_weight``), not normalised;
    the mean over the lists as keras-rs takes it (per-item weights enter the gains and the list
    weights).

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        gain_fn: a callable of the labels (default ``2^y - 1``), or ``"exp_rank"`` /
            ``"linear_rank"``.
        rank_discount_fn: a callable of the 1-based rank (default ``1 / log2(rank + 1)``).
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"dcg@k"``, e.g. ``"dcg@10"``; ``"dcg"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        relevance_threshold: labels below it count as 0 (default None: the labels as they
            are).
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short = km.DCGKernel, "dcg"


@keras.saving.register_keras_serializable(package="rankstream")
class MAP(_ListMetric):
    """Mean average precision at ``k``: a drop-in for ``keras_rs.metrics.MeanAveragePrecision``.

    Per list ``AP@k = sum_{j<=k} w_(j) rel_(j) P@j / Z``, ``rel = [y >= 1]``, ``P@j`` the
    (unweighted) precision at ``j``, ``Z = sum_i w_i rel_i`` (0 when ``Z = 0``; ``w`` per-item
    weights, 1 without ``sample_weight``); the mean over the lists, weighted as keras-rs.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"map@k"``, e.g. ``"map@10"``; ``"map"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        denominator: ``"all"`` (``Z``, keras-rs, default) or ``"min"`` (the best numerator
            reachable in the top ``k``, ignite's ``min(R, k)`` for unit weights).
        relevance_threshold: relevant means ``y >= t`` (default 1.0, keras-rs's); None:
            ``y > 0``.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short, _options = km.MAPKernel, "map", {"denominator": "all"}

    def __init__(self, k: int | None = None, shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = None, dtype: Any = None, *, denominator: str = "all",
                 relevance_threshold: float | None = 1.0, empty: str = "zero",
                 state_dtype: str | None = None) -> None:  # fmt: skip
        super().__init__(k, shuffle_ties, seed, name, dtype, relevance_threshold=relevance_threshold,
                         empty=empty, state_dtype=state_dtype, denominator=denominator)  # fmt: skip


@keras.saving.register_keras_serializable(package="rankstream")
class PrecisionAtK(_ListMetric):
    """Precision at ``k``: a drop-in for ``keras_rs.metrics.PrecisionAtK``.

    Per list the relevant items (``y >= 1``) among the top ``k`` over ``min(k, valid items)``
    (or over ``k`` with ``denominator="k"``, trec_eval's); the mean over the lists, weighted as
    keras-rs.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"precision@k"``, e.g. ``"precision@10"``; ``"precision"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        denominator: ``"valid"`` (``min(k, valid items)``, keras-rs, default) or ``"k"``.
        relevance_threshold: relevant means ``y >= t`` (default 1.0, keras-rs's); None:
            ``y > 0``.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short, _options = km.PrecisionKernel, "precision", {"denominator": "valid"}

    def __init__(self, k: int | None = None, shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = None, dtype: Any = None, *, denominator: str = "valid",
                 relevance_threshold: float | None = 1.0, empty: str = "zero",
                 state_dtype: str | None = None) -> None:  # fmt: skip
        super().__init__(k, shuffle_ties, seed, name, dtype, relevance_threshold=relevance_threshold,
                         empty=empty, state_dtype=state_dtype, denominator=denominator)  # fmt: skip


@keras.saving.register_keras_serializable(package="rankstream")
class RecallAtK(_ListMetric):
    """Recall at ``k``: a drop-in for ``keras_rs.metrics.RecallAtK``.

    Per list the relevant items (``y >= 1``) among the top ``k`` over all relevant items of the
    list; the mean over the lists, weighted as keras-rs.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"recall@k"``, e.g. ``"recall@10"``; ``"recall"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        relevance_threshold: relevant means ``y >= t`` (default 1.0, keras-rs's); None:
            ``y > 0``.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short = km.RecallKernel, "recall"

    def __init__(self, k: int | None = None, shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = None, dtype: Any = None, *, relevance_threshold: float | None = 1.0,
                 empty: str = "zero", state_dtype: str | None = None) -> None:  # fmt: skip
        super().__init__(k, shuffle_ties, seed, name, dtype, relevance_threshold=relevance_threshold,
                         empty=empty, state_dtype=state_dtype)  # fmt: skip


@keras.saving.register_keras_serializable(package="rankstream")
class MeanReciprocalRank(_ListMetric):
    """List-wise MRR at ``k``: a drop-in for ``keras_rs.metrics.MeanReciprocalRank``.

    Per list ``1 / rank`` of the first relevant item (``y >= 1``) among the top ``k``, else 0;
    the mean over the lists, weighted as keras-rs. PyKEEN's per-positive MRR is
    `InverseHarmonicMeanRank`.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"mrr@k"``, e.g. ``"mrr@10"``; ``"mrr"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        relevance_threshold: relevant means ``y >= t`` (default 1.0, keras-rs's); None:
            ``y > 0``.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short = km.ReciprocalRankKernel, "mrr"

    def __init__(self, k: int | None = None, shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = None, dtype: Any = None, *, relevance_threshold: float | None = 1.0,
                 empty: str = "zero", state_dtype: str | None = None) -> None:  # fmt: skip
        super().__init__(k, shuffle_ties, seed, name, dtype, relevance_threshold=relevance_threshold,
                         empty=empty, state_dtype=state_dtype)  # fmt: skip


@keras.saving.register_keras_serializable(package="rankstream")
class HitRateAtK(_ListMetric):
    """Hit rate at ``k`` (not in keras-rs; in its conventions).

    Per list 1 when a relevant item (``y >= 1``) is among the top ``k``, else 0; the mean over
    the lists, weighted as keras-rs.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        k: the cut-off, a positive int, or None for the whole list; clipped to the list
            length.
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"hit_rate@k"``, e.g. ``"hit_rate@10"``; ``"hit_rate"``
            for the whole list).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        relevance_threshold: relevant means ``y >= t`` (default 1.0, keras-rs's); None:
            ``y > 0``.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short = km.HitRateKernel, "hit_rate"

    def __init__(self, k: int | None = None, shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = None, dtype: Any = None, *, relevance_threshold: float | None = 1.0,
                 empty: str = "zero", state_dtype: str | None = None) -> None:  # fmt: skip
        super().__init__(k, shuffle_ties, seed, name, dtype, relevance_threshold=relevance_threshold,
                         empty=empty, state_dtype=state_dtype)  # fmt: skip


@keras.saving.register_keras_serializable(package="rankstream")
class RPrecision(_ListMetric):
    """R-precision (not in keras-rs; in its conventions).

    Per list the precision at ``R``, the list's number of relevant items (``y >= 1``); each list
    is ranked whole, so there is no ``k``; the mean over the lists, weighted as keras-rs.

    ``y_true`` is the labels or ``{"labels": y, "mask": m}``; labels ``< 0``, NaN and -inf are
    padding, +inf is bad data. ``sample_weight`` is a scalar, per list or per item, as in
    keras-rs.

    Args:
        shuffle_ties: break score ties at random, seeded by ``seed`` (True, keras-rs); False
            ranks the earlier item first, with a mask too (where keras-rs shuffles anyway).
        seed: an int, a ``keras.random.SeedGenerator`` or None, for the tie order.
        name: the metric's name (default ``"r_precision"``).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned
            in it.
        relevance_threshold: relevant means ``y >= t`` (default 1.0, keras-rs's); None:
            ``y > 0``.
        empty: ``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or
            ``"skip"`` (it is left out).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64
            where the backend has it).
    """

    _kernel_cls, _short = km.RPrecisionKernel, "r_precision"
    _config = _ListMetric._config[1:]

    def __init__(self, shuffle_ties: bool = True, seed: Seed = None, name: str | None = None,
                 dtype: Any = None, *, relevance_threshold: float | None = 1.0, empty: str = "zero",
                 state_dtype: str | None = None) -> None:  # fmt: skip
        self.relevance_threshold, self.empty = relevance_threshold, empty
        self._build(None, shuffle_ties, seed, name, dtype, state_dtype)


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
    items)``; relevant meaning ``y >= 1`` otherwise).

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
    """

    _config = ("metrics", "shuffle_ties", "seed", "empty", "prefix")

    def __init__(self, metrics: list[str], shuffle_ties: bool = True, seed: Seed = None,
                 name: str | None = "list_metrics", dtype: Any = None, *, empty: str = "zero",
                 state_dtype: str | None = None, prefix: str = "") -> None:  # fmt: skip
        self.metrics, self.shuffle_ties, self.seed, self.empty = list(metrics), shuffle_ties, seed, empty
        classes = [*_ListMetric.__subclasses__(), *_GainMetric.__subclasses__()]
        defaults = {c._short: {"relevance_threshold": c.threshold, **c._options} for c in classes}
        kernel = km.ListMetrics(metrics, defaults, empty=empty, **kb.keras_rs_conventions(shuffle_ties))
        generator = kb.seed_generator(shuffle_ties, seed)
        super().__init__(kernel, name, dtype, generator, state_dtype, prefix)


MeanAveragePrecision, MRR = MAP, MeanReciprocalRank


# rank-based metrics streamed from scores; float32 state keeps fewer GMR cumulants (weights ~1e-4..1e4)


def _rank_kernel(ks: Any, rank_type: Any, state_dtype: str | None, **kw: Any) -> RankKernel:
    return RankKernel(ks, rank_type, state_dtype=kb.resolve_state_dtype(state_dtype), **kw)


class _OneRankMetric(KernelMetric):
    _ranks = True
    _family = _short = ""
    _config = ("rank_type", "output")

    def __init__(self, rank_type: str = "realistic", output: str = "value", name: str | None = None,
                 dtype: Any = None, *, state_dtype: str | None = None) -> None:  # fmt: skip
        fam, k = self._family, getattr(self, "k", 1)
        kernel = _rank_kernel(k, rank_type, state_dtype, metrics=(fam,), select=(fam, output), k_name="k")
        short = self._short.format(k=k)
        self.rank_type, self.output = rank_type, output
        name = name or (short if output == "value" else f"{output}_{short}")
        super().__init__(kernel, name=name, dtype=dtype, state_dtype=state_dtype)


@keras.saving.register_keras_serializable(package="rankstream")
class HitsAtK(_OneRankMetric):
    """Hits@k: the (weighted) fraction of ranking tasks whose true candidate ranks at most
    ``k``, ``sum_i w_i [r_i <= k] / sum_i w_i``, PyKEEN's ``HitsAtK``.

    ``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
    labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
    the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row.

    Args:
        k: the cut-off, a positive int (several at once: `RankBasedMetrics`).
        rank_type: ``"realistic"`` (default: the mean of the two others), ``"optimistic"``
            (tied candidates rank after the true one) or ``"pessimistic"`` (before it); ties are
            counted exactly, never broken at random.
        output: ``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking,
            from each task's number of candidates); ``"adjusted"`` (``(M - E) / (1 - E)``) or
            ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN's metric classes.
        name: the metric's name (default ``"hits_at_{k}"``, ``"{output}_hits_at_{k}"`` for another
            output).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
    """

    _family, _short = "hits", "hits_at_{k}"
    _config = ("k", "rank_type", "output")

    def __init__(self, k: int = 10, rank_type: str = "realistic", output: str = "value",
                 name: str | None = None, dtype: Any = None, *,
                 state_dtype: str | None = None) -> None:  # fmt: skip
        self.k = check_k(k, allow_none=False, hint=" (for several k use RankBasedMetrics(ks=...))")
        super().__init__(rank_type, output, name, dtype, state_dtype=state_dtype)


@keras.saving.register_keras_serializable(package="rankstream")
class InverseHarmonicMeanRank(_OneRankMetric):
    """Mean reciprocal rank of the true candidates, ``sum_i w_i / r_i / sum_i w_i`` (PyKEEN's
    inverse harmonic mean rank: each positive ranked against the non-positives).

    ``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
    labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
    the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row.

    Args:
        rank_type: ``"realistic"`` (default: the mean of the two others), ``"optimistic"``
            (tied candidates rank after the true one) or ``"pessimistic"`` (before it); ties are
            counted exactly, never broken at random.
        output: ``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking,
            from each task's number of candidates); ``"adjusted"`` (``(M - E) / (1 - E)``) or
            ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN's metric classes.
        name: the metric's name (default ``"mrr"``, ``"{output}_mrr"`` for another
            output).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
    """

    _family, _short = "mrr", "mrr"


@keras.saving.register_keras_serializable(package="rankstream")
class GeometricMeanRank(_OneRankMetric):
    """Geometric mean rank ``exp(sum_i w_i ln r_i / sum_i w_i)``. The expectation is streamed
    from a cumulant series whose error bound `RankBasedMetrics` reports.

    ``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
    labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
    the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row.

    Args:
        rank_type: ``"realistic"`` (default: the mean of the two others), ``"optimistic"``
            (tied candidates rank after the true one) or ``"pessimistic"`` (before it); ties are
            counted exactly, never broken at random.
        output: ``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking,
            from each task's number of candidates); ``"adjusted"`` (``(M - E) / (1 - E)``,
            PyKEEN's adjusted GMR index) or ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN's metric classes.
        name: the metric's name (default ``"gmr"``, ``"{output}_gmr"`` for another
            output).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
    """

    _family, _short = "gmr", "gmr"


@keras.saving.register_keras_serializable(package="rankstream")
class ArithmeticMeanRank(_OneRankMetric):
    """Arithmetic mean rank ``sum_i w_i r_i / sum_i w_i``.

    ``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
    labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
    the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row.

    Args:
        rank_type: ``"realistic"`` (default: the mean of the two others), ``"optimistic"``
            (tied candidates rank after the true one) or ``"pessimistic"`` (before it); ties are
            counted exactly, never broken at random.
        output: ``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking,
            from each task's number of candidates); ``"adjusted"`` (``(M - E) / (1 - E)``,
            PyKEEN's adjusted mean rank index) or ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN's
            metric classes.
        name: the metric's name (default ``"mean_rank"``, ``"{output}_mean_rank"`` for another
            output).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
    """

    _family, _short = "mr", "mean_rank"


@keras.saving.register_keras_serializable(package="rankstream")
class RankBasedMetrics(KernelMetric):
    """Every rank-based metric in one pass: ``result()`` is a dict with the keys and numbers of
    `rankstream.ignite.RankBasedMetrics` (values, expectations, variances, adjusted and z forms,
    rank variance/std, median rank and MAD with error bounds, inverse forms, ``count``); Keras
    flattens it into the logs under each key.

    ``y_true`` is the index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary
    labels ``(batch, num_candidates)`` (eager only) or ``{"labels": y, "mask": m}``; ``y_pred``
    the scores ``(batch, num_candidates)``; ``sample_weight`` one weight per row.

    Args:
        ks: the cut-offs of Hits@k, a positive int or a sequence of them.
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``, or a
            sequence of them (``RANK_TYPES``: all three from the same comparison passes); keys
            are then PyKEEN's ``"{side}.{rank_type}.{metric}"``.
        name: the metric's name (default ``"rank_based"``).
        dtype: as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.
        prefix: prepended to every key (two collections in one model).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
        sides: None, or names of sides (``("head", "tail")``): ``y_pred``, ``y_true`` and
            ``sample_weight`` are then mappings of sides, keys PyKEEN's as above.
        filtered_scores: PyKEEN's filtered scores: NaN and -inf scores are not candidates.
    """

    _ranks = True
    _config = ("ks", "rank_type", "prefix", "sides", "filtered_scores")

    def __init__(self, ks: int | Sequence[int] = (1, 3, 10), rank_type: str | Sequence[str] = "realistic",
                 name: str | None = "rank_based", dtype: Any = None, *, prefix: str = "",
                 state_dtype: str | None = None, sides: Sequence[str] | None = None,
                 filtered_scores: bool = False) -> None:  # fmt: skip
        kernel = _rank_kernel(ks, rank_type, state_dtype, sides=sides, filtered_scores=filtered_scores)
        super().__init__(kernel, name=name, dtype=dtype, state_dtype=state_dtype, prefix=prefix)
        self.ks, self.rank_type, self.sides = list(kernel.ks), rank_type, sides
        self.filtered_scores = filtered_scores


GMR = GeometricMeanRank
