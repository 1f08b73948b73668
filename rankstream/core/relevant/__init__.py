"""The second producer of the list metrics: the ranks of each list's relevant items, from counts
(:mod:`~rankstream.core.relevant.ranks`), reduced to the kernels' state sums as the dense path
reduces them (:mod:`~rankstream.core.relevant.values`). Fed by the torchmetrics adapter's flat
items and by a catalog scored chunk by chunk (:mod:`rankstream.catalog`)."""

from rankstream.core.relevant.ranks import RelevantRanks
from rankstream.core.relevant.values import collection_sums, per_list, rank_output, rank_sums, supports

__all__ = ["RelevantRanks", "collection_sums", "per_list", "rank_output", "rank_sums", "supports"]
