"""Exact ranking metrics over a whole catalog, without the ``(queries, items)`` score matrix.

A batch of queries (their embeddings, or whatever a scoring callable takes) with each query's
relevant item ids (and grades) is counted against every item of a catalog, scored chunk by chunk:
each relevant item's rank is a count of the items scoring above it (ties counted apart), and every
list metric is a function of those ranks, their grades, the list's length and the tie counts.
So a metric is exact at every ``k`` up to the catalog's size, holding one chunk of scores, never
a top-``k`` heap::

    from rankstream.catalog import CatalogMetrics
    cm = CatalogMetrics(["ndcg@10", "recall@100", "mrr"], items=item_embeddings)
    for user_emb, test_items, train_items in batches:
        cm.update(user_emb, test_items, exclude=train_items)   # lists of id arrays
    cm.compute()   # {"ndcg@10": ..., "recall@100": ..., "mrr": ...}

The numbers are those of :class:`~rankstream.ListMetrics` on the materialised matrix with the
excluded items masked (the same kernels' state sums, ``confidence=`` intervals and conventions:
``empty``, ``ties`` ``"first"`` (the lower item index first), ``"random"`` or ``"expected"``,
thresholds, list weights) and, with ``chance=True``, each metric under a random ranking of each
query's list (the catalog less its excluded items) from closed forms in its size, relevant
count, gains and ``k``.

* ``items=`` ``(num_items, dim)`` embeddings (numpy or torch, float32 or float64) with
  ``similarity="dot"`` or ``"cosine"``, or ``score=`` a callable ``score(queries, item_ids) ->
  (Q, len(item_ids))`` (``item_ids`` a 1-D int64 torch tensor; a chunk's are consecutive) with
  ``num_items=``: a PyKEEN model's ``score_t``, a cross-encoder, any model.
* ``relevant``: a list of id arrays (one per query) or a ``(Q, R)`` array padded with ``-1``;
  ``grades`` alike (default 1); ids in range, each once per query.
* ``exclude`` (per query, not ranked: the user's training items, PyKEEN's filtered setting): a list
  of id arrays, a CSR tuple ``(indptr, indices)``, a scipy sparse matrix, or ``(FilterIndex,
  triples, side)``. A relevant item that is also excluded is a ``ValueError`` naming ``exclude``.
* ``chunk_size=`` items per chunk, or ``memory=`` bytes for one chunk and its temporaries
  (:data:`~rankstream.core.backends.catalog.budget.MEMORY_BUDGET` by default).

Distributed. Queries split over processes: each process updates its own
:class:`CatalogMetrics` and the states' sums add
(``rankstream.distributed.all_reduce_state(cm.state)``, or :meth:`CatalogMetrics.merge`). The
catalog split over processes: ``CatalogMetrics(..., items=my_shard, shard=(start, stop),
num_items=N, reduce=sum_over_processes())`` on each, every process updating with the same
batch; the relevant items' scores and bands come from the process holding each item, and the
counts are summed before the metric (:mod:`rankstream.core.backends.catalog.shards`). In one process,
:func:`prepare` a batch, count each shard (``batch.count(start, stop)``),
:meth:`~rankstream.core.backends.catalog.counting.CatalogCounts.merge` the shards' counts, then
``batch.ranks(counts)``: counts add over shards. The rank family (PyKEEN's
optimistic, realistic and pessimistic ranks) comes from :func:`rank_types`; the recommendations
themselves (each query's best ``k`` ids, ties by the lower id) from :func:`top_k_ids`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.core import sizes
from rankstream.core.backends.catalog import (
    CallableScorer,
    CatalogBatch,
    CatalogCounts,
    EmbeddingScorer,
    ShardScorer,
)
from rankstream.core.backends.catalog import prepare as _prepare
from rankstream.core.backends.catalog.budget import MEMORY_BUDGET
from rankstream.core.backends.catalog.budget import chunk_size as budget_chunk
from rankstream.core.backends.catalog.recommend import top_items
from rankstream.core.backends.catalog.relevant_inputs import excluded_pairs
from rankstream.core.lists.collection import ListMetrics
from rankstream.core.relevant import RelevantRanks
from rankstream.core.relevant.values import check_kernel, collection_sums
from rankstream.core.state import State

__all__ = [
    "MEMORY_BUDGET",
    "CatalogBatch",
    "CatalogCounts",
    "CatalogMetrics",
    "catalog_metrics",
    "catalog_sums",
    "make_scorer",
    "prepare",
    "rank_types",
    "relevant_ranks",
    "top_k_ids",
]


def make_scorer(
    items: Any = None, score: Callable[[Any, Any], Any] | None = None, num_items: int | None = None,
    similarity: str = "dot", shard: tuple[int, int] | None = None,
    reduce: Callable[[np.ndarray], np.ndarray] | None = None,
) -> EmbeddingScorer | CallableScorer | ShardScorer:  # fmt: skip
    """The scorer of a catalog: ``items`` embeddings (with ``similarity``), or ``score`` with
    ``num_items``; exactly one of the two. With ``shard=(start, stop)`` this process holds the
    items ``[start, stop)`` of a catalog of ``num_items`` (``items`` then holds their embeddings
    only; ``score`` is called with their global ids) and ``reduce`` sums arrays over processes."""
    if (items is None) == (score is None):
        raise ValueError("give the catalog as items= (embeddings) or as score= with num_items=, exactly one")
    if shard is None:
        if reduce is not None:
            raise ValueError("reduce= is for a catalog split over processes: give shard=(start, stop) too")
        if items is not None:
            return EmbeddingScorer(items, similarity)
        return CallableScorer(score, num_items)  # type: ignore[arg-type]
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise ValueError(f"shard must be (start, stop), the items this process holds, got {shard!r}")
    if num_items is None or reduce is None:
        raise ValueError(
            "a catalog split over processes (shard=) needs num_items= (the whole catalog's size) and "
            "reduce= (a SUM over processes, e.g. rankstream.distributed.sum_over_processes())"
        )
    inner = EmbeddingScorer(items, similarity) if items is not None else CallableScorer(score, num_items)  # type: ignore[arg-type]
    return ShardScorer(inner, shard[0], shard[1], num_items, reduce)


def prepare(
    queries: Any, relevant: Any, *, items: Any = None, score: Any = None, num_items: int | None = None,
    similarity: str = "dot", grades: Any = None, exclude: Any = None, shard: tuple[int, int] | None = None,
    reduce: Callable[[np.ndarray], np.ndarray] | None = None,
) -> CatalogBatch:  # fmt: skip
    """One batch checked (nothing counted yet): ``batch.count(start, stop)`` counts a shard,
    ``batch.ranks(counts)`` gives the relevant ranks once the counts cover the catalog; with
    ``shard``/``reduce`` (a collective), ``batch.count_all()`` gives the summed counts."""
    scorer = make_scorer(items, score, num_items, similarity, shard, reduce)
    return _prepare(scorer, queries, relevant, grades, exclude)


def relevant_ranks(
    queries: Any, relevant: Any, *, items: Any = None, score: Any = None, num_items: int | None = None,
    similarity: str = "dot", grades: Any = None, exclude: Any = None, ties: str = "first",
    chunk_size: int | None = None, memory: int | None = None, generator: Any = None,
    shard: tuple[int, int] | None = None, reduce: Callable[[np.ndarray], np.ndarray] | None = None,
) -> RelevantRanks:  # fmt: skip
    """The relevant ranks of one batch over the whole catalog (see the module docstring)."""
    batch = prepare(
        queries, relevant, items=items, score=score, num_items=num_items, similarity=similarity,
        grades=grades, exclude=exclude, shard=shard, reduce=reduce,
    )  # fmt: skip
    return batch.ranks(batch.count_all(chunk_size, memory), ties=ties, generator=generator)


def top_k_ids(
    queries: Any, k: int, *, items: Any = None, score: Any = None, num_items: int | None = None,
    similarity: str = "dot", exclude: Any = None, chunk_size: int | None = None, memory: int | None = None,
    shard: tuple[int, int] | None = None, reduce: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(scores, ids)`` ``(Q, k)``: each query's best ``k`` items over the catalog, best first,
    ties by the lower item id, its excluded items left out (id ``-1`` and score ``-inf`` past the
    end of a list shorter than ``k``): a streamed merge over the chunks, one chunk of scores held.
    Scores are float64 copies of the chunk's. With ``shard=(start, stop)``, ``num_items`` and
    ``reduce`` (a SUM over processes, as :class:`CatalogMetrics` takes them) each process takes
    its shard's best ``k`` and the processes' are merged in the same order through SUM reductions
    (docs/catalog.md): every process calls it with the same queries and gets the same answer;
    the nonempty shards must tile the catalog."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    scorer = make_scorer(items, score, num_items, similarity, shard, reduce)
    if isinstance(scorer, EmbeddingScorer) or getattr(scorer, "embedded", False):
        queries = scorer.queries(queries)
        q = int(queries.shape[0])
    else:
        q = len(queries)
    ex_query, ex_item = excluded_pairs(exclude, q, scorer.num_items)
    if not isinstance(scorer, ShardScorer):
        return top_items(
            scorer, queries, k, q, budget_chunk(q, scorer.num_items, memory, chunk_size), ex_query, ex_item
        )
    failure, best = None, None
    try:  # this shard's best k, its items seen as a catalog of their own (ids from 0)
        view = _ShardView(scorer)
        lo, hi = np.searchsorted(ex_item, [scorer.start, scorer.stop])
        size = budget_chunk(q, max(view.num_items, 1), memory, chunk_size)
        shard_ex = (ex_query[lo:hi], ex_item[lo:hi] - scorer.start)
        values, ids = top_items(view, queries, k, q, size, *shard_ex)
        best = values, np.where(ids >= 0, ids + scorer.start, -1)
    except Exception as exc:  # raised on every process after the next reduction
        failure = exc
    return _merged_over_shards(scorer, best, failure, q, k)


class _ShardView:
    """A process's shard ``[start, stop)`` as a catalog of its own (ids ``0 .. stop - start``)."""

    def __init__(self, scorer: ShardScorer) -> None:
        self.scorer, self.num_items, self.dtype = scorer, scorer.stop - scorer.start, scorer.dtype

    def chunk(self, queries: Any, start: int, stop: int, rows: int) -> Any:
        return self.scorer.chunk(queries, start + self.scorer.start, stop + self.scorer.start, rows)


