"""What the list metrics of one batch share (:class:`BatchShared`), typed.

Several metrics of one selection (a collection's, or one metric's several readers) read the same
per-batch data: the relevant count per threshold, the ideal ranking, the tie groups' sums, the
sums of gains chance needs. The first one to need a field computes it and the others read it:
each field is computed at most once per batch. The executor makes one :class:`BatchShared` per
batch (per block of rows where a batch goes in blocks) and hands it to the kernels' ``depth`` and
to the selection (``Selection.shared``); nothing of it outlives the batch, and no kernel holds
any: the only state between batches is the metric's sums.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

__all__ = ["BatchShared"]

T = TypeVar("T")


@dataclass
class BatchShared:
    """The per-batch data the list metrics share, by name. A field that depends on a kernel's
    options is a dict keyed by them (the threshold ``t``, the gain, ...); the others hold one
    value (None: not computed yet).

    Attributes:
        ranked_ids: a kernel reads the ranked items' ids (beyond-accuracy metrics; set by its
            ``depth``): the selection keeps them and orders every tie by the policy.
        scores: ``(scores, valid)`` of the batch (AUC reads the scores, not the selection).
        relevant: ``R`` per list ``(B,)`` by threshold ``t`` (None: ``label > 0``).
        label_max: each list's largest label ``(B,)`` (from the count pass of DCG with chance).
        r_precision_depth: the batch's largest ``R`` by threshold (R-Precision's depth).
        full_labels: the ``(B, N)`` labels, 0 on items not in the list.
        full_item_weights: the ``(B, N)`` per-item weights, 0 on items not in the list.
        ideal: the ideal ranking ``(labels, real)`` by ``prefix`` (:meth:`Selection.ideal`).
        weighted_relevance: ``(W, top)`` by ``(t, top)`` (binary metrics, per-item weights).
        item_gains: ``(ideal, g_sum, wg_sum, g_in)`` by ``(gain key, top)`` (nDCG, DCG).
        tie_sums: the open tie group's ``(count, total)`` by the summed quantity's key.
        list_sizes: ``N`` per list ``(B,)`` (chance).
        survival: ``(S, P)`` by ``(t, width)``: no relevant item among the first ``j`` ranks,
            and the first relevant item at ``j`` (chance: hit rate, MRR).
        gain_sums: ``(s1, s2, y_max, c_max)`` by ``(gain, t)`` (chance: DCG, nDCG).
        one_label: ``(v, count)`` by ``(gain, t)``: binary relevance's one relevant label.
        nonzero_gains: the nonzero gains (``chance_gains._Gains``) by ``(gain, t)``.
    """

    ranked_ids: bool = False
    scores: tuple[Any, Any] | None = None
    relevant: dict[Any, Any] = field(default_factory=dict)
    label_max: Any = None
    r_precision_depth: dict[Any, int] = field(default_factory=dict)
    full_labels: Any = None
    full_item_weights: Any = None
    ideal: dict[bool, Any] = field(default_factory=dict)
    weighted_relevance: dict[Any, Any] = field(default_factory=dict)
    item_gains: dict[Any, Any] = field(default_factory=dict)
    tie_sums: dict[Any, Any] = field(default_factory=dict)
    list_sizes: Any = None
    survival: dict[Any, Any] = field(default_factory=dict)
    gain_sums: dict[Any, Any] = field(default_factory=dict)
    one_label: dict[Any, Any] = field(default_factory=dict)
    nonzero_gains: dict[Any, Any] = field(default_factory=dict)

    def once(self, name: str, make: Callable[[], T], key: Hashable = None) -> T:
        """Field ``name`` (at ``key`` for a keyed field): ``make()`` the first time it is asked
        for in this batch, what was kept after. A ``ValueError`` for a name that is no field."""
        held = self._field(name)
        if isinstance(held, dict):
            if key not in held:
                held[key] = make()
            return held[key]
        if held is None:
            held = make()
            setattr(self, name, held)
        return held

    def _field(self, name: str) -> Any:
        if name not in _NAMES:
            raise ValueError(f"BatchShared has no field {name!r}: one of {sorted(_NAMES)}")
        return getattr(self, name)


_NAMES = frozenset(f.name for f in fields(BatchShared))
