"""The torch backend's host ops: a small CPU torch batch computed on numpy views of its
tensors (:class:`TorchHostOps`, what ``TorchOps.host`` names for such a batch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rankstream.core import sizes as _sizes
from rankstream.core.backends.numpy import NumpyOps
from rankstream.core.backends.protocol import Array, Ops


class TorchHostOps(NumpyOps):
    """A small CPU torch batch computed on numpy views of its tensors (no copy): the numpy
    backend, with torch's ``topk`` (faster than numpy's partition at every size) and the random
    stream and generator of the torch ops it came from (``parent``), so ties are broken by the
    same draws whichever ops a batch takes. What it computes goes back as torch tensors
    (:meth:`export`). Per call numpy costs about a microsecond on a few thousand values where
    torch costs several, and a list metric's update makes some forty calls."""

    name = "torch-host"

    def __init__(self, parent: Any) -> None:
        self.parent = parent

    def host(self, arrays: tuple[Any, ...]) -> Ops:
        return self

    def export(self, x: Array) -> Array:
        return torch.from_numpy(np.asarray(x))

    def asarray(self, x: Any, like: Array = None, dtype: Any = None) -> Array:
        if isinstance(x, torch.Tensor):  # a view of the tensor's memory
            try:
                x = x.numpy() if not x.requires_grad else x.detach().numpy()
            except RuntimeError:  # a lazy negation or conjugation: resolved (a copy)
                x = x.numpy(force=True)
        return np.asarray(x, dtype=dtype)

    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        vals, idx = torch.topk(torch.from_numpy(x), k, dim=-1, largest=True, sorted=True)
        return vals.numpy(), idx.numpy()

    def cumsum(self, x: Array, axis: int = -1) -> Array:
        """torch's scan from a thousand values on (numpy's along the rows runs item by item:
        10 x 1,000 float64 23 us against 7 us; 32 x 10 about equal)."""
        if x.size < _sizes.SIZES.host_cumsum_from or x.dtype.kind != "f":
            return super().cumsum(x, axis)
        return torch.cumsum(torch.from_numpy(x), dim=axis).numpy()

    def randperm(self, n: int, like: Array, generator: Any) -> Array:
        return self.parent.randperm(n, torch.empty(0), generator).cpu().numpy()

    def generator(self, seed: Any) -> Any:
        return self.parent.generator(seed)
