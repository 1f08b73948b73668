"""The catalog path's inputs, checked and normalised once per batch: each query's relevant item
ids (a list of arrays, or a padded ``(Q, R)`` array with ``-1``), their grades, and each query's
excluded items (a list of arrays, CSR ``(indptr, indices)``, a scipy sparse matrix, or a
:class:`~rankstream.filtering.FilterIndex` with the query triples and side).

Everything comes back as host numpy: ``ids`` ``(Q, M)`` int64 with a ``present`` mask, ``labels``
``(Q, M)`` float64, and the excluded ``(query, item)`` pairs sorted by item, each pair once.

A relevant item that is also excluded is an error naming ``exclude``: an excluded item is not in
the query's list (as a masked item of the dense path), so a relevant one would be a relevance
judgment about an item that is not ranked; drop it from ``relevant`` (it then counts nowhere) or
from ``exclude`` (it is then ranked among the others, as PyKEEN's filtered setting keeps the true
answer of each query while filtering the other known answers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.core.relevant.ranks import host


def _describe(x: Any) -> str:
    shape = getattr(x, "shape", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)} and dtype {getattr(x, 'dtype', '?')}"
    return f"{type(x).__name__} {x!r}"[:200]


def _int_array(x: Any, name: str) -> np.ndarray:
    arr = host(x)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer item ids, got {_describe(x)}")
    return arr.astype(np.int64, copy=False)


def relevant_slots(
    relevant: Any, num_items: int, grades: Any = None, num_queries: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, present, labels)`` ``(Q, M)`` of each query's relevant items: ``relevant`` a list of
    1-D id arrays (one per query) or a padded 2-D array (``-1`` past each query's ids); ``grades``
    alike (None: 1 for every relevant item). Ids must lie in ``[0, num_items)`` and not repeat
    within a query; grades must be finite and ``> 0`` (an item of grade 0 is not relevant)."""
    if isinstance(relevant, (list, tuple)):
        rows = [_int_array(r, f"relevant[{i}]").reshape(-1) for i, r in enumerate(relevant)]
        m = max([r.shape[0] for r in rows] + [0])
        ids = np.full((len(rows), m), -1, np.int64)
        for i, r in enumerate(rows):
            ids[i, : r.shape[0]] = r
        given = ids >= 0
        bad_pad = np.zeros_like(given)
        for i, r in enumerate(rows):
            bad_pad[i, : r.shape[0]] = r < 0
    else:
        ids = _int_array(relevant, "relevant")
        if ids.ndim != 2:
            raise ValueError(
                "relevant must be a list of id arrays or a (queries, R) array padded with -1, "
                f"got {_describe(relevant)}"
            )
        given = ids >= 0
        bad_pad = ids < -1
    if ids.shape[1] == 0:  # one padding column: every per-slot array has one
        ids, given, bad_pad = (
            np.full((ids.shape[0], 1), -1, np.int64),
            np.zeros((ids.shape[0], 1), bool),
            np.zeros((ids.shape[0], 1), bool),
        )
    if bad_pad.any():
        q, c = np.argwhere(bad_pad)[0]
        raise ValueError(
            f"relevant holds a negative item id {int(ids[q, c])} (query {q}); pad with -1 in a 2-D array only"
        )
    if num_queries is not None and ids.shape[0] != num_queries:
        raise ValueError(f"relevant must hold one row per query ({num_queries}), got {ids.shape[0]}")
    out = given & (ids >= num_items)
    if out.any():
        q, c = np.argwhere(out)[0]
        raise ValueError(
            f"relevant holds item id {int(ids[q, c])} (query {q}), out of range for a catalog of "
            f"{num_items} items"
        )
    s = np.sort(np.where(given, ids, -1 - np.arange(ids.shape[1])[None, :]), axis=1)
    dup = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    if dup.any():
        q, c = np.argwhere(dup)[0]
        raise ValueError(
            f"relevant repeats item id {int(s[q, c])} in query {q}: each relevant item once, with its grade"
        )
    labels = np.where(given, 1.0, 0.0)
    if grades is not None:
        if isinstance(grades, (list, tuple)):
            g = np.zeros(ids.shape)
            for i, r in enumerate(grades):
                r = host(r, np.float64).reshape(-1)
                if i >= ids.shape[0] or r.shape[0] != int(given[i].sum()):
                    raise ValueError(
                        f"grades[{i}] must hold one grade per relevant id of query {i}, got {_describe(r)}"
                    )
                g[i, : r.shape[0]] = r
        else:
            g = host(grades, np.float64)
            if g.shape != ids.shape:
                raise ValueError(f"grades must have relevant's shape {ids.shape}, got {_describe(grades)}")
        bad = given & ~(np.isfinite(g) & (g > 0))
        if bad.any():
            q, c = np.argwhere(bad)[0]
            raise ValueError(
                f"grades must be finite and > 0 for every relevant id, got {g[q, c]!r} "
                f"(query {q}, item {int(ids[q, c])})"
            )
        labels = np.where(given, g, 0.0)
    return np.where(given, ids, 0), given, labels


