"""Shared machinery of the list metrics (MAP@k, nDCG@k).

A list metric turns one batch into per-list values ``v[i, j]`` at each cut-off ``k_j``, and
the state keeps three sums: ``value_sum[j] = sum_i w_i v[i, j]``, ``weight_sum = sum_i w_i``
and ``count = #{i : w_i > 0}``, over the lists that are counted. The result is
``value_sum / weight_sum``.

Per batch the work is one ``topk`` of the scores at ``K = min(max(k), num_items)`` (plus one
more column to see ties, see :mod:`rankstream.core.ranking`), one ``topk`` of the labels at
``K`` (the ideal ordering and ``min(R, K)``), and arithmetic on ``(batch, K)`` arrays; every
``k`` is read from cumulative sums over that one selection.

Conventions (each adapter picks its peer's defaults):

* ``empty``: what a list with no relevant item counts as: ``"skip"`` (not counted, ignite's
  ``ignore_zero_hits=True``) or ``"zero"`` (counted with value 0);
* ``ties``: ``"first"`` (earlier index ranks first) or ``"random"`` (see ``ranking``);
* a masked item behaves exactly as if it were not in the list;
* ``k`` past the end of a list is clipped to the list;
* ``weighting``: ``"list"`` (default: ``sample_weight`` is one weight per list) or
  ``"keras_rs"`` (keras-rs: ``sample_weight`` scalar, per list or per item; per-item weights
  enter the per-list values, items weighted ``<= 0`` are dropped, and each list's weight is
  collapsed from its item weights as ``keras_rs...get_list_weights`` does, see
  :meth:`ListKernel.keras_rs_list_weights`);
* ``negative_labels``: ``"keep"`` (default) or ``"mask"`` (labels ``< 0`` are padding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.core.inputs import NEGATIVE_LABELS, ListBatch, check_positive_ints, list_batch
from rankstream.core.ops import Array, Ops
from rankstream.core.ranking import check_ties, top_ranked
from rankstream.core.state import NotComputableError

EMPTY_POLICIES = ("skip", "zero")
WEIGHTINGS = ("list", "keras_rs")


@dataclass
class ListValues:
    """One batch evaluated: ``values`` (B, len(top_k)); ``counted`` (B,) bool (has a relevant
    item, or every list under ``empty="zero"``); ``weights`` (B,); ``invalid`` (B,) bool or
    None (lists with bad data, flagged only where update cannot raise)."""

    values: Array
    counted: Array
    weights: Array
    invalid: Array | None


@dataclass
class Selection:
    """What the kernels need from one batch, all ``(B, K)`` in the accumulation dtype."""

    ops: Ops
    k: int  # K = min(max(top_k), list size)
    labels: Array  # labels of the ranked items, 0 where masked
    in_list: Array | None  # 1.0 where the ranked position holds a valid item (None: all)
    positions: Array  # 1..K, shape (K,)
    weights: Array | None  # (B,) per-list weights or None
    has_nan: bool | None
    nan_rows: Array | None  # (B,) bool on the device when values could not be read back
    n: int  # list size (number of columns)
    full_labels: Array  # the batch's (B, N) labels, for kernels needing a full pass
    full_valid: Array | None
    item_weights: Array | None = None  # (B, K) weights of the ranked items (per-item weights only)
    full_item_weights: Array | None = None  # (B, N) per-item weights, 0 on masked items
    # What a kernel's values() computed for has_relevant()/list_relevance() on this same
    # batch: per selection, never on the kernel, so a kernel is reentrant and thread-safe.
    cache: dict[str, Any] = field(default_factory=dict)

    def ideal(self) -> tuple[Array, Array | None]:
        """Top-``K`` labels of the valid items in decreasing order (the ideal ranking),
        0 past the last valid item, and a (B, K) 0/1 array marking real items (or None
        without a mask). One ``topk`` of the labels."""
        ops = self.ops
        src = self.full_labels
        if self.full_valid is not None:
            src = ops.where(self.full_valid, src, float("-inf"))
        vals, _ = ops.topk(src, self.k)
        vals = ops.cast(vals, self.positions.dtype)
        if self.full_valid is None:
            return vals, None
        ok = vals > float("-inf")
        return ops.where(ok, vals, 0.0), ops.cast(ok, vals.dtype)


class ListKernel:
    """Base of the list metrics. Subclasses implement :meth:`values` and :meth:`has_relevant`."""

    name = "list"

    def __init__(
        self,
        top_k: int | list[int] = 10,
        *,
        empty: str = "skip",
        ties: str = "first",
        seed: Any = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        generator: Any = None,
    ) -> None:
        self.top_k = check_positive_ints(top_k, "top_k")
        self.ks = self.top_k
        if empty not in EMPTY_POLICIES:
            raise ValueError(f"empty must be one of {EMPTY_POLICIES}, got {empty!r}")
        self.empty = empty
        self.ties = check_ties(ties)
        self.seed = seed
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        if negative_labels not in NEGATIVE_LABELS:
            raise ValueError(f"negative_labels must be one of {NEGATIVE_LABELS}, got {negative_labels!r}")
        self.weighting = weighting
        self.negative_labels = negative_labels
        # A backend generator given by the caller (e.g. a Keras SeedGenerator, whose state
        # the Keras adapter tracks) is used for random ties instead of one built from seed.
        self._generator: Any = generator
        self._generator_backend = None if generator is None else "given"
        self.fields: dict[str, tuple[int, ...]] = {
            "value_sum": (len(self.top_k),),
            "weight_sum": (),
            "count": (),
            "invalid": (),  # lists with bad data found where update could not raise
        }

    # -- to be provided by subclasses ----------------------------------------------------
    def values(self, sel: Selection) -> Array:
        """Per-list values at every ``k``: ``(B, len(top_k))``."""
        raise NotImplementedError

    def has_relevant(self, sel: Selection) -> Array:
        """``(B,)`` bool: the list holds at least one relevant (valid) item. Called after
        :meth:`values` on the same selection (kernels may reuse what it computed)."""
        raise NotImplementedError

    def list_relevance(self, sel: Selection) -> tuple[Array, Array]:
        """For ``weighting="keras_rs"``: ``(B,)`` bool ``sum_j R_ij > 0`` and ``(B,)``
        ``sum_j W_ij R_ij / sum_j R_ij`` (0 where the sum is 0), with ``R`` the relevance
        keras-rs weighs lists by and ``W`` the item weights. Called after :meth:`values`."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------
    def _tie_generator(self, ops: Ops) -> Any:
        """One generator per kernel, so a seeded metric gives a reproducible stream."""
        if self.ties != "random":
            return None
        if self._generator_backend == "given":
            return self._generator
        if self._generator is None or getattr(self, "_generator_backend", None) != ops.name:
            if ops.name == "torch":
                import torch

                g = torch.Generator(device="cpu")
                if self.seed is None:
                    g.seed()
                else:
                    g.manual_seed(int(self.seed))
                self._generator = g
            else:
                self._generator = np.random.default_rng(self.seed)
            self._generator_backend = ops.name
        return self._generator

    def select(self, batch: ListBatch) -> Selection:
        ops = batch.ops
        scores, labels, valid = batch.scores, batch.labels, batch.valid
        if valid is not None:  # an item not in the list never counts, whatever its label (NaN too)
            labels = ops.where(valid, labels, 0.0)
        n = batch.list_size
        k = min(self.top_k[-1], n)
        acc = ops.acc_dtype(scores)
        ranked = top_ranked(ops, scores, k, valid=valid, ties=self.ties, generator=self._tie_generator(ops))
        idx = ranked.indices
        lab_sel = ops.cast(ops.take_along(labels, idx), acc)
        in_list = None
        if valid is not None:
            in_list = ops.cast(ops.take_along(valid, idx), acc)
            lab_sel = lab_sel * in_list
        positions = ops.arange(1, k + 1, scores, acc)
        w_sel = None
        if batch.item_weights is not None:
            w_sel = ops.take_along(batch.item_weights, idx)  # 0 on masked items already
        return Selection(
            ops=ops,
            k=k,
            labels=lab_sel,
            in_list=in_list,
            positions=positions,
            weights=batch.weights,
            has_nan=ranked.has_nan,
            nan_rows=ranked.nan_rows,
            n=n,
            full_labels=labels,
            full_valid=valid,
            item_weights=w_sel,
            full_item_weights=batch.item_weights,
        )

    def _cut(self, sel: Selection, cum: Array) -> Array:
        """Columns of a cumulative ``(B, K)`` array at every ``k`` (clipped to ``K``)."""
        # Column slices stacked on the device (no host-to-device index copy).
        return sel.ops.stack([cum[:, min(k, sel.k) - 1] for k in self.top_k], axis=1)

    def evaluate(
        self, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ops: Ops | None = None
    ) -> ListValues:
        """Per-list values of one batch with their weights and validity (see :class:`ListValues`).

        Bad data (NaN scores among the valid items, negative or NaN weights) raises
        ``ValueError`` here when the values can be read back for free (CPU); otherwise (an
        accelerator, or tracing) the offending lists are flagged in ``invalid`` so the caller
        can count them into the state and ``compute()`` raises instead: ``update`` never
        forces a device sync."""
        keras_rs = self.weighting == "keras_rs"
        batch = list_batch(
            y_pred,
            y,
            mask,
            sample_weight,
            ops=ops,
            item_weights=keras_rs,
            negative_labels=self.negative_labels,
        )
        sel = self.select(batch)
        ops = sel.ops
        invalid = self._check_data(sel)
        values = self.values(sel)
        rel = self.has_relevant(sel)
        counted = rel if self.empty == "skip" else ops.ones_bool(rel)
        if keras_rs:
            w = self.keras_rs_list_weights(sel, invalid)
        else:
            acc = values.dtype
            w = sel.weights if sel.weights is not None else ops.zeros((batch.batch_size,), values, acc) + 1.0
        return ListValues(values=values, counted=counted, weights=w, invalid=invalid)

    def per_list(
        self, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None, ops: Ops | None = None
    ) -> tuple[Array, Array, Array]:
        """Per-list values ``(B, len(top_k))``, whether each list is counted ``(B,)`` bool,
        and the list weights ``(B,)`` (ones when no ``sample_weight``). Lists flagged invalid
        (possible only where values cannot be read back) get NaN values."""
        out = self.evaluate(y_pred, y, mask, sample_weight, ops)
        values = out.values
        if out.invalid is not None:
            values = _ops_of(values).where(out.invalid[:, None], float("nan"), values)
        return values, out.counted, out.weights

    def keras_rs_list_weights(self, sel: Selection, invalid: Array | None = None) -> Array:
        """Per-list weights ``(B,)`` collapsed from the item weights as keras-rs's
        ``get_list_weights`` does, within one batch: a list with no item of positive weight
        gets 0; a list with relevance gets ``sum_j W_ij R_ij / sum_j R_ij``; a list without
        relevance gets the mean of those over the batch's lists having both (1.0 when none
        has). With no per-item weights this is the list's own weight (1.0 without
        ``sample_weight``) for every list holding an item."""
        ops = sel.ops
        rel_pos, plw = self.list_relevance(sel)
        w_pos = ops.ones_bool(rel_pos) if sel.in_list is None else sel.in_list[:, 0] > 0
        if sel.weights is not None:
            w_pos = w_pos & (sel.weights > 0)
        if invalid is not None:  # bad lists (left out of the sums) never enter the batch mean
            w_pos = w_pos & ~invalid
            plw = ops.where(invalid, 0.0, plw)
        both = ops.cast(w_pos & rel_pos, plw.dtype)
        n_both = ops.sum(both)
        avg = ops.where(n_both > 0, ops.sum(plw) / ops.where(n_both > 0, n_both, 1.0), 1.0)
        return ops.where(w_pos, ops.where(rel_pos, plw, avg), 0.0)

    def _check_data(self, sel: Selection) -> Array | None:
        """Raise on bad data when it can be read back; else return (B,) bool invalid rows.

        Bad data: NaN scores among a list's items; a per-list weight that is negative, NaN
        or infinite; a per-item weight of +inf; a NaN or infinite label on an item of the
        list (under ``negative_labels="mask"`` NaN and -inf labels are padding already)."""
        ops = sel.ops
        w = sel.weights
        labels = sel.full_labels  # 0 on items not in the list
        if sel.has_nan is not None:  # the values were read back: raise now
            if sel.has_nan:
                raise ValueError("y_pred contains NaN scores (among the items in the lists)")
            checks = [~ops.isfinite(ops.sum(labels))]  # cheap: a non-finite label makes it non-finite
            if w is not None:
                checks.append(ops.any(~ops.isfinite(w) | (w < 0)))
            if sel.full_item_weights is not None:
                checks.append(ops.any(sel.full_item_weights == float("inf")))
            flags = ops.host_bools(ops.stack(checks))
            if flags[0] and ops.host_bools(ops.any(~ops.isfinite(labels)))[0]:
                bad = ops.to_numpy(labels)
                bad = bad[~np.isfinite(bad)]
                raise ValueError(
                    f"y must hold finite labels on the items of the lists, got {bad[:8].tolist()}"
                    + (
                        " (labels < 0, NaN and -inf are padding here)"
                        if self.negative_labels == "mask"
                        else ""
                    )
                )
            if w is not None and flags[1]:
                raise ValueError(
                    "sample_weight must be finite and non-negative, got "
                    f"{ops.to_numpy(w)[:8].tolist()}{'...' if w.shape[0] > 8 else ''}"
                )
            if sel.full_item_weights is not None and flags[-1]:
                raise ValueError("sample_weight must be finite, got +inf among the per-item weights")
            return None
        invalid = sel.nan_rows
        bad_rows = ops.any(~ops.isfinite(labels), axis=1)
        if w is not None:
            bad_rows = bad_rows | ~ops.isfinite(w) | (w < 0)
        if sel.full_item_weights is not None:
            bad_rows = bad_rows | ops.any(sel.full_item_weights == float("inf"), axis=1)
        return bad_rows if invalid is None else invalid | bad_rows

    def batch_sums(
        self, ops: Ops | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
    ) -> dict[str, Array]:
        out = self.evaluate(y_pred, y, mask, sample_weight, ops=ops)
        ops = ops or _ops_of(out.values)
        counted = out.counted
        if out.invalid is not None:
            counted = counted & ~out.invalid
        wc = ops.where(counted, out.weights, 0.0)
        values = ops.where(counted[:, None], out.values, 0.0)
        zero = ops.sum(wc) * 0.0
        return {
            "value_sum": ops.sum(values * wc[:, None], axis=0),
            "weight_sum": ops.sum(wc),
            "count": ops.sum(ops.cast(wc > 0, wc.dtype)),
            "invalid": zero if out.invalid is None else ops.sum(ops.cast(out.invalid, wc.dtype)),
        }

    def compute(self, sums: Mapping[str, Any], ops: Ops) -> Any:
        w = sums["weight_sum"]
        safe = ops.where(w > 0, w, 1.0)
        value = ops.where(w > 0, sums["value_sum"] / safe, 0.0 * sums["value_sum"])
        if "invalid" in sums:  # NaN where bad lists were counted (check_computable raises on them)
            value = ops.where(sums["invalid"] > 0, float("nan"), value)
        return value

    def check_computable(self, sums: Mapping[str, np.ndarray], name: str | None = None) -> None:
        """Raise when the sums cannot give a number: ``ValueError`` when bad lists were counted
        (where ``update`` could not raise), :class:`NotComputableError` when no list was
        counted. ``name`` is the public metric's name in the messages (the kernel's class by
        default)."""
        name = name or type(self).__name__
        bad = float(np.asarray(sums.get("invalid", 0.0)))
        if bad > 0:
            raise ValueError(
                f"{name}: {int(bad)} list(s) had NaN scores among their items, a NaN or infinite "
                "label, or a negative/NaN/infinite sample_weight; they were left out of the sums. "
                "On accelerators and under jit, update() does not read values back (no device "
                "sync), so such lists are counted and reported here instead of raising in update()."
            )
        if not float(np.asarray(sums["weight_sum"])) > 0:
            raise NotComputableError(
                f"{name} must have at least one usable list before compute() "
                f"(lists seen with a relevant item and a positive weight: {int(np.asarray(sums['count']))})"
            )

    def finalize(self, value: Any) -> list[float]:
        return [float(v) for v in np.asarray(value).reshape(-1)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(top_k={self.top_k}, empty={self.empty!r}, ties={self.ties!r})"


def _ops_of(x: Any) -> Ops:
    from rankstream.core.ops import get_ops

    return get_ops(x)
