"""``ties="first"`` where values are read back: the top ``k + 1`` taken in any order among equal
scores, then ordered in place (the selection by score, then index; the group of equal scores
at place ``k`` completed with the smallest indices of its score by a comparison pass over its
rows, tile by tile). Checked against a stable sort of each row (python's ``sorted``, the
reference's ``ranked_items``) on scores with ties everywhere, masks, valid ``-inf`` scores
among masked items, and through an Ignite Engine against the naive references."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from ignite.engine import Engine

import rankstream.core.backends.torch as torch_backend
import rankstream.core.sizes as sizes
import rankstream.core.topk as topk
import rankstream.ignite as ri
from rankstream.core.backends import Runtime
from rankstream.core.backends.numpy import NumpyOps

import reference as ref


def tied(b: int, n: int, seed: int, masked: bool, levels: int = 12):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, (b, n), generator=g).float()
    mask = (torch.rand(b, n, generator=g) > 0.3) if masked else None
    if masked:
        mask[0, : n - 3] = False  # a list with 3 items: fewer than k
        mask[1] = False  # a list with none
    return scores, mask


def want_prefix(scores, mask, k):
    """Per row, the reference's ranked valid items up to ``k`` (the places holding items)."""
    s = scores.tolist()
    m = None if mask is None else mask.tolist()
    return [ref.ranked_items(s[r], None if m is None else m[r])[:k] for r in range(len(s))]


@pytest.fixture(params=["one row per tile", "one row per piece", "default tiles"])
def tiles(request, monkeypatch):
    """The boundary pass's tiles and the pieces of tied rows ordered at once: one row each, or
    as sized for the batch."""
    if request.param == "one row per tile":
        monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, first_share=1 << 30))
    if request.param == "one row per piece":
        monkeypatch.setattr(sizes, "SIZES", replace(sizes.SIZES, tie_share=1 << 30, tie_items_min=1))
    return request.param


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("k", [1, 4, 9, 30])
def test_first_order_of_tied_rows_is_the_stable_sort(tiles, kind, masked, k):
    scores, mask = tied(24, 61, seed=k + 100 * masked, masked=masked)
    if kind == "numpy":
        s, m = scores.numpy(), None if mask is None else mask.numpy()
        ctx = Runtime().context(s, NumpyOps())
    else:
        s, m = scores, mask
        ctx = Runtime().context(s)
    assert ctx.read_back
    got = np.asarray(topk.top_ranked(ctx, s, k, valid=m, ties="first").indices).tolist()
    for row, want in zip(got, want_prefix(scores, mask, k), strict=True):
        assert row[: len(want)] == want


def test_valid_minus_inf_scores_among_masked_items_keep_the_exact_order():
    scores, mask = tied(16, 40, seed=5, masked=True)
    scores[2:6, ::3] = float("-inf")  # valid -inf items tie with the masked ones' fill
    mask[2:6, 1::3] = False
    ctx = Runtime().context(scores)
    got = topk.top_ranked(ctx, scores, 35, valid=mask, ties="first").indices.tolist()
    for row, want in zip(got, want_prefix(scores, mask, 35), strict=True):
        assert row[: len(want)] == want


def test_tied_rows_through_an_engine_give_the_reference_values(tiles):
    g = torch.Generator().manual_seed(9)
    b, n = 48, 300
    scores = torch.randint(0, 25, (b, n), generator=g).float()  # about 12 items per score
    labels = (torch.rand(b, n, generator=g) < 0.08).float() * torch.randint(1, 4, (b, n), generator=g)
    mask = torch.rand(b, n, generator=g) > 0.15
    names = {
        "ndcg@10": ref.ndcg,
        "map@5": ref.average_precision,
        "mrr@10": ref.reciprocal_rank,
        "precision@7": ref.precision,
        "r_precision": ref.r_precision,
    }
    for out, masks in (((scores, labels), None), ((scores, labels, {"mask": mask}), mask.tolist())):
        engine = Engine(lambda e, batch: batch)
        ri.ListMetrics(list(names), ties="first").attach(engine, "m")
        got = engine.run([out]).metrics["m"]
        for name, fn in names.items():
            k = int(name.split("@")[1]) if "@" in name else n
            want = ref.mean_over_lists(fn, scores.tolist(), labels.tolist(), k, masks=masks)
            assert got[name] == pytest.approx(want, rel=1e-9), name


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("n", [40, 60, 700])
def test_random_ties_in_place_equal_the_resort_after_the_same_permutation(monkeypatch, tiles, masked, n):
    """``ties="random"`` orders the selection in place with each item's place in the batch's
    random column permutation as its key: the same values, seed for seed, as the re-sort of the
    tied rows after that permutation (the path taken when "random" is not in ``IN_PLACE``),
    through an Ignite Engine; and the in-place path is the one taken."""
    scores, mask = tied(24, n, seed=n, masked=masked, levels=5)
    g = torch.Generator().manual_seed(n + 1)
    labels = (torch.rand(24, n, generator=g) < 0.2).float() * torch.randint(1, 4, (24, n), generator=g)
    batches = [
        (scores[a : a + 8], labels[a : a + 8]) + (({"mask": mask[a : a + 8]},) if masked else ())
        for a in (0, 8, 16)
    ]
    names = ["ndcg@5", "map@10", "mrr@3", "r_precision", "precision@20"]

    def run() -> dict:
        engine = Engine(lambda e, b: b)
        ri.ListMetrics(names, ties="random", seed=7).attach(engine, "m")
        return engine.run(batches).metrics["m"]

    calls = []
    original = topk._first_in_place
    monkeypatch.setattr(topk, "_first_in_place", lambda *a: calls.append(a[6] is not None) or original(*a))
    in_place = run()
    assert any(calls), "the in-place path was not taken"
    monkeypatch.setattr(topk, "IN_PLACE", ("first",))
    resorted = run()
    for name in names:
        np.testing.assert_allclose(in_place[name], resorted[name], rtol=1e-12, atol=0, err_msg=name)


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [("torch", d) for d in ("float32", "float16", "bfloat16", "float64")]
    + [("numpy", d) for d in ("float32", "float16", "float64")],  # numpy has no bfloat16
)
def test_order_first_sorts_by_value_then_index(kind, dtype):
    """``Ops.order_first``: by value descending, then index ascending, against python's
    ``sorted`` on each row: few distinct values (ties everywhere), both infinities, -0.0 beside
    +0.0 (equal), negative and positive values, indices in any order (a row's permutation)."""
    g = torch.Generator().manual_seed(3)
    levels = torch.tensor([float("-inf"), -2.5, -1.0, -0.0, 0.0, 0.5, 3.0, float("inf")])
    values = levels[torch.randint(0, len(levels), (40, 33), generator=g)]
    index = torch.stack([torch.randperm(500, generator=g)[:33] for _ in range(40)])
    tv = values.to(getattr(torch, dtype))
    if kind == "torch":
        got = torch_backend.TorchOps().order_first(tv, index).tolist()
    else:
        got = NumpyOps().order_first(tv.numpy(), index.numpy()).tolist()
    v, i = values.tolist(), index.tolist()
    for r, row in enumerate(got):
        want = sorted(range(33), key=lambda j, r=r: (-v[r][j], i[r][j]))
        assert row == want
