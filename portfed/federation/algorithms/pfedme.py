"""pFedMe (Dinh et al., "Personalized Federated Learning with Moreau Envelopes", Alg. 1).

Per local step the party solves for its personal model ``θ ≈ argmin_θ f(θ; D) + λ/2 ‖θ − w‖²``
(eq. 7) by ``inner_steps`` K proximal-gradient steps of size ``inner_lr`` ν and moves its local model
``w ← w − ηλ (w − θ)`` (line 8; the local rule ``pfedme``, :mod:`portfed.federation.local_rules`).
The server steps ``w̃ ← (1 − β) w̃ + β mean(w_k)`` (line 11).  The parties deploy their last ``θ_k``
(personal models start at the initial ones).  Defaults λ = 15, K = 5, ν = 0.01, β = 1 (pFedMe's
MNIST setting is λ = 15, K = 5, β = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from portfed.federation.algorithms.base import Factory, configure
from portfed.federation.algorithms.personal import PersonalBaseline, count, keep_personal_models
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_rules import PFedMeRule
from portfed.federation.schedule import in_range

if TYPE_CHECKING:
    from portfed.federation.state import FederationState

_KNOBS = ("personal_lambda", "inner_steps", "inner_lr", "pfedme_beta")


@dataclass(frozen=True)
class PFedMe(PersonalBaseline):
    """pFedMe with λ ``personal_lambda``, K ``inner_steps``, ν ``inner_lr`` > 0, β ``pfedme_beta`` ∈ (0, 1]."""

    name: str = "pfedme"
    personal_lambda: float = 15.0
    inner_steps: int = 5
    inner_lr: float = 0.01
    pfedme_beta: float = 1.0
    local_rules: ClassVar[frozenset[str]] = frozenset({"pfedme"})

    def __post_init__(self) -> None:
        if self.inner_lr <= 0:
            raise ValueError(f"pfedme needs inner_lr > 0, got {self.inner_lr!r}")
        if self.pfedme_beta <= 0:
            raise ValueError(f"pfedme needs pfedme_beta > 0, got {self.pfedme_beta!r}")

    def local_rule(self, state: FederationState, active: np.ndarray) -> PFedMeRule:
        return PFedMeRule(reg=self.personal_lambda, inner_steps=self.inner_steps, inner_lr=self.inner_lr)

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """Keep the usable ``θ_k``; the server's β step (line 11) on top of the mean."""
        if plan.size == 0:
            return
        keep_personal_models(state, plan, result)
        beta = self.pfedme_beta
        if beta != 1.0:
            state.global_model = (1.0 - beta) * sent_global + beta * state.global_model

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """Personal models equal to the initial ones."""
        return {"personal": models.copy()}

    def with_knobs(self, **knobs: object) -> PFedMe:
        return configure(self, self.name, _KNOBS, knobs, {
            "personal_lambda": lambda v, n: in_range(v, n, 0.0), "inner_steps": count(1),
            "inner_lr": lambda v, n: in_range(v, n, 0.0), "pfedme_beta": lambda v, n: in_range(v, n, 0.0, 1.0)})


FACTORIES: dict[str, Factory] = {"pfedme": PFedMe().with_knobs}
