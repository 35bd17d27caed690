"""Ditto (Li et al., "Ditto: Fair and Robust Federated Learning Through Personalization", Alg. 1).

The global model is trained as by FedAvg; then each active party trains its personal model ``v_k``
for as many steps on ``f_k(v) + λ/2 ‖v − w̃^t‖²`` (eq. 2, ``w̃^t`` the model the round's parties
received), applied as the Fed+ mix ``v ← κ v + (1 − κ) w̃^t`` with each party's own
``κ = 1/(1 + η_k λ)`` (stable for any λ).  Personal models start at the parties' initial models and are
deployed.  Knob: ``personal_lambda`` λ >= 0, default 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from portfed.federation.algorithms.base import Factory, configure
from portfed.federation.algorithms.personal import PersonalBaseline
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.schedule import in_range

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


@dataclass(frozen=True)
class Ditto(PersonalBaseline):
    """Ditto with ``personal_lambda`` λ (module docstring)."""

    name: str = "ditto"
    personal_lambda: float = 1.0

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """The active parties' personal steps towards ``sent_global`` (eq. 2)."""
        if plan.size == 0:
            return
        lam, active = self.personal_lambda, plan.parties
        target = np.tile(sent_global, (plan.size, 1))
        mixed = lam > 0  # each party mixes with its own κ = 1/(1 + η_k λ) (the Fed+ mix, stable for any λ)
        personal_plan = CohortPlan(round_index=plan.round_index, parties=active, steps=plan.steps,
                                   start=state.extras["personal"][active], target=target if mixed else None,
                                   sigma=np.full(plan.size, lam if mixed else 0.0), proximal_update="mix",
                                   optimizer_state=plan.optimizer_state)
        trained = cohort.train(personal_plan).checked(personal_plan, state.party_models.shape[1])
        kept = trained.usable()
        state.extras["personal"][active[kept]] = trained.params[kept]

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """Personal models equal to the initial ones."""
        return {"personal": models.copy()}

    def with_knobs(self, **knobs: object) -> Ditto:
        return configure(self, self.name, ("personal_lambda",), knobs, {"personal_lambda": _lambda})


def _lambda(value: object, name: str) -> float:
    return in_range(value, name, 0.0)


FACTORIES: dict[str, Factory] = {"ditto": Ditto().with_knobs}
