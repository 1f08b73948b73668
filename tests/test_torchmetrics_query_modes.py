"""rankstream.torchmetrics where batches cut queries, the way users meet it: a plain
``torch.utils.data.DataLoader`` (``batch_size=1000``, no shuffle) over a flat log of 30-item
queries feeds a ``MetricCollection``; every value is compared with torchmetrics' own classes
on the same batches.

* the default ``query_mode="contiguous"`` gives torchmetrics' value (``update`` and
  ``forward``), with the query ids in any order as long as each query's items are together;
* ids that come back after their query closed (a shuffling ``DataLoader``, a log holding a
  query in two places) are a ``ValueError`` naming ``query_mode="any"``, which leaves the
  state as it was; ``query_mode="any"`` then gives torchmetrics' value;
* ``query_mode="whole"`` on the same loader does not (why it is not the default);
* checkpoints and ``reset()`` with an open query.
"""

from __future__ import annotations

import pytest
import torch
import torchmetrics.retrieval as tmr
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MetricCollection

import rankstream.torchmetrics as rt

NAMES = {
    "ndcg": ("RetrievalNormalizedDCG", {"top_k": 10}),
    "ndcg_all": ("RetrievalNormalizedDCG", {}),
    "map": ("RetrievalMAP", {"top_k": 10}),
    "mrr": ("RetrievalMRR", {"top_k": 10}),
    "precision": ("RetrievalPrecision", {"top_k": 10}),
    "recall": ("RetrievalRecall", {"top_k": 10}),
    "hit_rate": ("RetrievalHitRate", {"top_k": 5}),
    "r_precision": ("RetrievalRPrecision", {}),
}


def flat_log(seed: int, queries: int = 200, size: int = 30, ignored: bool = False) -> TensorDataset:
    """``queries`` queries of ``size`` items, each query's items together, the queries in a
    random order of ids (not sorted, not 0..Q-1); distinct scores (about a third <= 0, which
    torchmetrics does not retrieve), about 10% relevant items (some queries have none); with
    ``ignored``, about 5% of the targets are -1."""
    g = torch.Generator().manual_seed(seed)
    ids = (torch.randperm(10_000, generator=g)[:queries] - 300).repeat_interleave(size)
    n = ids.shape[0]
    preds = (torch.randperm(n, generator=g).double() - n / 3) / n
    target = (torch.rand(n, generator=g) < 0.1).long()
    if ignored:
        target[torch.rand(n, generator=g) < 0.05] = -1
    return TensorDataset(preds, target, ids)


def collection(module: object, **kw: object) -> MetricCollection:
    return MetricCollection({key: getattr(module, name)(**args, **kw) for key, (name, args) in NAMES.items()})


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert abs(float(got[key]) - float(want[key])) <= 1e-6, (key, float(got[key]), float(want[key]))


@pytest.mark.parametrize("ignore_index", [None, -1])
def test_a_dataloader_cutting_queries_gives_torchmetrics_value(ignore_index: int | None) -> None:
    log = flat_log(0, ignored=ignore_index is not None)
    loader = DataLoader(log, batch_size=1000, shuffle=False)
    ours, peer = collection(rt, ignore_index=ignore_index), collection(tmr, ignore_index=ignore_index)
    whole = rt.RetrievalNormalizedDCG(top_k=10, ignore_index=ignore_index, query_mode="whole")
    for preds, target, indexes in loader:
        ours.update(preds, target, indexes=indexes)
        peer.update(preds, target, indexes=indexes)
        whole.update(preds, target, indexes=indexes)
    assert len(loader) == 6 and 1000 % 30 != 0  # five cuts, each inside a query
    assert_same(ours.compute(), peer.compute())
    # the same batches read as whole queries count each cut query twice: another number
    assert abs(float(whole.compute()) - float(peer.compute()["ndcg"])) > 1e-4


def test_forward_gives_torchmetrics_batch_values_and_epoch_value() -> None:
    loader = DataLoader(flat_log(1), batch_size=1000, shuffle=False)
    ours, peer = collection(rt), collection(tmr)
    for preds, target, indexes in loader:
        # the batch's own value: its items alone (a cut query's piece counts as a query there,
        # in torchmetrics' forward as here); the epoch state joins the pieces
        assert_same(ours(preds, target, indexes=indexes), peer(preds, target, indexes=indexes))
    assert_same(ours.compute(), peer.compute())


