"""The ranks of a list's relevant items from counts: what every rank-based list metric reads.

A list (a query over a catalog, a query's flat items) holds ``n`` items; ``M`` of them are its
*slots*: the items with a nonzero label (the relevant ids of a catalog query, with their grades).
Every other item has label 0. For each slot the producer is given three counts over the list's
items (excluded items are not in the list):

* ``above``: the items scoring strictly above it;
* ``tied``: the other items with an equal score;
* ``tied_before``: those of them with a lower item index.

From these, with the tie policy of the metric:

* ``"first"`` (the lower index first): ``rank = above + tied_before + 1`` (1-based);
* ``"random"``: a uniformly random order of each group of equal scores, drawn jointly for the
  slots of one group (:func:`random_ranks`);
* ``"expected"``: the mean over every order of the tied items (McSherry and Najork 2008). A slot's
  *tie group* holds the ``t = tied + 1`` items with its score, at positions ``above + 1 ..
  above + t``; its relevant members are the slots with the same score, i.e. the same ``above``
  (two slots of different scores cannot have the same count above them).

Everything a metric needs is a function of these per-slot numbers, the labels, ``n`` and ``R``
(the relevant slots), so a metric is exact at every ``k`` from ``O(M)`` numbers per list. The
arrays here are host numpy (float64 arithmetic; the counts are exact integers), ``(Q, M)`` per
slot with a ``present`` mask (padding slots count for nothing), sorted once by
``(above, tied_before)`` so that the slots run in rank order under ``"first"`` and the slots of
one tie group are adjacent.

With a cut-off ``K`` (the deepest ``k`` a caller reads), ``tied`` and ``tied_before`` need only
be right for the slots with ``above < K``: a slot with ``above >= K`` ranks past ``K`` in every
order, and no value cut at ``K`` reads where.
"""

from __future__ import annotations

import copy
from functools import cached_property
from typing import Any

import numpy as np
from scipy import special

from rankstream.core.topk import check_ties

Array = Any

#: below this many terms, a sum of ``1 / j`` over a range is taken term by term (else by digamma)
DIRECT_HARMONIC = 64


def host(x: Any, dtype: Any = None) -> np.ndarray:
    """A numpy array of ``x`` (torch tensors of any device; no copy where none is needed)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    out = np.asarray(x)
    return out if dtype is None else out.astype(dtype, copy=False)


def harmonic_range(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_{j = a}^{b} 1 / j`` elementwise (``a >= 1``; 0 where ``b < a``): term by term for
    short ranges, ``digamma(b + 1) - digamma(a)`` for long ones (whose value is then large
    against the digamma's rounding)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    length = b - a + 1.0
    out = np.zeros(a.shape)
    long = length > DIRECT_HARMONIC
    if long.any():
        out[long] = special.digamma(b[long] + 1.0) - special.digamma(a[long])
    short = (length > 0) & ~long
    if short.any():
        aa, nn = a[short], length[short]
        j = np.arange(DIRECT_HARMONIC, dtype=np.float64)
        terms = np.where(j[None, :] < nn[:, None], 1.0 / (aa[:, None] + j[None, :]), 0.0)
        out[short] = terms.sum(axis=1)
    return out


def ratio(num: Any, den: Any) -> np.ndarray:
    """``num / den``, 0 where ``den`` is 0 (host arrays)."""
    den = np.asarray(den, np.float64)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def run_sums(key: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per slot of ``(Q, M)`` arrays sorted by ``key`` along each row: ``(same, before)``, the
    sums of ``values`` over the slots of its row with an equal key (itself included) and with a
    smaller key."""
    q, m = key.shape
    if m == 0:
        return np.zeros((q, 0)), np.zeros((q, 0))
    cum = np.cumsum(values, axis=1)
    zero = np.zeros((q, 1))
    excl = np.concatenate([zero, cum[:, :-1]], axis=1)  # sum over earlier slots
    starts = np.concatenate([np.ones((q, 1), bool), key[:, 1:] != key[:, :-1]], axis=1)
    ends = np.concatenate([key[:, 1:] != key[:, :-1], np.ones((q, 1), bool)], axis=1)
    col = np.arange(m)
    first = np.maximum.accumulate(np.where(starts, col, 0), axis=1)  # the run's first slot
    last = np.minimum.accumulate(np.where(ends, col, m - 1)[:, ::-1], axis=1)[:, ::-1]  # its last
    before = np.take_along_axis(excl, first, axis=1)
    same = np.take_along_axis(cum, last, axis=1) - before
    return same, before


