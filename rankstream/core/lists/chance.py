"""Every list metric under a uniformly random ranking: per list, its expected value, its variance
and its value under the ideal ranking, the terms of the chance-adjusted metrics.

A list with ``N`` valid items (masked items, and items of weight ``<= 0`` under keras-rs
weighting, are not in the list) of which ``R`` are relevant is ranked by a uniformly random
permutation of its items; ``k`` is clipped to the list, ``k' = min(k, N)``. Each metric's moments
come from a few per-list statistics. Each kernel file declares its metric's moments as a hook,
``chance_moments(sel) -> (E, Var, best)`` on its kernel class, built from the helpers here
(:func:`binary_counts`, :func:`hits_terms`, :func:`ap_terms`, :func:`first_relevant_law`, ...)
and in :mod:`~rankstream.core.lists.chance_gains` (:func:`dcg_terms`); :func:`chance_terms`
calls the hook and :func:`check_chance` refuses ``chance=True`` where a kernel declares none.
This module imports no metric file and looks at no kernel class:

* binary metrics (Precision, Recall, HitRate, MRR, R-Precision, MAP): ``N`` and ``R``. The hits in
  the top ``k'`` are hypergeometric (``E = k' R / N``,
  ``Var = k' (R / N) (1 - R / N) (N - k') / (N - 1)``); HitRate is ``1 - S(k')`` with
  ``S(j) = prod_{i <= j} (N - R - i + 1) / (N - i + 1)`` the chance that no relevant item is in
  the top ``j``; MRR reads the first relevant position ``j``, ``P(j) = S(j - 1) R / (N - j + 1)``;
  R-Precision is precision at ``k = R``; AP@k rests on the first four falling-factorial ratios
  ``m_s = R^(s) / N^(s)`` and the harmonic numbers ``H_k', H2_k'`` (``E[W_k]`` and ``E[W_k^2]``);
* DCG and nDCG: ``N``, the sum and the sum of squares of the items' (weighted) gains and the
  discounts' prefix sums: DCG@k is a linear permutation statistic (Hoeffding),
  ``E = mean(x) D1(k')``, ``Var = [D2(k') - D1(k')^2 / N] sum_i (x_i - mean x)^2 / (N - 1)``,
  ``D1, D2`` the sums of the first ``k'`` discounts and of their squares; nDCG divides by
  ``IDCG@k`` (and its square).

The derivations, the best values and the enumerations that check each formula are in
``docs/chance.md``. Cost: the binary metrics reuse the count of relevant items and add one count of
each list's items under a mask (``Ops.valid_counts``: the mask's bytes read eight at a time);
HitRate and MRR add a ``(B, max k)`` product over the ranks, shared by the metrics of one
threshold. DCG and nDCG need each list's sums of gains: nDCG reads them from the ideal ranking it
took where that holds every nonzero gain; binary relevance gives them from counts; otherwise, for
a named gain, one pass over the labels in cache-sized tiles (``Ops.gain_sums``, shared by a
collection's DCG and nDCG of one gain and threshold). DCG makes that pass before it counts its
relevant items (``Ops.gain_top``): the same pass also counts them for the kernel (its own count
pass is not made) and finds each list's largest label ``y_max`` and how many items hold it, so
``IDCG@k = g(y_max) D1(k')`` where at least ``k'`` items hold it, ``(s1 / c) D1(min(c, k'))``
where the ``c`` positive gains are equal, and a ``topk`` of the labels only for the other lists.
Per-item weights take the nonzero gains (one ``nonzero`` pass, row tile by row tile; their
sums and largest gains by blocks of a few tiles, :class:`_Gains`); a callable gain, or no
read-back (an accelerator, a ``jit`` trace), one dense pass and a ``topk``. Where values are
read back no pass makes a full-size temporary.
"""

from __future__ import annotations

from typing import Any

from rankstream.core.backends import Array
from rankstream.core.lists.chance_gains import (
    _at,
    _by_rows,
    _clipped_ks,
    _divide,
    _prefix_table,
    dcg_terms,
    list_sizes,
    share_gain_pass,
    share_ideal,
)
from rankstream.core.lists.selection import Selection
from rankstream.core.relevant.moments import ap_raw_moments

__all__ = [
    "CHANCE_QUANTITIES",
    "ap_terms",
    "best_of",
    "binary_counts",
    "chance_quantities",
    "chance_terms",
    "check_chance",
    "clipped_ks",
    "dcg_terms",
    "declares_moments",
    "expected_of",
    "first_relevant_law",
    "hits_terms",
    "list_sizes",
    "r_precision_terms",
    "share_gain_pass",
    "share_ideal",
    "variance_of",
]