def _shard_slot(scorer: ShardScorer, failure: BaseException | None) -> tuple[int, int]:
    """``(slot, count)``: the place of this process's shard among the nonempty shards ordered by
    their starts, and their number, from SUMs alone: a histogram of the starts over the catalog in
    ``SIZES.shard_slot_buckets`` buckets, then again inside each bucket holding two or more starts, until
    none does (nonempty shards do not overlap, so their starts differ). The first reduction
    carries ``failure``: where any process failed, every one raises."""
    mine, buckets = scorer.start if scorer.stop > scorer.start else None, sizes.SIZES.shard_slot_buckets
    ranges, slot, count = [(0, scorer.num_items, 0)], -1, None  # (lo, hi, starts before lo)
    while ranges:
        edges = [lo + (np.arange(min(hi - lo, buckets) + 1) * (hi - lo)) // min(hi - lo, buckets)
                 for lo, hi, _ in ranges]  # fmt: skip
        hist = [np.zeros(len(e) - 1) for e in edges]
        for h, e, (lo, hi, _) in zip(hist, edges, ranges, strict=True):
            if mine is not None and lo <= mine < hi:
                h[np.searchsorted(e, mine, side="right") - 1] = 1.0
        counts = scorer.summed(hist, failure)
        failure, count = None, count if count is not None else int(sum(c.sum() for c in counts))
        refine = []
        for c, e, (_, _, before) in zip(counts, edges, ranges, strict=True):
            starts = before + np.concatenate([[0.0], np.cumsum(c)[:-1]])
            for b in np.nonzero(c)[0]:
                if c[b] > 1 and e[b + 1] - e[b] == 1:
                    raise ValueError(f"shards overlap: {int(c[b])} nonempty shards start at item {int(e[b])}")
                if c[b] > 1:
                    refine.append((int(e[b]), int(e[b + 1]), int(starts[b])))
                elif mine is not None and e[b] <= mine < e[b + 1]:
                    slot = int(starts[b])
        ranges = refine
    return slot, count


