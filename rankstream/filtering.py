"""Helpers for the filtered link-prediction setting (knowledge-graph completion).

A test triple ``(h, r, t)`` asks two queries: *tail prediction* ``(h, r, ?)``, scored over every
entity, whose answer is ``t``; and *head prediction* ``(?, r, t)``, whose answer is ``h``. In the
**filtered** setting, the other known answers of the same query (from the training, validation and
test triples) are not candidates: ranking another true triple above the test triple is no error.

:class:`FilterIndex` is built once from all known triples and gives, for a batch of query triples, the
boolean candidate mask a rankstream rank metric takes::

    from rankstream.filtering import FilterIndex, macro_weights
    index = FilterIndex([train, valid, test])          # (M, 3) integer ids: head, relation, tail
    mask = index.mask(batch, "tail")                   # (B, num_entities) bool, True = candidate
    # False where (h, r, e) is another known triple; the batch's own answer t stays True.

Conventions: triples are integer arrays of shape ``(n, 3)`` with columns head, relation, tail (PyKEEN's
``mapped_triples``); sides are named as in PyKEEN: ``"head"``, ``"tail"`` (and ``"relation"``, for
relation prediction: the mask is over relations, ``(h, ?, t)``). Outputs follow the input: a NumPy array
in gives a NumPy array out, a torch tensor gives a tensor on the same device. Nothing loops over queries
in Python: query keys are encoded as int64, the known keys are sorted once, each query's range of known
answers is found with ``searchsorted`` and the ranges are expanded and scattered in one pass.

:func:`macro_weights` gives PyKEEN's macro-averaging weights (1 / frequency of each triple's query key
among the evaluated triples), to pass as ``sample_weight``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["SIDES", "FilterIndex", "filter_mask", "macro_weights"]

#: The prediction sides, as PyKEEN names them, with the column each predicts and the two query columns.
SIDES = ("head", "relation", "tail")
_ANSWER_COLUMN = {"head": 0, "relation": 1, "tail": 2}
_QUERY_COLUMNS = {"head": (1, 2), "relation": (0, 2), "tail": (0, 1)}


def _torch_module() -> Any:
    """``torch`` if it is already imported (a tensor can only exist then), else None."""
    return sys.modules.get("torch")


def _is_tensor(x: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def _check_side(side: Any) -> str:
    if not isinstance(side, str) or side not in SIDES:
        raise ValueError(f"side must be one of {SIDES!r}; got {side!r}")
    return side


def _describe(x: Any) -> str:
    shape = tuple(getattr(x, "shape", ()))
    dtype = getattr(x, "dtype", type(x).__name__)
    return f"shape {shape}, dtype {dtype}"


def _as_triples(x: Any, name: str) -> Any:
    """Validate an ``(n, 3)`` integer array of triples; returns a NumPy int64 array or a torch
    int64 tensor (same device). Raises ``TypeError``/``ValueError`` naming ``name``."""
    if _is_tensor(x):
        torch = _torch_module()
        if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
            raise TypeError(
                f"{name} must hold integer ids (head, relation, tail); got a tensor of {_describe(x)}"
            )
        arr = x
    else:
        if isinstance(x, (str, bytes)) or x is None:
            raise TypeError(f"{name} must be an (n, 3) integer array of triples; got {type(x).__name__}")
        arr = np.asarray(x)
        if arr.size == 0 and arr.dtype == np.float64 and arr.ndim <= 2:
            arr = arr.astype(np.int64)  # an empty list has no dtype to check
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{name} must hold integer ids (head, relation, tail); got {_describe(arr)}")
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3), columns head, relation, tail; got {_describe(arr)}")
    if _is_tensor(arr):
        arr = arr.long()
        if arr.numel() and bool((arr < 0).any()):
            raise ValueError(f"{name} holds negative ids, e.g. row {_first_row(arr, arr < 0)}")
    else:
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{name} holds ids beyond int64: max {int(arr.max())}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and bool((arr < 0).any()):
            raise ValueError(f"{name} holds negative ids, e.g. row {_first_row(arr, arr < 0)}")
    return arr


def _first_row(arr: Any, bad: Any) -> str:
    """The first offending row of ``arr`` (``bad``: a bool array of its shape), for an error message."""
    rows = bad.any(1) if _is_tensor(bad) else bad.any(axis=1)
    i = int(rows.nonzero()[0][0]) if not _is_tensor(rows) else int(rows.nonzero()[0, 0])
    return f"{i}: {[int(v) for v in arr[i]]}"


def _to_numpy(arr: Any) -> np.ndarray:
    return arr.detach().cpu().numpy() if _is_tensor(arr) else np.asarray(arr)


def _check_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a non-negative int or None; got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int or None; got {value!r}")
    return int(value)


class FilterIndex:
    """The known triples of a knowledge graph, indexed for filtered masks.

    Args:
        known_triples: every known true triple (usually training + validation + test), an ``(M, 3)``
            integer array or tensor with columns head, relation, tail; or a sequence of such arrays
            (e.g. ``[train, valid, test]``), concatenated. Duplicates are harmless.
        num_entities: the number of entities (the width of a head or tail mask). Default: the largest
            entity id in ``known_triples`` plus one. Pass it whenever the graph has entities that appear
            in no known triple (PyKEEN: ``triples_factory.num_entities``).
        num_relations: the number of relations (the width of a relation mask). Default: the largest
            relation id in ``known_triples`` plus one.

    The index keeps, per side, the sorted int64 query keys of the known triples and their answers,
    in NumPy; a torch copy is made once per device on first use and cached.
    """

    def __init__(
        self,
        known_triples: Any,
        num_entities: int | None = None,
        num_relations: int | None = None,
    ) -> None:
        num_entities = _check_count(num_entities, "num_entities")
        num_relations = _check_count(num_relations, "num_relations")
        if (
            isinstance(known_triples, (list, tuple))
            and known_triples
            and all(getattr(part, "ndim", None) == 2 for part in known_triples)
        ):
            parts = [_to_numpy(_as_triples(p, f"known_triples[{i}]")) for i, p in enumerate(known_triples)]
            known = np.concatenate(parts, axis=0)
        else:
            known = _to_numpy(_as_triples(known_triples, "known_triples"))
        if known.shape[0] == 0 and (num_entities is None or num_relations is None):
            raise ValueError("known_triples is empty: pass num_entities and num_relations to size the masks")
        max_entity = int(max(known[:, 0].max(), known[:, 2].max())) if known.shape[0] else -1
        max_relation = int(known[:, 1].max()) if known.shape[0] else -1
        if num_entities is None:
            num_entities = max_entity + 1
        elif max_entity >= num_entities:
            raise ValueError(
                f"known_triples holds entity id {max_entity}, out of range for num_entities={num_entities}"
            )
        if num_relations is None:
            num_relations = max_relation + 1
        elif max_relation >= num_relations:
            raise ValueError(
                f"known_triples holds relation id {max_relation}, out of range for "
                f"num_relations={num_relations}"
            )
        self.num_entities: int = num_entities
        self.num_relations: int = num_relations
        self.num_triples: int = int(known.shape[0])
        # per side: (sorted query keys, answers in the same order), int64
        self._sorted: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for side in SIDES:
            keys = self._keys(known, side, np)
            order = np.argsort(keys, kind="stable")
            self._sorted[side] = (keys[order], np.ascontiguousarray(known[order, _ANSWER_COLUMN[side]]))
        self._device_cache: dict[Any, dict[str, tuple[Any, Any]]] = {}

    def __repr__(self) -> str:
        return (
            f"FilterIndex(num_triples={self.num_triples}, num_entities={self.num_entities}, "
            f"num_relations={self.num_relations})"
        )

    def _width(self, side: str) -> int:
        return self.num_relations if side == "relation" else self.num_entities

    def _keys(self, triples: Any, side: str, xp: Any) -> Any:
        """int64 key of each triple's query (the two columns other than ``side``'s answer)."""
        a, b = _QUERY_COLUMNS[side]
        base = self.num_relations if b == 1 else self.num_entities
        # base > every id of column b of a known triple; a query whose id is past it matches nothing
        # (it gets key -1, below every known key, which are >= 0)
        key = triples[:, a] * base + triples[:, b]
        return xp.where(triples[:, b] < base, key, xp.full_like(key, -1)) if triples.shape[0] else key

    def _tables(self, side: str, like: Any) -> tuple[Any, Any]:
        if not _is_tensor(like):
            return self._sorted[side]
        torch = _torch_module()
        cache = self._device_cache.setdefault(like.device, {})
        if side not in cache:
            keys, answers = self._sorted[side]
            cache[side] = (torch.from_numpy(keys).to(like.device), torch.from_numpy(answers).to(like.device))
        return cache[side]

    def _check_queries(self, triples: Any, side: str) -> Any:
        triples = _as_triples(triples, "triples")
        limits = (self.num_entities, self.num_relations, self.num_entities)
        # the answer column must index the mask; a query column's id past the known range matches nothing
        # for relations, but entity ids must be below num_entities
        for col, (name, limit) in enumerate(zip(("head", "relation", "tail"), limits, strict=True)):
            if col == 1 and side != "relation":
                continue
            bad = triples[:, col] >= limit
            if triples.shape[0] and bool(bad.any()):
                i = int(bad.nonzero()[0].reshape(-1)[0]) if _is_tensor(bad) else int(np.flatnonzero(bad)[0])
                what = "num_relations" if col == 1 else "num_entities"
                raise ValueError(
                    f"triples holds {name} id {int(triples[i, col])} (row {i}: "
                    f"{[int(v) for v in triples[i]]}), out of range for {what}={limit}"
                )
        return triples

    def mask(self, triples: Any, side: str) -> Any:
        """Candidate mask of each query triple, for ``side`` prediction.

        Args:
            triples: ``(B, 3)`` integer array or tensor of query triples (head, relation, tail).
            side: ``"head"`` (rank the true head among entities), ``"tail"``, or ``"relation"``.

        Returns:
            bool ``(B, num_entities)`` (``(B, num_relations)`` for ``"relation"``), of the input's type
            and device: ``True`` = candidate; ``False`` = another known answer of the same query (e.g. for
            tail prediction, entity ``e != t`` with ``(h, r, e)`` a known triple). The query's own answer is
            always ``True``, known or not.
        """
        side = _check_side(side)
        triples = self._check_queries(triples, side)
        is_torch = _is_tensor(triples)
        sorted_keys, answers = self._tables(side, triples)
        batch = triples.shape[0]
        width = self._width(side)
        own = triples[:, _ANSWER_COLUMN[side]]
        if is_torch:
            torch = _torch_module()
            keys = self._keys(triples, side, torch)
            lo = torch.searchsorted(sorted_keys, keys, right=False)
            hi = torch.searchsorted(sorted_keys, keys, right=True)
            counts = hi - lo
            rows = torch.repeat_interleave(torch.arange(batch, device=triples.device), counts)
            # position of each expanded entry: its row's start + its offset within the row's range
            starts = torch.repeat_interleave(lo - (torch.cumsum(counts, 0) - counts), counts)
            positions = starts + torch.arange(rows.shape[0], device=triples.device)
            out = torch.ones((batch, width), dtype=torch.bool, device=triples.device)
            out[rows, answers[positions]] = False
            out[torch.arange(batch, device=triples.device), own] = True
            return out
        keys = self._keys(triples, side, np)
        lo = np.searchsorted(sorted_keys, keys, side="left")
        hi = np.searchsorted(sorted_keys, keys, side="right")
        counts = hi - lo
        rows = np.repeat(np.arange(batch), counts)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        positions = starts + np.arange(rows.shape[0])
        out = np.ones((batch, width), dtype=bool)
        out[rows, answers[positions]] = False
        out[np.arange(batch), own] = True
        return out

    def known_answers(self, triples: Any, side: str) -> tuple[np.ndarray, np.ndarray]:
        """The other known answers of each query triple as CSR ``(indptr, indices)`` (NumPy
        int64): row ``i`` lists the entities ``e`` (relations, for ``"relation"``) such that
        the query of triple ``i`` with answer ``e`` is a known triple, the triple's own answer
        left out. What :meth:`mask` marks False, without the ``(B, width)`` mask (the exclusions
        of :mod:`rankstream.catalog`)."""
        side = _check_side(side)
        triples = _to_numpy(self._check_queries(triples, side))
        sorted_keys, answers = self._sorted[side]
        keys = self._keys(triples, side, np)
        lo = np.searchsorted(sorted_keys, keys, side="left")
        hi = np.searchsorted(sorted_keys, keys, side="right")
        counts = hi - lo
        rows = np.repeat(np.arange(triples.shape[0]), counts)
        positions = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(rows.shape[0])
        found = answers[positions].astype(np.int64)
        keep = found != triples[rows, _ANSWER_COLUMN[side]]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=triples.shape[0]))])
        return indptr.astype(np.int64), found[keep]


def filter_mask(
    triples: Any,
    known_triples: Any,
    side: str,
    num_entities: int | None = None,
    num_relations: int | None = None,
) -> Any:
    """One-shot :meth:`FilterIndex.mask`: ``FilterIndex(known_triples, num_entities,
    num_relations).mask(triples, side)``. Build a :class:`FilterIndex` once instead when masking many
    batches against the same known triples."""
    return FilterIndex(known_triples, num_entities, num_relations).mask(triples, side)


def macro_weights(triples: Any, side: str, dtype: Any = None) -> Any:
    """PyKEEN's macro-averaging weights: each triple weighted by 1 / (the number of triples in
    ``triples`` that share its query key), so every distinct query counts once in total.

    The key is ``(relation, tail)`` for ``"head"`` prediction, ``(head, relation)`` for ``"tail"`` and
    ``(head, tail)`` for ``"relation"`` (as ``MacroRankBasedEvaluator``, whose weights are these
    reciprocals, not normalised; weighted means divide by the weights' sum anyway). Frequencies are
    counted among ``triples`` only, so pass every triple of the evaluation (e.g. the whole test set) at
    once, not one batch, and slice the result per batch.

    Args:
        triples: ``(n, 3)`` integer array or tensor (head, relation, tail).
        side: ``"head"``, ``"tail"`` or ``"relation"``.
        dtype: the output's floating dtype (a NumPy dtype for NumPy input, a torch dtype for a tensor).
            Default float64.

    Returns:
        ``(n,)`` weights, of the input's type and device.
    """
    side = _check_side(side)
    triples = _as_triples(triples, "triples")
    a, b = _QUERY_COLUMNS[side]
    if _is_tensor(triples):
        torch = _torch_module()
        if triples.shape[0] == 0:
            return torch.zeros(0, dtype=dtype or torch.float64, device=triples.device)
        base = int(triples[:, b].max()) + 1
        keys = triples[:, a] * base + triples[:, b]
        _, inverse, counts = torch.unique(keys, return_inverse=True, return_counts=True)
        return (1.0 / counts.to(torch.float64))[inverse].to(dtype or torch.float64)
    if triples.shape[0] == 0:
        return np.zeros(0, dtype=dtype or np.float64)
    base = int(triples[:, b].max()) + 1
    keys = triples[:, a] * base + triples[:, b]
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return (1.0 / counts.astype(np.float64))[inverse.reshape(-1)].astype(dtype or np.float64, copy=False)
