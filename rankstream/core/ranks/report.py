"""The report of :class:`~rankstream.core.ranks.kernel.RankKernel`: from the summed fields to
every value, expectation, variance, adjusted form, statistic and bound, keyed as PyKEEN keys them,
and the selection of one value for the one-family metrics (a mixin of the kernel: the kernel
declares and sums the fields, this reads them)."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from rankstream.core.backends import Array, Ops
from rankstream.core.ranks import median as median_histogram
from rankstream.core.ranks.families import (
    FAMILIES,
    INVERSES,
    STAT_WEIGHT_FIELD,
)
from rankstream.core.ranks.intervals import STATISTICS, mean_statistics, t_critical
from rankstream.core.ranks.sides import BOTH
from rankstream.core.ranks.streamed_forms import gmr_moments_xp as _gmr_moments  # noqa: F401 (the one GMR reducer)
from rankstream.core.state import check_sums

#: above this relative bound on the GMR expectation / variance, the report warns
GMR_WARN_BOUND = 1e-3


class RankReport:
    """The reading half of :class:`~rankstream.core.ranks.kernel.RankKernel` (its attributes:
    ``rank_types``, ``metrics``, ``ks``, ``sides``, ``select_spec``, ``confidence``, ...)."""

    def _totals(self, sums: Mapping[str, Any]) -> dict[str, Any]:
        """``weight``, ``count`` and ``invalid`` over every side."""
        names = self._side_names()
        return {
            f: sum(np.asarray(sums[self._field(side, None, f)], dtype=np.float64) for side in names)
            for f in ("weight", "count", "invalid")
        }

    def check_computable(self, sums: Mapping[str, Any], name: str | None = None) -> None:
        """Raise when the sums give no number (see :func:`~rankstream.core.state.check_sums`)."""
        bad = (
            "NaN scores among their candidates, a true index out of range or masked out, "
            "or a negative/non-finite sample_weight"
        )
        what = "ranking task with a positive weight;tasks seen"
        check_sums(self._totals(sums), name or type(self).__name__, "weight", "row", bad, what)

    def compute(self, sums: Mapping[str, Any], ops: Ops | None = None) -> dict[str, Array]:
        """Every value, expectation, variance, adjusted index and z-score (and the extras), as
        0-d arrays of ``ops`` (numpy float64 by default; ``keras.ops`` tensors for the Keras
        adapter); keyed by metric, or ``"{side}.{rank_type}.{metric}"`` in report form.

        Elementwise arithmetic and sorts of the median's histogram only (every branch taken
        with ``where``), so it runs under ``jit``/``tf.function``. Without a task of positive
        weight every entry is 0 (the Keras convention of an empty mean; the Ignite adapter and
        :class:`State` raise in :meth:`check_computable` first), and with ``invalid`` rows
        every entry but ``count`` is NaN."""
        xp = ops.xp if isinstance(ops, Ops) else ops  # an Ops or an xp namespace
        if xp is None or xp is np:
            s = {k: np.asarray(v, dtype=np.float64) for k, v in sums.items()}
            with np.errstate(all="ignore"):
                return self._report(s, np)
        return self._report(sums, xp)

    def _report(self, s: Mapping[str, Any], xp: Any) -> dict[str, Array]:
        """:meth:`_compute` of every side (and ``both``, the sum of the named sides) and rank
        type, keyed by PyKEEN's flat keys; the plain dict without sides and type list."""
        if not self.report:
            return self._compute(s, xp)
        names = self._side_names()
        groups = [(side, (side,)) for side in names] + ([(BOTH, names)] if self.sides else [])
        combos: list[tuple[str, str, dict[str, Array]]] = []
        for label, members in groups:

            def total(rank_type: str | None, field: str, members: tuple[str, ...] = members) -> Array:
                parts = [s[self._field(side, rank_type, field)] for side in members]
                return functools.reduce(lambda a, b: a + b, parts)

            shared = {f: total(None, f) for f in self._shared}
            for rt in self.rank_types:
                combos.append((label, rt, {**shared, **{f: total(rt, f) for f in self._typed}}))
        # every (side, rank type) at once: each field stacked along a leading axis
        if xp is np:
            stack = np.stack
        else:  # (a field of one side may still be a Keras variable)
            stack = lambda xs: xp.stack([x + 0.0 for x in xs])  # noqa: E731
        values = self._compute({f: stack([c[2][f] for c in combos]) for f in combos[0][2]}, xp)
        out: dict[str, Array] = {}
        for i, (label, rt, _) in enumerate(combos):
            out.update({f"{label}.{rt}.{key}": v[i] for key, v in values.items()})
        return out

    def _compute(self, s: Mapping[str, Any], xp: Any) -> dict[str, Array]:
        """The values of one side and rank type on an array namespace ``xp`` (``numpy`` or
        ``keras.ops``; or of several, every field stacked along a leading axis): each family of
        the registry (:mod:`rankstream.core.ranks.families`) gives its value (``finish`` of
        the weighted mean), its moments, and its chance-adjusted forms by the one affine
        implementation (:meth:`RankFamily.results`); then the extras and PyKEEN's inverse forms."""
        weight = s["weight"]
        seen = weight > 0.0
        total = xp.where(seen, weight, 1.0)
        out: dict[str, Array] = {}

        stats: dict[str, Array] = {}
        critical = None if self._confidence is None else t_critical(self._confidence, s["count"] - 1.0, xp)
        for fam in self._families:
            for j, k in enumerate(self.ks) if fam.takes_k else ((None, None),):
                value = s[fam.value_field] if j is None else s[fam.value_field][..., j]
                mean, var, more = fam.sum_moments(s, total, xp, j)
                out.update(fam.results(fam.finish(value / total, xp), mean, var, xp, k=k))
                out.update(more)
                if critical is not None:
                    sq = [s[f] if j is None else s[f][..., j] for f in fam.stat_fields]
                    parts = mean_statistics(
                        value / total, s["count"], weight, s[STAT_WEIGHT_FIELD], *sq, critical, fam.finish, xp
                    )
                    stats.update({f"{fam.key(k)}_{q}": v for q, v in zip(STATISTICS, parts, strict=True)})
        out.update(self._extras(s, total, out, xp))
        bad = s["invalid"] > 0.0
        if xp is np and np.ndim(bad) == 0:  # one host scalar: branch once rather than per entry
            if bad or not seen:
                out = dict.fromkeys(out, np.float64(math.nan if bad else 0.0))
        elif xp is np and not np.any(bad) and np.all(seen):  # host arrays, every entry kept
            pass
        else:
            out = {k: xp.where(bad, math.nan, xp.where(seen, v, 0.0)) for k, v in out.items()}
        # the statistics: NaN without two tasks (not 0: a standard error of 0 would be a claim)
        out.update({k: xp.where(bad, math.nan + 0.0 * v, v) for k, v in stats.items()})
        out["count"] = s["count"] + 0.0 * weight
        return out

    def _extras(
        self, s: Mapping[str, Any], total: Array, values: Mapping[str, Array], xp: Any
    ) -> dict[str, Array]:
        """The rank's variance and standard deviation (population, weighted: ``sum w r^2 / W
        - (sum w r / W)^2``; PyKEEN's unweighted ``np.var``/``np.std`` with unit weights), the
        median rank and the median absolute deviation with their absolute error bounds
        (:func:`rankstream.core.ranks.median.histogram_median_xp`), and PyKEEN's inverse forms:
        ``harmonic_mean_rank = 1 / MRR`` and ``inverse_{arithmetic,geometric,median}_rank``."""
        out: dict[str, Array] = {}
        if "dispersion" in self.metrics:
            mean = s["rank"] / total
            variance = xp.maximum(s["rank_squared"] / total - mean * mean, 0.0)
            out["variance"], out["standard_deviation"] = variance, xp.sqrt(variance)
        if self._bins is not None:
            hist = s["rank_histogram"]
            rows = [hist] if len(hist.shape) == 1 else [hist[i] for i in range(int(hist.shape[0]))]
            parts = [median_histogram.histogram_median_xp(h, self._bins, xp) for h in rows]
            median, median_bound, mad, mad_bound = (
                part[0] if len(rows) == 1 else xp.stack(list(part)) for part in zip(*parts, strict=True)
            )
            out["median_rank"], out["median_rank_error_bound"] = median, median_bound
            out["median_absolute_deviation"], out["median_absolute_deviation_error_bound"] = mad, mad_bound
            out["inverse_median_rank"] = 1.0 / median
        for name, inverse in INVERSES:
            if name in self.metrics:
                out[inverse] = 1.0 / values[FAMILIES[name].key()]
        return out

    def select_value(self, value: Mapping[str, Any]) -> Any:
        """What the metric reports from :meth:`compute`'s dict, as it is (arrays or floats):
        the dict itself, or with ``select=(family, form)`` the chosen entry (a list ordered by
        ``ks`` for Hits@k with several ``k``); keys from the rank-family registry."""
        if self.selected is None:
            return value
        name, form = self.selected
        fam = FAMILIES[name]
        ks = self.ks if fam.takes_k else [None]
        vals = [value[fam.output_key(form, k)] for k in ks]
        if not self.quantities:
            return vals[0] if len(vals) == 1 else vals
        out = {"value": vals[0] if len(vals) == 1 else vals}
        for q in STATISTICS:
            part = [value[f"{fam.key(k)}_{q}"] for k in ks]
            out[q] = part[0] if len(part) == 1 else part
        out["count"] = value["count"]
        return out

    def select(self, values: Mapping[str, Any]) -> Any:
        """The kernel contract's reporting step: :meth:`select_value`."""
        return self.select_value(values)

    def warn_if_inexact(self, value: Mapping[str, Any]) -> None:
        """``RuntimeWarning`` when a selected GMR expectation/variance/adjusted/z value rests on
        a streamed expectation whose error bound exceeds :data:`GMR_WARN_BOUND`."""
        if self.selected is None or self.selected[0] != "gmr" or self.selected[1] == "value":
            return
        bound = float(np.asarray(value[f"{FAMILIES['gmr'].key()}_error_bound"]))
        if bound > GMR_WARN_BOUND:
            warnings.warn(
                f"the streamed GMR expectation/variance is only known to within a relative "
                f"{bound:.3g} for so few (or so unevenly weighted) tasks",
                RuntimeWarning,
                stacklevel=3,
            )

    def finalize(self, value: Mapping[str, Any]) -> Any:
        """Host floats of :meth:`compute`'s dict, selected (see :meth:`select_value`)."""
        value = {k: float(v) for k, v in value.items()}
        self.warn_if_inexact(value)
        return self.select_value(value)
