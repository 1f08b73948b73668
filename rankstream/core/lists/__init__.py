"""The list metrics: one kernel per metric (per-list values -> state field sums), the
collection, and the table they are all read from (:mod:`rankstream.core.lists.table`)."""

from rankstream.core.lists.base import ListKernel as ListKernel
from rankstream.core.lists.collection import ListMetrics as ListMetrics
from rankstream.core.lists.table import LIST_METRICS

# every row's kernel, under its class name (MAPKernel, NDCGKernel, ...)
globals().update({row.kernel.__name__: row.kernel for row in LIST_METRICS})

__all__ = sorted(["ListKernel", "ListMetrics", *(row.kernel.__name__ for row in LIST_METRICS)])
