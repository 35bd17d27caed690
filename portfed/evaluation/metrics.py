"""Performance metrics of a portfolio-value path.

Conventions (they match ``empyrical``, so numbers are comparable with the wider ecosystem):

- ``portfolio_values`` ``P_0, P_1, …, P_n`` *includes* the initial value; the ``n`` simple period
  returns are ``X_t = P_t / P_{t−1} − 1`` (t = 1..n), ``q`` = periods per year (252 for days).
- fAPV ``= P_n / P_0`` (Jiang et al. 2017, final accumulated portfolio value).
- Annualized return (geometric, the Fed+ paper's "annualized return"): ``fAPV^{q/n} − 1``.
- Annualized volatility: ``std(X; ddof=1) · √q``.
- Risk-free rate: an annual rate ``R_f`` (default 0), per period ``r = (1 + R_f)^{1/q} − 1``
  (:func:`portfed.evaluation.relative.annual_to_period_rate`); the Sharpe and Sortino ratios reward the
  excess return ``X − r``.
- Sharpe per period (the papers' ``E[X] / sqrt(var X)``, risk-free rate 0): ``mean(X − r) / std(X; ddof=1)``;
  annualized Sharpe ``= √q · mean(X − r) / std(X; ddof=1)``.  Convention: with ``r = 0`` both are **0 for
  a constant-value path** (every return zero up to rounding, ``|X_t| <= 4ε``: e.g. an all-cash policy,
  where the ratio 0/0 is undefined — no excess return, no risk, so no reward for risk), never nan there
  (with ``r > 0`` such a path lags the risk-free rate without risk: ``−inf``); they are
  ``±inf`` for a riskless path with non-zero mean, and ``nan`` only for a single non-zero return
  (``n = 1``: no sample std).
- Sortino: ``q · mean(X − r) / (√q · sqrt(mean(min(X − r, 0)²)))`` (downside deviation over *all*
  periods, target ``r``); ``+inf`` when no period falls short, 0 on a constant-value path with ``r = 0``
  (as the Sharpe ratio).
- Maximum drawdown, a positive fraction: ``max_t (1 − P_t / max_{s≤t} P_s)`` with the initial value
  included in the running peak.
- Calmar: annualized return / maximum drawdown; ``nan`` when there is no drawdown (undefined).
- Turnover (only with ``weights``, cash first): the average traded volume of the risky assets per
  period as a fraction of the portfolio value, purchases plus sales,
  ``(1/N) Σ_t Σ_{i≥1} |w_{t,i} − w'_{t,i}|`` (cash excluded; the quantity the linear cost model charges
  ``c`` on, ``μ_t = 1 − c·turnover_t``, and the ``turnover`` that :class:`~portfed.envs.PortfolioEnv`
  reports per step).  ``w_t`` is the target portfolio of period t and ``w'_t`` the portfolio held just
  before the trade: the drifted ``holdings`` when given (every one of the ``n`` trades counts,
  ``N = n``), otherwise the previous target ``w_{t−1}`` (drift ignored, ``N = n − 1``).  Moving all
  wealth from cash into stocks is turnover 1; swapping one stock for another is 2.
- Asset spread (:func:`asset_spread`, only from weights): how much a policy tells its risky assets
  apart, ``(1/|T'|) Σ_{t ∈ T'} std_{i≥1}(w_{t,i}) / mean_{i≥1}(w_{t,i})`` (population std over the
  ``m`` risky assets; ``T'`` the periods with risky weight), 0 when every risky asset gets the same
  weight, ``√(m − 1)`` when one asset takes all the risky weight.  A policy whose spread is 0 chooses
  only its cash share: an EIIE whose per-asset scores do not depend on its inputs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from portfed.evaluation.relative import annual_to_period_rate

#: The keys of :func:`summarize`'s result (``turnover`` only when the weights are given).
SUMMARY_METRICS: tuple[str, ...] = ("fapv", "annualized_return", "annualized_volatility", "sharpe",
                                    "sharpe_per_period", "sortino", "max_drawdown", "calmar", "turnover")


def summarize(
    portfolio_values: ArrayLike,
    periods_per_year: float = 252,
    weights: ArrayLike | None = None,
    holdings: ArrayLike | None = None,
    risk_free: float = 0.0,
) -> dict[str, float]:
    """Metrics of one portfolio-value path (definitions in the module docstring).

    Args:
        portfolio_values: ``P_0 … P_n``, initial value included, all finite and positive, ``n ≥ 1``.
        periods_per_year: ``q``, e.g. 252 for trading days.
        weights: optional ``(n, m+1)`` target portfolios (cash first), row t held over period t.
        holdings: optional ``(n, m+1)`` pre-trade (drifted) portfolios ``w'_t``; needs ``weights``.
        risk_free: the annual risk-free rate ``R_f`` of the Sharpe and Sortino ratios (0.02 for 2 %).

    Returns:
        dict with ``fapv``, ``annualized_return``, ``annualized_volatility``, ``sharpe``,
        ``sharpe_per_period``, ``sortino``, ``max_drawdown``, ``calmar`` and, with ``weights``,
        ``turnover``.

    Raises:
        ValueError: fewer than 2 values, a non-finite or non-positive value, a non-positive
            ``periods_per_year``, a risk-free rate not above −1, or weights/holdings of the wrong shape.
    """
    values = _validated_values(portfolio_values)
    if not np.isfinite(periods_per_year) or periods_per_year <= 0:
        raise ValueError(f"periods_per_year must be a positive number, got {periods_per_year!r}")
    q = float(periods_per_year)
    rate = annual_to_period_rate(risk_free, q)
    returns = values[1:] / values[:-1] - 1.0
    n = returns.size

    fapv = float(values[-1] / values[0])
    annualized_return = fapv ** (q / n) - 1.0
    std = _sample_std(returns)
    mean = float(returns.mean()) - rate
    riskless = _constant(returns) and rate == 0.0  # no excess return and no risk: 0, not 0/0
    sharpe_per_period = 0.0 if riskless else _ratio(mean, 0.0 if _constant(returns) else std)
    max_dd = max_drawdown(values)
    downside = float(np.sqrt(np.mean(np.minimum(returns - rate, 0.0) ** 2)) * np.sqrt(q))
    out = {
        "fapv": fapv,
        "annualized_return": float(annualized_return),
        "annualized_volatility": std * float(np.sqrt(q)),
        "sharpe": sharpe_per_period * float(np.sqrt(q)),
        "sharpe_per_period": sharpe_per_period,
        "sortino": 0.0 if riskless else _ratio(mean * q, downside),
        "max_drawdown": max_dd,
        "calmar": float(annualized_return / max_dd) if max_dd > 0 else float("nan"),
    }
    if weights is not None:
        out["turnover"] = turnover(weights, holdings, n_periods=n)
    elif holdings is not None:
        raise ValueError("holdings were given without weights; turnover needs the target weights")
    return out


def max_drawdown(portfolio_values: ArrayLike) -> float:
    """``max_t (1 − P_t / max_{s≤t} P_s)`` as a positive fraction (0 for a never-falling path)."""
    values = _validated_values(portfolio_values)
    peaks = np.maximum.accumulate(values)
    return float(np.max(1.0 - values / peaks))


def turnover(weights: ArrayLike, holdings: ArrayLike | None = None, n_periods: int | None = None) -> float:
    """Average traded volume ``(1/N) Σ_t Σ_{i≥1} |w_{t,i} − w'_{t,i}|`` (see the module docstring).

    Args:
        weights: ``(n, m+1)`` target portfolios, cash first.
        holdings: optional ``(n, m+1)`` pre-trade portfolios; without them ``w'_t = w_{t−1}``.
        n_periods: when given, the number of rows ``weights`` must have.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] == 0 or w.shape[1] < 2:
        raise ValueError(f"weights must be a non-empty (periods, m+1 >= 2) array, got shape {w.shape}")
    if n_periods is not None and w.shape[0] != n_periods:
        raise ValueError(f"weights have {w.shape[0]} rows but there are {n_periods} periods")
    if not np.isfinite(w).all():
        raise ValueError("weights contain a non-finite entry")
    if holdings is None:
        if w.shape[0] < 2:
            raise ValueError("turnover between consecutive weights needs at least 2 rows")
        return float(np.abs(np.diff(w[:, 1:], axis=0)).sum(axis=1).mean())
    h = np.asarray(holdings, dtype=np.float64)
    if h.shape != w.shape:
        raise ValueError(f"holdings shape {h.shape} differs from weights shape {w.shape}")
    if not np.isfinite(h).all():
        raise ValueError("holdings contain a non-finite entry")
    return float(np.abs(w[:, 1:] - h[:, 1:]).sum(axis=1).mean())


