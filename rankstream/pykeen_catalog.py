r"""PyKEEN's rank-based evaluation of a knowledge-graph model, streamed over slices of entities.

PyKEEN's ``RankBasedEvaluator`` scores every evaluation triple against every entity, one
``(batch, num_entities)`` matrix per batch and side. Here each batch of ``(h, r)`` (or
``(r, t)``) queries is scored against one slice of entities at a time, through the model's own
``predict`` (``score_t(hr_batch, tails=slice)`` / ``score_h(rt_batch, heads=slice)``, with
PyKEEN's handling of inverse relations and ``predict_with_sigmoid``), the true entity's rank is
a count summed over the slices (:mod:`rankstream.catalog`), and the report is PyKEEN's::

    from rankstream.pykeen_catalog import evaluate_model
    result = evaluate_model(model, dataset.testing.mapped_triples,
                            additional_filter_triples=[dataset.training.mapped_triples,
                                                       dataset.validation.mapped_triples],
                            slice_size=1024)
    result.get_metric("hits@10"); result.to_flat_dict()["tail.pessimistic.arithmetic_mean_rank"]

Conventions (PyKEEN 1.11's). A test triple ``(h, r, t)`` asks two ranking tasks: ``tail``
(``(h, r, ?)``, answer ``t``) and ``head`` (``(?, r, t)``, answer ``h``). With ``s`` the true
triple's score and ``C`` its candidates (the true entity included)::

    optimistic  = 1 + #{c in C: s_c > s}        pessimistic = #{c in C: s_c >= s}
    realistic   = (optimistic + pessimistic) / 2     (the expected rank under random tie-breaking)
    N           = |C|                                (the number of candidates)

*Filtered* (``filtered=True``): ``C`` is every entity but the other known answers of the same
query, the known triples being ``mapped_triples`` and ``additional_filter_triples`` (PyKEEN's
``prepare_filter_triples``); the true entity itself is always ranked. Unfiltered: ``C`` is every
entity. The side ``both`` pools the tasks of the two sides. Every metric of the report (Hits@k,
MRR, GMR, mean rank, their adjusted indices and z-scores, median rank, variance...) comes from
the rank family of :class:`~rankstream.core.ranks.kernel.RankKernel`, checked against PyKEEN's
own ``RankBasedEvaluator`` (``tests/test_pykeen_catalog.py``; docs/pykeen_catalog.md).

Differences: PyKEEN counts the candidates with ``isfinite`` on the scores, so a model giving
``-inf`` to some entity has fewer candidates there; here every entity not filtered out is a
candidate (a ``-inf`` score ranks last), and a NaN score is a ``ValueError``.

Memory: one slice of scores per batch (``batch_size`` x ``slice_size``), never ``(batch,
num_entities)``; besides the slices, one call per batch and side scores the batch's distinct
answers (at most ``min(batch_size, num_entities)`` entities), which fixes each answer's score band
before the slices are counted (:mod:`rankstream.catalog`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.catalog import MEMORY_BUDGET, rank_types, relevant_ranks
from rankstream.core import sizes
from rankstream.core.backends.catalog.budget import chunk_size as budget_chunk
from rankstream.core.ranks.families import RANK_TYPES
from rankstream.core.ranks.kernel import KERNEL_METRICS, RankKernel
from rankstream.core.ranks.sides import BOTH
from rankstream.core.state import State
from rankstream.filtering import FilterIndex, macro_weights
from rankstream.filtering import _as_triples as as_triples
from rankstream.pykeen import DerivedRankBasedMetric, HitsAtK, resolve

__all__ = [
    "TARGETS",
    "CatalogRankEvaluator",
    "RankBasedResults",
    "default_slice_size",
    "evaluate_model",
    "model_scorer",
]

#: the prediction targets (PyKEEN's ``LABEL_HEAD``, ``LABEL_TAIL``) and the column each predicts
TARGETS = ("head", "tail")
_COLUMN = {"head": 0, "tail": 2}
#: PyKEEN's rank-type synonyms (``pykeen.typing.RANK_TYPE_SYNONYMS``)
_TYPE_SYNONYMS = {"best": "optimistic", "worst": "pessimistic", "avg": "realistic", "average": "realistic"}
#: PyKEEN's key pattern ``side?.type?.name.k?`` (``pykeen.evaluation.rank_based_evaluator``)
_KEY = re.compile(
    r"^((?P<side>head|tail|both)\.)?((?P<type>optimistic|realistic|pessimistic|best|worst|avg|average)\.)?"
    r"(?P<name>[\w@]+)(\.(?P<k>\d+))?$"
)
_HITS = re.compile(r"^(h@|hits@|hits_at_)(?P<k>\d+)$")
#: PyKEEN's flat dict names AdjustedHitsAtK and ZHitsAtK without their k: the value of the last k
_COLLAPSED = ("adjusted_hits_at", "z_hits_at")


def model_scorer(model: Any, target: str, mode: Any = None) -> Callable[[Any, Any], Any]:
    """``score(triples, entity_ids) -> (B, len(entity_ids))``: the model's scores of each
    triple's ``target`` replaced by each entity, through ``model.predict(triples, target,
    ids=entity_ids)`` (PyKEEN's ``score_t(tails=...)`` / ``score_h(heads=...)``, inverse
    relations and ``predict_with_sigmoid`` included), without gradients, on the model's device."""
    import torch

    target = _check_target(target)

    def score(triples: Any, ids: Any) -> Any:
        device = getattr(model, "device", None)
        with torch.no_grad():
            return model.predict(triples, target=target, ids=ids.to(device), mode=mode)

    return score


