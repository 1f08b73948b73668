"""How a catalog is scored: item embeddings (dot product or cosine) or a user's callable.

A scorer gives the scores of a batch of queries against a chunk of consecutive items,
``(Q, C)`` (:meth:`chunk`), and once per batch each relevant item's score *alone*, with a band
that bounds how far that score may be from the score the item gets in its own chunk
(:meth:`relevant`): the counting keeps apart the catalog scores that fall inside the band and
compares them, at the end, with the exact score read from the item's own chunk, so every count is
exactly that of the chunk's arithmetic (an item never ties or fails to tie with itself by a
rounding difference).

torch is imported when a scorer is made (the catalog path computes with torch on the CPU; numpy
inputs are viewed as tensors without a copy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rankstream.core import sizes as _sizes

SIMILARITIES = ("dot", "cosine")


def torch_tensor(x: Any, name: str) -> Any:
    """A CPU torch tensor of ``x`` (numpy viewed without a copy; a TypeError naming ``name``
    for anything else)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")


class EmbeddingScorer:
    """Scores ``q . e`` (``"dot"``) or ``q . e / (|q| |e|)`` (``"cosine"``) of query embeddings
    against item embeddings ``items`` ``(N, d)`` (float32 or float64)."""

    def __init__(self, items: Any, similarity: str = "dot") -> None:
        import torch

        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        items = torch_tensor(items, "items")
        if (
            items.ndim != 2
            or not items.is_floating_point()
            or items.dtype not in (torch.float32, torch.float64)
        ):
            raise TypeError(
                "items must be a (num_items, dim) float32 or float64 array, "
                f"got {tuple(items.shape)} {items.dtype}"
            )
        self.items, self.similarity = items, similarity
        self.num_items, self.dim, self.dtype = int(items.shape[0]), int(items.shape[1]), items.dtype

    def queries(self, queries: Any) -> Any:
        """The query embeddings as the chunks read them (normalised for cosine), checked."""
        import torch

        q = torch_tensor(queries, "queries")
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValueError(
                f"queries must be a (batch, {self.dim}) array of embeddings, got shape {tuple(q.shape)}"
            )
        if q.dtype != self.dtype:
            raise TypeError(f"queries must have the items' dtype {self.dtype}, got {q.dtype}")
        if not bool(torch.isfinite(q).all()):
            raise ValueError("queries must be finite embeddings, got NaN or infinite values")
        return self._normal(q)

    def _normal(self, x: Any) -> Any:
        if self.similarity == "dot":
            return x
        import torch

        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
        return x / torch.where(norm > 0, norm, torch.ones_like(norm))

    #: :meth:`chunk` can write into a given tensor (the counting reuses one across chunks)
    writes_into = True

    def chunk(self, queries: Any, start: int, stop: int, rows: int, out: Any = None) -> Any:
        """``(Q, stop - start)`` scores; written into ``out`` where it is a tensor of that shape
        and dtype (no fresh pages per chunk)."""
        import torch

        e = self._normal(self.items[start:stop]).T
        shape = (int(queries.shape[0]), stop - start)
        if out is not None and tuple(out.shape) == shape and out.dtype == queries.dtype:
            return torch.matmul(queries, e, out=out)
        return torch.matmul(queries, e)

    def relevant(self, queries: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(t, band)``: each slot's score alone in float64 ``(Q, M)``, and per query the half-width
        of the band ``(Q,)``: the float rounding bound of a dot product of ``d`` terms,
        ``(d + 2) u sum_k |q_k e_k|`` (``u`` the unit roundoff of the dtype), over its slots."""
        t, bound = self.relevant_each(queries, ids)
        return t, bound.max(axis=1, initial=0.0)

    def relevant_each(self, queries: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(t, bound)`` ``(Q, M)``: each slot's score alone and its own rounding bound (the band
        of a query is the largest of its slots'; a shard computes them for the items it holds)."""
        import torch

        q, m = ids.shape
        t, total = np.empty((q, m)), np.empty((q, m))  # total: sum_k |q_k e_k|
        step = max(1, _sizes.SIZES.catalog_relevant_values // max(m * self.dim, 1))
        for r0 in range(0, q, step):  # blocks of queries: float64 temporaries of a few hundred KiB
            r1 = min(r0 + step, q)
            idx = torch.from_numpy(np.ascontiguousarray(ids[r0:r1]).reshape(-1))
            e = self._normal(torch.index_select(self.items, 0, idx)).reshape(r1 - r0, m, self.dim)
            e, qq = e.to(torch.float64), queries[r0:r1].to(torch.float64)[:, :, None]
            t[r0:r1] = torch.bmm(e, qq)[..., 0].numpy()
            total[r0:r1] = torch.bmm(e.abs(), qq.abs())[..., 0].numpy()  # not in place: qq may be theirs
        u = float(torch.finfo(self.dtype).eps) / 2.0
        bound = (self.dim + 2) * u * 1.01 * total + float(torch.finfo(self.dtype).tiny)
        return t, bound


class CallableScorer:
    """Scores from the user's ``score(queries, item_ids) -> (Q, len(item_ids))`` (item ids a 1-D
    int64 torch tensor; a chunk's are consecutive): a PyKEEN model's ``score_t`` with ``tails=``,
    a cross-encoder, any model. Its output must be a float tensor or array of that shape."""

    def __init__(self, score: Callable[[Any, Any], Any], num_items: int) -> None:
        if not callable(score):
            raise TypeError(f"score must be a callable score(queries, item_ids), got {type(score).__name__}")
        if isinstance(num_items, bool) or not isinstance(num_items, int) or num_items < 1:
            raise ValueError(f"num_items must be a positive integer with a score callable, got {num_items!r}")
        self.score, self.num_items, self.dtype = score, num_items, None

    def queries(self, queries: Any) -> Any:
        return queries

    def _call(self, queries: Any, ids: Any, rows: int) -> Any:
        import torch

        out = self.score(queries, ids)
        got = out
        if isinstance(out, np.ndarray):
            out = torch.from_numpy(out)
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            raise TypeError(
                f"score must return a float tensor of shape ({rows}, {ids.shape[0]}), got {_what(got)}"
            )
        if tuple(out.shape) != (rows, int(ids.shape[0])):
            raise ValueError(
                f"score must return shape ({rows}, {ids.shape[0]}) for {rows} queries and {ids.shape[0]} "
                f"items, got {_what(got)}"
            )
        return out.detach().to("cpu")

    def chunk(self, queries: Any, start: int, stop: int, rows: int) -> Any:
        import torch

        return self._call(queries, torch.arange(start, stop, dtype=torch.int64), rows)

    def relevant(self, queries: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(t, band)``: the relevant items' scores from one call over their ids (every query
        against the union), and a band of ``SIZES.catalog_callable_band`` times the largest ``|t|``
        per query."""
        t, bound = self.relevant_each(queries, ids)
        return t, bound.max(axis=1, initial=0.0)

    def relevant_each(self, queries: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(t, bound)`` ``(Q, M)``: the slots' scores and ``SIZES.catalog_callable_band`` times
        each ``|t|``."""
        import torch

        union, inverse = np.unique(ids, return_inverse=True)
        s = (
            self._call(queries, torch.from_numpy(union.astype(np.int64)), ids.shape[0])
            .to(torch.float64)
            .numpy()
        )
        t = np.take_along_axis(s, inverse.reshape(ids.shape), axis=1)
        if np.isnan(t).any():
            q, c = np.argwhere(np.isnan(t))[0]
            raise ValueError(
                f"score gave item {int(ids[q, c])} of query {q} a NaN score; NaN scores are not ranked"
            )
        scale = np.where(np.isfinite(t), np.abs(t), 0.0)
        return t, _sizes.SIZES.catalog_callable_band * scale + np.finfo(np.float32).tiny


def _what(x: Any) -> str:
    return (
        f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))} and dtype {getattr(x, 'dtype', '?')}"
    )
