"""Stationary block bootstrap of the multi-asset log returns (Politis & Romano 1994).

A synthetic path is a concatenation of blocks of consecutive training days (whole return *vectors*,
so the cross-asset dependence of each day is kept).  Day 1 is a uniformly drawn index ``I_1``; for
``k ≥ 1``, with probability ``p = 1 / mean_block_length`` a new block starts at a fresh uniform index,
otherwise ``I_{k+1} = I_k + 1`` (circularly, index ``T`` wraps to 0).  Block lengths are thus
Geometric(p) with mean ``mean_block_length`` and the resampled series is strictly stationary.
Dependence within blocks (volatility clustering up to about the block length) is kept.
"""

from __future__ import annotations

import numpy as np

from portfed.generators.base import Generator, InvalidParameterError
from portfed.validation import check_number


class StationaryBootstrapGenerator(Generator):
    """Politis–Romano stationary bootstrap with mean block length ``mean_block_length`` days."""

    name = "bootstrap"
    fitted_attributes = ("returns_",)

    def __init__(self, mean_block_length: float = 20.0) -> None:
        self.mean_block_length = mean_block_length

    def _validate_params(self) -> None:
        check_number(self.mean_block_length, "mean_block_length", minimum=1.0, error=InvalidParameterError)

    def _fit(self, returns: np.ndarray) -> None:
        self.returns_ = returns.copy()

    def _sample_log_returns(self, n_days: int, rng: np.random.Generator) -> np.ndarray:
        T = self.returns_.shape[0]
        restart = rng.random(n_days) < 1.0 / self.mean_block_length
        restart[0] = True
        fresh = rng.integers(0, T, size=n_days)
        idx = np.empty(n_days, dtype=np.int64)
        for k in range(n_days):
            idx[k] = fresh[k] if restart[k] else (idx[k - 1] + 1) % T
        return self.returns_[idx]
