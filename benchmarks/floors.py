"""The floors the speed targets are measured against (issue 12): the least a metric of each kind
must do, written plainly, with no validation, tie policy or empty-list handling.

* :func:`minimal_ndcg`: nDCG@k in seven torch ops: top-k of the scores, gather of the labels,
  top-k of the labels (the ideal ranking), the discounts, a stack, a divide and a sum (then the
  ratio of the two rows). Linear gains: the least work an nDCG can do.
* :func:`minimal_map`: the MAP@k analogue: top-k, gather, the 0/1 relevance, its cumulative sum
  (precision at every rank), the relevant count per list (a full pass, as every AP needs), and
  the ratio.
* :func:`sort_floor`: one full ``torch.sort`` of the scores (whole-list metrics must rank
  every item).
* :func:`topk_floor_metric`: a Keras metric whose update is one ``ops.top_k`` of the scores
  summed into a variable: the least a compiled top-k metric step can do.
"""

from __future__ import annotations

from typing import Any

import torch


def minimal_ndcg(scores: torch.Tensor, labels: torch.Tensor, k: int, ranks: torch.Tensor) -> torch.Tensor:
    """nDCG@k per list; ``ranks`` is ``2..k+1`` (made once, outside the timed call)."""
    idx = torch.topk(scores, k, dim=1).indices
    ranked = torch.gather(labels, 1, idx)
    ideal = torch.topk(labels, k, dim=1).values
    disc = torch.log2(ranks)
    dcg = torch.sum(torch.stack((ranked, ideal)) / disc, dim=-1)
    return dcg[0] / dcg[1]


def minimal_map(scores: torch.Tensor, labels: torch.Tensor, k: int, ranks: torch.Tensor) -> torch.Tensor:
    """AP@k per list with ``Z = min(R, k)``; ``ranks`` is ``1..k`` (made once)."""
    idx = torch.topk(scores, k, dim=1).indices
    rel = (torch.gather(labels, 1, idx) > 0).to(scores.dtype)
    precision_sum = torch.sum(torch.cumsum(rel, dim=1) / ranks * rel, dim=1)
    n_rel = torch.sum(labels > 0, dim=1)
    return precision_sum / torch.clamp(n_rel, max=k)


def sort_floor(scores: torch.Tensor) -> Any:
    """One full sort of every list's scores."""
    return torch.sort(scores, dim=-1, descending=True)


def topk_floor_metric(k: int = 10) -> Any:
    """A Keras metric (current backend) adding the sum of the top ``k`` scores of every batch
    into one variable: one ``ops.top_k`` per update, nothing else."""
    import keras
    from keras import ops

    class TopKFloor(keras.metrics.Metric):
        def __init__(self, name: str = "topk_floor") -> None:
            super().__init__(name=name)
            self.total = self.add_variable((), "zeros", "float32", name="total")

        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            self.total.assign_add(ops.sum(ops.top_k(y_pred, k)[0]))

        def result(self) -> Any:
            return ops.convert_to_tensor(self.total)

    return TopKFloor()
