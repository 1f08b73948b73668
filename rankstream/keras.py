"""rankstream metrics as Keras 3 metrics (``from rankstream.keras import NDCG, MAP, HitsAtK``).

Drop-ins for the six ranking metrics of ``keras_rs.metrics`` (``NDCG``, ``DCG``,
``MeanAveragePrecision`` / ``MAP``, ``MeanReciprocalRank`` / ``MRR``, ``PrecisionAtK``,
``RecallAtK``) with ``HitRateAtK`` and ``RPrecision`` in the same conventions, and the
rank-based metrics (Hits@k, PyKEEN's per-positive MRR ``InverseHarmonicMeanRank``, GMR, mean
rank, each with its expectation, variance, adjusted and z forms; ``RankBasedMetrics`` for all
of them in one pass), TensorFlow Recommenders' ``FactorizedTopK`` and ``CatalogMetrics`` (the
list metrics of queries against a whole catalog; both counted over the candidates chunk by
chunk), on the torch, JAX and TensorFlow backends, built on the same core as
``rankstream.ignite``.

Needs Keras 3 and one backend: ``pip install "rankstream[keras]" jax`` (or ``tensorflow``, or
``torch``); ``KERAS_BACKEND`` picks the backend, as for Keras itself.
"""

import os as _os

from rankstream.adapters.requirements import require as _require

try:
    import keras as _keras
except ImportError as _err:
    _missing = "jax" if _err.name == "jaxlib" or "jaxlib" in str(_err) else _err.name
    if _missing not in ("jax", "tensorflow", "torch"):
        raise ImportError(
            f"rankstream.keras needs Keras 3 and one of its backends; importing Keras failed ({_err}). "
            'Install both with: pip install "rankstream[keras]" jax  '
            "(or tensorflow, or torch, in place of jax)"
        ) from _err
    _chosen = _os.environ.get("KERAS_BACKEND")
    _chosen = f"KERAS_BACKEND={_chosen}" if _chosen else "KERAS_BACKEND is unset: Keras' default"
    raise ImportError(
        f"Keras is installed but its backend {_missing} is not ({_chosen}; {_err}). Install it with: "
        f'pip install "rankstream[keras]" {_missing}  or select an installed backend with '
        "KERAS_BACKEND=jax, tensorflow or torch, set before Keras is imported."
    ) from _err

_require("rankstream.keras", "Keras", _keras.__version__, "3.6", "keras")

from rankstream.adapters.keras_beyond import BeyondMetrics  # noqa: E402
from rankstream.adapters.keras_catalog_metrics import CatalogMetrics  # noqa: E402
from rankstream.adapters.keras_factorized import FactorizedTopK  # noqa: E402
from rankstream.adapters.keras_lifecycle import KernelMetric  # noqa: E402
from rankstream.adapters.keras_metrics import (  # noqa: E402
    LIST_CLASSES as _LIST_CLASSES,
)
from rankstream.adapters.keras_metrics import (  # noqa: E402
    ListMetrics,
    default_gain_fn,
    default_rank_discount_fn,
)
from rankstream.adapters.keras_paired import PairedComparison  # noqa: E402
from rankstream.adapters.keras_ranks import (  # noqa: E402
    GMR,
    ArithmeticMeanRank,
    GeometricMeanRank,
    HitsAtK,
    InverseHarmonicMeanRank,
    RankBasedMetrics,
)
from rankstream.adapters.keras_sampled import SampledRankMetrics  # noqa: E402
from rankstream.core.lists.table import LIST_METRICS as _LIST_METRICS  # noqa: E402
from rankstream.core.ranks.families import RANK_TYPES  # noqa: E402

__all__ = [
    "GMR",
    "RANK_TYPES",
    "ArithmeticMeanRank",
    "BeyondMetrics",
    "CatalogMetrics",
    "FactorizedTopK",
    "GeometricMeanRank",
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "KernelMetric",
    "ListMetrics",
    "PairedComparison",
    "RankBasedMetrics",
    "SampledRankMetrics",
    "default_gain_fn",
    "default_rank_discount_fn",
]

# the list metric classes, one per row of the table (``NDCG``, ``MAP``, ...), and their other names
_LIST_NAMES = [name for row in _LIST_METRICS for name in (row.keras.name, *row.keras.also)]
globals().update({name: _LIST_CLASSES[name] for name in _LIST_NAMES})
__all__ += _LIST_NAMES
__all__.sort(key=lambda name: (not name.isupper(), name[0].islower(), name))
