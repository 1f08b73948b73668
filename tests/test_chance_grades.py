"""chance=True on DCG and nDCG over lists long enough for the tiled pass of the gains
(``Ops.gain_top``: the sums of the gains, each list's largest label and its count) and DCG's best
value from it (a ``topk`` of the labels only for the lists it leaves open): against a float64
computation item by item and the reference's ideal DCG of each list (tests/reference.py)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from rankstream import DCGKernel, NDCGKernel
from rankstream.core.backends import Workspace, numpy_ops, torch_ops
from rankstream.ignite import DCG

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import reference as ref

KS = [1, 5, 20]
FIELDS = ("chance_expected_sum", "chance_variance_sum", "chance_best_sum")


def _gain(name):
    return (lambda y: 2.0**y - 1.0) if name == "exp_rank" else (lambda y: y)


def expected_terms(labels, mask, ks, gain, t):
    """Per list with a relevant item: ``(E, Var, best)`` per ``k`` in float64, item by item:
    ``E = mean(x) D1(k')``, ``Var = (D2(k') - D1(k')^2 / N) sum (x - mean x)^2 / (N - 1)`` (the
    linear permutation statistic, docs/chance.md) and the reference's ideal DCG."""
    g = _gain(gain)
    d = [1.0 / math.log2(j + 1) for j in range(1, labels.shape[1] + 1)]
    out = []
    for y_row, m_row in zip(labels.tolist(), mask.tolist(), strict=True):
        ys = [y for y, m in zip(y_row, m_row, strict=True) if m]
        relevant = [y for y in ys if (y > 0 if t is None else y >= t)]
        if not relevant:
            out.append(None)
            continue
        x = [g(y if t is None or y >= t else 0.0) for y in ys]
        n, mean = len(x), math.fsum(x) / len(x)
        ss = math.fsum((v - mean) ** 2 for v in x)
        terms = []
        for k in ks:
            kp = min(k, n)
            d1, d2 = math.fsum(d[:kp]), math.fsum(v * v for v in d[:kp])
            var = (d2 - d1 * d1 / n) * ss / (n - 1) if n > 1 else 0.0
            best = ref.dcg(y_row, y_row, k, valid=m_row, gain=g, threshold=t)
            terms.append((mean * d1, max(var, 0.0), best))
        out.append(terms)
    return out


