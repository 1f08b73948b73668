"""rankstream: streaming ranking metrics (MAP@k, nDCG@k, Hits@k, MRR, GMR) with one
framework-agnostic core and thin PyTorch-Ignite and Keras 3 adapters.

Core API (no framework needed)::

    from rankstream import State, MAPKernel, map_at_k
    st = State(MAPKernel(top_k=[1, 5, 10]))
    st.update(scores, labels)            # numpy or torch arrays, shape (batch, num_items)
    st.compute()                         # [MAP@1, MAP@5, MAP@10]

Framework adapters: ``rankstream.ignite`` and ``rankstream.keras``.
"""

from rankstream.core.functional import (
    dcg_at_k,
    hit_rate_at_k,
    map_at_k,
    ndcg_at_k,
    precision_at_k,
    r_precision,
    recall_at_k,
    reciprocal_rank_at_k,
)
from rankstream.core.inputs import IntegerScoresWarning, SwappedInputsWarning
from rankstream.core.metrics import (
    DCGKernel,
    HitRateKernel,
    ListMetrics,
    MAPKernel,
    NDCGKernel,
    PrecisionKernel,
    RecallKernel,
    ReciprocalRankKernel,
    RPrecisionKernel,
)
from rankstream.core.state import NotComputableError, State, merge

__version__ = "0.1.0"

__all__ = [
    "DCGKernel",
    "HitRateKernel",
    "IntegerScoresWarning",
    "ListMetrics",
    "MAPKernel",
    "NDCGKernel",
    "NotComputableError",
    "PrecisionKernel",
    "RPrecisionKernel",
    "RecallKernel",
    "ReciprocalRankKernel",
    "State",
    "SwappedInputsWarning",
    "dcg_at_k",
    "hit_rate_at_k",
    "map_at_k",
    "merge",
    "ndcg_at_k",
    "precision_at_k",
    "r_precision",
    "recall_at_k",
    "reciprocal_rank_at_k",
]