#: what a list metric with ``chance=True`` reports besides its value
CHANCE_QUANTITIES = ("expected", "adjusted", "z")


def _falling(x: Array, s: int) -> Array:
    """``x (x - 1) ... (x - s + 1)``."""
    out = x
    for i in range(1, s):
        out = out * (x - float(i))
    return out


# -- the binary metrics ----------------------------------------------------------------------
def _hypergeometric(sel: Selection, kk: Array, n: Array, r: Array) -> tuple[Array, Array]:
    """Mean and variance of the hits in the top ``k'`` ``(B, len(top_k))``."""
    p = _divide(sel, r, n)[:, None]
    mean = kk * p
    var = _divide(sel, kk * p * (1.0 - p) * (n[:, None] - kk), (n - 1.0)[:, None] + 0.0 * kk)
    return mean, var


def _survival(sel: Selection, n: Array, r: Array, width: int) -> tuple[Array, Array]:
    """``(S, P)`` ``(B, width)``: ``S(j)`` the chance that no relevant item is among the first
    ``j`` ranks (constant past ``N``) and ``P(j)`` that the first relevant item is at rank ``j``
    (``width <= K``; kept per batch for every metric that asks with the same ``R``)."""
    ops, pos = sel.ops, sel.positions[:width]

    def tile(n: Array, r: Array) -> tuple[Array, Array]:
        nn, rr, j = n[:, None], r[:, None], pos[None, :]
        inside = j <= nn
        den = ops.where(inside, nn - j + 1.0, 1.0)
        factor = ops.where(inside, ops.maximum(nn - rr - j + 1.0, 0.0) / den, 1.0)
        s = ops.exp2(ops.cumsum(ops.log2(factor), axis=1))
        prev = ops.concat([s[:, :1] * 0.0 + 1.0, s[:, :-1]], axis=1)
        return s, ops.where(inside, prev * rr / den, 0.0)

    return _by_rows(sel, width, tile, n, r)


#: the list metrics of the table whose kernels declare :meth:`chance_moments` (by name, for the
#: message of :func:`check_chance`; a test checks it against the table's kernels)
CHANCE_METRICS = ("ndcg", "dcg", "map", "precision", "recall", "hit_rate", "mrr", "r_precision")


def declares_moments(kernel: Any) -> bool:
    """Whether a kernel (or a kernel class) declares its moments under a random ranking: a
    ``chance_moments(sel)`` method of its own or of a base class (the contract's is None)."""
    cls = kernel if isinstance(kernel, type) else type(kernel)
    return callable(getattr(cls, "chance_moments", None))


def check_chance(kernel: Any) -> None:
    """A ``ValueError`` for ``chance=True`` on a list metric that declares no moments under a
    random ranking (F1, ERR, RBP, AUC), naming the ones that have them."""
    if declares_moments(kernel):
        return
    raise ValueError(
        f"chance=True: {type(kernel).__name__} has no moments under a random ranking here; "
        f"the metrics with them are {list(CHANCE_METRICS)}"
    )


def binary_counts(kernel: Any, sel: Selection) -> tuple[Array, Array, Array]:
    """``(R, N, has)`` of a binary metric: per list its relevant count ``R`` ``(B,)`` (the
    kernel's own, shared by the metrics of one threshold), its size ``N`` ``(B,)``
    (:func:`list_sizes`) and ``has = [R > 0]`` ``(B, 1)``."""
    r = kernel.count_relevant(sel)
    n = list_sizes(sel)
    return r, n, sel.ops.cast(r > 0, r.dtype)[:, None]


def clipped_ks(kernel: Any, sel: Selection, n: Array) -> Array:
    """``k' = min(k, N)`` ``(B, len(top_k))`` for the kernel's ``top_k``."""
    return _clipped_ks(sel, kernel.top_k, n)


def hits_terms(sel: Selection, kk: Array, n: Array, r: Array, z: Array) -> tuple[Array, Array, Array]:
    """``(E, Var, best)`` of ``hits@k / Z``: the hits in the top ``k'`` are hypergeometric
    (:func:`_hypergeometric`), the best is ``min(R, k') / Z`` (precision: ``Z = k`` or ``k'``;
    recall: ``Z = R``)."""
    mean, var = _hypergeometric(sel, kk, n, r)
    best = sel.ops.minimum(r[:, None], kk)
    return _divide(sel, mean, z), _divide(sel, var, z * z), _divide(sel, best, z)


def r_precision_terms(sel: Selection, n: Array, r: Array, has: Array) -> tuple[Array, Array, Array]:
    """R-Precision, precision at ``k = R``: ``E = R / N``, ``Var`` the hypergeometric one at
    ``k = R`` over ``R^2``, best 1 where ``R > 0``."""
    mean, var = _hypergeometric(sel, r[:, None], n, r)
    rr = r[:, None]
    return _divide(sel, mean, rr), _divide(sel, var, rr * rr), has


