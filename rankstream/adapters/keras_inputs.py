"""What a Keras user passes to ``update_state``, read into the layout of the kernels' inputs:
tensors of the backend (what a cast would silently corrupt refused, naming the argument),
keras-rs's list layout or the rank metrics' targets, and core errors renamed in Keras terms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
from keras import ops as K

from rankstream.core.inputs import _describe, _same_shape, _shape, known_rank


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


def symbolic() -> bool:
    """Whether Keras is only inferring shapes (``compute_output_spec``, as in the symbolic build
    of compiled metrics on every backend): there is no data then, and the state exists from
    construction, so an update adds nothing (binary labels could not be traced anyway)."""
    try:
        from keras.src.backend import in_symbolic_scope
    except ImportError:  # pragma: no cover - a Keras without it
        return False
    return bool(in_symbolic_scope())


def keras_inputs(
    y_true: Any, y_pred: Any, sample_weight: Any, dtype: Any, ranks: bool
) -> tuple[Any, Any, Any, Any]:
    """A Keras metric's arguments as tensors of the backend (complex, string, ragged and
    ``meta`` inputs refused naming the argument; scores, weights and list labels cast to
    ``dtype``, a mask to bool) in the layout of the kernel's inputs: keras-rs's list layout
    (:func:`unpack_ranking_inputs`) or rank targets (:func:`unpack_rank_inputs`).

    Rank metrics with named sides take mappings ``{side: ...}`` for ``y_pred``, ``y_true`` (the
    same keys) and ``sample_weight`` (None or some of them): the result is then
    ``({side: {"y_pred", "y", "mask", "sample_weight"}}, None, None, None)``."""
    if ranks and isinstance(y_pred, Mapping):
        return _side_inputs(y_true, y_pred, sample_weight, dtype), None, None, None
    labels = None if ranks else dtype

    def tensor(x: Any, dtype: Any, name: str) -> Any:
        if x is None:
            return None
        x = checked_tensor(x, name)
        if dtype == "bool":
            return x if keras.backend.standardize_dtype(x.dtype) == "bool" else K.not_equal(x, 0)
        return x if dtype is None else K.cast(x, dtype)

    if isinstance(y_true, Mapping):
        y_true = {
            key: tensor(value, "bool" if key == "mask" else labels, f'y_true["{key}"]')
            for key, value in y_true.items()
        }
    else:
        y_true = tensor(y_true, labels, "y_true")
    y_pred = tensor(y_pred, dtype, "y_pred")
    sample_weight = tensor(sample_weight, dtype, "sample_weight")
    unpack = unpack_rank_inputs if ranks else unpack_ranking_inputs
    return unpack(y_true, y_pred, sample_weight)


def _side_inputs(y_true: Any, y_pred: Mapping[str, Any], sample_weight: Any, dtype: Any) -> dict[str, Any]:
    """:func:`keras_inputs` of each side of a mapping of sides."""
    weights = {} if sample_weight is None else sample_weight
    if not isinstance(y_true, Mapping) or set(y_true) != set(y_pred) or not isinstance(weights, Mapping):
        got = sorted(y_true) if isinstance(y_true, Mapping) else type(y_true).__name__
        raise ValueError(
            f"y_pred is a mapping of sides {sorted(y_pred)}: y_true must be a mapping with the same "
            f"keys (got {got}) and sample_weight None or a mapping of sides (got {type(weights).__name__})"
        )
    keys = ("y_pred", "y", "mask", "sample_weight")
    return {
        side: dict(
            zip(keys, keras_inputs(y_true[side], y_pred[side], weights.get(side), dtype, True), strict=True)
        )
        for side in y_pred
    }


# The core names the labels ``y``; Keras calls them ``y_true``.
_CORE_Y = re.compile(r"\by\b")


def in_keras_terms(exc: Exception) -> Exception:
    """A core ``ValueError``/``TypeError`` with the argument named as the Keras user wrote it
    (``y`` -> ``y_true``), or ``exc`` itself."""
    if type(exc) not in (ValueError, TypeError) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return exc
    message = _CORE_Y.sub("y_true", exc.args[0])
    return exc if message == exc.args[0] else type(exc)(message)


#: the keys of ``y_true`` as a dict (without query ids)
LABEL_KEYS = ("labels", "mask")


def _quoted(keys: tuple[str, ...]) -> str:
    return ", ".join(f'"{k}"' for k in keys)


def _labels_and_mask(y_true: Any) -> tuple[Any, Any]:
    """``y_true`` as Keras metrics take it: labels, or ``{"labels": y, "mask": m}``."""
    if not isinstance(y_true, Mapping):
        return y_true, None
    if "labels" not in y_true:
        raise ValueError(f'y_true as a dict must have the key "labels", got keys {sorted(y_true)}')
    unknown = sorted(set(y_true) - set(LABEL_KEYS))
    if unknown:
        raise ValueError(f"y_true as a dict has unknown keys {unknown}; allowed: {_quoted(LABEL_KEYS)}")
    return y_true["labels"], y_true.get("mask")


def unpack_ranking_inputs(y_true: Any, y_pred: Any, sample_weight: Any = None) -> tuple[Any, Any, Any, Any]:
    """Read keras-rs style arguments: ``y_true`` an array of labels or a mapping
    ``{"labels": y, "mask": m}``; ``y_pred`` the scores; ``y_true``, ``y_pred`` and ``mask``
    of one shape, ``(list_size,)`` (one list) or ``(batch, list_size)``; ``sample_weight`` of
    rank at most that of the labels (scalar, per list or per item). As keras-rs broadcasts
    them, a ``(batch, 1)`` weight is one weight per list (returned as ``(batch,)``) and a
    ``(1,)`` weight of one list a scalar.

    Returns ``(y_pred, y, mask, sample_weight)`` with ``y_pred``, ``y`` and ``mask`` 2-D (a
    1-D list becomes a batch of one, and its ``(list_size,)`` weight a ``(1, list_size)``
    per-item weight). Arrays must already be tensors (anything with ``shape``); the
    ``(batch,)``/``(batch, list_size)`` check of the weight is
    :func:`~rankstream.core.inputs.list_batch`'s."""
    y_true, mask = _labels_and_mask(y_true)
    for name, x in (("y_true", y_true), ("y_pred", y_pred), ("mask", mask), ("sample_weight", sample_weight)):
        if x is not None and not hasattr(x, "shape"):
            raise TypeError(f"{name} must be a tensor, got {_describe(x)}")
        known_rank(x, name)
    if y_true is None or y_pred is None:
        raise TypeError(f"y_true and y_pred must be tensors, got {_describe(y_true)} and {_describe(y_pred)}")
    shape = _shape(y_true)
    if len(shape) not in (1, 2):
        raise ValueError(
            f"y_true must be 1-D (list_size,) or 2-D (batch, list_size), got rank {len(shape)} shape {shape}"
        )
    if not _same_shape(_shape(y_pred), shape):
        raise ValueError(
            f"y_true and y_pred must have the same shape, got y_true {shape} and y_pred {_shape(y_pred)}"
        )
    if mask is not None and not _same_shape(_shape(mask), shape):
        raise ValueError(
            f'y_true["mask"] must have the shape of y_true["labels"] {shape}, got {_shape(mask)}'
        )
    if sample_weight is not None:
        w_shape = _shape(sample_weight)
        if len(w_shape) > len(shape) or (len(shape) == 1 and w_shape not in ((), shape, (1,))):
            allowed = (
                "(), (1,) or (list_size,)"
                if len(shape) == 1
                else "(), (batch,), (batch, 1) or (batch, list_size)"
            )
            raise ValueError(
                f"sample_weight must have shape {allowed} for y_true of shape {shape}, got shape {w_shape}"
            )
        if len(shape) == 1 and w_shape == (1,) != shape:
            sample_weight = sample_weight[0]  # one weight for the list, as keras-rs broadcasts it
        elif len(w_shape) == 2 and w_shape[1] == 1 and shape[1] != 1:
            # (batch, 1): one weight per list, as keras-rs broadcasts it
            if not _same_shape(w_shape[:1], shape[:1]):
                raise ValueError(
                    f"sample_weight of shape (batch, 1) must have batch = {shape[0]} (y_true has shape "
                    f"{shape}), got shape {w_shape}"
                )
            sample_weight = sample_weight[:, 0]
    if len(shape) == 1:
        y_true, y_pred = y_true[None, :], y_pred[None, :]
        if mask is not None:
            mask = mask[None, :]
        if sample_weight is not None and len(_shape(sample_weight)) == 1:
            sample_weight = sample_weight[None, :]
    return y_pred, y_true, mask, sample_weight


