"""Beyond-accuracy metrics (docs/beyond_accuracy.md): against RecBole's metric functions and
PyG's LinkPred* metrics where they share the definition, naive one-list-at-a-time references of
the papers' definitions, exhaustive pair enumeration for the identities (personalization from
per-item counts, cosine diversity from sums of vectors, category diversity from category
counts), merges and batch splits, the ListMetrics names, errors, an Ignite Engine run."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rankstream.core.beyond import BeyondAccuracy, ItemData
from rankstream.core.lists.collection import ListMetrics
from rankstream.core.state import result

N = 7
SETTINGS = settings(max_examples=40, deadline=None)


def make_items(n: int = N, seed: int = 0) -> ItemData:
    rng = np.random.default_rng(seed)
    pop = rng.integers(0, 9, n)
    return ItemData(
        popularity=pop, num_users=10, tail_max_popularity=3,
        categories=rng.integers(0, 3, n), embeddings=rng.normal(size=(n, 3)),
    )  # fmt: skip


def random_ids(rng: np.random.Generator, q: int, k: int, n: int, holes: float) -> np.ndarray:
    """``(q, k)`` distinct ids per row (a prefix of a permutation), -1 at random places."""
    ids = np.stack([rng.permutation(n)[:k] for _ in range(q)]) if q else np.zeros((0, k), int)
    return np.where(rng.random(ids.shape) < holes, -1, ids)


# ---- naive references, one list at a time ---------------------------------------------------
def lists_of(ids: np.ndarray, k: int) -> list[list[int]]:
    """Each row's valid ids among its first k (rows with no valid id anywhere dropped)."""
    return [[int(i) for i in row[:k] if i >= 0] for row in ids if (row >= 0).any()]


def naive_per_list(metric: str, lst: list[int], items: ItemData) -> float | None:
    """The papers' per-list definitions. Novelty: Castells & Vargas (2011), mean -log2 p(i),
    p(i) the share of training users who saw i. ARP / APLT / ACLT: Abdollahpouri et al. (2019,
    "Managing popularity bias in recommender systems with personalized re-ranking"). Intra-list
    diversity: Ziegler et al. (2005) / Smyth & McClave (2001), the mean pairwise distance."""
    if not lst:
        return None
    if metric == "novelty":
        return float(np.mean([-math.log2(max(items.popularity[i], 1) / items.num_users) for i in lst]))
    if metric == "arp":
        return float(np.mean([items.popularity[i] for i in lst]))
    if metric in ("aplt", "aclt"):
        tail = sum(bool(items.long_tail[i]) for i in lst)
        return tail / len(lst) if metric == "aplt" else float(tail)
    pairs = list(itertools.combinations(lst, 2))
    if not pairs:
        return None
    if metric == "diversity":
        return float(np.mean([items.categories[a] != items.categories[b] for a, b in pairs]))
    e = items.embeddings
    return float(
        np.mean([1.0 - e[a] @ e[b] / (np.linalg.norm(e[a]) * np.linalg.norm(e[b])) for a, b in pairs])
    )


def naive_personalization(lists: list[list[int]], k: int) -> float:
    """1 - the mean over every unordered pair of lists of |A ∩ B| / k (all pairs enumerated)."""
    pairs = list(itertools.combinations([set(x) for x in lists], 2))
    return 1.0 - float(np.mean([len(a & b) / k for a, b in pairs])) if pairs else float("nan")


