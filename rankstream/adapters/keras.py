"""Keras 3 adapter: lifecycle only (update_state / result / reset_state / get_config).

One generic :class:`KernelMetric` holds a kernel's state fields as Keras variables, one per
field, each created with ``aggregation="sum"`` (so replicas and distribution strategies add
them up). ``update_state`` adds the kernel's batch sums (``kernel.batch_sums`` over
:class:`~rankstream.core.ops_keras.KerasOps`); ``result`` hands the totals to
``kernel.compute``. There is no metric math here: :class:`NDCG` and :class:`MAP` are a few
lines choosing a kernel with keras-rs's conventions (``keras_rs.metrics.NDCG`` and
``MeanAveragePrecision``, 0.4.0).

The state is float64 where the backend computes in float64 (torch, TensorFlow, JAX with
``jax_enable_x64``); elsewhere (JAX by default, torch on MPS) it is float32 with compensated
(Kahan) summation: one extra ``<field>_compensation`` variable per field holds the low-order
part that each float32 addition lost, so a long stream of updates keeps the precision of a
float32 mean instead of drifting with the number of updates.

The backend works under ``jit`` (JAX ``jit``, ``tf.function`` with or without XLA,
``torch.compile``): there the kernels read nothing back, so NaN scores cannot raise in
``update_state``; the lists holding them are counted and ``result()`` is NaN.

The rank-based metrics (:class:`HitsAtK`, :class:`MRR`, :class:`GMR`,
:class:`ArithmeticMeanRank`, :class:`RankBasedMetrics`; section at the end) take the index of
the true candidate (or binary labels, eagerly) and share one ``RankKernel`` lifecycle: Keras
calls ``result()`` inside the jitted train/test step on JAX and TensorFlow, so their
``result()`` is elementwise ``keras.ops`` code there and float64 numpy on the host otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.core.inputs import _describe, known_rank, unpack_ranking_inputs
from rankstream.core.metrics.map import MAPKernel
from rankstream.core.metrics.ndcg import GAIN_NAMES, NDCGKernel
from rankstream.core.metrics.rank_based import DEFAULT_GMR_ORDER, FLOAT32_GMR_ORDER, RankKernel
from rankstream.core.ops_keras import keras_ops, x64_enabled
from rankstream.core.state import Kernel, pack_state, unpack_state

__all__ = [
    "GMR",
    "MAP",
    "MRR",
    "NDCG",
    "ArithmeticMeanRank",
    "GeometricMeanRank",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "KernelMetric",
    "MeanAveragePrecision",
    "RankBasedMetrics",
    "default_gain_fn",
    "default_rank_discount_fn",
]

# k=None (the whole list): a cut-off past any list's end, which the kernels clip to the list.
WHOLE_LIST = 2**31 - 1


@keras.saving.register_keras_serializable(package="rankstream")
def default_gain_fn(label: Any) -> Any:
    """``2^label - 1``."""
    return K.subtract(K.power(2.0, label), 1.0)


@keras.saving.register_keras_serializable(package="rankstream")
def default_rank_discount_fn(rank: Any) -> Any:
    """``1 / log2(rank + 1)`` of the 1-based rank."""
    return K.divide(1.0, K.log2(K.add(rank, 1.0)))


def _float64_state() -> bool:
    """Whether the backend can hold float64 variables (not JAX without x64, not torch on MPS)."""
    if not x64_enabled():
        return False
    if keras.backend.backend() == "torch":
        return K.zeros(()).device.type != "mps"
    return True


STATE_DTYPES = ("float64", "float32")


def resolve_state_dtype(state_dtype: str | None) -> str:
    """The state dtype a metric gets: ``state_dtype``, or (None) float64 where the backend has
    it and float32 (compensated) elsewhere. Asking for float64 where it is not available is an
    error, not a silent float32."""
    if state_dtype is None:
        return "float64" if _float64_state() else "float32"
    if state_dtype not in STATE_DTYPES:
        raise ValueError(f"state_dtype must be 'float64', 'float32' or None, got {state_dtype!r}")
    if state_dtype == "float64" and not _float64_state():
        raise ValueError(
            f"state_dtype='float64' is not available on the {keras.backend.backend()} backend here "
            "(JAX needs jax_enable_x64, e.g. JAX_ENABLE_X64=1; torch's MPS has no float64); "
            "use state_dtype=None or 'float32' (compensated float32)"
        )
    return state_dtype


def _dtype_name(x: Any) -> str:
    """The dtype of ``x`` as a name (``"float32"``, ``"complex64"``, ``"string"``, ...)."""
    if isinstance(x, (np.ndarray, np.generic)):
        return str(x.dtype)
    try:
        return keras.backend.standardize_dtype(x.dtype)
    except Exception:  # a dtype Keras has no name for
        return str(getattr(x.dtype, "name", x.dtype))


def _is_number_dtype(name: str) -> bool:
    return name == "bool" or name.startswith(("int", "uint", "float", "bfloat"))


def checked_tensor(x: Any, name: str) -> Any:
    """``x`` as a tensor of the Keras backend, or a ``TypeError`` naming ``name`` for what a
    cast would silently corrupt: complex values (the imaginary part would be dropped), strings
    and objects, ragged python lists, and torch tensors on the ``meta`` device (no data:
    Keras would read uninitialised memory)."""
    if getattr(x, "is_meta", False) is True:
        raise TypeError(
            f"{name} is a torch tensor on the 'meta' device (shape {tuple(x.shape)}, no data); "
            "pass a tensor holding values (e.g. on the CPU or an accelerator)"
        )
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise TypeError(
                f"{name} must be a tensor or a rectangular array of numbers, got {_describe(x)}: {exc}"
            ) from exc
    dtype = _dtype_name(x)
    if "complex" in dtype:
        raise TypeError(
            f"{name} must hold real numbers, got complex dtype {dtype} (a cast would drop the "
            "imaginary part); pass the real part explicitly if that is what you mean"
        )
    if not _is_number_dtype(dtype):
        raise TypeError(f"{name} must hold numbers (bool, int or float), got dtype {dtype}: {_describe(x)}")
    return K.convert_to_tensor(x)


# The core names the labels ``y``; Keras calls them ``y_true``.
_CORE_Y = re.compile(r"\by\b")


def _in_keras_terms(exc: Exception) -> Exception:
    """A ``ValueError``/``TypeError`` of the core with its argument names as the Keras user
    wrote them (``y`` -> ``y_true``), or ``exc`` itself."""
    if type(exc) not in (ValueError, TypeError) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return exc
    message = _CORE_Y.sub("y_true", exc.args[0])
    return exc if message == exc.args[0] else type(exc)(message)


def _float64_numpy(x: Any) -> Any:
    return np.asarray(K.convert_to_numpy(K.convert_to_tensor(x)), dtype=np.float64)


class KernelMetric(keras.metrics.Metric):
    """A Keras ``Metric`` over any rankstream kernel.

    Args:
        kernel: the metric definition (its ``fields`` become the variables).
        name, dtype: as for every Keras metric; ``dtype`` is the dtype inputs are cast to and
            ``result()`` is returned in (``keras.backend.floatx()`` by default).
        seed_generator: the ``keras.random.SeedGenerator`` the kernel draws random tie orders
            from; its state is listed in ``variables`` so that it advances under JAX ``jit``.
        state_dtype: ``"float64"``, ``"float32"`` (with Kahan compensation) or None: float64
            where the backend has it (torch, TensorFlow, JAX with x64), float32 elsewhere.

    The state is one variable per kernel field (and its compensation), created with
    ``aggregation="sum"``. :meth:`state_dict` / :meth:`load_state_dict` read and write it as
    plain float64 numpy arrays, saying which metric and settings they belong to, e.g. to
    resume an interrupted evaluation (Keras saves no metric state in a ``.keras`` file, and
    ``evaluate`` resets the metrics when it starts).

    Bad data: eagerly (values on the CPU) an update with bad data raises a ``ValueError`` or
    ``TypeError`` naming the argument and leaves the state as it was. Where nothing can be read
    back (JAX ``jit``, ``tf.function``, accelerators) the lists (rank-based metrics: rows) with
    bad data are left out of the sums and counted in the ``invalid`` field instead:
    ``result()`` is NaN while :attr:`invalid_count` is above 0 (until ``reset_state()``).
    """

    def __init__(
        self,
        kernel: Kernel,
        name: str | None = None,
        dtype: Any = None,
        seed_generator: keras.random.SeedGenerator | None = None,
        state_dtype: str | None = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self._requested_state_dtype = state_dtype
        state_dtype = resolve_state_dtype(state_dtype)
        self._kernel = kernel
        self._fields = dict(kernel.fields)
        self._state_dtype = state_dtype
        self._compensated = state_dtype == "float32"
        self._totals = [
            self.add_variable(
                shape=shape, initializer="zeros", dtype=state_dtype, aggregation="sum", name=field
            )
            for field, shape in self._fields.items()
        ]
        self._compensations = (
            [
                self.add_variable(
                    shape=shape,
                    initializer="zeros",
                    dtype=state_dtype,
                    aggregation="sum",
                    name=f"{field}_compensation",
                )
                for field, shape in self._fields.items()
            ]
            if self._compensated
            else []
        )
        self._seed_generator = seed_generator

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    @property
    def state_dtype(self) -> str:
        """The dtype of the state variables (``"float64"`` or compensated ``"float32"``)."""
        return self._state_dtype

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        # as asked (None: the loading backend's default), so a saved model loads anywhere
        config["state_dtype"] = self._requested_state_dtype
        return config

    def _sums(self) -> dict[str, Any]:
        """The field sums as float64 numpy arrays (compensation applied), read in
        cross-replica context (summed over replicas)."""
        out = {}
        for i, field in enumerate(self._fields):
            out[field] = _float64_numpy(self._totals[i])
            if self._compensated:  # in float64: float32 would round total - compensation again
                out[field] = out[field] - _float64_numpy(self._compensations[i])
        return out

    def state_dict(self) -> dict[str, Any]:
        """A snapshot of the state: ``{"format", "metric", "config", "fields", "sums"}``
        (:func:`rankstream.core.state.pack_state`) with ``metric`` this class's name,
        ``config`` the kernel's settings and ``sums`` the field sums as float64 numpy arrays
        (compensation applied), e.g. ``state_dict()["sums"]["invalid"]``."""
        return pack_state(self._kernel, self._sums(), metric=type(self).__name__)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Set the state to ``state`` (from :meth:`state_dict` of a metric of the same class
        and settings). Validated whole before anything is assigned
        (:func:`rankstream.core.state.unpack_state`): another metric, other settings, another
        field layout, a missing or extra key, a wrong shape or a non-finite sum is a
        ``ValueError`` (``TypeError`` for what is not a mapping) and leaves the state as it was.

        With float32 state the compensation keeps what float32 rounding of each value lost.
        To continue an interrupted ``evaluate``, load after Keras' reset, e.g. in a callback's
        ``on_test_batch_begin`` at batch 0 (``on_test_begin`` runs before the reset)."""
        values = unpack_state(self._kernel, state, metric=type(self).__name__, owner="state")
        for i, field in enumerate(self._fields):
            total = values[field].astype(self._state_dtype)
            self._totals[i].assign(total)
            if self._compensated:  # total - compensation: the float64 value to float32's twice
                comp = (total.astype(np.float64) - values[field]).astype(self._state_dtype)
                self._compensations[i].assign(comp)

    @property
    def invalid_count(self) -> int:
        """How many lists (rank-based metrics: rows) with bad data were counted where
        ``update_state`` could not raise (JAX ``jit``, ``tf.function``, accelerators): NaN
        scores on valid items, +inf labels, negative, NaN or infinite weights where they are
        an error. ``result()`` is NaN while this is above 0; ``reset_state()`` clears it. A
        host read (call it outside ``jit``); ``state_dict()["sums"]["invalid"]`` holds the same
        number."""
        if "invalid" not in self._fields:
            return 0
        return round(float(self._sums()["invalid"]))

    @property
    def variables(self) -> list[Any]:
        extra = [] if self._seed_generator is None else [self._seed_generator.state]
        return super().variables + extra

    def _tensor(self, x: Any, dtype: Any, name: str) -> Any:
        if x is None:
            return None
        x = checked_tensor(x, name)
        if dtype == "bool":
            return x if keras.backend.standardize_dtype(x.dtype) == "bool" else K.not_equal(x, 0)
        return K.cast(x, dtype)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Add one batch. ``y_true``: labels, or ``{"labels": y, "mask": m}``; ``y_pred``:
        scores; both ``(batch, list_size)`` or ``(list_size,)``; ``sample_weight``: a scalar,
        ``(batch,)``, ``(batch, 1)`` (one weight per list, as keras-rs broadcasts it) or
        ``(batch, list_size)``. On error the state is left as it was."""
        if isinstance(y_true, Mapping):
            y_true = {
                key: self._tensor(value, "bool" if key == "mask" else self.dtype, f'y_true["{key}"]')
                for key, value in y_true.items()
            }
        else:
            y_true = self._tensor(y_true, self.dtype, "y_true")
        y_pred, y, mask, weight = unpack_ranking_inputs(
            y_true,
            self._tensor(y_pred, self.dtype, "y_pred"),
            self._tensor(sample_weight, self.dtype, "sample_weight"),
        )
        seed_state = None if self._seed_generator is None else K.copy(self._seed_generator.state.value)
        try:
            batch_sums = _unconverted(self._kernel.batch_sums)
            sums = batch_sums(keras_ops(y_pred), y_pred, y, mask, weight)
        except Exception as exc:
            if seed_state is not None:  # leave everything as it was, the random stream too
                self._seed_generator.state.assign(seed_state)
            renamed = _in_keras_terms(exc)
            if renamed is exc:
                raise
            raise renamed from exc
        if y_pred.shape[0] == 0:  # no list (checked above): nothing changes, the random stream neither
            if seed_state is not None:
                self._seed_generator.state.assign(seed_state)
            return
        # Everything that can fail happened above; now only the additions.
        self._accumulate(sums)

    def _accumulate(self, sums: Mapping[str, Any]) -> None:
        """Add one batch's field sums to the variables (nothing here can fail on data)."""
        for i, field in enumerate(self._fields):
            total = self._totals[i]
            x = K.cast(K.reshape(sums[field], total.shape), total.dtype)
            if self._compensated:  # Kahan: total + x, keeping the rounding error
                comp = self._compensations[i]
                t = K.convert_to_tensor(total)
                y_ = K.subtract(x, comp)
                new = K.add(t, y_)
                comp.assign(K.subtract(K.subtract(new, t), y_))
                total.assign(new)
            else:
                total.assign_add(x)

    def totals(self) -> dict[str, Any]:
        """The state's field sums as tensors (compensation applied)."""
        out = {}
        for i, field in enumerate(self._fields):
            t = K.convert_to_tensor(self._totals[i])
            if self._compensated:
                t = K.subtract(t, K.convert_to_tensor(self._compensations[i]))
            out[field] = t
        return out

    def result(self) -> Any:
        value = _unconverted(self._kernel.compute)(self.totals(), keras_ops())
        if tuple(value.shape) == (1,):
            value = K.reshape(value, ())
        return K.cast(value, self.dtype)

    def reset_state(self) -> None:
        for v in self._totals + self._compensations:
            v.assign(K.zeros(v.shape, dtype=v.dtype))


