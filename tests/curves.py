"""Learning curves and aggregation jumps with known shapes, shared by the collapse-criterion tests."""

from __future__ import annotations

import numpy as np

ROUNDS = 40


def rising(noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """A learning curve rising from 0 to 1 (saturating), with optional noise."""
    t = np.arange(ROUNDS)
    return 1 - np.exp(-t / 8) + noise * np.random.default_rng(seed).standard_normal(ROUNDS)


def steady_jumps(seed: int = 1) -> np.ndarray:
    """Parameter jumps at aggregation of about 0.01 with no spike."""
    return 0.01 * (1 + 0.2 * np.random.default_rng(seed).random(ROUNDS))
