"""rankstream metrics as PyTorch-Ignite metrics (``from rankstream.ignite import MAP, NDCG``).

Needs PyTorch and PyTorch-Ignite: ``pip install "rankstream[ignite]"``.

The list metric classes come from the table of list metrics
(`rankstream.core.lists.table`), one per row, and the one-family rank metric classes from the
rank family registry (`rankstream.core.ranks.families`), one per family.
"""

from rankstream.adapters.requirements import install_hint as _install_hint
from rankstream.adapters.requirements import require as _require

try:
    import torch as _torch  # noqa: F401
    from ignite import __version__ as _ignite_version
except ImportError as _err:
    raise ImportError(
        f"rankstream.ignite needs PyTorch and PyTorch-Ignite, and importing them failed ({_err}). "
        f"Install them with: {_install_hint('ignite')}"
    ) from _err

_require(
    "rankstream.ignite", "pytorch-ignite", _ignite_version, "0.5.1", "ignite", why="Metric's skip_unrolling"
)

from rankstream.adapters import ignite_lists as _lists  # noqa: E402
from rankstream.adapters import ignite_ranks as _ranks  # noqa: E402
from rankstream.adapters.ignite_beyond import BeyondMetrics  # noqa: E402
from rankstream.adapters.ignite_catalog import CatalogMetrics  # noqa: E402
from rankstream.adapters.ignite_lists import ListMetrics  # noqa: E402
from rankstream.adapters.ignite_metrics import KernelMetric  # noqa: E402
from rankstream.adapters.ignite_paired import PairedComparison  # noqa: E402
from rankstream.adapters.ignite_per_list import PerList, PerListValues  # noqa: E402
from rankstream.adapters.ignite_ranks import RankBasedMetrics  # noqa: E402
from rankstream.adapters.ignite_sampled import SampledRankMetrics  # noqa: E402
from rankstream.core.ranks.families import RANK_TYPES  # noqa: E402

globals().update(_lists.CLASSES)  # MAP, NDCG, DCG, ... and their other names (MRR): the table's
globals().update(_ranks.CLASSES)  # HitsAtK, InverseHarmonicMeanRank, ...: the registry's

__all__ = [
    *_lists.CLASSES,
    "CatalogMetrics",
    "ListMetrics",
    "PairedComparison",
    "PerListValues",
    "PerList",
    *_ranks.CLASSES,
    "RankBasedMetrics",
    "RANK_TYPES",
    "SampledRankMetrics",
    "BeyondMetrics",
    "KernelMetric",
]
