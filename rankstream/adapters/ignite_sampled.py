"""The Ignite side of sampled evaluation: the histogram of sampled ranks as the state, summed
across processes by ``idist`` (lifecycle only; the math is `rankstream.core.sampled`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence  # noqa: F401  (the constructor's signature names them)
from typing import Any

import torch
from ignite.exceptions import NotComputableError
from ignite.metrics.metric import Metric, reinit__is_reduced, sync_all_reduce

from rankstream.adapters.ignite_derive import core_init
from rankstream.core.sampled_state import SampledRanks, report, split_state


def _identity(x: Any) -> Any:
    return x


class SampledRankMetrics(Metric):
    """Sampled evaluation with corrected estimates of the full-catalog metrics, as an Ignite
    metric: the state is one float64 vector on ``device``, the histogram of sampled ranks, that of
    squared list weights and the number of lists (``2 (num_negatives + 1) + 1`` sums, the layout
    of `rankstream.core.sampled_state.split_state`), all-reduced (SUM) by ``idist`` in
    ``compute()``.

    ``update`` takes the sampled ranks ``(B,)`` (integers in ``1..num_negatives + 1``) or a pair
    ``(pos_scores (B,), neg_scores (B, num_negatives))`` ranked with ``ties``, or either with list
    weights: ``(pos_scores, neg_scores, weights)`` or a dict with the keys ``ranks`` or
    ``pos_scores`` and ``neg_scores``, and ``weights`` (``(B,)``, finite, ``>= 0``). ``compute()``
    returns the dict of `rankstream.core.sampled_state.SampledRanks.compute` (``"ndcg@10_fitted"``,
    ...), which ignite flattens into ``engine.state.metrics``. A bad update raises and leaves the
    state as it was; an epoch without a list raises ``NotComputableError``. The update reads the
    batch on the host (to validate it and count ties).

    Args:
        num_items: the catalog size ``n`` (the positive and the ``n - 1`` items it competes
            with in the full ranking).
        num_negatives: ``m``, the negatives sampled per positive.
        ks: cut-offs of hit_rate@k, ndcg@k, mrr@k (default ``(1, 5, 10)``).
        gamma: the bias-variance trade-off in ``[0, 1]`` (default 0.1).
        confidence: None or a level such as 0.95 (``_stderr``, ``_ci_low``, ``_ci_high`` of the
            sampled and corrected estimates: sampling variance only, not bias).
        ties: ``"realistic"`` (default), ``"optimistic"`` or ``"pessimistic"``.
        output_transform, device, skip_unrolling: ignite's.

    ``state_dict()`` / ``load_state_dict()`` carry the histogram (ignite's checkpointing).
    """

    _state_dict_all_req_keys = ("_hist",)

    @core_init(
        SampledRanks,
        (
            ("output_transform", _identity, "Callable[[Any], Any]"),
            ("device", torch.device("cpu"), "str | torch.device"),
            ("skip_unrolling", False, "bool"),
        ),
    )
    def __init__(self, core: SampledRanks, a: dict[str, Any]) -> None:
        self._core = core
        self.num_items, self.num_negatives = core.num_items, core.num_negatives
        self.ks, self.gamma, self.confidence, self.ties = a["ks"], a["gamma"], a["confidence"], a["ties"]
        super().__init__(a["output_transform"], device=a["device"], skip_unrolling=a["skip_unrolling"])

    @reinit__is_reduced
    def reset(self) -> None:
        size = 2 * (self.num_negatives + 1) + 1
        self._hist = torch.zeros(size, dtype=torch.float64, device=self._device)

    @reinit__is_reduced
    def update(self, output: Any) -> None:
        if isinstance(output, dict):
            unknown = set(output) - {"ranks", "pos_scores", "neg_scores", "weights"}
            if unknown or ("ranks" in output) == ("pos_scores" in output):
                raise ValueError(
                    "output as a dict must hold 'ranks' or 'pos_scores' and 'neg_scores', and optionally "
                    f"'weights'; got the keys {sorted(output)}"
                )
            first = output["ranks"] if "ranks" in output else output["pos_scores"]
            batch = self._core.batch(first, output.get("neg_scores"), output.get("weights"))
        elif isinstance(output, (tuple, list)) and len(output) in (2, 3):
            batch = self._core.batch(*output)
        else:
            batch = self._core.batch(output)
        self._hist += torch.as_tensor(batch, dtype=torch.float64, device=self._device)

    @sync_all_reduce("_hist")
    def compute(self) -> dict[str, float]:
        h, squares, lists = split_state(self._hist.cpu().numpy(), self.num_negatives)
        if not float(h.sum()) > 0:
            raise NotComputableError(
                "SampledRankMetrics must have at least one list before it can be computed"
            )
        core = self._core

        return report(h, core.num_items, core.ks, core.gamma, core.confidence, squares, lists, core.design)