def _merged_over_shards(
    scorer: ShardScorer,
    best: tuple[np.ndarray, np.ndarray] | None,
    failure: BaseException | None,
    q: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Every process's best ``k`` per query (``best``: this one's, global ids) summed into its
    slot of a ``(shards, Q, k)`` array (one reduction, with each shard's ``(start, stop)``: the
    nonempty shards must tile the catalog, else a ``ValueError`` on every process), then merged
    by (an item before none, score descending, id ascending) and cut at ``k``."""
    slot, count = _shard_slot(scorer, failure)
    values, ids, bounds = np.zeros((count, q, k)), np.zeros((count, q, k)), np.zeros((count, 2))
    if slot >= 0 and best is not None:
        values[slot], ids[slot], bounds[slot] = best[0], best[1], (scorer.start, scorer.stop)
    values, ids, bounds = scorer.summed([values, ids, bounds], None)
    edges = np.concatenate([[0.0], bounds.reshape(-1), [float(scorer.num_items)]])
    if np.any(edges[:-1:2] != edges[1::2]):  # each shard starts where the one before stops
        shards = [tuple(int(x) for x in b) for b in bounds]
        raise ValueError(
            f"shards must tile the catalog of {scorer.num_items} items, got the nonempty {shards}"
        )
    values, ids = values.transpose(1, 0, 2).reshape(q, -1), ids.transpose(1, 0, 2).reshape(q, -1)
    order = np.lexsort((ids, -values, ids < 0), axis=1)[:, :k]
    values, ids = np.take_along_axis(values, order, 1), np.take_along_axis(ids, order, 1)
    pad = k - ids.shape[1]  # fewer than k candidates over every shard
    values = np.concatenate([values, np.full((q, pad), -np.inf)], 1)
    ids = np.concatenate([ids, np.full((q, pad), -1.0)], 1)
    return values, ids.astype(np.int64)


def rank_types(ranks: RelevantRanks) -> dict[str, np.ndarray]:
    """PyKEEN's rank types of every relevant item (flat, query by query), with its list's
    number of candidates: ``optimistic = above + 1``, ``pessimistic = above + tied + 1``,
    ``realistic`` their mean, ``num_candidates = n``; for ``rankstream.pykeen``'s metrics
    (``HitsAtK()(r["realistic"], r["num_candidates"])``)."""
    p = ranks.present
    rows = np.nonzero(p)[0]
    optimistic = ranks.above[p] + 1.0
    pessimistic = ranks.above[p] + ranks.tied[p] + 1.0
    return {
        "optimistic": optimistic,
        "realistic": (optimistic + pessimistic) / 2.0,
        "pessimistic": pessimistic,
        "num_candidates": ranks.n[rows],
        "query": rows,
    }


def catalog_sums(
    collection: ListMetrics, scorer: Any, queries: Any, relevant: Any, *, grades: Any = None,
    exclude: Any = None, sample_weight: Any = None, ties: str = "first", generator: Any = None,
    chunk_size: int | None = None, memory: int | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The state sums (by field) that one batch adds to ``collection``'s state: checked, counted
    over the catalog of ``scorer`` (:func:`make_scorer`), ranked, reduced by each kernel. An
    empty batch gives no sums (an empty mapping)."""
    batch = _prepare(scorer, queries, relevant, grades, exclude)
    if batch.num_queries == 0:
        return {}
    weights = None
    if sample_weight is not None:
        weights = np.asarray(getattr(sample_weight, "numpy", lambda: sample_weight)(), np.float64).reshape(-1)
        if weights.shape[0] != batch.num_queries or not np.all(np.isfinite(weights) & (weights >= 0)):
            got = weights.tolist()[:8]
            raise ValueError(f"sample_weight must hold {batch.num_queries} finite weights >= 0, got {got}")
    counts = batch.count_all(chunk_size, memory)
    ranks = batch.ranks(counts, ties=ties, generator=generator)
    return collection_sums(collection, ranks, weights)