def default_slice_size(model: Any, batch_size: int, memory: int | None = None) -> int:
    """Entities per slice when none is given: the catalog's chunk for ``batch_size`` queries
    (:func:`~rankstream.core.backends.catalog.budget.chunk_size`: ``memory`` bytes, default
    :data:`~rankstream.catalog.MEMORY_BUDGET`), and at most ``memory / (batch_size x width x
    interaction_bytes)`` (:data:`~rankstream.core.sizes.SIZES`: 8), ``width`` the size of one
    entity's representations (``dim`` for embeddings; 1 where the model has none to read):
    PyKEEN's interactions hold a ``(batch, slice, dim)`` block where the scores are ``(batch,
    slice)``. A heuristic: give ``slice_size`` where the model's scoring needs more."""
    entities, _ = _model_sizes(model)
    width = 0
    for rep in getattr(model, "entity_representations", ()) or ():
        width += int(np.prod(getattr(rep, "shape", (1,)) or (1,)))
    budget = MEMORY_BUDGET if memory is None else memory
    catalog = budget_chunk(batch_size, entities, memory, None)
    per_entity = max(batch_size, 1) * max(width, 1) * sizes.SIZES.interaction_bytes
    return max(1, min(catalog, budget // per_entity))


def _check_target(target: Any) -> str:
    if target not in TARGETS:
        raise ValueError(
            f"target must be one of {TARGETS} (relation prediction is not ranked here), got {target!r}"
        )
    return target


def _model_sizes(model: Any) -> tuple[int, int]:
    """``(num_entities, num_relations)`` of a PyKEEN model (the relations without inverses)."""
    try:
        entities = int(model.num_entities)
        relations = int(getattr(model, "num_real_relations", model.num_relations))
    except (AttributeError, TypeError):
        raise TypeError(
            f"model must be a PyKEEN model (num_entities, num_relations, predict), got {type(model).__name__}"
        ) from None
    return entities, relations


def _check_ids(triples: np.ndarray, name: str, entities: int, relations: int) -> None:
    """Raise naming ``name`` where an entity or relation id is out of the model's range."""
    for col, what, limit in ((0, "head", entities), (1, "relation", relations), (2, "tail", entities)):
        bad = np.flatnonzero(triples[:, col] >= limit)
        if bad.size:
            i = int(bad[0])
            unit = "num_relations" if col == 1 else "num_entities"
            raise ValueError(
                f"{name} holds {what} id {int(triples[i, col])} (row {i}: {triples[i].tolist()}), out of "
                f"range for the model's {unit}={limit}"
            )


def _check_weights(sample_weight: Any, rows: int) -> np.ndarray | None:
    if sample_weight is None:
        return None
    w = sample_weight.detach().cpu().numpy() if hasattr(sample_weight, "detach") else sample_weight
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    if w.shape[0] != rows or not np.all(np.isfinite(w) & (w >= 0)):
        raise ValueError(
            f"sample_weight must hold {rows} finite weights >= 0 (one per triple), got {w[:8].tolist()}"
        )
    return w


def _host_triples(x: Any, name: str, entities: int, relations: int) -> np.ndarray:
    arr = as_triples(x, name)
    arr = arr.detach().cpu().numpy() if hasattr(arr, "detach") else np.asarray(arr)
    _check_ids(arr, name, entities, relations)
    return arr


class RankBasedResults:
    """PyKEEN's ``RankBasedMetricResults``, read the same way: ``data`` maps ``(side, rank_type,
    metric)`` to a float; :meth:`to_flat_dict` keys ``"side.rank_type.metric"``;
    :meth:`get_metric` parses PyKEEN's names (``"hits@10"``, ``"head.mean_rank"``,
    ``"optimistic.mrr"``; side ``both`` and type ``realistic`` by default).

    Besides PyKEEN's keys the report holds rankstream's: ``expected_*`` and ``variance_*`` of each
    family, ``adjusted_hits_at_<k>`` and ``z_hits_at_<k>`` for every ``k`` (PyKEEN keeps only
    the last ``k``, as ``adjusted_hits_at_k`` / ``z_hits_at_k``: here too), the error bounds of
    the median and of the GMR expectation, and, with ``confidence``, standard errors and
    intervals."""

    def __init__(self, flat: Mapping[str, float]) -> None:
        self.data: dict[tuple[str, str, str], float] = {}
        for key, value in flat.items():
            side, rank_type, metric = key.split(".", 2)
            self.data[side, rank_type, metric] = float(value)

    def to_flat_dict(self) -> dict[str, float]:
        return {".".join(key): value for key, value in self.data.items()}

    def to_dict(self) -> dict[str, dict[str, dict[str, float]]]:
        """Nested ``{side: {rank_type: {metric: value}}}``."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (side, rank_type, metric), value in self.data.items():
            out.setdefault(side, {}).setdefault(rank_type, {})[metric] = value
        return out

    def key_from_string(self, name: str) -> tuple[str, str, str]:
        """``(side, rank_type, metric key)`` of a PyKEEN name (its ``key_from_string``)."""
        match = _KEY.match(name) if isinstance(name, str) else None
        if match is None:
            raise ValueError(f"name must be a metric name like 'both.realistic.hits@10', got {name!r}")
        side = match.group("side") or BOTH
        rank_type = match.group("type") or "realistic"
        rank_type = _TYPE_SYNONYMS.get(rank_type, rank_type)
        metric, k = match.group("name").lower(), match.group("k")
        hits = _HITS.match(metric)
        if hits:
            metric, k = f"hits_at_{hits.group('k')}", None
        if k is not None or (side, rank_type, metric) not in self.data:
            metric = self._resolve(metric, k, name)
        if (side, rank_type, metric) not in self.data:
            raise KeyError(f"no {side}.{rank_type}.{metric} in the report (name {name!r})")
        return side, rank_type, metric

    def _resolve(self, metric: str, k: str | None, name: str) -> str:
        """The report key of a metric named as :func:`rankstream.pykeen.resolve` knows it."""
        try:
            obj = resolve(metric, **({"k": int(k)} if k else {}))
        except (ValueError, KeyError, TypeError):
            raise KeyError(f"unknown metric {metric!r} (name {name!r})") from None
        if isinstance(obj, HitsAtK):
            return f"hits_at_{obj.k}"
        if isinstance(obj, DerivedRankBasedMetric) and isinstance(obj.base, HitsAtK):
            # a k in the name (``ah@5``, ``adjusted_hits_at_k.5``) picks it; else PyKEEN's k-less key
            explicit = k is not None or re.search(r"\d$", metric) is not None
            return f"{obj.key[: -len('_k')]}_{obj.k}" if explicit else obj.key
        return obj.key

    def get_metric(self, name: str) -> float:
        """The value of a metric named as PyKEEN names it (see :meth:`key_from_string`)."""
        return self.data[self.key_from_string(name)]

    def __repr__(self) -> str:
        return f"RankBasedResults({len(self.data)} values, e.g. both.realistic.hits_at_10=" + (
            f"{self.data.get(('both', 'realistic', 'hits_at_10'), float('nan')):.4g})"
        )


class CatalogRankEvaluator:
    """PyKEEN's rank-based report, streamed: :meth:`update` per batch of triples and target
    (each scored against slices of entities), :meth:`compute` gives :class:`RankBasedResults`.
    No Ignite; the state is a :class:`~rankstream.State` of a
    :class:`~rankstream.core.ranks.kernel.RankKernel` (sums that add: :meth:`merge`).

    Args:
        ks: the cut-offs of Hits@k (PyKEEN's default ``(1, 3, 5, 10)``); ``adjusted_hits_at_k``
            and ``z_hits_at_k`` hold the last one, as PyKEEN's flat dict.
        targets: the sides reported (``("head", "tail")``), with ``both`` their pool.
        metrics: what the kernel keeps (:data:`~rankstream.core.ranks.kernel.KERNEL_METRICS`).
        confidence: a level for standard errors and intervals, or None.
        slice_size: entities per slice; by default :func:`default_slice_size` of ``memory``
            bytes (:data:`~rankstream.catalog.MEMORY_BUDGET` when None).
        shard, reduce: the entities split over processes: this process scores the entities
            ``shard=(start, stop)`` only, and ``reduce`` (a SUM over processes, e.g.
            :func:`rankstream.distributed.sum_over_processes`) sums the counts, so every process
            gets the whole report. Every process then calls :meth:`update` with the same
            triples; the nonempty shards must tile ``[0, num_entities)``.
    """

    def __init__(
        self,
        ks: int | Sequence[int] = (1, 3, 5, 10),
        *,
        targets: Sequence[str] = TARGETS,
        metrics: Sequence[str] = KERNEL_METRICS,
        confidence: float | None = None,
        slice_size: int | None = None,
        memory: int | None = None,
        shard: tuple[int, int] | None = None,
        reduce: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if (shard is None) != (reduce is None):
            raise ValueError(
                "entities split over processes need both shard=(start, stop) and reduce= (a SUM over "
                f"processes, e.g. rankstream.distributed.sum_over_processes()), got shard={shard!r} "
                f"and reduce={reduce!r}"
            )
        self.shard, self.reduce = shard, reduce
        if isinstance(targets, str) or not targets or len(set(targets)) != len(targets):
            raise ValueError(f"targets must be a non-empty sequence of distinct {TARGETS}, got {targets!r}")
        self.targets = tuple(_check_target(t) for t in targets)
        self.ks = tuple(ks) if isinstance(ks, Sequence) else (ks,)
        self.kernel = RankKernel(
            self.ks, RANK_TYPES, metrics=metrics, sides=self.targets, confidence=confidence
        )
        if slice_size is not None and (
            isinstance(slice_size, bool) or not isinstance(slice_size, int) or slice_size < 1
        ):
            raise ValueError(
                f"slice_size must be a positive integer (entities per slice) or None, got {slice_size!r}"
            )
        self.slice_size, self.memory = slice_size, memory
        self.state = State(self.kernel)

    def update(
        self, model: Any, triples: Any, target: str, *, exclude: Any = None, sample_weight: Any = None,
        mode: Any = None,
    ) -> CatalogRankEvaluator:  # fmt: skip
        """Rank each triple's ``target`` entity among all entities (but ``exclude``: per triple,
        as :mod:`rankstream.catalog` takes it, e.g. ``(FilterIndex, triples, target)``), scored
        slice by slice; ``sample_weight``: one finite weight >= 0 per triple (PyKEEN's macro
        weights: :func:`rankstream.filtering.macro_weights`). On error nothing is added; an empty
        batch is a no-op."""
        target = _check_target(target)
        if target not in self.targets:
            raise ValueError(f"target {target!r} is not among this evaluator's targets {self.targets}")
        entities, relations = _model_sizes(model)
        host = _host_triples(triples, "triples", entities, relations)
        weights = _check_weights(sample_weight, host.shape[0])
        if host.shape[0] == 0:
            return self
        import torch

        queries = torch.as_tensor(host, dtype=torch.int64, device=getattr(model, "device", None))
        score = model_scorer(model, target, mode)
        size = self.slice_size or default_slice_size(model, host.shape[0], self.memory)
        ranks = relevant_ranks(
            queries, host[:, _COLUMN[target], None], score=score, num_items=entities, exclude=exclude,
            chunk_size=size, shard=self.shard, reduce=self.reduce,
        )  # fmt: skip
        r = rank_types(ranks)
        w = None if weights is None else weights[r["query"]]
        sums = self.kernel.rank_sums(r["optimistic"], r["pessimistic"], r["num_candidates"], w, side=target)
        for name, value in sums.items():
            self.state.sums[name] += value
        return self

    def compute(self) -> RankBasedResults:
        """The report (raises when no triple was ranked)."""
        flat = dict(self.state.compute())
        last = self.ks[-1]
        for key in list(flat):
            side, rank_type, metric = key.split(".", 2)
            for stem in _COLLAPSED:
                if metric == f"{stem}_{last}":
                    flat[f"{side}.{rank_type}.{stem}_k"] = flat[key]
        return RankBasedResults(flat)

    def reset(self) -> None:
        self.state.reset()

    def merge(self, other: CatalogRankEvaluator) -> CatalogRankEvaluator:
        """A new evaluator holding the sums of both (the same settings)."""
        if not isinstance(other, CatalogRankEvaluator):
            raise TypeError(f"can only merge a CatalogRankEvaluator, got {type(other).__name__}")
        out = CatalogRankEvaluator.__new__(CatalogRankEvaluator)
        out.__dict__.update(self.__dict__)
        out.state = self.state.merge(other.state)
        return out


def evaluate_model(
    model: Any,
    mapped_triples: Any,
    *,
    additional_filter_triples: Any = None,
    filtered: bool = True,
    targets: Sequence[str] = TARGETS,
    ks: int | Sequence[int] = (1, 3, 5, 10),
    slice_size: int | None = None,
    memory: int | None = None,
    batch_size: int = 256,
    metrics: Sequence[str] = KERNEL_METRICS,
    confidence: float | None = None,
    macro: bool = False,
    mode: Any = None,
    shard: tuple[int, int] | None = None,
    reduce: Callable[[np.ndarray], np.ndarray] | None = None,
) -> RankBasedResults:
    """PyKEEN's ``RankBasedEvaluator(filtered=filtered).evaluate(model, mapped_triples,
    additional_filter_triples=..., targets=...)``, each batch of ``batch_size`` triples scored
    against slices of ``slice_size`` entities (see the module docstring for the conventions).
    ``ks``: the cut-offs of the Hits@k family (PyKEEN's evaluator: 1, 3, 5, 10 by default).

    ``additional_filter_triples``: an ``(n, 3)`` array or tensor or a list of them (the training
    and validation triples), known besides ``mapped_triples`` in the filtered setting. ``macro``:
    PyKEEN's ``MacroRankBasedEvaluator`` instead, each triple weighted by 1 / the number of
    ``mapped_triples`` sharing its query (:func:`rankstream.filtering.macro_weights`).
    ``shard``, ``reduce``: the entities split over processes (:class:`CatalogRankEvaluator`); every
    process calls this with the same triples and gets the whole report."""
    for name, flag in (("filtered", filtered), ("macro", macro)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    entities, relations = _model_sizes(model)
    evaluator = CatalogRankEvaluator(
        ks, targets=targets, metrics=metrics, confidence=confidence, slice_size=slice_size, memory=memory,
        shard=shard, reduce=reduce,
    )  # fmt: skip
    test = _host_triples(mapped_triples, "mapped_triples", entities, relations)
    index = None
    if filtered:
        extra = additional_filter_triples
        parts = [] if extra is None else [extra]
        if isinstance(extra, (list, tuple)) and all(getattr(p, "ndim", None) == 2 for p in extra):
            parts = list(extra)
        known = [test] + [
            _host_triples(p, f"additional_filter_triples[{i}]", entities, relations)
            for i, p in enumerate(parts)
        ]
        index = FilterIndex(known, num_entities=entities, num_relations=relations)
    weights = {t: macro_weights(test, t) if macro else None for t in evaluator.targets}
    for start in range(0, test.shape[0], batch_size):
        batch = test[start : start + batch_size]
        for target in evaluator.targets:
            exclude = None if index is None else (index, batch, target)
            w = None if weights[target] is None else weights[target][start : start + batch_size]
            evaluator.update(model, batch, target, exclude=exclude, sample_weight=w, mode=mode)
    return evaluator.compute()
