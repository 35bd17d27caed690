"""Per-FedAvg, first-order version (Fallah et al., "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach", eq. (8) with the Hessian term dropped).

Parties train with ``w̄ = w − α g(w; D)``, ``w ← w − η g(w̄; D′)`` (the local rule ``perfedavg``) from
``w̃``; the server averages.  After every round each party adapts ``w̃`` by ``finetune_steps`` plain
steps of size α (the local rule ``adapt``) and deploys the result (``finetune_steps = 0``: ``w̃``).
Defaults: α = ``inner_lr`` = 0.01 with one adaptation step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from portfed.federation.algorithms.base import Factory, configure
from portfed.federation.algorithms.personal import PersonalBaseline, count, fine_tune
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_rules import AdaptRule, PerFedAvgRule
from portfed.federation.schedule import in_range

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


@dataclass(frozen=True)
class PerFedAvg(PersonalBaseline):
    """Per-FedAvg (FO) with inner step ``inner_lr`` α > 0 and ``finetune_steps`` adaptation steps."""

    name: str = "perfedavg"
    inner_lr: float = 0.01
    finetune_steps: int = 1
    local_rules: ClassVar[frozenset[str]] = frozenset({"perfedavg", "adapt"})

    def __post_init__(self) -> None:
        if self.inner_lr <= 0:
            raise ValueError(f"perfedavg needs inner_lr > 0, got {self.inner_lr!r}")

    def local_rule(self, state: FederationState, active: np.ndarray) -> PerFedAvgRule:
        return PerFedAvgRule(inner_lr=self.inner_lr)

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """Every party adapts the new ``w̃`` (even in a round whose parties all dropped out)."""
        fine_tune(state, plan.round_index, cohort, self.finetune_steps, AdaptRule(inner_lr=self.inner_lr))

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """Personal models equal to ``w̃`` (nothing adapted yet)."""
        return {"personal": np.tile(global_model, (models.shape[0], 1))}

    def with_knobs(self, **knobs: object) -> PerFedAvg:
        return configure(self, self.name, ("inner_lr", "finetune_steps"), knobs,
                         {"inner_lr": lambda v, n: in_range(v, n, 0.0), "finetune_steps": count(0)})


FACTORIES: dict[str, Factory] = {"perfedavg": PerFedAvg().with_knobs}
