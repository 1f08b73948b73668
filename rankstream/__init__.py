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

from rankstream.core import functional as _functional
from rankstream.core.beyond import BeyondAccuracy as BeyondAccuracy
from rankstream.core.beyond import ItemData as ItemData
from rankstream.core.inputs import IntegerScoresWarning as IntegerScoresWarning
from rankstream.core.inputs import SwappedInputsWarning as SwappedInputsWarning
from rankstream.core.lists import ListMetrics as ListMetrics
from rankstream.core.lists.paired import PairedComparison as PairedComparison
from rankstream.core.lists.table import LIST_METRICS as _LIST_METRICS
from rankstream.core.sampled_state import SampledRanks as SampledRanks
from rankstream.core.state import NotComputableError as NotComputableError
from rankstream.core.state import State as State
from rankstream.core.state import merge as merge

__version__ = "0.1.0"

# every row of the table of list metrics: its kernel (MAPKernel, ...) and functional form (map_at_k, ...)
globals().update({row.kernel.__name__: row.kernel for row in _LIST_METRICS})
globals().update({row.function: getattr(_functional, row.function) for row in _LIST_METRICS})

__all__ = sorted(
    [
        "BeyondAccuracy",
        "IntegerScoresWarning",
        "ItemData",
        "ListMetrics",
        "NotComputableError",
        "PairedComparison",
        "SampledRanks",
        "State",
        "SwappedInputsWarning",
        "merge",
        *(row.kernel.__name__ for row in _LIST_METRICS),
        *(row.function for row in _LIST_METRICS),
    ]
)
