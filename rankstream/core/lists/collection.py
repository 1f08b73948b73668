"""Many list metrics in one pass: ``ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10"])``.

One batch is validated once and ranked once, at the largest cut-off of all the metrics; every
metric then reads its own values from that one selection (each ``k`` is a column of cumulative
sums) and keeps its own sums, under its own field names (``"ndcg_10__value_sum"``, ...). The
result is a dict keyed by the names as given. So the collection equals its metrics computed
one by one (tested), at little more than the cost of the most expensive one. As for each
metric, a list whose items are all masked is not a list: no metric counts it, whatever the
``empty`` policy.

A metric whose kernel reports quantities besides its value (``kernel.quantities``, a standard
error) puts each in the result under ``"{name}_{quantity}"`` beside ``name``; ``confidence=0.95``
gives every metric built from a name its standard error, interval and count
(``"ndcg@10_stderr"``, ``"ndcg@10_ci_low"``, ``"ndcg@10_ci_high"``, ``"ndcg@10_count"``).

Names are the rows of :mod:`~rankstream.core.lists.table`, written as ranx and ir_measures write
them, case-insensitive, each with ``@k`` or (the whole list) without:"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Context, Ops, Runtime, get_ops
from rankstream.core.beyond.items import ItemData
from rankstream.core.beyond.list_kernels import beyond_kernel, is_beyond_name
from rankstream.core.execution import exported, read_batch, select_sums
from rankstream.core.lists.base import WHOLE_LIST, ListKernel, quiet
from rankstream.core.lists.table import BY_NAME, names_doc, row_of
from rankstream.core.state import kernel_config
from rankstream.core.uncertainty import check_level

__doc__ += names_doc() + ".\n"
_BATCH_CONVENTIONS = ("ties", "seed", "weighting", "negative_labels")
#: the conventions ListMetrics applies to every metric it builds from a name (in its
#: signature's order; :class:`~rankstream.core.lists.paired.PairedComparison` passes them on)
COLLECTION_CONVENTIONS = ("empty", "ties", "seed", "weighting", "negative_labels", "relevance_threshold")


def parse_name(name: str) -> tuple[str, int | None]:
    """``"nDCG@10"`` -> ``("ndcg", 10)``; ``"map"`` -> ``("map", None)``."""
    m = (
        re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:@\s*([^\s@]*))?\s*", name)
        if isinstance(name, str)
        else None
    )
    row = BY_NAME.get(m.group(1).lower()) if m else None
    if row is None:
        raise ValueError(
            f"unknown list metric {name!r}: write one of {sorted(BY_NAME)} with @k (k >= 1) or without"
        )
    k = m.group(2)
    if k is not None and not row.takes_k:
        raise ValueError(
            f"list metric {name!r} has no cut-off (it reads each list whole): write {m.group(1)}, got @{k}"
        )
    if k is not None and not (k.isascii() and k.isdigit() and int(k) >= 1):
        raise ValueError(
            f"list metric {name!r}: k must be a positive integer (write {m.group(1)}@k with k >= 1, "
            f"or {m.group(1)} for the whole list), got {k!r}"
        )
    return row.name, None if k is None else int(k)


def make_kernel(name: str, defaults: Mapping[str, Any] | None = None, **conventions: Any) -> ListKernel:
    """The kernel of one named metric: ``defaults[base]`` (an adapter's peer defaults for that
    metric) and then ``conventions`` as keyword arguments."""
    base, k = parse_name(name)
    row = row_of(base)
    kw = {**(defaults or {}).get(base, {}), **conventions}
    if not row.takes_k:
        return row.kernel(**kw)
    return row.kernel(WHOLE_LIST if k is None else k, **kw)


def _reported_keys(name: str, kernel: ListKernel) -> list[str]:
    """The result's keys of one metric: its name, then ``"{name}_{quantity}"`` per quantity."""
    return [name, *(f"{name}_{q}" for q in kernel.quantities)]


