"""rankstream's list metrics as ``torchmetrics.Metric`` subclasses, under torchmetrics' names
and arguments (``from rankstream.torchmetrics import RetrievalNormalizedDCG``).

Needs PyTorch and torchmetrics: ``pip install "rankstream[torchmetrics]"``.

They take torchmetrics' flat input, ``update(preds, target, indexes)``, group the items into
lists by query id on the input's device and keep sums (``dist_reduce_fx="sum"``) instead of
every prediction. Under torchmetrics' defaults they give torchmetrics' value or raise an error
naming the mode that does, never another number: the default ``query_mode="contiguous"`` takes
batches that cut queries (a plain ``DataLoader`` over a flat log grouped by query, ids in any
order), carries the open query into the next update and keeps one id per closed query, so that
an id coming back (a shuffling loader) is a ``ValueError`` naming ``query_mode="any"``, which
keeps every item until ``compute()`` as torchmetrics does. ``"whole"`` (each update holds whole
queries, constant state, unchecked) and ``"sorted"`` (ids sorted across updates) are the other
choices. See ``docs/torchmetrics.md`` for the conventions, what each mode holds, and every
known difference with torchmetrics.
"""

from rankstream.adapters.requirements import install_hint as _install_hint
from rankstream.adapters.requirements import require as _require

try:
    import torch as _torch  # noqa: F401
    from torchmetrics import __version__ as _torchmetrics_version
except ImportError as _err:
    raise ImportError(
        f"rankstream.torchmetrics needs PyTorch and torchmetrics, and importing them failed ({_err}). "
        f"Install them with: {_install_hint('torchmetrics')}"
    ) from _err

_require("rankstream.torchmetrics", "torchmetrics", _torchmetrics_version, "1.0", "torchmetrics")

from rankstream.adapters.torchmetrics_metrics import (  # noqa: E402
    CLASSES as _CLASSES,
)
from rankstream.adapters.torchmetrics_metrics import (  # noqa: E402
    RetrievalAUC,
    RetrievalERR,
    RetrievalF1,
    RetrievalGAUC,
    RetrievalHitRate,
    RetrievalListMetric,
    RetrievalMAP,
    RetrievalMRR,
    RetrievalNormalizedDCG,
    RetrievalPrecision,
    RetrievalRBP,
    RetrievalRecall,
    RetrievalRPrecision,
)
from rankstream.core.grouping import QUERY_MODES, group_by_query  # noqa: E402

__all__ = [
    "QUERY_MODES",
    "RetrievalAUC",
    "RetrievalERR",
    "RetrievalF1",
    "RetrievalGAUC",
    "RetrievalHitRate",
    "RetrievalListMetric",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalRBP",
    "RetrievalRPrecision",
    "RetrievalRecall",
    "group_by_query",
]
if set(_CLASSES) - set(__all__):  # the adapter's classes are all exported here
    raise ImportError(f"rankstream.torchmetrics does not export {sorted(set(_CLASSES) - set(__all__))}")
del _CLASSES
