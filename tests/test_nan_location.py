"""A NaN score says where it is: how many NaN scores the batch holds among its items (masked
items and, for the torchmetrics adapter, ignored ones left out), the first one's row and item
(row-major) and the batch's shape, on every path that raises in ``update``: the list and rank
metrics through an Ignite ``Engine``, the functional forms, ``State``, both paths of a CPU
torch batch, a batch selected in blocks of rows, and the torchmetrics adapter. The expected
places are where the test puts its NaN scores. Where nothing is read back, ``compute()``
counts the lists and says how to find them. And the location is looked for only once a NaN
was found: a clean batch never builds the message."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from ignite.engine import Engine

import rankstream.adapters.torchmetrics_flat as torchmetrics_flat
import rankstream.core.execution.blocks as base
import rankstream.core.inputs as inputs
import rankstream.core.lists.selection as selection
import rankstream.core.sizes as sizes
from rankstream import MAPKernel, State, map_at_k, ndcg_at_k, r_precision
from rankstream.core.backends import read_back
from rankstream.core.ranks.kernel import RankKernel
from rankstream.ignite import MAP, NDCG, HitsAtK, ListMetrics, RankBasedMetrics, RPrecision
from rankstream.torchmetrics import RetrievalMAP, RetrievalNormalizedDCG

pytestmark = pytest.mark.usefixtures("list_path")

B, N = 16, 8
#: where the test puts NaN scores: the first one in row-major order is (4, 2); (2, 5) is masked
#: out (not an item of its list), so it is neither counted nor the first
NANS = [(4, 2), (7, 1), (9, 0), (4, 6)]
MASKED_NAN = (2, 5)


def batch(seed: int = 0, masked: bool = True):
    rng = np.random.default_rng(seed)
    scores = rng.random((B, N))
    labels = (rng.random((B, N)) < 0.4).astype(np.float64)
    labels[:, 0] = 1.0
    mask = np.ones((B, N), dtype=bool)
    for r, c in NANS:
        scores[r, c] = np.nan
    if masked:
        mask[MASKED_NAN] = False
        scores[MASKED_NAN] = np.nan
    return scores, labels, mask


def expected(among: str, item: str = "item", count: int = len(NANS), first=(4, 2), shape=(B, N)) -> str:
    """The message as a pattern, from the places the test chose."""
    return re.escape(
        f"y_pred contains {count} NaN scores {among} (first at row {first[0]}, {item} {first[1]} of a "
        f"{shape} batch)"
    )


def run_engine(metric, data):
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    return engine.run(data)


# -- list metrics --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [lambda: MAP(top_k=3), lambda: NDCG(top_k=[1, 5]), RPrecision, lambda: ListMetrics(["map@3", "auc"])],
)
def test_list_metrics_say_where_through_an_engine(make):
    s, y, m = batch()
    clean = batch(1, masked=False)
    data = [
        (torch.from_numpy(clean[0]), torch.from_numpy(clean[1])),
        (torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}),
    ]
    with pytest.raises(ValueError, match=expected("among the items in the lists")):
        run_engine(make(), data)


def test_functional_forms_and_state_say_where():
    s, y, m = batch()
    for fn in (map_at_k, ndcg_at_k):
        for arrays in (lambda x: x, torch.from_numpy):
            with pytest.raises(ValueError, match=expected("among the items in the lists")):
                fn(arrays(s), arrays(y), 3, mask=arrays(m))
    with pytest.raises(ValueError, match=expected("among the items in the lists")):
        r_precision(s, y, mask=m)
    state = State(MAPKernel([1, 3]))
    with pytest.raises(ValueError, match=expected("among the items in the lists")):
        state.update(s, y, m)


def test_one_nan_score_unmasked():
    s, y, _ = batch(masked=False)
    for r, c in NANS[1:]:
        s[r, c] = 0.5
    with pytest.raises(
        ValueError, match=expected("among the items in the lists", count=1).replace("scores", "score")
    ):
        map_at_k(s, y, 3)


def test_a_batch_selected_in_blocks_of_rows_says_where_in_the_batch(monkeypatch):
    """The rows selected block by block: the count is the batch's and the row the batch's
    (not the block's): the first NaN lies in the second block of four rows."""
    monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, select_blocks_from=0, select_share=0))
    cut = selection.row_slices
    monkeypatch.setattr(selection, "row_slices", lambda b, step: cut(b, 4))
    monkeypatch.setattr(base, "row_slices", lambda b, step: cut(b, 4))
    seen = []
    decide = base.selection_blocks
    monkeypatch.setattr(base, "selection_blocks", lambda *a, **k: seen.append(decide(*a, **k)) or seen[-1])
    s, y, m = batch()
    metric = MAP(top_k=3)
    metric.reset()
    with pytest.raises(ValueError, match=expected("among the items in the lists")):
        metric.update((torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}))
    assert seen and all(blocks is not None and len(blocks) == B // 4 for blocks in seen)


# -- rank metrics --------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: HitsAtK(k=[1, 3]), lambda: RankBasedMetrics(ks=[1])])
@pytest.mark.parametrize("target", ["index", "labels"])
def test_rank_metrics_say_where_through_an_engine(make, target):
    s, y, m = batch()
    y_true = torch.zeros(B, dtype=torch.long) if target == "index" else torch.from_numpy(y)
    data = [(torch.from_numpy(s), y_true, {"mask": torch.from_numpy(m)})]
    with pytest.raises(ValueError, match=expected("among the candidates", "candidate")):
        run_engine(make(), data)


def test_rank_state_says_where():
    s, _, m = batch()
    with pytest.raises(ValueError, match=expected("among the candidates", "candidate")):
        State(RankKernel(ks=[1])).update(s, np.zeros(B, dtype=np.int64), m)


# -- nothing read back: compute() counts the lists -----------------------------------------


def test_where_nothing_is_read_back_compute_counts_the_lists_and_says_how_to_find_them():
    s, y, m = batch()
    metric = MAP(top_k=3)
    metric.reset()
    with read_back(False):
        metric.update((torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}))
    rows_with_nan = len({r for r, _ in NANS})
    with pytest.raises(
        ValueError, match=rf"MAP: {rows_with_nan} list\(s\) had NaN scores.*update\(\) then raises"
    ):
        metric.compute()
    metric.reset()
    with pytest.raises(ValueError, match=expected("among the items in the lists")):
        metric.update((torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}))