def unpack_rank_inputs(y_true: Any, y_pred: Any, sample_weight: Any = None) -> tuple[Any, Any, Any, Any]:
    """Read the Keras arguments of the rank-based metrics (tensors): ``y_true`` the index of
    the true candidate ``(batch,)`` (or ``(batch, 1)``), binary labels
    ``(batch, num_candidates)``, or ``{"labels": y, "mask": m}``; ``sample_weight`` a scalar,
    ``(batch,)`` or ``(batch, 1)``. Only the layout is read here
    (:func:`~rankstream.core.inputs.rank_batch` validates shapes, dtypes and values). Returns
    ``(y_pred, y, mask, sample_weight)``."""
    y_true, mask = _labels_and_mask(y_true)
    if y_true is None or y_pred is None:
        raise TypeError(f"y_true and y_pred must be tensors, got {type(y_true)} and {type(y_pred)}")
    y, y_pred = known_rank(y_true, "y_true"), known_rank(y_pred, "y_pred")
    # Keras often carries sparse targets as (batch, 1): the index, unless the list has one column
    if len(y.shape) == 2 and y.shape[1] == 1 and len(y_pred.shape) == 2 and y_pred.shape[1] != 1:
        y = y[:, 0]
    if sample_weight is not None:
        sample_weight = known_rank(sample_weight, "sample_weight")
        if len(sample_weight.shape) == 2 and sample_weight.shape[1] == 1:  # one weight per row
            sample_weight = sample_weight[:, 0]
    return y_pred, y, mask, sample_weight


