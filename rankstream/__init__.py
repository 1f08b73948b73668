"""rankstream: streaming ranking metrics (MAP@k, nDCG@k, DCG@k, Precision/Recall/HitRate/MRR@k,
R-Precision; Hits@k, MRR, GMR, mean rank) with one framework-agnostic core of sums and thin
PyTorch-Ignite and Keras 3 adapters.

Where to start:

* `rankstream.ignite`: metrics to attach to an Ignite ``Engine`` (ignite's arguments);
* `rankstream.keras`: metrics for ``model.compile`` on torch, JAX or TensorFlow (keras-rs's);
* this module, the core: one kernel per list metric (`MAPKernel`, `NDCGKernel`, ...),
  `ListMetrics`, `State` (a metric's state as named sums) and `merge`, and the functional
  forms (`ndcg_at_k`, ...; `rankstream.core.functional`);
* `rankstream.pykeen`: PyKEEN-compatible metrics over arrays of ranks;
* `rankstream.filtering`: candidate masks for filtered link prediction;
* `rankstream.distributed`: all-reduce and merge of states, sampler padding weights.

The core needs no framework::

    from rankstream import State, MAPKernel, map_at_k
    st = State(MAPKernel(top_k=[1, 5, 10]))
    st.update(scores, labels)            # numpy or torch arrays, shape (batch, num_items)
    st.compute()                         # [MAP@1, MAP@5, MAP@10]
    map_at_k(scores, labels, k=5)        # per-list AP@5 of one batch
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
from rankstream.core.lists import (
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
