"""Named sides of a rank metric (PyKEEN's ``head`` / ``tail``): the validated names, and one
update's input read as ``{side: (y_pred, y, mask, sample_weight)}``: a mapping of sides, stacked
sides (``y_pred`` of shape ``(batch, S, N)``) or a plain batch of the only side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rankstream.core.inputs import unpack_output

__all__ = ["BOTH", "check_sides", "side_batches", "side_inputs", "stacked_batches"]

#: the side under which a kernel without named sides reports (PyKEEN's combined side)
BOTH = "both"

Batch = tuple[Any, Any, Any, Any]


def check_sides(sides: Any) -> tuple[str, ...] | None:
    """Validated side names (unique non-empty strings, none of them ``both``), or None."""
    if sides is None:
        return None
    if isinstance(sides, str) or not isinstance(sides, Sequence) or not sides:
        raise ValueError(f"sides must be a non-empty sequence of names like ('head', 'tail'), got {sides!r}")
    names = tuple(sides)
    bad = [s for s in names if not isinstance(s, str) or not s or "." in s or "__" in s or s == BOTH]
    if bad or len(set(names)) != len(names):
        raise ValueError(
            f"sides must be unique non-empty names without '.' or '__', other than {BOTH!r} (reported as the "
            f"sum of the sides), got {sides!r}"
        )
    return names


def side_inputs(
    sides: tuple[str, ...] | None, y_pred: Any, y: Any = None, mask: Any = None, sample_weight: Any = None
) -> dict[str, Batch]:
    """``{side: (y_pred, y, mask, sample_weight)}`` of one update: a mapping of sides
    (:func:`side_batches`; ``y``, ``mask`` and ``sample_weight`` then not given), stacked sides
    (:func:`stacked_batches`), or a plain batch of the only side (:data:`BOTH` without sides)."""
    if isinstance(y_pred, Mapping):
        if y is not None or mask is not None or sample_weight is not None:
            raise ValueError("a mapping of sides carries its own y, mask and sample_weight")
        return side_batches(sides, y_pred)
    if sides is not None and len(getattr(y_pred, "shape", ())) == 3:
        return stacked_batches(sides, y_pred, y, mask, sample_weight)
    if sides is not None and len(sides) > 1:
        raise ValueError(
            f"this metric has the sides {sides}: update it with a mapping {{side: batch}} "
            f"(e.g. {{'{sides[0]}': (y_pred, y)}}) or stacked sides (y_pred of shape "
            f"(batch, {len(sides)}, num_candidates)), got y_pred of shape "
            f"{tuple(getattr(y_pred, 'shape', ()))}"
        )
    return {(sides or (BOTH,))[0]: (y_pred, y, mask, sample_weight)}


def side_batches(sides: tuple[str, ...] | None, output: Mapping[str, Any]) -> dict[str, Batch]:
    """``{side: (y_pred, y, mask, sample_weight)}`` of a mapping of sides (validated names;
    each value as :func:`~rankstream.core.inputs.unpack_output` reads it)."""
    if sides is None:
        raise ValueError(
            "a mapping of sides needs a metric with named sides (sides=('head', 'tail')); got "
            f"keys {sorted(map(str, output))}"
        )
    unknown = [k for k in output if k not in sides]
    if unknown or not output:
        raise ValueError(f"the sides of this metric are {sides}; got keys {sorted(map(str, output))}")
    return {side: unpack_output(output[side]) for side in sides if side in output}


def stacked_batches(
    sides: tuple[str, ...] | None, y_pred: Any, y: Any, mask: Any = None, sample_weight: Any = None
) -> dict[str, Batch]:
    """``{side: (y_pred, y, mask, sample_weight)}`` of stacked sides: ``y_pred`` of shape
    ``(batch, S, N)`` with ``S = len(sides)`` (side ``i`` at ``[:, i]``, the form of a
    Keras model with one output per query and side), ``y`` ``(batch, S)`` indices or
    ``(batch, S, N)`` labels, ``mask`` ``(batch, S, N)``, ``sample_weight`` per row
    ``(batch,)`` (every side) or ``(batch, S)``."""
    sides = sides or ()
    size = len(sides)

    def shape(x: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in getattr(x, "shape", ()))

    if shape(y_pred)[1] != size:
        raise ValueError(
            f"y_pred with stacked sides must have shape (batch, {size}, num_candidates) for the sides "
            f"{sides}, got {shape(y_pred)}"
        )
    for name, x, ranks in (
        ("y", y, (2, 3)),
        ("mask", mask, (3,)),
        ("sample_weight", sample_weight, (0, 1, 2)),
    ):
        if x is not None and (len(shape(x)) not in ranks or (len(shape(x)) >= 2 and shape(x)[1] != size)):
            raise ValueError(
                f"{name} with stacked sides (y_pred of shape {shape(y_pred)}) must have the sides on "
                f"axis 1 ({size} of them), got shape {shape(x)}"
            )

    def part(x: Any, i: int) -> Any:
        return x[:, i] if x is not None and len(shape(x)) >= 2 else x

    return {
        side: (y_pred[:, i], y[:, i], part(mask, i), part(sample_weight, i)) for i, side in enumerate(sides)
    }
