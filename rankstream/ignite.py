"""rankstream metrics as PyTorch-Ignite metrics (``from rankstream.ignite import MAP, NDCG``).

Needs PyTorch and PyTorch-Ignite: ``pip install "rankstream[ignite]"``.
"""

import re as _re

try:
    import torch as _torch  # noqa: F401
    from ignite import __version__ as _ignite_version
except ImportError as _err:
    raise ImportError(
        f"rankstream.ignite needs PyTorch and PyTorch-Ignite, and importing them failed ({_err}). "
        'Install them with: pip install "rankstream[ignite]"'
    ) from _err

if tuple(int(p) for p in _re.findall(r"\d+", _ignite_version)[:3]) < (0, 5, 1):
    raise ImportError(
        f"rankstream.ignite needs pytorch-ignite 0.5.1 or later (Metric's skip_unrolling), found "
        f'{_ignite_version}. Upgrade with: pip install -U "rankstream[ignite]"'
    )

from rankstream.adapters.ignite_metrics import (
    DCG,
    GMR,
    MAP,
    MRR,
    NDCG,
    ArithmeticMeanRank,
    GeometricMeanRank,
    HitRate,
    HitsAtK,
    InverseHarmonicMeanRank,
    KernelMetric,
    ListMetrics,
    MeanReciprocalRank,
    Precision,
    RankBasedMetrics,
    Recall,
    RPrecision,
)
from rankstream.core.ranks.families import RANK_TYPES

__all__ = [
    "DCG",
    "GMR",
    "MAP",
    "MRR",
    "NDCG",
    "RANK_TYPES",
    "ArithmeticMeanRank",
    "GeometricMeanRank",
    "HitRate",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "KernelMetric",
    "ListMetrics",
    "MeanReciprocalRank",
    "Precision",
    "RPrecision",
    "RankBasedMetrics",
    "Recall",
]
