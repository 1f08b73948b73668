"""A toy list metric defined outside the package: one kernel class (its per-list values and its
moments under a random ranking) and one row of the table, registered at runtime, with the
presentations' forms asked for (tests/test_toy_metric.py, and the Keras suite's
test_keras_toy_metric.py).

``HITS@k``: per list the number of relevant items (``label > 0``, or ``>= relevance_threshold``)
among the top ``k``, not divided by anything. Under a uniformly random ranking the hits are
hypergeometric: ``E = k' R / N``, ``Var = k' (R / N) (1 - R / N) (N - k') / (N - 1)``, best
``min(R, k')`` (``k' = min(k, N)``)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from rankstream.core import functional
from rankstream.core.lists import table
from rankstream.core.lists.binary import BinaryListKernel
from rankstream.core.lists.chance import binary_counts, clipped_ks, hits_terms
from rankstream.core.lists.table import BY_NAME, ListMetricRow, Presentation, RetrievalPresentation, register


class ToyHitsKernel(BinaryListKernel):
    """HITS@k for every ``k`` in ``top_k``: the relevant items among the top ``k``."""

    name = "toy_hits"
    order_free_past_end = True

    def binary_values(self, sel: Any, rel: Any, n_rel: Any) -> Any:
        return self.hits(sel, rel)  # its tie expectation too: each position's group mean

    def rank_values(self, ranks: Any, rel: Any, n_rel: Any) -> Any:
        return self.rank_hits_at_k(ranks, rel)

    def chance_moments(self, sel: Any) -> tuple[Any, Any, Any]:
        r, n, _ = binary_counts(self, sel)
        kk = clipped_ks(self, sel, n)
        return hits_terms(sel, kk, n, r, 1.0 + 0.0 * kk)


ROW = ListMetricRow(
    name="toy_hits",
    aliases=("toyhits",),
    kernel=ToyHitsKernel,
    function="toy_hits_at_k",
    ignite=Presentation("ToyHits", doc="The relevant items among the top k (a toy)."),
    keras=Presentation(
        "ToyHits", defaults={"relevance_threshold": 1.0}, doc="The relevant items among the top k (a toy)."
    ),
    torchmetrics=RetrievalPresentation("RetrievalToyHits", doc="The relevant items among the top k."),
)


@contextmanager
def registered(*more: MutableMapping[str, Any]) -> Iterator[ListMetricRow]:
    """The row registered (the core's names and the functional form) for the block, and every
    registry it touched (``BY_NAME``, the modules' namespaces, and ``more``: the adapters'
    registries the caller adds to) as it was afterwards: no other test sees the toy."""
    mappings = [BY_NAME, vars(table), vars(functional), *more]
    saved = [(mapping, dict(mapping)) for mapping in mappings]
    try:
        register(ROW)
        functional.register(ROW)
        yield ROW
    finally:
        for mapping, old in saved:
            for key in set(mapping) - set(old):
                del mapping[key]
            mapping.update({key: value for key, value in old.items() if mapping.get(key) is not value})
