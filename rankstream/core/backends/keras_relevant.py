"""The list metrics' per-list values from the ranks of each list's relevant items, in
``keras.ops``: the compiled-step form of :mod:`rankstream.core.relevant` (whose
:class:`~rankstream.core.relevant.ranks.RelevantRanks` and the kernels' ``from_ranks`` are host
numpy: ``np.lexsort``, scipy's digamma, per-row Python loops over rare tie groups, none of which
runs inside ``jax.jit``, an XLA-compiled TensorFlow step or ``torch.compile``).

The same definitions, one list per row, ``M`` slots (relevant ids) per list, from the counts of
:func:`rankstream.core.backends.keras_catalog.slot_counts`:

* ``"first"``: ``rank_s = above_s + tied_before_s + 1``;
* ``"expected"``: slot ``s``'s tie group holds ``t_s = tied_s + 1`` items at places
  ``above_s + 1 .. above_s + t_s``; the relevant slots of one group are those of equal
  ``above`` (group sums by an ``(Q, M, M)`` comparison, no sort).

Per metric (the kernel's own settings: ``top_k``, ``relevance_threshold``, ``denominator``,
``gain``, ``discount``), written beside each kernel's ``from_ranks`` in
``rankstream/core/lists/*.py`` and equal to it (tests/keras/backend_suite/
test_keras_catalog_metrics.py checks the dense Keras metrics on the materialised matrix):
:func:`values_of` returns the kernel's :class:`~rankstream.core.lists.outputs.ListOutput`
(values, relevant, relevance), which the adapter reduces with the kernel's own ``weighed`` and
``reduce``. ``keras`` is imported inside the functions, never at module import.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rankstream.core.backends.keras_ops import is_tracing
from rankstream.core.lists.auc import AUCOutput
from rankstream.core.lists.definition import WHOLE_LIST
from rankstream.core.lists.outputs import ListOutput
from rankstream.core.lists.rbp import RBPOutput

#: below this many terms a sum of ``1 / j`` is taken term by term (else from the asymptotic
#: expansion of the harmonic numbers, exact to float64 past this many)
DIRECT_TERMS = 64
#: the metrics :func:`values_of` computes (kernel ``name``)
SUPPORTED = (
    "ndcg", "dcg", "precision", "recall", "hit_rate", "reciprocal_rank", "map", "r_precision", "f1",
    "err", "rbp", "auc", "gauc",
)  # fmt: skip
_EULER = 0.5772156649015329


def _k() -> Any:
    from keras import ops as K

    return K


class SlotRanks:
    """One batch of lists by their slots' counts, ``keras.ops`` tensors in ``dtype``.

    Args:
        above, tied, tied_before: ``(Q, M)`` counts (any numeric dtype).
        labels: ``(Q, M)`` the slots' grades.
        present: ``(Q, M)`` bool, the real slots.
        n: the catalog's size, an int (every list's length without ``length``; a bound of it).
        ties: ``"first"`` or ``"expected"``.
        dtype: the arithmetic's float dtype.
        length: ``(Q,)`` each list's length (the catalog less the query's excluded items);
            None: ``n`` for every list.
    """

    def __init__(self, above: Any, tied: Any, tied_before: Any, labels: Any, present: Any, n: int,
                 ties: str, dtype: str, length: Any = None) -> None:  # fmt: skip
        K = _k()
        self.dtype, self.ties, self.n, self.present = dtype, ties, int(n), present
        zero = K.zeros_like(K.cast(above, dtype))
        row = zero[:, 0] if int(zero.shape[1]) else K.zeros((int(zero.shape[0]),), dtype)
        self.length = row + float(n) if length is None else K.cast(length, dtype) + row
        self.above = K.where(present, K.cast(above, dtype), zero)
        self.size = K.where(present, K.add(K.cast(tied, dtype), 1.0), zero + 1.0)
        self.rank = K.where(present, self.above + K.cast(tied_before, dtype) + 1.0, zero + np.inf)
        self.labels = K.where(present, K.cast(labels, dtype), zero)

    def count(self, values: Any) -> Any:
        """``sum`` over each list's slots ``(Q,)``."""
        K = _k()
        return K.sum(K.where(self.present, values, K.zeros_like(values)), axis=1)

    def relevant(self, threshold: float | None) -> Any:
        """0/1 relevance of the slots: ``label > 0`` or ``label >= threshold``."""
        K = _k()
        rel = K.greater(self.labels, 0.0) if threshold is None else K.greater_equal(self.labels, threshold)
        return K.cast(K.logical_and(rel, self.present), self.dtype)

    def in_top(self, k: Any) -> Any:
        """Per slot: ``rank <= k``, or under ``"expected"`` ``clip(k - above, 0, t) / t``."""
        K = _k()
        if self.ties == "first":
            return K.cast(K.less_equal(self.rank, k), self.dtype)
        inside = K.clip(K.subtract(k, self.above), 0.0, self.size) / self.size
        return K.where(self.present, inside, K.zeros_like(inside))

    def same_group(self) -> Any:
        """``(Q, M, M)``: slot ``s'`` (last axis) is in slot ``s``'s tie group (equal ``above``)."""
        K = _k()
        eq = K.equal(self.above[:, :, None], self.above[:, None, :])
        return K.logical_and(eq, K.logical_and(self.present[:, :, None], self.present[:, None, :]))

    def group_sums(self, values: Any) -> tuple[Any, Any]:
        """Per slot ``(same, before)``: ``values`` summed over its tie group and over the slots
        of the groups above it."""
        K = _k()
        v = K.where(self.present, values, K.zeros_like(values))[:, None, :]
        same = K.sum(K.where(self.same_group(), v, 0.0), axis=2)
        higher = K.less(self.above[:, None, :], self.above[:, :, None])
        return same, K.sum(K.where(higher, v, 0.0), axis=2)

    def first_group(self, rel: Any) -> tuple[Any, Any, Any]:
        """Per list ``(a, t, r, found)``'s first three: the first tie group holding a relevant
        slot, the items above it (``inf`` where none), its size and its relevant slots."""
        K = _k()
        key = K.where(K.greater(rel, 0.0), self.above, np.inf)
        a = K.min(key, axis=1)
        at = K.logical_and(K.equal(key, a[:, None]), K.greater(rel, 0.0))
        t = K.max(K.where(at, self.size, 0.0), axis=1)
        r = K.sum(K.where(at, rel, 0.0), axis=1)
        return a, t, r