def asset_spread(weights: ArrayLike) -> float:
    """The mean coefficient of variation of the risky weights (see the module docstring).

    Args:
        weights: ``(n, m+1)`` portfolios, cash first.

    Returns:
        The spread, or ``nan`` when there is nothing to tell apart: a single risky asset (``m = 1``), or
        no period holding any risky weight (all in cash).

    Raises:
        ValueError: a wrong shape, or a non-finite or negative weight.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] == 0 or w.shape[1] < 2:
        raise ValueError(f"weights must be a non-empty (periods, m+1 >= 2) array, got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("weights must be finite and non-negative")
    risky = w[:, 1:]
    mean = risky.mean(axis=1)
    held = mean > 0
    if risky.shape[1] < 2 or not held.any():
        return float("nan")
    return float((risky[held].std(axis=1) / mean[held]).mean())


def _validated_values(portfolio_values: ArrayLike) -> np.ndarray:
    values = np.asarray(portfolio_values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"portfolio_values must be one-dimensional, got shape {values.shape}")
    if values.size < 2:
        raise ValueError(f"need at least 2 portfolio values (initial + one period), got {values.size}")
    bad = np.flatnonzero(~np.isfinite(values) | (values <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"portfolio value {float(values[i])!r} at position {i} is not finite and positive")
    return values


def _sample_std(returns: np.ndarray) -> float:
    """``std(ddof=1)``, exactly 0 for a constant series (no 1e-18 residue from the mean), nan if n = 1."""
    if returns.size < 2:
        return float("nan")
    if returns.max() == returns.min():
        return 0.0
    return float(returns.std(ddof=1))


def _constant(returns: np.ndarray) -> bool:
    """Every return is zero up to the rounding of ``P_t / P_{t−1} − 1`` (a few ulps): a constant-value path."""
    return bool(np.all(np.abs(returns) <= 4 * np.finfo(np.float64).eps))


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` with ``±inf`` for a zero denominator and ``nan`` for 0/0 or nan."""
    if np.isnan(denominator) or np.isnan(numerator):
        return float("nan")
    if denominator == 0.0:
        return float("nan") if numerator == 0.0 else float(np.sign(numerator) * np.inf)
    return numerator / denominator
