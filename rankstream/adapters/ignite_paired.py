"""``rankstream.ignite.PairedComparison``: rankers compared on the same lists in one Engine pass.

The engine's output is a mapping ``{"y_pred": {ranker: scores}, "y": labels, "mask"?: m,
"sample_weight"?: w}`` (or ``y_pred`` stacked ``(batch, R, list_size)`` in the order of
``rankers``); ``compute()`` returns the flat mapping of
:class:`~rankstream.core.lists.paired.PairedComparison`, and attached to an ``Engine`` each key
is put in ``engine.state.metrics`` (after ``prefix``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from rankstream.adapters.ignite_derive import docstring
from rankstream.adapters.ignite_lists import LIST_ARGS, PEER_DEFAULTS, empty_policy
from rankstream.adapters.ignite_metrics import _CPU, _OUTPUT_KEYS, KernelMetric, _identity, _to_tensor
from rankstream.core import execution
from rankstream.core.backends import torch_ops
from rankstream.core.inputs import unpack_output
from rankstream.core.lists.paired import PairedComparison as PairedKernel
from rankstream.core.uncertainty import DEFAULT_LEVEL

__all__ = ["PairedComparison"]


class PairedComparison(KernelMetric):
    """Paired comparison of two or more rankers on the same lists, for several list metrics:
    ``PairedComparison(["ndcg@10", "map@10"], rankers=["model", "popularity"])``.

    Each update validates and ranks the batch once per ranker and adds, per metric name and
    pair of rankers, the sums of the per-list differences (constant size; merged, all-reduced
    and checkpointed as any metric's). ``compute()`` returns, per name: each ranker's mean
    (``"ndcg@10/model"``), the number of lists compared (``"ndcg@10/count"``), and per pair
    ``"ndcg@10/model-vs-popularity/{diff,stderr,ci_low,ci_high,t,p_value}"`` (the mean
    difference, its standard error, the Student-t interval at ``confidence``, the paired t statistic
    and its two-sided p-value; with three or more rankers also ``p_holm`` and
    ``p_bonferroni``). See `rankstream.core.lists.paired` for the formulas and what they assume.

    The engine's output: ``{"y_pred": {ranker: scores}, "y": labels}`` with optional ``"mask"``
    and ``"sample_weight"``, or ``y_pred`` stacked ``(batch, len(rankers), list_size)``. Each
    metric takes the defaults of its class here, as `ListMetrics`.
    """

    def __init__(
        self,
        metrics: list[str],
        rankers: list[str],
        ignore_zero_hits: bool = True,
        output_transform: Callable[[Any], Any] = _identity,
        device: str | torch.device = _CPU,
        skip_unrolling: bool = False,
        *,
        confidence: float = DEFAULT_LEVEL,
        ties: str = "first",
        seed: int | None = None,
        prefix: str = "",
    ) -> None:
        empty = empty_policy(ignore_zero_hits)
        kernel = PairedKernel(
            metrics, rankers, PEER_DEFAULTS, confidence=confidence, empty=empty, ties=ties, seed=seed
        )
        self.metrics, self.rankers, self.confidence = kernel.metrics, kernel.rankers, kernel.confidence
        self.ignore_zero_hits = ignore_zero_hits
        super().__init__(kernel, output_transform, device, skip_unrolling, prefix)

    def _batch(self, output: Any) -> tuple[torch.Tensor, None]:
        """The flat sums of one update input (each ranker's scores; no query ids)."""
        y_pred, *rest = unpack_output(output)
        if isinstance(y_pred, Mapping):
            y_pred = {r: _to_tensor(v, f"y_pred[{r!r}]") for r, v in y_pred.items()}
            like = next(iter(y_pred.values()), None)
        else:
            y_pred = like = _to_tensor(y_pred, "y_pred")
        y, mask, weight = (_to_tensor(v, k) for k, v in zip(_OUTPUT_KEYS[1:], rest, strict=True))
        ctx = self._runtime.context(like, torch_ops())
        flat = execution.batch_sums(self._kernel, ctx, y_pred, y, mask, weight, flat=self._fields)
        return flat.to(device=self._device, dtype=self._dtype()), None


PairedComparison.__doc__ = docstring(
    inspect.cleandoc(PairedComparison.__doc__ or ""),
    inspect.signature(PairedComparison),
    {
        **LIST_ARGS,
        "metrics": 'the metric names, e.g. ``["ndcg@10", "map@5"]`` (as `ListMetrics`).',
        "rankers": "the rankers' names (two or more, without ``/`` or ``-vs-``): the keys of ``y_pred``, "
        "or the order of its second axis when stacked. A difference is the earlier minus the later.",
        "ignore_zero_hits": LIST_ARGS["ignore_zero_hits"].removesuffix(".") + ", for all.",
        "confidence": "the confidence level of the intervals, in (0, 1) (default 0.95).",
        "ties": LIST_ARGS["ties"].removesuffix(".") + ", for all.",
        "prefix": "prepended to every key (two comparisons on one engine).",
    },
)
