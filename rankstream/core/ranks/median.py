"""The median rank and the median absolute deviation, streamed as a bounded histogram.

A rank histogram (:func:`rank_bins`: exact half-integer bins up to a limit, then log-spaced)
is a plain sum over tasks; :func:`histogram_median_xp` reads the weighted median and the MAD
from it with absolute error bounds, as traceable ``xp`` code (``numpy`` or ``keras.ops``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rankstream.core.ranks.series import _maximum

__all__ = ["MAD_NORMAL_SCALE", "RankBins", "histogram_median_xp", "rank_bins"]

Array = Any

#: ``Phi^{-1}(3/4)``: the median absolute deviation of a normal distribution in units of its
#: standard deviation; a MAD divided by it estimates the standard deviation (scipy's
#: ``median_abs_deviation(..., scale="normal")``, the form PyKEEN reports)
MAD_NORMAL_SCALE = 0.6744897501960817


class RankBins:
    """The bins of a rank histogram (host float64 arrays of length ``H``).

    Bin ``i`` holds the ranks in ``[edges[i], edges[i + 1])`` (the last bin is open above).
    Ranks are multiples of 1/2 (realistic ranks are half-integers), so the values a bin can
    hold are ``low[i], low[i] + 1/2, ..., high[i]``; ``mid`` is the middle of that range, the
    value reported for the bin, and ``high - low`` is 0 for a bin of one possible value
    (every bin below the exact limit)."""

    def __init__(self, edges: np.ndarray) -> None:
        self.edges = edges
        self.low = edges
        self.high = np.append(edges[1:] - 0.5, math.inf)
        self.mid = np.append((edges[:-1] + edges[1:] - 0.5) / 2.0, edges[-1])

    def __len__(self) -> int:
        return int(self.edges.shape[0])


def rank_bins(exact: int = 1024, per_octave: int = 64, top: float = 2.0**31) -> RankBins:
    """Histogram bins for ranks: one bin per half-integer from 1 up to ``exact`` (ranks below
    ``exact`` are kept exactly), then log-spaced edges ``exact * 2^(j / per_octave)`` rounded
    up to half-integers (a bin's relative width is at most about ``2^(1 / per_octave) - 1``,
    1.09% for 64 per octave) up to ``top``; ranks from ``top`` on share the last bin (its
    values are unbounded: an error bound of ``inf`` where the median falls there)."""
    if isinstance(exact, bool) or not isinstance(exact, int) or exact < 1:
        raise ValueError(f"the exact limit of the rank histogram must be an int >= 1, got {exact!r}")
    if isinstance(per_octave, bool) or not isinstance(per_octave, int) or not 1 <= per_octave <= 1024:
        raise ValueError(f"bins per octave must be an int in [1, 1024], got {per_octave!r}")
    exact_edges = np.arange(2, 2 * exact + 1, dtype=np.float64) / 2.0
    steps = np.arange(1, math.ceil(per_octave * math.log2(max(top / exact, 2.0))) + 1)
    log_edges = np.ceil(2.0 * exact * np.exp2(steps / per_octave)) / 2.0
    edges = np.unique(np.concatenate([exact_edges, log_edges[log_edges > exact]]))
    return RankBins(edges)


def _weighted_median_np(values: np.ndarray, weights: np.ndarray, sort: bool) -> float:
    """:func:`_weighted_median_xp` on the host, in few numpy calls (the same arithmetic)."""
    if sort:
        order = np.argsort(values, kind="stable")
        values, weights = values[order], weights[order]
    c = np.cumsum(weights)
    cdf = c / (c[-1] if c[-1] > 0.0 else 1.0)
    j = min(int(np.searchsorted(cdf, 0.5)), cdf.size - 1)  # the first cdf >= 1/2
    if cdf[j] == 0.5:
        after = np.flatnonzero(c > c[j])
        if after.size:
            return (values[j] + values[after[0]]) / 2.0
    return float(values[j])


def _weighted_median_xp(values: Array, weights: Array, sort: bool, xp: Any) -> Array:
    """PyKEEN's weighted median (``pykeen.metrics.utils.weighted_median``: the first value at
    which the normalised cumulative weight reaches 1/2, the mean of it and the next value when
    it is exactly 1/2) of ``values`` with ``weights`` (1-D; zero weights are no values), as
    traceable ``xp`` code (``numpy`` or ``keras.ops``). ``sort``: whether ``values`` must be
    ordered first (bins are ordered already)."""
    if sort:
        order = xp.argsort(values)
        values, weights = xp.take(values, order), xp.take(weights, order)
    c = xp.cumsum(weights)
    total = c[-1]
    cdf = c / xp.where(total > 0.0, total, 1.0)
    j = xp.argmax(xp.cast(cdf >= 0.5, "int32") if xp is not np else cdf >= 0.5)
    c_j = xp.take(c, j)
    after = c > c_j
    nxt = xp.argmax(xp.cast(after, "int32") if xp is not np else after)
    v_j = xp.take(values, j)
    at_half = (xp.take(cdf, j) == 0.5) & xp.any(after)
    return xp.where(at_half, (v_j + xp.take(values, nxt)) / 2.0, v_j)


def histogram_median_xp(hist: Array, bins: RankBins, xp: Any) -> tuple[Array, Array, Array, Array]:
    r"""Median rank and median absolute deviation of a rank histogram, with error bounds.

    Returns ``(median, median_bound, mad, mad_bound)`` (absolute bounds, in ranks; 0 while
    every rank that matters lies below the exact limit of ``bins``). Each rank is represented
    by the middle of its bin; the true value of every rank lies in its bin's
    ``[low, high]``, and a weighted median is non-decreasing in every value, so the true
    median lies between the medians of the lows and of the highs: those give the bound. The
    deviations ``|r - median|`` are bounded per bin the same way (the distance between the
    bin's range and the median's range, and the largest distance), giving the MAD's bound.

    The MAD is PyKEEN's unweighted form, ``median(|r - median(r)|) / Phi^{-1}(3/4)``
    (:data:`MAD_NORMAL_SCALE`; with weights, weighted medians). Traceable ``xp`` code
    (``numpy`` or ``keras.ops``: three sorts of ``H`` values)."""

    def const(x: np.ndarray) -> Array:
        return x if xp is np else xp.cast(xp.convert_to_tensor(x), hist.dtype)

    low, high, mid = const(bins.low), const(bins.high), const(bins.mid)
    if xp is np:  # on the host only the bins holding ranks matter (a traced shape is fixed)
        held = np.flatnonzero(hist > 0.0) if np.any(hist > 0.0) else np.arange(1)
        hist, low, high, mid = hist[held], low[held], high[held], mid[held]

        def weighted_median(values: Array, sort: bool) -> Array:
            return np.float64(_weighted_median_np(values, hist, sort))

    else:

        def weighted_median(values: Array, sort: bool) -> Array:
            return _weighted_median_xp(values, hist, sort, xp)

    median = weighted_median(mid, False)
    if xp is np and np.array_equal(low, high):  # every held bin holds one rank: all exact
        mad = weighted_median(np.abs(mid - median), True)
        return median, np.float64(0.0), mad / MAD_NORMAL_SCALE, np.float64(0.0)
    m_low = weighted_median(low, False)
    m_high = weighted_median(high, False)
    dev = xp.abs(mid - median)
    mad = weighted_median(dev, True)
    dev_low = _maximum(xp, _maximum(xp, low - m_high, m_low - high), 0.0)
    dev_high = _maximum(xp, high - m_low, m_high - low)
    mad_low = weighted_median(dev_low, True)
    mad_high = weighted_median(dev_high, True)
    median_bound = _maximum(xp, median - m_low, m_high - median)
    mad_bound = _maximum(xp, mad - mad_low, mad_high - mad)
    return median, median_bound, mad / MAD_NORMAL_SCALE, mad_bound / MAD_NORMAL_SCALE
