"""Temporary memory of one update: at most a quarter of the scores' bytes for the list metrics
and their collection, half for the rank-based metrics (CPU torch).

Measured with :func:`benchmarks.common.peak_temp_bytes` (torch's allocations replayed from
``torch.profiler``, numpy's buffers from ``tracemalloc``), itself checked against allocations
of known size first. Each case measures a fresh metric's first batch (what it allocates and
keeps, such as workspace tiles, counts) after another instance of it has run once on the same
shapes, so that lazy imports and process-wide caches are not charged to the update.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from _hang_guard import run
from ignite.engine import Engine

import rankstream as rs
import rankstream.core.sizes as sizes
import rankstream.ignite as ri
from benchmarks.common import peak_temp_bytes
from rankstream import ListMetrics as ListMetricsKernel
from rankstream import MAPKernel, State

import reference as ref
from pykeen_reference import naive_tasks, pykeen_reference

B, N = 256, 20_000
MIB = 1 << 20
LIST_SHARE, RANK_SHARE = 0.25, 0.5


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(B, N, generator=g)
    labels = (torch.rand(B, N, generator=g) < 0.005).float()
    target = torch.randint(0, N, (B,), generator=g)
    mask = torch.rand(B, N, generator=g) > 2.0 / N
    mask[torch.arange(B), target] = True
    # the rank metrics' binary labels: a few positives per row (link prediction's filtered
    # setting); their per-task work grows with the tasks (about 1 KiB each), not the scores
    positives = (torch.rand(B, N, generator=g) < 2.0 / N).float()
    positives[torch.arange(B), target] = 1.0
    # R-precision's depth is the batch's largest R: 30% relevant makes it a top-6,000 selection
    dense = (torch.rand(B, N, generator=g) < 0.3).float()
    return {
        "scores": scores, "labels": labels, "target": target, "mask": mask, "positives": positives,
        "dense": dense,
    }  # fmt: skip


def scores_bytes(d) -> int:
    return d["scores"].numel() * d["scores"].element_size()


# -- the method -----------------------------------------------------------------------------


def test_the_measure_sees_a_torch_buffer_of_known_size():
    got = peak_temp_bytes(lambda: torch.empty(2 * MIB))  # 2 Mi float32
    assert 8 * MIB <= got < 8 * MIB + 64 * 1024
    assert peak_temp_bytes(lambda: None) < 64 * 1024


def test_the_measure_takes_the_peak_of_live_torch_temporaries_not_their_sum():
    def two_in_turn():
        a = torch.empty(MIB, dtype=torch.float64)  # 8 MiB
        del a
        b = torch.empty(MIB // 2, dtype=torch.float64)  # 4 MiB
        return b.shape

    def two_at_once():
        a = torch.empty(MIB, dtype=torch.float64)
        b = torch.empty(MIB // 2, dtype=torch.float64)
        return a.shape, b.shape

    assert abs(peak_temp_bytes(two_in_turn) - 8 * MIB) < 64 * 1024
    assert abs(peak_temp_bytes(two_at_once) - 12 * MIB) < 64 * 1024


def test_the_measure_sees_a_numpy_temporary():
    x = np.arange(MIB, dtype=np.float64)
    got = peak_temp_bytes(lambda: float((x * 2.0).sum()))  # an 8 MiB temporary
    assert 8 * MIB <= got < 8 * MIB + 256 * 1024


# -- list metrics ---------------------------------------------------------------------------

LIST_METRICS = {
    "MAP": lambda: ri.MAP(top_k=[1, 5, 10, 20]),
    "NDCG": lambda: ri.NDCG(top_k=[1, 5, 10, 20]),
    "Precision": lambda: ri.Precision(top_k=[5, 20]),
    "Recall": lambda: ri.Recall(top_k=[5, 20]),
    "HitRate": lambda: ri.HitRate(top_k=[5, 20]),
    "MeanReciprocalRank": lambda: ri.MeanReciprocalRank(top_k=[10]),
    "DCG": lambda: ri.DCG(top_k=[5, 20]),
    "ListMetrics": lambda: ri.ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5"]),
    # trec_eval's depth and deeper: the selection goes in blocks of rows
    "MAP@1000": lambda: ri.MAP(top_k=[1000]),
    "NDCG@1000": lambda: ri.NDCG(top_k=[1000]),
    "Recall@1000": lambda: ri.Recall(top_k=[1000]),
    "NDCG@5000": lambda: ri.NDCG(top_k=[5000]),
    "ListMetrics@1000": lambda: ri.ListMetrics(["r_precision", "map@1000", "ndcg@10"]),
    "MAP@1000 random ties": lambda: ri.MAP(top_k=[1000], ties="random", seed=0),
}


def engine_peak(make, batches) -> int:
    """Peak temporary bytes of an Engine run over ``batches`` with a fresh metric attached
    (after one run of another instance on the same batches)."""
    for fresh in (True, False):
        engine = Engine(lambda e, b: b)
        make().attach(engine, "m")
        if fresh:
            engine.run(batches)
        else:
            return peak_temp_bytes(lambda engine=engine: engine.run(batches))
    raise AssertionError


@pytest.mark.parametrize("name", sorted(LIST_METRICS))
def test_a_list_metric_update_in_an_engine_holds_at_most_a_quarter_of_the_scores(batch, name):
    got = engine_peak(LIST_METRICS[name], [(batch["scores"], batch["labels"])])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize("labels", ["labels", "dense"])
@pytest.mark.parametrize("masked", [False, True])
def test_r_precision_holds_at_most_a_quarter_of_the_scores(batch, masked, labels):
    out = (batch["scores"], batch[labels]) + (({"mask": batch["mask"]},) if masked else ())
    got = engine_peak(lambda: ri.RPrecision(), [out])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize(
    ("names", "labels"), [(["r_precision", "map@5"], "labels"), (["r_precision", "map@1000"], "dense")]
)
def test_a_collection_with_r_precision_holds_at_most_a_quarter_of_the_scores(batch, names, labels):
    got = engine_peak(lambda: ri.ListMetrics(names), [(batch["scores"], batch[labels])])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{got / scores_bytes(batch):.3f}x the scores"


NARROW = {
    "MAP": lambda: ri.MAP(top_k=[1, 5, 10, 20]),
    "Recall": lambda: ri.Recall(top_k=[5, 20]),
    "NDCG": lambda: ri.NDCG(top_k=[1, 5, 10, 20]),
    "MeanReciprocalRank": lambda: ri.MeanReciprocalRank(top_k=[20]),
    "RPrecision": lambda: ri.RPrecision(),
    "ERR": lambda: ri.ERR(top_k=[20]),
    "ListMetrics": lambda: ri.ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5"]),
    "MAP@100": lambda: ri.MAP(top_k=[100]),
    "ListMetrics@100": lambda: ri.ListMetrics(["ndcg@100", "map@100", "recall@100", "mrr@100"]),
    "NDCG@1000": lambda: ri.NDCG(top_k=[1000]),
    "MAP random ties": lambda: ri.MAP(top_k=[1, 5, 10, 20], ties="random", seed=0),
}


#: 2^21 scores (41,944 x 50: just over) in lists of 50 to 8,192 items
NARROW_SHAPES = [(41944, 50), (16384, 128), (2048, 1024), (1024, 2048), (256, 8192)]


#: every metric at every shape; of the four (masked, tied) combinations each case takes one in
#: turn, so that every metric and every shape meets all four (a pairwise design: 55 cases, not 220)
NARROW_CASES = [
    (name, shape, *[(False, False), (True, False), (False, True), (True, True)][(i + j) % 4])
    for i, name in enumerate(sorted(NARROW))
    for j, shape in enumerate(NARROW_SHAPES)
]


def test_the_narrow_cases_meet_every_combination():
    for axis in (0, 1):
        seen: dict = {}
        for case in NARROW_CASES:
            seen.setdefault(case[axis], set()).add(case[2:])
        assert all(len(combos) == 4 for combos in seen.values()), axis


@pytest.mark.parametrize(
    ("name", "shape", "masked", "tied"),
    NARROW_CASES,
    ids=[
        f"{n}-{s[0]}x{s[1]}-{'masked' if m else 'full'}-{'tied' if t else 'distinct'}"
        for n, s, m, t in NARROW_CASES
    ],
)
def test_the_smallest_batches_the_bound_is_promised_for_hold_it(name, shape, masked, tied):
    """2^21 float32 scores (where the promised bound starts: docs/performance.md#memory) in lists
    of 50 items and more, 5% of the labels relevant, a ragged mask: there a top-20 selection's
    arrays are 0.15-2x of the scores in one piece, so the rows go in blocks sized by the kernels'
    bytes per ranked item and per list, each block's per-list outputs are reduced to sums as it
    comes, and the counting passes' tiles are a 16th. Scores in steps of 1/8 make every row tie
    inside its top k: the tied rows are ordered in pieces (a sort of their selection and the
    search of the group at place k, about 64 bytes per ranked item) of at most a 16th of the
    scores."""
    g = torch.Generator().manual_seed(5)
    b, n = shape
    scores = torch.randn(b, n, generator=g)
    if tied:
        scores = torch.round(scores * 8) / 8
    labels = (torch.rand(b, n, generator=g) < 0.05).float()
    mask = torch.arange(n)[None, :] < torch.randint(n // 2, n + 1, (b, 1), generator=g)
    out = (scores, labels) + (({"mask": mask},) if masked else ())
    got = engine_peak(NARROW[name], [out])
    nbytes = scores.numel() * scores.element_size()
    assert got <= LIST_SHARE * nbytes, f"{name}: {got / nbytes:.3f}x the scores"


@pytest.mark.parametrize("name", sorted(LIST_METRICS))
def test_a_masked_list_batch_holds_at_most_a_quarter_of_the_scores(batch, name):
    out = (batch["scores"], batch["labels"], {"mask": batch["mask"]})
    got = engine_peak(LIST_METRICS[name], [out])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize("make", [lambda: ri.ListAUC(), lambda: ri.GAUC()], ids=["auc", "gauc"])
@pytest.mark.parametrize("masked", [False, True])
def test_the_per_list_auc_sorts_in_blocks_of_rows(batch, make, masked):
    """AUC needs every item's place (a sort per list): lists are sorted in blocks of rows, so
    the update holds at most a quarter of the scores; a mask adds the masked top-1 selection's
    tile (an eighth of the scores), which the sort of a block then comes on top of."""
    out = (batch["scores"], batch["labels"]) + (({"mask": batch["mask"]},) if masked else ())
    got = engine_peak(make, [out])
    bound = LIST_SHARE + (0.125 if masked else 0.0)
    assert got <= bound * scores_bytes(batch), f"{got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize("make", [lambda: ri.ListAUC(), lambda: ri.GAUC()], ids=["auc", "gauc"])
def test_the_masked_per_list_auc_holds_at_most_a_quarter_of_the_scores(batch, make):
    """The masked top-1 selection's tile is a 32nd of the scores, each block's sort drops its
    temporaries once read, and GAUC counts the items of the lists from the mask's bytes."""
    got = engine_peak(make, [(batch["scores"], batch["labels"], {"mask": batch["mask"]})])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{got / scores_bytes(batch):.3f}x the scores"


TIED = {
    "NDCG": lambda ties: ri.NDCG(top_k=[1, 5, 10, 20], ties=ties),
    "MAP": lambda ties: ri.MAP(top_k=[1, 5, 10, 20], ties=ties),
    "MeanReciprocalRank": lambda ties: ri.MeanReciprocalRank(top_k=[10], ties=ties),
    "RPrecision": lambda ties: ri.RPrecision(ties=ties),
    "ListMetrics": lambda ties: ri.ListMetrics(
        [f"{m}@{k}" for m in ("ndcg", "map", "recall", "mrr", "precision") for k in (5, 10, 20)], ties=ties
    ),
}


@pytest.fixture(scope="module")
def tied_scores(batch):
    """The scores rounded to 0.01: a few hundred distinct values per list, ties at every k."""
    return torch.round(batch["scores"] * 100.0) / 100.0


@pytest.mark.parametrize("ties", ["first", "expected"])
@pytest.mark.parametrize(
    ("name", "masked"),
    [(name, False) for name in sorted(TIED)] + [(name, True) for name in ("ListMetrics", "RPrecision")],
)
def test_rows_tied_throughout_hold_at_most_a_quarter_of_the_scores(batch, tied_scores, name, masked, ties):
    """``ties="first"`` orders the top ``k + 1`` in place (the group at ``k`` completed by a
    tiled comparison pass), never re-sorting a row; ``"expected"`` reads its groups likewise."""
    out = (tied_scores, batch["labels"]) + (({"mask": batch["mask"]},) if masked else ())
    got = engine_peak(lambda: TIED[name](ties), [out])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize(("name", "masked"), [("ListMetrics", False), ("RPrecision", True)])
def test_random_ties_on_rows_tied_throughout_hold_at_most_a_quarter_of_the_scores(
    batch, tied_scores, name, masked
):
    """``ties="random"`` takes the same in-place order as ``"first"``, with each item's place in
    the batch's random column permutation in place of its index (no tied row re-sorted)."""
    out = (tied_scores, batch["labels"]) + (({"mask": batch["mask"]},) if masked else ())
    got = engine_peak(lambda: TIED[name]("random"), [out])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize("name", ["MAP", "NDCG", "ListMetrics"])
def test_a_mask_on_a_smaller_batch_makes_no_copy_of_it(name):
    """1,024 x 1,024 float32 (4 MiB, below one tile of the counting passes): the masked top-k
    is ranked in row tiles of an eighth of the batch, so a mask adds at most about that to the
    update's temporaries (a masked copy of the scores would add 1.0x). At this size the rest
    (the counting passes' 1 MiB tile, the per-list (B, k) arrays) is 0.27-0.5x of the scores."""
    g = torch.Generator().manual_seed(3)
    b, n = 1024, 1024
    scores = torch.randn(b, n, generator=g)
    labels = (torch.rand(b, n, generator=g) < 0.02).float()
    mask = torch.rand(b, n, generator=g) > 0.1
    plain = engine_peak(LIST_METRICS[name], [(scores, labels)])
    masked = engine_peak(LIST_METRICS[name], [(scores, labels, {"mask": mask})])
    extra = (masked - plain) / (scores.numel() * 4)
    assert extra <= 0.2, f"{name}: a mask adds {extra:.3f}x the scores"


@pytest.mark.parametrize(
    "make",
    [lambda: MAPKernel(top_k=[1, 5, 10, 20]), lambda: ListMetricsKernel(["ndcg@10", "map@5", "recall@20"])],
)
def test_the_core_state_on_torch_tensors_holds_at_most_a_quarter_of_the_scores(batch, make):
    s, y = batch["scores"], batch["labels"]
    State(make()).update(s, y)
    st = State(make())
    got = peak_temp_bytes(lambda: st.update(s, y))
    assert got <= LIST_SHARE * scores_bytes(batch)


def test_tiled_counts_give_the_relevant_count_of_every_list(batch):
    # the tiles cover every item once: R per list as numpy counts it, through the metric
    s, y = batch["scores"], batch["labels"]
    m = ri.Recall(top_k=[N])  # recall at the whole list is 1 on every list with a relevant item
    engine = Engine(lambda e, b: b)
    m.attach(engine, "r")
    assert engine.run([(s, y)]).metrics["r"] == pytest.approx([1.0])


def garbage_masked_batch(b: int = 64, n: int = 4096, seed: int = 1, ties: bool = True):
    """A batch large enough for the tiled passes (several row tiles), with tied scores (or none:
    ``ties=False``), a few relevant items per list, several lists with R past 20, and NaN, +inf
    and -inf labels on masked items only (what a masked item holds must not count)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 400, (b, n), generator=g).float()  # many ties
    if not ties:  # no tie anywhere: every row keeps the masked top-k as selected
        scores = torch.randperm(b * n, generator=g).reshape(b, n).float()
    labels = (torch.rand(b, n, generator=g) < 0.01).float() * torch.randint(1, 4, (b, n), generator=g)
    labels[: b // 4, :60] = 1.0  # R past the metrics' k on a quarter of the lists
    mask = torch.rand(b, n, generator=g) > 0.2
    junk = ~mask & (torch.rand(b, n, generator=g) < 0.3)
    labels[junk] = torch.tensor([float("nan"), float("inf"), float("-inf")])[
        torch.randint(0, 3, (int(junk.sum()),), generator=g)
    ]
    mask[-1] = False  # a list with no item: not a list
    return scores, labels, mask


@pytest.fixture(params=["tiled top-k", "one masked copy"])
def masked_topk_tiles(request, monkeypatch):
    """The masked top-k in row tiles (its default from 2^16 values on), or as one top-k of a
    masked copy of the whole batch (its path below that size)."""
    if request.param == "one masked copy":
        monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, tiled_topk=1 << 40))
    return request.param


@pytest.mark.parametrize("ties", [True, False])
def test_masked_tiled_batches_give_the_reference_values_through_an_engine(masked_topk_tiles, ties):
    s, y, m = garbage_masked_batch(ties=ties)
    names = {
        "ndcg@10": ref.ndcg,
        "map@5": ref.average_precision,
        "recall@20": ref.recall,
        "precision@5": ref.precision,
        "mrr@10": ref.reciprocal_rank,
        "r_precision": ref.r_precision,
    }
    engine = Engine(lambda e, b: b)
    ri.ListMetrics(list(names)).attach(engine, "m")
    got = engine.run([(s, y, {"mask": m})]).metrics["m"]
    sl, yl, ml = s.tolist(), y.tolist(), m.tolist()
    for name, fn in names.items():
        k = int(name.split("@")[1]) if "@" in name else n_items(s)
        want = ref.mean_over_lists(fn, sl, yl, k, masks=ml)
        assert got[name] == pytest.approx(want, rel=1e-9), name


def n_items(s) -> int:
    return int(s.shape[1])


def test_r_precision_from_the_top_max_r_matches_the_reference_on_ties_and_masks(masked_topk_tiles):
    s, y, m = garbage_masked_batch(seed=2)
    for out, masks in (((s, y.nan_to_num(0.0, 0.0, 0.0)), None), ((s, y, {"mask": m}), m.tolist())):
        engine = Engine(lambda e, b: b)
        ri.RPrecision().attach(engine, "rp")
        got = engine.run([out]).metrics["rp"]
        want = ref.mean_over_lists(ref.r_precision, s.tolist(), out[1].tolist(), 0, masks=masks)
        assert got == pytest.approx(want, rel=1e-9)


# -- per-item weights (keras-rs's (batch, list_size) sample_weight) ----------------------

KERAS_RS = {"weighting": "keras_rs", "negative_labels": "mask"}
ITEM_WEIGHTED = {
    "MAP": lambda: MAPKernel(top_k=[1, 5, 10, 20], **KERAS_RS),
    "NDCG": lambda: rs.NDCGKernel(top_k=[1, 5, 10, 20], **KERAS_RS),
    "DCG": lambda: rs.DCGKernel(top_k=[5, 20], **KERAS_RS),
    "Precision": lambda: rs.PrecisionKernel(top_k=[5, 20], **KERAS_RS),
    "Recall": lambda: rs.RecallKernel(top_k=[5, 20], **KERAS_RS),
    "HitRate": lambda: rs.HitRateKernel(top_k=[5, 20], **KERAS_RS),
    "MeanReciprocalRank": lambda: rs.ReciprocalRankKernel(top_k=[10], **KERAS_RS),
    "RPrecision": lambda: rs.RPrecisionKernel(**KERAS_RS),
    "ListMetrics": lambda: ListMetricsKernel(
        ["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5"], **KERAS_RS
    ),
    "NDCG chance": lambda: rs.NDCGKernel(top_k=[1, 5, 10, 20], chance=True, **KERAS_RS),
    "DCG chance": lambda: rs.DCGKernel(top_k=[5, 20], chance=True, **KERAS_RS),
}


@pytest.fixture(scope="module")
def item_weights():
    """Per-item weights in [0.5, 1.5): every item keeps its place in its list."""
    return torch.rand(B, N, generator=torch.Generator().manual_seed(11)) + 0.5


@pytest.mark.parametrize(
    ("name", "masked", "labels"),
    [(name, False, "labels") for name in sorted(ITEM_WEIGHTED) if "chance" not in name]
    + [(name, True, "labels") for name in ("ListMetrics", "RPrecision")]
    + [
        (name, masked, labels)
        for name in ("DCG chance", "NDCG chance")
        for labels in ("labels", "graded", "graded_dense")
        for masked in (False, True)
    ],
)
def test_per_item_weights_hold_at_most_a_quarter_of_the_scores(
    request, batch, item_weights, name, masked, labels
):
    """The weights are read as given (no float64 copy, no masked copy), and the passes over
    every item (each list's weighted relevance, the ideal ranking by weighted gain) go by
    blocks of rows; with ``chance=True`` the nonzero gains (binary labels on 0.5% of the items,
    graded on 5% and 30%) are taken by blocks of row tiles."""
    make, s = ITEM_WEIGHTED[name], batch["scores"]
    y = batch["labels"] if labels == "labels" else request.getfixturevalue(labels)
    kw = {"sample_weight": item_weights, **({"mask": batch["mask"]} if masked else {})}
    State(make()).update(s, y, **kw)
    st = State(make())
    got = peak_temp_bytes(lambda: st.update(s, y, **kw))
    assert got <= LIST_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


# -- Keras on torch (a process of its own: the core suite runs Keras on TensorFlow) --------

KERAS_TORCH_CHILD = """
import json, os, sys
import torch
import rankstream.keras as rk
from benchmarks.common import peak_temp_bytes
B, N = {B}, {N}
g = torch.Generator().manual_seed(0)
scores = torch.randn(B, N, generator=g)
labels = (torch.rand(B, N, generator=g) < 0.005).float()
mask = torch.rand(B, N, generator=g) > 2.0 / N
makers = {{
    "NDCG": lambda: rk.NDCG(k=10),
    "MAP": lambda: rk.MAP(k=10),
    "ListMetrics": lambda: rk.ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5"]),
}}
out = {{}}
for name, make in makers.items():
    for masked in (False, True):
        y_true = {{"labels": labels, "mask": mask}} if masked else labels
        make().update_state(y_true, scores)  # lazy imports and process-wide caches
        m = make()
        out[f"{{name}}, masked={{masked}}"] = peak_temp_bytes(lambda: m.update_state(y_true, scores))
print("PEAKS " + json.dumps(out))
"""


def keras_torch_peaks(child: str) -> dict[str, float]:
    """The peaks a child process on Keras' torch backend prints (``PEAKS {json}``)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(
        os.environ, KERAS_BACKEND="torch", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    proc = run([sys.executable, "-c", child.format(B=B, N=N)], env=env, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("PEAKS "))[6:])


def assert_within_a_quarter(peaks: dict[str, float]) -> None:
    sb = B * N * 4
    for name, got in peaks.items():
        assert got <= LIST_SHARE * sb, f"{name}: {got / sb:.3f}x the scores"


def test_a_keras_on_torch_update_state_holds_a_quarter_of_the_scores():
    peaks = keras_torch_peaks(KERAS_TORCH_CHILD)
    assert len(peaks) == 6
    # Keras' labels >= 0 padding convention costs no bool per label when no label is padding
    # (the smallest label and the labels' sum are read first)
    assert_within_a_quarter(peaks)


KERAS_TORCH_ITEM_WEIGHTS_CHILD = """
import json
import torch
import rankstream.keras as rk
from benchmarks.common import peak_temp_bytes
B, N = {B}, {N}
g = torch.Generator().manual_seed(0)
scores = torch.randn(B, N, generator=g)
labels = (torch.rand(B, N, generator=g) < 0.005).float()
weights = torch.rand(B, N, generator=g) + 0.5
makers = {{
    "NDCG": lambda: rk.NDCG(k=10),
    "MAP": lambda: rk.MAP(k=10),
    "DCG": lambda: rk.DCG(k=10),
    "ListMetrics": lambda: rk.ListMetrics(["ndcg@10", "map@5", "recall@20", "mrr@10", "precision@5"]),
}}
out = {{}}
for name, make in makers.items():
    make().update_state(labels, scores, sample_weight=weights)  # lazy imports and caches
    m = make()
    out[name] = peak_temp_bytes(lambda: m.update_state(labels, scores, sample_weight=weights))
print("PEAKS " + json.dumps(out))
"""


def test_a_keras_on_torch_update_state_with_per_item_weights_holds_a_quarter_of_the_scores():
    peaks = keras_torch_peaks(KERAS_TORCH_ITEM_WEIGHTS_CHILD)
    assert len(peaks) == 4
    assert_within_a_quarter(peaks)


# -- rank-based metrics ---------------------------------------------------------------------


def report_batches(d):
    head = {"y_pred": d["scores"], "y": d["target"]}
    tail = {"y_pred": d["scores"], "y": d["target"], "mask": d["mask"]}
    return [{"head": head, "tail": tail}] * 2


RANK_CASES = {
    "report": (lambda: ri.RankBasedMetrics(rank_type=ri.RANK_TYPES, sides=("head", "tail")), report_batches),
    "index": (lambda: ri.RankBasedMetrics((1, 3, 10)), lambda d: [(d["scores"], d["target"])] * 2),
    "index, mask": (
        lambda: ri.RankBasedMetrics((1, 3, 10)),
        lambda d: [(d["scores"], d["target"], {"mask": d["mask"]})] * 2,
    ),
    "labels": (lambda: ri.RankBasedMetrics((1, 3, 10)), lambda d: [(d["scores"], d["positives"])] * 2),
    "labels, mask": (
        lambda: ri.RankBasedMetrics((1, 3, 10)),
        lambda d: [(d["scores"], d["positives"], {"mask": d["mask"]})] * 2,
    ),
}


@pytest.mark.parametrize("name", sorted(RANK_CASES))
def test_a_rank_metric_update_holds_at_most_half_the_scores(batch, name):
    make, batches = RANK_CASES[name]
    output = batches(batch)
    m = make()
    m.update(output[0])  # the first batch of a list width also builds its expectation tables
    got = peak_temp_bytes(lambda: m.update(output[1]))
    assert got <= RANK_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize("name", sorted(RANK_CASES))
def test_the_first_batch_of_a_list_width_holds_at_most_half_the_scores(batch, name):
    # the expectation terms of a new width: rows for the candidate counts seen, not a table
    # of every width up to the list's (after another instance ran: process-wide caches)
    make, batches = RANK_CASES[name]
    output = batches(batch)
    make().update(output[0])
    m = make()
    got = peak_temp_bytes(lambda: m.update(output[0]))
    assert got <= RANK_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"


@pytest.mark.parametrize("labels", [False, True])
def test_wide_lists_take_the_expectation_terms_of_the_counts_seen_and_match_pykeen(labels):
    # wide enough that the terms come from rows of the candidate counts seen (not a table of
    # every width); ragged masks give many counts, the second batch repeats and adds some
    rng = np.random.default_rng(3 + labels)
    data, tasks = [], []
    for _ in range(2):
        b, n = 6, 3000
        scores = rng.integers(0, 50, (b, n))  # ties
        mask = rng.random((b, n)) < rng.uniform(0.5, 1.0, (b, 1))
        w = rng.integers(1, 5, b) / 2.0
        if labels:
            y = (rng.random((b, n)) < 0.003).astype(np.float32)
            y[:, 0], mask[:, 0] = 1.0, True
        else:
            y = rng.integers(0, n, b)
            mask[np.arange(b), y] = True
        # the true candidates score in the top fifth: ranks below 1024, where the median's
        # histogram is exact
        scores = np.where(
            y > 0 if labels else np.arange(n) == y[:, None], rng.integers(40, 50, (b, n)), scores
        )
        tasks += naive_tasks(scores, y, mask, w)
        data.append(
            (
                torch.tensor(scores),
                torch.tensor(y),
                {"mask": torch.tensor(mask), "sample_weight": torch.tensor(w)},
            )
        )
    assert len({t[2] for t in tasks}) > 6  # several candidate counts
    engine = Engine(lambda e, b: b)
    ri.RankBasedMetrics((1, 3, 10), rank_type="realistic").attach(engine, "m")
    got = engine.run(data).metrics["m"]
    want = pykeen_reference(tasks, "realistic", (1, 3, 10))
    bad = {k: (got[k], v) for k, v in want.items() if not np.isclose(got[k], v, rtol=1e-9, atol=1e-12)}
    assert not bad, list(bad.items())[:5]


def test_the_report_through_an_engine_holds_at_most_half_the_scores_per_run(batch):
    make, batches = RANK_CASES["report"]
    engine = Engine(lambda e, b: b)
    make().attach(engine, "m")
    data = batches(batch)[:1]
    engine.run(data)  # builds the expectation tables of this list width (kept by the metric)
    got = peak_temp_bytes(lambda: engine.run(data))
    assert got <= RANK_SHARE * scores_bytes(batch), f"{got / scores_bytes(batch):.3f}x the scores"


@pytest.fixture(scope="module")
def graded(batch):
    """Graded labels 1..4 on 5% of the items (the rest 0)."""
    g = torch.Generator().manual_seed(7)
    levels = torch.randint(1, 5, (B, N), generator=g).float()
    return levels * (torch.rand(B, N, generator=g) < 0.05).float()


@pytest.fixture(scope="module")
def graded_dense(batch):
    """Graded labels 1..4 on 30% of the items (the rest 0)."""
    g = torch.Generator().manual_seed(8)
    levels = torch.randint(1, 5, (B, N), generator=g).float()
    return levels * (torch.rand(B, N, generator=g) < 0.30).float()


CHANCE_METRICS = {
    "NDCG graded": (lambda: ri.NDCG(top_k=[1, 5, 10, 20], chance=True), "graded", False),
    "NDCG graded masked": (lambda: ri.NDCG(top_k=[1, 5, 10, 20], chance=True), "graded", True),
    "DCG graded masked": (lambda: ri.DCG(top_k=[5, 20], chance=True), "graded", True),
    "MAP masked": (lambda: ri.MAP(top_k=[1, 5, 10, 20], chance=True), "labels", True),
}


@pytest.mark.parametrize("name", sorted(CHANCE_METRICS))
def test_a_chance_update_holds_at_most_a_quarter_of_the_scores(batch, graded, name):
    """``chance=True``: the sums of the named gains in cache-sized tiles, the valid items
    counted from the mask's bytes; no full-size temporary."""
    make, labels, masked = CHANCE_METRICS[name]
    y = graded if labels == "graded" else batch["labels"]
    out = (batch["scores"], y) + (({"mask": batch["mask"]},) if masked else ())
    got = engine_peak(make, [out])
    assert got <= LIST_SHARE * scores_bytes(batch), f"{name}: {got / scores_bytes(batch):.3f}x the scores"