class ListMetrics:
    """A kernel holding several list metrics, computed from one selection per batch.

    Args:
        metrics: names (``"ndcg@10"``, ...; see the module docstring), or ``{name: kernel}``.
        defaults: per metric base name, keyword arguments for its kernel (an adapter's peer
            conventions, e.g. ``{"map": {"denominator": "all"}}``).
        empty, ties, seed, weighting, negative_labels: the conventions of every kernel built
            from a name, with the defaults of
            `rankstream.core.lists.conventions.ListConventions` (``"skip"``, ``"first"``, None,
            ``"list"``, ``"keep"``).
        relevance_threshold: ``"each"`` (default): each metric's own (1.0 for nDCG, None for
            the others, or what ``defaults`` sets); a number or None: the same for every metric.
        confidence: None (default) or a level in (0, 1), e.g. 0.95: every metric built from a
            name also reports its standard error over the lists, Student's ``t`` interval at
            that level and the count of lists (``"{name}_stderr"``, ``"{name}_ci_low"``,
            ``"{name}_ci_high"``, ``"{name}_count"``). Kernels given in a mapping carry their
            own ``confidence``.
        chance: False (default) or True: every metric built from a name also reports its mean
            under a uniformly random ranking, the chance-adjusted index and the z-score
            (``"{name}_expected"``, ``"{name}_adjusted"``, ``"{name}_z"``; docs/chance.md).
            Kernels given in a mapping carry their own ``chance``.
        items: the catalog's `rankstream.core.beyond.items.ItemData`, for the beyond-accuracy
            names (``"coverage@10"``, ``"entropy@10"``, ``"gini@10"``, ``"personalization@10"``,
            ``"novelty@10"``, ``"arp@10"``, ``"aplt@10"``, ``"aclt@10"``, ``"diversity@10"``,
            ``"ild@10"``; docs/beyond_accuracy.md): they read the ranked columns as item ids.

    Every metric must read the batch the same way: ``ties``, ``seed``, ``weighting`` and
    ``negative_labels`` are shared; thresholds, denominators and gains may differ. The result
    is ``{name: value}`` with, for a metric whose kernel has ``quantities``,
    ``"{name}_{quantity}"`` beside its name (:attr:`reported` lists the keys).
    """

    name = "list_metrics"
    #: the collection reports its members' quantities under their own keys (:attr:`reported`)
    quantities: tuple[str, ...] = ()

    def __init__(
        self,
        metrics: Sequence[str] | Mapping[str, ListKernel],
        defaults: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        empty: str = "skip",
        ties: str = "first",
        seed: int | None = None,
        weighting: str = "list",
        negative_labels: str = "keep",
        relevance_threshold: float | str | None = "each",
        confidence: float | None = None,
        chance: bool = False,
        items: ItemData | None = None,
    ) -> None:
        conventions: dict[str, Any] = dict(
            empty=empty, ties=ties, seed=seed, weighting=weighting, negative_labels=negative_labels
        )
        if relevance_threshold != "each":
            conventions["relevance_threshold"] = relevance_threshold
        if confidence is not None:
            conventions["confidence"] = check_level(confidence, "confidence")
        if not isinstance(chance, bool):
            raise TypeError(f"chance must be a bool, got {chance!r}")
        if chance:
            conventions["chance"] = True
        if isinstance(metrics, str) or not isinstance(metrics, (Sequence, Mapping)) or len(metrics) == 0:
            raise ValueError(f"metrics must be a non-empty list of names, got {metrics!r}")
        if isinstance(metrics, Mapping):
            if confidence is not None:
                raise ValueError(
                    f"confidence applies to metrics given by name; given kernels carry their own "
                    f"(e.g. NDCGKernel(10, confidence={confidence!r})), got confidence={confidence!r}"
                )
            if chance:
                raise ValueError(
                    "chance applies to metrics given by name; given kernels carry their own "
                    "(e.g. NDCGKernel(10, chance=True)), got chance=True"
                )
            members = dict(metrics)
        else:
            if len(set(metrics)) != len(metrics):
                raise ValueError(f"metrics must not repeat a name, got {list(metrics)}")
            members = {
                name: beyond_kernel(name, items, **conventions)
                if is_beyond_name(name)
                else make_kernel(name, defaults, **conventions)
                for name in metrics
            }
        first = next(iter(members.values()))
        for name, kernel in members.items():
            if not isinstance(kernel, ListKernel):
                raise TypeError(f"metrics[{name!r}] must be a list metric kernel, got {kernel!r}")
            differ = [c for c in _BATCH_CONVENTIONS if getattr(kernel, c) != getattr(first, c)]
            if differ:
                raise ValueError(f"metrics[{name!r}] reads the batch differently ({differ}) from the others")
        self._members = members
        self.metrics = list(members)
        self.settings = {name: kernel_config(kernel) for name, kernel in members.items()}
        # field names every framework accepts as a variable name: "ndcg@10" -> "ndcg_10__value_sum"
        self._keys = {n: re.sub(r"\W", "_", n) for n in members}
        if len(set(self._keys.values())) != len(members):
            raise ValueError(f"metrics must differ in more than punctuation, got {list(members)}")
        self.fields = {
            f"{self._keys[n]}__{f}": shape for n, k in members.items() for f, shape in k.fields.items()
        }
        #: the fields only the members' statistics read (see ListKernel.statistic_fields)
        self.statistic_fields = frozenset(
            f"{self._keys[n]}__{f}" for n, k in members.items() for f in k.statistic_fields
        )
        if len(set(self.reported)) != len(self.reported):
            raise ValueError(f"metrics must not name another's quantity, got {self.reported}")

    @property
    def reported(self) -> list[str]:
        """The keys of the result: every metric's name, each followed by
        ``"{name}_{quantity}"`` for the quantities its kernel reports besides its value."""
        return [key for name, kernel in self._members.items() for key in _reported_keys(name, kernel)]

    @property
    def members(self) -> dict[str, ListKernel]:
        """The kernel of every name, in order (a copy)."""
        return dict(self._members)

    @property
    def random_ties(self) -> bool:
        return next(iter(self._members.values())).random_ties

    def runtime(self, generator: Any = None) -> Runtime:
        return next(iter(self._members.values())).runtime(generator)

    def context(self, like: Any, ops: Ops | None = None) -> Context:
        return self.runtime().context(like, ops)

    def batch_sums(
        self, ctx: Context | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None,
        flat: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Any:  # fmt: skip
        """Every metric's sums from one validation and one selection of the batch; with
        ``flat`` (the fields' shapes, in order) joined into one 1-D array."""
        ctx = ctx or self.context(y_pred, get_ops(y_pred, y, mask, sample_weight))
        ctx, (y_pred, y, mask, sample_weight) = ctx.on_host(y_pred, y, mask, sample_weight)
        first = next(iter(self._members.values()))
        out: dict[str, Array] = {}
        with quiet():
            batch = read_batch(ctx, first, y_pred, y, mask, sample_weight)
            every = select_sums(ctx, list(self._members.values()), batch)
            for name, sums in zip(self._members, every, strict=True):
                out.update({f"{self._keys[name]}__{field}": value for field, value in sums.items()})
        return exported(ctx.ops, out, flat)

    def _part(self, sums: Mapping[str, Any], name: str) -> dict[str, Any]:
        return {field: sums[f"{self._keys[name]}__{field}"] for field in self._members[name].fields}

    def compute(self, sums: Mapping[str, Any], xp: Any = np) -> dict[str, Array]:
        """Every metric's value (and quantities) keyed as :attr:`reported`."""
        out = {}
        for name, kernel in self._members.items():
            values = kernel.compute(self._part(sums, name), xp)
            out[name] = values["value"]
            out.update({f"{name}_{q}": values[q] for q in kernel.quantities})
        return out

    def select(self, values: Mapping[str, Array]) -> dict[str, Array]:
        """One scalar per key (every name has one cut-off)."""
        return {name: value[0] for name, value in values.items()}

    def finalize(self, values: Mapping[str, Any]) -> dict[str, float]:
        return {name: float(np.asarray(v).reshape(-1)[0]) for name, v in values.items()}

    def check_computable(self, sums: Mapping[str, np.ndarray], name: str | None = None) -> None:
        for member, kernel in self._members.items():
            kernel.check_computable(self._part(sums, member), name=f"{name or 'ListMetrics'}[{member!r}]")

    def __repr__(self) -> str:
        return f"ListMetrics({self.metrics})"
