"""rankstream.torchmetrics against torchmetrics 1.9 itself (its Retrieval* metrics on the same
flat input), scikit-learn (per-query AUC) and naive per-query formulas (the new metrics)."""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torchmetrics.retrieval as tmr
from _hang_guard import HANG_GUARD_S, run
from sklearn.metrics import roc_auc_score
from torchmetrics import MetricCollection

import rankstream.torchmetrics as rt

PEERS = ["RetrievalPrecision", "RetrievalRecall", "RetrievalMAP", "RetrievalMRR", "RetrievalHitRate",
         "RetrievalNormalizedDCG", "RetrievalRPrecision"]  # fmt: skip


def flat_data(seed: int, n_queries: int = 24, graded: bool = False, ignored: bool = False) -> tuple:
    """Ragged queries (1 to 14 items) in random order: continuous scores about half of them
    <= 0 (no ties), queries without a relevant item, queries whose relevant items all score
    <= 0; with ``ignored``, some targets are -1."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 15, (n_queries,), generator=g)
    ids = torch.randperm(1000, generator=g)[:n_queries] - 50
    indexes = torch.repeat_interleave(ids, sizes)
    n = indexes.shape[0]
    preds = torch.randn(n, generator=g)
    high = 4 if graded else 2
    target = torch.randint(0, high, (n,), generator=g)
    target[indexes == ids[0]] = 0  # a query without a relevant item
    second = indexes == ids[1]
    target[second] = (preds[second] <= 0).long()  # relevant items only where the score is <= 0
    if ignored:
        target[torch.rand(n, generator=g) < 0.15] = -1
    perm = torch.randperm(n, generator=g)
    return preds[perm], target[perm], indexes[perm]


def both(name: str, **kw: object) -> tuple:
    return getattr(rt, name)(**kw), getattr(tmr, name)(**kw)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-5, abs_tol=1e-6)


def combos(name: str) -> list[dict]:
    top_ks = [None] if name == "RetrievalRPrecision" else [None, 1, 3, 20]
    adaptive = [False, True] if name == "RetrievalPrecision" else [False]
    out = []
    for top_k, ad, eta, agg in itertools.product(
        top_ks, adaptive, ["neg", "pos", "skip"], ["mean", "max", "min"]
    ):
        kw: dict = {"empty_target_action": eta, "aggregation": agg}
        if name != "RetrievalRPrecision":
            kw["top_k"] = top_k
        if ad:
            kw["adaptive_k"] = True
        out.append(kw)
    return out


@pytest.mark.parametrize("name", PEERS)
@pytest.mark.parametrize("ignore_index", [None, -1])
def test_equals_torchmetrics_every_argument(name: str, ignore_index: int | None) -> None:
    graded = name == "RetrievalNormalizedDCG"
    data = [flat_data(s, graded=graded, ignored=ignore_index is not None) for s in (0, 1)]
    for kw in combos(name):
        ours, peer = both(name, ignore_index=ignore_index, **kw)
        for preds, target, indexes in data:  # two updates of whole queries (disjoint ids)
            ours.update(preds, target, indexes + 10_000 * (preds is data[1][0]))
            peer.update(preds, target, indexes + 10_000 * (preds is data[1][0]))
        assert close(ours.compute(), peer.compute()), (name, kw, float(ours.compute()), float(peer.compute()))


@pytest.mark.parametrize("name", PEERS)
def test_error_action_raises_at_compute_as_torchmetrics(name: str) -> None:
    preds, target, indexes = flat_data(3, graded=name == "RetrievalNormalizedDCG")
    ours, peer = both(name, empty_target_action="error")
    ours.update(preds, target, indexes)
    peer.update(preds, target, indexes)
    with pytest.raises(ValueError, match="no positive target"):
        peer.compute()
    n_empty = sum(int(target[indexes == q].sum() == 0) for q in torch.unique(indexes))
    assert n_empty >= 1
    with pytest.raises(
        ValueError, match=rf"{n_empty} queries have no positive target \(empty_target_action='error'\)"
    ):
        ours.compute()
    full = torch.unique(indexes[target > 0])  # only queries with a relevant item: no error
    keep = torch.isin(indexes, full)
    ours, peer = both(name, empty_target_action="error")
    ours.update(preds[keep], target[keep], indexes[keep])
    peer.update(preds[keep], target[keep], indexes[keep])
    assert close(ours.compute(), peer.compute())


def batches(mode: str, preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor) -> list[tuple]:
    """Four batches: whole queries (``"whole"``), sorted ids cut anywhere (``"sorted"``: queries
    span batches), each query's items together with the queries in a random order of ids, cut
    anywhere (``"contiguous"``), or any order cut anywhere (``"any"``)."""
    n = indexes.shape[0]
    if mode == "whole":
        ids = torch.unique(indexes)
        return [(preds[m], target[m], indexes[m]) for m in (torch.isin(indexes, ids[i::4]) for i in range(4))]
    if mode == "contiguous":
        ids, place = torch.unique(indexes, return_inverse=True)
        rank = torch.randperm(ids.shape[0], generator=torch.Generator().manual_seed(n))  # not sorted
        order = torch.sort(rank[place], stable=True).indices
    else:
        order = torch.sort(indexes, stable=True).indices if mode == "sorted" else torch.randperm(n)
    cuts = [0, n // 5, n // 2, n // 2 + 3, n]
    return [(preds[order[a:b]], target[order[a:b]], indexes[order[a:b]]) for a, b in itertools.pairwise(cuts)]


@pytest.mark.parametrize("mode", ["contiguous", "whole", "sorted", "any"])
@pytest.mark.parametrize("name", PEERS)
def test_query_modes_equal_torchmetrics(mode: str, name: str) -> None:
    preds, target, indexes = flat_data(5, n_queries=30, graded=name == "RetrievalNormalizedDCG")
    kw = {} if name == "RetrievalRPrecision" else {"top_k": 4}
    for agg in ("mean", "max", "min"):
        ours = getattr(rt, name)(aggregation=agg, query_mode=mode, **kw)
        peer = getattr(tmr, name)(aggregation=agg, **kw)
        for b in batches(mode, preds, target, indexes):
            ours.update(*b)
        peer.update(preds, target, indexes)
        assert close(ours.compute(), peer.compute()), (
            mode,
            agg,
            float(ours.compute()),
            float(peer.compute()),
        )


def test_sorted_mode_keeps_one_open_query_and_refuses_a_closed_id() -> None:
    m = rt.RetrievalMAP(query_mode="sorted")
    m.update(torch.tensor([0.5, -0.1, 0.3]), torch.tensor([1, 0, 1]), torch.tensor([1, 1, 2]))
    assert [x.tolist() for x in m.carry_indexes] == [[2]]  # query 1 closed, query 2 open
    before = {k: v.clone() if isinstance(v, torch.Tensor) else list(v) for k, v in m.metric_state.items()}
    with pytest.raises(ValueError, match="sorted by query id across batches: id 1 arrives after id 2"):
        m.update(torch.tensor([0.2]), torch.tensor([1]), torch.tensor([1]))
    with pytest.raises(ValueError, match="id 2 arrives after id 3"):
        m.update(torch.tensor([0.2, 0.1]), torch.tensor([1, 1]), torch.tensor([3, 2]))
    after = m.metric_state
    for k, v in before.items():  # a failed update leaves the state untouched
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, after[k]), k
        else:
            assert [x.tolist() for x in v] == [x.tolist() for x in after[k]], k


def test_metric_collection_forward_and_save(tmp_path: Path) -> None:
    data = [flat_data(s) for s in (7, 8)]
    names = ["RetrievalMAP", "RetrievalMRR", "RetrievalPrecision", "RetrievalRecall"]
    ours = MetricCollection({n: getattr(rt, n)(top_k=5) for n in names})
    peer = MetricCollection({n: getattr(tmr, n)(top_k=5) for n in names})
    for i, (preds, target, indexes) in enumerate(data):
        batch_ours = ours(preds, target, indexes + 5000 * i)  # forward: the batch's own values
        batch_peer = peer(preds, target, indexes + 5000 * i)
        assert all(close(batch_ours[n], batch_peer[n]) for n in names)
    got, want = ours.compute(), peer.compute()
    assert all(close(got[n], want[n]) for n in names), (got, want)
    path = tmp_path / "metric.pt"
    torch.save(ours["RetrievalMAP"], path)
    loaded = torch.load(path, weights_only=False)
    assert close(loaded.compute(), want["RetrievalMAP"])
    single = rt.RetrievalMAP(top_k=5)
    single.persistent(True)
    src = ours["RetrievalMAP"]
    src.persistent(True)
    single.load_state_dict(src.state_dict())
    with pytest.warns(UserWarning, match="called before the ``update``"):  # torchmetrics' own note
        assert close(single.compute(), want["RetrievalMAP"])


def test_sorted_forward_reads_the_carried_query() -> None:
    preds, target, indexes = flat_data(9)
    ours = rt.RetrievalNormalizedDCG(query_mode="sorted")
    parts = batches("sorted", preds, target, indexes)
    for b in parts:
        ours(*b)
    peer = tmr.RetrievalNormalizedDCG()
    peer.update(preds, target, indexes)
    assert close(ours.compute(), peer.compute())


def test_each_mode_holds_what_its_docs_say_where_torchmetrics_grows() -> None:
    """1,000 updates of 64 whole queries of 64 items: ``"whole"`` keeps its seven numbers (six
    sums and the identity marker of compute groups), the default ``"contiguous"`` those, the
    open query's 64 items (three numbers each) and one id per closed query, torchmetrics three
    numbers per item."""
    g = torch.Generator().manual_seed(0)
    whole, default = rt.RetrievalMAP(top_k=10, query_mode="whole"), rt.RetrievalMAP(top_k=10)
    peer = tmr.RetrievalMAP(top_k=10)

    def size(metric: object) -> int:
        state = metric.metric_state
        return sum(x.numel() for v in state.values() for x in (v if isinstance(v, list) else [v]))

    start = size(whole)
    base = torch.arange(64).repeat_interleave(64)  # 64 whole queries of 64 items: 4,096 items
    for step in range(1000):
        preds = torch.randn(4096, generator=g)
        target = torch.randint(0, 2, (4096,), generator=g)
        whole.update(preds, target, base + 64 * step)
        default.update(preds, target, base + 64 * step)
        if step < 5:
            peer.update(preds, target, base + 64 * step)
    assert size(whole) == start == 7
    assert size(default) == 7 + 3 * 64 + (64 * 1000 - 1)  # sums, the open query, the closed ids
    assert len(default.closed_ids) <= math.log2(64 * 1000) + 1  # the ids in a few sorted chunks
    assert size(peer) == 5 * 3 * 4096  # indexes, preds and target of every item
    assert 0.0 < float(whole.compute()) < 1.0
    assert float(default.compute()) == pytest.approx(float(whole.compute()), rel=1e-12)  # whole queries


def test_bad_arguments_and_inputs_are_named() -> None:
    with pytest.raises(
        ValueError, match=r"aggregation must be one of \('mean', 'max', 'min'\), got 'median': a median"
    ):
        rt.RetrievalMAP(aggregation="median")
    with pytest.raises(ValueError, match=r"empty_target_action must be one of .* got 'zero'"):
        rt.RetrievalMAP(empty_target_action="zero")
    with pytest.raises(ValueError, match="top_k must be a positive integer or None, got 0"):
        rt.RetrievalRecall(top_k=0)
    with pytest.raises(ValueError, match="query_mode must be one of"):
        rt.RetrievalRecall(query_mode="streamed")
    m = rt.RetrievalMAP()
    with pytest.raises(
        ValueError, match=r"target must hold binary values \(0 or 1\) for RetrievalMAP, got 2"
    ):
        m.update(torch.tensor([0.1, 0.2]), torch.tensor([2, 0]), torch.tensor([0, 0]))
    with pytest.raises(
        ValueError, match=r"indexes must be a tensor of long integers, got dtype torch\.float32"
    ):
        m.update(torch.tensor([0.1, 0.2]), torch.tensor([1, 0]), torch.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match=r"one shape, got \(2,\), \(1,\) and \(2,\)"):
        m.update(torch.tensor([0.1, 0.2]), torch.tensor([1]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="indexes cannot be None"):
        m.update(torch.tensor([0.1, 0.2]), torch.tensor([1, 0]), None)
    assert float(m.value_sum) == 0.0 and float(m.empty_count) == 0.0  # nothing entered
    assert float(m.compute()) == 0.0  # no query: 0, as torchmetrics


def test_nonpositive_retrieved_option() -> None:
    preds = torch.tensor([-0.5, -0.9, 0.3, -0.2])
    target = torch.tensor([1, 0, 0, 1])
    idx = torch.tensor([0, 0, 1, 1])
    default, kept = rt.RetrievalMRR(), rt.RetrievalMRR(nonpositive_retrieved=True)
    peer = tmr.RetrievalMRR()
    for m in (default, kept, peer):
        m.update(preds, target, idx)
    assert close(default.compute(), peer.compute()) and float(default.compute()) == 0.0
    assert float(kept.compute()) == pytest.approx((1.0 + 0.5) / 2)  # first relevant at ranks 1 and 2


def test_auc_and_gauc_equal_sklearn_per_query() -> None:
    preds, target, indexes = flat_data(11, n_queries=30)
    preds = torch.round(preds * 2) / 2  # ties count one half
    aucs, sizes = [], []
    for q in torch.unique(indexes):
        m = indexes == q
        t = target[m].numpy()
        if 0 < t.sum() < t.size:
            aucs.append(roc_auc_score(t, preds[m].numpy()))
            sizes.append(t.size)
    auc, gauc = rt.RetrievalAUC(), rt.RetrievalGAUC()
    for metric in (auc, gauc):
        metric.update(preds, target, indexes)
    assert float(auc.compute()) == pytest.approx(np.mean(aucs))
    assert float(gauc.compute()) == pytest.approx(np.average(aucs, weights=sizes))


def naive(preds: torch.Tensor, target: torch.Tensor, indexes: torch.Tensor, fn: object) -> float:
    """The mean of ``fn(ranked targets)`` over the queries with a relevant item, 0 for the
    others (``"neg"``)."""
    out = []
    for q in torch.unique(indexes):
        m = indexes == q
        ranked = target[m][torch.argsort(preds[m], descending=True)].double().tolist()
        out.append(fn(ranked) if sum(ranked) > 0 else 0.0)
    return float(np.mean(out))


def test_f1_err_rbp_equal_their_formulas() -> None:
    preds, target, indexes = flat_data(12)
    _, graded, _ = flat_data(12, graded=True)
    k = 5

    def f1(r: list) -> float:
        return 2 * sum(r[:k]) / (k + sum(r))

    def err(r: list) -> float:
        out, stop = 0.0, 1.0
        for j, y in enumerate(r[:k], 1):
            p = (2**y - 1) / 2**3
            out += stop * p / j
            stop *= 1 - p
        return out

    def rbp(r: list) -> float:
        return (1 - 0.8) * sum(y * 0.8**j for j, y in enumerate(r))

    cases = [
        (rt.RetrievalF1(top_k=k), target, f1),
        (rt.RetrievalERR(top_k=k, max_grade=3.0), graded, err),
        (rt.RetrievalRBP(p=0.8), target, rbp),
    ]
    for metric, t, fn in cases:
        metric.update(preds, t, indexes)
        assert float(metric.compute()) == pytest.approx(naive(preds, t, indexes, fn)), type(metric).__name__


DDP_CHILD = textwrap.dedent(
    """
    import datetime, json, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import rankstream.torchmetrics as rt

    def main(rank, store, out, guard):
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=guard))
        preds, target, indexes = torch.load(out + ".data")
        mine = (indexes % 2) == rank  # each rank its own queries
        p, t, i = preds[mine], target[mine], indexes[mine]
        order = torch.sort(i, stable=True).indices
        res = {}
        for mode in ("contiguous", "whole", "sorted", "any"):
            for agg in ("mean", "max", "min"):
                for name in ("RetrievalMAP", "RetrievalNormalizedDCG", "RetrievalPrecision"):
                    kw = dict(top_k=3, aggregation=agg, empty_target_action="pos", query_mode=mode)
                    m = getattr(rt, name)(**kw)
                    h = len(order) // 2
                    if mode == "whole":
                        m.update(p, t, i)
                    else:  # two updates cutting a query in two (sorted ids)
                        m.update(p[order[:h]], t[order[:h]], i[order[:h]])
                        m.update(p[order[h:]], t[order[h:]], i[order[h:]])
                    res[f"{mode}/{agg}/{name}"] = float(m.compute())
        # every query dealt to both processes, item by item (a DistributedSampler's order)
        order = torch.sort(indexes, stable=True).indices[rank::2]
        p, t, i = preds[order], target[order], indexes[order]
        for mode in ("contiguous", "any"):
            m = rt.RetrievalMAP(top_k=3, query_mode=mode)
            m.update(p, t, i)
            try:
                res[f"split/{mode}"] = float(m.compute())
            except ValueError as err:
                res[f"split/{mode}"] = str(err)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(res, f)
        dist.destroy_process_group()

    if __name__ == "__main__":
        store, out, guard = sys.argv[1], sys.argv[2], float(sys.argv[3])
        mp.spawn(main, args=(store, out, guard), nprocs=2)
    """
)


def test_two_gloo_processes_equal_torchmetrics_on_all_data(tmp_path: Path) -> None:
    preds, target, indexes = flat_data(13, n_queries=30)
    out = str(tmp_path / "out.json")
    torch.save((preds, target, indexes), out + ".data")
    script = tmp_path / "child.py"
    script.write_text(DDP_CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = run([sys.executable, str(script), str(tmp_path / "store"), out, str(HANG_GUARD_S)], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(Path(out).read_text())
    split = {key: got.pop(key) for key in ("split/contiguous", "split/any")}
    assert len(got) == 36
    for key, value in got.items():
        _, agg, name = key.split("/")
        peer = getattr(tmr, name)(top_k=3, aggregation=agg, empty_target_action="pos")
        peer.update(preds, target, indexes)
        assert math.isclose(value, float(peer.compute()), rel_tol=1e-5, abs_tol=1e-6), key
    # queries split across the processes: the default refuses them at compute() on both, naming
    # the mode that gathers every item, which gives torchmetrics' value
    assert "counted by more than one process" in split["split/contiguous"], split
    assert "Use query_mode='any'" in split["split/contiguous"], split
    peer = tmr.RetrievalMAP(top_k=3)
    peer.update(preds, target, indexes)
    assert math.isclose(split["split/any"], float(peer.compute()), rel_tol=1e-5, abs_tol=1e-6)


@pytest.mark.parametrize("top_k", [None, 2, 5])
def test_ndcg_averages_tied_scores_as_torchmetrics(top_k: int | None) -> None:
    preds, target, indexes = flat_data(14, graded=True)
    preds = torch.round(preds)  # many exact ties within each query
    for mode in ("contiguous", "whole", "any"):
        ours = rt.RetrievalNormalizedDCG(top_k=top_k, query_mode=mode)
        peer = tmr.RetrievalNormalizedDCG(top_k=top_k)
        ours.update(preds, target, indexes)
        peer.update(preds, target, indexes)
        assert close(ours.compute(), peer.compute()), (mode, float(ours.compute()), float(peer.compute()))


def test_import_error_names_the_extra() -> None:
    from test_packaging import import_error

    message, cause = import_error("rankstream.torchmetrics", ("torchmetrics",))
    assert 'pip install "rankstream[torchmetrics]"' in message and "torchmetrics" in message
    assert cause == "torchmetrics"


# -- ranks by comparison: tied scores, the chunks, the batch shared by a MetricCollection -----
def tied_data(seed: int, dtype: torch.dtype = torch.float32) -> tuple:
    """Ragged queries (1 to 30 items) in random order, scores on a coarse grid (many exact
    ties, ``-0.0`` against ``0.0`` among them) with a few ``-inf``, binary targets."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 31, (40,), generator=g)
    indexes = torch.repeat_interleave(torch.randperm(40, generator=g), sizes)
    n = indexes.shape[0]
    preds = torch.round(torch.randn(n, generator=g, dtype=torch.float64) * 2) / 2
    preds[torch.rand(n, generator=g) < 0.05] = float("-inf")
    target = (torch.rand(n, generator=g) < 0.3).long()
    perm = torch.randperm(n, generator=g)
    return preds[perm].to(dtype), target[perm], indexes[perm]


