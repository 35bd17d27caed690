"""What a local-training call returns: the new parameters and one record per gradient step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepRecord:
    """One gradient step: ``step`` counts the party's steps including this one (1-based); ``cash`` is the
    mean cash weight of the portfolios the policy chose on the step's batch (the greedy ``μ_θ(s_t)``,
    before any exploration)."""

    step: int
    mean_log_return: float
    loss: float
    grad_norm: float
    cash: float


@dataclass(frozen=True)
class LocalTrainResult:
    """A party's flat parameters after a local-training call, and its steps' records."""

    params: np.ndarray
    records: list[StepRecord]
