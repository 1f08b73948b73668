"""Queries that span updates in the Ignite adapter (``query_mode``): a flat log of items with a
query id each, cut into batches of a fixed number of items (as a ``DataLoader`` cuts it, so a
query's items fall into two or three batches), run through an ``Engine``:

* the default ``"contiguous"`` (each query's items together, ids in any order), ``"sorted"``
  (ids in order) and ``"any"`` (items in any order) equal the same metric updated once with
  every query's lists padded one query at a time here, and torchmetrics' own metrics on a
  ``DataLoader`` of 30-item queries in batches of 1,000;
* ``"whole"`` on the same cut log counts each piece of a cut query as a query of its own (what
  it promises, and why it is not the default);
* an id seen again after its query closed (``"contiguous"``, ``"sorted"``), or a missing
  ``indexes`` (``"sorted"``, ``"any"``), is a ``ValueError`` that leaves the state as it was;
  ``compute()`` leaves the open query open; checkpoints carry it; in a distributed run the
  default refuses a query whose items went to two processes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchmetrics.retrieval as tmr
from ignite.engine import Engine
from torch.utils.data import DataLoader, TensorDataset

from rankstream.ignite import MAP, NDCG, ListMetrics, MeanReciprocalRank


def flat_log(seed: int, queries: int = 30) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ragged queries (2 to 30 items) in id order, distinct scores, graded labels (some queries
    with no relevant item)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 31, size=queries)
    ids = np.repeat(np.arange(queries) * 3 + 5, lengths)  # not 0..Q-1: ids are only labels
    n = ids.shape[0]
    scores = rng.permutation(n) / n  # distinct: the item order within a query cannot matter
    labels = rng.integers(0, 4, size=n) * (rng.random(n) < 0.3)
    return scores, labels.astype(np.float64), ids


def cut(log: tuple, size: int, order: np.ndarray | None = None) -> list[tuple]:
    """The log's items (in ``order``) in batches of ``size`` items: engine outputs."""
    scores, labels, ids = (x if order is None else x[order] for x in log)
    return [
        (torch.from_numpy(scores[i : i + size]), torch.from_numpy(labels[i : i + size]),
         {"indexes": torch.from_numpy(ids[i : i + size])})
        for i in range(0, ids.shape[0], size)
    ]  # fmt: skip


def padded(log: tuple) -> tuple:
    """Every query of the log as one padded list (items in their order), built one query at a
    time."""
    scores, labels, ids = log
    queries = sorted(set(ids.tolist()))
    width = max(int((ids == q).sum()) for q in queries)
    s, y, m = (
        np.zeros((len(queries), width)),
        np.zeros((len(queries), width)),
        np.zeros((len(queries), width), bool),
    )
    for row, q in enumerate(queries):
        items = np.flatnonzero(ids == q)
        s[row, : len(items)], y[row, : len(items)], m[row, : len(items)] = scores[items], labels[items], True
    return torch.from_numpy(s), torch.from_numpy(y), {"mask": torch.from_numpy(m)}


def run(metric, feed) -> object:
    engine = Engine(lambda e, b: b)
    metric.attach(engine, "m")
    return engine.run(feed).metrics["m"]


def once(metric, batch) -> object:
    metric.update(batch)
    return metric.compute()


MAKERS = {
    "NDCG": lambda **kw: NDCG(top_k=[1, 5, 10], **kw),
    "MAP": lambda **kw: MAP(top_k=[3, 10], **kw),
    "MRR": lambda **kw: MeanReciprocalRank(top_k=[5], ignore_zero_hits=False, **kw),
    "ListMetrics": lambda **kw: ListMetrics(["ndcg@5", "recall@10", "precision@3", "r_precision"], **kw),
}


def assert_close(got, want) -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_close(got[key], want[key])
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["contiguous", "sorted"])
@pytest.mark.parametrize("size", [7, 16, 1000])
@pytest.mark.parametrize("name", list(MAKERS))
def test_the_default_and_sorted_join_the_queries_cut_by_the_batches(name: str, size: int, mode: str) -> None:
    log = flat_log(seed=size)
    want = once(MAKERS[name](), padded(log))
    assert_close(run(MAKERS[name](query_mode=mode), cut(log, size)), want)


