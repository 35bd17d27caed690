"""Stylized facts of daily log returns, for real and synthetic data on windows of equal length.

Every statistic is computed per window and per asset, then averaged over assets and windows, so a
synthetic year is compared with real years of the same length (kurtosis and autocorrelation
estimates depend on the sample length).  With ``r_t`` a window's log returns of one asset, ``n`` days:

- excess kurtosis ``n Σ(r − r̄)⁴ / (Σ(r − r̄)²)² − 3`` and skewness ``√n Σ(r − r̄)³ / (Σ(r − r̄)²)^{3/2}``
  (the biased moment estimators, ``scipy.stats.kurtosis`` / ``skew`` defaults);
- ACF of returns, lags 1–10 (no linear autocorrelation): ``ρ(k) = Σ_{t<n−k} (r_t − r̄)(r_{t+k} − r̄) /
  Σ_t (r_t − r̄)²`` (``statsmodels.tsa.stattools.acf``);
- ACF of ``|r_t|``, lags 1–50 (volatility clustering), same estimator;
- leverage ``L(τ) = corr(r_t, r²_{t+τ})``, τ = 1–10 (Pearson over the ``n − τ`` pairs; negative for
  equities: falls raise later volatility);
- correlation error ``‖C_w − C_ref‖_F / √(m(m − 1))``: the root-mean-square difference between the
  window's cross-asset correlations and the reference (real training) correlations (NaN for m = 1);
- Wasserstein-1 (``scipy.stats.wasserstein_distance``) and Kolmogorov–Smirnov statistic
  (``scipy.stats.ks_2samp``) between the window's returns and the reference returns of the same asset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from portfed.generators.base import GeneratorError
from portfed.validation import check_int

ACF_LAGS = 10
ABS_ACF_LAGS = 50
LEVERAGE_LAGS = 10


def split_windows(returns: np.ndarray, length: int) -> list[np.ndarray]:
    """Consecutive non-overlapping windows of ``length`` days of ``returns`` ``(T, m)`` (tail dropped)."""
    returns = _as_matrix(returns)
    length = check_int(length, "window length", minimum=2, error=GeneratorError)
    n = returns.shape[0] // length
    if n == 0:
        raise GeneratorError(f"{returns.shape[0]} days of returns are fewer than one window of {length}")
    return [returns[k * length : (k + 1) * length] for k in range(n)]


def excess_kurtosis(returns: np.ndarray) -> np.ndarray:
    """Per-column excess kurtosis (biased moment estimator)."""
    from scipy import stats  # imported on use: a party's ClientApp imports the generators, never this

    return stats.kurtosis(_as_matrix(returns), axis=0, fisher=True, bias=True)


def skewness(returns: np.ndarray) -> np.ndarray:
    """Per-column skewness (biased moment estimator)."""
    from scipy import stats

    return stats.skew(_as_matrix(returns), axis=0, bias=True)


def autocorrelation(returns: np.ndarray, nlags: int) -> np.ndarray:
    """Per-column sample ACF at lags ``1 … nlags``, shape ``(nlags, m)``."""
    x = _as_matrix(returns)
    if x.shape[0] <= nlags:
        raise GeneratorError(f"ACF up to lag {nlags} needs more than {nlags} days, got {x.shape[0]}")
    from statsmodels.tsa.stattools import acf

    return np.stack([acf(x[:, i], nlags=nlags, fft=True)[1:] for i in range(x.shape[1])], axis=1)


def leverage_correlation(returns: np.ndarray, nlags: int) -> np.ndarray:
    """``corr(r_t, r²_{t+τ})`` for τ = 1 … nlags per column, shape ``(nlags, m)``."""
    x = _as_matrix(returns)
    if x.shape[0] <= nlags + 1:
        raise GeneratorError(f"leverage up to lag {nlags} needs more than {nlags + 1} days, got {x.shape[0]}")
    out = np.empty((nlags, x.shape[1]))
    for tau in range(1, nlags + 1):
        a, b = x[:-tau], x[tau:] ** 2
        a, b = a - a.mean(axis=0), b - b.mean(axis=0)
        out[tau - 1] = (a * b).sum(axis=0) / np.sqrt((a**2).sum(axis=0) * (b**2).sum(axis=0))
    return out


def correlation_error(reference_corr: np.ndarray, corr: np.ndarray) -> float:
    """``‖C_ref − C‖_F / √(m(m − 1))``: RMS error of the off-diagonal correlations (NaN for m = 1)."""
    m = reference_corr.shape[0]
    if corr.shape != reference_corr.shape:
        raise GeneratorError(f"correlation shapes differ: {reference_corr.shape} vs {corr.shape}")
    if m == 1:
        return float("nan")
    return float(np.linalg.norm(reference_corr - corr) / np.sqrt(m * (m - 1)))


@dataclass(frozen=True)
class StylizedFacts:
    """Window-averaged stylized facts (see the module docstring)."""

    excess_kurtosis: float
    skewness: float
    acf_returns: np.ndarray  # lags 1..10
    acf_abs_returns: np.ndarray  # lags 1..50
    leverage: np.ndarray  # τ = 1..10
    correlation_error: float
    wasserstein: float
    ks: float

    def summary(self) -> dict[str, float]:
        """Scalar columns of the report table."""
        return {
            "excess_kurtosis": self.excess_kurtosis,
            "skewness": self.skewness,
            "acf_r_lag1": float(self.acf_returns[0]),
            "acf_r_mean_abs_1_10": float(np.mean(np.abs(self.acf_returns))),
            "acf_abs_r_lag1": float(self.acf_abs_returns[0]),
            "acf_abs_r_mean_1_10": float(np.mean(self.acf_abs_returns[:10])),
            "acf_abs_r_mean_11_50": float(np.mean(self.acf_abs_returns[10:])),
            "leverage_mean_1_10": float(np.mean(self.leverage)),
            "corr_error": self.correlation_error,
            "wasserstein1": self.wasserstein,
            "ks": self.ks,
        }


def stylized_facts(windows: Sequence[np.ndarray], reference: np.ndarray) -> StylizedFacts:
    """Stylized facts of ``windows`` (each ``(n, m)`` log returns), averaged over windows and assets.

    ``reference`` ``(N, m)``: the real log returns the correlation error, Wasserstein-1 and KS distances
    are measured against.
    """
    from scipy import stats

    reference = _as_matrix(reference)
    if not windows:
        raise GeneratorError("stylized_facts needs at least one window")
    ref_corr = np.corrcoef(reference, rowvar=False).reshape(reference.shape[1], reference.shape[1])
    per: dict[str, list] = {k: [] for k in ("kurt", "skew", "acf", "abs", "lev", "corr", "w1", "ks")}
    for w in windows:
        w = _as_matrix(w)
        if w.shape[1] != reference.shape[1]:
            raise GeneratorError(f"window has {w.shape[1]} assets, reference has {reference.shape[1]}")
        per["kurt"].append(excess_kurtosis(w).mean())
        per["skew"].append(skewness(w).mean())
        per["acf"].append(autocorrelation(w, ACF_LAGS).mean(axis=1))
        per["abs"].append(autocorrelation(np.abs(w), ABS_ACF_LAGS).mean(axis=1))
        per["lev"].append(leverage_correlation(w, LEVERAGE_LAGS).mean(axis=1))
        per["corr"].append(correlation_error(ref_corr, np.corrcoef(w, rowvar=False).reshape(ref_corr.shape)))
        per["w1"].append(
            np.mean([stats.wasserstein_distance(w[:, i], reference[:, i]) for i in range(w.shape[1])])
        )
        per["ks"].append(
            np.mean([stats.ks_2samp(w[:, i], reference[:, i]).statistic for i in range(w.shape[1])])
        )
    return StylizedFacts(
        excess_kurtosis=float(np.mean(per["kurt"])),
        skewness=float(np.mean(per["skew"])),
        acf_returns=np.mean(per["acf"], axis=0),
        acf_abs_returns=np.mean(per["abs"], axis=0),
        leverage=np.mean(per["lev"], axis=0),
        correlation_error=float(np.mean(per["corr"])),
        wasserstein=float(np.mean(per["w1"])),
        ks=float(np.mean(per["ks"])),
    )


def _as_matrix(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise GeneratorError(f"returns must be 1-D or 2-D (days × assets), got ndim={x.ndim}")
    if not np.all(np.isfinite(x)):
        raise GeneratorError("returns contain non-finite values")
    return x
