"""The hand-written Ignite constructors (``ListMetrics``, ``RankBasedMetrics``) hand every option
to their kernel by name (``adapters.ignite_derive.from_arguments``): each metric's kernel equals
the kernel built from the same options written out one by one, and a core's parameter that the
constructor does not take keeps the core's default."""

from __future__ import annotations

from typing import Any

import pytest

from rankstream.adapters.ignite_derive import from_arguments
from rankstream.adapters.ignite_lists import PEER_DEFAULTS
from rankstream.core.lists.collection import ListMetrics as CollectionKernel
from rankstream.core.ranks.kernel import RankKernel
from rankstream.ignite import ListMetrics, RankBasedMetrics


def _plain(kernel: Any) -> dict[str, Any]:
    """The kernel's attributes, those that compare by identity only (the median's bins, the
    term table) by their type."""
    return {
        name: type(value).__name__ if type(value).__eq__ is object.__eq__ else value
        for name, value in vars(kernel).items()
    }


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sides": ("head", "tail"), "filtered_scores": True, "confidence": 0.9},
        {"metrics": ("hits", "median"), "median_exact": 64, "median_bins_per_octave": 8},
    ],
)
def test_rank_metrics_hand_every_option_to_the_kernel(options: dict[str, Any]) -> None:
    metric = RankBasedMetrics((2, 5), ("realistic", "optimistic"), **options)
    written_out = RankKernel((2, 5), ("realistic", "optimistic"), state_dtype="float64", **options)
    assert _plain(metric._kernel) == _plain(written_out)


@pytest.mark.parametrize(
    ("ignore_zero_hits", "empty", "options"),
    [
        (True, "skip", {}),
        (False, "zero", {"ties": "random", "seed": 4, "confidence": 0.8, "chance": True}),
    ],
)
def test_list_metrics_hand_every_option_to_the_kernel(
    ignore_zero_hits: bool, empty: str, options: dict[str, Any]
) -> None:
    metric = ListMetrics(["ndcg@3", "map", "hit_rate@2"], ignore_zero_hits=ignore_zero_hits, **options)
    written_out = CollectionKernel(["ndcg@3", "map", "hit_rate@2"], PEER_DEFAULTS, empty=empty, **options)
    assert metric._kernel.settings == written_out.settings
    assert repr(metric._kernel._members) == repr(written_out._members)


def test_from_arguments_takes_the_core_parameters_only() -> None:
    def core(a: int, b: int = 2, *, c: int = 3) -> tuple[int, int, int]:
        return a, b, c

    # "self" and "d" are not the core's; "c" is given, so the arguments' "c" is not read
    assert from_arguments(core, {"self": None, "a": 1, "d": 9, "c": 7}, c=5) == (1, 2, 5)
    with pytest.raises(TypeError):
        from_arguments(core, {"b": 1})  # "a" missing: the core's own TypeError