def _check_k(k: Any) -> int | None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive int or None (the whole list), got {k!r}")
    return k


def _seed_generator(shuffle_ties: bool, seed: Any) -> keras.random.SeedGenerator | None:
    if not isinstance(shuffle_ties, bool):
        raise TypeError(f"shuffle_ties must be a bool, got {shuffle_ties!r}")
    if isinstance(seed, keras.random.SeedGenerator):
        return seed if shuffle_ties else None
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int, a keras.random.SeedGenerator or None, got {seed!r}")
    return keras.random.SeedGenerator(seed) if shuffle_ties else None


def _serialize_fn(fn: Any) -> Any:
    return fn if isinstance(fn, str) else keras.saving.serialize_keras_object(fn)


def _deserialize_fn(fn: Any) -> Any:
    return keras.saving.deserialize_keras_object(fn) if isinstance(fn, dict) else fn


@keras.saving.register_keras_serializable(package="rankstream")
class NDCG(KernelMetric):
    """Normalised discounted cumulative gain at ``k``: a drop-in for ``keras_rs.metrics.NDCG``.

    ``nDCG@k = DCG@k / IDCG@k`` per list (0 when ``IDCG@k = 0``), with
    ``DCG@k = sum_{j<=k} w_(j) gain_fn(y_(j)) rank_discount_fn(j)`` over the items ranked by
    ``y_pred`` and ``IDCG@k`` the same over the items ordered by ``w_i gain_fn(y_i)``
    (``w`` per-item weights, 1 without ``sample_weight``); the result is the mean over lists
    weighted as keras-rs weighs them. Labels ``< 0``, NaN and -inf are padding (keras-rs keeps
    ``labels >= 0``); a +inf label on an item of a list is bad data (see :class:`KernelMetric`).

    Args (keras-rs's):
        k: positive int, or None for the whole list; clipped to the list length.
        gain_fn: callable of the labels (default ``2^y - 1``), or ``"exp_rank"`` /
            ``"linear_rank"``.
        rank_discount_fn: callable of the 1-based rank (default ``1 / log2(rank + 1)``).
        shuffle_ties: break score ties at random (seeded by ``seed``); ``False`` ranks the
            earlier item first, also with a mask (keras-rs then shuffles anyway).
        seed: int or ``keras.random.SeedGenerator``.
        name, dtype: as for every Keras metric.

    Other conventions (keyword-only):
        relevance_threshold: labels below it count as 0 before the gain (``None``: as they are).
        empty: ``"zero"`` (lists with no relevant item score 0, keras-rs) or ``"skip"``.
        state_dtype: ``"float64"``, ``"float32"`` (compensated) or None (float64 where the
            backend has it), see :class:`KernelMetric`.
    """

    def __init__(
        self,
        k: int | None = None,
        gain_fn: Callable[[Any], Any] | str = default_gain_fn,
        rank_discount_fn: Callable[[Any], Any] = default_rank_discount_fn,
        shuffle_ties: bool = True,
        seed: int | keras.random.SeedGenerator | None = None,
        name: str | None = "ndcg",
        dtype: Any = None,
        *,
        relevance_threshold: float | None = None,
        empty: str = "zero",
        state_dtype: str | None = None,
    ) -> None:
        self.k = _check_k(k)
        if not callable(rank_discount_fn):
            raise TypeError(
                f"rank_discount_fn must be a callable of the 1-based rank, got {rank_discount_fn!r}"
            )
        if isinstance(gain_fn, str) and gain_fn not in GAIN_NAMES:
            raise ValueError(f"gain_fn must be a callable or one of {GAIN_NAMES}, got {gain_fn!r}")
        if not isinstance(gain_fn, str) and not callable(gain_fn):
            raise TypeError(f"gain_fn must be a callable or one of {GAIN_NAMES}, got {gain_fn!r}")
        generator = _seed_generator(shuffle_ties, seed)
        kernel = NDCGKernel(
            WHOLE_LIST if k is None else k,
            # The default gain is the kernel's named one (monotone: one topk of the labels).
            gain="exp_rank" if gain_fn is default_gain_fn else gain_fn,
            discount=rank_discount_fn,
            relevance_threshold=relevance_threshold,
            empty=empty,
            ties="random" if shuffle_ties else "first",
            weighting="keras_rs",
            negative_labels="mask",
            generator=generator,
        )
        super().__init__(kernel, name=name, dtype=dtype, seed_generator=generator, state_dtype=state_dtype)
        self.gain_fn = gain_fn
        self.rank_discount_fn = rank_discount_fn
        self.shuffle_ties = shuffle_ties
        self.seed = seed
        self.relevance_threshold = relevance_threshold
        self.empty = empty

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "k": self.k,
                "gain_fn": _serialize_fn(self.gain_fn),
                "rank_discount_fn": _serialize_fn(self.rank_discount_fn),
                "shuffle_ties": self.shuffle_ties,
                "seed": self.seed if isinstance(self.seed, int) else None,
                "relevance_threshold": self.relevance_threshold,
                "empty": self.empty,
            }
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NDCG:
        config = dict(config)
        for key in ("gain_fn", "rank_discount_fn"):
            if key in config:
                config[key] = _deserialize_fn(config[key])
        return cls(**config)