#: the keys of ``y_true`` as a dict with query ids
QUERY_KEYS = ("labels", "indexes", "mask")


def _flat(x: Any, name: str, n: Any = None) -> Any:
    """``x`` ``(N,)`` or ``(N, 1)`` as ``(N,)``, else a ``ValueError`` naming ``name``."""
    shape = _shape(known_rank(x, name))
    if len(shape) == 2 and shape[1] == 1:
        x, shape = x[:, 0], shape[:1]
    if len(shape) != 1:
        raise ValueError(
            f"with query_ids=True, {name} must be flat items of shape (num_items,) or (num_items, 1), "
            f"got shape {shape}"
        )
    if n is not None and not _same_shape(shape, n):
        raise ValueError(f"with query_ids=True, {name} must have shape {n} (one per item), got shape {shape}")
    return x


def _exact_ids(ids: Any, name: str, eager: bool) -> tuple[Any, Any]:
    """Integer query ids from ``ids`` and a flag of bad ids (None: none possible). Float ids (the
    ``(N, 2)`` layout of a float ``y_true``) must be whole numbers below ``2^24`` in float32
    (``2^53`` in float64), where every integer is exact: eagerly a ``ValueError`` naming
    ``name``, in a compiled step the flag."""
    dtype = _dtype_name(ids)
    wide = "int64" if keras.backend.backend() != "jax" or _jax_x64() else "int32"
    if dtype == "bool" or not dtype.startswith(("float", "bfloat")):
        if dtype == "bool":
            raise TypeError(f"{name} must hold integer query ids, got dtype bool")
        return ids, None
    limit = 2.0**53 if dtype == "float64" else 2.0**24
    bad = K.logical_not(K.all(K.logical_and(K.equal(ids, K.floor(ids)), K.less_equal(K.abs(ids), limit))))
    if eager and bool(K.convert_to_numpy(bad)):
        raise ValueError(
            f"{name} must hold whole-number query ids (at most {limit:.0f} in absolute value in {dtype}, "
            "where every integer is exact), got "
            f"{np.asarray(K.convert_to_numpy(ids))[:8].tolist()}...; pass integer ids (an integer y_true, "
            'or y_true={"labels": y, "indexes": ids})'
        )
    return K.cast(ids, wide), bad


