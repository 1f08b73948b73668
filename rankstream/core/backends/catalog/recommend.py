"""Each query's top ``k`` items over a catalog scored chunk by chunk: a streamed merge, ties by
the lower item id, excluded items never recommended.

Per chunk, ``torch.topk`` of the chunk's scores gives its best ``min(k, C)``; where the chunk holds
more items equal to the last one taken than were taken (a tie across the cut, whose order
``topk`` leaves open), that row is taken again exactly: every score at or above the cut, ordered
by score then id. The running best ``k`` and the chunk's are merged by an exact sort on (score
descending, id ascending). Excluded items are scored ``-inf`` in the chunk and flagged, and the
flag sorts them after every other item; where a query has fewer than ``k`` items, the places past
its list hold id ``-1`` and score ``-inf``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _ordered(values: Any, ids: Any, flagged: Any, k: int) -> tuple[Any, Any, Any]:
    """The best ``k`` of each row by (not flagged, score descending, id ascending): three stable
    sorts, the least significant key first."""
    import torch

    order = torch.sort(ids, dim=1, stable=True).indices
    values, ids, flagged = (torch.gather(x, 1, order) for x in (values, ids, flagged))
    order = torch.sort(values, dim=1, descending=True, stable=True).indices
    values, ids, flagged = (torch.gather(x, 1, order) for x in (values, ids, flagged))
    order = torch.sort(flagged.to(torch.int8), dim=1, stable=True).indices[:, :k]
    return tuple(torch.gather(x, 1, order) for x in (values, ids, flagged))  # type: ignore[return-value]


def _chunk_best(scores: Any, flagged: Any, a: int, k: int) -> tuple[Any, Any, Any]:
    """The chunk's best ``k`` per row (exact under ties at the cut)."""
    import torch

    width = scores.shape[1]
    kk = min(k, width)
    values, cols = torch.topk(scores, kk, dim=1)
    cut = values[:, -1:]
    taken = (values == cut).sum(1)
    present = (scores == cut).sum(1)
    ids = cols + a
    flags = torch.gather(flagged, 1, cols)
    redo = torch.nonzero(present > taken)[:, 0]
    for row in redo.tolist():  # a tie across the cut: this row exactly
        keep = torch.nonzero(scores[row] >= cut[row, 0])[:, 0]
        v, i, f = _ordered(scores[row, keep][None], (keep + a)[None], flagged[row, keep][None], kk)
        values[row], ids[row], flags[row] = v[0], i[0], f[0]
    return values.to(torch.float64), ids, flags


def top_items(
    scorer: Any, queries: Any, k: int, q: int, chunk: int, ex_query: np.ndarray, ex_item: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` ``(Q, k)``: each query's best ``k`` items, best first (ties by the lower
    id), excluded items left out (id ``-1``, score ``-inf`` past a list's end)."""
    import torch

    n = scorer.num_items
    values = torch.full((q, 0), float("-inf"), dtype=torch.float64)
    ids = torch.zeros((q, 0), dtype=torch.int64)
    flags = torch.zeros((q, 0), dtype=torch.bool)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        scores = scorer.chunk(queries, a, b, q).clone()
        if bool(torch.isnan(scores.amax(1)).any()):
            raise ValueError(f"the scores of items [{a}, {b}) hold NaN values; NaN scores are not ranked")
        flagged = torch.zeros(scores.shape, dtype=torch.bool)
        lo, hi = np.searchsorted(ex_item, [a, b])
        if hi > lo:
            er, ec = torch.from_numpy(ex_query[lo:hi]), torch.from_numpy(ex_item[lo:hi] - a)
            scores[er, ec] = float("-inf")
            flagged[er, ec] = True
        v, i, f = _chunk_best(scores, flagged, a, k)
        values, ids, flags = _ordered(
            torch.cat([values, v], 1), torch.cat([ids, i], 1), torch.cat([flags, f], 1), k
        )
    ids = torch.where(flags, -1, ids)
    values = torch.where(flags, float("-inf"), values)
    if ids.shape[1] < k:  # a catalog of fewer than k items
        pad = k - ids.shape[1]
        ids = torch.cat([ids, torch.full((q, pad), -1, dtype=torch.int64)], 1)
        values = torch.cat([values, torch.full((q, pad), float("-inf"), dtype=torch.float64)], 1)
    return values.numpy(), ids.numpy()