class RelevantRanks:
    """One batch of lists given by their slots' counts (see the module docstring).

    Args:
        above, tied, tied_before: ``(Q, M)`` integer counts per slot (``tied_before <= tied``).
        labels: ``(Q, M)`` the slots' labels (grades; 1 for binary relevance).
        n: ``(Q,)`` the number of items of each list (0: not a list).
        present: ``(Q, M)`` bool, the real slots (None: all).
        ties: ``"first"``, ``"random"`` or ``"expected"``.
        generator: a ``numpy.random.Generator`` for ``ties="random"`` (None: a fresh one).
    """

    def __init__(
        self,
        above: Any,
        tied: Any,
        tied_before: Any,
        labels: Any,
        n: Any,
        present: Any = None,
        ties: str = "first",
        generator: np.random.Generator | None = None,
    ) -> None:
        self.ties = check_ties(ties)
        above = host(above, np.int64)
        tied, tied_before = host(tied, np.int64), host(tied_before, np.int64)
        labels = host(labels, np.float64)
        self.n = host(n, np.float64).reshape(-1)
        present = np.ones(above.shape, bool) if present is None else host(present, bool)
        if above.ndim != 2 or not (
            above.shape == tied.shape == tied_before.shape == labels.shape == present.shape
        ):
            raise ValueError(
                "above, tied, tied_before, labels and present must be (queries, slots) arrays of one shape, "
                f"got {above.shape}, {tied.shape}, {tied_before.shape}, {labels.shape}, {present.shape}"
            )
        if self.n.shape[0] != above.shape[0]:
            raise ValueError(f"n must hold one count per list ({above.shape[0]}), got shape {self.n.shape}")
        if above.shape[1] == 0:  # one padding slot: every per-slot reduction has a column
            above, tied, tied_before = (np.zeros((above.shape[0], 1), np.int64) for _ in range(3))
            labels, present = np.zeros(above.shape), np.zeros(above.shape, bool)
        # padding slots rank past every item and hold label 0
        big = np.int64(np.iinfo(np.int64).max // 4)
        key_above = np.where(present, above, big)
        order = np.lexsort((np.where(present, tied_before, 0), key_above), axis=-1)
        take = lambda x: np.take_along_axis(x, order, axis=1)  # noqa: E731
        self.present = take(present)
        self.above = take(np.where(present, above, 0)).astype(np.float64)
        self.tied = take(np.where(present, tied, 0)).astype(np.float64)
        self.tied_before = take(np.where(present, tied_before, 0)).astype(np.float64)
        self.labels = take(np.where(present, labels, 0.0))
        self._key = take(key_above)
        self.generator = generator

    def with_ties(self, ties: str, generator: np.random.Generator | None = None) -> RelevantRanks:
        """The same counts read under another tie policy (the arrays shared, nothing recomputed
        but what the policy reads)."""
        if ties == self.ties and generator is None:
            return self
        other = copy.copy(self)
        other.__dict__.pop("rank", None)
        other.ties, other.generator = check_ties(ties), generator or self.generator
        return other

    @property
    def shape(self) -> tuple[int, int]:
        return self.above.shape  # type: ignore[return-value]

    @cached_property
    def size(self) -> np.ndarray:
        """``t``: the size of each slot's tie group (itself included), float64."""
        return self.tied + 1.0

    @cached_property
    def rank(self) -> np.ndarray:
        """The 1-based rank of each slot under ``"first"`` or ``"random"`` (``inf`` on padding)."""
        if self.ties == "expected":
            raise ValueError("ranks are not fixed under ties='expected': read the tie groups")
        if self.ties == "random":
            rank = random_ranks(self, self.generator or np.random.default_rng())
        else:
            rank = self.above + self.tied_before + 1.0
        return np.where(self.present, rank, np.inf)

    def relevant(self, threshold: float | None) -> np.ndarray:
        """0/1 relevance of the slots, float64: ``label > 0`` or ``label >= threshold``."""
        rel = self.labels > 0 if threshold is None else self.labels >= threshold
        return (rel & self.present).astype(np.float64)

    def count(self, values: np.ndarray) -> np.ndarray:
        """``sum`` of a per-slot array over each list's slots ``(Q,)``."""
        return np.where(self.present, values, 0.0).sum(axis=1)

    def in_top(self, k: Any) -> np.ndarray:
        """Per slot, whether it ranks within the top ``k`` (a number or a ``(Q, 1)`` array); under
        ``"expected"`` the probability, the share of its tie group's places within ``k``."""
        if self.ties != "expected":
            return (self.rank <= k).astype(np.float64)
        inside = np.clip(np.asarray(k, np.float64) - self.above, 0.0, self.size)
        return np.where(self.present, inside / self.size, 0.0)

    def positional(self, k: Any, weight: Any, cumulative: Any) -> np.ndarray:
        """Per slot, the positional weight ``w(rank)`` within the top ``k`` (0 past it), or under
        ``"expected"`` its mean over the tie group's places cut at ``k``:
        ``(W(min(above + t, k)) - W(min(above, k))) / t`` with ``W(m) = sum_{p <= m} w(p)``.
        ``weight(ranks)`` and ``cumulative(m)`` take float64 arrays of positions."""
        k = np.asarray(k, np.float64)
        if self.ties != "expected":
            rank = self.rank
            inside = self.present & (rank <= k)
            out = np.zeros(rank.shape)
            if inside.any():
                out[inside] = weight(rank[inside])
            return out
        hi = np.minimum(self.above + self.size, k)
        lo = np.minimum(self.above, k)
        single = self.present & (self.size == 1.0) & (lo < hi)
        out = np.zeros(self.above.shape)
        if single.any():  # one place: the weight itself (no difference of large sums)
            out[single] = weight(hi[single])
        spread = self.present & (self.size > 1.0) & (lo < hi)
        if spread.any():
            out[spread] = (cumulative(hi[spread]) - cumulative(lo[spread])) / self.size[spread]
        return out

    def group_sums(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per slot ``(same, before)``: the sums of ``values`` over the slots of its tie group
        (itself included) and over the slots of the groups above it."""
        return run_sums(self._key, np.where(self.present, values, 0.0))

    def by_rank(self) -> np.ndarray:
        """The column order that sorts each row's slots by rank (``"first"``: as stored)."""
        if self.ties == "first":
            return np.broadcast_to(np.arange(self.shape[1]), self.shape)
        return np.argsort(self.rank, axis=1, kind="stable")

    def first_group(self, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per list ``(a, t, r)``: the first tie group holding a relevant slot (``rel``): the
        items above it, its size and its relevant slots (``a = inf`` where none is relevant)."""
        same, _ = self.group_sums(rel)
        key = np.where(rel > 0, self.above, np.inf)
        col = np.argmin(key, axis=1)[:, None]
        a = np.take_along_axis(key, col, axis=1)[:, 0]
        t = np.take_along_axis(self.size, col, axis=1)[:, 0]
        r = np.take_along_axis(same, col, axis=1)[:, 0]
        return a, t, r


def random_ranks(ranks: RelevantRanks, rng: np.random.Generator) -> np.ndarray:
    """Ranks of the slots under a uniformly random order of each tie group, drawn jointly for
    the slots of one group: give every item of a group of ``t`` a uniform key; the ``m`` slots'
    keys, sorted, split the other ``t - m`` items into ``m + 1`` runs whose sizes are multinomial
    with the keys' spacings, drawn as successive binomials; a slot's place is the items before
    its key. The slots' order within the group is the order of their keys (uniform)."""
    q, m = ranks.shape
    present = ranks.present
    rank = np.full((q, m), np.inf)
    if m == 0:
        return rank
    same, _ = ranks.group_sums(np.ones((q, m)))  # slots per group
    u = np.where(present, rng.random((q, m)), 2.0)
    # within each group (adjacent, same key), sort the slots by their uniform key
    order = np.lexsort((u, ranks._key), axis=-1)
    u_s = np.take_along_axis(u, order, axis=1)
    key_s = np.take_along_axis(ranks._key, order, axis=1)
    size_s = np.take_along_axis(ranks.size, order, axis=1)
    above_s = np.take_along_axis(ranks.above, order, axis=1)
    slots_s = np.take_along_axis(same, order, axis=1)
    pres_s = np.take_along_axis(present, order, axis=1)
    others = size_s - slots_s  # items of the group that are not slots
    placed = np.zeros((q, m))
    prev_u = np.zeros(q)
    left = np.zeros(q)  # other items of the group not yet placed
    inner = np.zeros(q)  # slots of the group before this one
    below = np.zeros(q)  # other items placed before this slot's key
    for c in range(m):
        new = np.ones(q, bool) if c == 0 else key_s[:, c] != key_s[:, c - 1]
        prev_u = np.where(new, 0.0, prev_u)
        left = np.where(new, others[:, c], left)
        inner = np.where(new, 0.0, inner + 1.0)
        below = np.where(new, 0.0, below)
        p = np.clip((u_s[:, c] - prev_u) / np.maximum(1.0 - prev_u, 1e-300), 0.0, 1.0)
        draw = rng.binomial(np.where(pres_s[:, c], left, 0).astype(np.int64), np.where(pres_s[:, c], p, 0.0))
        below = below + draw
        left = left - draw
        prev_u = u_s[:, c]
        placed[:, c] = above_s[:, c] + below + inner + 1.0
    inverse = np.argsort(order, axis=1)
    return np.where(present, np.take_along_axis(placed, inverse, axis=1), np.inf)
