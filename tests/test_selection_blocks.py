"""A large selection (trec_eval's depth of 1,000, whole lists) is evaluated in blocks of rows
where values are read back (:func:`~rankstream.core.execution.select_outputs`). With blocks
forced small (one row, three rows), every list metric, a collection and a paired comparison
give the values of the naive one-list-at-a-time references (tests/reference.py) and the values
without blocks, on masked, weighted, tie-heavy data, under every convention; the budget itself
keeps small batches and small ``k`` in one block."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch
from ignite.engine import Engine

import rankstream.core.execution.blocks as base
import rankstream.core.lists.selection as selection
import rankstream.core.sizes as sizes
from rankstream import PairedComparison, State
from rankstream.core.backends import host_batches_enabled, read_back
from rankstream.core.inputs import ListBatch
from rankstream.core.lists.collection import ListMetrics, make_kernel
from rankstream.ignite import ListMetrics as IgniteListMetrics

import reference as ref

pytestmark = pytest.mark.usefixtures("list_path")

# name -> (naive per-list reference, its options); the kernels' defaults are the references'
REFERENCES = {
    "ndcg@3": (ref.ndcg, {}),
    "dcg@3": (ref.dcg, {}),
    "map@3": (ref.average_precision, {}),
    "precision@3": (ref.precision, {}),
    "recall@3": (ref.recall, {}),
    "hit_rate@3": (ref.hit_rate, {}),
    "mrr@3": (ref.reciprocal_rank, {}),
    "r_precision": (ref.r_precision, {}),
    "f1@3": (ref.f1, {}),
    "err@3": (ref.err, {}),
    "rbp@3": (ref.rbp, {}),
    "auc": (ref.auc, {}),
}


@contextlib.contextmanager
def forced_blocks(rows: int) -> Iterator[list[int]]:
    """Every batch read back selected in blocks of ``rows`` rows (whatever its size); yields
    the numbers of blocks the updates took, one per selection."""
    seen: list[int] = []
    decide, cut = base.selection_blocks, selection.row_slices

    def counted(*args, **kwargs):
        blocks = decide(*args, **kwargs)
        seen.append(1 if blocks is None else len(blocks))
        return blocks

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sizes, "SIZES", replace(sizes.SIZES, select_blocks_from=0, select_share=0))
        mp.setattr(selection, "row_slices", lambda b, step: cut(b, rows))
        mp.setattr(base, "row_slices", lambda b, step: cut(b, rows))
        mp.setattr(base, "selection_blocks", counted)
        yield seen


def case(seed: int, b: int = 9, n: int = 11):
    """Tied scores, graded labels, a mask (one list fully masked, relevant labels under it),
    list weights (one 0), lists without a relevant item."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 4, size=(b, n)).astype(np.float64)
    y = rng.integers(0, 5, size=(b, n)).astype(np.float64) * (rng.random((b, n)) < 0.5)
    y[2] = 0.0
    m = rng.random((b, n)) < 0.8
    m[1] = False
    y[1, :3] = 3.0
    w = rng.integers(0, 4, size=b).astype(np.float64)
    w[0] = 2.5
    return s, y, m, w


def state_of(kernel, parts, to=np.asarray) -> State:
    st = State(kernel)
    for p in parts:
        st.update(*(None if x is None else to(x) for x in p))
    return st


def sums_equal(got: State, want: State) -> None:
    assert got.sums.keys() == want.sums.keys()
    for field, value in want.sums.items():
        assert np.asarray(got.sums[field]) == pytest.approx(np.asarray(value), rel=1e-12, abs=1e-12), field


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("name", REFERENCES)
@pytest.mark.parametrize("seed", range(4))
def test_every_list_metric_in_blocks_is_the_naive_reference(name, seed, rows):
    fn, kw = REFERENCES[name]
    empty = ["skip", "zero"][seed % 2]
    threshold = {} if seed < 2 else {"relevance_threshold": 2.0}
    parts = [case(seed), case(seed + 10, b=5)]
    kernel = make_kernel(name, empty=empty, **threshold)
    with forced_blocks(rows) as seen:
        got = state_of(kernel, parts)
    assert max(seen) > 1
    k = None if "@" not in name else int(name.split("@")[1])
    scores, labels, masks, weights = (np.concatenate([p[i] for p in parts]) for i in range(4))
    t = {} if not threshold else {"threshold": 2.0}
    want = ref.mean_over_lists(fn, scores, labels, k, masks=masks, weights=weights, empty=empty, **t, **kw)
    value = got.compute()
    value = value["value"] if isinstance(value, dict) else value
    assert np.ravel(value)[0] == pytest.approx(want, rel=1e-12)
    sums_equal(got, state_of(kernel, parts))


