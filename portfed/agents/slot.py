"""Party k of a batched engine, seen through :class:`~portfed.agents.trainer.DPGTrainer`'s single-party API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from portfed.agents.config import AgentConfig
from portfed.agents.trainer import LocalTrainResult
from portfed.data.panel import PricePanel
from portfed.federation.cohort import CohortPlan, LocalObjective

if TYPE_CHECKING:
    from portfed.agents.batched import BatchedDPGTrainer


class TrainerSlot:
    """Party ``party`` of a :class:`~portfed.agents.batched.BatchedDPGTrainer` with ``DPGTrainer``'s API.

    A party object that owns its data and augmentation schedule drives its slot exactly as it would
    drive its own ``DPGTrainer``: :meth:`set_panel`, :meth:`local_train` (a one-party plan of the
    engine), ``step_count``, :meth:`state_dict` / :meth:`load_state_dict` (party k's rows of the
    engine's state: parameters, Adam moments and step, PVM rows, sampler).  Training many parties at
    once goes through the engine's :meth:`BatchedDPGTrainer.train`.
    """

    def __init__(self, engine: BatchedDPGTrainer, party: int) -> None:
        self.engine = engine
        self.party = party

    @property
    def config(self) -> AgentConfig:
        return self.engine.config

    @property
    def step_count(self) -> int:
        return self.engine.step_count(self.party)

    @property
    def panel(self) -> PricePanel:
        return self.engine.panel(self.party)

    def set_panel(self, panel: PricePanel) -> None:
        self.engine.set_panel(self.party, panel)

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResult:
        """:meth:`DPGTrainer.local_train` of this party alone (arguments and result as there)."""
        objective = objective or LocalObjective()

        def row(vector: np.ndarray | None) -> np.ndarray | None:
            return None if vector is None else np.asarray(vector, dtype=np.float64)[None]

        plan = CohortPlan(round_index=0, parties=np.array([self.party]), steps=np.array([steps]), start=row(params),
                          target=row(objective.target), sigma=np.array([objective.sigma]),
                          prox_center=row(objective.prox_center), prox_coef=np.array([objective.prox_coef]),
                          proximal_update=objective.proximal_update)
        result = self.engine.train_steps(plan)
        return LocalTrainResult(params=result.params[0], records=result.records[0])

    def state_dict(self) -> dict[str, Any]:
        """Copies of party k's rows of :meth:`BatchedDPGTrainer.state_dict`."""
        return self.engine.party_state(self.party)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the slot must already hold the panel it was saved with."""
        self.engine.load_party_state(self.party, state)