def ratio(num: Any, den: Any) -> Any:
    """``num / den``, 0 where ``den`` is 0."""
    K = _k()
    pos = K.greater(den, 0.0)
    return K.where(pos, num / K.where(pos, den, 1.0), 0.0)


def harmonic(n: Any) -> Any:
    """``H(n) = sum_{j <= n} 1 / j`` for ``n >= 0``: term by term up to :data:`DIRECT_TERMS`,
    past it ``ln n + gamma + 1/(2n) - 1/(12n^2) + 1/(120n^4)`` (error below ``1/(252 n^6)``)."""
    K = _k()
    j = K.cast(K.arange(1, DIRECT_TERMS + 1), n.dtype)
    small = K.sum(K.where(K.less_equal(j, n[..., None]), 1.0 / j, 0.0), axis=-1)
    m = K.maximum(n, 1.0)
    big = K.log(m) + _EULER + 0.5 / m - 1.0 / (12.0 * m * m) + 1.0 / (120.0 * m**4)
    return K.where(K.less_equal(n, float(DIRECT_TERMS)), small, big)


def harmonic_range(a: Any, b: Any) -> Any:
    """``sum_{j = a}^{b} 1 / j`` (``a >= 1``; 0 where ``b < a``): term by term for short ranges
    (no difference of large sums), ``H(b) - H(a - 1)`` for long ones."""
    K = _k()
    length = b - a + 1.0
    j = K.cast(K.arange(DIRECT_TERMS), a.dtype)
    terms = K.where(K.less(j, length[..., None]), 1.0 / (a[..., None] + j), 0.0)
    short = K.sum(terms, axis=-1)
    long = harmonic(K.maximum(b, 0.0)) - harmonic(K.maximum(a - 1.0, 0.0))
    return K.where(
        K.less_equal(length, 0.0), 0.0, K.where(K.less_equal(length, float(DIRECT_TERMS)), short, long)
    )


