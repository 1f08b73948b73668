"""What a list metric hands to the reducer: the per-list output of one batch
(:class:`ListOutput`), the state fields it declares (:class:`ListField`) and their sums
(:func:`list_sums`), with the small helpers of a kernel's arithmetic.

The state of a list metric is

    value_sum[j] = sum_i w_i v[i, j],   weight_sum = sum_i w_i,   count = #{i : w_i > 0},
    invalid = lists with bad data found where update could not read values back,

over the lists that are counted, plus whatever fields a kernel declares; see
:mod:`rankstream.core.lists.definition` for the metric and :mod:`rankstream.core.execution` for
how one batch is read, selected and reduced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Ops
from rankstream.core.lists.selection import join_rows


@dataclass
class ListOutput:
    """The per-list output of one batch, one object from the metric to the reducer.

    :meth:`ListKernel.list_values` fills ``values`` ``(B, len(top_k))``; ``relevant`` ``(B,)``
    bool (the list holds a relevant item: the empty policy); ``relevance`` ``(B,)``, the sum
    of the relevance keras-rs weighs lists by (None: ``relevant``), and ``weighted_relevance``
    ``(B,)`` its sum weighted by the item weights (per-item weights). :meth:`ListKernel.outputs`
    adds what the reducer needs: ``counted`` ``(B,)`` bool (the lists that enter the sums),
    ``weights`` ``(B,)`` (the list weights; None: all 1) and ``invalid`` ``(B,)`` (lists with
    bad data; None where values were read back) and ``listed`` ``(B,)`` bool (the list holds an
    item; None: every list does). A kernel may return a subclass carrying more per-list arrays
    (an expectation, a second value) for its :meth:`ListKernel.list_fields`: every field is
    ``(B, ...)`` or None, so the outputs of blocks of rows join along the rows
    (:func:`joined_outputs`)."""

    values: Array
    relevant: Array
    relevance: Array | None = None
    weighted_relevance: Array | None = None
    counted: Array | None = None
    weights: Array | None = None
    invalid: Array | None = None
    listed: Array | None = None
    #: with ``chance=True``: per list ``(B, len(top_k))`` the expectation and variance under a
    #: uniformly random ranking and the value under the ideal ranking (:meth:`ListKernel.outputs`)
    expected: Array | None = None
    variance: Array | None = None
    best: Array | None = None


def joined_outputs(ops: Ops, parts: list[ListOutput]) -> ListOutput:
    """The per-list outputs of consecutive blocks of rows joined into the batch's (every
    field concatenated along the rows; the small ``(B, ...)`` arrays only)."""
    names = [f.name for f in fields(parts[0])]
    joined = join_rows(ops, [[getattr(p, name) for name in names] for p in parts])
    return type(parts[0])(**dict(zip(names, joined, strict=True)))


def divided(ops: Ops, num: Array, den: Array) -> Array:
    """``num / den``, 0 where ``den`` is 0."""
    pos = den > 0
    return ops.where(pos, num / ops.where(pos, den, 1.0), 0.0)


def list_values_of(out: ListOutput) -> Array:
    """The per-list values of an output (the term of ``value_sum``)."""
    return out.values


def squared_list_values_of(out: ListOutput) -> Array:
    """The squared per-list values of an output (the term of ``w2v2_sum``)."""
    return out.values * out.values


def list_ones_of(out: ListOutput) -> Array:
    """1 per list ``(B,)`` (the term of ``w2_sum``)."""
    return out.values[:, 0] * 0.0 + 1.0


#: what a list metric with a confidence level reports besides its value
INTERVAL_QUANTITIES = ("stderr", "ci_low", "ci_high", "count")


@dataclass(frozen=True)
class ListField:
    """A state field summed over the counted lists: ``sum_i w_i^power term(out)[i]``.

    Attributes:
        shape: the field's shape (``(len(top_k),)`` for one number per ``k``; ``()`` for one
            per list).
        term: the per-list ``(B, *shape)`` array of a :class:`ListOutput`.
        power: how the list weight ``w_i`` enters: 1 (a weighted sum, ``value_sum``), 2 (the
            squared weights of a standard error's variance) or 0 (unweighted, over the counted
            lists); unit weights give every power the same sum.
    """

    shape: tuple[int, ...]
    term: Callable[[ListOutput], Array]
    power: int = 1


def call_user(ops: Ops, fn: Any, x: Array) -> Array:
    """``fn(x)`` for a user's callable (a gain, a discount), which may know only the caller's
    arrays (a torch or ``keras.ops`` function): on ops computing on other arrays than the
    caller's (the host ops' numpy views) it gets the caller's arrays, and its result comes back.
    The result is cast to ``x``'s dtype (the working dtype), whatever dtype the callable
    returns (float16/32/64, integers, a Python number): the one place a user's callable's
    result enters the arithmetic, so no backend mixes float32 with float64."""
    given = ops.export(x)
    return ops.cast(ops.asarray(fn(given), x), x.dtype)


def quiet() -> Any:
    """Silence numpy's floating-point warnings in a kernel's arithmetic (as torch and Keras
    are silent): bad data is found by explicit checks, which raise or count it."""
    return np.errstate(all="ignore")


#: per number of a field's dimensions, the index that turns a (B,) array into (B, 1, ...)
_ROWS = [(slice(None),) + (None,) * n for n in range(8)]


def list_sums(ops: Ops, out: ListOutput, list_fields: Mapping[str, ListField]) -> dict[str, Array]:
    """The fields' sums of one batch: every :class:`ListField` of ``list_fields`` over the
    counted lists of ``out`` (lists with bad data left out), then ``weight_sum``, ``count``
    and ``invalid``."""
    invalid, weights = out.invalid, out.weights
    counted = out.counted if invalid is None else out.counted & ~invalid
    if weights is None:  # 0/1 weights: the terms are weighted once masked, the weights' sum is the count
        wc = ops.cast(counted, out.values.dtype)
        weight_sum = ops.sum(wc)
        count = weight_sum
    else:
        wc = ops.where(counted, weights, 0.0)
        weight_sum = ops.sum(wc)
        count = ops.sum(ops.cast(wc > 0, wc.dtype))
    sums = {}
    for name, f in list_fields.items():
        rows = _ROWS[len(f.shape)]  # (B,) -> (B, 1, ...) against the term
        term = ops.where(counted[rows], f.term(out), 0.0)
        if weights is not None and f.power:
            term = term * (wc if f.power == 1 else wc**f.power)[rows]
        sums[name] = ops.sum(term, axis=0)
    sums["weight_sum"], sums["count"] = weight_sum, count
    sums["invalid"] = weight_sum * 0.0 if invalid is None else ops.sum(ops.cast(invalid, wc.dtype))
    return sums
