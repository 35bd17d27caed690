"""Variable-order Markov (VOM) augmenter (paper 001 §9.3) with regime × sign symbols.

**Alphabet.**  Each training day ``t`` is mapped to one of ``2R`` symbols from the equal-weight market
log return ``m_t = (1/m) Σ_i r_{t,i}`` and its EWMA (RiskMetrics) variance, which includes day ``t``:

    σ²_t = λ σ²_{t−1} + (1 − λ) m_t²,   σ²_{−1} = mean(m²),
    regime_t = #{q_j ≤ σ_t}  with q_1 < … < q_{R−1} the training quantiles of σ_t at j/R,
    s_t = 2 · regime_t + 1[m_t > 0].

The default (``R = 3``, λ = 0.94) gives 6 symbols: {calm, normal, turbulent} × {down, up}.  Regimes
defined from a persistent volatility estimate make the symbol sequence carry volatility clustering;
symbols from plain return quantiles barely do (DESIGN.md §4).

**Symbol model.**  A :class:`~portfed.generators.markov.VariableOrderMarkov` chain of maximum order D
(PPM-style counts, escape to the longest context with support ≥ ``min_count``).

**Returns.**  Paper 001 §9.3 lets ``ln p_t | h ~ N(μ, Σ)`` (multivariate log-normal price relatives).
Here the Gaussian is conditioned on the day's symbol *and* its context: for every context ``c``
(length 0 … D) and symbol ``s``, the days ``t`` with ``s_t = s`` preceded by ``c`` give a mean ``μ_{c,s}``
and a covariance ``Σ_{c,s}`` shrunk toward its diagonal (Schäfer–Strimmer intensity, or a fixed
``shrinkage``).  Pairs with fewer than ``min_support`` days are dropped; the context-free pair
``((), s)`` must have that support for every symbol, else :meth:`fit` raises.

**Generation (joint).**  Starting from the last D training symbols (so the synthetic path continues
the real regime as it continues the real close), for each day: draw ``s ~ P(· | history)`` from the
chain, then ``r ~ N(μ_{c,s}, Σ_{c,s})`` with ``c`` the longest suffix of the history for which ``(c, s)``
was kept, append ``s`` to the history.  The persistence of the volatility regimes in the chain makes
large returns follow large returns: volatility clustering emerges from the symbol dynamics.
"""

from __future__ import annotations

import numpy as np

from portfed.generators.base import Generator, GeneratorError, InvalidParameterError
from portfed.generators.covariance import cholesky_jittered, shrink_to_diagonal
from portfed.generators.markov import Context, VariableOrderMarkov, pack_contexts, unpack_contexts
from portfed.validation import check_fraction, check_int, check_number


