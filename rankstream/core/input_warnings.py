"""The warnings of a batch's checks (:mod:`rankstream.core.inputs`): integer scores, and
arguments that look swapped (labels given as scores), each warned once per metric instance at
the user's line."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from rankstream.core.backends import Ops


class IntegerScoresWarning(UserWarning):
    """``y_pred`` holds integers or bools: scores are usually floats, and integer item ids
    passed as scores rank by id. Silence with
    ``warnings.filterwarnings("ignore", category=rankstream.IntegerScoresWarning)``."""


def warn_integer_scores(ops: Ops, y_pred: Any) -> None:
    """Warn (once per call site, Python's default filter) when ``y_pred`` is not floating."""
    if not ops.is_floating(y_pred):
        warnings.warn(
            f"y_pred has dtype {ops.dtype_name(y_pred)}: scores are expected to be real numbers "
            "(integer item ids passed as scores are ranked by id). Pass float scores, or silence "
            "this with warnings.filterwarnings('ignore', category=rankstream.IntegerScoresWarning)",
            IntegerScoresWarning,
            stacklevel=4,
        )


class SwappedInputsWarning(UserWarning):
    """``y_pred`` looks like labels and ``y`` like scores: the arguments may be swapped
    (``update((y, y_pred))``, ``update_state(y_pred, y_true)``, ``map_at_k(y, y_pred)``), which
    gives plausible but wrong numbers. Warned once per metric instance, only where the values
    are on the host already (never on an accelerator or under ``jit``). Silence with
    ``warnings.filterwarnings("ignore", category=rankstream.SwappedInputsWarning)``."""


#: values of a batch the swapped-arguments check reads (the first rows, up to this many values)
SWAP_SAMPLE = 4096
#: "looks like labels": integer-valued scores with at most this many distinct values
SWAP_MAX_DISTINCT = 10


def looks_swapped(scores: np.ndarray, labels: np.ndarray) -> bool:
    """Whether host values of one batch's items look like swapped arguments: the scores look
    like labels (integer-valued, 2 to :data:`SWAP_MAX_DISTINCT` distinct values) and the labels
    like scores (a non-integer value, or negative values beyond a label scale: more than
    :data:`SWAP_MAX_DISTINCT` distinct values). Binary scores beside binary (or graded) labels
    never do, nor integer labels with negative grades (trec_eval's judgments, -1 padding);
    non-finite values are ignored."""
    labels = labels[np.isfinite(labels)]
    if labels.size == 0:
        return False
    if not np.any(labels != np.round(labels)):  # integer labels: scores only beyond a label scale
        if not np.any(labels < 0) or np.unique(labels).size <= SWAP_MAX_DISTINCT:
            return False
    scores = scores[np.isfinite(scores)]
    if scores.size == 0 or np.any(scores != np.round(scores)):
        return False
    return 2 <= np.unique(scores).size <= SWAP_MAX_DISTINCT


def warn_swapped_inputs(ops: Ops, batch: Any) -> bool:
    """Warn (:class:`SwappedInputsWarning`) when the first rows of ``batch`` (a
    :class:`~rankstream.core.inputs.ListBatch`; at most
    :data:`SWAP_SAMPLE` values, items in the lists only) look like swapped arguments
    (:func:`looks_swapped`). Call only where values are on the host already (``read_back``):
    the rows are read as numpy views or small copies. Returns whether there were items to
    look at (the check decided), so a metric checks until it has decided once."""
    n = max(batch.list_size, 1)
    rows = max(1, SWAP_SAMPLE // n)
    cols = min(n, SWAP_SAMPLE)  # a list longer than the sample: its first items
    scores = np.asarray(ops.to_numpy(batch.scores[:rows, :cols]), dtype=np.float64)
    if scores.shape[0] == 0:
        return False
    labels = np.asarray(ops.to_numpy(batch.labels[:rows, :cols]), dtype=np.float64)
    if batch.valid is not None:
        keep = np.asarray(ops.to_numpy(batch.valid[:rows, :cols]), dtype=bool)
        scores, labels = scores[keep], labels[keep]
    if scores.size == 0:
        return False
    with np.errstate(all="ignore"):
        swapped = looks_swapped(scores.reshape(-1), labels.reshape(-1))
    if swapped:
        warn_once(
            "y_pred looks like labels (a few integer values) and y like scores (non-integer or "
            "negative values): are the arguments swapped? The order is update((y_pred, y)) in "
            "Ignite, update_state(y_true, y_pred) in Keras, and f(scores, labels) for the functions. "
            "Silence this with warnings.filterwarnings('ignore', category=rankstream.SwappedInputsWarning)",
            SwappedInputsWarning,
        )
    return True


_FRAMEWORKS = ("rankstream", "ignite", "keras", "torch", "tensorflow", "jax", "contextlib")


def warn_once(message: str, category: type[Warning]) -> None:
    """Warn at the first frame outside rankstream and the frameworks (the user's line calling
    ``update``, ``engine.run`` or ``evaluate``), whatever Python's per-location registry holds:
    the caller decides how often (once per metric instance); warning filters still apply."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(_FRAMEWORKS):
        frame = frame.f_back
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__", "<unknown>"),
        registry=None,
        module_globals=frame.f_globals,
    )