def naive_catalog(metric: str, lists: list[list[int]], n: int) -> float:
    """Coverage (Ge et al. 2010: distinct items recommended / catalog), distributional coverage
    (Shani & Gunawardana 2011: entropy in bits of the recommendation shares) from a Counter."""
    flat = [i for x in lists for i in x]
    if metric == "coverage":
        return len(set(flat)) / n
    counts = np.array([flat.count(i) for i in set(flat)], dtype=float)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    q=st.integers(0, 6),
    k=st.integers(2, 9),
    holes=st.sampled_from([0.0, 0.3]),
)
def test_against_naive_and_enumeration(seed, q, k, holes):
    """Every metric at every cut-off 2..K+1 (past the list's end too) against the naive
    references: personalization from counts equals the mean pairwise overlap over every pair of
    lists, diversity and ild from per-list sums equal the pairwise means."""
    rng = np.random.default_rng(seed)
    items = make_items(seed=seed % 5)
    big_k = min(k, N)
    ids = random_ids(rng, q, big_k, N, holes)
    ks = list(range(2, big_k + 2))
    m = BeyondAccuracy(items, top_k=ks)
    m.update(ids)
    got = m.compute()
    for kk in ks:
        lists = lists_of(ids, kk)
        assert close(got[f"personalization@{kk}"], naive_personalization(lists, min(kk, N)))
        for metric in ("coverage", "entropy"):
            if metric == "entropy" and not any(lists):
                continue
            assert close(got[f"{metric}@{kk}"], naive_catalog(metric, lists, N))
        for metric in ("novelty", "arp", "aplt", "aclt", "diversity", "ild"):
            values = [v for v in (naive_per_list(metric, x, items) for x in lists) if v is not None]
            assert close(got[f"{metric}@{kk}"], float(np.mean(values)) if values else float("nan")), metric


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), q=st.integers(0, 9), cuts=st.lists(st.integers(0, 9), max_size=3))
def test_merge_equals_one_pass(seed, q, cuts):
    """Any split of the lists into batches, each its own instance, merged: the one pass."""
    rng = np.random.default_rng(seed)
    items = make_items()
    ids = random_ids(rng, q, 4, N, 0.2)
    whole = BeyondAccuracy(items, top_k=[2, 4], confidence=0.9)
    whole.update(ids)
    merged = BeyondAccuracy(items, top_k=[2, 4], confidence=0.9)
    for part in np.split(ids, sorted(min(c, q) for c in cuts)):
        one = BeyondAccuracy(items, top_k=[2, 4], confidence=0.9)
        one.update(part)
        merged.merge(one)
    a, b = whole.compute(), merged.compute()
    assert a.keys() == b.keys() and all(close(a[key], b[key]) for key in a)


def recbole_metrics():
    """``recbole.evaluator.metrics``, imported without TensorBoard: recbole.utils imports
    ``torch.utils.tensorboard`` (which loads TensorFlow, about 5 CPU-s) for a logger these
    functions never use, so a stand-in module is there during the import only."""
    import sys
    import types

    pytest.importorskip("recbole", reason="RecBole is the peer")
    if "recbole.evaluator.metrics" in sys.modules or "torch.utils.tensorboard" in sys.modules:
        import recbole.evaluator.metrics as metrics

        return metrics
    stub = types.ModuleType("torch.utils.tensorboard")
    stub.SummaryWriter = None
    sys.modules["torch.utils.tensorboard"] = stub
    try:
        import recbole.evaluator.metrics as metrics
    finally:
        del sys.modules["torch.utils.tensorboard"]
    return metrics


def test_recbole_functions():
    """RecBole 1.x's ItemCoverage, GiniIndex, ShannonEntropy, AveragePopularity, TailPercentage
    (its functions called directly). RecBole's entropy is in nats and divided by the number of
    distinct items recommended: ours (bits, Shani & Gunawardana) times that count times ln 2."""
    metrics = recbole_metrics()
    rng = np.random.default_rng(3)
    n, k = 40, 5
    pop = rng.integers(1, 50, n)  # every item seen once at least: RecBole's tail reads counts
    ids = random_ids(rng, 30, k, n, 0.0)
    items = ItemData(popularity=pop, num_users=60, tail_max_popularity=10)
    m = BeyondAccuracy(items, top_k=k)
    m.update(ids)
    got = m.compute()
    assert close(got["coverage@5"], metrics.ItemCoverage.get_coverage(None, ids, n))
    assert close(got["gini@5"], metrics.GiniIndex.get_gini(None, ids, n))
    distinct = len(np.unique(ids))
    assert close(got["entropy@5"] * math.log(2) / distinct, metrics.ShannonEntropy.get_entropy(None, ids))
    count = dict(enumerate(pop.tolist()))
    arp = metrics.AveragePopularity.metric_info(None, metrics.AveragePopularity.get_pop(None, ids, count))
    assert close(got["arp@5"], float(arp.mean(axis=0)[k - 1]))
    tail = object.__new__(metrics.TailPercentage)
    tail.tail = 10
    share = tail.metric_info(tail.get_tail(ids, count).astype(float))
    assert close(got["aplt@5"], float(share.mean(axis=0)[k - 1]))