@keras.saving.register_keras_serializable(package="rankstream")
class MAP(KernelMetric):
    """Mean average precision at ``k``: a drop-in for ``keras_rs.metrics.MeanAveragePrecision``.

    Per list, ``AP@k = sum_{j<=k} w_(j) rel_(j) P@j / Z`` with ``rel = [y >= 1]``,
    ``P@j`` the (unweighted) precision at ``j`` and ``Z = sum_i w_i rel_i`` over the whole list
    (0 when ``Z = 0``); the result is the mean over lists weighted as keras-rs weighs them.
    Labels ``< 0``, NaN and -inf are padding; a +inf label is bad data (see :class:`KernelMetric`).

    Args (keras-rs's): ``k``, ``shuffle_ties``, ``seed``, ``name``, ``dtype`` as in :class:`NDCG`.

    Other conventions (keyword-only):
        denominator: ``"all"`` (``Z`` over the whole list, keras-rs) or ``"min"`` (the best
            numerator reachable in the top ``k``: ``min(R, k)`` without weights, ignite's).
        relevance_threshold: relevant means ``y >= t`` (default 1.0) or, with None, ``y > 0``.
        empty: ``"zero"`` (keras-rs) or ``"skip"``.
        state_dtype: as in :class:`NDCG`.
    """

    def __init__(
        self,
        k: int | None = None,
        shuffle_ties: bool = True,
        seed: int | keras.random.SeedGenerator | None = None,
        name: str | None = "map",
        dtype: Any = None,
        *,
        denominator: str = "all",
        relevance_threshold: float | None = 1.0,
        empty: str = "zero",
        state_dtype: str | None = None,
    ) -> None:
        self.k = _check_k(k)
        generator = _seed_generator(shuffle_ties, seed)
        kernel = MAPKernel(
            WHOLE_LIST if k is None else k,
            denominator=denominator,
            relevance_threshold=relevance_threshold,
            empty=empty,
            ties="random" if shuffle_ties else "first",
            weighting="keras_rs",
            negative_labels="mask",
            generator=generator,
        )
        super().__init__(kernel, name=name, dtype=dtype, seed_generator=generator, state_dtype=state_dtype)
        self.shuffle_ties = shuffle_ties
        self.seed = seed
        self.denominator = denominator
        self.relevance_threshold = relevance_threshold
        self.empty = empty

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "k": self.k,
                "shuffle_ties": self.shuffle_ties,
                "seed": self.seed if isinstance(self.seed, int) else None,
                "denominator": self.denominator,
                "relevance_threshold": self.relevance_threshold,
                "empty": self.empty,
            }
        )
        return config