# -- the torchmetrics adapter --------------------------------------------------------------


@pytest.mark.parametrize("cls", [RetrievalMAP, RetrievalNormalizedDCG])
def test_torchmetrics_adapter_says_where(cls):
    preds = torch.rand(12, dtype=torch.float64)
    target = torch.tensor([1, 0, 0, 1, 0, 1, -1, 0, 0, -1, 0, 1])
    ids = torch.arange(12) // 4
    preds[6] = preds[7] = preds[10] = float("nan")  # item 6 is ignored (target -1)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "preds contains 2 NaN scores among the items not ignored (target != -1) (first at item 7 of a "
            "(12,) batch, query id 1)"
        ),
    ):
        cls(ignore_index=-1).update(preds, target, ids)
    with pytest.raises(
        ValueError,
        match=re.escape("preds contains 3 NaN scores (first at row 1, item 2 of a (3, 4) batch, query id 1)"),
    ):
        cls().update(preds.reshape(3, 4), target.clamp(min=0).reshape(3, 4), ids.reshape(3, 4))


# -- the happy path never looks for a NaN's place -------------------------------------------


def test_a_clean_batch_never_builds_the_message(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the NaN message was built for a batch without NaN scores")

    monkeypatch.setattr(inputs, "nan_summary", refuse)
    monkeypatch.setattr(torchmetrics_flat, "nan_summary", refuse)
    s, y, m = batch(masked=False)
    for r, c in NANS:
        s[r, c] = 0.25
    m[MASKED_NAN] = False
    s[MASKED_NAN] = np.nan  # masked out: no item of its list
    st, yt, mt = torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}
    for metric in (MAP(top_k=3), ListMetrics(["ndcg@3", "auc"]), RankBasedMetrics(ks=[1]), HitsAtK(k=1)):
        metric.reset()
        metric.update((st, yt, mt))  # binary labels for the rank metrics too
    RetrievalMAP().update(torch.rand(8), torch.tensor([1, 0] * 4), torch.arange(8) // 4)