#: the options describing the catalog and its chunks, shared by :func:`catalog_metrics`,
#: :class:`CatalogMetrics` and the Ignite ``CatalogMetrics`` (written once, in
#: :func:`catalog_metrics`' signature: the others' signatures are built from it)
CATALOG_OPTIONS = ("score", "num_items", "similarity", "chunk_size", "memory")
#: the options of the metrics (:class:`~rankstream.ListMetrics`'s) a :class:`CatalogMetrics` takes
COLLECTION_OPTIONS = ("defaults", "empty", "ties", "seed", "relevance_threshold", "confidence", "chance")


def catalog_options(names: Sequence[str]) -> dict[str, inspect.Parameter]:
    """The keyword parameters ``names`` of :func:`catalog_metrics` (its written signature)."""
    params = inspect.signature(catalog_metrics).parameters
    return {name: params[name] for name in names}


def checked_options(options: Mapping[str, Any], names: Sequence[str], owner: str) -> dict[str, Any]:
    """``options`` (of :func:`catalog_metrics`' ``names``) with the defaults of the ones not
    given; a ``TypeError`` naming any unknown option of ``owner``."""
    known = catalog_options(names)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(
            f"{owner} got unexpected keyword arguments {unknown}; its catalog options are {list(known)}"
        )
    return {name: options.get(name, p.default) for name, p in known.items()}


