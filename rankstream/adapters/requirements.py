"""What an adapter module needs of its framework: the version check and the install hint.

Imports nothing but the standard library, so an adapter module calls it before (and whatever
happens when) it imports its framework.
"""

from __future__ import annotations

import re


def install_hint(extra: str, upgrade: bool = False) -> str:
    """The pip command that installs (``upgrade``: upgrades) rankstream with ``extra``."""
    return f'pip install{" -U" if upgrade else ""} "rankstream[{extra}]"'


def version_tuple(version: str, parts: int = 3) -> tuple[int, ...]:
    """The first ``parts`` numbers of a version string (``"0.5.1.dev0"`` -> ``(0, 5, 1)``)."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:parts])


def require(module: str, package: str, version: str, minimum: str, extra: str, why: str = "") -> None:
    """``ImportError`` when ``package`` at ``version`` is older than ``minimum``.

    Args:
        module: the rankstream module that needs it (``"rankstream.ignite"``).
        package: the package's name in the message (``"pytorch-ignite"``, ``"Keras"``).
        version: the installed version (its ``__version__``).
        minimum: the oldest version that works (``"0.5.1"``); compared on its own number of
            parts, so ``"3.6"`` accepts ``3.6.0`` and later.
        extra: rankstream's extra that installs the package (``"ignite"``).
        why: what needs that version (``"Metric's skip_unrolling"``), said in the message.
    """
    need = version_tuple(minimum, parts=99)
    if version_tuple(version, parts=len(need)) < need:
        reason = f" ({why})" if why else ""
        raise ImportError(
            f"{module} needs {package} {minimum} or later{reason}, found {package} {version}. "
            f"Upgrade with: {install_hint(extra, upgrade=True)}"
        )