def untied(preds: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
    """Scores without ties in the order of ties broken by arrival (the earlier item first),
    each query's positive scores kept positive and the others negative: torchmetrics' input
    for the same ranking."""
    out = torch.empty(preds.shape, dtype=torch.float64)
    for q in torch.unique(indexes).tolist():
        where = torch.nonzero(indexes == q)[:, 0].tolist()
        ranked = sorted(range(len(where)), key=lambda j: (-float(preds[where[j]]), j))
        for r, j in enumerate(ranked):
            positive = float(preds[where[j]]) > 0
            out[where[j]] = float(len(where) - r) if positive else -float(r + 1)
    return out


TIED = ["RetrievalPrecision", "RetrievalRecall", "RetrievalMAP", "RetrievalMRR", "RetrievalHitRate"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", TIED)
def test_tied_scores_rank_the_earlier_item_first(name: str, dtype: torch.dtype) -> None:
    preds, target, indexes = tied_data(21, dtype)
    plain = untied(preds, indexes)
    for top_k, adaptive in [(None, False), (1, False), (3, False), (3, True), (40, False)]:
        if adaptive and name != "RetrievalPrecision":
            continue
        kw: dict = {"top_k": top_k, **({"adaptive_k": True} if adaptive else {})}
        ours, peer = both(name, **kw)
        ours.update(preds, target, indexes)
        peer.update(plain, target, indexes)
        assert close(ours.compute(), peer.compute()), (name, kw, float(ours.compute()), float(peer.compute()))


def test_chunked_ranks_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankstream.adapters import torchmetrics_flat

    preds, target, indexes = tied_data(22)
    plain = untied(preds, indexes)
    monkeypatch.setattr(torchmetrics_flat, "CHUNK", 7)  # below a row: one row at a time
    for name in TIED:
        ours, peer = both(name, top_k=4)
        ours.update(preds, target, indexes)
        peer.update(plain, target, indexes)
        assert close(ours.compute(), peer.compute()), name


def test_collection_groups_and_ranks_each_batch_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankstream.adapters import torchmetrics_flat

    made = []
    real = torchmetrics_flat.FlatQueries.__init__

    def counted(self, *args):
        made.append(1)
        real(self, *args)

    monkeypatch.setattr(torchmetrics_flat.FlatQueries, "__init__", counted)
    names = [
        "RetrievalNormalizedDCG",
        "RetrievalMAP",
        "RetrievalMRR",
        "RetrievalPrecision",
        "RetrievalRecall",
    ]
    preds, target, indexes = flat_data(31, n_queries=30)
    ours = MetricCollection({n: getattr(rt, n)(top_k=5) for n in names})
    peer = MetricCollection({n: getattr(tmr, n)(top_k=5) for n in names})
    ours.update(preds, target, indexes)
    peer.update(preds.clone(), target, indexes)  # torchmetrics keeps the tensors it is given
    assert len(made) == 1  # five metrics, one grouping
    singles = {n: getattr(rt, n)(top_k=5) for n in names}
    for m in singles.values():
        m.update(preds.clone(), target.clone(), indexes.clone())
    assert len(made) == 6  # new tensors: grouped again
    got, want = ours.compute(), peer.compute()
    # the open query (the last item's, query_mode="contiguous") is counted at compute(): the
    # five members carry the same items and group them once; each single its own
    assert len(made) == 7
    assert all(close(got[n], want[n]) and close(got[n], singles[n].compute()) for n in names), (got, want)
    assert len(made) == 12
    # an in-place write changes the tensors' version: the next update reads the new values; the
    # batch joined to the open query carried in (it closes: its id is not in the batch) is
    # made once for the five members, which carry the same items
    preds.mul_(-1.0)
    ours.update(preds, target, indexes + 1000)
    peer.update(preds.clone(), target, indexes + 1000)
    assert len(made) == 14
    got, want = ours.compute(), peer.compute()
    assert all(close(got[n], want[n]) for n in names), (got, want)
    # one metric updated twice with the same tensors reads them again (refilled buffers)
    single = rt.RetrievalMAP(top_k=5, query_mode="whole")
    single.update(preds, target, indexes + 2000)
    single.update(preds, target, indexes + 3000)
    assert len(made) == 17


def test_dense_relevance_takes_the_kernel_path_with_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankstream.adapters import torchmetrics_flat, torchmetrics_metrics

    grouped = []
    real = torchmetrics_metrics.group_by_query
    monkeypatch.setattr(torchmetrics_metrics, "group_by_query", lambda *a: grouped.append(1) or real(*a))
    monkeypatch.setattr(torchmetrics_flat, "DENSE_TOP_K", 0)  # every batch "dense": the kernels
    monkeypatch.setattr(torchmetrics_flat, "DENSE_WHOLE", 0)
    preds, target, indexes = tied_data(23)
    plain = untied(preds, indexes)
    for name in TIED:
        for top_k in (None, 3):
            ours, peer = both(name, top_k=top_k)
            ours.update(preds, target, indexes)
            peer.update(plain, target, indexes)
            assert close(ours.compute(), peer.compute()), (name, top_k)
    preds, target, indexes = flat_data(24, graded=True)
    for top_k in (None, 3):
        ours, peer = both("RetrievalNormalizedDCG", top_k=top_k)
        ours.update(preds, target, indexes)
        peer.update(preds, target, indexes)
        assert close(ours.compute(), peer.compute()), top_k
    # the kernels: precision@3, recall@3, MAP and nDCG twice, MRR and hit rate where best scores tie
    assert len(grouped) >= 2 * len(TIED) - 2


def test_the_kept_batch_goes_with_its_inputs() -> None:
    import gc

    from rankstream.adapters import torchmetrics_flat

    preds, target, indexes = flat_data(32)
    metric = rt.RetrievalMRR(top_k=3)
    metric.update(preds, target, indexes)
    assert torchmetrics_flat._LAST[0] is not None
    del preds, target, indexes
    gc.collect()
    assert torchmetrics_flat._LAST[0] is None  # nothing of the batch outlives the inputs


def test_a_collection_never_merges_different_metrics_whose_sums_agree_on_a_batch() -> None:
    """MetricCollection's compute groups (on by default) merge metrics whose states are equal
    after their first update. A first batch where no query has a relevant item leaves every
    metric's sums equal; the metrics must still stay apart (equal to torchmetrics' own), while
    a metric given twice may share its state."""

    def collection(module):
        return MetricCollection(
            {
                "map": module.RetrievalMAP(top_k=5),
                "ndcg": module.RetrievalNormalizedDCG(top_k=5),
                "p": module.RetrievalPrecision(top_k=5),
                "p_again": module.RetrievalPrecision(top_k=5),
                "p3": module.RetrievalPrecision(top_k=3),
            }
        )

    mine, theirs = collection(rt), collection(tmr)
    ids = torch.tensor([0, 0, 1, 1])
    for c in (mine, theirs):
        c.update(torch.tensor([0.4, 0.3, 0.2, 0.1]), torch.zeros(4, dtype=torch.long), indexes=ids)
    g = torch.Generator().manual_seed(0)
    for q in range(2, 8):
        preds, target = torch.rand(20, generator=g), (torch.rand(20, generator=g) < 0.3).long()
        for c in (mine, theirs):
            c.update(preds, target, indexes=torch.full((20,), q))
    got, want = mine.compute(), theirs.compute()
    for key in want:
        assert float(got[key]) == pytest.approx(float(want[key]), rel=1e-6, abs=1e-7), key
    groups = [sorted(g) for g in mine.compute_groups.values()]
    assert ["p", "p_again"] in groups and ["map"] in groups and ["p3"] in groups, groups
