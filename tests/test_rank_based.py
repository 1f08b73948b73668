"""Tests for rankstream.rank_based: values, moments, metadata and the resolver.

References: exhaustive enumeration of all rank vectors (metric values computed here, not by
the classes), PyKEEN 1.11.1, and the PyKEEN documentation pages in shared/seeds.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

import rankstream.pykeen as R

P = pytest.importorskip("pykeen.metrics.ranking")
torch = pytest.importorskip("torch")

CLASSES = [
    "HitsAtK",
    "InverseHarmonicMeanRank",
    "GeometricMeanRank",
    "ArithmeticMeanRank",
    "AdjustedHitsAtK",
    "AdjustedInverseHarmonicMeanRank",
    "AdjustedGeometricMeanRankIndex",
    "AdjustedArithmeticMeanRankIndex",
    "AdjustedArithmeticMeanRank",
    "ZHitsAtK",
    "ZInverseHarmonicMeanRank",
    "ZGeometricMeanRank",
    "ZArithmeticMeanRank",
]
K_CLASSES = {"HitsAtK", "AdjustedHitsAtK", "ZHitsAtK"}


def make(module, name, k=3):
    cls = getattr(module, name)
    return cls(k=k) if name in K_CLASSES else cls()


# ------------------------------------------------------------------------------------------
# independent metric values for enumeration


def base_value(kind, ranks, weights, k=3):
    w = [1.0] * len(ranks) if weights is None else list(weights)
    tot = math.fsum(w)
    if kind == "hits":
        return math.fsum(wi for wi, r in zip(w, ranks, strict=True) if r <= k) / tot
    if kind == "mrr":
        return math.fsum(wi / r for wi, r in zip(w, ranks, strict=True)) / tot
    if kind == "mr":
        return math.fsum(wi * r for wi, r in zip(w, ranks, strict=True)) / tot
    if kind == "gmr":
        return math.exp(math.fsum(wi * math.log(r) for wi, r in zip(w, ranks, strict=True)) / tot)
    raise AssertionError(kind)


BASE_OF = {
    "HitsAtK": "hits",
    "InverseHarmonicMeanRank": "mrr",
    "GeometricMeanRank": "gmr",
    "ArithmeticMeanRank": "mr",
    "AdjustedHitsAtK": "hits",
    "AdjustedInverseHarmonicMeanRank": "mrr",
    "AdjustedGeometricMeanRankIndex": "gmr",
    "AdjustedArithmeticMeanRankIndex": "mr",
    "AdjustedArithmeticMeanRank": "mr",
    "ZHitsAtK": "hits",
    "ZInverseHarmonicMeanRank": "mrr",
    "ZGeometricMeanRank": "gmr",
    "ZArithmeticMeanRank": "mr",
}
INCREASING_BASE = {"hits": True, "mrr": True, "gmr": False, "mr": False}


def enumerate_base(kind, ns, weights, k=3):
    vectors = list(itertools.product(*[range(1, n + 1) for n in ns]))
    values = np.array([base_value(kind, r, weights, k) for r in vectors])
    mean = math.fsum(values) / len(values)
    var = math.fsum((values - mean) ** 2) / len(values)
    return vectors, values, mean, var


def transform(name, mean, var):
    """Affine coefficients of a metric, from the enumerated base moments."""
    if name.startswith("Adjusted") and name != "AdjustedArithmeticMeanRank":
        return 1.0 / (1.0 - mean), -mean / (1.0 - mean)
    if name == "AdjustedArithmeticMeanRank":
        return 1.0 / mean, 0.0
    if name.startswith("Z"):
        scale = 1.0 / math.sqrt(var)
        if not INCREASING_BASE[BASE_OF[name]]:
            scale = -scale
        return scale, -scale * mean
    return 1.0, 0.0


ENUM_CASES = [
    ([2, 3, 4], None),
    ([1, 5, 2, 3], None),
    ([3, 4, 6], [1.0, 2.5, 0.5]),
    ([2, 2, 7, 3], [3.0, 1.0, 1.0, 0.25]),
]


@pytest.mark.parametrize(("ns", "weights"), ENUM_CASES)
@pytest.mark.parametrize("name", CLASSES)
def test_enumeration(name, ns, weights):
    metric = make(R, name)
    vectors, values, mean, var = enumerate_base(BASE_OF[name], ns, weights)
    scale, offset = transform(name, mean, var)
    # values on every rank vector
    got = np.array([metric(np.array(r), ns, weights) for r in vectors])
    np.testing.assert_allclose(got, scale * values + offset, rtol=1e-12, atol=1e-12)
    # expected value and variance: those of the transformed enumeration
    adj = scale * values + offset
    e = math.fsum(adj) / len(adj)
    v = math.fsum((adj - e) ** 2) / len(adj)
    assert metric.expected_value(ns, weights=weights) == pytest.approx(e, rel=1e-12, abs=1e-12)
    assert metric.variance(ns, weights=weights) == pytest.approx(v, rel=1e-11)
    assert metric.std(ns, weights=weights) == pytest.approx(math.sqrt(v), rel=1e-11)


def test_enumeration_exact_fractions():
    # the MRR and the mean rank in exact rational arithmetic
    ns, weights = [3, 4, 2], [Fraction(1), Fraction(3), Fraction(1, 2)]
    tot = sum(weights)
    count = math.prod(ns)
    for kind, f in (("mrr", lambda r: Fraction(1, r)), ("mr", Fraction)):
        vals = [
            sum(w * f(r) for w, r in zip(weights, rs, strict=True)) / tot
            for rs in itertools.product(*[range(1, n + 1) for n in ns])
        ]
        mean = sum(vals, Fraction(0)) / count
        var = sum(((x - mean) ** 2 for x in vals), Fraction(0)) / count
        metric = R.MRR() if kind == "mrr" else R.MeanRank()
        w = [float(x) for x in weights]
        assert metric.expected_value(ns, weights=w) == pytest.approx(float(mean), rel=1e-15)
        assert metric.variance(ns, weights=w) == pytest.approx(float(var), rel=1e-14)


# ------------------------------------------------------------------------------------------
# against PyKEEN 1.11.1


def _pykeen_case(seed, num_tasks, nmax, weighted):
    rng = np.random.default_rng(seed)
    n = rng.integers(1, nmax, num_tasks)
    n[:5] = [1, 2, 3, 30, 31]
    ranks = rng.integers(1, n + 1)
    ranks[0] = 1
    w = rng.uniform(0.1, 3.0, num_tasks) if weighted else None
    return ranks, n, w


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(("seed", "num_tasks", "nmax"), [(0, 50, 200), (1, 300, 5000)])
@pytest.mark.parametrize("name", CLASSES)
def test_against_pykeen(name, weighted, seed, num_tasks, nmax):
    ranks, n, w = _pykeen_case(seed, num_tasks, nmax, weighted)
    ours, theirs = make(R, name, k=5), make(P, name, k=5)
    # PyKEEN's GMR variance is prod(V + E^2) - prod(E)^2, which loses digits
    rtol = 1e-9 if "Geometric" in name else 1e-12
    assert ours(ranks, n, w) == pytest.approx(theirs(ranks, n, w), rel=rtol, abs=1e-12)
    assert ours.expected_value(n, weights=w) == pytest.approx(
        theirs.expected_value(n, weights=w), rel=rtol, abs=1e-12
    )
    assert ours.variance(n, weights=w) == pytest.approx(theirs.variance(n, weights=w), rel=rtol)


def test_input_types():
    ranks, n, w = _pykeen_case(4, 40, 100, True)
    for name in CLASSES:
        metric = make(R, name)
        ref = metric(ranks, n, w)
        assert metric(ranks.tolist(), n.tolist(), w.tolist()) == ref
        assert metric(torch.tensor(ranks), torch.tensor(n), torch.tensor(w)) == ref
        assert metric.expected_value(torch.tensor(n), weights=torch.tensor(w)) == metric.expected_value(
            n, weights=w
        )
        assert isinstance(ref, float)


# ------------------------------------------------------------------------------------------
# metadata


SEEDS = {
    # from shared/seeds/pykeen-*.txt
    "HitsAtK": dict(
        name="Hits @ K",
        synonyms=("h@k", "hits@k", "h@", "hits@", "hits_at_", "h_at_"),
        value_range=R.ValueRange(lower=0, lower_inclusive=True, upper=1, upper_inclusive=True),
        increasing=True,
    ),
    "InverseHarmonicMeanRank": dict(
        name="Mean Reciprocal Rank (MRR)",
        synonyms=("mean_reciprocal_rank", "mrr"),
        value_range=R.ValueRange(lower=0, lower_inclusive=False, upper=1, upper_inclusive=True),
        increasing=True,
    ),
    "GeometricMeanRank": dict(
        name="Geometric Mean Rank (GMR)",
        synonyms=("gmr",),
        value_range=R.ValueRange(lower=1, lower_inclusive=True, upper=math.inf, upper_inclusive=False),
        increasing=False,
    ),
}


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_metadata_against_seed_pages(name):
    cls = getattr(R, name)
    seed = SEEDS[name]
    assert cls.name == seed["name"]
    assert tuple(cls.synonyms) == seed["synonyms"]
    assert cls.value_range == seed["value_range"]
    assert cls.increasing is seed["increasing"]
    assert cls.binarize is False
    assert cls.closed_expectation is True
    assert cls.closed_variance is True
    assert cls.needs_candidates is False
    assert cls.supports_weights is True
    assert tuple(cls.supported_rank_types) == ("optimistic", "realistic", "pessimistic")
    assert "ValueRange(lower=" in repr(cls.value_range)


@pytest.mark.parametrize("name", CLASSES)
def test_metadata_against_pykeen(name):
    ours, theirs = make(R, name, k=7), make(P, name, k=7)
    for attr in (
        "name",
        "increasing",
        "binarize",
        "closed_expectation",
        "closed_variance",
        "supports_weights",
        "needs_candidates",
    ):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert tuple(ours.synonyms) == tuple(theirs.synonyms)
    assert tuple(ours.supported_rank_types) == tuple(theirs.supported_rank_types)
    vr, tvr = ours.value_range, theirs.value_range
    assert (vr.lower, vr.lower_inclusive, vr.upper, vr.upper_inclusive) == (
        tvr.lower,
        tvr.lower_inclusive,
        tvr.upper,
        tvr.upper_inclusive,
    )
    assert vr.notate() == tvr.notate()
    assert type(ours).get_range() == type(theirs).get_range()
    assert ours.key == theirs.key
    assert isinstance(ours.get_description(), str) and ours.get_description()


def test_keys_and_repr():
    assert R.HitsAtK().key == "hits_at_10"
    assert R.HitsAtK(k=3).key == "hits_at_3"
    assert R.MRR().key == "inverse_harmonic_mean_rank"
    assert R.GMR().key == "geometric_mean_rank"
    assert R.MeanRank().key == "arithmetic_mean_rank"
    assert not hasattr(R, "AMR")  # ambiguous: pykeen's string "amr" is the *adjusted* mean rank
    assert repr(R.HitsAtK(k=3)) == "HitsAtK(k=3)"
    assert R.AdjustedHitsAtK(k=4).k == 4
    assert R.HitsAtK.get_range() == "[0, 1]"
    assert R.GMR.get_range() == "[1, ∞)"
    assert R.AdjustedHitsAtK.get_range() == r"(\frac{-E[f]}{1-E[f]}, 1]"
    assert 0.5 in R.HitsAtK.value_range and 0 not in R.MRR.value_range and 1 in R.MRR.value_range


# ------------------------------------------------------------------------------------------
# resolver

RESOLVE = {
    "hits@10": ("HitsAtK", 10),
    "h@3": ("HitsAtK", 3),
    "hits_at_5": ("HitsAtK", 5),
    "Hits@K": ("HitsAtK", 10),
    "hits_at_10": ("HitsAtK", 10),
    "mrr": ("InverseHarmonicMeanRank", None),
    "MRR": ("InverseHarmonicMeanRank", None),
    "mean_reciprocal_rank": ("InverseHarmonicMeanRank", None),
    "inverse_harmonic_mean_rank": ("InverseHarmonicMeanRank", None),
    "gmr": ("GeometricMeanRank", None),
    "amrr": ("AdjustedInverseHarmonicMeanRank", None),
    "zgmr": ("ZGeometricMeanRank", None),
    "zmrr": ("ZInverseHarmonicMeanRank", None),
    "amr": ("AdjustedArithmeticMeanRank", None),  # as in PyKEEN
    "mr": ("ArithmeticMeanRank", None),
    "mean_rank": ("ArithmeticMeanRank", None),
    "aamri": ("AdjustedArithmeticMeanRankIndex", None),
    "gmri": ("AdjustedGeometricMeanRankIndex", None),
    "ahits@5": ("AdjustedHitsAtK", 5),
    "adjusted_hits_at_k": ("AdjustedHitsAtK", 10),
    "z_hits_at_4": ("ZHitsAtK", 4),
    "zahk": ("ZHitsAtK", 10),
}


@pytest.mark.parametrize(("query", "expected"), sorted(RESOLVE.items()))
def test_resolve(query, expected):
    cls, k = expected
    metric = R.resolve(query)
    assert type(metric).__name__ == cls
    if k is not None:
        assert metric.k == k
    assert type(R.get_metric(query)) is type(metric)


def test_resolve_matches_pykeen_lookup():
    for name in CLASSES:
        cls = getattr(R, name)
        labels = (*cls.synonyms, name) + (() if name in K_CLASSES else (make(P, name).key,))
        for label in labels:
            assert type(R.resolve(label)).__name__ == P.rank_based_metric_resolver.lookup(label).__name__


def test_resolve_other_forms():
    metric = R.MRR()
    assert R.resolve(metric) is metric
    assert isinstance(R.resolve(R.GMR), R.GMR)
    assert isinstance(R.resolve(None), R.InverseHarmonicMeanRank)
    assert R.resolve("hits_at_k", k=4).k == 4
    with pytest.raises(ValueError, match="conflicting k"):
        R.resolve("hits@5", k=3)
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        R.resolve("nope")
    with pytest.raises(ValueError, match="does not take a k"):
        R.resolve("mrr5")


def test_register_k_factories():
    calls = []

    def factory(k, **kwargs):
        calls.append((k, kwargs))
        return ("dummy-map", k)

    R.register("dummy_map@", factory)
    R.register("dummy_ndcg@k", lambda k: ("dummy-ndcg", k), default_k=10)
    R.register("dummy_plain", lambda: "plain")
    try:
        assert R.resolve("dummy_map@5") == ("dummy-map", 5)
        assert R.resolve("DUMMY_MAP@12", extra=1) == ("dummy-map", 12)
        assert calls == [(5, {}), (12, {"extra": 1})]
        assert R.resolve("dummy_ndcg@10") == ("dummy-ndcg", 10)
        assert R.resolve("dummy_ndcg@k") == ("dummy-ndcg", 10)
        assert R.resolve("dummy_plain") == "plain"
        with pytest.raises(ValueError, match="needs a k"):
            R.resolve("dummy_map@")
        with pytest.raises(ValueError, match="already registered"):
            R.register("dummy_map@", lambda k: None)
        with pytest.raises(ValueError, match="already registered"):
            R.register("hits@", lambda k: None)
        R.register("dummy_map@", lambda k: ("replaced", k), overwrite=True)
        assert R.resolve("dummy_map@2") == ("replaced", 2)
        assert "dummymap@<k>" in R.metric_names()
    finally:
        for table in (R._EXACT, R._PREFIX):
            for key in [k for k in table if k.startswith("dummy")]:
                del table[key]


# ------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize("name", CLASSES)
def test_bad_input(name):
    metric = make(R, name)
    n = np.array([3, 4, 5])
    with pytest.raises(ValueError, match=r"ranks must lie in \[1, num_candidates\]; got ranks\[1\]=5.0"):
        metric([1, 5, 2], n)
    with pytest.raises(ValueError, match=r"ranks must be >= 1; got ranks\[0\]=0.0"):
        metric([0, 1, 2], n)
    with pytest.raises(ValueError, match=r"weights must be positive; got weights\[2\]=-1.0"):
        metric([1, 2, 3], n, [1.0, 1.0, -1.0])
    with pytest.raises(ValueError, match=r"weights must have the same shape"):
        metric([1, 2, 3], n, [1.0, 1.0])
    with pytest.raises(ValueError, match="num_candidates must have the same shape as ranks"):
        metric([1, 2, 3], [3, 4])
    with pytest.raises(
        ValueError, match=r"num_candidates must be integers >= 1; got num_candidates\[0\]=0.0"
    ):
        metric.expected_value([0, 3])
    with pytest.raises(ValueError, match="ranks must not be empty"):
        metric([], [])
    if metric.needs_candidates:
        with pytest.raises(ValueError, match="requires num_candidates"):
            metric([1, 2, 3])


def test_bad_k():
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="k must be an integer >= 1"):
            R.HitsAtK(k=bad)


# ------------------------------------------------------------------------------------------
# sampling


@pytest.mark.parametrize(
    "name",
    ["HitsAtK", "GeometricMeanRank", "AdjustedInverseHarmonicMeanRank", "ZArithmeticMeanRank"],
)
def test_sampling(name):
    metric = make(R, name)
    rng = np.random.default_rng(0)
    n = rng.integers(1, 50, 30)
    w = rng.uniform(0.5, 2.0, 30)
    values = metric.get_sampled_values(n, num_samples=4000, weights=w, generator=1)
    assert values.shape == (4000,)
    e, sd = metric.expected_value(n, weights=w), metric.std(n, weights=w)
    assert abs(values.mean() - e) < 5 * sd / math.sqrt(4000)
    assert values.var(ddof=1) == pytest.approx(sd * sd, rel=0.15)
    slow = metric.get_sampled_values(n, num_samples=50, weights=w, generator=2, memory_intense=False)
    assert slow.shape == (50,)
    assert metric.numeric_expected_value(
        num_candidates=n, num_samples=2000, weights=w, generator=3
    ) == pytest.approx(e, abs=5 * sd / math.sqrt(2000))
    assert metric.numeric_variance(num_candidates=n, num_samples=2000, weights=w, generator=3) > 0
    lo, mid, hi = metric.numeric_expected_value_with_ci(
        num_candidates=n, num_samples=500, n_boot=200, generator=4
    )
    assert lo <= mid <= hi
    lo, mid, hi = metric.numeric_variance_with_ci(num_candidates=n, num_samples=500, n_boot=200, generator=4)
    assert 0 <= lo <= mid <= hi
    with pytest.raises(ValueError, match="num_samples"):
        metric.get_sampled_values(n, num_samples=0)


def test_no_closed_form_falls_back_to_sampling():
    class MedianRank(R.RankBasedMetric):
        name = "median"
        value_range = R.ValueRange(lower=1, lower_inclusive=True, upper=math.inf)
        increasing = False

        def _evaluate(self, ranks, num_candidates, weights):
            return np.median(ranks, axis=-1)

    metric = MedianRank()
    with pytest.raises(R.NoClosedFormError):
        metric.expected_value([5, 5, 5])
    with pytest.raises(R.NoClosedFormError):
        metric.variance([5, 5, 5])
    # median of three U{1..5}: P(med = m) from enumeration
    meds = [sorted(r)[1] for r in itertools.product(range(1, 6), repeat=3)]
    exact = sum(meds) / len(meds)
    assert metric.expected_value([5, 5, 5], num_samples=20000, generator=0) == pytest.approx(exact, abs=0.05)
    assert metric.key == "median_rank"


def test_resolver_names_the_list_metrics_too():
    import numpy as np

    from rankstream import MAPKernel, NDCGKernel, State

    import reference as ref

    m, n = R.resolve("map@5"), R.resolve("ndcg@10")
    assert isinstance(m, MAPKernel) and m.top_k == [5]
    assert isinstance(n, NDCGKernel) and n.top_k == [10]
    assert R.resolve("map@").top_k == [10]
    rng = np.random.default_rng(0)
    s, y = rng.standard_normal((6, 12)), (rng.random((6, 12)) < 0.3).astype(float)
    got = State(m).update(s, y).compute()
    expected = ref.mean_over_lists(ref.average_precision, s.tolist(), y.tolist(), 5)
    assert abs(got[0] - expected) < 1e-12
