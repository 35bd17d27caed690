"""Online stochastic batch learning sampler (Jiang, Xu & Liang 2017, §5.3; DESIGN.md §3).

A batch is ``B`` consecutive decision days.  With ``N`` decision days there are ``K = N − B + 1``
admissible starts ``0 … N − B``; the start is ``s = N − B + 1 − k`` with ``k`` drawn from the
geometric law ``P(k) = β (1 − β)^{k−1}``, ``k ≥ 1``, truncated to ``1 … K``:

    P(k | k ≤ K) = β (1 − β)^{k−1} / (1 − (1 − β)^K),
    E[k | k ≤ K] = 1/β − K (1 − β)^K / (1 − (1 − β)^K).

So ``k = 1`` is the most recent batch (ending on the last decision day) and recent data are
favoured.  PGPortfolio redraws ``k`` until it is admissible (the same truncated law) but computes
``s = (N − B) − k``, which can never pick the most recent batch; here ``k = 1`` maps to it.
``k`` is drawn exactly by inverting the truncated CDF ``F(k) = (1 − q^k)/(1 − q^K)``, ``q = 1 − β``:
``k = ⌈ln(1 − u (1 − q^K)) / ln q⌉`` with ``u ∈ (0, 1]``, one uniform per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def truncated_geometric_starts(uniforms: np.ndarray, n_days: int | np.ndarray, batch_size: int,
                               beta: float) -> np.ndarray:
    """Batch starts ``K − k`` from uniforms ``u ∈ (0, 1]`` by the inverse CDF of the module docstring.

    ``n_days`` broadcasts against ``uniforms`` (one party's count, or ``(P, 1)`` for P parties'
    rows of draws); ``K = n_days − batch_size + 1`` admissible starts.
    """
    n_starts = np.asarray(n_days, dtype=np.int64) - batch_size + 1
    if np.any(n_starts < 1):
        raise ValueError(f"{np.min(n_days)} decision days cannot hold a batch of {batch_size} consecutive days")
    log_q = np.log1p(-beta)
    mass = -np.expm1(n_starts * log_q)  # 1 − q^K
    k = np.ceil(np.log1p(-uniforms * mass) / log_q).astype(np.int64)
    return n_starts - np.clip(k, 1, n_starts)  # the clip guards rounding at the two ends of the CDF


class GeometricBatchSampler:
    """Seeded sampler of consecutive-day batches, recent ones favoured."""

    def __init__(self, batch_size: int, beta: float, seed: int | np.random.SeedSequence) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 < beta < 1:
            raise ValueError(f"beta must lie in (0, 1), got {beta}")
        self.batch_size = batch_size
        self.beta = beta
        self._rng = np.random.default_rng(seed)

    def sample_start(self, n_days: int) -> int:
        """First day offset of a batch among ``n_days`` decision days."""
        return int(self.sample_starts(n_days, 1)[0])

    def sample_starts(self, n_days: int | np.ndarray, count: int) -> np.ndarray:
        """``count`` batch starts drawn at once: the same numbers as ``count`` calls of :meth:`sample_start`
        (``Generator.random(count)`` yields the numbers of ``count`` calls of ``random()``)."""
        return truncated_geometric_starts(1.0 - self._rng.random(count), n_days, self.batch_size, self.beta)

    def sample(self, n_days: int) -> np.ndarray:
        """Offsets ``s, s + 1, …, s + B − 1`` of one batch (int64)."""
        return self.sample_start(n_days) + np.arange(self.batch_size, dtype=np.int64)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state["rng"]