MeanAveragePrecision = MAP


# ------------------------------------------------------------------------------------------
# Rank-based metrics (Hits@k, MRR, GMR, mean rank) streamed from scores; definitions and state
# in rankstream.core.metrics.rank_based (one RankKernel: the ranks of the true candidates are
# counted once per batch, ties exactly, and every field is a plain sum).


def _rank_inputs(y_true: Any, y_pred: Any) -> tuple[Any, Any, Any]:
    """``(y_pred, y, mask)`` from the Keras arguments of the rank-based metrics: ``y_true`` the
    index of the true candidate ``(batch,)`` (or ``(batch, 1)``), binary labels
    ``(batch, num_candidates)``, or ``{"labels": y, "mask": m}``. Only the layout is read here;
    ``RankKernel.batch_sums`` validates shapes, dtypes and values."""
    mask = None
    if isinstance(y_true, Mapping):
        if "labels" not in y_true:
            raise ValueError(f'y_true as a dict must have the key "labels", got keys {sorted(y_true)}')
        unknown = sorted(set(y_true) - {"labels", "mask"})
        if unknown:
            raise ValueError(f'y_true as a dict has unknown keys {unknown}; allowed: "labels", "mask"')
        mask = y_true.get("mask")
        y_true = y_true["labels"]
    if y_true is None or y_pred is None:
        raise TypeError(f"y_true and y_pred must be tensors, got {type(y_true)} and {type(y_pred)}")
    y = known_rank(checked_tensor(y_true, "y_true"), "y_true")
    y_pred = known_rank(checked_tensor(y_pred, "y_pred"), "y_pred")
    # Keras often carries sparse targets as (batch, 1): the index, unless the list has one column
    if len(y.shape) == 2 and y.shape[1] == 1 and len(y_pred.shape) == 2 and y_pred.shape[1] != 1:
        y = y[:, 0]
    return y_pred, y, mask


