"""What every backend module implements and reads: the :class:`Ops` protocol (its method
names, :data:`OPS_METHODS`), the :class:`Workspace` of a metric instance's scratch buffers, and
the switch that keeps small CPU torch batches on their own ops (:func:`host_batches`).

The backend modules (``numpy.py``, ``torch.py``, ``torch_host.py``, ``torch_tiles.py``,
``keras_ops.py``) import these from here; the package's ``__init__.py`` re-exports them beside
the :class:`~rankstream.core.backends.Context` and the lazy :func:`~rankstream.core.backends.get_ops`,
which import the backend modules. So the imports run one way: ``__init__`` -> a backend ->
this module, never back up. See the package docstring for the conventions of the protocol.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

Array = Any

#: Every method of the protocol (the test suite checks each backend defines each one itself).
OPS_METHODS = (
    # reading back and conversion
    "can_read",
    "host",
    "export",
    "owns",
    "host_bools",
    "to_numpy",
    "asarray",
    "cast",
    "acc_dtype",
    "int_dtype",
    # dtypes
    "dtype_name",
    "is_floating",
    "is_bool",
    "is_numeric",
    "is_complex",
    # creation and shape
    "arange",
    "zeros",
    "ones_bool",
    "reshape",
    "stack",
    "concat",
    "ravel_concat",
    # selection
    "topk",
    "topk_first",
    "masked_topk",
    "stable_argsort_desc",
    "order_first",
    "take_along",
    "take",
    "lookup",
    "set_rows",
    "nonzero",
    "randperm",
    "generator",
    # arithmetic
    "cumsum",
    "matmul",
    "exp2",
    "sum",
    "row_sums",
    "masked_row_sums",
    "where",
    "minimum",
    "maximum",
    "log",
    "log2",
    "isnan",
    "isfinite",
    "any",
    "all",
    "amin",
    "and_not",
    # counting passes (the fast paths, with the instance's workspace)
    "count_relevant",
    "count_and_max",
    "count_equal",
    "row_count",
    "compare_counts",
    "rank_counts",
    "exclude",
    # tie groups (ties="expected")
    "run_bounds",
    "tie_sums",
    # streamed distributions
    "histogram",
    "bincount",
    # the passes of chance=True (rankstream.core.lists.chance)
    "valid_counts",
    "gain_sums",
    "gain_top",
)


class Ops:
    """The protocol. Every method is implemented by every backend; see the module docstring."""

    name = "abstract"
    native_stable = False
    #: False while a ``jit`` trace is being recorded (nothing can be read back then, and
    #: data-dependent shapes are impossible)
    eager = True
    #: the elementwise math namespace of ``compute(sums, xp)``
    xp: Any = None


def _abstract(name: str) -> Callable[..., Any]:
    def method(self: Ops, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement Ops.{name}")

    method.__name__ = name
    return method


for _name in OPS_METHODS:
    setattr(Ops, _name, _abstract(_name))


class Workspace:
    """Scratch buffers of ONE metric instance, reused between its updates (fresh large
    temporaries cost page faults on every batch). Two instances never share one, so metrics
    updated from two threads are independent; one instance is not for two threads at once."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[Any, Any]] = {}

    def get(self, role: str, key: Any, make: Callable[[], Any]) -> Any:
        """The buffer kept under ``role`` when it was made for ``key``, else ``make()``."""
        held = self._items.get(role)
        if held is None or held[0] != key:
            held = (key, make())
            self._items[role] = held
        return held[1]

    def put(self, role: str, key: Any, value: Any) -> Any:
        """Keep ``value`` under ``role`` for ``key`` (replacing what was there); returns it."""
        self._items[role] = (key, value)
        return value


_HOST_BATCHES: contextvars.ContextVar[bool] = contextvars.ContextVar("rankstream_host_batches", default=True)


def host_batches_enabled() -> bool:
    """Whether :meth:`Ops.host` may move small batches to the host ops (see :func:`host_batches`)."""
    return _HOST_BATCHES.get()


@contextlib.contextmanager
def host_batches(enabled: bool) -> Iterator[None]:
    """Within the block, ``host_batches(False)`` keeps every batch on its own backend's ops
    (small CPU torch batches too, which otherwise run on numpy views of the tensors): for tests
    comparing the two paths, and for measuring them. ``True`` is the default."""
    token = _HOST_BATCHES.set(bool(enabled))
    try:
        yield
    finally:
        _HOST_BATCHES.reset(token)