def first_relevant_law(kernel: Any, sel: Selection, n: Array, r: Array) -> tuple[Array, Array, int]:
    """``(S, P, width)``: :func:`_survival` up to ``width = min(max k, K)``, kept per batch for
    every metric that asks with the same threshold and width (hit rate, MRR)."""
    width = min(kernel.top_k[-1], sel.k)
    t = kernel.conventions.relevance_threshold
    s, p = sel.once("survival", lambda: _survival(sel, n, r, width), (t, width))
    return s, p, width


def ap_terms(kernel: Any, sel: Selection, kk: Array, n: Array, r: Array) -> tuple[Array, Array, Array]:
    """AP@k: ``W_k = sum_{i <= j <= k} X_i X_j / j`` with ``E[W_k]`` and ``E[W_k^2]`` from the
    falling-factorial ratios ``m_s`` and ``H_k', H2_k'`` (MATH.md); ``AP@k = W_k / Z``."""
    if sel.batch_item_weights is not None:
        raise ValueError(
            "chance=True for MAP has no closed form with per-item weights (a (batch, num_items) "
            f"sample_weight, here of shape {tuple(sel.batch_item_weights.shape)}): pass one weight per "
            "list, or leave chance off"
        )
    ops = sel.ops
    inv = 1.0 / sel.positions
    h1, h2 = _at(sel, _prefix_table(sel, inv), kk), _at(sel, _prefix_table(sel, inv * inv), kk)
    m = [_divide(sel, _falling(r, s), _falling(n, s))[:, None] for s in range(1, 5)]
    mean, second = ap_raw_moments(m, kk, h1, h2)
    var = ops.maximum(second - mean * mean, 0.0)
    rr = r[:, None] + 0.0 * kk
    z = ops.minimum(rr, ops.asarray([float(k) for k in kernel.top_k], kk, kk.dtype)[None, :])
    z = z if kernel.denominator == "min" else rr
    return _divide(sel, mean, z), _divide(sel, var, z * z), _divide(sel, ops.minimum(rr, kk), z)


def chance_terms(kernel: Any, sel: Selection) -> tuple[Array, Array, Array]:
    """``(E, Var, best)``, each ``(B, len(top_k))``: per list, the expected value and the variance
    of the metric at every ``k`` under a uniformly random ranking of the list's items, and its
    value under the ideal ranking (before any keras-rs division by the list weight), as the
    kernel declares them (its ``chance_moments(sel)``, built from this module's helpers)."""
    if not declares_moments(kernel):
        raise TypeError(f"chance=True has no moments for {type(kernel).__name__}")
    return kernel.chance_moments(sel)


def expected_of(out: Any) -> Array:
    """The per-list expectations of a ``ListOutput`` (the term of ``chance_expected_sum``)."""
    return out.expected


def variance_of(out: Any) -> Array:
    """The per-list variances of a ``ListOutput`` (the term of ``chance_variance_sum``)."""
    return out.variance


def best_of(out: Any) -> Array:
    """The per-list best values of a ``ListOutput`` (the term of ``chance_best_sum``)."""
    return out.best


def chance_quantities(sums: Any, value: Array, xp: Any) -> dict[str, Array]:
    """``expected``, ``adjusted`` and ``z`` from the sums, elementwise on ``xp`` (numpy or
    ``keras.ops``): ``E = chance_expected_sum / W``, ``M_best = chance_best_sum / W``,
    ``adjusted = (value - E) / (M_best - E)``, ``z = (value - E) / sqrt(chance_variance_sum / W^2)``
    (0 before any list; ``adjusted`` NaN where ``M_best = E`` and ``z`` NaN where the variance
    is 0: every ranking scores the same there)."""
    w = sums["weight_sum"]
    safe = xp.where(w > 0, w, 1.0)
    expected = xp.where(w > 0, sums["chance_expected_sum"] / safe, 0.0 * value)
    best = xp.where(w > 0, sums["chance_best_sum"] / safe, 0.0 * value)
    var = xp.where(w > 0, sums["chance_variance_sum"] / (safe * safe), 0.0 * value)
    gain, room = value - expected, best - expected
    adjusted = xp.where(room != 0, gain / xp.where(room != 0, room, 1.0), float("nan"))
    sd = xp.sqrt(xp.maximum(var, 0.0))
    z = xp.where(sd > 0, gain / xp.where(sd > 0, sd, 1.0), float("nan"))
    return {"expected": expected, "adjusted": adjusted, "z": z}
