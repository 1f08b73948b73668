"""List metrics over a whole catalog as one Ignite metric: :class:`CatalogMetrics`.

The Ignite lifecycle only (``rankstream.adapters.ignite_metrics.KernelMetric``: the collection's
state fields as one flat float64 tensor, one ``idist`` all-reduce SUM in ``compute``,
``state_dict``); the counting and the metric math are :mod:`rankstream.catalog`'s
(:func:`~rankstream.catalog.catalog_sums`). The metric holds the catalog (item embeddings or a
scorer); the engine's output is a batch of queries with their relevant items:

* ``(queries, relevant)`` or ``(queries, relevant, {"exclude": ..., "grades": ...,
  "sample_weight": ...})``, or a mapping with the keys ``queries``, ``relevant`` and any of those
  three. ``queries`` are query embeddings ``(B, d)`` (with ``items=``) or whatever the ``score``
  callable takes; ``relevant`` a list of id arrays or a ``(B, R)`` array padded with ``-1``.

Queries split over processes (``idist``): each process counts its own batches against the whole
catalog, and ``compute`` sums the states (the same numbers as one process over all the queries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rankstream.adapters.ignite_lists import PEER_DEFAULTS, empty_policy
from rankstream.adapters.ignite_metrics import _CPU, KernelMetric, _identity
from rankstream.catalog import (
    CATALOG_OPTIONS,
    catalog_sums,
    checked_options,
    collection_of,
    explicit_signature,
    make_scorer,
)
from rankstream.core.state import flat_size

__all__ = ["CatalogMetrics"]

#: the optional keys of an engine output beside the queries and their relevant items
EXTRA_KEYS = ("exclude", "grades", "sample_weight")


def _batch_input(output: Any) -> tuple[Any, Any, dict[str, Any]]:
    """``(queries, relevant, extras)`` of one (transformed) engine output."""
    if isinstance(output, Mapping):
        missing = [k for k in ("queries", "relevant") if k not in output]
        unknown = sorted(set(output) - {"queries", "relevant", *EXTRA_KEYS})
        if missing or unknown:
            raise ValueError(
                f"CatalogMetrics reads a mapping with the keys 'queries', 'relevant' and optionally "
                f"{list(EXTRA_KEYS)}, got the keys {sorted(output)}"
            )
        return output["queries"], output["relevant"], {k: output[k] for k in EXTRA_KEYS if k in output}
    if isinstance(output, Sequence) and len(output) in (2, 3):
        extras = dict(output[2]) if len(output) == 3 and isinstance(output[2], Mapping) else {}
        if len(output) == 3 and (not isinstance(output[2], Mapping) or set(extras) - set(EXTRA_KEYS)):
            raise ValueError(
                f"CatalogMetrics: the third element of the output must be a mapping of {list(EXTRA_KEYS)}, "
                f"got {output[2]!r}"[:300]
            )
        return output[0], output[1], extras
    raise TypeError(
        "CatalogMetrics reads (queries, relevant[, {'exclude', 'grades', 'sample_weight'}]) or a mapping, "
        f"got {type(output).__name__}"
    )


class CatalogMetrics(KernelMetric):
    """List metrics of each query's relevant items ranked among every item of a catalog, e.g.
    ``CatalogMetrics(["ndcg@10", "recall@100", "mrr"], items=item_embeddings)``; the engine
    outputs ``(query_embeddings, relevant_ids[, {"exclude": train_ids}])``.

    ``compute()`` returns ``{name: value}`` (each name also in ``engine.state.metrics``), the
    numbers of :class:`rankstream.ignite.ListMetrics` on the materialised ``(queries, items)``
    score matrix with each query's excluded items masked, exact at every ``k``, one chunk of
    scores held at a time (see docs/catalog.md).

    Args:
        metrics: the names, as :class:`rankstream.ignite.ListMetrics` takes them (its defaults).
        items: ``(num_items, dim)`` item embeddings (numpy or torch, float32 or float64), or None
            with ``score``.
        score: a callable ``score(queries, item_ids) -> (B, len(item_ids))`` (any model), with
            ``num_items``.
        num_items: the catalog's size, with ``score``.
        similarity: ``"dot"`` or ``"cosine"`` for ``items``.
        chunk_size, memory: items per chunk, or the bytes of one chunk's scores.
        ignore_zero_hits: skip queries with no relevant item (True) or count them as 0.
        output_transform, device: as for every Ignite metric.
        ties: ``"first"`` (the lower item index first), ``"random"`` (with ``seed``) or
            ``"expected"``.
        seed: the seed of random tie orders.
        confidence: None or a level: each name is followed by ``_stderr``, ``_ci_low``,
            ``_ci_high`` and ``_count``.
        chance: False (default) or True: each name is also followed by ``_expected`` (its mean
            under a uniformly random ranking of each query's list, the catalog less its excluded
            items), ``_adjusted`` and ``_z`` (docs/chance.md, docs/catalog.md).
        prefix: prepended to every name.
    """

    def __init__(
        self,
        metrics: Sequence[str],
        items: Any = None,
        *,
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        ties: str = "first",
        seed: int | None = None,
        confidence: float | None = None,
        chance: bool = False,
        prefix: str = "",
        **catalog: Any,
    ) -> None:
        # the catalog's options (score= ... memory=) are rankstream.catalog's: the signature shows them
        given = checked_options(catalog, CATALOG_OPTIONS, "CatalogMetrics")
        empty = empty_policy(ignore_zero_hits)
        options = dict(
            defaults=PEER_DEFAULTS, empty=empty, ties=ties, seed=seed, confidence=confidence, chance=chance
        )
        kernel = collection_of(list(metrics), options)
        self.scorer = make_scorer(items, given["score"], given["num_items"], given["similarity"])
        self.metrics, self.ignore_zero_hits, self.confidence = kernel.metrics, ignore_zero_hits, confidence
        self.chunk_size, self.memory, self.ties = given["chunk_size"], given["memory"], ties
        self._rng = np.random.default_rng(seed)
        super().__init__(kernel, output_transform, device, False, prefix)

    def _batch(self, output: Any) -> tuple[torch.Tensor, None]:
        """The flat sums of one batch of queries over the catalog (nothing changes here)."""
        queries, relevant, extras = _batch_input(output)
        sums = catalog_sums(
            self._kernel, self.scorer, queries, relevant, **extras, ties=self.ties, generator=self._rng,
            chunk_size=self.chunk_size, memory=self.memory,
        )  # fmt: skip
        flat = torch.zeros(flat_size(self._fields), dtype=torch.float64)
        if sums:
            flat = torch.from_numpy(
                np.concatenate([np.ravel(sums[n]) for n in self._fields]).astype(np.float64)
            )
        return flat.to(device=self._device, dtype=self._dtype()), None

    def _engine_inputs(self, engine_output: Any) -> list[Any]:
        """The one ``update`` input of an engine output: ``output_transform`` of it, as it is."""
        return [self._output_transform(engine_output)]


explicit_signature(CatalogMetrics, {"ignore_zero_hits": CATALOG_OPTIONS})