def graded_batch(seed, b=40, n=4000, negative=False, open_share=0.25, fractional=True):
    """Lists of four kinds (a quarter each, ``open_share`` of them left open): many items of
    the top grade (closed by the count at the largest label), one grade per list (closed by
    ``s1^2 = c s2``), a few items of mixed grades (open: the ``topk``), fractional labels
    (whole grades 0..6 without ``fractional``: float32 sums of whole gains are exact)."""
    rng = np.random.default_rng(seed)
    labels = np.zeros((b, n))
    n_open = round(b * open_share)
    kinds = ["open"] * n_open + ["top", "one", "fractional"] * b
    for i, kind in enumerate(kinds[:b]):
        if kind == "top":
            labels[i] = rng.integers(0, 5, n) * (rng.random(n) < 0.2)
        elif kind == "one":
            labels[i, rng.choice(n, 4, replace=False)] = 2.0 + i % 2
        elif kind == "open":
            labels[i, rng.choice(n, 4, replace=False)] = [1.0, 2.0, 3.0, 4.0]
        else:
            grades = [0.0, 0.5, 1.7, 2.25] if fractional else [0.0, 1.0, 5.0, 6.0]
            labels[i] = rng.choice(grades, n, p=[0.7, 0.1, 0.1, 0.1])
    if negative:
        labels = np.where(rng.random((b, n)) < 0.05, -1.0, labels)
    mask = np.arange(n)[None, :] < rng.integers(n // 2, n + 1, (b, 1))
    mask[1] = np.arange(n) < 3  # a list of 3 items: k clipped to the list
    scores = rng.normal(size=(b, n))
    return scores, labels, mask


def _check(kernel_sums, rows, weights=None):
    w = np.ones(len(rows)) if weights is None else weights
    for i, f in enumerate(FIELDS):
        power = 2 if i == 1 else 1
        want = sum(w[b] ** power * np.array([t[i] for t in terms]) for b, terms in enumerate(rows) if terms)
        np.testing.assert_allclose(np.asarray(kernel_sums[f]), want, rtol=1e-12, atol=1e-12, err_msg=f)


@pytest.mark.parametrize("gain", ["exp_rank", "linear_rank"])
@pytest.mark.parametrize("t", [None, 1.0])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dcg_and_ndcg_chance_sums_over_long_graded_lists_equal_an_item_by_item_sum(
    gain, t, masked, negative, dtype
):
    """float64 labels with fractional lists; float32 labels of whole grades (their gains are
    summed in float32 in the tiled pass, exactly)."""
    seed = 3 + masked + 2 * negative
    scores, labels, mask = graded_batch(seed=seed, negative=negative, fractional=dtype == torch.float64)
    m = mask if masked else np.ones_like(mask)
    rows = expected_terms(labels, m, KS, gain, t)
    s, y = torch.as_tensor(scores, dtype=dtype), torch.as_tensor(labels, dtype=dtype)
    extra = (torch.as_tensor(mask),) if masked else ()
    sums = DCGKernel(KS, gain=gain, relevance_threshold=t, chance=True, empty="skip").batch_sums(
        None, s, y, *extra
    )
    _check(sums, rows)
    if not negative:  # nDCG: the same sums of gains, divided by IDCG@k (and its square)
        sums = NDCGKernel(KS, gain=gain, relevance_threshold=t, chance=True, empty="skip").batch_sums(
            None, s, y, *extra
        )
        ndcg_rows = [
            None if r is None else [(e / b, v / (b * b), 1.0) if b > 0 else (0.0, 0.0, 0.0) for e, v, b in r]
            for r in rows
        ]
        _check(sums, ndcg_rows)


@pytest.mark.parametrize("open_share", [0.0, 0.25, 0.75])
def test_dcg_best_takes_a_topk_only_of_the_lists_left_open(monkeypatch, open_share):
    """No list open: no ``topk`` of the labels; a quarter: a ``topk`` of those rows, gathered;
    past half the batch: the one ``topk`` of every list. The best values equal the reference
    in each case."""
    from rankstream.core.lists import chance_gains as chance

    calls = []
    real = chance._ideal_dcg
    monkeypatch.setattr(chance, "_ideal_dcg", lambda *a: calls.append(1) or real(*a))
    taken = []
    real_topk = torch_ops().masked_topk.__func__

    def spy(self, x, *args, **kwargs):
        taken.append(int(x.shape[0]))
        return real_topk(self, x, *args, **kwargs)

    monkeypatch.setattr(type(torch_ops()), "masked_topk", spy)
    scores, labels, mask = graded_batch(seed=9, open_share=open_share)
    rows = expected_terms(labels, mask, KS, "exp_rank", None)
    sums = DCGKernel(KS, chance=True).batch_sums(
        None, torch.as_tensor(scores), torch.as_tensor(labels), torch.as_tensor(mask)
    )
    _check(sums, rows)
    # open: two positive grades among the valid items and fewer than min(max k, N) at the top
    n_open = 0
    for y_row, m_row in zip(labels, mask, strict=True):
        y = y_row[m_row]
        n_open += len(set(y[y > 0].tolist())) > 1 and (y == y.max()).sum() < min(KS[-1], len(y))
    assert (n_open == 0) == (open_share == 0) and (n_open > 20) == (open_share > 0.5)  # as built
    assert len(calls) == (1 if n_open > 20 else 0)
    gathered = [r for r in taken if r < 40]  # a topk of the open rows only
    assert sum(gathered) == (n_open if n_open <= 20 else 0)


def test_keras_rs_weighting_with_list_weights_equals_an_item_by_item_sum():
    """keras-rs weighting, one weight per list: the lists' terms weighted by their weights."""
    scores, labels, mask = graded_batch(seed=4)
    weights = np.random.default_rng(2).uniform(0.5, 2.0, size=len(labels))
    rows = expected_terms(labels, mask, KS, "exp_rank", None)
    kernel = DCGKernel(KS, weighting="keras_rs", chance=True, empty="skip")
    sums = kernel.batch_sums(None, torch.as_tensor(scores), torch.as_tensor(labels), torch.as_tensor(mask),
                             torch.as_tensor(weights))  # fmt: skip
    # keras-rs's list weight: the given weight where the list holds a relevant item
    _check(sums, rows, weights)


def item_weighted_terms(labels, mask, item_w, ks, t, normalised):
    """Per list with a relevant item, keras-rs per-item weights: ``(E, Var, best)`` per ``k`` in
    float64 item by item, of the weighted gains ``x = w g(y)`` (the linear permutation statistic
    as in :func:`expected_terms`; best: ``x`` sorted, the ideal DCG), each term as the kernel
    sums it: nDCG's divided by ``IDCG@k`` and weighted by the list's weight ``sum x / sum g``,
    DCG's (divided by that weight, then weighted by it) as they are."""
    g = _gain("exp_rank")
    d = [1.0 / math.log2(j + 1) for j in range(1, labels.shape[1] + 1)]
    out, weights = [], []
    for y_row, m_row, w_row in zip(labels.tolist(), mask.tolist(), item_w.tolist(), strict=True):
        items = [(y, w) for y, m, w in zip(y_row, m_row, w_row, strict=True) if m]
        gains = [g(y) if (y > 0 if t is None else y >= t) else 0.0 for y, _ in items]
        if not any(gains):
            out.append(None)
            weights.append(0.0)
            continue
        x = [gi * w for gi, (_, w) in zip(gains, items, strict=True)]
        n, mean = len(x), math.fsum(x) / len(x)
        ss = math.fsum((v - mean) ** 2 for v in x)
        ideal = sorted(x, reverse=True)
        terms = []
        for k in ks:
            kp = min(k, n)
            d1, d2 = math.fsum(d[:kp]), math.fsum(v * v for v in d[:kp])
            var = max((d2 - d1 * d1 / n) * ss / (n - 1) if n > 1 else 0.0, 0.0)
            best = math.fsum(v * dv for v, dv in zip(ideal[:kp], d, strict=False))
            terms.append((mean * d1 / best, var / best**2, 1.0) if normalised else (mean * d1, var, best))
        out.append(terms)
        weights.append(math.fsum(x) / math.fsum(gains) if normalised else 1.0)
    return out, np.array(weights)


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("cls", [NDCGKernel, DCGKernel])
@pytest.mark.parametrize("t", [None, 1.0])
def test_per_item_weights_over_long_lists_in_several_blocks_equal_an_item_by_item_sum(
    monkeypatch, kind, cls, t
):
    """keras-rs per-item weights on long graded lists: the nonzero gains are taken by blocks of
    row tiles, a block of several lists and one of a list of nonzero gains only; against the
    float64 sums item by item."""
    from rankstream.core.lists import chance_gains as chance

    blocks = []  # the rows of each block
    real = chance._Gains._block
    spy = lambda self, parts, rows: blocks.append(rows) or real(self, parts, rows)  # noqa: E731
    monkeypatch.setattr(chance._Gains, "_block", spy)
    scores, labels, mask = graded_batch(seed=5)
    labels[2] = np.random.default_rng(1).integers(1, 5, labels.shape[1])  # every item relevant
    mask[2] = True
    item_w = np.random.default_rng(6).uniform(0.5, 1.5, size=labels.shape)
    rows, weights = item_weighted_terms(labels, mask, item_w, KS, t, cls is NDCGKernel)
    conv = torch.as_tensor if kind == "torch" else np.asarray
    kernel = cls(KS, relevance_threshold=t, weighting="keras_rs", negative_labels="mask", chance=True)
    sums = kernel.batch_sums(None, *(conv(a) for a in (scores, labels, mask, item_w)))
    _check(sums, rows, weights)
    assert len(blocks) > 2 and max(blocks) > 1 and min(blocks) == 1  # several lists; the full one alone


def _backend(kind):
    """``(ops, array conversion, accumulation dtype, shapes)`` of a backend test: torch's tiled
    passes (rows in several tiles, a row longer than one tile), numpy, torch's one-tile path."""
    ops = numpy_ops() if kind == "numpy" else torch_ops()
    conv = np.asarray if kind == "numpy" else torch.as_tensor
    acc = np.float64 if kind == "numpy" else torch.float64
    shapes = ((6, 900),) if kind == "torch_small" else ((70, 2_000), (2, 140_000))
    return ops, conv, acc, shapes


@pytest.mark.parametrize("kind", ["torch", "numpy", "torch_small"])
@pytest.mark.parametrize("exp", [True, False])
@pytest.mark.parametrize("t", [None, 1.0, 0.5])
def test_gain_top_gives_the_sums_the_largest_label_and_its_count(kind, exp, t):
    """``Ops.gain_top``: graded, fractional and negative labels, NaN and inf on masked items, rows in
    several tiles and a row longer than one tile (its tiles' maxima merged): against numpy
    item by item in float64 (``y' = y`` where ``y >= t``, masked items 0; torch sums float32
    labels in float32)."""
    ops, conv, acc, shapes = _backend(kind)
    rng = np.random.default_rng(12)
    for b, n in shapes:
        labels = rng.choice([0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.5, -1.0], size=(b, n)).astype(np.float32)
        labels[0, -5:] = 7.0  # a row whose largest label sits in its last tile only
        mask = rng.random((b, n)) < 0.8
        for m in (mask, None):
            y = labels.copy()
            if m is not None:
                y[~m & (rng.random((b, n)) < 0.5)] = np.nan
                if b == 70:  # masked infinities too (a product with the mask would give NaN)
                    y[~m & (rng.random((b, n)) < 0.1)] = np.inf
            keep = np.ones_like(mask) if m is None else m
            yp = y.astype(np.float64)
            if t is not None:
                yp = np.where(yp >= np.float32(t), yp, 0.0)
            yp = np.where(keep, yp, 0.0)
            g = np.exp2(yp) - 1.0 if exp else yp
            top = yp.max(axis=1)
            want = (g.sum(axis=1), (g * g).sum(axis=1), top, (yp == top[:, None]).sum(axis=1))
            got = ops.gain_top(conv(y), exp, t, None if m is None else conv(m), acc, Workspace())
            for name, a, w in zip(("s1", "s2", "top", "count"), got, want, strict=True):
                a = np.asarray(a.numpy() if hasattr(a, "numpy") else a, dtype=np.float64)
                # float32 sums of fractional gains (as Ops.gain_sums); the largest label exact
                rtol = 1e-6 if name in ("s1", "s2") and kind != "numpy" else 1e-12
                np.testing.assert_allclose(a, w, rtol=rtol, err_msg=f"{name} {b}x{n} masked={m is not None}")


def test_ignite_engine_dcg_reports_the_expected_and_best_of_long_graded_lists():
    """The path users take: ``DCG(chance=True)`` attached to an Ignite ``Engine`` over two
    batches; ``expected`` against the weighted mean of each list's ``E`` item by item, and the
    adjusted index against ``(M - E) / (M_best - E)`` with ``M`` and ``M_best`` the means of the
    reference's DCG and ideal DCG."""
    engine = Engine(lambda e, batch: batch)
    DCG(KS, chance=True).attach(engine, "dcg")
    feed, rows, values = [], [], []
    for seed in (5, 6):
        scores, labels, mask = graded_batch(seed=seed, b=24, n=3000)
        feed.append((torch.as_tensor(scores), torch.as_tensor(labels), {"mask": torch.as_tensor(mask)}))
        rows += expected_terms(labels, mask, KS, "exp_rank", 1.0)  # ignite's threshold
        for s_row, y_row, m_row in zip(scores.tolist(), labels.tolist(), mask.tolist(), strict=True):
            values.append([ref.dcg(s_row, y_row, k, valid=m_row, threshold=1.0) for k in KS])
    got = engine.run(feed).metrics
    kept = [(r, v) for r, v in zip(rows, values, strict=True) if r is not None]
    e = np.mean([[t[0] for t in r] for r, _ in kept], axis=0)
    best = np.mean([[t[2] for t in r] for r, _ in kept], axis=0)
    m = np.mean([v for _, v in kept], axis=0)
    np.testing.assert_allclose(got["dcg_expected"], e, rtol=1e-12)
    np.testing.assert_allclose(got["dcg"], m, rtol=1e-9)
    np.testing.assert_allclose(got["dcg_adjusted"], (m - e) / (best - e), rtol=1e-9)


@pytest.mark.parametrize("kind", ["graded", "binary"])
def test_ndcg_skips_its_topk_of_the_labels_once_a_batch_had_every_list_closed(monkeypatch, kind):
    """nDCG with ``chance=True`` over batches where every list holds at least ``max k`` items
    of its top grade: from the second batch on the pass of the gains gives the ideal ranking
    and the kernel takes no ``topk`` of the labels; a batch with a list left open takes it
    again. Graded labels learn it from the pass of the gains, binary ones from their counts.
    Each batch's value and chance sums against the reference, item by item."""
    from rankstream.core.lists.selection import Selection

    calls = []
    real = Selection._ideal
    monkeypatch.setattr(Selection, "_ideal", lambda self, prefix: calls.append(prefix) or real(self, prefix))
    rng = np.random.default_rng(21)
    b, n = 40, 4000
    kernel = NDCGKernel(KS, chance=True)
    ctx = kernel.context(torch.zeros(1), torch_ops())  # one instance's workspace across batches
    taken = []
    for batch, masked in enumerate((False, True, True, False)):
        top = 5.0 if kind == "graded" else 1.0
        labels = (rng.integers(0, 5, (b, n)) if kind == "graded" else 1.0) * (rng.random((b, n)) < 0.2) * 1.0
        labels[:, :25] = top  # 25 items of the top grade in every list
        if batch == 2:  # one list with 3 items of its top grade: open
            labels[7] = np.minimum(labels[7], top - 1.0)
            labels[7, :3] = top
        mask = (
            np.arange(n)[None, :] < rng.integers(n // 2, n + 1, (b, 1)) if masked else np.ones((b, n), bool)
        )
        scores = rng.normal(size=(b, n))
        args = (torch.as_tensor(scores), torch.as_tensor(labels)) + (
            (torch.as_tensor(mask),) if masked else ()
        )
        before = len(calls)
        sums = kernel.batch_sums(ctx, *args)
        taken.append(len(calls) > before)
        rows = expected_terms(labels, mask, KS, "exp_rank", 1.0)
        rows = [None if r is None else [(e / bb, v / (bb * bb), 1.0) for e, v, bb in r] for r in rows]
        _check(sums, rows)
        value = [
            sum(
                ref.ndcg(s_row, y_row, k, valid=m_row)
                for s_row, y_row, m_row in zip(scores, labels, mask, strict=True)
            )
            for k in KS
        ]
        np.testing.assert_allclose(np.asarray(sums["value_sum"]), value, rtol=1e-12)
    # the first batch learns; the second and the last skip the topk; the third (a list open) takes it
    assert taken == [True, False, True, True]


@pytest.mark.parametrize("kind", ["torch", "numpy", "torch_small"])
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_count_and_max_gives_the_count_and_every_rows_largest_label(kind, strict, dtype):
    """``Ops.count_and_max``: the count of valid items at or above ``t`` (above with
    ``strict``) and each row's largest label over ALL items (masked ones too, NaN propagated),
    rows in several tiles and a row longer than a tile (its maxima merged): against numpy."""
    ops, conv, acc, shapes = _backend(kind)
    rng = np.random.default_rng(31)
    for b, n in shapes:
        y = rng.choice([0.0, 0.0, 1.0, 2.0, -1.0], size=(b, n)).astype(np.float32)
        y[0, -3:] = 9.0  # a row whose largest label sits in its last tile only
        if dtype == "float32":
            y[1, n // 2] = np.nan  # NaN: the row's largest label is NaN, the count skips it
        else:  # whole labels (any dtype: each row's maximum starts from its first label)
            y = y.astype(np.int64)
        mask = rng.random((b, n)) < 0.8
        for m in (mask, None):
            keep = np.ones_like(mask) if m is None else m
            want = (((y > 1.0) if strict else (y >= 1.0)) & keep).sum(axis=1)
            count, most = ops.count_and_max(
                conv(y), 1.0, strict, None if m is None else conv(m), acc, Workspace()
            )
            count = np.asarray(count.numpy() if hasattr(count, "numpy") else count)
            most = np.asarray(most.numpy() if hasattr(most, "numpy") else most)
            np.testing.assert_array_equal(count, want)
            np.testing.assert_array_equal(most, y.max(axis=1))  # NaN where the row holds one


@pytest.mark.parametrize("hidden", ["none", "above", "masked_above", "masked_nan", "between"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("t", [1.0, None])
def test_dcg_chance_on_binary_lists_equals_an_item_by_item_sum(monkeypatch, hidden, masked, t):
    """DCG with ``chance=True`` on long lists whose ranked labels show one relevant label:
    where every list's largest label (from the kernel's count pass) is at most that label the
    counts of binary relevance serve; a larger label past the top ``k`` of one list (valid,
    or masked, or NaN on a masked item) or a label between 0 and 1 (``t`` None) sends the
    batch to the pass of the gains. Both against the item-by-item sums; where every list's
    largest label is 1, no count pass of labels above 1."""
    above = []
    real = type(torch_ops()).count_relevant
    spy = lambda self, labels, v, strict, *a: above.append(v) if strict and v > 0 else None  # noqa: E731
    monkeypatch.setattr(type(torch_ops()), "count_relevant", lambda self, *a: spy(self, *a) or real(self, *a))
    rng = np.random.default_rng(41)
    b, n = 30, 5000
    labels = (rng.random((b, n)) < 0.05).astype(np.float64)
    scores = rng.normal(size=(b, n))
    mask = np.arange(n)[None, :] < rng.integers(n // 2, n + 1, (b, 1)) if masked else np.ones((b, n), bool)
    low = np.argsort(scores[3])[:10]  # items of list 3 ranked last
    if hidden == "above":
        labels[3, low[0]] = 2.0
    elif hidden == "between":
        labels[3, low[0]] = 0.5
    elif hidden in ("masked_above", "masked_nan"):
        mask[3, low[:2]] = False
        labels[3, low[0]] = 2.0 if hidden == "masked_above" else np.nan
    rows = expected_terms(np.nan_to_num(labels), mask, KS, "exp_rank", t)
    extra = (torch.as_tensor(mask),) if masked or hidden.startswith("masked") else ()
    negative = "mask" if t is None else "keep"  # where binary counts may serve with t None
    sums = DCGKernel(
        KS, relevance_threshold=t, chance=True, empty="skip", negative_labels=negative
    ).batch_sums(None, torch.as_tensor(scores), torch.as_tensor(labels), *extra)
    _check(sums, rows)
    if hidden == "none" or (hidden == "between" and t is not None):
        assert above == []
