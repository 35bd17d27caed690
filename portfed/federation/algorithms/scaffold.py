"""SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", Alg. 1).

Parties train with the drift-corrected step ``y ← y − η (g(y) + c − c_k)`` (line 10, the local rule
``scaffold``) from ``w̃`` and send their models; the server averages them (FedAvg's server, line 16
with global step 1).  Each party that trained replaces its control variate by option II of line 12,
``c_k⁺ = (x − y)/(E_k η) − (c − c_k)``, and the server adds ``Σ_k (c_k⁺ − c_k)/N`` to ``c`` (line 17).
The control variates start at zero and persist in ``state.extras`` (``server_control``, ``controls``);
the parties deploy ``w̃``.  No knobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from portfed.federation.algorithms.base import Factory, RoundAlgorithm, configure
from portfed.federation.algorithms.personal import PersonalBaseline, kept_rows
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_rules import RuleOutput, ScaffoldRule

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


@dataclass(frozen=True)
class Scaffold(PersonalBaseline):
    """SCAFFOLD (module docstring)."""

    name: str = "scaffold"
    local_rules: ClassVar[frozenset[str]] = frozenset({"scaffold"})

    def local_rule(self, state: FederationState, active: np.ndarray) -> ScaffoldRule:
        """The drift correction ``c − c_k`` (Alg. 1 line 10)."""
        return ScaffoldRule(shift=state.extras["server_control"] - state.extras["controls"][active])

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """The new control variates of the parties that trained, and the server's (Alg. 1 lines 12, 17)."""
        if plan.size == 0:
            return
        output = result.personal if result.personal is not None else RuleOutput()
        trained = kept_rows(plan, result) & (plan.steps > 0) & np.all(np.isfinite(output.companion), axis=1)  # type: ignore[arg-type]
        rows = plan.parties[trained]
        change = output.companion[trained] - state.extras["controls"][rows]  # type: ignore[index]
        state.extras["controls"][rows] = output.companion[trained]  # type: ignore[index]
        state.extras["server_control"] = state.extras["server_control"] + change.sum(axis=0) / state.party_models.shape[0]

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """Zero control variates."""
        return {"server_control": np.zeros(models.shape[1]), "controls": np.zeros_like(models)}

    def deployed(self, state: FederationState) -> np.ndarray:
        """``w̃`` (λ = 1)."""
        return RoundAlgorithm.deployed(self, state)

    def with_knobs(self, **knobs: object) -> Scaffold:
        return configure(self, self.name, (), knobs, {})


FACTORIES: dict[str, Factory] = {"scaffold": Scaffold().with_knobs}
