"""From :class:`~rankstream.core.relevant.ranks.RelevantRanks` to a list metric's state sums,
through the same reduction as the dense path.

Every list kernel that can be computed from the ranks of its relevant items defines
``from_ranks(ranks) -> ListOutput`` in its own file, next to its dense ``list_values``: the
per-list values at every ``k`` and which lists hold a relevant item. :func:`rank_output` adds
what the dense path's ``ListKernel.list_outputs`` adds (the ``empty`` policy, a list with no item
never counted, the list weights, keras-rs's list weights through the kernel's own ``weighed``),
and :func:`rank_sums` reduces it with the kernel's own ``reduce``: so the state fields (the
value sums, the standard error's sums with ``confidence=``), ``compute()`` and
:class:`~rankstream.core.lists.collection.ListMetrics` come out as the dense path gives them on
the same lists. With ``chance=True`` the kernel's ``chance_from_ranks(ranks) -> (E, Var, best)``
(declared in its file beside ``chance_moments``, the dense form) gives the per-list terms of the
chance fields from the lists' sizes, relevant counts and gains alone
(:mod:`~rankstream.core.relevant.moments`: closed forms, no ``N``-long row).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from rankstream.core.backends import get_ops
from rankstream.core.relevant.ranks import RelevantRanks


def supports(kernel: Any) -> bool:
    """Whether the kernel's values can be read from relevant ranks (it defines ``from_ranks``)."""
    return callable(getattr(kernel, "from_ranks", None))


def check_kernel(kernel: Any, name: str = "metric") -> None:
    """A ``ValueError`` naming the metric where it cannot be computed from relevant ranks."""
    if not supports(kernel):
        raise ValueError(
            f"{name} ({type(kernel).__name__}) has no form over the ranks of the relevant items "
            "(from_ranks), so it cannot be computed without the dense score matrix"
        )
    if getattr(kernel, "chance", False) and not callable(getattr(kernel, "chance_from_ranks", None)):
        raise ValueError(
            f"{name} ({type(kernel).__name__}): chance=True needs the metric's moments over relevant ranks "
            "(chance_from_ranks), which it does not declare"
        )
    ties = kernel.conventions.ties
    if ties == "expected" and getattr(kernel, "name", "") == "err":
        raise ValueError(f"{name}: ERR has no tie-expected form, got ties='expected'")


def rank_output(kernel: Any, ranks: RelevantRanks, weights: Any = None) -> Any:
    """The kernel's per-list output of the lists of ``ranks`` (``weights``: ``(Q,)`` list
    weights, None: 1), with the conventions applied as the dense path applies them."""
    conv = kernel.conventions
    ops = get_ops(np.zeros(1))
    out = kernel.from_ranks(ranks.with_ties(conv.ties))
    listed = ranks.n > 0
    relevant = np.asarray(out.relevant, bool)
    counted = relevant if conv.empty == "skip" else np.ones_like(relevant)
    counted = counted & listed
    values = np.asarray(out.values, np.float64)
    if conv.empty == "zero" and conv.negative_labels == "keep":
        values = np.where(relevant[:, None], values, 0.0)
    out.values, out.counted, out.listed, out.invalid = values, counted, listed, None
    out.relevant = relevant
    out.weights = None if weights is None else np.asarray(weights, np.float64).reshape(-1)
    if getattr(kernel, "chance", False):  # the moments under a random ranking: N, R, gains, k only
        out.expected, out.variance, out.best = kernel.chance_from_ranks(ranks)
    return kernel.weighed(ops, out, False)


def rank_sums(kernel: Any, ranks: RelevantRanks, weights: Any = None) -> dict[str, np.ndarray]:
    """The kernel's state sums (float64 numpy) of the lists of ``ranks``."""
    ops = get_ops(np.zeros(1))
    if ranks.shape[0] == 0:
        return {name: np.zeros(shape) for name, shape in kernel.fields.items()}
    with np.errstate(all="ignore"):
        sums = kernel.reduce(ops, rank_output(kernel, ranks, weights))
    return {name: np.asarray(value, np.float64) for name, value in sums.items()}


def member_key(name: str) -> str:
    """The field prefix of a collection's member (as :class:`ListMetrics` writes it)."""
    return re.sub(r"\W", "_", name)


def collection_sums(collection: Any, ranks: RelevantRanks, weights: Any = None) -> dict[str, np.ndarray]:
    """Every member's state sums of a :class:`~rankstream.core.lists.collection.ListMetrics`,
    keyed as its ``fields``."""
    out: dict[str, np.ndarray] = {}
    for name, kernel in collection.members.items():
        key = member_key(name)
        out.update({f"{key}__{f}": v for f, v in rank_sums(kernel, ranks, weights).items()})
    return out


def per_list(kernel: Any, ranks: RelevantRanks) -> np.ndarray:
    """The per-list values ``(Q, len(top_k))`` of the kernel over ``ranks`` (float64), with the
    ``empty`` policy's zeros as the dense ``per_list``."""
    with np.errstate(all="ignore"):
        return rank_output(kernel, ranks).values