def _symbolic() -> bool:
    """Whether Keras is only inferring shapes (``compute_output_spec``, as in the symbolic build
    of compiled metrics on every backend): there is no data then, and the state exists from
    construction, so an update adds nothing (binary labels could not be traced anyway)."""
    try:
        from keras.src.backend import in_symbolic_scope
    except ImportError:  # pragma: no cover - a Keras without it
        return False
    return bool(in_symbolic_scope())


def _unconverted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run as plain Python inside a TensorFlow graph: AutoGraph would otherwise rewrite
    every function the kernel calls, its numpy code too (about 3 s to trace one update of
    ``RankBasedMetrics``, 0.2 s without); the kernels have no data-dependent Python control
    flow to convert."""
    if keras.backend.backend() != "tensorflow":
        return fn
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def _rank_kernel(ks: Any, rank_type: str, state_dtype: str | None, **kw: Any) -> RankKernel:
    """The kernel of a rank-based metric for the state dtype it will get: with float32 state the
    GMR expectation keeps fewer cumulant sums (``FLOAT32_GMR_ORDER``), whose weight powers
    stay within float32's range."""
    order = DEFAULT_GMR_ORDER if resolve_state_dtype(state_dtype) == "float64" else FLOAT32_GMR_ORDER
    return RankKernel(ks, rank_type, gmr_order=order, **kw)