def test_pyg_metrics():
    """PyG's LinkPredCoverage, LinkPredDiversity, LinkPredPersonalization (every pair: no
    ``max_src_nodes``) and LinkPredAveragePopularity on full lists of k."""
    link = pytest.importorskip("torch_geometric.metrics", reason="PyG is the peer")
    rng = np.random.default_rng(4)
    n, k = 25, 4
    items = make_items(n, seed=4)
    ids = random_ids(rng, 33, k, n, 0.0)
    m = BeyondAccuracy(items, top_k=k)
    m.update(ids)
    got = m.compute()
    pred, edges = torch.as_tensor(ids), torch.zeros((2, 1), dtype=torch.long)
    peers = {
        "coverage": link.LinkPredCoverage(k, n),
        "diversity": link.LinkPredDiversity(k, torch.as_tensor(items.categories)),
        "personalization": link.LinkPredPersonalization(k, max_src_nodes=None),
        "arp": link.LinkPredAveragePopularity(k, torch.as_tensor(items.popularity)),
    }
    for name, peer in peers.items():
        peer.update(pred, edges)
        assert math.isclose(got[f"{name}@{k}"], float(peer.compute()), rel_tol=1e-6), name


def test_recommenders_novelty_definition():
    """microsoft/recommenders' ``novelty`` (python_evaluation; not installed here: its
    definition reimplemented): the mean over every recommended slot of -log2(n_i / n_users),
    n_i the training users of item i. With full lists it is the mean of the lists' means."""
    rng = np.random.default_rng(5)
    items = make_items(12, seed=5)
    pop = np.maximum(items.popularity, 1)
    ids = random_ids(rng, 9, 4, 12, 0.0)
    slots = ids.reshape(-1)
    reference = float(np.mean(-np.log2(pop[slots] / items.num_users)))
    m = BeyondAccuracy(items, ["novelty"], top_k=4)
    m.update(ids)
    assert close(m.compute()["novelty@4"], reference)


@pytest.mark.parametrize("as_torch", [False, True])
def test_list_metrics_names(as_torch):
    """``ListMetrics`` names read the collection's one selection: the same as BeyondAccuracy on
    ids from a stable argsort of scores with exact ties (the lower id first), under a mask;
    lists of weight 0 and lists with no item are left out; accuracy names alongside."""
    rng = np.random.default_rng(6)
    items = make_items(N, seed=6)
    scores = rng.integers(0, 3, (11, N)).astype(float)  # many exact ties
    mask = rng.random((11, N)) > 0.25
    mask[3] = False
    weight = np.ones(11)
    weight[5] = 0.0
    names = [f"{m}@{k}" for m in ("coverage", "entropy", "gini", "personalization", "novelty", "arp",
                                  "aplt", "aclt", "diversity", "ild") for k in (3, 9)]  # fmt: skip
    lm = ListMetrics([*names, "ndcg@3"], items=items)
    y = (rng.random((11, N)) > 0.5).astype(float)
    conv = torch.as_tensor if as_torch else np.asarray
    sums = lm.batch_sums(None, conv(scores), conv(y), conv(mask), conv(weight))
    got = result(lm, {key: np.asarray(v) for key, v in sums.items()})
    order = np.argsort(np.where(mask, -scores, np.inf), axis=1, kind="stable")
    ids = np.where(np.take_along_axis(mask, order, axis=1), order, -1)[weight > 0]
    ref = BeyondAccuracy(items, top_k=[3, 9])
    ref.update(ids)
    want = ref.compute()
    for name in names:
        assert close(got[name], want[name]), name


def test_list_metrics_confidence_and_errors():
    items = make_items()
    lm = ListMetrics(["novelty@3", "coverage@3"], items=items, confidence=0.95)
    assert lm.reported == ["novelty@3", "novelty@3_stderr", "novelty@3_ci_low", "novelty@3_ci_high",
                           "novelty@3_count", "coverage@3"]  # fmt: skip
    with pytest.raises(ValueError, match="needs a cut-off"):
        ListMetrics(["coverage"], items=items)
    with pytest.raises(TypeError, match="ItemData"):
        ListMetrics(["coverage@3"])
    with pytest.raises(ValueError, match="expected"):
        ListMetrics(["novelty@3"], items=items, ties="expected")
    with pytest.raises(ValueError, match="one column per item"):
        lm.batch_sums(None, np.zeros((2, N + 1)), np.zeros((2, N + 1)))
    with pytest.raises(ValueError, match=r"k must be at least 2"):
        ListMetrics(["ild@1"], items=items)


def test_bad_input_leaves_state():
    items = make_items()
    m = BeyondAccuracy(items, top_k=3)
    m.update(np.array([[0, 1, 2]]))
    before = m.state
    bad = [
        (np.array([[0, 1, N]]), ValueError, r"\[0, 7\)"),
        (np.array([[0, -2, 1]]), ValueError, "min -2"),
        (np.array([0, 1, 2]), ValueError, "2-D"),
        (np.array([[0.0, 1.0]]), TypeError, "integer"),
        (np.array([[1, 1, 2]]), ValueError, "repeat"),
    ]
    for ids, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            m.update(ids)
    with pytest.raises(ValueError, match="one column per item"):
        m.update_scores(np.zeros((2, N + 2)))
    with pytest.raises(ValueError, match="NaN"):
        m.update_scores(np.full((2, N), np.nan))
    m.update(np.zeros((0, 3), dtype=int))  # an empty batch: a no-op
    after = m.state
    assert all(np.array_equal(before[key], after[key]) for key in before)
    with pytest.raises(ValueError, match="merge needs"):
        m.merge({"lists": 0.0})


