"""The rank-family registry (rankstream.core.ranks.families): keys, directions and the
chance adjustments against PyKEEN 1.11.1, and one definition shared by the PyKEEN-compatible
classes (rankstream.rank_based) and the streamed kernel (RankKernel)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import rankstream.core.ranks.kernel as RB
import rankstream.pykeen as R
from rankstream.core.ranks import families as F
from rankstream.core.ranks import streamed_forms as S
from rankstream.core.state import State

P = pytest.importorskip("pykeen.metrics.ranking")
pykeen_typing = pytest.importorskip("pykeen.typing")

# family -> (PyKEEN base, re-indexed, z-scored) classes
PYKEEN_CLASSES = {
    "hits": (P.HitsAtK, P.AdjustedHitsAtK, P.ZHitsAtK),
    "mrr": (P.InverseHarmonicMeanRank, P.AdjustedInverseHarmonicMeanRank, P.ZInverseHarmonicMeanRank),
    "gmr": (P.GeometricMeanRank, P.AdjustedGeometricMeanRankIndex, P.ZGeometricMeanRank),
    "mr": (P.ArithmeticMeanRank, P.AdjustedArithmeticMeanRankIndex, P.ZArithmeticMeanRank),
}
OURS = {
    "hits": (R.HitsAtK, R.AdjustedHitsAtK, R.ZHitsAtK),
    "mrr": (R.InverseHarmonicMeanRank, R.AdjustedInverseHarmonicMeanRank, R.ZInverseHarmonicMeanRank),
    "gmr": (R.GeometricMeanRank, R.AdjustedGeometricMeanRankIndex, R.ZGeometricMeanRank),
    "mr": (R.ArithmeticMeanRank, R.AdjustedArithmeticMeanRankIndex, R.ZArithmeticMeanRank),
}


def _make(cls, k=5):
    takes_k = cls.__name__.endswith("HitsAtK")
    return cls(k=k) if takes_k else cls()


def _same_float(a, b):
    """Bitwise equal as float64 (NaN equals NaN; the sign of zero counts)."""
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _tasks(rng, m, nmax=1000, weighted=True):
    n = np.floor(np.exp(rng.uniform(0, math.log(nmax), m))).astype(np.int64)  # PyKEEN indexes with the counts
    w = rng.uniform(0.1, 4.0, m) if weighted else None
    return n, w


# ------------------------------------------------------------------------------------------
# the registry against PyKEEN's classes


def test_rank_types_are_pykeens_and_defined_once():
    assert F.RANK_TYPES == tuple(pykeen_typing.RANK_TYPES) == ("optimistic", "realistic", "pessimistic")
    assert R.RANK_TYPES is F.RANK_TYPES
    assert RB.RANK_TYPES is F.RANK_TYPES
    assert (R.RANK_OPTIMISTIC, R.RANK_REALISTIC, R.RANK_PESSIMISTIC) == F.RANK_TYPES
    assert RB.METRICS == F.METRICS == ("hits", "mrr", "gmr", "mr")
    assert RB.OUTPUTS == F.OUTPUTS
    assert RB.EPSILON == F.EPSILON == P.EPSILON
    with pytest.raises(ValueError, match="rank_type must be one of"):
        RB.check_rank_type("average")


@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_keys_and_directions_match_pykeen(name):
    fam = F.FAMILIES[name]
    base, reindexed, z = PYKEEN_CLASSES[name]
    k = 7 if fam.takes_k else None
    assert fam.takes_k == (name == "hits")
    assert _make(base, 7).key == fam.key(k) == fam.output_key("value", k)
    assert base.increasing is fam.increasing
    # PyKEEN's derived keys are class-level ("adjusted_hits_at_k" whatever k is)
    assert _make(reindexed).key == fam.adjusted_key()
    assert _make(z).key == fam.z_key()
    assert reindexed.increasing and z.increasing
    if name == "hits":
        assert fam.adjusted_key(7) == "adjusted_hits_at_7" and fam.z_key(7) == "z_hits_at_7"
    if fam.normalized:
        assert P.AdjustedArithmeticMeanRank().key == fam.normalized_key()
        assert P.AdjustedArithmeticMeanRank.increasing is False
    else:
        with pytest.raises(ValueError, match="no expectation-normalised form"):
            fam.normalized_key()
    assert fam.output_key("expected", k) == f"expected_{fam.key(k)}"
    assert fam.output_key("variance", k) == f"variance_{fam.key(k)}"
    assert fam.output_key("adjusted", k) == fam.adjusted_key(k)
    assert fam.output_key("z", k) == fam.z_key(k)
    with pytest.raises(ValueError, match="output must be one of"):
        fam.output_key("median", k)


@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_our_classes_read_the_registry(name):
    fam = F.FAMILIES[name]
    ours = OURS[name]
    theirs = PYKEEN_CLASSES[name]
    assert ours[0].family is fam
    assert ours[0].increasing is fam.increasing
    for mine, pk in zip(ours, theirs, strict=True):
        assert _make(mine, 4).key == _make(pk, 4).key
        assert mine.increasing is pk.increasing
    assert R.AdjustedArithmeticMeanRank().key == P.AdjustedArithmeticMeanRank().key


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_value_transform_matches_pykeen(name, weighted):
    rng = np.random.default_rng(11)
    fam = F.FAMILIES[name]
    n, w = _tasks(rng, 40, weighted=weighted)
    ranks = np.floor(rng.uniform(1, n + 1))
    k = 5 if fam.takes_k else None
    values = fam.value(ranks, np, k)
    mean = np.average(values, weights=w)
    got = fam.finish(mean, np)
    want = _make(PYKEEN_CLASSES[name][0], 5)(ranks, n, w)
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("name", ["hits", "mrr", "mr"])
def test_task_moments_match_pykeen(name):
    fam = F.FAMILIES[name]
    base = _make(PYKEEN_CLASSES[name][0], 5)
    n = np.array([1, 2, 3, 5, 9, 29, 30, 31, 100, 997])
    mean, var = fam.task_moments(n, np, 5 if fam.takes_k else None)
    for i, ni in enumerate(n):
        np.testing.assert_allclose(mean[i], base.expected_value(num_candidates=np.array([ni])), rtol=1e-12)
        np.testing.assert_allclose(
            var[i], base.variance(num_candidates=np.array([ni])), rtol=1e-10, atol=1e-15
        )


@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_stream_terms_reduce_to_the_closed_forms(name):
    rng = np.random.default_rng(5)
    fam = F.FAMILIES[name]
    n, w = _tasks(rng, 500, nmax=1e6)
    kw = {"k": 10} if fam.takes_k else {}
    sums = {key: np.sum(v) for key, v in fam.stream_terms(n, w, np, **kw).items()}
    if name == "gmr":
        e, v, bound = S.gmr_moments_from_sums(sums)
        assert bound < 1e-13
    else:
        e, v = S.moments_from_sums(sums)
    np.testing.assert_allclose(e, fam.expectation(n, w, **kw), rtol=1e-12)
    np.testing.assert_allclose(v, fam.variance(n, w, **kw), rtol=1e-11)


def test_state_fields():
    assert F.state_fields(F.METRICS, 3, 20) == {
        "weight": (),
        "count": (),
        "invalid": (),
        "hits": (3,),
        "hits_mean": (3,),
        "hits_var": (3,),
        "inverse_rank": (),
        "inverse_rank_mean": (),
        "inverse_rank_var": (),
        "log_rank": (),
        "gmr_cumulants": (20,),
        "gmr_tail": (),
        "rank": (),
        "rank_mean": (),
        "rank_var": (),
    }
    # the order the streamed kernel declares the fields in
    order = "weight count invalid log_rank gmr_cumulants gmr_tail rank rank_mean rank_var"
    assert list(F.state_fields(["mr", "gmr"], 1, 8)) == order.split()
    for r in range(1, 5):
        for metrics in itertools.combinations(F.METRICS, r):
            kernel = RB.RankKernel((1, 10), metrics=metrics, gmr_order=5)
            assert kernel.fields == F.state_fields(metrics, 2, 5)
    with pytest.raises(ValueError, match="unknown rank family"):
        F.get_family("ndcg")


# ------------------------------------------------------------------------------------------
# the affine chance adjustments against PyKEEN


SAFE_DIVIDE_CASES = list(
    itertools.product(
        [1.0, -2.5, 0.0, -0.0],
        [0.0, -0.0, 1e-13, -1e-13, 1e-12, -1e-12, 3.0, -3.0, 1e-300, -1e-300, math.inf, -math.inf, math.nan],
    )
)


@pytest.mark.parametrize(("x", "y"), SAFE_DIVIDE_CASES)
def test_safe_divide_is_pykeens_bit_for_bit(x, y):
    assert _same_float(F.safe_divide(x, y), P._safe_divide(x, y))
    assert _same_float(F.safe_divide(np.float64(x), np.asarray(y)), P._safe_divide(x, y))


def test_safe_divide_elementwise_and_with_keras():
    x = np.array([x for x, _ in SAFE_DIVIDE_CASES])
    y = np.array([y for _, y in SAFE_DIVIDE_CASES])
    want = [P._safe_divide(a, b) for a, b in SAFE_DIVIDE_CASES]
    with np.errstate(all="ignore"):
        got = F.safe_divide(x, y)
    assert all(_same_float(g, v) for g, v in zip(got, want, strict=True))
    keras = pytest.importorskip("keras")
    ops = keras.ops
    # float32 on every backend (JAX without x64 has no float64); the sign bit survives
    xs, ys = x.astype(np.float32), y.astype(np.float32)
    got = np.asarray(
        ops.convert_to_numpy(F.safe_divide(ops.convert_to_tensor(xs), ops.convert_to_tensor(ys), ops))
    )
    with np.errstate(all="ignore"):
        want32 = F.safe_divide(xs, ys)
    assert all(_same_float(g, v) for g, v in zip(got, want32, strict=True))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_affine_coefficients_are_pykeens(name, weighted):
    rng = np.random.default_rng(7 + weighted)
    _, reindexed, z = PYKEEN_CLASSES[name]
    derived = [reindexed, z] + ([P.AdjustedArithmeticMeanRank] if name == "mr" else [])
    fam = F.FAMILIES[name]
    for trial in range(4):
        m = int(rng.integers(1, 60))
        n, w = _tasks(rng, m, nmax=500 if trial else 3, weighted=weighted)
        for cls in derived:
            pk = _make(cls, 3)
            want = pk.get_coefficients(num_candidates=n, weights=w)
            mean = pk.base.expected_value(num_candidates=n, weights=w)
            if cls is z:
                std = pk.base.std(num_candidates=n, weights=w)
                got = F.z_coefficients(mean, std, pk.base.increasing)
            elif cls is reindexed:
                got = F.reindexed_coefficients(mean)
            else:
                got = F.normalized_coefficients(mean)
            # the same operations on PyKEEN's own moments: bit for bit
            assert _same_float(got[0], want.scale) and _same_float(got[1], want.offset)
            # the PyKEEN-compatible classes (their own O(1) moments): to rounding
            mine = _make(getattr(R, cls.__name__), 3).get_coefficients(num_candidates=n, weights=w)
            assert isinstance(mine.scale, float) and isinstance(mine.offset, float)
            np.testing.assert_allclose(mine, want, rtol=1e-9, atol=1e-12 * abs(want.scale))
        # z's sign follows the direction
        mean, std = fam.expectation(n, w, k=3), math.sqrt(fam.variance(n, w, k=3))
        scale, _ = F.z_coefficients(mean, std, fam.increasing)
        assert (scale > 0) == fam.increasing


@pytest.mark.parametrize("name", ["hits", "mrr", "gmr", "mr"])
def test_degenerate_coefficients_match_pykeen(name):
    """Every task with one candidate: E = 1 (or the optimum), Var = 0 -> the 1e-12 floor."""
    n = np.ones(4, dtype=np.int64)
    _, reindexed, z = PYKEEN_CLASSES[name]
    for cls in (reindexed, z):
        pk = _make(cls, 1)
        want = pk.get_coefficients(num_candidates=n)
        mine = _make(getattr(R, cls.__name__), 1).get_coefficients(num_candidates=n)
        np.testing.assert_allclose(mine, want, rtol=1e-12)


def test_affine_applies_like_pykeen_adjust():
    rng = np.random.default_rng(3)
    n, w = _tasks(rng, 30)
    ranks = np.floor(rng.uniform(1, n + 1))
    for name in F.FAMILIES:
        _, reindexed, z = PYKEEN_CLASSES[name]
        for cls in (reindexed, z):
            pk = _make(cls, 3)
            base_value = pk.base(ranks, n, w)
            coefficients = pk.get_coefficients(num_candidates=n, weights=w)
            assert _same_float(F.affine(base_value, tuple(coefficients)), pk.adjust(base_value, n, w))


# ------------------------------------------------------------------------------------------
# one GMR reducer, one GMR order


def test_one_gmr_reducer():
    rng = np.random.default_rng(9)
    n, w = _tasks(rng, 300, nmax=1e7)
    for order in (1, 8, 20):
        terms = S.gmr_stream_terms(n, w, np, order=order)
        sums = {key: float(np.sum(v)) for key, v in terms.items()}
        total = np.float64(sums["weight"])
        coefficients = [np.float64(sums[f"cumulant_{m}"] / math.factorial(m)) for m in range(1, order + 1)]
        with np.errstate(all="ignore"):
            xp_values = S.gmr_moments_xp(total, coefficients, np.float64(sums["tail"]), np)
            kernel_values = RB._gmr_moments(total, coefficients, np.float64(sums["tail"]), np)
        got = S.gmr_moments_from_sums(sums)
        assert all(isinstance(v, float) for v in got)
        assert got == tuple(float(v) for v in xp_values) == tuple(float(v) for v in kernel_values)


def test_gmr_orders_defined_once():
    assert S.DEFAULT_GMR_ORDER == S.MAX_GMR_ORDER == 20
    assert S.FLOAT32_GMR_ORDER == 8
    assert RB.DEFAULT_GMR_ORDER == S.DEFAULT_GMR_ORDER and RB.FLOAT32_GMR_ORDER == S.FLOAT32_GMR_ORDER
    assert RB.RankKernel().gmr_order == 20
    assert "state_dtype" not in vars(RB.RankKernel())  # not in the checkpointed config
    assert RB.RankKernel(state_dtype="float32").gmr_order == 8
    assert RB.RankKernel(state_dtype=np.float32).gmr_order == 8
    assert RB.RankKernel(state_dtype=np.dtype("float64")).gmr_order == 20
    assert RB.RankKernel(state_dtype="float32", gmr_order=12).gmr_order == 12
    assert RB.RankKernel(gmr_order=3).fields["gmr_cumulants"] == (3,)
    assert RB.RankKernel(state_dtype="float32").fields["gmr_cumulants"] == (8,)
    assert S.default_gmr_order("float16") == 8
    torch = pytest.importorskip("torch")
    assert RB.RankKernel(state_dtype=torch.float32).gmr_order == 8
    assert RB.RankKernel(state_dtype=torch.float64).gmr_order == 20
    with pytest.raises(ValueError, match="state_dtype must be a floating dtype"):
        RB.RankKernel(state_dtype="int32")
    with pytest.raises(ValueError, match="gmr_order must be an int"):
        RB.RankKernel(gmr_order=0)


# ------------------------------------------------------------------------------------------
# the kernel and the classes agree


def _ranks(scores, target, rank_type):
    t = scores[np.arange(scores.shape[0]), target][:, None]
    optimistic = 1.0 + (scores > t).sum(axis=1)
    pessimistic = (scores >= t).sum(axis=1).astype(np.float64)
    return {
        "optimistic": optimistic,
        "pessimistic": pessimistic,
        "realistic": (optimistic + pessimistic) / 2.0,
    }[rank_type]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("rank_type", F.RANK_TYPES)
def test_kernel_and_classes_agree(rank_type, weighted):
    rng = np.random.default_rng(17)
    ks = (1, 3, 10)
    kernel = RB.RankKernel(ks, rank_type)
    state = State(kernel)
    all_ranks, all_w = [], []
    n_cand = 60
    for _ in range(4):
        b = 100
        scores = rng.integers(0, 25, size=(b, n_cand)).astype(np.float64)  # many ties
        target = rng.integers(0, n_cand, size=b)
        w = rng.uniform(0.2, 3.0, size=b) if weighted else None
        if weighted:
            state.update(scores, target, sample_weight=w)
        else:
            state.update(scores, target)
        all_ranks.append(_ranks(scores, target, rank_type))
        all_w.append(w)
    ranks = np.concatenate(all_ranks)
    w = np.concatenate(all_w) if weighted else None
    n = np.full(ranks.shape, n_cand)
    got = state.compute()
    assert got["geometric_mean_rank_error_bound"] < 1e-12
    for name in (m for m in kernel.metrics if m in F.FAMILIES):
        fam = F.FAMILIES[name]
        base_cls, reindexed, z = OURS[name]
        for k in ks if fam.takes_k else [None]:
            kw = {"k": k} if fam.takes_k else {}
            base = base_cls(**kw)
            want = {
                fam.key(k): base(ranks, n, w),
                fam.expected_key(k): base.expected_value(n, weights=w),
                fam.variance_key(k): base.variance(n, weights=w),
                fam.adjusted_key(k): reindexed(**kw)(ranks, n, w),
                fam.z_key(k): z(**kw)(ranks, n, w),
            }
            if fam.normalized:
                want[fam.normalized_key(k)] = R.AdjustedArithmeticMeanRank()(ranks, n, w)
            assert list(want) == fam.result_keys(k)
            for key, value in want.items():
                np.testing.assert_allclose(got[key], value, rtol=1e-11, atol=1e-12, err_msg=key)
            # the same numbers, selected
            for form in F.OUTPUTS:
                selected = RB.RankKernel(ks, rank_type, select=(name, form)).select_value(got)
                if fam.takes_k:
                    selected = selected[ks.index(k)]
                assert selected == got[fam.output_key(form, k)]


def test_kernel_matches_pykeen_on_the_same_ranks():
    """The streamed kernel's adjusted and z values equal PyKEEN's classes on the same ranks."""
    rng = np.random.default_rng(23)
    scores = rng.normal(size=(300, 40))
    target = rng.integers(0, 40, size=300)
    got = State(RB.RankKernel((1, 10))).update(scores, target).compute()
    ranks = _ranks(scores, target, "realistic")
    n = np.full(ranks.shape, 40)
    for name in F.METRICS:
        fam = F.FAMILIES[name]
        base, reindexed, z = PYKEEN_CLASSES[name]
        for k in (1, 10) if fam.takes_k else [None]:
            kw = {"k": k} if fam.takes_k else {}
            np.testing.assert_allclose(got[fam.key(k)], base(**kw)(ranks, n), rtol=1e-12)
            np.testing.assert_allclose(
                got[fam.adjusted_key(k)], reindexed(**kw)(ranks, n), rtol=1e-10, atol=1e-12
            )
            np.testing.assert_allclose(got[fam.z_key(k)], z(**kw)(ranks, n), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        got[F.MR.normalized_key()], P.AdjustedArithmeticMeanRank()(ranks, n), rtol=1e-12
    )
