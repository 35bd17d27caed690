"""GARCH(1,1) / GJR-GARCH(1,1,1) per asset with jointly drawn, correlated innovations.

Fit: each asset's percent log return ``x_{t,i} = 100 r_{t,i}`` gets a univariate model (``arch``
package, constant mean, normal likelihood)

    x_t = μ + ε_t,   ε_t = σ_t z_t,
    σ²_t = ω + α ε²_{t−1} + γ ε²_{t−1} 1[ε_{t−1} < 0] + β σ²_{t−1}      (γ = 0 unless ``gjr``),

then the correlation matrix ``R`` of the standardized residuals ``ẑ_t = ε̂_t / σ̂_t`` across assets
(constant conditional correlation, Bollerslev 1990).  Sample: innovations ``z_t = L u_t``, ``L Lᵀ = R``,
``u_t ~ N(0, I)``, and the recursion runs forward from the last fitted state: the first synthetic
variance is the one-step forecast ``ω + (α + γ 1[ε̂_T < 0]) ε̂²_T + β σ̂²_T``.  Synthetic log returns are
``x_t / 100``.
"""

from __future__ import annotations

import numpy as np

from portfed.generators.base import Generator, GeneratorError, InvalidParameterError
from portfed.generators.covariance import cholesky_jittered
from portfed.validation import check_bool


class GARCHGenerator(Generator):
    """Constant-conditional-correlation GARCH(1,1) (or GJR with ``gjr=True``).

    Fitted attributes: ``params_`` (array ``(m, 5)``: μ, ω, α, γ, β in percent units), ``corr_`` (R),
    ``last_variance_`` and ``last_residual_`` (σ̂²_T, ε̂_T per asset).
    """

    name = "garch"
    fitted_attributes = ("params_", "corr_", "_chol", "last_variance_", "last_residual_")
    min_train_days = 50

    def __init__(self, gjr: bool = False) -> None:
        self.gjr = gjr

    def _validate_params(self) -> None:
        check_bool(self.gjr, "gjr", error=InvalidParameterError)

    def _fit(self, returns: np.ndarray) -> None:
        from arch import arch_model  # imported when a GARCH is fitted, not with every generator

        x = 100.0 * returns
        params = np.zeros((x.shape[1], 5))
        std_resid = np.empty_like(x)
        last_var = np.empty(x.shape[1])
        last_eps = np.empty(x.shape[1])
        for i in range(x.shape[1]):
            model = arch_model(
                x[:, i], mean="Constant", vol="GARCH", p=1, o=int(self.gjr), q=1, dist="normal"
            )
            res = model.fit(disp="off", show_warning=False)
            if res.convergence_flag != 0:
                raise GeneratorError(
                    f"GARCH fit of asset column {i} did not converge (flag {res.convergence_flag})"
                )
            p = res.params
            params[i] = (p["mu"], p["omega"], p["alpha[1]"], p["gamma[1]"] if self.gjr else 0.0, p["beta[1]"])
            sigma = np.asarray(res.conditional_volatility)
            eps = np.asarray(res.resid)
            std_resid[:, i] = eps / sigma
            last_var[i] = sigma[-1] ** 2
            last_eps[i] = eps[-1]
        self.params_ = params
        self.corr_ = np.corrcoef(std_resid, rowvar=False).reshape(x.shape[1], x.shape[1])
        self._chol = cholesky_jittered(self.corr_)
        self.last_variance_ = last_var
        self.last_residual_ = last_eps

    def _sample_log_returns(self, n_days: int, rng: np.random.Generator) -> np.ndarray:
        mu, omega, alpha, gamma, beta = self.params_.T
        eps, var = self.last_residual_.copy(), self.last_variance_.copy()
        out = np.empty((n_days, len(mu)))
        for t in range(n_days):
            var = omega + (alpha + gamma * (eps < 0)) * eps**2 + beta * var
            eps = np.sqrt(var) * (self._chol @ rng.standard_normal(len(mu)))
            out[t] = mu + eps
        return out / 100.0