def test_item_data_errors():
    with pytest.raises(ValueError, match=r"one value per item \(5 items\), got shape \(4,\)"):
        ItemData(5, popularity=np.ones(4))
    with pytest.raises(ValueError, match=">= 0"):
        ItemData(popularity=np.array([1, -1]))
    with pytest.raises(ValueError, match="num_users"):
        ItemData(popularity=np.array([1, 9]), num_users=3)
    with pytest.raises(ValueError, match="zero vector"):
        ItemData(embeddings=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="long_tail ids"):
        ItemData(3, long_tail=np.array([5]))
    with pytest.raises(ValueError, match="needs"):
        BeyondAccuracy(ItemData(3), ["novelty"])


def test_update_scores_ties_first():
    """Dense scores with ties: the lower id first (as np.argsort's stable order)."""
    items = make_items()
    scores = np.array([[1.0, 2.0, 2.0, 2.0, 0.0, 2.0, 1.0], [0.0] * N])
    m = BeyondAccuracy(items, top_k=3)
    np.testing.assert_array_equal(m.top_ids(scores), [[1, 2, 3], [0, 1, 2]])


def test_ignite_engine():
    """An Ignite Engine over batches of scores: the metric equals BeyondAccuracy over the
    stable top ids of all batches at once."""
    from ignite.engine import Engine

    from rankstream.adapters.ignite_beyond import BeyondMetrics

    rng = np.random.default_rng(8)
    items = make_items()
    batches = [
        (torch.as_tensor(rng.integers(0, 4, (b, N)).astype(float)), torch.zeros(b, N)) for b in (3, 5, 1)
    ]
    metric = BeyondMetrics(["coverage@3", "personalization@3", "novelty@3"], items=items)
    engine = Engine(lambda e, batch: batch)
    metric.attach(engine, "beyond")
    state = engine.run(batches, max_epochs=1)
    before = metric._sums.clone()
    with pytest.raises(ValueError, match="one column per item"):
        metric.update((torch.zeros(2, N + 1), torch.zeros(2, N + 1)))
    assert torch.equal(metric._sums, before)  # a failed update leaves the state
    metric.update((torch.zeros(0, N), torch.zeros(0, N)))  # an empty batch: a no-op
    assert torch.equal(metric._sums, before)
    scores = torch.cat([b[0] for b in batches]).numpy()
    ref = BeyondAccuracy(items, ["coverage", "personalization", "novelty"], top_k=3)
    ref.update(np.argsort(-scores, axis=1, kind="stable")[:, :3])
    for key, value in ref.compute().items():
        assert close(state.metrics[key], value), key


def tie_orders(scores: np.ndarray, valid: np.ndarray) -> list[list[int]]:
    """Every order of a row's valid items by descending score (tied items in any order)."""
    items = [i for i in range(len(scores)) if valid[i]]
    return [
        list(p)
        for p in itertools.permutations(items)
        if all(scores[a] >= scores[b] for a, b in itertools.pairwise(p))
    ]


def naive_gini(counts: np.ndarray) -> float:
    """Gini of a count vector (Wikipedia's sorted-index form, as RecBole's GiniIndex)."""
    c, n = np.sort(counts), len(counts)
    return float(sum((2 * (i + 1) - n - 1) * c[i] for i in range(n)) / (n * c.sum()))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), q=st.integers(1, 3), levels=st.integers(1, 3))