CONVENTIONS = {
    "expected_ties": {"ties": "expected"},
    "chance": {"chance": True},
    "confidence": {"confidence": 0.95},
    "zero": {"empty": "zero", "relevance_threshold": 2.0},
}
CHANCE_NAMES = ["ndcg@3", "dcg@3", "map@3", "precision@3", "recall@3", "hit_rate@3", "r_precision"]


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("conventions", CONVENTIONS)
def test_a_collection_in_blocks_keeps_its_sums_under_every_convention(conventions, rows):
    names = CHANCE_NAMES if conventions == "chance" else list(REFERENCES)
    if conventions == "expected_ties":  # ERR, a product along the ranking, has no such form
        names.remove("err@3")
    kernel = ListMetrics(names, **CONVENTIONS[conventions])
    parts = [case(3), case(4, b=6, n=30)]
    with forced_blocks(rows) as seen:
        got = state_of(kernel, parts, torch.from_numpy)
    assert max(seen) > 1
    sums_equal(got, state_of(kernel, parts, torch.from_numpy))


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("chance", [False, True])
def test_keras_rs_weighting_with_per_item_weights_in_blocks(chance, rows):
    """A list without relevance weighs the mean list weight of the batch's lists: read from the
    joined outputs (counted under ``empty="zero"``)."""
    s, y, m, _ = case(5, b=10, n=12)
    y[3:6, :4] = -1.0  # padding under keras-rs's negative labels
    rng = np.random.default_rng(6)
    w = rng.random(s.shape) * 3.0
    w[4] = 0.0
    conv = {"weighting": "keras_rs", "negative_labels": "mask", "empty": "zero", "chance": chance}
    # chance with per-item weights: nDCG and DCG
    names = ["ndcg@4", "dcg@3"] + ([] if chance else ["map@2", "recall@3", "precision@3"])
    for kernel in [make_kernel(n, **conv) for n in names] + [ListMetrics(names, **conv)]:
        parts = [(s, y, m, w), (s, y, None, w)]
        with forced_blocks(rows) as seen:
            got = state_of(kernel, parts)
        assert max(seen) > 1
        sums_equal(got, state_of(kernel, parts))


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_random_ties_in_blocks_take_the_batchs_one_permutation(rows):
    """The tie order comes from one random column permutation per batch, drawn where the
    batch shows a tie: the blocks share the one their first tie drew, so the sums equal the
    batch in one piece seed for seed (and a batch without ties draws nothing in either)."""
    kernel = ListMetrics(["ndcg@3", "map@5", "mrr@2"], ties="random", seed=3)
    untied = case(9)
    untied = (untied[0] + np.arange(untied[0].shape[1]) * 1e-3, *untied[1:])  # no ties
    parts = [case(7), untied, case(8)]
    with forced_blocks(rows) as seen:
        got = state_of(kernel, parts)
    assert max(seen) > 1
    sums_equal(got, state_of(kernel, parts))
    other = state_of(ListMetrics(["ndcg@3", "map@5", "mrr@2"], ties="random", seed=4), parts)
    assert any(not np.allclose(np.asarray(got.sums[f]), np.asarray(other.sums[f])) for f in got.sums)  # drawn


def test_a_collection_in_an_engine_in_blocks_is_the_naive_reference():
    names = list(REFERENCES)
    batches = [tuple(torch.from_numpy(x) for x in case(seed)) for seed in (11, 12)]
    engine = Engine(lambda e, b: (b[0], b[1], {"mask": b[2], "sample_weight": b[3]}))
    IgniteListMetrics(names).attach(engine, "lists")
    with forced_blocks(2) as seen:
        got = engine.run(batches).metrics["lists"]
    assert max(seen) > 1
    scores, labels, masks, weights = (np.concatenate([b[i].numpy() for b in batches]) for i in range(4))
    for name in names:
        fn, kw = REFERENCES[name]
        k = None if "@" not in name else int(name.split("@")[1])
        want = ref.mean_over_lists(fn, scores, labels, k, masks=masks, weights=weights, **kw)
        assert got[name] == pytest.approx(want, rel=1e-12), name


