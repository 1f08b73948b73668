"""Functional form: per-list metric values from one batch, outside any framework.

numpy in, numpy out; torch in, torch out (on the input's device). Lists that hold no
relevant item get the value 0 (use ``return_counted=True`` to tell them apart), and so do
lists whose items are all masked (never counted: a list without an item is not a list).

Each function is generated from its kernel (:func:`per_list_function`), one per row of the table
of list metrics (:mod:`rankstream.core.lists.table`): the same arguments, with the same defaults,
as the kernel and its :class:`~rankstream.core.lists.conventions.ListConventions`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rankstream.core.backends import Array  # noqa: F401  (the kernels' annotations name it)
from rankstream.core.inputs import check_positive_ints
from rankstream.core.lists.base import ListKernel
from rankstream.core.lists.table import LIST_METRICS, ListMetricRow


def per_list_function(kernel_cls: type[ListKernel], name: str, *, with_k: bool = True) -> Callable[..., Any]:
    """``name(y_pred, y, k=10, *, mask=None, <the kernel's options>, return_counted=False)``:
    the per-list values of one batch, shape ``(batch,)`` for an int ``k`` and
    ``(batch, len(k))`` (sorted ``k``) for a list; with ``return_counted`` also whether each
    list holds a relevant item; with the kernel's ``confidence`` or ``chance``, the batch's mean
    with its standard error and interval, or its chance quantities, instead. ``with_k=False``
    (a kernel without ``top_k``, as R-precision): no ``k`` argument, shape ``(batch,)``."""

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
        if kernel.confidence is not None or kernel.chance:  # the batch's mean with its statistics
            if return_counted:
                given = "confidence" if kernel.confidence is not None else "chance"
                raise ValueError(f"{name}(): return_counted goes with per-list values, not with {given}")
            from rankstream.core.state import State

            stats = State(kernel).update(y_pred, y, mask=mask).compute()
            return stats if not with_k or not isinstance(k, int) else {q: v[0] for q, v in stats.items()}
        values, counted, _ = kernel.per_list(y_pred, y, mask)
        out = values if with_k and not isinstance(k, int) else values[:, 0]
        return (out, counted) if return_counted else out

    P = inspect.Parameter
    own = [p for p in inspect.signature(kernel_cls).parameters.values() if p.kind is P.KEYWORD_ONLY]
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            P("y_pred", P.POSITIONAL_OR_KEYWORD),
            P("y", P.POSITIONAL_OR_KEYWORD),
            *([P("k", P.POSITIONAL_OR_KEYWORD, default=10)] if with_k else []),
            P("mask", P.KEYWORD_ONLY, default=None),
            *own,
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
        "list holds a relevant item. With ``confidence`` (a level such as 0.95) the batch's mean "
        "instead, with its standard error and Student-t interval over the lists: "
        "``{'value', 'stderr', 'ci_low', 'ci_high', 'count'}`` (floats for an int ``k``, lists "
        "ordered by ``k`` otherwise; see docs/statistics.md). With ``chance=True`` the batch's mean "
        "with ``'expected'`` (under a uniformly random ranking of each list), ``'adjusted'`` and "
        "``'z'`` beside it (see docs/chance.md)."
    )
    return function


# one function per row of the table of list metrics (``map_at_k``, ``ndcg_at_k``, ...)
globals().update(
    {row.function: per_list_function(row.kernel, row.function, with_k=row.takes_k) for row in LIST_METRICS}
)
__all__ = sorted(["per_list_function", "register", *(row.function for row in LIST_METRICS)])


def register(row: ListMetricRow) -> Callable[..., Any]:
    """The functional form of a row registered at runtime
    (:func:`rankstream.core.lists.table.register`), bound in this module as ``row.function``."""
    function = per_list_function(row.kernel, row.function, with_k=row.takes_k)
    globals()[row.function] = function
    return function