def excluded_pairs(exclude: Any, num_queries: int, num_items: int) -> tuple[np.ndarray, np.ndarray]:
    """``(query, item)`` int64 pairs of the excluded items, each pair once, sorted by item:
    ``exclude`` None, a list of 1-D id arrays (one per query), a tuple ``(indptr, indices)`` (CSR,
    ``indptr`` of ``Q + 1`` offsets), a scipy sparse matrix (its nonzero pattern), or a tuple
    ``(FilterIndex, triples, side)`` (the other known answers of each query triple)."""
    if exclude is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if isinstance(exclude, tuple) and len(exclude) == 3 and hasattr(exclude[0], "known_answers"):
        indptr, indices = exclude[0].known_answers(exclude[1], exclude[2])
        indptr, indices = host(indptr, np.int64), host(indices, np.int64)
    elif hasattr(exclude, "indptr") and hasattr(exclude, "indices"):
        indptr, indices = host(exclude.indptr, np.int64), host(exclude.indices, np.int64)
    elif isinstance(exclude, tuple) and len(exclude) == 2:
        indptr, indices = _int_array(exclude[0], "exclude indptr"), _int_array(exclude[1], "exclude indices")
    elif isinstance(exclude, list):
        if len(exclude) != num_queries:
            raise ValueError(
                f"exclude must hold one id array per query ({num_queries}), got a list of {len(exclude)}"
            )
        rows = [_int_array(r, f"exclude[{i}]").reshape(-1) for i, r in enumerate(exclude)]
        indptr = np.concatenate([[0], np.cumsum([r.shape[0] for r in rows])]).astype(np.int64)
        indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    else:
        raise TypeError(
            "exclude must be None, a list of id arrays, a tuple (indptr, indices), a scipy sparse matrix "
            f"or (FilterIndex, triples, side), got {_describe(exclude)}"
        )
    if (
        indptr.ndim != 1
        or indptr.shape[0] != num_queries + 1
        or indptr[0] != 0
        or np.any(np.diff(indptr) < 0)
    ):
        raise ValueError(
            f"exclude's indptr must be {num_queries + 1} nondecreasing offsets from 0, "
            f"got {_describe(indptr)}"
        )
    if indptr[-1] != indices.shape[0]:
        raise ValueError(
            f"exclude's indptr ends at {int(indptr[-1])} but indices holds {indices.shape[0]} ids"
        )
    bad = (indices < 0) | (indices >= num_items)
    if bad.any():
        raise ValueError(
            f"exclude holds item id {int(indices[bad][0])}, out of range for a catalog of {num_items} items"
        )
    query = np.repeat(np.arange(num_queries, dtype=np.int64), np.diff(indptr))
    key = np.unique(indices * num_queries + query)  # each pair once, sorted by item
    return key % num_queries, key // num_queries


def check_disjoint(ids: np.ndarray, present: np.ndarray, ex_query: np.ndarray, ex_item: np.ndarray) -> None:
    """A ``ValueError`` naming ``exclude`` where a relevant item is also excluded."""
    if ex_query.size == 0:
        return
    q = ids.shape[0]
    rel = np.unique(ids[present] * q + np.nonzero(present)[0]) if present.any() else np.zeros(0, np.int64)
    both = np.intersect1d(rel, ex_item * q + ex_query)
    if both.size:
        item, query = int(both[0] // q), int(both[0] % q)
        raise ValueError(
            f"exclude holds item {item} of query {query}, which relevant lists as relevant: an excluded item "
            "is not ranked; drop it from exclude (to rank it) or from relevant"
        )
