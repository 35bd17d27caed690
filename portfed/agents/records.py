"""What a local-training call returns: the new parameters and one record per gradient step (one party's
call: :class:`LocalTrainResult`; the engine's call for K parties: :class:`ManyTrainResult`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portfed.federation.cohort import CohortResult


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


@dataclass(frozen=True)
class ManyTrainResult:
    """``params`` ``(K, d)`` float64 (row i: the plan's i-th party) and each party's step statistics as
    arrays: ``stats[i, j]`` = (mean log return, loss, gradient norm, mean chosen cash weight) of party i's step j for
    ``j < steps[i]`` (NaN beyond), ``first_step[i]`` the party's step count before the call.  A round
    summarises them with :meth:`sums` — no object per step (2,500 per K = 50, E = 50 round were a tenth of
    its time, measured); :attr:`records` builds the per-step records for the callers that show them."""

    params: np.ndarray
    stats: np.ndarray
    steps: np.ndarray
    first_step: np.ndarray

    @property
    def records(self) -> list[list[StepRecord]]:
        """Each party's :class:`StepRecord` per step."""
        rows = self.stats.tolist()
        return [[StepRecord(step=int(self.first_step[i]) + j + 1, mean_log_return=rows[i][j][0], loss=rows[i][j][1],
                            grad_norm=rows[i][j][2], cash=rows[i][j][3]) for j in range(int(self.steps[i]))]
                for i in range(len(rows))]

    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each party's sums over its steps of the mean log return, the loss and the chosen cash weight ``(K,)``."""
        taken = np.arange(self.stats.shape[1])[None, :] < self.steps[:, None]
        totals = np.where(taken[..., None], self.stats[..., [0, 1, 3]], 0.0).sum(axis=1)
        return totals[:, 0], totals[:, 1], totals[:, 2]

    def summary(self) -> CohortResult:
        """The round's :class:`~portfed.federation.CohortResult`: each party's mean training reward, loss and
        chosen cash weight over its steps (NaN for a party that took none)."""
        return CohortResult.from_sums(self.params, *self.sums(), self.steps)
