"""Public classes derived from a declaration: an explicit signature, an ``Args:`` section, one
constructor body; constructors over a core class that take its arguments (:func:`core_init`); and
a hand-written constructor's options handed to its core object by name (:func:`from_arguments`).

A derived class is a real class (its own ``__name__``, ``__qualname__`` and ``__module__``,
picklable once bound to that name in that module) whose ``inspect.signature`` is the one it is
given: every option named, with its kind, default and annotation, and no ``*args`` /
``**kwargs``. Its constructor binds the call to that signature (a wrong call is the usual
``TypeError``) and hands the bound arguments, defaults applied, to one ``build`` function.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

#: width of a generated ``Args:`` line, its indentation included
ARGS_WIDTH = 96
#: a literal (````x > 0````): kept on one line when an argument's description is wrapped
_LITERAL = re.compile(r"``.+?``")
_KEPT = "\x00"  # stands for a space inside a literal while wrapping
_Core = TypeVar("_Core")


def describe(text: str, default: Any) -> str:
    """An argument's description with ``{default}`` replaced by the default it has here."""
    return text.replace("{default}", str(default))


def args_section(signature: inspect.Signature, described: Mapping[str, str]) -> str:
    """A Google-style ``Args:`` section naming every parameter of ``signature`` but ``self``,
    in order, each with its description from ``described`` (``{default}`` standing for its
    default; a ``KeyError`` names an undescribed one)."""
    lines = ["Args:"]
    for name, param in signature.parameters.items():
        if name == "self":
            continue
        if name not in described:
            raise KeyError(f"no description of the argument {name!r}: add it to the descriptions")
        text = _LITERAL.sub(
            lambda m: m.group(0).replace(" ", _KEPT), describe(described[name], param.default)
        )
        lines += textwrap.wrap(
            f"{name}: {text}",
            ARGS_WIDTH,
            initial_indent="    ",
            subsequent_indent="        ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines).replace(_KEPT, " ")


def docstring(opening: str, signature: inspect.Signature, described: Mapping[str, str]) -> str:
    """A class docstring: ``opening`` (dedented) and the ``Args:`` section of ``signature``."""
    return f"{inspect.cleandoc(opening).rstrip()}\n\n{args_section(signature, described)}"


def parameters(
    specs: Iterable[tuple[str, Any, Any]], kind: Any = inspect.Parameter.POSITIONAL_OR_KEYWORD
) -> list[inspect.Parameter]:
    """Parameters of one ``kind`` from ``(name, default, annotation)`` triples."""
    return [inspect.Parameter(name, kind, default=default, annotation=ann) for name, default, ann in specs]


def bound_init(
    signature: inspect.Signature, qualname: str, module: str, build: Callable[[Any, dict[str, Any]], None]
) -> Callable[..., None]:
    """A constructor with ``signature`` (``self`` first): it binds the call to it (a wrong call
    is the usual ``TypeError``, named after ``qualname``'s class) and runs ``build(self,
    arguments)`` with the bound arguments, defaults applied."""
    owner = qualname.rpartition(".")[0] or qualname

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{owner}.__init__() {exc}") from None
        bound.apply_defaults()
        build(self, bound.arguments)

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__qualname__ = qualname
    __init__.__module__ = module
    return __init__


def from_arguments(core: Callable[..., _Core], arguments: Mapping[str, Any], **given: Any) -> _Core:
    """``core`` called with ``given`` and, by name, each of ``core``'s other parameters that
    ``arguments`` holds: an adapter's constructor passes its ``locals()`` (first thing, before
    any local of its own) and hands the core object its options of the same names, each named
    once, in the constructor's signature."""
    taken = inspect.signature(core).parameters
    return core(
        **{name: arguments[name] for name in taken if name in arguments and name not in given}, **given
    )


def core_init(
    core: type, extra: Iterable[tuple[str, Any, Any]]
) -> Callable[[Callable[[Any, Any, dict[str, Any]], None]], Callable[..., None]]:
    """A decorator of an adapter's constructor over a core class: the constructor's signature
    is ``core``'s (its parameters, kinds, defaults and annotations) followed by the adapter's
    ``extra`` ``(name, default, annotation)`` parameters; it builds ``core`` from its arguments
    and runs the decorated ``init(self, core_instance, arguments)`` (every argument, defaults
    applied). The core's arguments are named once, in the core."""
    own = list(inspect.signature(core).parameters.values())
    names = [p.name for p in own]
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *own, *parameters(extra)],
        return_annotation="None",
    )

    def decorate(init: Callable[[Any, Any, dict[str, Any]], None]) -> Callable[..., None]:
        def build(self: Any, arguments: dict[str, Any]) -> None:
            init(self, core(**{name: arguments[name] for name in names}), arguments)

        return bound_init(signature, init.__qualname__, init.__module__, build)

    return decorate


def derived_class(
    name: str,
    base: type,
    module: str,
    signature: inspect.Signature,
    doc: str,
    build: Callable[[Any, dict[str, Any]], None],
) -> type:
    """A subclass ``name`` of ``base``, defined in ``module``, whose constructor has
    ``signature`` (``self`` first) and runs ``build(self, arguments)`` with the bound
    arguments, defaults applied. ``inspect.signature`` of the class shows ``signature`` without
    ``self``; ``doc`` is its docstring."""
    namespace = {
        "__init__": bound_init(signature, f"{name}.__init__", module, build),
        "__doc__": doc,
        "__module__": module,
        "__qualname__": name,
        "__signature__": signature.replace(parameters=list(signature.parameters.values())[1:]),
    }
    return type(base)(name, (base,), namespace)