def market_symbols(
    returns: np.ndarray, n_regimes: int, ewma_lambda: float, thresholds: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Regime × sign symbols of the log returns ``(T, m)``; returns ``(symbols, thresholds)``.

    ``thresholds`` (the ``R − 1`` volatility quantiles) are estimated from ``returns`` when ``None``.
    """
    market = returns.mean(axis=1)
    var = np.empty_like(market)
    prev = float(np.mean(market**2))
    for t, m_t in enumerate(market):
        prev = ewma_lambda * prev + (1.0 - ewma_lambda) * m_t**2
        var[t] = prev
    vol = np.sqrt(var)
    if thresholds is None:
        thresholds = np.quantile(vol, np.arange(1, n_regimes) / n_regimes)
    regime = np.searchsorted(thresholds, vol, side="right")
    return 2 * regime + (market > 0).astype(np.int64), thresholds


class VOMGenerator(Generator):
    """Variable-order Markov chain over regime × sign symbols, log-normal returns per context.

    Args:
        max_order: maximum context length D of the chain and of the return conditioning.
        n_regimes: number R of volatility regimes (alphabet size 2R).
        ewma_lambda: EWMA decay λ of the market variance.
        min_count: support a context needs to predict the next symbol.
        min_support: days a (context, symbol) pair needs to get its own return Gaussian.
        shrinkage: fixed shrinkage of correlations toward zero in [0, 1]; ``None`` = Schäfer–Strimmer.

    Fitted attributes: ``chain_`` (the :class:`VariableOrderMarkov`), ``symbols_`` (training
    symbols), ``thresholds_`` (volatility quantiles), ``emissions_`` (``{(context, symbol): (μ, Σ)}``),
    and the property :attr:`transition_probabilities_`.
    """

    name = "vom"
    min_train_days = 30
    fitted_attributes = ("symbols_", "thresholds_", "chain_", "emissions_", "_chols")

    def __init__(
        self,
        max_order: int = 3,
        n_regimes: int = 3,
        ewma_lambda: float = 0.94,
        min_count: int = 20,
        min_support: int = 30,
        shrinkage: float | None = None,
    ) -> None:
        self.max_order = max_order
        self.n_regimes = n_regimes
        self.ewma_lambda = ewma_lambda
        self.min_count = min_count
        self.min_support = min_support
        self.shrinkage = shrinkage

    def _validate_params(self) -> None:
        error = InvalidParameterError
        check_int(self.max_order, "max_order", minimum=0, error=error)
        check_int(self.n_regimes, "n_regimes", minimum=1, error=error)
        lam = check_number(self.ewma_lambda, "ewma_lambda", minimum=0.0, strict_min=True, maximum=1.0,
                           error=error)
        if lam == 1.0:
            raise error(f"ewma_lambda must be < 1 (λ = 1 never updates the variance), got {lam!r}")
        check_int(self.min_count, "min_count", minimum=1, error=error)
        check_int(self.min_support, "min_support (a covariance needs 2 days)", minimum=2, error=error)
        if self.shrinkage is not None:
            check_fraction(self.shrinkage, "shrinkage", error=error)

    @property
    def n_symbols(self) -> int:
        """Alphabet size ``2R`` (regime × sign)."""
        return 2 * self.n_regimes

    @property
    def transition_probabilities_(self) -> dict[Context, np.ndarray]:
        """``{context: P(next symbol | context)}`` of the fitted chain (contexts with enough support)."""
        self._check_fitted("transition_probabilities_")
        return self.chain_.transition_probabilities()

    def _fit(self, returns: np.ndarray) -> None:
        symbols, self.thresholds_ = market_symbols(returns, self.n_regimes, self.ewma_lambda)
        self.symbols_ = symbols
        self.chain_ = VariableOrderMarkov(self.n_symbols, self.max_order, self.min_count).fit(symbols)
        days: dict[tuple[Context, int], list[int]] = {}
        for t in range(symbols.size):
            for k in range(min(self.max_order, t) + 1):
                key = (tuple(int(s) for s in symbols[t - k : t]), int(symbols[t]))
                days.setdefault(key, []).append(t)
        for s in np.unique(symbols):
            n_days = len(days[((), int(s))])
            if n_days < self.min_support:
                raise GeneratorError(
                    f"symbol {int(s)} (regime {int(s) // 2}, {'up' if s % 2 else 'down'}) occurs on {n_days} "
                    f"training days < min_support={self.min_support}: use fewer regimes, a smaller "
                    "min_support or more training data"
                )
        emissions: dict[tuple[Context, int], tuple[np.ndarray, np.ndarray]] = {}
        chols: dict[tuple[Context, int], np.ndarray] = {}
        for key, idx in days.items():
            if len(idx) < self.min_support:
                continue
            x = returns[idx]
            cov, _ = shrink_to_diagonal(x, self.shrinkage)
            emissions[key] = (x.mean(axis=0), cov)
            chols[key] = cholesky_jittered(cov)
        self.emissions_ = emissions
        self._chols = chols

    def _export_state(self) -> dict[str, np.ndarray]:
        """The chain's counts and the emissions as arrays, contexts packed (:func:`pack_contexts`)."""
        counts, keys, m = self.chain_.counts_, list(self.emissions_), len(self.tickers_)
        chain_lengths, chain_contexts = pack_contexts(list(counts))
        lengths, contexts = pack_contexts([c for c, _ in keys])
        return {
            "symbols_": self.symbols_,
            "thresholds_": self.thresholds_,
            "chain_context_lengths": chain_lengths,
            "chain_contexts": chain_contexts,
            "chain_counts": np.array(list(counts.values()), dtype=np.int64).reshape(len(counts), self.n_symbols),
            "emission_context_lengths": lengths,
            "emission_contexts": contexts,
            "emission_symbols": np.array([s for _, s in keys], dtype=np.int64),
            "emission_means": np.array([self.emissions_[k][0] for k in keys]).reshape(len(keys), m),
            "emission_covs": np.array([self.emissions_[k][1] for k in keys]).reshape(len(keys), m, m),
            "emission_chols": np.array([self._chols[k] for k in keys]).reshape(len(keys), m, m),
        }

    def _import_state(self, state: dict[str, np.ndarray]) -> None:
        self.symbols_ = state.pop("symbols_")
        self.thresholds_ = state.pop("thresholds_")
        contexts = unpack_contexts(state.pop("chain_context_lengths"), state.pop("chain_contexts"))
        counts = state.pop("chain_counts")
        emitting = unpack_contexts(state.pop("emission_context_lengths"), state.pop("emission_contexts"))
        symbols = [int(s) for s in state.pop("emission_symbols")]
        means, covs, chols = state.pop("emission_means"), state.pop("emission_covs"), state.pop("emission_chols")
        if len(counts) != len(contexts) or not len(emitting) == len(symbols) == len(means) == len(covs) == len(chols):
            raise GeneratorError("VOM fitted state: contexts, counts and emissions of different lengths")
        keys = list(zip(emitting, symbols, strict=True))
        chain = VariableOrderMarkov(self.n_symbols, self.max_order, self.min_count)
        chain.counts_ = {c: row.copy() for c, row in zip(contexts, counts, strict=True)}
        self.chain_ = chain
        self.emissions_ = {k: (means[i].copy(), covs[i].copy()) for i, k in enumerate(keys)}
        self._chols = {k: chols[i].copy() for i, k in enumerate(keys)}

    def _emission_key(self, history: list[int], symbol: int) -> tuple[Context, int]:
        hist = tuple(history[len(history) - min(self.max_order, len(history)) :])
        for k in range(len(hist), -1, -1):
            key = (hist[len(hist) - k :], symbol)
            if key in self.emissions_:
                return key
        raise GeneratorError(f"symbol {symbol} has no return distribution (never seen in training)")

    def _sample_log_returns(self, n_days: int, rng: np.random.Generator) -> np.ndarray:
        history = (
            [int(s) for s in self.symbols_[len(self.symbols_) - self.max_order :]] if self.max_order else []
        )
        m = len(self.tickers_)
        out = np.empty((n_days, m))
        for t in range(n_days):
            s = int(rng.choice(self.n_symbols, p=self.chain_.predict_proba(history)))
            key = self._emission_key(history, s)
            mean, _ = self.emissions_[key]
            out[t] = mean + self._chols[key] @ rng.standard_normal(m)
            history.append(s)
        return out
