"""The rows of the table of list metrics (:mod:`rankstream.core.lists.table`): what one row
says of a metric, and how each adapter presents it.

A :class:`ListMetricRow` names the metric as collections and ranx / ir_measures write it, its
kernel and the name of its functional form, and holds one :class:`Presentation` per adapter:
Ignite's and Keras' (the public class name, other names, the peer's defaults, the docstring's
opening) and, where torchmetrics has the metric, torchmetrics' (a
:class:`RetrievalPresentation`: the same, plus what torchmetrics' ``Retrieval*`` classes take
and how they read their flat items). The adapters make their classes from these rows.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rankstream.core.lists.base import ListKernel

__all__ = ["ListMetricRow", "Presentation", "RetrievalPresentation"]


@dataclass(frozen=True)
class Presentation:
    """How one adapter presents a list metric.

    Attributes:
        name: the public class name (``"NDCG"``).
        also: other public names bound to the same class (``("MRR",)``).
        defaults: the adapter's defaults for kernel arguments where its peer's differ from the
            kernel's (``{"relevance_threshold": 1.0}``; ``top_k`` too). The torchmetrics
            classes expose none of the kernel's options but their ``options``: there these are
            the kernel arguments the class sets.
        doc: the opening of the class docstring: the formula, the peer it follows, its
            conventions (the adapter adds the arguments).
    """

    name: str
    also: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""


@dataclass(frozen=True)
class RetrievalPresentation(Presentation):
    """How the torchmetrics adapter presents a list metric (torchmetrics' ``Retrieval*``
    classes, :mod:`rankstream.torchmetrics`). Its kernel is the row's (or ``kernel``), with
    ``defaults`` and ``empty="zero"``, cut at the class's ``top_k`` where the row takes ``k``.

    Attributes:
        kernel: the kernel in torchmetrics' convention where the row's differs from it (None:
            the row's).
        options: the kernel's options the class takes, keyword-only ``(name, default,
            annotation)``, set as attributes of the metric before the kernel is built.
        adaptive_k: takes torchmetrics' ``adaptive_k`` (precision: the denominator is
            ``min(k, n)`` with it or without ``top_k``, else ``k``).
        retrieved: items scored ``<= 0`` are not retrieved (torchmetrics >= 1.7.4): the kernel
            reads labels coded 0/1/2 (:mod:`~rankstream.core.lists.retrieved`) with
            ``relevance_threshold=2``.
        nonpositive: takes ``nonpositive_retrieved`` (else every item is retrieved).
        graded: targets other than 0 and 1 are allowed.
        both_classes: a query is empty unless it holds both classes (AUC).
        ranked: the per-query values come from the relevant items' counts where they are few.
        empty: the default ``empty_target_action``.
        parent: the torchmetrics class (of an earlier row) the class derives from; None: the
            adapter's base class.
    """

    kernel: type[ListKernel] | None = None
    options: tuple[tuple[str, Any, str], ...] = ()
    adaptive_k: bool = False
    retrieved: bool = False
    nonpositive: bool = True
    graded: bool = False
    both_classes: bool = False
    ranked: bool = False
    empty: str = "neg"
    parent: str | None = None


@dataclass(frozen=True)
class ListMetricRow:
    """One list metric: its names, kernel, functional form and adapter presentations
    (``torchmetrics``: None where torchmetrics has no class for it)."""

    name: str
    aliases: tuple[str, ...]
    kernel: type[ListKernel]
    function: str
    ignite: Presentation
    keras: Presentation
    torchmetrics: RetrievalPresentation | None = None

    @property
    def takes_k(self) -> bool:
        """Whether the metric has a cut-off (R-precision has none: its depth is ``R``)."""
        return "top_k" in inspect.signature(self.kernel).parameters
