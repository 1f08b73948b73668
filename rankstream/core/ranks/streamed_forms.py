r"""Streamed forms of the rank family's moments under random ranking: per-task contributions
whose plain sums over tasks are a state, and the moments from those sums.

Written against an array namespace ``xp`` (``numpy``, ``torch`` or ``keras.ops``) with only
elementwise ``log``, ``log1p``, ``exp``, ``sqrt``, ``where``, ``minimum``, ``maximum`` and
Python operators, so the streamed kernel (:class:`rankstream.core.ranks.kernel.RankKernel`)
runs them on its own arrays and under ``jit``:

* a weighted mean of ``f(r)`` (Hits@k, MRR, mean rank) sums ``w``, ``w E_i`` and
  ``w^2 V_i`` (:func:`linear_stream_terms`, with the per-task moments of
  :mod:`~rankstream.core.ranks.closed_forms`), reduced by :func:`sum_moments`;
* the GMR sums ``w^m kappa_m(N)`` and a tail term (:func:`gmr_stream_terms`), reduced by the
  one GMR reducer :func:`gmr_moments_xp` (:func:`gmr_moments_from_sums` is its validated
  numpy face).

Streaming inputs must be float64 for the stated accuracy; they are not validated (they may be
traced by a compiler); validate eagerly with
:func:`~rankstream.core.ranks.closed_forms.check_num_candidates` and
:func:`~rankstream.core.ranks.closed_forms.check_weights`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.core.ranks.closed_forms import hits_terms, rank_terms, reciprocal_rank_terms
from rankstream.core.ranks.series import (
    DEFAULT_GMR_ORDER,
    FLOAT32_GMR_ORDER,
    GMR_CUMULANT_BOUND,
    MAX_GMR_ORDER,
    _const,
    _maximum,
    log_rank_cumulants,
)

__all__ = [
    "default_gmr_order",
    "gmr_moments_from_sums",
    "gmr_moments_xp",
    "gmr_stream_terms",
    "hits_stream_terms",
    "linear_stream_terms",
    "mean_rank_stream_terms",
    "moments_from_sums",
    "mrr_stream_terms",
    "state_dtype_name",
    "sum_moments",
]

Array = Any

# ==========================================================================================
# the GMR order of a state dtype

_STATE_DTYPES = ("float64", "float32", "float16", "bfloat16")


def state_dtype_name(dtype: Any) -> str:
    """The name (``"float64"``, ``"float32"``, ``"float16"``, ``"bfloat16"``) of a state dtype
    given as a string or a numpy / torch / keras / TensorFlow dtype; ``ValueError`` otherwise."""
    if isinstance(dtype, str):
        name = dtype
    else:
        name = getattr(dtype, "name", None)
        if not isinstance(name, str):
            try:
                name = np.dtype(dtype).name
            except TypeError:
                name = str(dtype)  # torch.float32 -> "torch.float32"
    name = name.rsplit(".", 1)[-1]
    if name not in _STATE_DTYPES:
        raise ValueError(f"state_dtype must be a floating dtype among {_STATE_DTYPES}, got {dtype!r}")
    return name


def default_gmr_order(state_dtype: Any = "float64") -> int:
    """The GMR streaming order for a state dtype: :data:`DEFAULT_GMR_ORDER` (20) for float64,
    :data:`FLOAT32_GMR_ORDER` (8) for float32 (and narrower) state."""
    return DEFAULT_GMR_ORDER if state_dtype_name(state_dtype) == "float64" else FLOAT32_GMR_ORDER


# ==========================================================================================
# per-task contributions and the moments from their sums


def _weights_like(n: Array, w: Array | None) -> Array:
    return _const(n, 1.0) if w is None else w


def linear_stream_terms(mean: Array, var: Array, w: Array | None) -> dict[str, Array]:
    """State contributions of a weighted mean metric: ``weight``, ``mean``, ``var``.

    ``{"weight": w, "mean": w E_i, "var": w^2 V_i}``; summed over tasks they give
    ``E = mean / weight`` and ``Var = var / weight^2`` (:func:`moments_from_sums`).
    """
    w = _weights_like(mean, w)
    return {"weight": w, "mean": w * mean, "var": w * w * var}


def hits_stream_terms(n: Array, w: Array | None, xp: Any, k: Any = 10) -> dict[str, Array]:
    """Streaming contributions for ``E``/``Var`` of Hits@k (keys ``weight``, ``mean``, ``var``)."""
    return linear_stream_terms(*hits_terms(n, k, xp), w)


def mrr_stream_terms(n: Array, w: Array | None, xp: Any) -> dict[str, Array]:
    """Streaming contributions for ``E``/``Var`` of the MRR (keys ``weight``, ``mean``, ``var``)."""
    return linear_stream_terms(*reciprocal_rank_terms(n, xp), w)


def mean_rank_stream_terms(n: Array, w: Array | None, xp: Any) -> dict[str, Array]:
    """Streaming contributions for ``E``/``Var`` of the mean rank (keys as for the MRR)."""
    return linear_stream_terms(*rank_terms(n, xp), w)


def sum_moments(mean: Array, var: Array, total: Array) -> tuple[Array, Array]:
    """``(E, Var) = (mean / W, var / W^2)`` of a weighted mean metric from the sums of
    :func:`linear_stream_terms` (``W`` the summed weight; operators only, any array type)."""
    return mean / total, var / (total * total)


def moments_from_sums(sums: Mapping[str, Any]) -> tuple[float, float]:
    """``(E, Var) = (sum mean / sum weight, sum var / (sum weight)^2)`` from summed terms."""
    for key in ("weight", "mean", "var"):
        if key not in sums:
            raise ValueError(f"sums must contain {key!r}; got keys {sorted(sums)}")
    total = float(np.asarray(sums["weight"], dtype=np.float64))
    if not total > 0:
        raise ValueError(f"sums['weight'] must be positive (no tasks seen?), got {total}")
    mean, var = (float(np.asarray(sums[key], dtype=np.float64)) for key in ("mean", "var"))
    return sum_moments(mean, var, total)


def gmr_stream_terms(n: Array, w: Array | None, xp: Any, order: int = DEFAULT_GMR_ORDER) -> dict[str, Array]:
    r"""Per-task contributions to the GMR state (a truncated cumulant series), all shape ``n``.

    ``sum_i ln E[r_i^{a_i}] = sum_m F_m / (m! W^m)`` with ``F_m = sum_i w_i^m kappa_m(N_i)``
    (:func:`log_rank_cumulants`), so the state is a set of plain sums over tasks:

    * ``"weight"``: ``w_i`` (sums to ``W``);
    * ``"cumulant_m"`` for ``m = 1 .. order``: ``w_i^m kappa_m(N_i)`` (sums to ``F_m``);
    * ``"tail"``: ``w_i^(order+1)`` for tasks with ``N_i > 1`` (0 otherwise), for the bound.

    Weights are raised to the power ``order + 1``: keep them below ~1e300^(1/(order+1)).
    Reduce the summed state with :func:`gmr_moments_from_sums`.
    """
    if not isinstance(order, int) or not 1 <= order <= MAX_GMR_ORDER:
        raise ValueError(f"order must be an int in [1, {MAX_GMR_ORDER}], got {order!r}")
    w = _weights_like(n, w)
    kappa = log_rank_cumulants(n, order, xp)
    out = {"weight": w}
    wp = w
    for m in range(1, order + 1):
        out[f"cumulant_{m}"] = wp * kappa[m - 1]
        wp = wp * w
    out["tail"] = xp.where(n > 1, wp, _const(n, 0.0))
    return out


def gmr_moments_from_sums(sums: Mapping[str, Any]) -> tuple[float, float, float]:
    r"""``(E[GMR], Var[GMR], error_bound)`` from the summed :func:`gmr_stream_terms`.

    With ``W = sums["weight"]``, ``F_m = sums["cumulant_m"]`` (m = 1..M) and
    ``T = sums["tail"]``:

    .. math::

        \ln E \approx \Lambda = \sum_{m=1}^{M} \frac{F_m}{m! W^m},\qquad
        \ln(1 + V/E^2) \approx \Upsilon = \sum_{m=2}^{M} \frac{(2^m - 2) F_m}{m! W^m},

        E \approx e^{\Lambda},\qquad V \approx e^{2\Lambda} \operatorname{expm1}(\Upsilon).

    **Error bound.**  ``error_bound`` bounds the relative truncation error of *both* returned
    values, ``|E_stream / E - 1|`` and ``|Var_stream / Var - 1|`` (floating-point rounding,
    ~1e-13 relative in the tests, is not included); it is ``inf`` when the series is not known
    to converge.  Proof: for every ``N >= 1`` and ``m >= 2``,
    ``|kappa_m(N)| <= B m! 2^m`` with ``B = 3.62`` (:data:`GMR_CUMULANT_BOUND`), by Cauchy's
    estimate on the disk ``|z| <= 1/2`` of an analytic branch ``phi`` of ``ln E[r^z]`` minus a
    linear term, using ``|phi| <= B`` there:

    * ``N <= 99``: ``X = ln r`` lies in ``[0, l]``, ``l = ln N``; with ``t = l/4 < pi/2``,
      ``w = E[exp(z (X - l/2))]`` has ``Re w >= e^-t cos t > 0`` and ``|w| <= e^t``, so
      ``|ln w| <= t - ln cos t + pi/2 <= 3.62``;
    * ``N >= 100``: ``E[(r/N)^z] = 1/(1+z) + c`` where ``c`` compares the Riemann sum with
      ``int_0^1 x^z dx``; cell by cell ``|c| <= N^(rho-1) (rho zeta(1+rho)/2 + 1 + 1/(1-rho))``,
      (``rho = 1/2``), so ``delta = |(1+z) c| <= 0.548`` and, as ``|ln(1+u)| <= -ln(1-|u|)``,
      ``|ln E[(r/N)^z]| <= ln 2 - ln(1 - delta) <= 1.49``.

    Hence with ``a_i = w_i / W`` the neglected tail of ``sum_i K_i(a_i)`` is at most
    ``B sum_i (2 a_i)^(M+1) / (1 - 2 a_i)``, and that of ``Upsilon`` (terms ``(2^m - 2)
    kappa_m a^m / m!``) at most ``B sum_i (4 a_i)^(M+1) / (1 - 4 a_i)``.  With
    ``Q_c = c^(M+1) T / W^(M+1)`` and ``q_c = Q_c^(1/(M+1)) >= c max_i a_i`` (tasks with
    ``N_i = 1`` have no cumulants and are left out of ``T``):

    .. math::

        \varepsilon_\Lambda = \frac{B Q_2}{1 - q_2},\qquad
        \varepsilon_\Upsilon = \frac{B Q_4}{1 - q_4}\quad(\text{inf unless } q < 1),

    ``|E_s/E - 1| <= expm1(eps_L)`` and ``Var`` lies in
    ``[e^{2(L - eps_L)} expm1(max(U - eps_U, 0)), e^{2(L + eps_L)} expm1(U + eps_U)]``.

    For ``m`` equally weighted tasks this is about ``B m (2/m)^(M+1)`` for ``E`` and
    ``B 4^(M+1) m^(1-M) / Var[ln r]`` for ``Var``: with ``M = 12`` already below 1e-15 from
    a few hundred tasks on, but useless (or ``inf``) for a handful of tasks, or when one task
    carries a large share of the weight (``a_i >= 1/4``); use the exact
    :func:`gmr_expectation` / :func:`gmr_variance` there.
    """
    orders = []
    m = 1
    while f"cumulant_{m}" in sums:
        orders.append(m)
        m += 1
    if not orders or "weight" not in sums or "tail" not in sums:
        raise ValueError(
            "sums must contain 'weight', 'tail' and 'cumulant_1' .. 'cumulant_M' "
            f"(from gmr_stream_terms); got keys {sorted(sums)}"
        )
    order = orders[-1]
    extra = sorted(
        k for k in sums if k.startswith("cumulant_") and k not in {f"cumulant_{i}" for i in orders}
    )
    if extra:
        raise ValueError(f"sums has non-contiguous cumulant keys {extra}; expected 1..{order}")
    total = float(np.asarray(sums["weight"], dtype=np.float64))
    if not total > 0:
        raise ValueError(f"sums['weight'] must be positive (no tasks seen?), got {total}")
    coefficients = [
        np.float64(float(np.asarray(sums[f"cumulant_{i}"], dtype=np.float64)) / math.factorial(i))
        for i in orders
    ]
    tail = np.float64(float(np.asarray(sums["tail"], dtype=np.float64)))
    with np.errstate(all="ignore"):
        expectation, variance, bound = gmr_moments_xp(np.float64(total), coefficients, tail, np)
    return float(expectation), float(variance), float(bound)


def gmr_moments_xp(
    total: Array, coefficients: Sequence[Array], tail: Array, xp: Any
) -> tuple[Array, Array, Array]:
    r"""The GMR reducer of :func:`gmr_moments_from_sums` as elementwise array code.

    ``total`` is ``W``, ``coefficients[m - 1]`` the Taylor coefficient ``F_m / m!`` (m = 1..M)
    and ``tail`` the summed ``"tail"`` term; returns ``(E[GMR], Var[GMR], error_bound)`` as
    arrays of ``xp`` (``numpy`` or ``keras.ops``; see :func:`gmr_moments_from_sums` for the
    formulas and the bound).  Arithmetic, ``exp``, ``expm1``, ``power``, ``maximum``,
    ``isinf`` and ``where`` only, every branch computed and chosen with ``where``, so it
    traces under ``jit`` / ``tf.function``.  No validation (numpy callers wrap it in
    ``np.errstate``: the discarded branches may overflow).

    The series are evaluated by Horner's rule in ``1/W`` (``(((c_M / W + c_{M-1}) / W + ...)
    + c_1) / W``): no power ``W^m`` or ``W^-m`` is formed, so nothing over- or underflows
    before the terms themselves do (which matters for float32 state).
    """
    order = len(coefficients)
    log_e: Any = 0.0
    upsilon: Any = 0.0
    for m in range(order, 0, -1):
        c = coefficients[m - 1]
        log_e = (log_e + c) / total
        upsilon = (upsilon + (2.0**m - 2.0) * c if m >= 2 else upsilon) / total
    upsilon = _maximum(xp, upsilon, 0.0)
    expectation = xp.exp(log_e)
    variance = xp.exp(2.0 * log_e) * xp.expm1(upsilon)

    # truncation bounds: Q_c = c^(M+1) T / W^(M+1), q_c = Q_c^(1/(M+1))
    base = tail
    for _ in range(order + 1):
        base = base / total

    def eps(c: float) -> Array:
        q_sum = c ** (order + 1) * base
        q_max = xp.power(_maximum(xp, q_sum, 0.0), 1.0 / (order + 1))
        bounded = GMR_CUMULANT_BOUND * q_sum / xp.where(q_max < 1.0, 1.0 - q_max, 1.0)
        return xp.where(base <= 0.0, 0.0, xp.where(q_max < 1.0, bounded, math.inf))

    eps_l, eps_u = eps(2.0), eps(4.0)
    rel_e = xp.expm1(eps_l)
    positive = upsilon > 0.0
    den = xp.where(positive, xp.expm1(upsilon), 1.0)
    hi = xp.expm1(2.0 * eps_l) + xp.exp(2.0 * eps_l) * (xp.expm1(upsilon + eps_u) / den - 1.0)
    lo = 1.0 - xp.exp(-2.0 * eps_l) * xp.expm1(_maximum(xp, upsilon - eps_u, 0.0)) / den
    bound = _maximum(xp, rel_e, xp.where(positive, _maximum(xp, hi, lo), math.inf))
    bound = xp.where(xp.isinf(eps_l) | xp.isinf(eps_u) | xp.isinf(variance), math.inf, bound)
    bound = xp.where((eps_l == 0.0) & (eps_u == 0.0), 0.0, bound)
    return expectation, variance, bound
