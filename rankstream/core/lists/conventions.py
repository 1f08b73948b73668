"""The conventions of the list metrics, and the explicit signatures of the kernels taking them.

The conventions are one frozen :class:`ListConventions` (each adapter picks its peer's):

* ``empty``: a list with no relevant item is ``"skip"``-ped (ignite's ``ignore_zero_hits``) or
  counted as ``"zero"`` (a list with no item at all, every item masked, is never counted);
* ``ties``: ``"first"`` (earlier index ranks first), ``"random"`` (with ``seed``) or
  ``"expected"`` (the exact mean over every order of the tied items,
  :mod:`~rankstream.core.lists.ties`; see :mod:`~rankstream.core.topk`);
* ``weighting``: ``"list"`` (``sample_weight`` is one weight per list) or ``"keras_rs"``
  (scalar, per list or per item; per-item weights enter the per-list values, items weighted
  ``<= 0`` are dropped, and each list's weight is collapsed from its item weights as keras-rs's
  ``get_list_weights`` does,
  :meth:`~rankstream.core.lists.base.ListKernel.list_weights`);
* ``negative_labels``: ``"keep"`` or ``"mask"`` (labels not ``>= 0``, NaN too, are padding);
* ``relevance_threshold``: an item is relevant when ``label >= t`` (``None``: ``label > 0``).

Each kernel's ``__init__`` declares only its own options and passes ``**conventions`` on;
:func:`explicit_signature` gives the class (and its ``__init__``) the signature with every
option and convention, so ``inspect.signature`` and the reference show them all.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields
from typing import Any

from rankstream.core.inputs import NEGATIVE_LABELS
from rankstream.core.topk import check_ties

EMPTY_POLICIES = ("skip", "zero")
WEIGHTINGS = ("list", "keras_rs")


@dataclass(frozen=True)
class ListConventions:
    """How a list metric reads a batch; every list kernel takes these as keyword arguments.

    Attributes:
        empty: a list with no relevant item is ``"skip"``-ped (ignite's ``ignore_zero_hits``,
            default) or counted as ``"zero"`` (keras-rs).
        ties: ``"first"`` (the earlier index ranks first among equal scores, default),
            ``"random"`` (a random order, seeded by ``seed``) or ``"expected"`` (the metric's
            exact mean over every order of each group of equal scores; composes with every
            other option: per-item weights weigh each order's ranking as without ties).
        seed: seed of the random tie order (None: a random seed).
        weighting: ``"list"`` (``sample_weight`` is one weight per list, default) or
            ``"keras_rs"`` (scalar, per list or per item, as keras-rs: per-item weights enter the
            per-list values and each list's weight is collapsed from its item weights).
        negative_labels: ``"keep"`` (labels below 0 are not relevant, default) or ``"mask"``
            (labels not ``>= 0``, NaN too, are padding, as keras-rs).
        relevance_threshold: an item is relevant when ``label >= t``; None: ``label > 0``.
    """

    empty: str = "skip"
    ties: str = "first"
    seed: int | None = None
    weighting: str = "list"
    negative_labels: str = "keep"
    relevance_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.empty not in EMPTY_POLICIES:
            raise ValueError(f"empty must be one of {EMPTY_POLICIES}, got {self.empty!r}")
        check_ties(self.ties)
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        if self.negative_labels not in NEGATIVE_LABELS:
            raise ValueError(
                f"negative_labels must be one of {NEGATIVE_LABELS}, got {self.negative_labels!r}"
            )


CONVENTION_NAMES = frozenset(f.name for f in fields(ListConventions))


def _written(init: Any) -> inspect.Signature:
    """The signature an ``__init__`` was written with (kept on it before
    :func:`explicit_signature` gives it the explicit one)."""
    if "written_signature" not in vars(init):
        init.written_signature = inspect.signature(init)
    return init.written_signature


def explicit_signature(cls: type, root: type) -> None:
    """Give a list kernel class its explicit signature: the positional parameters of its
    ``__init__`` (``top_k``, or none), the keyword options its classes' ``__init__`` declare
    (base classes' first, a later declaration changing the default in place), then the
    conventions of :class:`ListConventions` no class declares, with their defaults, then the
    keyword options of ``root``'s own ``__init__`` (``confidence``). Each
    ``__init__`` (of ``root`` and its subclasses) declares its own options and passes
    ``**conventions`` on."""
    P = inspect.Parameter
    options: dict[str, inspect.Parameter] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass) and issubclass(klass, root) and klass is not root:
            own = _written(vars(klass)["__init__"]).parameters.values()
            options.update({p.name: p for p in own if p.kind is P.KEYWORD_ONLY})
    for f in fields(ListConventions):
        options.setdefault(f.name, P(f.name, P.KEYWORD_ONLY, default=f.default, annotation=f.type))
    # the root's own options (every kernel's: the confidence level) come last
    root_own = _written(vars(root)["__init__"]).parameters.values()
    options.update({p.name: p for p in root_own if p.kind is P.KEYWORD_ONLY and p.name not in options})
    written = _written(cls.__init__)
    positional = [p for p in written.parameters.values() if p.kind is P.POSITIONAL_OR_KEYWORD]
    explicit = written.replace(parameters=[*positional, *options.values()])
    if "__init__" in vars(cls):  # the constructor's own page shows it too
        cls.__init__.__signature__ = explicit  # type: ignore[misc]
    cls.__signature__ = explicit.replace(parameters=[*positional[1:], *options.values()])  # type: ignore[attr-defined]