@pytest.mark.parametrize("ties", ["first", "expected", "random"])
def test_blocks_of_a_larger_batch_on_the_host_ops_through_an_engine(ties):
    """A torch batch over the host ops' size (64 x 2,100 = 134,400 scores) is selected on torch
    ops, its blocks of 3 rows (at most a 16th of the rows) on the host ops (numpy views), whose
    outputs come back as torch tensors: the reference values (tied scores, graded labels, a
    mask, list weights), the same sums as the blocks on torch ops and, under random ties, as the
    batch in one piece seed for seed; for ``ties="first"`` the naive reference."""
    names = ["ndcg@3", "map@3", "recall@3", "mrr@3", "r_precision", "dcg@3"]
    s, y, m, w = case(21, b=64, n=2100)
    batch = tuple(torch.from_numpy(x) for x in (s, y, m, w))
    exported = []

    def spy(real):
        def spied(ops, out):
            exported.append(type(ops).__name__)
            return real(ops, out)

        return spied

    def run(blocks: bool, host: bool) -> dict:
        engine = Engine(lambda e, b: (b[0], b[1], {"mask": b[2], "sample_weight": b[3]}))
        IgniteListMetrics(names, ties=ties, seed=5).attach(engine, "lists")
        with contextlib.ExitStack() as stack:
            if blocks:
                stack.enter_context(forced_blocks(3))
            if not host:
                stack.enter_context(pytest.MonkeyPatch.context()).setattr(
                    base.Context, "on_host", lambda self, *a: (self, a)
                )
            return engine.run([batch]).metrics["lists"]

    with pytest.MonkeyPatch.context() as mp:
        # the blocks' per-list outputs (ListMetrics.per_list), or their sums (an update)
        mp.setattr(base, "_exported_output", spy(base._exported_output))
        mp.setattr(base, "_exported_sums", spy(base._exported_sums))
        got = run(True, True)
    # (the module's "torch" path turns the host ops off: the blocks stay on torch there)
    assert set(exported) == ({"TorchHostOps"} if host_batches_enabled() else set())
    on_torch, whole = run(True, False), run(False, True)
    for name in names:
        assert got[name] == pytest.approx(on_torch[name], rel=1e-12, abs=1e-15), name
        assert got[name] == pytest.approx(whole[name], rel=1e-12, abs=1e-15), name
    if ties != "first":  # the reference breaks ties by index (the other policies: the one piece)
        return
    for name in names:
        fn, kw = REFERENCES[name]
        k = None if "@" not in name else int(name.split("@")[1])
        want = ref.mean_over_lists(fn, s, y, k, masks=m, weights=w, **kw)
        assert got[name] == pytest.approx(want, rel=1e-12), name


def test_a_paired_comparison_in_blocks_keeps_its_per_list_values():
    s, y, m, w = case(13)
    pc = PairedComparison(["ndcg@3", "r_precision"], ["a", "b"])
    scores = {"a": s, "b": s[:, ::-1].copy()}
    want = pc.per_list(scores, y, m, w)
    with forced_blocks(2) as seen:
        got = pc.per_list(scores, y, m, w)
    assert max(seen) > 1
    for name, parts in want.items():
        for a, b in zip(got[name], parts, strict=True):
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12)


# -- the budget -----------------------------------------------------------------------------


def shaped(b: int, n: int, dtype=np.float32) -> ListBatch:
    """A batch of these shapes (no memory: broadcast zeros); the budget reads shapes only."""
    z = np.broadcast_to(np.zeros((), dtype), (b, n))
    return ListBatch(None, z, z, None, None)


@pytest.mark.parametrize(
    ("b", "n", "k"), [(32, 100, 10), (1024, 20_000, 10), (256, 20_000, 100), (64, 4096, 20)]
)
def test_small_selections_take_one_block(b, n, k):
    ctx = make_kernel("map@1").context(np.zeros((1, 1)))
    assert base.selection_blocks(ctx, shaped(b, n), k) is None


@pytest.mark.parametrize(("b", "n", "k"), [(256, 20_000, 1000), (256, 20_000, 5000), (1024, 20_000, 1000)])
def test_a_deep_selection_holds_an_eighth_of_the_scores_per_block(b, n, k):
    batch = shaped(b, n)
    ctx = make_kernel("map@1").context(np.zeros((1, 1)))
    blocks = base.selection_blocks(ctx, batch, k)
    assert len(blocks) > 1 and blocks[0].start == 0 and blocks[-1].stop == b
    assert all(x.stop == y.start for x, y in itertools.pairwise(blocks))
    most = max(x.stop - x.start for x in blocks)
    assert most * k * sizes.SIZES.selected_bytes <= b * n * 4 * sizes.SIZES.select_share


def test_a_traced_batch_is_never_cut(monkeypatch):
    """Where values are not read back (a trace, an accelerator), the batch is one selection."""
    calls = []
    monkeypatch.setattr(base, "selection_blocks", lambda *a: calls.append(a))
    s, y, m, w = case(1)
    with read_back(False):
        State(make_kernel("map@3")).update(s, y, m, w)
    assert calls == []
