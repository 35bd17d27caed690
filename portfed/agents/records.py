"""What a local-training call returns: the new parameters and one record per gradient step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepRecord:
    """One gradient step: ``step`` counts the party's steps including this one (1-based)."""

    step: int
    mean_log_return: float
    loss: float
    grad_norm: float


@dataclass(frozen=True)
class LocalTrainResult:
    """A party's flat parameters after a local-training call, and its steps' records."""

    params: np.ndarray
    records: list[StepRecord]
