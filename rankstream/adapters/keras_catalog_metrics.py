"""``CatalogMetrics``: the list metrics of a retrieval model over its whole catalog, as a Keras 3
metric on the torch, JAX and TensorFlow backends, without the ``(queries, items)`` score
matrix: per query, the candidates scoring above each relevant item (and tied with it, and tied
before it by index) are counted chunk by chunk
(:func:`rankstream.core.backends.keras_catalog.slot_counts`), and the list metrics' values are
read from those ranks (:mod:`rankstream.core.backends.keras_relevant`, the ``keras.ops`` form of
the kernels' ``from_ranks``), then reduced by each kernel's own ``weighed`` and ``reduce``: the
state, ``result()`` and logs are those of :class:`rankstream.keras.ListMetrics` on the
materialised matrix (keras-rs's conventions) under the same tie policy. See
docs/factorized_top_k.md (section "Any list metric over a catalog in Keras").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.adapters.keras_candidates import candidate_source, current_candidates, query_weights
from rankstream.adapters.keras_inputs import symbolic
from rankstream.adapters.keras_lifecycle import KernelMetric, unconverted
from rankstream.adapters.keras_metrics import COLLECTION_DEFAULTS, keras_rs_conventions, with_confidence
from rankstream.adapters.keras_state import add_to
from rankstream.core.backends.keras_catalog import DEFAULT_CHUNK_SIZE, check_chunk_size, slot_counts
from rankstream.core.backends.keras_ops import is_tracing, keras_ops, x64_enabled
from rankstream.core.backends.keras_relevant import SUPPORTED, SlotRanks, values_of
from rankstream.core.lists.collection import ListMetrics as ListMetricsKernel
from rankstream.core.relevant.values import member_key

#: the tie policies counted over a catalog (``"random"`` draws a joint order of each tie group,
#: which the host form has but no compiled step reproduces)
CATALOG_TIES = ("expected", "first")


def _check_ties(ties: Any) -> str:
    if ties not in CATALOG_TIES:
        raise ValueError(
            f"ties must be one of {CATALOG_TIES} over a catalog in Keras, got {ties!r}: 'expected' is the "
            "exact mean of every metric over the random orders of the tied items (the expectation of "
            "keras-rs's shuffled ties, reproducible); one drawn order is "
            "rankstream.catalog.CatalogMetrics(..., ties='random', seed=...) on the host"
        )
    return ties


def _check_chance(chance: Any) -> None:
    """``chance=False`` only: the chance moments need scipy's special functions on the host
    (the kernel refuses what is not a bool)."""
    if chance is True:
        raise ValueError(
            "chance=True is not counted over a catalog in Keras (the moments under a random ranking "
            "need scipy's special functions on the host); rankstream.catalog.CatalogMetrics(..., "
            "chance=True) reports them, got chance=True"
        )


def _out_of_range(ids: Any, n: int) -> tuple[Any, Any]:
    """``(as_float, bad)``: the ids as floats (float64 where the backend has it) and where they
    are not whole numbers in ``[-1, n)``."""
    as_float = K.cast(ids, "float64" if x64_enabled() else "float32")
    whole = K.equal(as_float, K.round(as_float))
    in_range = K.logical_and(K.greater_equal(as_float, -1.0), K.less(as_float, float(n)))
    return as_float, K.logical_not(K.logical_and(whole, in_range))


def _raise_at(flag: Any, got: Any, message: str) -> None:
    """Eagerly a ValueError ``message`` with the first (row, slot) places ``flag`` marks and
    ``got``'s values there, where it marks any."""
    if bool(K.convert_to_numpy(K.any(flag))):
        where = np.argwhere(K.convert_to_numpy(flag))[:5].tolist()
        values = K.convert_to_numpy(got)
        raise ValueError(f"{message}; at (row, slot) {where}: {[float(values[i, j]) for i, j in where]}")


def _check_id_rows(ids: Any, b: Any, what: str, expected: str) -> None:
    """A ValueError unless ``ids`` is ``(b, M)`` (``what`` must be ``expected``), a TypeError
    unless its dtype is numeric and not boolean or complex (ids must be integers)."""
    if len(ids.shape) != 2 or (None not in (ids.shape[0], b) and ids.shape[0] != b):
        raise ValueError(
            f"{what} must be {expected}, for a batch of {b} queries; got shape {tuple(K.shape(ids))}"
        )
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if dtype == "bool" or "complex" in dtype:
        noun = expected.split(" (")[0]
        raise TypeError(f"{what}: {noun} must be integers, got dtype {dtype}")


