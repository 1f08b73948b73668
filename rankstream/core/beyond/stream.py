"""Beyond-accuracy metrics streamed from top-k item ids: :class:`BeyondAccuracy`.

The input of an update is a ``(Q, K)`` integer array of each list's recommended item ids in
rank order (``-1`` where a list has no item: shorter lists), as a recommender's
``recommendForAllUsers`` or a top-k of scores writes them, or dense ``(Q, N)`` scores, ranked
here with the project's tie policy (:meth:`BeyondAccuracy.update_scores`).

The state is a bag of sums (``rankstream.core.state``): ``lists`` (lists holding an item),
``item_count`` ``(len(top_k), N)`` (per cut-off, how many lists hold each item: O(N) memory per
cut-off, float64), and per list-mean metric ``m`` the sums ``m_sum``, ``m_sq_sum`` (the
standard error's) and ``m_count`` (the lists that have a value), each ``(len(top_k),)``. Merge
is addition, so any split into batches or processes gives the same result. The definitions
are in :mod:`rankstream.core.beyond.measures`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.core.backends import Context, numpy_ops
from rankstream.core.beyond.expected import EXPECTED_FIELDS, expected_catalog, expected_sums
from rankstream.core.beyond.items import ItemData
from rankstream.core.beyond.measures import CATALOG, PER_LIST, catalog_value, item_counts, prefix_values
from rankstream.core.inputs import check_positive_ints
from rankstream.core.topk import check_ties, top_ranked
from rankstream.core.uncertainty import check_level, interval, t_quantile, weighted_variance_of_mean

__all__ = ["BeyondAccuracy", "available_metrics"]

_DATA = {"novelty": ("popularity", "num_users"), "arp": ("popularity",), "aplt": ("long_tail",),
         "aclt": ("long_tail",), "diversity": ("categories",), "ild": ("embeddings",)}  # fmt: skip


def available_metrics(items: ItemData) -> tuple[str, ...]:
    """Every metric ``items`` has the data for (the catalog-wide ones always)."""
    per_list = [m for m in PER_LIST if all(getattr(items, a) is not None for a in _DATA[m])]
    return CATALOG + tuple(per_list)


def check_ids(ids: Any, num_items: int) -> np.ndarray:
    """``ids`` as a ``(Q, K)`` int64 array with values in ``[-1, num_items)``."""
    a = np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise TypeError(f"ids must be integer item ids, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"ids must be 2-D (lists, k), got shape {a.shape}")
    if a.size and (a.min() < -1 or a.max() >= num_items):
        raise ValueError(
            f"ids must lie in [0, {num_items}) or be -1 (no item), got min {a.min()} and max {a.max()}"
        )
    a = a.astype(np.int64)
    ranked = np.sort(a, axis=1)
    dup = (ranked[:, 1:] == ranked[:, :-1]) & (ranked[:, 1:] >= 0)
    if dup.any():
        row = int(np.argmax(dup.any(axis=1)))
        raise ValueError(f"ids must not repeat an item within a list, got row {row}: {a[row].tolist()}")
    return a


class BeyondAccuracy:
    """Coverage, entropy, Gini, personalization, novelty, ARP, APLT, ACLT and intra-list
    diversity of top-k lists, streamed (see the module docstring).

    Args:
        items: the catalog's :class:`~rankstream.core.beyond.items.ItemData`.
        metrics: names among ``coverage``, ``entropy``, ``gini``, ``personalization``,
            ``novelty``, ``arp``, ``aplt``, ``aclt``, ``diversity``, ``ild``; None: every one
            ``items`` has the data for.
        top_k: the cut-off(s); a list's value at ``k`` reads its first ``k`` ids.
        confidence: None or a level in (0, 1): the list-mean metrics also report
            ``_stderr``, ``_ci_low``, ``_ci_high`` and ``_count`` (Student's t, lists as units).
        ties: the tie policy of :meth:`update_scores`: ``"first"`` (the lower id first),
            ``"random"`` (with ``seed``) or ``"expected"`` (the expectation over every order of
            tied scores: :mod:`rankstream.core.beyond.expected`; entropy and Gini are then those
            of the expected counts).
        seed: the seed of ``ties="random"``.
    """

    def __init__(
        self,
        items: ItemData,
        metrics: Sequence[str] | None = None,
        top_k: int | list[int] = 10,
        *,
        confidence: float | None = None,
        ties: str = "first",
        seed: int | None = None,
    ) -> None:
        if not isinstance(items, ItemData):
            raise TypeError(f"items must be an ItemData, got {items!r}")
        metrics = available_metrics(items) if metrics is None else tuple(metrics)
        for m in metrics:
            if m not in CATALOG + PER_LIST:
                raise ValueError(f"metrics must be among {CATALOG + PER_LIST}, got {m!r}")
            items.needs(m)
        if len(set(metrics)) != len(metrics) or not metrics:
            raise ValueError(f"metrics must be a non-empty list of distinct names, got {list(metrics)}")
        self.items, self.metrics, self.top_k = items, metrics, check_positive_ints(top_k, "top_k")
        if any(m in ("diversity", "ild") for m in metrics) and self.top_k[0] < 2:
            raise ValueError(f"diversity and ild read pairs of items: k must be at least 2, got {self.top_k}")
        self.confidence = None if confidence is None else check_level(confidence)
        check_ties(ties)
        self.ties, self.seed = ties, seed
        self._ctx = Context.of(np.zeros(1), numpy_ops(), generator=numpy_ops().generator(seed))
        nk = (len(self.top_k),)
        self.fields: dict[str, tuple[int, ...]] = {"lists": (), "item_count": (nk[0], items.num_items)}
        if ties == "expected":  # the per-item sums of the expected coverage and personalization
            self.fields.update({name: (nk[0], items.num_items) for name in EXPECTED_FIELDS})
        for m in (m for m in metrics if m in PER_LIST):
            self.fields.update({f"{m}_sum": nk, f"{m}_sq_sum": nk, f"{m}_count": nk})
        self.reset()

    def reset(self) -> None:
        """Zeros in every field (the empty state)."""
        self._sums = {name: np.zeros(shape) for name, shape in self.fields.items()}

    @property
    def state(self) -> dict[str, np.ndarray]:
        """A copy of the sums."""
        return {name: v.copy() for name, v in self._sums.items()}

    def batch_sums(self, ids: Any) -> dict[str, np.ndarray]:
        """The fields' sums of one batch of ids (validated whole first; nothing is kept)."""
        ids = check_ids(ids, self.items.num_items)
        valid = ids >= 0
        safe = np.where(valid, ids, 0)
        out = {"lists": np.float64(np.sum(valid.any(axis=1))) if ids.shape[1] else np.float64(0.0)}
        if ids.shape[1] == 0:
            return {name: out.get(name, np.zeros(shape)) for name, shape in self.fields.items()}
        out["item_count"] = item_counts(safe, valid, self.top_k, self.items.num_items)
        if self.ties == "expected":  # lists given as ids: every inclusion is certain
            out.update(item_sq=out["item_count"], item_certain=out["item_count"])
            out["item_log_miss"] = np.zeros_like(out["item_count"])
        for m in (m for m in self.metrics if m in PER_LIST):
            values, length = prefix_values(m, safe, valid, self.items, self.top_k)
            has = length >= (2 if m in ("diversity", "ild") else 1)
            values = np.where(has, values, 0.0)
            out[f"{m}_sum"], out[f"{m}_sq_sum"] = values.sum(axis=0), (values * values).sum(axis=0)
            out[f"{m}_count"] = has.sum(axis=0).astype(np.float64)
        return out

    def update(self, ids: Any) -> None:
        """Add one batch of ids ``(Q, K)`` (an error leaves the state as it was)."""
        sums = self.batch_sums(ids)
        for name, value in sums.items():
            self._sums[name] = self._sums[name] + value

    def _checked_scores(self, scores: Any, mask: Any) -> tuple[np.ndarray, np.ndarray | None]:
        s = np.asarray(scores)
        n = self.items.num_items
        if s.ndim != 2 or s.shape[1] != n or s.dtype.kind not in "iuf":
            raise ValueError(
                f"scores must be real (lists, {n}) (one column per item), got {s.dtype} {s.shape}"
            )
        s = s.astype(np.float64)
        if np.isnan(s).any():
            raise ValueError(f"scores must not be NaN, got {int(np.isnan(s).sum())} NaN value(s)")
        valid = None if mask is None else np.asarray(mask, dtype=bool)
        if valid is not None and valid.shape != s.shape:
            raise ValueError(f"mask must have the scores' shape {s.shape}, got {valid.shape}")
        return s, valid

    def top_ids(self, scores: Any, mask: Any = None) -> np.ndarray:
        """The ``(Q, min(max(top_k), N))`` top ids of dense scores ``(Q, N)`` under the tie
        policy ``"first"`` or ``"random"`` (-1 where the list has no more items: ``mask`` False)."""
        s, valid = self._checked_scores(scores, mask)
        if self.ties == "expected":
            raise ValueError("top_ids has no single order under ties='expected': use update_scores")
        k = min(self.top_k[-1], self.items.num_items)
        if s.shape[0] == 0:
            return np.zeros((0, k), dtype=np.int64)
        idx = np.asarray(top_ranked(self._ctx, s, k, valid=valid, ties=self.ties).indices, dtype=np.int64)
        return idx if valid is None else np.where(np.take_along_axis(valid, idx, axis=1), idx, -1)

    def update_scores(self, scores: Any, mask: Any = None) -> None:
        """Add the top-k lists of dense scores (see :meth:`top_ids`); with ``ties="expected"``
        their expectation over the orders of tied scores (a few ``(Q, N)`` float64 temporaries)."""
        if self.ties != "expected":
            self.update(self.top_ids(scores, mask))
            return
        s, valid = self._checked_scores(scores, mask)
        per_list = [m for m in self.metrics if m in PER_LIST]
        sums = expected_sums(
            s, np.ones(s.shape, bool) if valid is None else valid, self.top_k, self.items, per_list
        )
        for name in self.fields:
            self._sums[name] = self._sums[name] + sums[name]

    def merge(self, other: BeyondAccuracy | Mapping[str, Any]) -> None:
        """Add another instance's state (or its :attr:`state`): the same fields required."""
        sums = other.state if isinstance(other, BeyondAccuracy) else other
        if set(sums) != set(self.fields) or any(np.shape(sums[n]) != s for n, s in self.fields.items()):
            shapes = {n: np.shape(v) for n, v in sums.items()}
            raise ValueError(f"merge needs the fields {self.fields}, got {shapes}")
        for name in self.fields:
            self._sums[name] = self._sums[name] + np.asarray(sums[name], dtype=np.float64)

    def compute(self) -> dict[str, float]:
        """``{"coverage@10": ..., "novelty@10": ..., ...}`` (with ``confidence``, each list-mean
        metric also ``_stderr``, ``_ci_low``, ``_ci_high``, ``_count``). A list-mean metric over no
        list is NaN, as personalization over fewer than two lists."""
        s, out = self._sums, {}
        ks = np.minimum(np.asarray(self.top_k, dtype=np.float64), self.items.num_items)
        with np.errstate(all="ignore"):
            for m in self.metrics:
                if m in CATALOG:
                    exact = expected_catalog(m, s, ks) if self.ties == "expected" else None
                    values = {
                        "": catalog_value(m, s["item_count"], s["lists"], ks) if exact is None else exact
                    }
                else:
                    values = self._mean(s[f"{m}_sum"], s[f"{m}_sq_sum"], s[f"{m}_count"])
                for j, k in enumerate(self.top_k):
                    out.update({f"{m}@{k}{q}": float(v[j]) for q, v in values.items()})
        return out

    def _mean(self, total: np.ndarray, sq: np.ndarray, n: np.ndarray) -> dict[str, np.ndarray]:
        mean = np.where(n > 0, total / np.where(n > 0, n, 1.0), np.nan)
        if self.confidence is None:
            return {"": mean}
        stderr = np.sqrt(weighted_variance_of_mean(n, n, n, total, sq, mean))
        low, high = interval(mean, stderr, t_quantile(self.confidence, n - 1.0))
        return {"": mean, "_stderr": stderr, "_ci_low": low, "_ci_high": high, "_count": n}

    def __repr__(self) -> str:
        return f"BeyondAccuracy({list(self.metrics)}, top_k={self.top_k}, {self.items!r})"