def test_expected_ties_enumeration(seed, q, levels):
    """ties="expected" against every order of the tied scores, enumerated: per-list means over
    each row's orders, coverage and personalization over every combination of the rows'
    orders; entropy and Gini are those of the mean counts (documented as such)."""
    rng = np.random.default_rng(seed)
    n = 4
    items = make_items(n, seed=seed % 3)
    scores = rng.integers(0, levels, (q, n)).astype(float)
    valid = rng.random((q, n)) > 0.2
    ks = [2, 3, 5]
    m = BeyondAccuracy(items, top_k=ks, ties="expected")
    m.update_scores(scores, valid)
    got = m.compute()
    orders = [tie_orders(s, v) for s, v in zip(scores, valid, strict=True)]
    rows = [o for o in orders if o[0]]  # rows with an item
    for k in ks:
        combos = [[o[:k] for o in combo] for combo in itertools.product(*rows)]
        cover = np.mean([naive_catalog("coverage", c, n) for c in combos]) if rows else 0.0
        assert close(got[f"coverage@{k}"], float(cover))
        person = np.mean([naive_personalization(c, min(k, n)) for c in combos]) if len(rows) > 1 else np.nan
        assert close(got[f"personalization@{k}"], float(person))
        counts = np.mean([np.bincount([i for x in c for i in x], minlength=n) for c in combos], axis=0)
        if counts.sum() > 0:
            p = counts[counts > 0] / counts.sum()
            assert close(got[f"entropy@{k}"], float(-(p * np.log2(p)).sum()))
            assert close(got[f"gini@{k}"], naive_gini(counts))
        for metric in ("novelty", "arp", "aplt", "aclt", "diversity", "ild"):
            per_row = [[naive_per_list(metric, o[:k], items) for o in row] for row in rows]
            values = [float(np.mean(v)) for v in per_row if v[0] is not None]
            assert close(got[f"{metric}@{k}"], float(np.mean(values)) if values else float("nan")), metric


def test_list_metrics_in_blocks_of_rows():
    """A batch whose selection goes in blocks of rows (256 x 100 at k = 100: the selection
    would pass its share of the scores' bytes) sums the blocks' counts: as one pass."""
    from rankstream.core.execution import blocks

    rng = np.random.default_rng(9)
    n = 100
    items = make_items(n, seed=9)
    scores = rng.integers(0, 5, (256, n)).astype(float)
    lm = ListMetrics(["coverage@100", "personalization@7", "novelty@100", "diversity@7"], items=items)
    calls = []
    original = blocks._by_blocks
    try:
        blocks._by_blocks = lambda *a, **kw: calls.append(1) or original(*a, **kw)
        got = result(lm, lm.batch_sums(None, scores, np.zeros_like(scores)))
    finally:
        blocks._by_blocks = original
    assert calls, "the batch was expected to go in blocks of rows"
    ref = BeyondAccuracy(items, ["coverage", "personalization", "novelty", "diversity"], top_k=[7, 100])
    ref.update(np.argsort(-scores, axis=1, kind="stable"))
    want = ref.compute()
    for name in got:
        assert close(got[name], want[name]), name


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_bincount_op(backend):
    """Ops.bincount (the per-item counts' one pass) against np.add.at, with zero weights and
    repeated keys."""
    from rankstream.core.backends import numpy_ops, torch_ops

    rng = np.random.default_rng(9)
    keys, weights = rng.integers(0, 7, 30), rng.integers(0, 3, 30).astype(np.float64)
    want = np.zeros(9)
    np.add.at(want, keys, weights)
    ops = numpy_ops() if backend == "numpy" else torch_ops()
    conv = np.asarray if backend == "numpy" else torch.as_tensor
    np.testing.assert_array_equal(ops.to_numpy(ops.bincount(conv(keys), conv(weights), 9)), want)


def test_ignite_list_metrics_with_items():
    """rankstream.ignite.ListMetrics(items=): beyond names beside accuracy names through an
    Engine equal BeyondAccuracy over the stable top ids; nDCG reads as without them."""
    from ignite.engine import Engine

    from rankstream.ignite import ListMetrics as IgniteListMetrics

    rng = np.random.default_rng(10)
    items = make_items()
    batches = [
        (
            torch.as_tensor(rng.integers(0, 3, (b, N)).astype(float)),
            torch.as_tensor(rng.integers(0, 2, (b, N))),
        )
        for b in (4, 0, 6)
    ]
    both = IgniteListMetrics(["ndcg@3", "coverage@3", "personalization@2", "diversity@3"], items=items)
    alone = IgniteListMetrics(["ndcg@3"], prefix="alone_")
    engine = Engine(lambda e, batch: batch)
    both.attach(engine, "both")
    alone.attach(engine, "alone")
    metrics = engine.run(batches, max_epochs=1).metrics
    scores = torch.cat([b[0] for b in batches]).numpy()
    top = np.argsort(-scores, axis=1, kind="stable")
    for k, names in ((3, ["coverage", "diversity"]), (2, ["personalization"])):
        ref = BeyondAccuracy(items, names, top_k=k)
        ref.update(top[:, :k])
        for key, value in ref.compute().items():
            assert metrics["both"][key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    assert metrics["both"]["ndcg@3"] == pytest.approx(metrics["alone"]["alone_ndcg@3"], rel=1e-12)
