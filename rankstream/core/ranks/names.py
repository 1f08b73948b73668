"""The name registry of :mod:`rankstream.pykeen`'s resolver: metric names, PyKEEN's synonyms
and keys, and ``name@k`` prefixes, each mapped to a factory.

Names are matched case-insensitively, ignoring ``_``, ``-`` and spaces. A name taking ``k``
also registers its prefix, so ``"hits@10"``, ``"h@3"`` and ``"hits_at_5"`` reach the Hits@k
factory with that ``k``. :func:`rankstream.pykeen.resolve` reads it through :func:`lookup`.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["camel_to_snake", "check_k", "lookup", "metric_names", "register", "register_classes"]


@dataclass
class _Entry:
    factory: Callable[..., Any]
    takes_k: bool
    default_k: int | None
    label: str


_EXACT: dict[str, _Entry] = {}
_PREFIX: dict[str, _Entry] = {}
_DIGITS = re.compile(r"^(.*?)(\d+)$")


def check_k(k: Any) -> int:
    """``k`` as an int if it is an integer >= 1 (a bool is not), else ``ValueError``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return int(k)


def camel_to_snake(name: str) -> str:
    """``AdjustedHitsAtK`` -> ``adjusted_hits_at_k``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _normalize(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name.strip().lower())


def _k_prefix(normalized: str) -> str | None:
    """The ``@k`` prefix of a name (``hits@k`` -> ``hits@``, ``hitsatk`` -> ``hitsat``)."""
    for suffix, cut in (("@k", 1), ("@", 0), ("atk", 1), ("at", 0)):
        if normalized.endswith(suffix) and len(normalized) > len(suffix):
            return normalized[: len(normalized) - cut] if cut else normalized
    return None


def register(
    name: str,
    factory: Callable[..., Any],
    *,
    takes_k: bool | None = None,
    default_k: int | None = None,
    overwrite: bool = False,
) -> None:
    """Make :func:`rankstream.pykeen.resolve` turn ``name`` into ``factory(...)``.

    Names are matched case-insensitively, ignoring ``_``, ``-`` and spaces.  A name taking
    ``k`` (``takes_k=True``, or by default a name ending in ``@``, ``@k``, ``_at_`` or
    ``_at_k``) also registers its prefix: after ``register("map@", lambda k: MAP(k))``,
    ``resolve("map@5")`` returns ``MAP(5)``; ``resolve("map@")`` / ``resolve("map@k")`` use
    ``default_k`` (an error if it is None).  Other names call ``factory(**kwargs)``.
    Re-registering a taken name raises ``ValueError`` unless ``overwrite=True``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise ValueError(f"factory must be callable, got {factory!r}")
    if default_k is not None:
        check_k(default_k)
    key = _normalize(name)
    prefix = _k_prefix(key)
    if takes_k is None:
        takes_k = prefix is not None and (name.rstrip().lower().endswith(("@", "@k", "_at_", "_at_k")))
    if takes_k and prefix is None:
        prefix = key
    entry = _Entry(factory=factory, takes_k=bool(takes_k), default_k=default_k, label=name)
    targets = [(_EXACT, key)] + ([(_PREFIX, prefix)] if takes_k else [])
    if not overwrite:
        for table, k in targets:
            if k in table and table[k].factory is not factory:
                raise ValueError(
                    f"metric name {name!r} (normalized {k!r}) is already registered "
                    f"as {table[k].label!r}; pass overwrite=True to replace it"
                )
    for table, k in targets:
        table[k] = entry


def register_classes(classes: Iterable[type], k_classes: Iterable[type], default_k: int = 10) -> None:
    """Register metric classes under their class names and ``synonyms`` (and, for classes not
    taking ``k``, their snake-case names); a class of ``k_classes`` takes ``k``
    (``default_k`` when the name gives none): its ``@k``-style names (``"hits@k"``, ``"h@"``,
    ``"hits_at_"``, ``...AtK``) register their prefixes, and its other names (``"ahk"``) are
    exact names with the default."""
    k_classes = tuple(k_classes)
    for cls in classes:
        takes_k = cls in k_classes
        names = [cls.__name__, *getattr(cls, "synonyms", ())]
        if not takes_k:
            names.append(camel_to_snake(cls.__name__))
        for label in names:
            key = _normalize(label)
            if takes_k:
                entry = _Entry(factory=cls, takes_k=True, default_k=default_k, label=label)
                _EXACT[key] = entry
                prefix = _k_prefix(key)
                if prefix is not None:
                    _PREFIX[prefix] = entry
            else:
                _EXACT[key] = _Entry(factory=cls, takes_k=False, default_k=None, label=label)


def _instantiate(entry: _Entry, query: str, k: int | None, kwargs: dict[str, Any]) -> Any:
    if not entry.takes_k:
        if k is not None:
            raise ValueError(f"metric {query!r} does not take a k")
        return entry.factory(**kwargs)
    if k is not None and "k" in kwargs and kwargs["k"] != k:
        raise ValueError(f"conflicting k: {query!r} names k={k}, but k={kwargs['k']!r} was passed")
    if k is None:
        k = kwargs.get("k", entry.default_k)
        if k is None:
            raise ValueError(f"metric {query!r} needs a k, e.g. {query.rstrip('kK')}10")
    rest = {key: value for key, value in kwargs.items() if key != "k"}
    return entry.factory(check_k(k), **rest)


def lookup(query: str, kwargs: dict[str, Any]) -> Any:
    """The metric a registered name (or ``name@k``) stands for, its factory called with
    ``kwargs``; ``ValueError`` for unknown names, listing the known ones."""
    key = _normalize(query)
    if key in _EXACT:
        return _instantiate(_EXACT[key], query, None, kwargs)
    match = _DIGITS.match(key)
    if match and match.group(1) in _PREFIX:
        return _instantiate(_PREFIX[match.group(1)], query, int(match.group(2)), kwargs)
    if match and match.group(1) in _EXACT:
        raise ValueError(f"metric {query!r}: {match.group(1)!r} does not take a k")
    raise ValueError(f"unknown metric {query!r} (normalized {key!r}); known names: {metric_names()}")


def metric_names() -> list[str]:
    """All registered (normalized) names; ``@k`` prefixes are listed as ``prefix<k>``."""
    return sorted(set(_EXACT) | {p + "<k>" for p in _PREFIX})
