"""Functional form: per-list metric values from one batch, outside any framework.

numpy in, numpy out; torch in, torch out (on the input's device). Lists that hold no
relevant item get the value 0 (use ``return_counted=True`` to tell them apart), and so do
lists whose items are all masked (never counted: a list without an item is not a list).

Each function is generated from its kernel (:func:`per_list_function`): the same arguments,
with the same defaults, as the kernel and its :class:`~rankstream.core.lists.base.ListConventions`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from rankstream.core.backends import Array  # noqa: F401  (the kernels' annotations name it)
from rankstream.core.inputs import check_positive_ints
from rankstream.core.lists import (
    DCGKernel,
    HitRateKernel,
    MAPKernel,
    NDCGKernel,
    PrecisionKernel,
    RecallKernel,
    ReciprocalRankKernel,
    RPrecisionKernel,
)
from rankstream.core.lists.base import ListConventions, ListKernel

__all__ = [
    "dcg_at_k",
    "hit_rate_at_k",
    "map_at_k",
    "ndcg_at_k",
    "per_list_function",
    "precision_at_k",
    "r_precision",
    "recall_at_k",
    "reciprocal_rank_at_k",
]


def per_list_function(kernel_cls: type[ListKernel], name: str, *, with_k: bool = True) -> Callable[..., Any]:
    """``name(y_pred, y, k=10, *, mask=None, <the kernel's options>, return_counted=False)``:
    the per-list values of one batch, shape ``(batch,)`` for an int ``k`` and
    ``(batch, len(k))`` (sorted ``k``) for a list; with ``return_counted`` also whether each
    list holds a relevant item. ``with_k=False`` (a kernel without ``top_k``, as R-precision):
    no ``k`` argument, shape ``(batch,)``."""

    def function(y_pred: Any, y: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > with_k:
            raise TypeError(
                f"{name}() takes {2 + with_k} positional arguments but {2 + len(args)} were given"
            )
        if args and "k" in kwargs:
            raise TypeError(f"{name}() got multiple values for argument 'k'")
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise TypeError(
                f"{name}() got unexpected keyword arguments {unknown}; it takes {sorted(allowed)}"
            )
        k = (args[0] if args else kwargs.pop("k", 10)) if with_k else None
        if with_k:
            check_positive_ints(k, "k")  # the kernel's own check would name its top_k
        mask = kwargs.pop("mask", None)
        return_counted = kwargs.pop("return_counted", False)
        kernel = kernel_cls(k, **kwargs) if with_k else kernel_cls(**kwargs)
        values, counted, _ = kernel.per_list(y_pred, y, mask)
        out = values if with_k and not isinstance(k, int) else values[:, 0]
        return (out, counted) if return_counted else out

    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in list(inspect.signature(kernel_cls.__init__).parameters.values())[1 + with_k :]
        if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    ]
    taken = {p.name for p in own}
    conventions = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
        for f in fields(ListConventions)
        if f.name not in taken
    ]
    P = inspect.Parameter
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            P("y_pred", P.POSITIONAL_OR_KEYWORD),
            P("y", P.POSITIONAL_OR_KEYWORD),
            *([P("k", P.POSITIONAL_OR_KEYWORD, default=10)] if with_k else []),
            P("mask", P.KEYWORD_ONLY, default=None),
            *own,
            *conventions,
            P("return_counted", P.KEYWORD_ONLY, default=False),
        ]
    )
    allowed = {p.name for p in function.__signature__.parameters.values()} - {"y_pred", "y"}  # type: ignore[attr-defined]
    function.__name__ = function.__qualname__ = name
    function.__doc__ = (
        f"Per-list values of :class:`{kernel_cls.__module__}.{kernel_cls.__name__}` for one batch: "
        "shape ``(batch,)`` for an int ``k``, ``(batch, len(k))`` (sorted ``k``) for a list. "
        "Options and defaults are the kernel's (see its docstring for the formula and the "
        "conventions); ``mask`` drops items; ``return_counted=True`` also returns whether each "
        "list holds a relevant item."
    )
    return function


map_at_k = per_list_function(MAPKernel, "map_at_k")
ndcg_at_k = per_list_function(NDCGKernel, "ndcg_at_k")
dcg_at_k = per_list_function(DCGKernel, "dcg_at_k")
precision_at_k = per_list_function(PrecisionKernel, "precision_at_k")
recall_at_k = per_list_function(RecallKernel, "recall_at_k")
hit_rate_at_k = per_list_function(HitRateKernel, "hit_rate_at_k")
reciprocal_rank_at_k = per_list_function(ReciprocalRankKernel, "reciprocal_rank_at_k")
r_precision = per_list_function(RPrecisionKernel, "r_precision", with_k=False)
