"""The item data of the beyond-accuracy metrics, given once at construction.

:class:`ItemData` holds, for a catalog of ``num_items`` items with ids ``0 .. num_items - 1``
(the columns of a dense score matrix, the ids of a top-k list):

* ``popularity`` ``(N,)``: how many training users interacted with each item (a count >= 0;
  ARP averages it, novelty reads ``p_i = popularity_i / num_users``);
* ``num_users``: the training users ``popularity`` counts over (novelty's denominator);
* the long tail, as a ``(N,)`` bool mask or ids (``long_tail``), or as a popularity cut
  (``tail_max_popularity``: items with ``popularity <= cut``, RecBole's ``tail_ratio > 1``);
* ``categories`` ``(N,)``: one integer category per item (category diversity);
* ``embeddings`` ``(N, d)``: one vector per item, normalised here (cosine diversity).

Every array is validated whole when given (a ``ValueError`` naming the argument and echoing
what came in), so no update ever fails on item data. Memory: each array is kept once, in
float64 (or int64 for the categories); the streamed state adds one count per item per cut-off.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ItemData"]


def _vector(x: Any, name: str, n: int | None) -> np.ndarray:
    """``x`` as a 1-D finite float64 array of length ``n`` (any length when ``n`` is None)."""
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real array, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per item), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have one value per item ({n} items), got shape {a.shape}")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        bad = int(np.sum(~np.isfinite(a)))
        raise ValueError(f"{name} must be finite, got {bad} NaN or infinite value(s)")
    return a


def _tail_mask(long_tail: Any, n: int) -> np.ndarray:
    """A long-tail mask from a ``(n,)`` bool mask or an array of item ids."""
    a = np.asarray(long_tail)
    if a.dtype == bool:
        if a.shape != (n,):
            raise ValueError(f"long_tail as a mask must have shape ({n},) (one flag per item), got {a.shape}")
        return a.copy()
    if a.dtype.kind not in "iu" or a.ndim != 1:
        raise TypeError(
            f"long_tail must be a bool mask of shape ({n},) or 1-D integer item ids, got {a.dtype} {a.shape}"
        )
    if a.size and (a.min() < 0 or a.max() >= n):
        raise ValueError(f"long_tail ids must lie in [0, {n}), got min {a.min()} and max {a.max()}")
    mask = np.zeros(n, dtype=bool)
    mask[a] = True
    return mask


class ItemData:
    """What the beyond-accuracy metrics know about the catalog (see the module docstring).

    Args:
        num_items: the catalog size ``N`` (item ids ``0 .. N - 1``); None: the length of the
            arrays given (which must agree).
        popularity: ``(N,)`` counts >= 0 of training users per item (ARP, novelty, the tail cut).
        num_users: the number of training users (novelty: ``p_i = popularity_i / num_users``);
            at least ``max(popularity)``.
        long_tail: ``(N,)`` bool mask or item ids of the long tail (APLT, ACLT).
        tail_max_popularity: instead of ``long_tail``: the tail is the items with
            ``popularity <= tail_max_popularity``.
        categories: ``(N,)`` integer categories >= 0 (``diversity``).
        embeddings: ``(N, d)`` real vectors, none zero (``ild``, cosine distance).
    """

    def __init__(
        self,
        num_items: int | None = None,
        *,
        popularity: Any = None,
        num_users: int | None = None,
        long_tail: Any = None,
        tail_max_popularity: float | None = None,
        categories: Any = None,
        embeddings: Any = None,
    ) -> None:
        given = (("popularity", popularity), ("categories", categories), ("embeddings", embeddings))
        lengths = {name: int(np.shape(a)[0]) if np.ndim(a) >= 1 else -1 for name, a in given if a is not None}
        if num_items is None:
            if not lengths:
                raise ValueError("ItemData needs num_items or an array of item data, got neither")
            num_items = next(iter(lengths.values()))
        if isinstance(num_items, bool) or not isinstance(num_items, (int, np.integer)) or num_items < 1:
            raise ValueError(f"num_items must be a positive int, got {num_items!r}")
        n = self.num_items = int(num_items)
        self.popularity = None if popularity is None else _vector(popularity, "popularity", n)
        if self.popularity is not None and np.any(self.popularity < 0):
            raise ValueError(f"popularity must be >= 0 (a count of users), got min {self.popularity.min()}")
        self.num_users = self._users(num_users)
        self.long_tail = self._tail(long_tail, tail_max_popularity)
        self.categories = None if categories is None else self._categories(categories)
        self.embeddings = None if embeddings is None else self._embeddings(embeddings)

    def _users(self, num_users: Any) -> int | None:
        if num_users is None:
            return None
        if isinstance(num_users, bool) or not isinstance(num_users, (int, np.integer)) or num_users < 1:
            raise ValueError(f"num_users must be a positive int, got {num_users!r}")
        if self.popularity is not None and self.popularity.max() > num_users:
            raise ValueError(
                f"num_users ({num_users}) must be at least every item's popularity (a count of users), "
                f"got max popularity {self.popularity.max()}"
            )
        return int(num_users)

    def _tail(self, long_tail: Any, cut: float | None) -> np.ndarray | None:
        if long_tail is not None and cut is not None:
            raise ValueError("give long_tail or tail_max_popularity, not both")
        if cut is not None:
            if self.popularity is None:
                raise ValueError(f"tail_max_popularity={cut!r} needs popularity")
            return self.popularity <= float(cut)
        return None if long_tail is None else _tail_mask(long_tail, self.num_items)

    def _categories(self, categories: Any) -> np.ndarray:
        a = np.asarray(categories)
        if a.dtype.kind not in "iu":
            raise TypeError(f"categories must be integers, got dtype {a.dtype}")
        if a.shape != (self.num_items,):
            raise ValueError(f"categories must have shape ({self.num_items},) (one per item), got {a.shape}")
        if a.size and a.min() < 0:
            raise ValueError(f"categories must be >= 0, got min {a.min()}")
        return a.astype(np.int64)

    def _embeddings(self, embeddings: Any) -> np.ndarray:
        a = np.asarray(embeddings)
        if a.dtype.kind not in "biuf":
            raise TypeError(f"embeddings must be a real array, got dtype {a.dtype}")
        if a.ndim != 2 or a.shape[0] != self.num_items:
            raise ValueError(
                f"embeddings must have shape ({self.num_items}, d) (one vector per item), got {a.shape}"
            )
        a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            raise ValueError("embeddings must be finite")
        norms = np.linalg.norm(a, axis=1)
        if np.any(norms == 0):
            zero = int(np.sum(norms == 0))
            raise ValueError(f"embeddings must have no zero vector (cosine is undefined), got {zero}")
        return a / norms[:, None]

    @property
    def self_information(self) -> np.ndarray:
        """``-log2(p_i)``, ``p_i = max(popularity_i, 1) / num_users`` (Castells & Vargas 2011): an
        item no training user saw counts as seen once, the largest self-information a seen item
        reaches (``log2(num_users)``), not an infinite one."""
        if self.popularity is None or self.num_users is None:
            raise ValueError("novelty needs popularity and num_users in ItemData")
        return -np.log2(np.maximum(self.popularity, 1.0) / self.num_users)

    def needs(self, metric: str) -> None:
        """Raise a ``ValueError`` when ``metric`` needs item data this object lacks."""
        need = {
            "novelty": ("popularity", "num_users"),
            "arp": ("popularity",),
            "aplt": ("long_tail",),
            "aclt": ("long_tail",),
            "diversity": ("categories",),
            "ild": ("embeddings",),
        }.get(metric, ())
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            raise ValueError(f"{metric} needs {missing} in ItemData, got none")

    def __repr__(self) -> str:
        names = ("popularity", "long_tail", "categories", "embeddings")
        have = [n for n in names if getattr(self, n) is not None]
        return f"ItemData(num_items={self.num_items}, num_users={self.num_users}, with {have})"