class _RankMetric(KernelMetric):
    """The Keras lifecycle of a :class:`~rankstream.core.metrics.rank_based.RankKernel`.

    With float32 state (JAX without x64), the GMR expectation's state holds the task weights'
    powers up to ``w^9``: keep weights within about ``[1e-4, 1e4]`` (every rank-based value is
    unchanged by scaling all weights by one factor); outside, the GMR expectation, variance,
    adjusted and z values are NaN or inaccurate (the error bound says inf)."""

    _prefix = ""

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Add one batch. ``y_pred``: scores ``(batch, num_candidates)``; ``y_true``: the index
        of the true candidate ``(batch,)`` (ints; ``(batch, 1)`` too), binary labels
        ``(batch, num_candidates)`` (every positive is a task ranked against the non-positives;
        eager only: the number of tasks is data-dependent), or ``{"labels": y, "mask": m}``
        with ``m`` ``(batch, num_candidates)`` (False: not a candidate); ``sample_weight``: a
        scalar, ``(batch,)`` or ``(batch, 1)``, weighting every task of a row (finite and
        ``>= 0``: a negative, NaN or infinite weight is bad data). The index must be an integer
        (a float ``y_true`` of shape ``(batch,)`` is a ``TypeError``, so NaN cannot be an index)
        and binary labels 0/1 (NaN or inf labels are a ``ValueError``). On error the state is left as
        it was."""
        if _symbolic():
            return
        y_pred, y, mask = _rank_inputs(y_true, y_pred)
        y_pred = self._tensor(y_pred, self.dtype, "y_pred")
        weight = self._tensor(sample_weight, self.dtype, "sample_weight")
        if weight is not None:
            weight = known_rank(weight, "sample_weight")
            if len(weight.shape) == 2 and weight.shape[1] == 1:  # (batch, 1): one weight per row
                weight = weight[:, 0]
        mask = self._tensor(mask, "bool", 'y_true["mask"]')
        batch_sums = _unconverted(self._kernel.batch_sums)
        try:
            sums = batch_sums(keras_ops(y_pred), y_pred, y, mask, weight)
        except Exception as exc:
            renamed = _in_keras_terms(exc)
            if renamed is exc:
                raise
            raise renamed from exc
        self._accumulate(sums)

    def result(self) -> Any:
        """Eager with the state on the CPU: computed in float64 on the host (the numbers of
        ``rankstream.ignite``); while tracing (Keras calls ``result()`` inside the jitted
        train/test step on JAX and TensorFlow) or on an accelerator: the same elementwise
        formulas in ``keras.ops``, in the state's dtype. Before any task of positive weight
        every value is 0 (the Keras convention of an empty mean); after rows that could not be
        checked in ``update_state`` (under ``jit``: NaN scores, an index out of range or masked
        out, a bad weight) every value but ``count`` is NaN. No ``RuntimeWarning`` about the GMR
        expectation's error bound here (Keras calls ``result()`` after every step); read
        ``geometric_mean_rank_error_bound`` from :class:`RankBasedMetrics`."""
        return _unconverted(self._result)()

    def _result(self) -> Any:
        totals = self.totals()
        ops = keras_ops(totals["weight"])
        if ops.can_read(totals["weight"]):
            totals = {field: ops.to_numpy(value) for field, value in totals.items()}
            value = self._kernel.select_value(self._kernel.compute(totals))
        else:
            value = self._kernel.select_value(self._kernel.compute(totals, ops))
        if isinstance(value, Mapping):
            return {f"{self._prefix}{key}": K.cast(v, self.dtype) for key, v in value.items()}
        return K.cast(value, self.dtype)


def _check_single_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r} (for several k use RankBasedMetrics(ks=...))")
    return k


class _OneRankMetric(_RankMetric):
    _family = ""
    _short = ""

    def __init__(
        self,
        ks: int,
        rank_type: str,
        output: str,
        name: str | None,
        dtype: Any,
        short: str,
        state_dtype: str | None,
    ) -> None:
        family = self._family
        kernel = _rank_kernel(
            ks, rank_type, state_dtype, metrics=(family,), select=(family, output), k_name="k"
        )
        if name is None:
            name = short if output == "value" else f"{output}_{short}"
        super().__init__(kernel, name=name, dtype=dtype, state_dtype=state_dtype)
        self.rank_type = rank_type
        self.output = output

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"rank_type": self.rank_type, "output": self.output})
        return config


@keras.saving.register_keras_serializable(package="rankstream")
class HitsAtK(_OneRankMetric):
    """Hits@k: the (weighted) fraction of ranking tasks whose rank is at most ``k``.

    Args:
        k: a positive int (for several ``k`` at once use :class:`RankBasedMetrics`).
        rank_type: ``"realistic"`` (default: the mean of the two below), ``"optimistic"``
            (ties ranked first) or ``"pessimistic"`` (ties ranked last); ties are counted
            exactly, never broken at random.
        output: ``"value"`` (default), ``"expected"`` or ``"variance"`` (under random ranking,
            from each task's number of candidates), ``"adjusted"`` (``(M - E) / (1 - E)``) or
            ``"z"`` (``(M - E) / sqrt(Var)``), as PyKEEN's metric classes.
        name: default ``"hits_at_{k}"`` (``"{output}_hits_at_{k}"`` for another output).
        dtype: as for every Keras metric (inputs are cast to it; ``result()`` is returned in it).
        state_dtype: ``"float64"``, ``"float32"`` (compensated) or None (float64 where the
            backend has it), see :class:`KernelMetric`.

    ``update_state(y_true, y_pred, sample_weight=None)``: see :meth:`_RankMetric.update_state`.
    """

    _family = "hits"

    def __init__(
        self,
        k: int = 10,
        rank_type: str = "realistic",
        output: str = "value",
        name: str | None = None,
        dtype: Any = None,
        *,
        state_dtype: str | None = None,
    ) -> None:
        self.k = _check_single_k(k)
        super().__init__(k, rank_type, output, name, dtype, f"hits_at_{k}", state_dtype)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["k"] = self.k
        return config


@keras.saving.register_keras_serializable(package="rankstream")
class InverseHarmonicMeanRank(_OneRankMetric):
    """Mean reciprocal rank (MRR; PyKEEN's inverse harmonic mean rank). ``rank_type``,
    ``output``, ``dtype``, ``state_dtype`` as in :class:`HitsAtK`; ``name`` default ``"mrr"``."""

    _family = "mrr"

    def __init__(
        self,
        rank_type: str = "realistic",
        output: str = "value",
        name: str | None = None,
        dtype: Any = None,
        *,
        state_dtype: str | None = None,
    ) -> None:
        super().__init__(1, rank_type, output, name, dtype, "mrr", state_dtype)


@keras.saving.register_keras_serializable(package="rankstream")
class GeometricMeanRank(_OneRankMetric):
    """Geometric mean rank ``exp(sum w ln r / sum w)``; ``output``, ``state_dtype`` as in
    :class:`HitsAtK` (``"adjusted"`` is PyKEEN's adjusted GMR index; the expectation is streamed
    from a cumulant series, exact to about 1e-13 from some 30 equally weighted tasks on with
    float64 state, to float32 precision from about 7 with float32 state, and only approximate
    for a handful of tasks: ``RankBasedMetrics`` reports the bound). ``name`` default
    ``"gmr"``."""

    _family = "gmr"

    def __init__(
        self,
        rank_type: str = "realistic",
        output: str = "value",
        name: str | None = None,
        dtype: Any = None,
        *,
        state_dtype: str | None = None,
    ) -> None:
        super().__init__(1, rank_type, output, name, dtype, "gmr", state_dtype)


@keras.saving.register_keras_serializable(package="rankstream")
class ArithmeticMeanRank(_OneRankMetric):
    """Arithmetic mean rank; ``output``, ``state_dtype`` as in :class:`HitsAtK` (``"adjusted"`` is PyKEEN's
    adjusted mean rank index). ``name`` default ``"mean_rank"``."""

    _family = "mr"

    def __init__(
        self,
        rank_type: str = "realistic",
        output: str = "value",
        name: str | None = None,
        dtype: Any = None,
        *,
        state_dtype: str | None = None,
    ) -> None:
        super().__init__(1, rank_type, output, name, dtype, "mean_rank", state_dtype)


@keras.saving.register_keras_serializable(package="rankstream")
class RankBasedMetrics(_RankMetric):
    """Every rank-based metric in one pass: ``result()`` returns a dict with the keys of
    ``rankstream.ignite.RankBasedMetrics`` (the same numbers): for ``key`` in ``hits_at_{k}``
    (each ``k`` of ``ks``), ``inverse_harmonic_mean_rank`` (MRR), ``geometric_mean_rank`` and
    ``arithmetic_mean_rank``: ``key``, ``expected_key``, ``variance_key``, ``adjusted_key``
    (``..._index`` for the two rank means) and ``z_key``; plus
    ``adjusted_arithmetic_mean_rank``, ``geometric_mean_rank_error_bound`` and ``count`` (tasks
    of positive weight).

    In a model (``compile(metrics=[RankBasedMetrics()])``), Keras flattens a dict result into
    the logs: ``fit``'s history and ``evaluate(return_dict=True)`` get one entry per key
    (``val_``-prefixed for validation data), under the key itself, not under the metric's
    name. ``prefix`` is prepended to every key, to tell two collections apart in one model
    (e.g. ``prefix="pessimistic_"``).

    Args:
        ks: cut-offs of Hits@k (a positive int or a list of them).
        rank_type: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``.
        name, dtype: as for every Keras metric.
        prefix: prepended to every key of the result (default none).
        state_dtype: as in :class:`HitsAtK`.
    """

    def __init__(
        self,
        ks: int | list[int] | tuple[int, ...] = (1, 3, 10),
        rank_type: str = "realistic",
        name: str | None = "rank_based",
        dtype: Any = None,
        *,
        prefix: str = "",
        state_dtype: str | None = None,
    ) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        kernel = _rank_kernel(ks, rank_type, state_dtype)
        super().__init__(kernel, name=name, dtype=dtype, state_dtype=state_dtype)
        self.ks = kernel.ks
        self.rank_type = rank_type
        self._prefix = prefix

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"ks": list(self.ks), "rank_type": self.rank_type, "prefix": self._prefix})
        return config


MRR = InverseHarmonicMeanRank
GMR = GeometricMeanRank