def _ks(kernel: Any, n: int) -> list[float]:
    """The kernel's cut-offs as floats (a whole-list ``k`` clipped to the catalog)."""
    return [float(min(k, n)) if k >= WHOLE_LIST else float(k) for k in kernel.top_k]


def _stack(columns: list[Any]) -> Any:
    return _k().stack(columns, axis=1)


def cutoffs(kernel: Any, ranks: SlotRanks) -> Any:
    """``(Q, len(top_k))``: each list's cut-offs, ``min(k, length)`` (a whole-list ``k`` is the
    list's length)."""
    K = _k()
    return _stack([K.minimum(ranks.length, float(k)) for k in kernel.top_k])


def hits_at(kernel: Any, ranks: SlotRanks, rel: Any) -> list[Any]:
    """The relevant slots within each ``k`` (their expected number under ``"expected"``)."""
    return [ranks.count(rel * ranks.in_top(k)) for k in _ks(kernel, ranks.n)]


def binary_values(kernel: Any, ranks: SlotRanks) -> ListOutput:
    """Precision, recall, hit rate, reciprocal rank, MAP, R-precision and F1 (the kernels'
    ``rank_values``): ``(values, R > 0, R)``."""
    K = _k()
    rel = ranks.relevant(kernel.conventions.relevance_threshold)
    n_rel = ranks.count(rel)
    name, ks = kernel.name, _ks(kernel, ranks.n)
    if name == "recall":
        values = ratio(_stack(hits_at(kernel, ranks, rel)), n_rel[:, None])
    elif name == "precision":
        den = cutoffs(kernel, ranks)
        if kernel.denominator == "k":
            den = K.zeros_like(den) + K.convert_to_tensor(np.asarray(kernel.top_k, float), ranks.dtype)
        values = ratio(_stack(hits_at(kernel, ranks, rel)), den)
    elif name == "f1":
        whole = np.asarray([k >= WHOLE_LIST for k in kernel.top_k])
        cut = K.where(whole, cutoffs(kernel, ranks), K.convert_to_tensor(np.asarray(ks), ranks.dtype))
        values = ratio(2.0 * _stack(hits_at(kernel, ranks, rel)), n_rel[:, None] + cut)
    elif name == "r_precision":
        values = ratio(ranks.count(rel * ranks.in_top(n_rel[:, None])), n_rel)[:, None]
    elif name == "hit_rate":
        values = hit_rate(ranks, rel, ks) if ranks.ties == "expected" else None
        values = K.minimum(_stack(hits_at(kernel, ranks, rel)), 1.0) if values is None else values
    elif name == "reciprocal_rank":
        values = reciprocal_rank(ranks, rel, ks)
    else:
        values = average_precision(kernel, ranks, rel, n_rel, ks)
    return ListOutput(values, K.greater(n_rel, 0.0), n_rel, None)


def hit_rate(ranks: SlotRanks, rel: Any, ks: list[float]) -> Any:
    """Under ``"expected"``: with the first group holding a relevant slot (``a`` above, ``t``
    items, ``r`` relevant), ``1 - C(t - r, m) / C(t, m)``, ``m = clip(k - a, 0, t)``."""
    K = _k()
    a, t, r = ranks.first_group(rel)
    found = K.isfinite(a)
    out = []
    for k in ks:
        m = K.clip(k - K.where(found, a, 0.0), 0.0, t)
        miss = K.ones_like(a)
        for i in range(int(rel.shape[1])):  # prod_{i < r} (t - m - i) / (t - i)
            step = K.maximum(t - m - i, 0.0) / K.maximum(t - i, 1.0)
            miss = miss * K.where(K.less(float(i), r), step, 1.0)
        out.append(K.where(found, 1.0 - miss, 0.0))
    return _stack(out)


