"""Every list metric under a uniformly random ranking: per list, its expected value, its variance
and its value under the ideal ranking, the terms of the chance-adjusted metrics.

A list with ``N`` valid items (masked items, and items of weight ``<= 0`` under keras-rs
weighting, are not in the list) of which ``R`` are relevant is ranked by a uniformly random
permutation of its items; ``k`` is clipped to the list, ``k' = min(k, N)``. Each metric's moments
come from a few per-list statistics, in one place (:func:`chance_terms`, dispatching on the kernel
class):

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
each list's items under a mask; HitRate and MRR add a ``(B, K)`` product over the ranks
(``K = min(max k, items)``); DCG and nDCG add one pass over the labels (their gains), tile by tile
of rows where values are read back so that no full-size temporary is made, and DCG the ideal
ranking's ``topk`` of the labels (nDCG has it already).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rankstream.core.backends import Array
from rankstream.core.lists.selection import Selection

if TYPE_CHECKING:
    from rankstream.core.lists.base import ListKernel

__all__ = ["CHANCE_QUANTITIES", "chance_terms", "list_sizes"]

#: what a list metric with ``chance=True`` reports besides its value
CHANCE_QUANTITIES = ("expected", "adjusted", "z")

#: the most values one row tile of a chance pass holds where values are read back (the
#: gains of the labels, the ``(B, K)`` products over the ranks), and the share of the batch at most
_TILE_VALUES = 1 << 18
_SHARE = 32


def _row_tiles(sel: Selection, width: int) -> list[slice] | None:
    """Row slices covering the batch with at most ``max(min(_TILE_VALUES, B * width / _SHARE),
    width)`` values each, where values are read back (eager, shapes known); None elsewhere (a
    ``jit`` trace, an accelerator: one pass)."""
    if not sel.ctx.read_back:
        return None
    b = int(sel.labels.shape[0])
    budget = max(min(_TILE_VALUES, (b * width) // _SHARE), width)
    step = max(budget // max(width, 1), 1)
    if step >= b:
        return None
    return [slice(a, min(a + step, b)) for a in range(0, b, step)]


def _by_rows(
    sel: Selection, width: int, fn: Callable[..., tuple[Array, ...]], *arrays: Array
) -> tuple[Array, ...]:
    """``fn(*arrays)`` (each array with the batch's rows first, None passed through), row tile
    by row tile (:func:`_row_tiles`), the results joined along the rows."""
    tiles = _row_tiles(sel, width)
    if tiles is None:
        return fn(*arrays)
    parts = [fn(*(None if a is None else a[r] for a in arrays)) for r in tiles]
    return tuple(sel.ops.concat([p[i] for p in parts], axis=0) for i in range(len(parts[0])))


def list_sizes(sel: Selection) -> Array:
    """``N`` per list ``(B,)``: the items in the list (one count of the mask, once per batch)."""
    ops, acc = sel.ops, sel.positions.dtype
    if sel.full_valid is None:
        return ops.zeros((sel.labels.shape[0],), sel.positions, acc) + float(sel.n)
    return sel.once("chance_sizes", lambda: ops.row_count(sel.full_valid, acc, sel.ctx.workspace))


def _clipped_ks(sel: Selection, ks: tuple[int, ...], n: Array) -> Array:
    """``k' = min(k, N)`` ``(B, len(ks))``."""
    ops = sel.ops
    kv = ops.asarray([float(k) for k in ks], sel.positions, sel.positions.dtype)
    return ops.minimum(n[:, None], kv[None, :])


def _prefix_table(sel: Selection, terms: Array) -> Array:
    """``(K + 1,)``: 0, then the cumulative sums of ``terms`` ``(K,)``: entry ``j`` is the sum
    over the ranks ``1..j``."""
    ops = sel.ops
    zero = ops.zeros((1,), terms, terms.dtype)
    return ops.concat([zero, ops.cumsum(terms, axis=0)], axis=0)


def _at(sel: Selection, table: Array, idx: Array) -> Array:
    """``table[idx]`` for float indices ``idx`` holding whole numbers."""
    ops = sel.ops
    return ops.lookup(table, ops.cast(idx + 0.5, ops.int_dtype()))


def _divide(sel: Selection, num: Array, den: Array) -> Array:
    ops = sel.ops
    pos = den > 0
    return ops.where(pos, num / ops.where(pos, den, 1.0), 0.0 * num)


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


def _survival(sel: Selection, n: Array, r: Array) -> tuple[Array, Array]:
    """``(S, P)`` ``(B, K)``: ``S(j)`` the chance that no relevant item is among the first ``j``
    ranks (constant past ``N``) and ``P(j)`` that the first relevant item is at rank ``j``."""
    ops, pos = sel.ops, sel.positions

    def tile(n: Array, r: Array) -> tuple[Array, Array]:
        nn, rr, j = n[:, None], r[:, None], pos[None, :]
        inside = j <= nn
        den = ops.where(inside, nn - j + 1.0, 1.0)
        factor = ops.where(inside, ops.maximum(nn - rr - j + 1.0, 0.0) / den, 1.0)
        s = ops.exp2(ops.cumsum(ops.log2(factor), axis=1))
        prev = ops.concat([ops.zeros((s.shape[0], 1), s, s.dtype) + 1.0, s[:, :-1]], axis=1)
        return s, ops.where(inside, prev * rr / den, 0.0)

    return _by_rows(sel, sel.k, tile, n, r)


def _binary_terms(kernel: ListKernel, sel: Selection, r: Array) -> tuple[Array, Array, Array]:
    from rankstream.core.lists.hit_rate import HitRateKernel
    from rankstream.core.lists.map import MAPKernel
    from rankstream.core.lists.precision import PrecisionKernel
    from rankstream.core.lists.r_precision import RPrecisionKernel
    from rankstream.core.lists.recall import RecallKernel
    from rankstream.core.lists.reciprocal_rank import ReciprocalRankKernel

    ops = sel.ops
    n = list_sizes(sel)
    has = ops.cast(r > 0, r.dtype)[:, None]
    if isinstance(kernel, RPrecisionKernel):  # precision at k = R: E = R / N
        mean, var = _hypergeometric(sel, r[:, None], n, r)
        rr = r[:, None]
        return _divide(sel, mean, rr), _divide(sel, var, rr * rr), has
    kk = _clipped_ks(sel, kernel.top_k, n)
    if isinstance(kernel, (PrecisionKernel, RecallKernel)):
        mean, var = _hypergeometric(sel, kk, n, r)
        best = ops.minimum(r[:, None], kk)
        if isinstance(kernel, RecallKernel):
            z = r[:, None] + 0.0 * kk
        elif kernel.denominator == "k":
            z = ops.asarray([float(k) for k in kernel.top_k], kk, kk.dtype)[None, :] + 0.0 * kk
        else:
            z = kk
        return _divide(sel, mean, z), _divide(sel, var, z * z), _divide(sel, best, z)
    if isinstance(kernel, MAPKernel):
        return _ap_terms(kernel, sel, kk, n, r)
    s, p = _survival(sel, n, r)
    if isinstance(kernel, HitRateKernel):
        hit = 1.0 - kernel.cut(sel, s)
        return hit, hit * (1.0 - hit), has + 0.0 * hit
    if isinstance(kernel, ReciprocalRankKernel):
        inv = 1.0 / sel.positions
        mean = ops.matmul(p, kernel.cut_weights(sel, inv))
        second = ops.matmul(p, kernel.cut_weights(sel, inv * inv))
        return mean, ops.maximum(second - mean * mean, 0.0), has + 0.0 * mean
    raise TypeError(f"chance=True has no moments for {type(kernel).__name__}")


def _ap_terms(kernel: Any, sel: Selection, kk: Array, n: Array, r: Array) -> tuple[Array, Array, Array]:
    """AP@k: ``W_k = sum_{i <= j <= k} X_i X_j / j`` with ``E[W_k]`` and ``E[W_k^2]`` from the
    falling-factorial ratios ``m_s`` and ``H_k', H2_k'`` (MATH.md); ``AP@k = W_k / Z``."""
    if sel.full_item_weights is not None:
        raise ValueError(
            "chance=True for MAP has no closed form with per-item weights (a (batch, num_items) "
            f"sample_weight, here of shape {tuple(sel.full_item_weights.shape)}): pass one weight per "
            "list, or leave chance off"
        )
    ops = sel.ops
    inv = 1.0 / sel.positions
    h1, h2 = _at(sel, _prefix_table(sel, inv), kk), _at(sel, _prefix_table(sel, inv * inv), kk)
    m = [_divide(sel, _falling(r, s), _falling(n, s))[:, None] for s in range(1, 5)]
    mean = m[0] * h1 + m[1] * (kk - h1)
    second = (
        m[0] * h2
        + m[1] * (2.0 * h1 * h1 + 3.0 * h1 - 5.0 * h2)
        + m[2] * (2.0 * kk * h1 + 5.0 * kk - 5.0 * h1 * h1 - 9.0 * h1 + 7.0 * h2)
        + m[3] * (kk * kk - 2.0 * kk * h1 - 5.0 * kk + 3.0 * h1 * h1 + 6.0 * h1 - 3.0 * h2)
    )
    var = ops.maximum(second - mean * mean, 0.0)
    rr = r[:, None] + 0.0 * kk
    z = ops.minimum(rr, ops.asarray([float(k) for k in kernel.top_k], kk, kk.dtype)[None, :])
    z = z if kernel.denominator == "min" else rr
    return _divide(sel, mean, z), _divide(sel, var, z * z), _divide(sel, ops.minimum(rr, kk), z)


# -- DCG and nDCG ----------------------------------------------------------------------------
def _gain_sums(kernel: Any, sel: Selection) -> tuple[Array, Array]:
    """``(sum x, sum x^2)`` ``(B,)`` over each list's items, ``x`` the item's gain (times its
    weight under per-item weights): one pass over the labels, row tile by row tile."""
    ops, acc = sel.ops, sel.positions.dtype

    def tile(labels: Array, valid: Array | None, w: Array | None) -> tuple[Array, Array]:
        x = kernel._gains(sel, ops.cast(labels, acc))
        if w is not None:
            x = x * w
        if valid is not None:
            x = ops.where(valid, x, 0.0)
        return ops.sum(x, axis=1), ops.sum(x * x, axis=1)

    return _by_rows(sel, sel.n, tile, sel.item_labels, sel.full_valid, sel.full_item_weights)


def _ideal_dcg(kernel: Any, sel: Selection) -> Array:
    """``IDCG@k`` ``(B, len(top_k))`` as the kernel reads it (named gains without item weights:
    the shared ``topk`` of the labels; else a ``topk`` of the items' (weighted) gains)."""
    ops = sel.ops
    cuts = kernel.discount_cuts(sel)
    if sel.full_item_weights is None and isinstance(kernel.gain, str):
        ideal, ideal_in = sel.ideal(prefix=True)
        gains = kernel._gains(sel, ideal)
        if ideal_in is not None:
            gains = gains * ideal_in
        return ops.matmul(gains, cuts[: gains.shape[1]])
    _, wg = kernel.item_gains(sel)
    if sel.full_valid is not None:
        top = ops.topk(ops.where(sel.full_valid, wg, float("-inf")), sel.k)[0]
        top = ops.where(top > float("-inf"), top, 0.0)
    else:
        top = ops.topk(wg, sel.k)[0]
    return ops.matmul(top, cuts)


def _dcg_terms(kernel: Any, sel: Selection, normalised: bool) -> tuple[Array, Array, Array]:
    ops = sel.ops
    n = list_sizes(sel)
    kk = _clipped_ks(sel, kernel.top_k, n)
    d = kernel.discounts(sel)
    d1, d2 = _at(sel, _prefix_table(sel, d), kk), _at(sel, _prefix_table(sel, d * d), kk)
    s1, s2 = _gain_sums(kernel, sel)
    mean_x = _divide(sel, s1, n)
    ss = ops.maximum(s2 - mean_x * s1, 0.0)  # sum (x - mean)^2
    mean = mean_x[:, None] * d1
    var = ops.maximum(d2 - _divide(sel, d1 * d1, n[:, None] + 0.0 * kk), 0.0)
    var = var * _divide(sel, ss, n - 1.0)[:, None]
    idcg = _ideal_dcg(kernel, sel)
    if not normalised:
        return mean, var, idcg
    return _divide(sel, mean, idcg), _divide(sel, var, idcg * idcg), _divide(sel, idcg, idcg)


def chance_terms(kernel: ListKernel, sel: Selection) -> tuple[Array, Array, Array]:
    """``(E, Var, best)``, each ``(B, len(top_k))``: per list, the expected value and the variance
    of the metric at every ``k`` under a uniformly random ranking of the list's items, and its
    value under the ideal ranking (before any keras-rs division by the list weight)."""
    from rankstream.core.lists.binary import BinaryListKernel
    from rankstream.core.lists.dcg import DCGKernel
    from rankstream.core.lists.ndcg import NDCGKernel

    if isinstance(kernel, NDCGKernel):
        return _dcg_terms(kernel, sel, normalised=not isinstance(kernel, DCGKernel))
    if isinstance(kernel, BinaryListKernel):
        return _binary_terms(kernel, sel, kernel.count_relevant(sel))
    raise TypeError(f"chance=True has no moments for {type(kernel).__name__}")
