"""APFL (Deng et al., "Adaptive Personalized Federated Learning", Alg. 1).

Each party keeps a local model ``v_k`` and a mixing weight ``α_k``; per step on one minibatch
``w ← w − η g(w)``, ``v ← v − η α g(v̄)`` with ``v̄ = α v + (1 − α) w`` and, when ``apfl_alpha_lr``
η_α > 0, ``α ← clip₍₀,₁₎(α − η_α ⟨v − w, g(v̄)⟩)`` (eq. 10; the local rule ``apfl``).  The server
averages the ``w_k``; the parties deploy ``α_k v_k + (1 − α_k) w̃``.  Defaults: α = 0.25 fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from portfed.federation.algorithms.base import Factory, configure
from portfed.federation.algorithms.personal import PersonalBaseline, keep_personal_models
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_rules import APFLRule
from portfed.federation.schedule import in_range

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


@dataclass(frozen=True)
class APFL(PersonalBaseline):
    """APFL with initial weight ``apfl_alpha`` α ∈ [0, 1] and its step ``apfl_alpha_lr`` η_α >= 0."""

    name: str = "apfl"
    apfl_alpha: float = 0.25
    apfl_alpha_lr: float = 0.0
    local_rules: ClassVar[frozenset[str]] = frozenset({"apfl"})

    def local_rule(self, state: FederationState, active: np.ndarray) -> APFLRule:
        """The active parties' ``v_k`` and ``α_k``."""
        return APFLRule(companion=state.extras["personal"][active], alpha=state.extras["apfl_alpha"][active],
                        alpha_lr=self.apfl_alpha_lr)

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """Keep the usable ``v_k`` and ``α_k``."""
        if plan.size == 0:
            return
        kept, output = keep_personal_models(state, plan, result)
        state.extras["apfl_alpha"][plan.parties[kept]] = output.alpha[kept]  # type: ignore[index]

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """``v_k`` equal to the initial models, ``α_k = apfl_alpha``."""
        return {"personal": models.copy(), "apfl_alpha": np.full(models.shape[0], self.apfl_alpha)}

    def deployed(self, state: FederationState) -> np.ndarray:
        """``α_k v_k + (1 − α_k) w̃``."""
        alpha = state.extras["apfl_alpha"][:, None]
        return alpha * state.extras["personal"] + (1.0 - alpha) * state.global_model

    def with_knobs(self, **knobs: object) -> APFL:
        return configure(self, self.name, ("apfl_alpha", "apfl_alpha_lr"), knobs,
                         {"apfl_alpha": lambda v, n: in_range(v, n, 0.0, 1.0),
                          "apfl_alpha_lr": lambda v, n: in_range(v, n, 0.0)})


FACTORIES: dict[str, Factory] = {"apfl": APFL().with_knobs}
