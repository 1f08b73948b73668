"""The arguments of the generated Keras metric classes: one dictionary of descriptions, from
which each class's ``Args:`` section is written, and the signature builder."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

import keras

Seed = int | keras.random.SeedGenerator | None

#: every argument's description; ``name/variant`` keys where classes word it differently, and
#: ``{placeholders}`` filled per class
ARGS: dict[str, str] = {
    "k": "the cut-off, a positive int, or None for the whole list; clipped to the list length.",
    "k/rank": "the cut-off, a positive int (several at once: `RankBasedMetrics`).",
    "gain_fn": 'a callable of the labels (default ``2^y - 1``), or ``"exp_rank"`` / ``"linear_rank"``.',
    "rank_discount_fn": "a callable of the 1-based rank (default ``1 / log2(rank + 1)``).",
    "shuffle_ties": "break score ties at random, seeded by ``seed`` (True, keras-rs); False ranks the "
    "earlier item first, with a mask too (where keras-rs shuffles anyway).",
    "seed": "an int, a ``keras.random.SeedGenerator`` or None, for the tie order.",
    "name": 'the metric\'s name (default ``"{short}@k"``, e.g. ``"{short}@10"``; ``"{short}"`` for the '
    "whole list).",
    "name/whole": 'the metric\'s name (default ``"{short}"``).',
    "name/rank": 'the metric\'s name (default ``"{short}"``, ``"{{output}}_{short}"`` for another output).',
    "dtype": "as for every Keras metric: inputs are cast to it, ``result()`` is returned in it.",
    "denominator/map": '``"all"`` (``Z``, keras-rs, default) or ``"min"`` (the best numerator reachable '
    "in the top ``k``, ignite's ``min(R, k)`` for unit weights).",
    "denominator/precision": '``"valid"`` (``min(k, valid items)``, keras-rs, default) or ``"k"``.',
    "max_grade": "the maximum grade ``g_max`` of ``R_j = (2^g - 1) / 2^g_max`` (default 4, gdeval's); "
    "labels above it count as ``g_max``.",
    "p": "the persistence, in (0, 1) (default 0.8, ir_measures').",
    "graded": "False (default: binary gains) or True (the labels of the relevant items as gains, ranx's).",
    "residual": "False (default: the value alone) or True: ``result()`` also reports the mean residual "
    '``p^min(k, n)`` under ``name + "_residual"``.',
    "weight_by_size": "False (each list weighs its keras-rs weight; `ListAUC`'s default) or True (times "
    "its number of items: the impression-weighted GAUC, `GAUC`'s default).",
    "relevance_threshold": "relevant means ``y >= t`` (default 1.0, keras-rs's); None: ``y > 0``.",
    "relevance_threshold/gain": "labels below it count as 0 (default None: the labels as they are).",
    "empty": '``"zero"`` (keras-rs: a list without a relevant item scores 0, default) or ``"skip"`` '
    "(it is left out).",
    "rank_type": '``"realistic"`` (default: the mean of the two others), ``"optimistic"`` (tied '
    'candidates rank after the true one) or ``"pessimistic"`` (before it); ties are counted exactly, '
    "never broken at random.",
    "output": '``"value"`` (default); ``"expected"`` or ``"variance"`` (under random ranking, from each '
    'task\'s number of candidates); ``"adjusted"`` (``(M - E) / (1 - E)``{adjusted}) or ``"z"`` '
    "(``(M - E) / sqrt(Var)``), as PyKEEN's metric classes.",
    "state_dtype": '``"float64"``, ``"float32"`` (Kahan-compensated) or None (float64 where the backend '
    "has it).",
    "ties": 'None (default: as ``shuffle_ties`` says) or the tie policy, overriding it: ``"first"``, '
    '``"random"`` or ``"expected"`` (the exact mean over every order of the tied items: the '
    "reproducible choice where scores tie).",
    "confidence": "None (default: ``result()`` is the value alone, as keras-rs) or a level in (0, 1), e.g. "
    '0.95: ``result()`` is ``{{name: value, name + "_stderr": ..., name + "_ci_low": ..., name + '
    '"_ci_high": ..., name + "_count": ...}}``, each a key of the logs: the standard error of the mean '
    "over the lists (weighted by the collapsed list weights), Student's t interval at that level with "
    "``count - 1`` degrees of freedom, and the lists counted.",
    "query_ids": "False (default: lists, as keras-rs) or True: flat items with a query id each, "
    '``y_true`` ``{{"labels": y, "indexes": ids}}`` (optionally ``"mask"``) or ``(num_items, 2)`` '
    "(labels, ids), ``y_pred`` ``(num_items,)`` or ``(num_items, 1)``, ``sample_weight`` per item; "
    "grouped into lists per batch, each batch holding whole queries (see docs/query_ids.md).",
    "max_queries": "with ``query_ids``: the most distinct queries in one batch, or None; required in a "
    "compiled step (the lists are ``(max_queries, max_query_length)``), eagerly a checked bound. A "
    "compiled batch over a bound is left out and counted as invalid (``result()`` NaN).",
    "max_query_length": "with ``query_ids``: the most items of one query in one batch, or None "
    "(required in a compiled step, as ``max_queries``).",
    "query_mode": '``"whole"`` (default, the only mode in Keras): each batch holds whole queries (a query '
    'cut by a batch counts as two, unchecked); ``"contiguous"``, ``"sorted"`` and ``"any"`` are refused (a '
    "carried query, closed ids or stored items are not sums).",
    "chance": 'False (default) or True: ``result()`` is ``{{name: value, name + "_expected": ..., name + '
    '"_adjusted": ..., name + "_z": ...}}`` (after the interval\'s keys with ``confidence``), each a key of '
    "the logs: the mean under a uniformly random ranking of each list's items, ``(M - E) / (M_best - E)`` "
    "(1 at the ideal ranking, 0 by chance) and ``(M - E) / sqrt(Var)`` (see docs/chance.md).",
}


def describe(name: str, variant: str | None = None, **fields: Any) -> str:
    """The description of argument ``name`` (its ``variant`` where one is written)."""
    key = f"{name}/{variant}"
    return (ARGS[key] if key in ARGS else ARGS[name]).format(**fields)


def args_section(descriptions: Iterable[tuple[str, str]], width: int = 96) -> str:
    """A Google-style ``Args:`` section of ``(name, description)`` pairs."""
    lines = ["Args:"]
    for name, text in descriptions:
        lines += textwrap.wrap(text, width, initial_indent=f"    {name}: ", subsequent_indent=" " * 8)
    return "\n".join(lines)


def signature(
    positional: Mapping[str, tuple[str, Any]], keyword: Mapping[str, tuple[str, Any]]
) -> inspect.Signature:
    """``__init__``'s signature: ``self``, then ``name: (annotation, default)`` as positional or
    keyword arguments, then keyword-only ones; annotations as strings, as the handwritten
    classes show them."""
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    for kind, group in ((P.POSITIONAL_OR_KEYWORD, positional), (P.KEYWORD_ONLY, keyword)):
        params += [P(n, kind, default=d, annotation=a) for n, (a, d) in group.items()]
    return inspect.Signature(params, return_annotation="None")