def grouped_order(ids: np.ndarray, seed: int) -> np.ndarray:
    """An order of the items keeping each query's items together (in their order), the queries
    in a random order of ids."""
    queries = np.unique(ids)
    rank = dict(
        zip(queries.tolist(), np.random.default_rng(seed).permutation(len(queries)).tolist(), strict=True)
    )
    return np.argsort([rank[q] for q in ids.tolist()], kind="stable")


@pytest.mark.parametrize("size", [7, 1000])
@pytest.mark.parametrize("name", list(MAKERS))
def test_the_default_takes_the_queries_in_any_order_of_ids(name: str, size: int) -> None:
    log = flat_log(seed=20 + size)
    order = grouped_order(log[2], seed=size)
    assert not (np.diff(log[2][order]) >= 0).all()  # the ids are not sorted
    want = once(MAKERS[name](), padded(log))
    assert_close(run(MAKERS[name](), cut(log, size, order)), want)
    with pytest.raises(ValueError, match="needs indexes sorted by query id"):  # what "sorted" needs
        run(MAKERS[name](query_mode="sorted"), cut(log, size, order))


def tm_log(seed: int, queries: int = 150) -> TensorDataset:
    """30-item queries, each query's items together, ids in a random order; distinct positive
    scores, about 10% relevant items (some queries without one)."""
    g = torch.Generator().manual_seed(seed)
    ids = (torch.randperm(5000, generator=g)[:queries] + 7).repeat_interleave(30)
    n = ids.shape[0]
    scores = (torch.randperm(n, generator=g).double() + 1) / n
    return TensorDataset(scores, (torch.rand(n, generator=g) < 0.1).double(), ids)


TM_PEERS = {  # ListMetrics' name: torchmetrics' metric on binary labels (empty queries count 0 in both)
    "ndcg@10": lambda: tmr.RetrievalNormalizedDCG(top_k=10),
    "mrr@10": lambda: tmr.RetrievalMRR(top_k=10),
    "precision@10": lambda: tmr.RetrievalPrecision(top_k=10),
    "recall@10": lambda: tmr.RetrievalRecall(top_k=10),
    "hit_rate@5": lambda: tmr.RetrievalHitRate(top_k=5),
    "r_precision": lambda: tmr.RetrievalRPrecision(),
}


def torchmetrics_values(batches: list) -> dict:
    peers = {name: make() for name, make in TM_PEERS.items()}
    for scores, labels, ids in batches:
        for peer in peers.values():
            peer.update(scores, labels.long(), ids)
    return {name: float(peer.compute()) for name, peer in peers.items()}


def engine_values(metric, loader) -> dict:
    engine = Engine(lambda e, batch: (batch[0], batch[1], {"indexes": batch[2]}))
    metric.attach(engine, "m")
    return engine.run(loader).metrics["m"]


def test_an_engine_over_a_dataloader_cutting_queries_gives_torchmetrics_value() -> None:
    loader = DataLoader(tm_log(1), batch_size=1000, shuffle=False)  # 4,500 items: cuts inside queries
    got = engine_values(ListMetrics(list(TM_PEERS), ignore_zero_hits=False), loader)
    want = torchmetrics_values(list(loader))
    assert got.keys() == want.keys()
    for key in want:
        assert abs(got[key] - want[key]) <= 1e-6, (key, got[key], want[key])
    (whole,) = engine_values(NDCG(top_k=[10], ignore_zero_hits=False, query_mode="whole"), loader)
    assert abs(whole - want["ndcg@10"]) > 1e-4  # each cut query counted twice: another number


def test_ids_that_come_back_are_refused_naming_any_which_gives_torchmetrics_value() -> None:
    loader = DataLoader(tm_log(2), batch_size=1000, shuffle=True, generator=torch.Generator().manual_seed(0))
    batches = list(loader)
    with pytest.raises(ValueError, match=r"ListMetrics: query_mode='contiguous' .* Use query_mode='any'"):
        engine_values(ListMetrics(list(TM_PEERS), ignore_zero_hits=False), batches)
    metric = NDCG(top_k=10)
    metric.update((batches[0][0], batches[0][1], {"indexes": batches[0][2]}))
    saved = metric.state_dict()["__metric_state_per_rank"][0]
    with pytest.raises(ValueError, match=r"query id\(s\) \d+.* came again after their query was closed"):
        metric.update((batches[1][0], batches[1][1], {"indexes": batches[1][2]}))
    after = metric.state_dict()["__metric_state_per_rank"][0]
    assert saved.keys() == after.keys()
    for key in ("_sums", "query_indexes", "query_preds", "query_target", "query_closed_ids"):
        assert torch.equal(after[key], saved[key]), key
    got = engine_values(ListMetrics(list(TM_PEERS), ignore_zero_hits=False, query_mode="any"), batches)
    want = torchmetrics_values(batches)
    for key in want:
        assert abs(got[key] - want[key]) <= 1e-6, (key, got[key], want[key])