def reciprocal_rank(ranks: SlotRanks, rel: Any, ks: list[float]) -> Any:
    """``1 / j*`` of the best relevant slot within ``k``; under ``"expected"`` ``sum_i P_i /
    (a + 1 + i)`` over the first relevant group's places within ``k``, ``P_0 = r / t``,
    ``P_{i+1} = P_i (t - i - r) / (t - 1 - i)`` (one relevant slot: ``(H_{min(a+t,k)} - H_a) / t``)."""
    K = _k()
    if ranks.ties == "first":
        best = K.min(K.where(K.greater(rel, 0.0), ranks.rank, np.inf), axis=1)
        safe = K.where(K.isfinite(best), best, 1.0)
        return _stack([K.where(K.less_equal(best, k), 1.0 / safe, 0.0) for k in ks])
    a, t, r = ranks.first_group(rel)
    found = K.isfinite(a)
    a = K.where(found, a, 0.0)
    out = []
    for k in ks:
        inside = K.logical_and(found, K.less(a, k))
        one = harmonic_range(a + 1.0, K.minimum(a + t, k)) / K.maximum(t, 1.0)
        many = K.logical_and(inside, K.greater(r, 1.0))
        places = K.where(many, K.minimum(t - r + 1.0, k - a), 0.0)

        def cond(i: Any, p: Any, acc: Any, places: Any = places) -> Any:
            return K.any(K.less(i, places))

        def body(i: Any, p: Any, acc: Any, places: Any = places) -> Any:
            live = K.less(i, places)
            acc = acc + K.where(live, p / (a + 1.0 + i), 0.0)
            nxt = p * K.maximum(t - i - r, 0.0) / K.maximum(t - 1.0 - i, 1.0)
            return i + 1.0, K.where(live, nxt, p), acc

        state = (K.zeros_like(a), K.where(many, r / K.maximum(t, 1.0), 0.0), K.zeros_like(a))
        if is_tracing(a):
            _, _, acc = K.while_loop(cond, body, state)
        else:  # eagerly a plain loop (JAX would compile a new while_loop at every call)
            for _ in range(int(K.convert_to_numpy(K.max(places)))):
                state = body(*state)
            acc = state[2]
        out.append(K.where(inside, K.where(many, acc, one), 0.0))
    return _stack(out)


def average_precision(kernel: Any, ranks: SlotRanks, rel: Any, n_rel: Any, ks: list[float]) -> Any:
    """``AP@k = (1 / Z) sum_{rank_s <= k} rel_s P@rank_s``; under ``"expected"`` per slot
    ``((before + 1 - a q) H(a..b) + q (b - a + 1)) / t`` (``a = above + 1``, ``b = min(above +
    t, k)``, ``q = (same - 1) / (t - 1)``: :mod:`rankstream.core.lists.map`)."""
    K = _k()
    sums = []
    if ranks.ties == "first":
        earlier = K.less_equal(ranks.rank[:, None, :], ranks.rank[:, :, None])
        cum = K.sum(K.where(earlier, rel[:, None, :], 0.0), axis=2)  # relevant slots up to rank_s
        terms = rel * cum / K.where(ranks.present, ranks.rank, 1.0)
        sums = [ranks.count(K.where(K.less_equal(ranks.rank, k), terms, 0.0)) for k in ks]
    else:
        same, before = ranks.group_sums(rel)
        t = ranks.size
        q = K.where(K.greater(t, 1.0), (same - 1.0) / K.maximum(t - 1.0, 1.0), 0.0)
        a = ranks.above + 1.0
        for k in ks:
            b = K.minimum(ranks.above + t, k)
            inside = K.logical_and(K.greater(rel, 0.0), K.greater_equal(b, a))
            h = harmonic_range(a, K.where(inside, b, 0.0))
            term = ((before + 1.0 - a * q) * h + q * (b - a + 1.0)) / t
            sums.append(ranks.count(K.where(inside, term, 0.0)))
    num = _stack(sums)
    den = _stack([K.minimum(n_rel, k) for k in ks]) if kernel.denominator == "min" else n_rel[:, None]
    return ratio(num, den)


