"""Geometric Brownian motion (paper 001 §9.3), correlated across assets by default.

Model (time in trading days, ``Δt = 1``): ``dv_i = μ_i v_i dt + σ_i v_i dW_i`` with
``d⟨W_i, W_j⟩ = ρ_ij dt``, whose solution is the paper's

    v_{i,t} = v_{i,0} · exp((μ_i − σ_i²/2) t + σ_i W_{i,t}).

Daily log returns are therefore i.i.d. ``N(μ − σ²/2, Σ)`` with ``Σ_ij = ρ_ij σ_i σ_j``.  Fit: the sample
mean ``r̄`` and covariance ``Σ̂`` of the training log returns, ``σ_i² = Σ̂_ii``, ``μ_i = r̄_i + σ_i²/2``
(maximum likelihood up to the ``ddof``).  Sample: ``r_t = (μ − σ²/2) + L z_t``, ``L Lᵀ = Σ̂`` (Cholesky
with a tiny ridge if ``Σ̂`` is not positive definite), ``z_t ~ N(0, I)``.  ``independent=True`` uses
``Σ = diag(σ²)`` — the per-asset version of the paper.
"""

from __future__ import annotations

import numpy as np

from portfed.generators.base import Generator, InvalidParameterError
from portfed.generators.covariance import cholesky_jittered
from portfed.validation import check_bool


class GBMGenerator(Generator):
    """Multivariate GBM with drift and covariance from the training log returns.

    Args:
        independent: ignore cross-asset correlation (paper 001's per-asset GBM).

    Fitted attributes: ``mu_`` (daily drift μ), ``sigma_`` (daily volatility σ), ``corr_`` (ρ),
    ``cov_`` (Σ used for sampling).
    """

    name = "gbm"
    fitted_attributes = ("mu_", "sigma_", "corr_", "cov_", "_chol")

    def __init__(self, independent: bool = False) -> None:
        self.independent = independent

    def _validate_params(self) -> None:
        check_bool(self.independent, "independent", error=InvalidParameterError)

    def _fit(self, returns: np.ndarray) -> None:
        m = returns.shape[1]
        cov = np.cov(returns, rowvar=False, ddof=1).reshape(m, m)
        sigma = np.sqrt(np.diag(cov))
        self.sigma_ = sigma
        self.mu_ = returns.mean(axis=0) + sigma**2 / 2.0
        self.corr_ = cov / np.outer(sigma, sigma)
        self.cov_ = np.diag(sigma**2) if self.independent else cov
        self._chol = cholesky_jittered(self.cov_)

    def _sample_log_returns(self, n_days: int, rng: np.random.Generator) -> np.ndarray:
        z = rng.standard_normal((n_days, len(self.mu_)))
        return (self.mu_ - self.sigma_**2 / 2.0) + z @ self._chol.T