@pytest.mark.parametrize("name", list(MAKERS))
def test_any_mode_takes_the_items_in_any_order(name: str) -> None:
    log = flat_log(seed=4)
    order = np.random.default_rng(5).permutation(log[2].shape[0])
    want = once(MAKERS[name](), padded(log))
    assert_close(run(MAKERS[name](query_mode="any"), cut(log, 11, order)), want)


def test_the_default_joins_cut_queries_where_whole_counts_the_pieces() -> None:
    log = flat_log(seed=6)
    batches = cut(log, 9)
    pieces = [padded(tuple(x.numpy() for x in (s, y, extra["indexes"]))) for s, y, extra in batches]
    want = NDCG(top_k=[1, 5], ignore_zero_hits=False)
    for piece in pieces:
        want.update(piece)
    got = run(NDCG(top_k=[1, 5], ignore_zero_hits=False, query_mode="whole"), batches)
    assert_close(got, want.compute())
    joined = once(NDCG(top_k=[1, 5], ignore_zero_hits=False), padded(log))
    assert not np.allclose(got, joined)  # the cut queries change the value
    assert_close(run(NDCG(top_k=[1, 5], ignore_zero_hits=False), batches), joined)  # the default joins them


def test_an_id_after_its_query_closed_is_an_error_and_changes_nothing() -> None:
    metric = NDCG(top_k=[1, 5], query_mode="sorted")
    batches = cut(flat_log(seed=7, queries=8), 20)
    for batch in batches[:3]:
        metric.update(batch)
    saved = metric.state_dict()["__metric_state_per_rank"][0]
    closed = int(saved["query_closed_max"][0])
    still_open = int(saved["query_indexes"][0])
    late = batches[3]
    with pytest.raises(
        ValueError, match=rf"sorted by query id across batches: id {closed} arrives after id {still_open}"
    ):
        metric.update((late[0], late[1], {"indexes": torch.full_like(late[2]["indexes"], closed)}))
    with pytest.raises(ValueError, match="needs indexes sorted by query id across batches"):
        metric.update((late[0], late[1], {"indexes": late[2]["indexes"].flip(0) + 1000}))
    after = metric.state_dict()["__metric_state_per_rank"][0]
    for key in ("_sums", "query_indexes", "query_preds", "query_target", "query_closed_max"):
        assert torch.equal(after[key], saved[key]), key


@pytest.mark.parametrize("mode", ["sorted", "any"])
def test_these_modes_need_query_ids(mode: str) -> None:
    metric = MAP(top_k=5, query_mode=mode)
    with pytest.raises(ValueError, match=rf"query_mode='{mode}'\) reads flat items with query ids"):
        metric.update((torch.rand(2, 4), torch.ones(2, 4)))


def test_the_default_reads_lists_as_whole_lists() -> None:
    lists = (
        torch.rand(3, 5, generator=torch.Generator().manual_seed(0)),
        (torch.arange(15) % 4 == 0).reshape(3, 5),
    )
    default, whole = MAP(top_k=[2, 5]), MAP(top_k=[2, 5], query_mode="whole")
    assert_close(once(default, lists), once(whole, lists))
    assert (
        "query_indexes" not in default.state_dict()["__metric_state_per_rank"][0]
    )  # nothing kept: none saved


def test_an_unknown_query_mode_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"query_mode must be one of \('contiguous', 'whole', 'sorted', 'any'\), got 'open'"
    ):
        NDCG(top_k=5, query_mode="open")


@pytest.mark.parametrize("mode", ["contiguous", "sorted"])
def test_compute_counts_the_open_query_without_closing_it(mode: str) -> None:
    log = flat_log(seed=8, queries=10)
    batches = cut(log, 13)
    metric = ListMetrics(["ndcg@5", "map@10"], query_mode=mode)
    for batch in batches[:3]:
        metric.update(batch)
        first, again = metric.compute(), metric.compute()
        assert_close(again, first)
    head = tuple(
        np.concatenate([x.numpy() for x in parts])
        for parts in zip(*[(s, y, e["indexes"]) for s, y, e in batches[:3]], strict=True)
    )
    assert_close(first, once(ListMetrics(["ndcg@5", "map@10"]), padded(head)))
    for batch in batches[3:]:
        metric.update(batch)
    assert_close(metric.compute(), once(ListMetrics(["ndcg@5", "map@10"]), padded(log)))
    metric.reset()
    assert metric._queries.pending() is None