def gains_of(kernel: Any, ranks: SlotRanks) -> Any:
    """The slots' gains (labels below the threshold count as 0; a callable gain must give 0
    at label 0, as over relevant ranks anywhere)."""
    K = _k()
    t = kernel.conventions.relevance_threshold
    y = ranks.labels if t is None else K.where(K.greater_equal(ranks.labels, t), ranks.labels, 0.0)
    if kernel.gain == "exp_rank":
        g = K.power(2.0, y) - 1.0
    elif kernel.gain == "linear_rank":
        g = y
    else:
        g = K.cast(kernel.gain_fn(y), ranks.dtype) + K.zeros_like(y)
    return K.where(ranks.present, g, 0.0)


def discounts(kernel: Any, positions: Any) -> Any:
    """The discounts of 1-based positions."""
    K = _k()
    if kernel.discount_fn is None:
        return 1.0 / K.log2(positions + 1.0)
    return K.cast(kernel.discount_fn(positions), positions.dtype) + K.zeros_like(positions)


def dcg(kernel: Any, ranks: SlotRanks, gains: Any) -> Any:
    """``DCG@k = sum_s g_s d(rank_s)`` within ``k``; under ``"expected"`` each slot's mean
    discount over its group's places cut at ``k``, ``(W(min(above + t, k)) - W(min(above, k)))
    / t`` with ``W`` a table of the discounts' cumulative sums (static length ``min(max k, n)``)."""
    K = _k()
    ks = _ks(kernel, ranks.n)
    if ranks.ties == "first":
        d = discounts(kernel, K.where(ranks.present, ranks.rank, 1.0))
        return _stack([ranks.count(gains * K.where(K.less_equal(ranks.rank, k), d, 0.0)) for k in ks])
    depth = int(max(ks))
    places = K.cast(K.arange(1, depth + 1), ranks.dtype)
    table = K.concatenate([K.zeros((1,), ranks.dtype), K.cumsum(discounts(kernel, places))])
    single = K.equal(ranks.size, 1.0)
    d_single = discounts(kernel, K.where(ranks.present, ranks.above + 1.0, 1.0))
    out = []
    for k in ks:
        hi = K.minimum(ranks.above + ranks.size, k)
        lo = K.minimum(ranks.above, k)
        w = lambda m: K.take(table, K.cast(m, "int32"))  # noqa: E731
        spread = (w(hi) - w(lo)) / ranks.size
        mean = K.where(single, K.where(K.less(lo, hi), d_single, 0.0), spread)
        out.append(ranks.count(gains * mean))
    return _stack(out)


def gain_values(kernel: Any, ranks: SlotRanks) -> ListOutput:
    """nDCG@k (:meth:`dcg` over the ideal DCG of the slots' gains in decreasing order at places
    ``1 .. min(k, M)``) and DCG@k, with the kernels' ``relevant`` and ``relevance``."""
    K = _k()
    gains = gains_of(kernel, ranks)
    value = dcg(kernel, ranks, gains)
    rel_count = ranks.count(ranks.relevant(kernel.conventions.relevance_threshold))
    if kernel.name == "dcg":
        return ListOutput(value, K.greater(rel_count, 0.0), ranks.count(gains), None)
    ideal = K.flip(K.sort(gains, axis=1), axis=1)
    m = int(ideal.shape[1])
    places = K.cast(K.arange(1, m + 1), ranks.dtype)
    disc = discounts(kernel, places)
    idcg = _stack(
        [K.sum(ideal * K.where(K.less_equal(places, k), disc, 0.0), axis=1) for k in _ks(kernel, ranks.n)]
    )
    top = ideal[:, 0]
    relevant = K.greater(rel_count, 0.0) if isinstance(kernel.gain, str) else K.greater(top, 0.0)
    return ListOutput(ratio(value, idcg), relevant, top + 0.0, None)


