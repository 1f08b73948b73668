"""Functional form: per-list metric values from one batch, outside any framework.

numpy in, numpy out; torch in, torch out (on the input's device). Lists that hold no
relevant item get the value 0 (use ``return_counted=True`` to tell them apart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rankstream.core.metrics.map import MAPKernel
from rankstream.core.metrics.ndcg import NDCGKernel
from rankstream.core.ops import Array


def _squeeze(values: Array, k: int | list[int]) -> Array:
    return values[:, 0] if isinstance(k, int) else values


def map_at_k(
    y_pred: Any,
    y: Any,
    k: int | list[int] = 10,
    *,
    mask: Any = None,
    denominator: str = "min",
    relevance_threshold: float | None = None,
    ties: str = "first",
    seed: Any = None,
    return_counted: bool = False,
) -> Any:
    """Average precision at ``k`` of every list: shape ``(batch,)`` for an int ``k``,
    ``(batch, len(k))`` (sorted ``k``) for a list. See :class:`~rankstream.core.metrics.map.MAPKernel`
    for the formula and the conventions."""
    kernel = MAPKernel(
        k, denominator=denominator, relevance_threshold=relevance_threshold, ties=ties, seed=seed
    )
    values, counted, _ = kernel.per_list(y_pred, y, mask)
    out = _squeeze(values, k)
    return (out, counted) if return_counted else out


def ndcg_at_k(
    y_pred: Any,
    y: Any,
    k: int | list[int] = 10,
    *,
    mask: Any = None,
    gain: str | Callable[[Array], Array] = "exp_rank",
    discount: Callable[[Array], Array] | None = None,
    relevance_threshold: float | None = None,
    ties: str = "first",
    seed: Any = None,
    return_counted: bool = False,
) -> Any:
    """nDCG at ``k`` of every list: shape ``(batch,)`` for an int ``k``, ``(batch, len(k))``
    for a list. See :class:`~rankstream.core.metrics.ndcg.NDCGKernel`."""
    kernel = NDCGKernel(
        k, gain=gain, discount=discount, relevance_threshold=relevance_threshold, ties=ties, seed=seed
    )
    values, counted, _ = kernel.per_list(y_pred, y, mask)
    out = _squeeze(values, k)
    return (out, counted) if return_counted else out
