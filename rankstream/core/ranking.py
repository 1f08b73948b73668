"""Top-k selection with an explicit tie policy, done once per batch at ``max(k)``.

``top_ranked`` returns, for each row, the indices of the ``K`` best items in rank order:
valid items first by score (descending), masked items last, and ties among equal scores
resolved by the policy:

* ``"first"``: the item with the smaller index ranks first (a stable sort; ignite's rule);
* ``"random"``: a uniformly random order among tied items (keras-rs ``shuffle_ties=True``),
  reproducible with a seed.

Cost: one ``topk`` at ``K + 1`` over the scores. Ties can only change the result when two of
the ``K + 1`` selected values are equal, which is read off the small ``(B, K + 1)``
selection; only those rows are re-ranked with a full stable sort. Random ties apply one
random column permutation (a uniformly random tie order within every row) and then the
stable rule, then map indices back.

Host reads: the NaN check and the tie branch read two booleans back from the device in
one transfer (free on CPU; one small sync on an accelerator). Backends whose ``topk`` is
already stable and which cannot read values back (JAX/TF under ``jit``) skip both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rankstream.core.ops import Array, Ops

TIE_POLICIES = ("first", "random")


@dataclass
class Ranked:
    """Result of :func:`top_ranked`: ``indices`` (B, K) in rank order; ``has_nan`` is a
    python bool when the backend is eager (NaN among the valid scores), else ``None``."""

    indices: Array
    has_nan: bool | None


def check_ties(ties: str) -> str:
    if ties not in TIE_POLICIES:
        raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
    return ties


def top_ranked(
    ops: Ops,
    scores: Array,
    k: int,
    valid: Array | None = None,
    ties: str = "first",
    generator: Any = None,
) -> Ranked:
    """Indices of the top ``k`` items per row (``k`` already clipped to the list length).

    ``scores`` is (B, N) floating; ``valid`` an optional (B, N) bool mask (False = not in the
    list). Masked items are ranked after every valid item, so with ``k`` larger than the
    number of valid items the tail of the result points at masked items; callers zero them
    through the mask.
    """
    n = scores.shape[-1]
    neg_inf = float("-inf")
    s = scores if valid is None else ops.where(valid, scores, neg_inf)
    perm = None
    if ties == "random" and n > 1:
        perm = ops.randperm(n, scores, generator)
        s = ops.take(s, perm, axis=1)
        if valid is not None:
            valid = ops.take(valid, perm, axis=1)
    kq = min(k + 1, n)
    vals, idx = ops.topk(s, kq)
    has_nan = None
    if ops.eager:
        nan_any = ops.any(ops.isnan(vals[:, 0]))
        tie_rows = None
        if not ops.native_stable or valid is not None:
            if kq > 1:
                tie_rows = ops.any(vals[:, 1:] == vals[:, :-1], axis=1)
        if tie_rows is None:
            has_nan = ops.host_bools(nan_any)[0]
        else:
            has_nan, any_tie = ops.host_bools(ops.stack([nan_any, ops.any(tie_rows)]))
            if any_tie and not has_nan:
                rows = ops.nonzero(tie_rows)
                sub = ops.take(s, rows, axis=0)
                keys = [sub]
                if valid is not None:
                    keys.append(ops.cast(ops.take(valid, rows, axis=0), sub.dtype))
                exact = ops.stable_argsort_desc(keys)[:, :kq]
                idx = ops.set_rows(idx, rows, exact)
    idx = idx[:, :k]
    if perm is not None:
        idx = ops.lookup(perm, idx)
    return Ranked(indices=idx, has_nan=has_nan)