@keras.saving.register_keras_serializable(package="rankstream")
class CatalogMetrics(KernelMetric):
    """List metrics of queries against a whole catalog of candidates, ``CatalogMetrics(["ndcg@10",
    "recall@100", "mrr"], candidates=item_embeddings)``: ``result()`` is ``{name: value}`` as
    :class:`rankstream.keras.ListMetrics` gives it on the ``(queries, N)`` score matrix
    ``s_ij = q_i . E_j`` with each query's relevant items labelled (their grades, else 1) and
    every other item labelled 0, exactly, at every ``k`` (past ``N`` too).

    The rank of relevant item ``r`` of query ``i`` is a count over the catalog: ``above = #{j :
    s_ij > s_ir}``, ``tied = #{j != r : s_ij = s_ir}``, ``tied_before = #{j < r : s_ij = s_ir}``;
    ``ties="first"`` ranks it ``above + tied_before + 1`` (the lower item index first, as the
    dense metrics with ``shuffle_ties=False``), ``ties="expected"`` takes every metric's mean over
    the orders of the tied items (the expectation of keras-rs's shuffled ties). Counted over
    chunks of ``chunk_size`` candidates in ``keras.ops`` (one ``(batch, chunk)`` block of scores,
    a ``(batch, M, chunk)`` comparison; static shapes, compiles under ``jit``).

    ``update_state(y_true, y_pred, sample_weight=None)``: ``y_pred`` the queries' embeddings
    ``(batch, d)`` (or a two-tower model's stacked ``(batch, 2, d)``, the queries first, as
    :class:`rankstream.keras.FactorizedTopK` reads it); ``y_true`` each query's relevant item
    ids ``(batch, M)`` (integers, ``-1`` pads), or with grades ``(batch, M, 2)`` (``[..., 0]``
    the ids, ``[..., 1]`` the grades, > 0; a float array in ``compile``) or ``{"ids": ...,
    "grades": ..., "exclude": ...}``; ``sample_weight`` None, a scalar, ``(batch,)`` or
    ``(batch, 1)`` (per query; keras-rs's list weights). Eagerly, ids out of ``[-1, N)``, a
    repeated id in a row, grades not > 0 and NaN scores raise naming the argument, the state
    untouched; in a compiled step such a query is left out and counted in ``invalid``
    (``result()`` NaN).

    Exclusions (the filtered setting, as ``rankstream.catalog.CatalogMetrics``'s ``exclude``):
    ``y_true["exclude"]`` ``(batch, E)`` integer ids, ``-1`` pads, each query's items left out
    of its list (a set: repeats count once). Query ``i``'s list is the catalog less its
    excluded set ``X_i``, ``n_i = N - |X_i|`` items: ``result()`` is the dense metric with
    ``X_i`` masked out of row ``i``. Counted as a correction, per slot ``r``: ``above -= #{e in
    X_i : s_ie > s_ir}``, ``tied -= #{e in X_i : s_ie = s_ir}``, ``tied_before -= #{e in X_i :
    s_ie = s_ir, e < r}``; the metrics reading the list's length (a whole-list ``k``,
    precision's ``min(k, n)`` (``denominator="valid"``, keras-rs's), F1, RBP's residual, AUC,
    GAUC's weight) read ``n_i``. A relevant item also excluded, or an excluded id out of
    ``[-1, N)``, raises naming ``exclude`` (compiled: the query is left out, counted in
    ``invalid``).

    Args:
        metrics: names as :class:`rankstream.keras.ListMetrics` takes them (``"ndcg@10"``,
            ``"dcg@10"``, ``"recall@20"``, ``"precision@5"``, ``"map@10"``, ``"mrr@10"``,
            ``"hit_rate@10"``, ``"r_precision"``, ``"f1@10"``, ``"err@10"`` (ties ``"first"``),
            ``"rbp@10"``, ``"auc"``, ``"gauc"``; without ``@k``: the whole catalog), each with
            its Keras class's defaults.
        candidates: the catalog's embeddings ``(N, d)``: an array (fixed), a Keras variable or
            ``Embedding`` (read at every update), or a callable returning them. On JAX a live
            table must be read in ``compute_loss`` (docs/factorized_top_k.md).
        chunk_size: candidates scored at a time.
        ties: ``"expected"`` (default: the exact mean over the random orders of the tied items)
            or ``"first"``; one drawn order (``"random"``) is ``rankstream.catalog.CatalogMetrics``'s.
        empty: ``"zero"`` (keras-rs: a query without a relevant item scores 0) or ``"skip"``.
        name, dtype, state_dtype, prefix: as for :class:`rankstream.keras.ListMetrics`.
        confidence: None (default) or a level in (0, 1), e.g. 0.95: as for
            :class:`rankstream.keras.ListMetrics`, every name is followed by ``name + "_stderr"``,
            ``"_ci_low"``, ``"_ci_high"`` and ``"_count"`` (the standard error of the weighted
            mean over the queries, ``sqrt`` of the kernel's variance of the mean from ``sum w^2``,
            ``sum w^2 v``, ``sum w^2 v^2``; Student's ``t`` interval ``value -+ t_{(1 + level) / 2,
            count - 1} * stderr``; the queries counted), from the same per-query values.
        chance: False only: the chance-adjusted forms need scipy's special functions on the host
            and are not counted in ``keras.ops``; ``True`` raises a ValueError pointing to
            ``rankstream.catalog.CatalogMetrics(..., chance=True)``, which reports them.
    """

    _config = ("metrics", "chunk_size", "ties", "empty", "prefix")

    def __init__(self, metrics: Sequence[str], candidates: Any, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 ties: str = "expected", empty: str = "zero", name: str | None = "catalog_metrics",
                 dtype: Any = None, state_dtype: str | None = None, prefix: str = "",
                 confidence: float | None = None, chance: bool = False) -> None:  # fmt: skip
        self.metrics, self.ties, self.empty = list(metrics), _check_ties(ties), empty
        self.chunk_size = check_chunk_size(chunk_size)
        _check_chance(chance)
        self.confidence = confidence
        conventions = keras_rs_conventions(False, ties)
        kernel = ListMetricsKernel(
            metrics, COLLECTION_DEFAULTS, empty=empty, confidence=confidence, chance=chance, **conventions
        )
        for member, k in kernel.members.items():
            if k.name not in SUPPORTED:
                raise ValueError(
                    f"metrics: {member!r} ({type(k).__name__}) is not counted over a catalog yet; "
                    f"the metrics are {', '.join(SUPPORTED)}"
                )
        super().__init__(kernel, name, dtype, None, state_dtype, prefix)
        self._source = candidate_source(candidates, self.dtype)
        self._work = "float64" if x64_enabled() else "float32"

    def get_config(self) -> dict[str, Any]:
        config = with_confidence(super().get_config(), self.confidence)
        config["metrics"] = list(self.metrics)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CatalogMetrics:
        """The metric from :meth:`get_config` with ``"candidates"`` added (the candidates, an
        array, variable or callable, are not config)."""
        if "candidates" not in config:
            raise TypeError(
                "CatalogMetrics keeps its candidates out of its config: give them, "
                f"CatalogMetrics.from_config({{**config, 'candidates': ...}}) (config={config!r})"
            )
        return cls(**config)

    # -- update ------------------------------------------------------------------------------
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Add one batch (see the class docstring); an empty batch adds nothing, bad input
        raises naming the argument with the state as it was."""
        if symbolic():  # Keras inferring shapes: no data, nothing to add
            return
        sums = unconverted(self._batch_sums)(y_true, y_pred, sample_weight)
        if sums is None:
            return
        for i, field in enumerate(self._fields):  # nothing here can fail on data
            comp = self._compensations[i] if self._compensated else None
            add_to(self._totals[i], sums[field], comp)

    def _batch_sums(self, y_true: Any, y_pred: Any, sample_weight: Any) -> dict[str, Any] | None:
        queries = K.stop_gradient(K.cast(K.convert_to_tensor(y_pred), self.dtype))
        if len(queries.shape) == 3 and queries.shape[1] == 2:  # FactorizedTopK's stacked layout
            queries = queries[:, 0, :]
        shape = tuple(queries.shape)
        if len(shape) != 2:
            raise ValueError(
                f"{self.name}: y_pred must be the queries' embeddings (batch, d) or stacked (batch, 2, d) "
                f"with the queries first, got shape {tuple(y_pred.shape)}"
            )
        candidates = current_candidates(self._source, queries, self.dtype, self.name, "y_pred")
        n = int(candidates.shape[0])
        ids, grades, exclude = self._relevant(y_true, shape[0])
        if isinstance(sample_weight, Mapping) and "ids" in sample_weight:
            sample_weight = sample_weight["ids"]  # Keras's copy per entry of a dict y_true
        weight = query_weights(sample_weight, queries, self.dtype)
        traced = is_tracing(queries)
        flags = self._check_ids(ids, grades, n, traced)
        kept, ex_flags = (None, None) if exclude is None else excluded_once(exclude, ids, n, traced)
        flags = ex_flags if flags is None else flags if ex_flags is None else K.logical_or(flags, ex_flags)
        if shape[0] == 0:
            return None
        ids = K.cast(ids, "int32")  # whole numbers in [-1, N) (checked above; else flagged)
        sums, nan = self._counted(queries, candidates, ids, grades, weight, flags, kept)
        if not traced and bool(K.convert_to_numpy(K.any(nan))):
            rows = np.nonzero(K.convert_to_numpy(nan))[0].tolist()
            raise ValueError(f"{self.name}: y_pred scores NaN against the candidates in rows {rows[:10]}")
        return sums

    def _counted(
        self, queries: Any, candidates: Any, ids: Any, grades: Any, weight: Any, flags: Any, kept: Any
    ) -> tuple[dict[str, Any], Any]:
        """Every metric's sums of one checked batch and the rows with a NaN score (left out of
        the sums and counted as invalid, with ``flags``' rows); ``kept`` the excluded ids, each
        valid one once (-1 elsewhere), or None."""
        n = int(candidates.shape[0])
        above, tied, before, nan = slot_counts(queries, candidates, ids, self.chunk_size, kept)
        length = None
        if kept is not None:
            length = float(n) - K.sum(K.cast(K.greater_equal(kept, 0), self._work), axis=1)
        present = K.greater_equal(ids, 0)
        ranks = SlotRanks(above, tied, before, grades, present, n, self.ties, self._work, length)
        invalid = nan if flags is None else K.logical_or(flags, nan)
        weight = K.cast(weight, self._work)
        ops = keras_ops(queries)
        out: dict[str, Any] = {}
        for member, kernel in self._kernel.members.items():
            sums = member_sums(kernel, ops, values_of(kernel, ranks), weight, invalid)
            out.update({f"{member_key(member)}__{f}": v for f, v in sums.items()})
        return out, nan

    def _relevant(self, y_true: Any, b: Any) -> tuple[Any, Any, Any]:
        """``(ids, grades, exclude)``: ``(batch, M)`` ids (-1 pads) and grades (1 without), and
        the excluded ids ``(batch, E)`` (-1 pads) or None."""
        exclude = None
        if isinstance(y_true, Mapping):
            if set(y_true) - {"ids", "grades", "exclude"} or "ids" not in y_true:
                raise ValueError(
                    "y_true as a dict takes 'ids' and optionally 'grades' and 'exclude', "
                    f"got keys {sorted(y_true)}"
                )
            ids, grades = K.convert_to_tensor(y_true["ids"]), y_true.get("grades")
            exclude = None if y_true.get("exclude") is None else self._exclude(y_true["exclude"], b)
        else:
            ids, grades = K.convert_to_tensor(y_true), None
            if len(ids.shape) == 3 and ids.shape[2] == 2:
                ids, grades = ids[:, :, 0], ids[:, :, 1]
        if len(ids.shape) == 1:
            ids = K.reshape(ids, (-1, 1))
        _check_id_rows(ids, b, "y_true", "the relevant ids (batch, M), (batch, M, 2) with grades or a dict")
        grades = (
            K.ones(K.shape(ids), self._work)
            if grades is None
            else K.cast(K.convert_to_tensor(grades), self._work)
        )
        if tuple(grades.shape) != tuple(ids.shape):
            raise ValueError(
                f"y_true: grades must be shaped as the ids {tuple(ids.shape)}, got {tuple(grades.shape)}"
            )
        return ids, grades, exclude

    def _exclude(self, exclude: Any, b: Any) -> Any:
        """The excluded ids as a ``(batch, E)`` tensor (None for ``E = 0``), or a ValueError
        or TypeError naming ``exclude``."""
        exclude = K.convert_to_tensor(exclude)
        _check_id_rows(exclude, b, "y_true['exclude']", "the excluded ids (batch, E) padded with -1")
        return exclude if int(exclude.shape[1]) else None

    def _check_ids(self, ids: Any, grades: Any, n: int, traced: bool) -> Any:
        """Eagerly a ValueError for ids out of ``[-1, N)``, not whole numbers, repeated in a
        row, or with grades not > 0 (None returned); traced the rows holding such data."""
        as_float, bad = _out_of_range(ids, n)
        real = K.greater_equal(as_float, 0.0)
        bad_grade = K.logical_and(real, K.logical_not(K.greater(grades, 0.0)))
        same = K.logical_and(K.equal(as_float[:, :, None], as_float[:, None, :]), real[:, :, None])
        repeat = K.any(K.logical_and(same, K.cast(1 - K.eye(ids.shape[1]), "bool")[None]), axis=(1, 2))
        if traced:
            return K.any(K.logical_or(bad, bad_grade), axis=1) | repeat
        _raise_at(bad, as_float, f"y_true must hold ids in [-1, {n}) (-1 pads)")
        _raise_at(bad_grade, grades, "y_true must hold grades > 0 at every id")
        if bool(K.convert_to_numpy(K.any(repeat))):
            rows = np.nonzero(K.convert_to_numpy(repeat))[0][:5]
            raise ValueError(
                f"y_true repeats a relevant id within a row: rows {rows.tolist()}, "
                f"{K.convert_to_numpy(ids)[rows].tolist()}"
            )
        return None


def member_sums(kernel: Any, ops: Any, out: Any, weight: Any, invalid: Any) -> dict[str, Any]:
    """One metric's state sums of the per-list output ``out`` (``values_of``) with the
    conventions the dense path applies (the ``empty`` policy, every query a list of the whole
    catalog, the list weights through the kernel's own ``weighed``) and its own ``reduce``."""
    conv = kernel.conventions
    relevant = out.relevant
    counted = relevant if conv.empty == "skip" else K.ones_like(relevant)
    if conv.empty == "zero" and conv.negative_labels == "keep":
        out.values = K.where(relevant[:, None], out.values, 0.0)
    out.counted, out.listed, out.invalid, out.weights = counted, None, invalid, weight
    out = kernel.weighed(ops, out, False)
    return kernel.reduce(ops, out)


def excluded_once(exclude: Any, ids: Any, n: int, traced: bool) -> tuple[Any, Any]:
    """``(kept, flags)``: the excluded ids ``(batch, E)`` int32 with each valid id kept once
    (its first slot; repeats and pads -1: the host form's exclusions are a set), and traced the
    rows holding an id out of ``[-1, N)`` or not whole, or a relevant id also excluded (None
    eagerly: a ValueError naming ``exclude`` instead)."""
    as_float, bad = _out_of_range(exclude, n)
    real = K.greater_equal(as_float, 0.0)
    rel = K.cast(ids, as_float.dtype)
    both = K.logical_and(K.equal(as_float[:, :, None], rel[:, None, :]), real[:, :, None])
    both = K.any(both, axis=2)
    if not traced:
        for flag, what in ((bad, f"ids in [-1, {n}) (-1 pads)"), (both, "no id of the row's relevant ids")):
            _raise_at(flag, as_float, f"y_true['exclude'] must hold {what} (an excluded item is not ranked)")
    e = int(exclude.shape[1])
    earlier = K.cast(K.tril(K.ones((e, e)), -1), "bool")[None]  # slot s' < s
    repeat = K.any(K.logical_and(K.equal(as_float[:, :, None], as_float[:, None, :]), earlier), axis=2)
    keep = K.logical_and(K.logical_and(real, K.logical_not(repeat)), K.logical_not(K.logical_or(bad, both)))
    kept = K.where(keep, K.cast(K.where(bad, -1.0, as_float), "int32"), -1)
    flags = K.logical_or(K.any(bad, axis=1), K.any(both, axis=1)) if traced else None
    return kept, flags