@pytest.mark.parametrize("mode", ["contiguous", "sorted", "any"])
def test_a_checkpoint_carries_the_open_queries(mode: str) -> None:
    log = flat_log(seed=9, queries=12)
    batches = cut(log, 10)
    saved = MAP(top_k=[3, 10], query_mode=mode)
    for batch in batches[:4]:
        saved.update(batch)
    resumed = MAP(top_k=[3, 10], query_mode=mode)
    resumed.load_state_dict(saved.state_dict())
    for batch in batches[4:]:
        resumed.update(batch)
    assert_close(resumed.compute(), once(MAP(top_k=[3, 10]), padded(log)))
    with pytest.raises(ValueError, match=r"holds \d+ items of open queries"):
        MAP(top_k=[3, 10], query_mode="whole").load_state_dict(saved.state_dict())
    if mode == "contiguous":  # the closed ids came with it: an id of a closed query is refused
        first = batches[0]
        with pytest.raises(ValueError, match="came again after their query was closed"):
            resumed.update((first[0][:1], first[1][:1], {"indexes": first[2]["indexes"][:1]}))


def test_a_state_saved_in_whole_mode_loads_into_the_default() -> None:
    log = flat_log(seed=10, queries=12)
    batches = cut(log, 10)
    saved = MAP(top_k=[3, 10], query_mode="whole")
    for batch in batches[:4]:
        saved.update(batch)
    loaded = MAP(top_k=[3, 10])
    loaded.load_state_dict(saved.state_dict())
    assert_close(loaded.compute(), saved.compute())


def _rank_worker(local_rank: int, out: str) -> None:
    """Each rank evaluates its own share of the log's queries (contiguous, cut into batches so
    that each rank ends with an open query) and writes its ``compute()``."""
    import json

    import ignite.distributed as idist

    torch.set_num_threads(1)
    rank, world = idist.get_rank(), idist.get_world_size()
    scores, labels, ids = flat_log(seed=12, queries=20)
    share = np.isin(ids // 3 % world, [rank])  # queries by id, alternately to the ranks
    mine = tuple(x[share] for x in (scores, labels, ids))
    results = {}
    for mode in ("contiguous", "sorted", "any"):
        metric = ListMetrics(["ndcg@5", "map@10", "precision@3"], query_mode=mode)
        engine = Engine(lambda e, b: b)
        metric.attach(engine, "m")
        results[mode] = engine.run(cut(mine, 13)).metrics["m"]
    dealt = tuple(x[rank::world] for x in (scores, labels, ids))  # every query's items to both ranks
    for mode in ("contiguous", "any"):
        metric = ListMetrics(["ndcg@5", "map@10", "precision@3"], query_mode=mode)
        engine = Engine(lambda e, b: b)
        metric.attach(engine, "m")
        try:
            results[f"dealt/{mode}"] = engine.run(cut(dealt, 13)).metrics["m"]
        except ValueError as err:
            results[f"dealt/{mode}"] = str(err)
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(results, f)


def test_open_queries_of_every_process_count_in_a_distributed_run() -> None:
    import datetime
    import json
    import tempfile

    import ignite.distributed as idist
    from _dist_helpers import free_port
    from _hang_guard import HANG_GUARD_S

    want = once(ListMetrics(["ndcg@5", "map@10", "precision@3"]), padded(flat_log(seed=12, queries=20)))
    with tempfile.TemporaryDirectory() as out:
        with idist.Parallel(
            backend="gloo",
            nproc_per_node=2,
            master_addr="127.0.0.1",
            master_port=free_port(),
            timeout=datetime.timedelta(seconds=HANG_GUARD_S),
        ) as parallel:
            parallel.run(_rank_worker, out)
        for rank in range(2):
            with open(f"{out}/rank{rank}.json") as f:
                got = json.load(f)
            for mode in ("contiguous", "sorted", "any"):
                assert_close(got[mode], want)
            assert_close(got["dealt/any"], want)
            assert "counted by more than one process" in got["dealt/contiguous"]
            assert "Use query_mode='any'" in got["dealt/contiguous"]
