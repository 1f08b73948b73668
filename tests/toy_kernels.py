"""A toy kernel for the tests of the kernel contract: a subclass of a real list kernel that adds
a state field and a reported quantity by overriding ``list_fields``, ``quantities`` and
``compute`` only (no adapter knows it)."""

from __future__ import annotations

import numpy as np

from rankstream import MAPKernel
from rankstream.core.lists.base import ListField, ListOutput


def squared_values(out: ListOutput):
    return out.values * out.values


class MAPWithStderr(MAPKernel):
    """MAP@k with the standard error of the mean over the lists (unit weights):
    ``sqrt(n / (n - 1) * (sum v^2 / n - mean^2) / n)``."""

    quantities = ("stderr",)

    def list_fields(self) -> dict[str, ListField]:
        fields = super().list_fields()
        return {**fields, "value_sq_sum": ListField(fields["value_sum"].shape, squared_values)}

    def compute(self, sums, xp=np):
        out = super().compute(sums, xp)
        n, mean = sums["weight_sum"], out["value"]
        variance = sums["value_sq_sum"] / n - mean * mean
        out["stderr"] = xp.sqrt(n / (n - 1) * variance / n)
        return out