def test_ids_that_come_back_are_refused_naming_the_mode_that_takes_them() -> None:
    log = flat_log(2)
    shuffled = DataLoader(log, batch_size=1000, shuffle=True, generator=torch.Generator().manual_seed(3))
    batches = list(shuffled)
    ours = collection(rt)
    ours.update(*batches[0][:2], indexes=batches[0][2])  # one update: any order within it
    single = rt.RetrievalMAP(top_k=10)
    single.update(*batches[0][:2], indexes=batches[0][2])
    before = {
        k: [x.clone() for x in v] if isinstance(v, list) else v.clone()
        for k, v in single.metric_state.items()
    }
    preds, target, indexes = batches[1]
    back = sorted(set(indexes.tolist()) & set(batches[0][2].tolist()) - {int(batches[0][2][-1])})
    assert back  # ids of the first batch's closed queries come back in the second
    for metric in (single, ours):
        with pytest.raises(ValueError, match=r"query_mode='any'") as err:
            metric.update(preds, target, indexes=indexes)
        assert f"query id(s) {back[0]}, " in str(err.value) and "The state is unchanged" in str(err.value)
    after = single.metric_state
    for key, value in before.items():  # the failed update left the state as it was
        if isinstance(value, list):
            assert len(value) == len(after[key]) and all(
                torch.equal(a, b) for a, b in zip(value, after[key], strict=True)
            )
        else:
            assert torch.equal(value, after[key]), key
    # the mode the error names gives torchmetrics' value on the shuffled batches
    anywhere, peer = collection(rt, query_mode="any"), collection(tmr)
    for preds, target, indexes in batches:
        anywhere.update(preds, target, indexes=indexes)
        peer.update(preds, target, indexes=indexes)
    assert_same(anywhere.compute(), peer.compute())


def test_a_query_in_two_places_is_refused_and_any_order_within_an_update_is_not() -> None:
    p = torch.tensor([0.9, 0.1, 0.8, 0.3, 0.5, 0.4])
    t = torch.tensor([1, 0, 0, 1, 1, 0])
    within = rt.RetrievalMRR()  # one update: queries 5 and 3 interleaved, as torchmetrics takes them
    within.update(p, t, torch.tensor([5, 3, 5, 3, 5, 3]))
    peer = tmr.RetrievalMRR()
    peer.update(p, t, torch.tensor([5, 3, 5, 3, 5, 3]))
    assert float(within.compute()) == pytest.approx(float(peer.compute()), abs=1e-7)
    twice = rt.RetrievalMRR()
    twice.update(p[:4], t[:4], torch.tensor([5, 5, 3, 3]))  # 5 closes: 3 follows it
    with pytest.raises(ValueError, match=r"query id\(s\) 5 came again .* holds 2 query ids, from 4 to 5"):
        twice.update(p[4:], t[4:], torch.tensor([5, 4]))
    twice.update(p[4:], t[4:], torch.tensor([3, 4]))  # 3 was open: it goes on
    peer = tmr.RetrievalMRR()
    peer.update(p, t, torch.tensor([5, 5, 3, 3, 3, 4]))
    assert float(twice.compute()) == pytest.approx(float(peer.compute()), abs=1e-7)


def test_a_checkpoint_mid_query_resumes_to_torchmetrics_value() -> None:
    batches = list(DataLoader(flat_log(4), batch_size=1000, shuffle=False))
    saved = rt.RetrievalNormalizedDCG(top_k=10)
    saved.persistent(True)
    for preds, target, indexes in batches[:2]:
        saved.update(preds, target, indexes)
    assert saved.carry_indexes[0].shape[0] == 2000 % 30  # the query cut at item 2,000 is open
    state = saved.state_dict()
    resumed = rt.RetrievalNormalizedDCG(top_k=10)
    resumed.persistent(True)
    resumed.load_state_dict(state)
    peer = tmr.RetrievalNormalizedDCG(top_k=10)
    for preds, target, indexes in batches[2:]:
        resumed.update(preds, target, indexes)
    for preds, target, indexes in batches:
        peer.update(preds, target, indexes)
    assert abs(float(resumed.compute()) - float(peer.compute())) <= 1e-6
    # the closed ids came with the checkpoint: an id of the first batches is still refused
    preds, target, indexes = batches[0]
    with pytest.raises(ValueError, match="query_mode='any'"):
        resumed.update(preds[:5], target[:5], indexes[:5])


def test_reset_forgets_the_open_query_and_the_closed_ids() -> None:
    batches = list(DataLoader(flat_log(5, queries=40), batch_size=1000, shuffle=False))
    metric = rt.RetrievalMAP(top_k=10)
    for preds, target, indexes in batches:
        metric.update(preds, target, indexes)
    metric.reset()
    assert len(metric.carry_indexes) == 0 and len(metric.closed_ids) == 0
    peer = tmr.RetrievalMAP(top_k=10)
    for preds, target, indexes in batches:  # the same ids again: a new epoch, not a return
        metric.update(preds, target, indexes)
        peer.update(preds, target, indexes)
    assert abs(float(metric.compute()) - float(peer.compute())) <= 1e-6