def explicit_signature(cls: type, inserts: Mapping[str | None, Sequence[str]]) -> None:
    """Give ``cls`` (and its ``__init__``, written with ``**options``) the signature
    ``inspect`` and the reference show: its written parameters with :func:`catalog_metrics`'
    parameters ``inserts[name]`` before the parameter ``name`` (None: at the end), the
    ``**options`` left out."""
    init = cls.__init__
    written = inspect.signature(init)
    params: list[inspect.Parameter] = []
    for p in written.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            continue
        params.extend(catalog_options(inserts.get(p.name, ())).values())
        params.append(p)
    params.extend(catalog_options(inserts.get(None, ())).values())
    init.__signature__ = written.replace(parameters=params)  # type: ignore[attr-defined]
    cls.__signature__ = written.replace(parameters=params[1:])  # type: ignore[attr-defined]


def collection_of(metrics: Sequence[str], options: Mapping[str, Any]) -> ListMetrics:
    """The :class:`~rankstream.ListMetrics` of ``metrics`` with the collection's ``options``
    (:data:`COLLECTION_OPTIONS`), each member checked to have a form over relevant ranks."""
    conventions = {name: options[name] for name in COLLECTION_OPTIONS if name in options}
    defaults = conventions.pop("defaults", None)
    collection = ListMetrics(metrics, defaults, **conventions)
    for name, kernel in collection.members.items():
        check_kernel(kernel, repr(name))
    return collection