def _jax_x64() -> bool:
    import jax

    return bool(jax.config.jax_enable_x64)


def query_inputs(
    y_true: Any, y_pred: Any, sample_weight: Any, dtype: Any, eager: bool
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """A list metric's arguments as flat items with query ids: ``y_true`` a dict
    ``{"labels": y, "indexes": ids}`` (and optionally ``"mask"``), each ``(N,)`` or ``(N, 1)``,
    or a tensor ``(N, 2)``, the labels in column 0 and the query ids in column 1; ``y_pred``
    ``(N,)`` or ``(N, 1)``; ``sample_weight`` None, a scalar, ``(N,)`` or ``(N, 1)`` (per
    item, as keras-rs weighs items). Returns ``(ids, y_pred, y, mask, sample_weight, bad)``,
    each ``(N,)`` (``mask``/``sample_weight`` None or a scalar weight where so given), ``bad``
    None or a bool flag of ids that are not exact integers (eagerly raised instead)."""
    if isinstance(y_true, Mapping):
        unknown = sorted(set(map(str, y_true)) - set(QUERY_KEYS))
        if unknown or "labels" not in y_true or "indexes" not in y_true:
            raise ValueError(
                'with query_ids=True, y_true as a dict needs the keys "labels" and "indexes" (allowed: '
                f"{_quoted(QUERY_KEYS)}), got keys {sorted(map(str, y_true))}"
            )
        labels = checked_tensor(y_true["labels"], 'y_true["labels"]')
        ids = checked_tensor(y_true["indexes"], 'y_true["indexes"]')
        mask = y_true.get("mask")
        mask = None if mask is None else checked_tensor(mask, 'y_true["mask"]')
        id_name = 'y_true["indexes"]'
    else:
        if y_true is None:
            raise TypeError("y_true must be a tensor, got None")
        y_true = checked_tensor(y_true, "y_true")
        shape = _shape(known_rank(y_true, "y_true"))
        if len(shape) != 2 or shape[1] != 2:
            raise ValueError(
                "with query_ids=True, y_true must be (num_items, 2), the labels in column 0 and the query "
                'ids in column 1, or a dict {"labels": y, "indexes": ids}, got shape '
                f"{shape}"
            )
        labels, ids, mask, id_name = y_true[:, 0], y_true[:, 1], None, "y_true[:, 1] (the query ids)"
    if y_pred is None:
        raise TypeError("y_pred must be a tensor, got None")
    y_pred = _flat(checked_tensor(y_pred, "y_pred"), "y_pred")
    n = _shape(y_pred)
    labels = K.cast(_flat(labels, "y_true labels", n), dtype)
    ids, bad = _exact_ids(_flat(ids, id_name, n), id_name, eager)
    if mask is not None:
        mask = _flat(mask, 'y_true["mask"]', n)
        mask = mask if _dtype_name(mask) == "bool" else K.not_equal(mask, 0)
    if sample_weight is not None:
        sample_weight = checked_tensor(sample_weight, "sample_weight")
        if len(_shape(known_rank(sample_weight, "sample_weight"))) > 0:
            sample_weight = _flat(sample_weight, "sample_weight", n)
        sample_weight = K.cast(sample_weight, dtype)
    return ids, K.cast(y_pred, dtype), labels, mask, sample_weight, bad