def err_values(kernel: Any, ranks: SlotRanks) -> ListOutput:
    """``ERR@k = sum_{rank_s <= k} (R_s / rank_s) prod_{rank_s' < rank_s} (1 - R_s')``, ``R =
    (2^g - 1) / 2^g_max`` of the grade clipped to ``[0, g_max]`` (``"first"`` only: the kernel
    has no tie-expected form); the product as ``2^(sum log2(1 - R))`` over the earlier slots."""
    K = _k()
    rel = ranks.relevant(kernel.conventions.relevance_threshold)
    t = kernel.conventions.relevance_threshold
    g = ranks.labels if t is None else K.where(K.greater_equal(ranks.labels, t), ranks.labels, 0.0)
    g = K.where(ranks.present, K.clip(g, 0.0, kernel.max_grade), 0.0)
    stop = (K.power(2.0, g) - 1.0) / 2.0**kernel.max_grade
    stay = K.log2(1.0 - stop)
    earlier = K.less(ranks.rank[:, None, :], ranks.rank[:, :, None])
    reached = K.power(2.0, K.sum(K.where(earlier, stay[:, None, :], 0.0), axis=2))
    terms = stop * reached / K.where(ranks.present, ranks.rank, 1.0)
    values = _stack(
        [ranks.count(K.where(K.less_equal(ranks.rank, k), terms, 0.0)) for k in _ks(kernel, ranks.n)]
    )
    n_rel = ranks.count(rel)
    return ListOutput(values, K.greater(n_rel, 0.0), n_rel, None)


def rbp_values(kernel: Any, ranks: SlotRanks) -> ListOutput:
    """``RBP@k = sum_s r_s w(rank_s)`` within ``k``, ``w(j) = (1 - p) p^(j - 1)`` (``r_s`` the
    relevance, times the grade with ``graded``); under ``"expected"`` the mean of ``w`` over the
    group's places cut at ``k``, ``(p^min(a, k) - p^min(a + t, k)) / t``; the residual
    ``p^min(k, n)``."""
    K = _k()
    rel = ranks.relevant(kernel.conventions.relevance_threshold)
    n_rel = ranks.count(rel)
    gains = rel * ranks.labels if kernel.graded else rel
    log_p, ks = math.log(kernel.p), _ks(kernel, ranks.n)
    out = []
    for k in ks:
        if ranks.ties == "first":
            w = (1.0 - kernel.p) * K.exp((K.where(ranks.present, ranks.rank, 1.0) - 1.0) * log_p)
            mean = K.where(K.less_equal(ranks.rank, k), w, 0.0)
        else:
            lo, hi = K.minimum(ranks.above, k), K.minimum(ranks.above + ranks.size, k)
            mean = (K.exp(lo * log_p) - K.exp(hi * log_p)) / ranks.size
        out.append(ranks.count(gains * mean))
    values = _stack(out)
    if not kernel.residual:
        return ListOutput(values, K.greater(n_rel, 0.0), n_rel, None)
    cut = K.minimum(ranks.length[:, None], K.convert_to_tensor(np.asarray(ks), ranks.dtype))
    residual = K.exp(cut * log_p)
    return RBPOutput(values, K.greater(n_rel, 0.0), n_rel, None, residual=residual)


def auc_values(kernel: Any, ranks: SlotRanks) -> ListOutput:
    """The per-list AUC (midranks: any tie policy): each relevant slot wins against the
    ``n - a - t - (R - R_- - r)`` negatives below it and half of the ``t - r`` in its group, over
    ``R (n - R)`` pairs; GAUC weighs each list by its ``n``."""
    K = _k()
    rel = ranks.relevant(kernel.conventions.relevance_threshold)
    n_pos = ranks.count(rel)
    n = ranks.length
    same, before = ranks.group_sums(rel)
    below = n[:, None] - ranks.above - ranks.size - (n_pos[:, None] - before - same)
    wins = ranks.count(rel * (below + 0.5 * (ranks.size - same)))
    pairs = n_pos * (n - n_pos)
    size = n + 0.0 if kernel.weight_by_size else None
    has = K.logical_and(K.greater(n_pos, 0.0), K.greater(n - n_pos, 0.0))
    return AUCOutput(ratio(wins, pairs)[:, None], has, n_pos, None, size=size)


def values_of(kernel: Any, ranks: SlotRanks) -> ListOutput:
    """The kernel's per-list output over the slots' ranks (``kernel.name`` in
    :data:`SUPPORTED`)."""
    if kernel.name in ("ndcg", "dcg"):
        return gain_values(kernel, ranks)
    special = {"err": err_values, "rbp": rbp_values, "auc": auc_values, "gauc": auc_values}
    return special.get(kernel.name, binary_values)(kernel, ranks)
