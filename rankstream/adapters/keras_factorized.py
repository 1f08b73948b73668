"""``FactorizedTopK``: TensorFlow Recommenders' retrieval metric as a Keras 3 metric on the torch,
JAX and TensorFlow backends, counted over the candidates chunk by chunk (no top-k heap, no
``(queries, candidates)`` score matrix).

TFRS 0.7.x's score-based definition (``tensorflow_recommenders/metrics/factorized_top_k.py``):
the positive score of query ``i`` is ``p_i = sum(q_i * c_i)`` (the query against its true
candidate's embedding); the candidates' scores are ``s_ij = q_i . E_j``; the query is a hit at
``k`` when ``tf.math.in_top_k`` puts ``p_i`` in the top ``k`` of ``[p_i, top max(ks) of s_i]``,
which counts ties as hits, i.e.

    hit_i(k)  <=>  #{ j : s_ij > p_i } < k

(a candidate tied with ``p_i``, the true candidate itself among them when it is in the catalog,
does not push it out), and a row with a non-finite score is a miss. The value at ``k`` is the
weighted mean of the hits, ``sum_i w_i hit_i(k) / sum_i w_i``. The state is two sums, the
weighted hits per ``k`` and the weight sum (``aggregation="sum"`` variables: replicas add up).

TFRS's id-based evaluation (``true_candidate_ids`` given): a hit at ``k`` when a candidate of the
true id is among the first ``k`` of a top-k that orders equal scores by index, i.e. when the
best-placed one, ``j*``, has ``#{l : s_il > s_ij*} + #{l < j* : s_il = s_ij*} < k`` (two passes
over the chunks). See ``docs/factorized_top_k.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.adapters.keras_candidates import candidate_source, current_candidates, query_weights
from rankstream.adapters.keras_inputs import symbolic
from rankstream.adapters.keras_lifecycle import read_only, unconverted
from rankstream.adapters.keras_state import add_to, resolve_state_dtype, state_variables, total_tensors
from rankstream.core.backends.keras_catalog import (
    DEFAULT_CHUNK_SIZE,
    best_match,
    check_chunk_size,
    count_above,
)

TFRS_KS = (1, 5, 10, 50, 100)


def check_ks(ks: Any) -> tuple[int, ...]:
    """``ks`` as a tuple of positive ints (a TypeError/ValueError naming it otherwise)."""
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence):
        raise TypeError(f"ks must be a sequence of positive ints, got {ks!r}")
    if len(ks) == 0:
        raise ValueError(f"ks must hold at least one k, got {ks!r}")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"ks must be a sequence of positive ints, got {ks!r} (holding {k!r})")
        if k < 1:
            raise ValueError(f"ks must be a sequence of positive ints, got {ks!r} (holding {k!r})")
    return tuple(int(k) for k in ks)


def _check_candidate_ids(candidate_ids: Any) -> np.ndarray:
    """``candidate_ids`` as an (N,) int32 array (ids of the candidates, in their order)."""
    ids = np.asarray(candidate_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(
            f"candidate_ids must be a 1-D array of integer ids, got dtype {ids.dtype} and shape {ids.shape}"
        )
    if ids.size and (ids.min() < np.iinfo(np.int32).min or ids.max() > np.iinfo(np.int32).max):
        raise ValueError(f"candidate_ids must fit in int32, got values from {ids.min()} to {ids.max()}")
    return ids.astype(np.int32)


class FactorizedTopK(keras.metrics.Metric):
    """Top-k categorical accuracy of a retrieval model over a catalog of candidates, as
    ``tfrs.metrics.FactorizedTopK``. Score-based (TFRS's default): query ``i`` is a hit at ``k``
    when fewer than ``k`` candidates score strictly above its true candidate, ``#{j : q_i . E_j >
    q_i . c_i} < k`` (ties count as hits, as TFRS's ``tf.math.in_top_k``). Id-based (with
    ``true_candidate_ids``): when a candidate of the true id is among the first ``k`` of the
    candidates ordered by score, equal scores by index (TFRS's ``tf.math.top_k``). The value at
    ``k`` is the weighted share of hits. ``result()`` is ``{f"{name}/top_{k}_categorical_accuracy": ...}``,
    TFRS's log keys. Exact at every ``k``, ``k`` past the catalog too (always a hit).

    Counted over chunks of ``chunk_size`` candidates: memory of one ``(batch, chunk_size)``
    block of scores, no top-k selection, static shapes (compiles under ``jit``).

    ``update_state`` takes TFRS's arguments, ``(query_embeddings, true_candidate_embeddings,
    true_candidate_ids=None, sample_weight=None)``, embeddings ``(batch, d)``; in
    ``model.compile(metrics=[...])`` (or ``weighted_metrics=`` for sample weights) the model's
    output is ``keras.ops.stack([query_embeddings, true_candidate_embeddings], axis=1)``,
    ``(batch, 2, d)``, and ``y_true`` holds the true candidates' ids where the metric has
    ``candidate_ids`` (id-based), else it is not read.

    Args:
        candidates: the catalog's embeddings, ``(N, d)``: an array or tensor (fixed); a Keras
            variable or ``keras.layers.Embedding`` (its table), read at every update; or a
            callable taking no argument that returns the current ``(N, d)`` embeddings
            (``lambda: item_tower(all_item_ids)``), called at every update. In a compiled
            ``fit`` on JAX a variable or callable must be read where the model's weights are
            live (the model's ``compute_loss``): see ``docs/factorized_top_k.md``.
        ks: the cut-offs, positive ints (TFRS's default ``(1, 5, 10, 50, 100)``; any others).
        name: the metric's name, the prefix of its result keys.
        candidate_ids: the candidates' integer ids, ``(N,)`` in their order, for the id-based
            evaluation (default: the positions ``0..N-1``, as TFRS's ``BruteForce`` index);
            given, ``compile``'s ``y_true`` is read as the true ids.
        chunk_size: candidates scored at a time (default
            :data:`rankstream.core.backends.keras_catalog.DEFAULT_CHUNK_SIZE`).
        dtype: the dtype of the scores and of ``result()`` (float32 by default).
        state_dtype: ``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where
            the backend has it).
    """

    def __init__(
        self,
        candidates: Any,
        ks: Sequence[int] = TFRS_KS,
        name: str = "factorized_top_k",
        *,
        candidate_ids: Any = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dtype: Any = None,
        state_dtype: str | None = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self._ks = check_ks(ks)
        self._chunk_size = check_chunk_size(chunk_size)
        self._candidate_ids = None if candidate_ids is None else _check_candidate_ids(candidate_ids)
        self._requested_state_dtype = state_dtype
        self._state_dtype = resolve_state_dtype(state_dtype)
        # held by a plain object: Keras tracks a variable held as an attribute (or in a list or
        # tuple) as one of the metric's own (the item table would become metric state)
        self._source = candidate_source(candidates, self.dtype)
        fields = {"hits": (len(self._ks),), "weight_sum": ()}
        self._fields = fields
        self._totals, self._compensations = state_variables(
            self, fields, self._state_dtype, self._state_dtype == "float32"
        )

    # -- settings --------------------------------------------------------------------------
    ks = read_only("_ks", "tuple[int, ...]")
    chunk_size = read_only("_chunk_size", "int")

    @property
    def keys(self) -> list[str]:
        """The keys of ``result()``: ``f"{name}/top_{k}_categorical_accuracy"`` per ``k``."""
        return [f"{self.name}/top_{k}_categorical_accuracy" for k in self._ks]

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(ks=list(self._ks), chunk_size=self._chunk_size, state_dtype=self._requested_state_dtype)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FactorizedTopK:
        raise TypeError(
            "FactorizedTopK keeps its candidates (an array, a variable or a callable) out of its config: "
            f"build it again with FactorizedTopK(candidates, **config) (config={config!r})"
        )

    def _current_candidates(self, queries: Any) -> Any:
        """The (N, d) candidate embeddings for this update."""
        return current_candidates(self._source, queries, self.dtype, self.name, "query_embeddings")

    # -- update ----------------------------------------------------------------------------
    def update_state(
        self,
        query_embeddings: Any,
        true_candidate_embeddings: Any,
        true_candidate_ids: Any = None,
        sample_weight: Any = None,
    ) -> None:
        """Add one batch: TFRS's ``(query_embeddings, true_candidate_embeddings,
        true_candidate_ids=None, sample_weight=None)`` (ids: ``(batch,)`` or ``(batch, 1)``
        integers, for the id-based evaluation), or Keras' ``(y_true, y_pred, sample_weight)``
        with ``y_pred`` the stacked ``(batch, 2, d)`` embeddings (``y_true``: the true ids where
        the metric has ``candidate_ids``, else not read). ``sample_weight``: None, a
        scalar, ``(batch,)`` or ``(batch, 1)``. An empty batch adds nothing; bad input raises
        naming the argument, with the state as it was."""
        if symbolic():  # Keras inferring shapes: no data, nothing to add
            return
        if len(getattr(true_candidate_embeddings, "shape", ())) == 3:  # Keras' compile layout
            y_pred = true_candidate_embeddings
            if sample_weight is None:  # Keras passes a weighted metric's weights third
                sample_weight = true_candidate_ids
            shape = tuple(y_pred.shape)
            if shape[1] != 2:
                raise ValueError(
                    f"{self.name}: y_pred must be the stacked (batch, 2, d) query and true candidate "
                    f"embeddings, keras.ops.stack([query, candidate], axis=1); got shape {shape}"
                )
            queries, positives = y_pred[:, 0, :], y_pred[:, 1, :]
            # y_true: the true candidates' ids where the candidates have ids, else not read
            ids = query_embeddings if self._candidate_ids is not None else None
        else:
            queries, positives, ids = query_embeddings, true_candidate_embeddings, true_candidate_ids
        sums = unconverted(self._batch_sums)(queries, positives, sample_weight, ids)
        if sums is None:
            return
        for i, field in enumerate(self._fields):  # nothing here can fail on data
            comp = self._compensations[i] if self._compensations else None
            add_to(self._totals[i], sums[field], comp)

    def _batch_sums(
        self, queries: Any, positives: Any, sample_weight: Any, ids: Any
    ) -> dict[str, Any] | None:
        queries = K.stop_gradient(K.cast(K.convert_to_tensor(queries), self.dtype))
        positives = K.stop_gradient(K.cast(K.convert_to_tensor(positives), self.dtype))
        q_shape, c_shape = tuple(queries.shape), tuple(positives.shape)
        if len(q_shape) != 2 or q_shape != c_shape:
            raise ValueError(
                f"{self.name}: query_embeddings and true_candidate_embeddings must both be (batch, d), "
                f"got shapes {q_shape} and {c_shape}"
            )
        candidates = self._current_candidates(queries)
        weight = query_weights(sample_weight, queries, self.dtype)
        if ids is not None:
            ids = self._true_ids(ids, q_shape[0])
            candidate_ids = self._ids_of(candidates)
        if q_shape[0] == 0:
            return None
        ks = K.convert_to_tensor(np.asarray(self._ks, np.int32))
        if ids is None:  # score-based: fewer than k candidates above the positive score
            positive = K.sum(K.multiply(queries, positives), axis=1)  # TFRS: reduce_sum(q * c, axis=1)
            above, bad = count_above(queries, positive, candidates, self._chunk_size)
            good = K.logical_not(K.logical_or(bad, K.logical_not(K.isfinite(positive))))
        else:  # id-based: the best-placed candidate of the true id among the first k of a stable top-k
            found, best, index = best_match(queries, candidates, candidate_ids, ids, self._chunk_size)
            above, nan = count_above(
                queries, best, candidates, self._chunk_size, before=index, inf_is_bad=False
            )
            good = K.logical_and(found, K.logical_not(nan))
        hits = K.logical_and(K.less(above[:, None], ks[None, :]), good[:, None])
        hits = K.cast(hits, self._state_dtype)
        weight = K.cast(weight, self._state_dtype)
        return {"hits": K.sum(K.multiply(hits, weight[:, None]), axis=0), "weight_sum": K.sum(weight)}

    def _true_ids(self, ids: Any, b: Any) -> Any:
        """``true_candidate_ids`` as (batch,) int32, from (batch,) or (batch, 1) integers."""
        ids = K.convert_to_tensor(ids)
        shape, dtype = tuple(ids.shape), keras.backend.standardize_dtype(ids.dtype)
        if "int" not in dtype:
            raise TypeError(f"true_candidate_ids must be integers, got dtype {dtype} (shape {shape})")
        if len(shape) == 2 and shape[1] == 1:
            ids, shape = K.reshape(ids, (-1,)), shape[:1]
        if len(shape) != 1 or (None not in (shape[0], b) and shape[0] != b):
            raise ValueError(
                f"true_candidate_ids must be (batch,) or (batch, 1) for a batch of {b} queries, got shape "
                f"{tuple(ids.shape)}"
            )
        return K.cast(ids, "int32")

    def _ids_of(self, candidates: Any) -> Any:
        """The candidates' ids: ``candidate_ids``, or their positions (TFRS's ``BruteForce``)."""
        n = int(candidates.shape[0])
        if self._candidate_ids is None:
            return K.arange(n, dtype="int32")
        if len(self._candidate_ids) != n:
            raise ValueError(
                f"{self.name}: candidate_ids holds {len(self._candidate_ids)} ids but the candidates are "
                f"{n} (shape {tuple(candidates.shape)})"
            )
        return K.convert_to_tensor(self._candidate_ids)

    # -- state and result --------------------------------------------------------------------
    def reset_state(self) -> None:
        for v in self._totals + self._compensations:
            v.assign(K.zeros(v.shape, dtype=v.dtype))

    def result(self) -> dict[str, Any]:
        """``{f"{name}/top_{k}_categorical_accuracy": hits(k) / weight_sum}`` (0 before any query,
        as Keras' ``Mean``)."""
        hits, weight_sum = total_tensors(self._totals, self._compensations)
        positive = K.greater(weight_sum, 0.0)
        values = K.where(positive, K.divide(hits, K.where(positive, weight_sum, 1.0)), 0.0)
        return {key: K.cast(values[i], self.dtype) for i, key in enumerate(self.keys)}


__all__ = ["TFRS_KS", "FactorizedTopK", "check_ks"]