class CatalogMetrics:
    """List metrics over a whole catalog, streamed: ``update`` per batch of queries, ``compute``.

    Args:
        metrics: names as :class:`~rankstream.ListMetrics` takes them (``"ndcg@10"``, ``"mrr"``...).
        items, score, num_items, similarity: the catalog (see the module docstring).
        shard, reduce: a catalog split over processes: this one holds the items ``[start, stop)``
            (``items`` their embeddings alone; ``num_items`` the whole catalog's size) and
            ``reduce`` sums a float64 array over the processes
            (:func:`rankstream.distributed.sum_over_processes`). Every process then calls
            ``update`` with the same batch (a collective) and holds the same state.
        chunk_size, memory: items per chunk, or the bytes of one chunk (default
            :data:`~rankstream.core.backends.catalog.budget.MEMORY_BUDGET`).
        defaults, empty, ties, seed, relevance_threshold, confidence, chance: as
            :class:`~rankstream.ListMetrics` (``ties="random"`` draws with ``seed``; ``chance=True``:
            each metric's mean under a uniformly random ranking of each query's list, the catalog
            less its excluded items, and the chance-adjusted forms, from closed forms in the
            list's size, relevant count, gains and ``k``: docs/catalog.md).

    The state is the collection's sums (:attr:`state`, a :class:`~rankstream.State`): ``merge``
    adds them, so queries split over processes merge as any state does.
    """

    def __init__(
        self, metrics: Sequence[str], items: Any = None, *, shard: tuple[int, int] | None = None,
        reduce: Callable[[np.ndarray], np.ndarray] | None = None, **options: Any,
    ) -> None:  # fmt: skip
        # the options are catalog_metrics' (one written list): the signature shown is built from it
        given = checked_options(options, CATALOG_OPTIONS + COLLECTION_OPTIONS, "CatalogMetrics")
        self.collection = collection_of(metrics, given)
        self.scorer = make_scorer(
            items, given["score"], given["num_items"], given["similarity"], shard, reduce
        )  # fmt: skip
        self.chunk_size, self.memory, self.ties = given["chunk_size"], given["memory"], given["ties"]
        self._rng = np.random.default_rng(given["seed"])
        self.state = State(self.collection)

    def update(
        self, queries: Any, relevant: Any, *, grades: Any = None, exclude: Any = None,
        sample_weight: Any = None,
    ) -> CatalogMetrics:  # fmt: skip
        """Add one batch of queries; on error nothing is added. An empty batch is a no-op."""
        sums = catalog_sums(
            self.collection, self.scorer, queries, relevant, grades=grades, exclude=exclude,
            sample_weight=sample_weight, ties=self.ties, generator=self._rng, chunk_size=self.chunk_size,
            memory=self.memory,
        )  # fmt: skip
        for name, value in sums.items():
            self.state.sums[name] += value
        return self

    def compute(self) -> dict[str, Any]:
        """Every metric's value (and quantities), keyed as the collection reports them."""
        return self.state.compute()

    def reset(self) -> None:
        self.state.reset()

    def merge(self, other: CatalogMetrics) -> CatalogMetrics:
        """A new instance holding the sums of both (same metrics and settings)."""
        if not isinstance(other, CatalogMetrics):
            raise TypeError(
                f"can only merge a CatalogMetrics with a CatalogMetrics, got {type(other).__name__}"
            )
        out = CatalogMetrics.__new__(CatalogMetrics)
        out.__dict__.update(self.__dict__)
        out.state = self.state.merge(other.state)
        out._rng = np.random.default_rng(self._rng.integers(2**63))
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state.load_state_dict(state)


def catalog_metrics(
    metrics: Sequence[str],
    queries: Any,
    relevant: Any,
    items: Any = None,
    *,
    grades: Any = None,
    exclude: Any = None,
    sample_weight: Any = None,
    score: Callable[[Any, Any], Any] | None = None,
    num_items: int | None = None,
    similarity: str = "dot",
    chunk_size: int | None = None,
    memory: int | None = None,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
    empty: str = "skip",
    ties: str = "first",
    seed: int | None = None,
    relevance_threshold: float | str | None = "each",
    confidence: float | None = None,
    chance: bool = False,
) -> dict[str, Any]:
    """One batch's metrics over the catalog: a :class:`CatalogMetrics` of these arguments updated
    once with ``(queries, relevant, grades, exclude, sample_weight)`` (see its ``update``)."""
    metric = CatalogMetrics(
        metrics, items, score=score, num_items=num_items, similarity=similarity, chunk_size=chunk_size,
        memory=memory, defaults=defaults, empty=empty, ties=ties, seed=seed,
        relevance_threshold=relevance_threshold, confidence=confidence, chance=chance,
    )  # fmt: skip
    metric.update(queries, relevant, grades=grades, exclude=exclude, sample_weight=sample_weight)
    return metric.compute()


explicit_signature(CatalogMetrics, {"shard": CATALOG_OPTIONS, None: COLLECTION_OPTIONS})
