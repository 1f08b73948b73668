"""The streamed kernel's expectation terms: the unit-weight per-task terms of every family's
columns (:attr:`RankFamily.columns <rankstream.core.ranks.families.RankFamily>`), looked up
per task by its number of candidates.

Every term is elementwise in the number of candidates ``N``, so a batch gathers them from a
table of ``N = 1..n`` built with numpy once per list width and cached in the metric's
workspace (:meth:`TermTable.terms`); where values are read back and that table would be
large, from rows for the counts seen so far; beyond ``table_max`` they are computed per task
on the kernel's arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context
from rankstream.core.ranks.families import RankFamily
from rankstream.core.sizes import SIZES

__all__ = ["TABLE_MAX", "TermTable"]

#: the default of ``RankKernel(table_max=...)`` (a public signature's default):
#: :attr:`~rankstream.core.sizes.Sizes.table_max`
TABLE_MAX = SIZES.table_max


class TermTable:
    """The expectation columns of ``families`` (cut-offs ``ks``, GMR order ``order``): a field
    several families keep (``rank_mean``, ``rank_var``) is filled by the first of them.

    Attributes:
        columns: ``(field, power of the task weight)`` of each column, in order.
    """

    def __init__(
        self, families: Sequence[RankFamily], ks: Sequence[int], order: int, table_max: int = TABLE_MAX
    ) -> None:
        self.families, self.ks, self.order, self.table_max = tuple(families), list(ks), order, table_max
        self.columns: list[tuple[str, int]] = []
        #: per family, the indices of its columns kept (those of fields not filled before)
        self._kept: list[list[int]] = []
        for fam in self.families:
            taken = {field for field, _ in self.columns}
            cols = fam.columns(self.ks, order)
            kept = [i for i, (field, _) in enumerate(cols) if field not in taken]
            self._kept.append(kept)
            self.columns += [cols[i] for i in kept]

    def unit_terms(self, n: Array, xp: Any) -> list[Array]:
        """Per-task terms at unit weight, in the order of :attr:`columns`."""
        out: list[Array] = []
        for fam, kept in zip(self.families, self._kept, strict=True):
            if kept:
                terms = fam.unit_terms(n, xp, self.ks, self.order)
                out += [terms[i] for i in kept]
        return out

    def _table(self, ctx: Context, like: Array, n: int, acc: Any) -> Array:
        """(n, F) terms for N = 1..n, built with numpy once per width and kept, on the device
        of ``like``, in the instance's workspace. While tracing (``ops.eager`` False) only the
        numpy table is kept: a tensor made inside a ``jit`` trace belongs to it."""
        ops = ctx.ops

        def build() -> np.ndarray:
            # in chunks of N (every term is elementwise in N): the temporaries of the terms'
            # arithmetic, a few dozen arrays per column, stay those of one chunk at any width
            table: np.ndarray | None = None
            chunk = ctx.sizes.table_chunk
            for start in range(0, n, chunk):
                grid = np.arange(start + 1, min(start + chunk, n) + 1, dtype=np.float64)
                cols = self.unit_terms(grid, np)
                if table is None:
                    table = np.empty((n, len(cols)), dtype=np.float64)
                for j, col in enumerate(cols):
                    table[start : start + grid.shape[0], j] = col
            assert table is not None  # n >= 1
            return table

        host = ctx.workspace.get("rank_terms", n, build)
        if not ops.eager:
            return ops.asarray(host, like=like, dtype=acc)
        key = (ops.name, n, str(getattr(like, "device", "")), str(acc))
        return ctx.workspace.get("rank_terms_device", key, lambda: ops.asarray(host, like=like, dtype=acc))

    def _seen_terms(self, ctx: Context, nc: Array, n: int, like: Array) -> Array:
        """(tasks, columns) unit-weight terms where values are read back and the per-N table
        would be large: rows only for the candidate counts seen so far (kept, sorted, in the
        instance's workspace; a batch computes those of the counts it sees first), gathered
        by a search of the sorted counts. The terms are elementwise in N, so each row is the
        table's row of that N."""
        ops = ctx.ops
        acc = nc.dtype
        want = np.asarray(ops.to_numpy(nc), dtype=np.float64)
        want = np.clip(np.nan_to_num(want, nan=1.0), 1.0, float(n))
        seen = ctx.workspace.get("rank_terms_seen", None, dict)
        counts = seen.get("n", np.empty(0))
        new = np.setdiff1d(np.unique(want), counts, assume_unique=True)
        if new.size:
            cols = self.unit_terms(new, np)
            rows = np.empty((new.size, len(cols)), dtype=np.float64)
            for j, col in enumerate(cols):
                rows[:, j] = col
            counts = np.concatenate([counts, new])
            order = np.argsort(counts, kind="stable")
            seen["n"] = counts[order]
            seen["rows"] = np.concatenate([seen["rows"], rows])[order] if "rows" in seen else rows[order]
            seen.pop("device", None)
        key = (ops.name, str(getattr(like, "device", "")), str(acc))
        if seen.get("device", (None,))[0] != key:
            seen["device"] = (key, ops.asarray(seen["rows"], like=like, dtype=acc))
        idx = ops.asarray(np.searchsorted(seen["n"], want), like=like, dtype=ops.int_dtype())
        return ops.take(seen["device"][1], idx, axis=0)

    def terms(self, ctx: Context, nc: Array, n: int, like: Array) -> Array:
        """(tasks, columns) unit-weight terms of every task (flat candidate counts ``nc``, at
        most ``n``), by table lookup or directly."""
        ops = ctx.ops
        acc = nc.dtype
        if ctx.read_back and n * len(self.columns) > ctx.sizes.dense_table_max:
            return self._seen_terms(ctx, nc, n, like)
        if n <= self.table_max:
            table = self._table(ctx, like, n, acc)
            idx = ops.cast(ops.minimum(ops.maximum(nc, 1.0), float(n)) - 1.0, ops.int_dtype())
            return ops.take(table, idx, axis=0)
        return ops.stack([c + 0.0 * nc for c in self.unit_terms(ops.maximum(nc, 1.0), ops.xp)], axis=1)
