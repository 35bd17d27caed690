"""Benchmark-relative metrics of a portfolio-value path: tracking error, information ratio, α/β, capture.

Computed by ``empyrical`` (the maintained ``empyrical-reloaded`` package: the statistics pyfolio and
zipline report), so that a desk's numbers are the numbers its other tools print.  This module turns value
paths into returns, checks them, converts the annual risk-free rate, and fixes the degenerate cases
empyrical leaves as ``inf`` or an arbitrary number.  The conventions: the strategy's and the benchmark's
value paths ``P_0 … P_n`` and ``B_0 … B_n`` cover the same days; their simple returns
``X_t = P_t / P_{t−1} − 1`` and ``Y_t = B_t / B_{t−1} − 1`` (t = 1..n); ``q`` periods per year (252 for
days); the risk-free rate is given as an annual rate ``R_f`` and compounds to the per-period
``r = (1 + R_f)^{1/q} − 1``.

- Active return ``A_t = X_t − Y_t``.
- Tracking error (annualized, a fraction): ``√q · std(A; ddof=1)`` (``empyrical.annual_volatility``).
- Information ratio (annualized): ``√q · mean(A) / std(A; ddof=1)`` (``√q · empyrical.excess_sharpe``);
  ``nan`` when the tracking error is 0 (the strategy is the benchmark: no active risk, nothing to reward).
- Beta: ``cov(X − r, Y − r) / var(Y − r)`` (population moments; ``nan`` when the benchmark does not move,
  ``var(Y) < 1e-30``); alpha (Jensen's, annualized geometrically, a fraction):
  ``(1 + mean((X − r) − β (Y − r)))^q − 1`` (both ``empyrical.alpha_beta``).
- Up capture: ``R(X_U) / R(Y_U)`` over the days ``U`` on which the benchmark rose (``Y_t > 0``), with
  ``R(Z) = Π(1 + Z)^{q/|Z|} − 1`` the annualized compound return (``empyrical.annual_return``; the ratio
  is ``empyrical.up_capture``'s); down capture the same over the days the benchmark fell (``Y_t < 0``); ``nan`` when there
  is no such day, when the benchmark's ``R`` is 0, or when extrapolating a few days to a year overflows.
  An up capture of 1.1 gains 110 % of the benchmark's rise; a down capture of 0.8 loses 80 % of its falls.

:func:`annual_to_period_rate` is the conversion of ``R_f`` that :func:`portfed.evaluation.summarize` uses
for its excess-return Sharpe and Sortino ratios too.
"""

from __future__ import annotations

import empyrical
import numpy as np
from numpy.typing import ArrayLike

#: The keys of :func:`relative_metrics`'s result, in table order.
RELATIVE_METRICS: tuple[str, ...] = ("tracking_error", "information_ratio", "alpha", "beta", "up_capture",
                                     "down_capture")

def annual_to_period_rate(annual: float, periods_per_year: float) -> float:
    """``(1 + annual)^{1/q} − 1``: the per-period rate that compounds to ``annual`` over a year.

    Raises:
        ValueError: ``annual`` is not a finite number above −1, or ``periods_per_year`` is not positive.
    """
    if not np.isfinite(annual) or annual <= -1:
        raise ValueError(f"an annual rate must be a finite number above -1, got {annual!r}")
    if not np.isfinite(periods_per_year) or periods_per_year <= 0:
        raise ValueError(f"periods_per_year must be a positive number, got {periods_per_year!r}")
    return float((1.0 + annual) ** (1.0 / periods_per_year) - 1.0)


def relative_metrics(portfolio_values: ArrayLike, benchmark_values: ArrayLike, periods_per_year: float = 252,
                     risk_free: float = 0.0) -> dict[str, float]:
    """The module docstring's metrics of one value path against a benchmark's over the same days.

    Args:
        portfolio_values: ``P_0 … P_n``, finite and positive, ``n ≥ 2``.
        benchmark_values: ``B_0 … B_n`` on the same days.
        periods_per_year: ``q``.
        risk_free: the annual risk-free rate ``R_f`` (a fraction: 0.02 for 2 %).

    Raises:
        ValueError: paths of different lengths, fewer than 3 values, a non-finite or non-positive value.
    """
    strategy, benchmark = _returns(portfolio_values, "portfolio"), _returns(benchmark_values, "benchmark")
    if strategy.size != benchmark.size:
        raise ValueError(f"the portfolio has {strategy.size + 1} values and the benchmark {benchmark.size + 1}: "
                         "they must cover the same days")
    if strategy.size < 2:
        raise ValueError("benchmark-relative metrics need at least 2 returns (3 values)")
    q = float(periods_per_year)
    r = annual_to_period_rate(risk_free, q)
    active = strategy - benchmark
    tracking = float(empyrical.annual_volatility(active, annualization=q)) if active.max() != active.min() else 0.0
    alpha, beta = (float(v) for v in empyrical.alpha_beta(strategy, benchmark, risk_free=r, annualization=q))
    return {
        "tracking_error": tracking,
        "information_ratio": float(np.sqrt(q) * empyrical.excess_sharpe(strategy, benchmark)) if tracking > 0
        else float("nan"),
        "alpha": alpha,
        "beta": beta,
        "up_capture": _capture(strategy, benchmark, benchmark > 0, q),
        "down_capture": _capture(strategy, benchmark, benchmark < 0, q),
    }


def _returns(values: ArrayLike, what: str) -> np.ndarray:
    path = np.asarray(values, dtype=np.float64)
    if path.ndim != 1 or path.size < 2:
        raise ValueError(f"the {what} values must be a 1-D path of at least 2 values, got shape {path.shape}")
    bad = np.flatnonzero(~np.isfinite(path) | (path <= 0))
    if bad.size:
        raise ValueError(f"{what} value {float(path[bad[0]])!r} at position {int(bad[0])} is not finite and positive")
    return path[1:] / path[:-1] - 1.0


def _capture(strategy: np.ndarray, benchmark: np.ndarray, days: np.ndarray, q: float) -> float:
    """``R(X_U) / R(Y_U)`` over ``days`` by ``empyrical.annual_return`` (what ``empyrical.capture`` divides, at
    any ``q``: ``capture`` itself knows only the named periods); ``nan`` without such days, for a benchmark
    whose ``R`` is 0, or when the extrapolation of a few days to a year overflows."""
    if not days.any():
        return float("nan")
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        gained = float(empyrical.annual_return(strategy[days], annualization=q))
        moved = float(empyrical.annual_return(benchmark[days], annualization=q))
        ratio = gained / moved if moved != 0 else float("nan")
    return ratio if np.isfinite(ratio) else float("nan")
