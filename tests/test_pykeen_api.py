"""rankstream's PyKEEN-style classes against PyKEEN 1.11.1's own, attribute by attribute and
number by number: what a PyKEEN user calls on a metric (its value range, with
``approximate(epsilon)``, ``in`` and ``notate``; ``increasing``, ``synonyms``,
``supported_rank_types``, ``needs_candidates``, ``supports_weights``, ``binarize``, the closed
forms' flags; ``key``, ``repr``/``str``, ``get_range``, ``get_link``, the docdata PyKEEN's
helpers read; ``__call__``, ``expected_value``, ``variance`` and ``std`` on ranks, candidate
counts and weights; the signatures of those methods). Every expected value is PyKEEN's.

PyKEEN's own metric tests (``tests/cases.py``, ``RankBasedMetricTestCase``) call the value
range's ``approximate(epsilon=1e-8)`` on every value, ask for each class's docdata, link, name
and description, and compare the moments with sampled ones: the parity below covers what they
read.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from docdata import get_docdata
from pykeen.metrics import ranking as P
from pykeen.utils import getattr_or_docdata
from test_rank_based import CLASSES, K_CLASSES

import rankstream.pykeen as R

#: every concrete class with a PyKEEN counterpart, made with the same arguments on both sides
CONCRETE, WITH_K = CLASSES, K_CLASSES
#: the generic transforms, over PyKEEN's default base (the MRR) and over a given base class
GENERIC = [
    ("ZMetric", None, {}),
    ("ReindexedMetric", None, {}),
    ("ExpectationNormalizedMetric", None, {}),
    ("ZMetric", "HitsAtK", {"k": 3}),
    ("ReindexedMetric", "GeometricMeanRank", {}),
    ("ExpectationNormalizedMetric", "ArithmeticMeanRank", {}),
]
CASES = [(name, {"k": k}) if name in WITH_K else (name, {}) for name in CONCRETE for k in (1, 4)]
CASES = list(dict.fromkeys((n, tuple(kw.items())) for n, kw in CASES))


def pair(name: str, kwargs) -> tuple:
    kwargs = dict(kwargs)
    return getattr(R, name)(**kwargs), getattr(P, name)(**kwargs)


def generic_pair(name: str, base: str | None, kwargs: dict) -> tuple:
    if base is None:
        return getattr(R, name)(**kwargs), getattr(P, name)(**kwargs)
    return getattr(R, name)(base_cls=getattr(R, base), **kwargs), getattr(P, name)(
        base_cls=getattr(P, base), **kwargs
    )


def ids(cases) -> list[str]:
    return [f"{n}{dict(kw) or ''}" for n, kw in cases]


def range_fields(vr) -> tuple:
    return (vr.lower, vr.lower_inclusive, vr.upper, vr.upper_inclusive)


def probes(vr) -> list[float]:
    """Values around every bound of a range (and far off, infinite and NaN)."""
    out = [-math.inf, -1e9, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 1e9, math.inf, math.nan]
    for bound in (vr.lower, vr.upper):
        if bound is not None and math.isfinite(bound):
            out += [
                bound,
                bound - 1e-9,
                bound + 1e-9,
                math.nextafter(bound, -math.inf),
                math.nextafter(bound, math.inf),
            ]
    return out


# -- the value range -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=ids(CASES))
def test_value_range_and_its_approximations(name, kwargs):
    ours, theirs = pair(name, kwargs)
    vr, tvr = ours.value_range, theirs.value_range
    assert range_fields(vr) == range_fields(tvr)
    assert vr.notate() == tvr.notate()
    for epsilon in (0.0, 1e-8, 0.25, 3.0):
        approx, tapprox = vr.approximate(epsilon=epsilon), tvr.approximate(epsilon=epsilon)
        assert range_fields(approx) == range_fields(tapprox), epsilon
        assert approx.notate() == tapprox.notate()
        for x in probes(tvr) + probes(tapprox):
            assert (x in approx) is (x in tapprox), (epsilon, x)
    for x in probes(tvr):
        assert (x in vr) is (x in tvr), x
    assert range_fields(vr) == range_fields(tvr)  # approximate made new ranges


def test_approximate_keeps_unbounded_sides_and_inclusiveness():
    open_right = R.ValueRange(lower=1, lower_inclusive=True, upper=None)
    wide = open_right.approximate(0.5)
    assert range_fields(wide) == (0.5, True, None, False)
    assert 0.5 in wide and 0.4 not in wide and 1e300 in wide
    assert range_fields(R.ValueRange().approximate(1.0)) == (None, False, None, False)


# -- the metadata ----------------------------------------------------------------------------

FLAGS = (
    "name",
    "increasing",
    "binarize",
    "supports_weights",
    "needs_candidates",
    "closed_expectation",
    "closed_variance",
)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=ids(CASES))
def test_metadata(name, kwargs):
    ours, theirs = pair(name, kwargs)
    for attr in FLAGS:
        assert getattr(ours, attr) == getattr(theirs, attr), attr
        assert getattr(type(ours), attr) == getattr(type(theirs), attr), attr
    assert tuple(ours.synonyms) == tuple(theirs.synonyms)
    assert tuple(ours.supported_rank_types) == tuple(theirs.supported_rank_types)
    assert ours.key == theirs.key
    assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
    assert ours.extra_repr() == theirs.extra_repr()
    assert list(ours.iter_extra_repr()) == list(theirs.iter_extra_repr())
    assert type(ours).get_range() == type(theirs).get_range()
    assert type(ours).get_link() == type(theirs).get_link()
    # what PyKEEN's helpers read: the docdata, and name, link and description through them
    docdata, theirs_docdata = get_docdata(type(ours)), get_docdata(type(theirs))
    assert docdata is not None and docdata["link"] == theirs_docdata["link"]
    assert docdata.get("tight_lower") == theirs_docdata.get("tight_lower")
    for key in ("name", "link", "description"):
        assert getattr_or_docdata(type(ours), key)
    assert docdata["description"] == ours.get_description()
    assert type(ours).__doc__.splitlines()[0].strip()


@pytest.mark.parametrize(("name", "base", "kwargs"), GENERIC)
def test_generic_transforms(name, base, kwargs):
    """PyKEEN's ``ZMetric()``, ``ReindexedMetric()`` and ``ExpectationNormalizedMetric()``
    transform the MRR (its resolver's default) or the base class given; they have no link."""
    ours, theirs = generic_pair(name, base, kwargs)
    assert type(ours.base).__name__ == type(theirs.base).__name__
    for attr in ("needs_candidates", "supports_weights", "binarize", "closed_expectation", "closed_variance"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert tuple(ours.supported_rank_types) == tuple(theirs.supported_rank_types)
    assert ours.key == theirs.key and repr(ours) == repr(theirs)
    assert get_docdata(type(ours)) is None and get_docdata(type(theirs)) is None
    with pytest.raises(TypeError):
        type(theirs).get_link()
    with pytest.raises(TypeError):
        type(ours).get_link()
    ranks, n, w = case(3)
    assert ours(ranks, n) == pytest.approx(theirs(ranks, n), rel=1e-9)
    assert ours(ranks, n, w) == pytest.approx(theirs(ranks, n, w), rel=1e-9)  # weights pass to the base
    assert ours.expected_value(n) == pytest.approx(theirs.expected_value(n), rel=1e-9, abs=1e-12)
    assert ours.variance(n, weights=w) == pytest.approx(theirs.variance(n, weights=w), rel=1e-9)


# -- the numbers -------------------------------------------------------------------------------


def case(seed: int, tasks: int = 23, nmax: int = 30):
    """Ranks within random candidate counts, and positive weights."""
    rng = np.random.default_rng(seed)
    n = rng.integers(1, nmax, tasks)
    ranks = rng.integers(1, n + 1)
    return ranks, n, rng.uniform(0.2, 3.0, tasks)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=ids(CASES))
def test_values_and_moments(name, kwargs, seed):
    ours, theirs = pair(name, kwargs)
    ranks, n, w = case(seed)
    # PyKEEN's weighted GMR variance, prod(V + E^2) - prod(E)^2, keeps fewer digits
    rel = 1e-9 if "Geometric" in name else 1e-11
    for weights in (None, w):
        for r in (ranks, np.ones_like(ranks), n):  # as drawn, the best and the worst ranks
            got = ours(ranks=r, num_candidates=n, weights=weights)
            assert isinstance(got, float)
            assert got == pytest.approx(
                theirs(ranks=r, num_candidates=n, weights=weights), rel=rel, abs=1e-12
            )
            assert got in ours.value_range.approximate(epsilon=1e-8)
        for moment in ("expected_value", "variance", "std"):
            want = getattr(theirs, moment)(num_candidates=n, weights=weights)
            got = getattr(ours, moment)(num_candidates=n, weights=weights)
            assert got == pytest.approx(want, rel=rel, abs=1e-12), moment
    if not theirs.needs_candidates:
        assert ours(ranks) == pytest.approx(theirs(ranks), rel=rel)
    else:
        for metric in (ours, theirs):
            with pytest.raises(ValueError):
                metric(ranks)


@pytest.mark.parametrize(
    "method",
    [
        "__call__",
        "expected_value",
        "variance",
        "std",
        "get_sampled_values",
        "numeric_expected_value",
        "numeric_variance",
        "numeric_expected_value_with_ci",
        "numeric_variance_with_ci",
    ],
)
def test_signatures(method):
    """The parameter names, kinds and defaults of what PyKEEN users call."""
    for name in CONCRETE:
        ours, theirs = getattr(getattr(R, name), method), getattr(getattr(P, name), method)

        def shape(fn):
            return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

        assert shape(ours) == shape(theirs), name
    for name in ("AdjustedHitsAtK", "ZHitsAtK", "ZMetric"):
        assert list(inspect.signature(getattr(R, name).adjust).parameters) == list(
            inspect.signature(getattr(P, name).adjust).parameters
        )
