"""FedAvg-FT and FedProx-FT: FedAvg / FedProx, then every party fine-tunes ``w̃`` before deploying it
(the fine-tuned baselines of paper 003 Table 2 and paper 004 Table 3).

Training is FedAvg's (``fedavg-ft``) or FedProx's (``fedprox-ft``: the pull ``σ_t`` towards ``w̃``);
after every round each party runs ``finetune_steps`` plain local steps from the new ``w̃`` and deploys
the result.  Defaults: 10 fine-tuning steps; FedProx-FT's σ = 0.01 as FedProx's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from portfed.federation.algorithms.base import Factory, configure
from portfed.federation.algorithms.personal import PersonalBaseline, count, fine_tune
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_solve import LocalSolvePlan, initial_point, personal_target
from portfed.federation.prox import Penalty
from portfed.federation.schedule import Schedule

if TYPE_CHECKING:
    from portfed.federation.state import FederationState

_NONE = Penalty("none", 0.0)


@dataclass(frozen=True)
class FineTuned(PersonalBaseline):
    """FedAvg (``sigma`` 0) or FedProx (``sigma`` > 0) with ``finetune_steps`` before deploying."""

    name: str
    sigma: Schedule = Schedule(0.0)
    finetune_steps: int = 10
    tunable: tuple[str, ...] = ("finetune_steps",)
    needs_sigma: bool = False

    def __post_init__(self) -> None:
        if self.needs_sigma and self.sigma.initial <= 0:
            raise ValueError(f"{self.name} needs sigma > 0 (paper 003 Table 1), got {self.sigma.initial!r}")

    def local_solve(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> LocalSolvePlan:
        """Start from ``w̃``, pulled towards it with ``σ_t`` when > 0 (FedProx)."""
        sigma = self.sigma.at(round_index)
        target = personal_target(w, reference, _NONE, None, round_index) if sigma > 0 else None
        return LocalSolvePlan(start=initial_point(w, reference, 1.0), target=target,
                              sigma=sigma if sigma > 0 else 0.0, prox_center=None, prox_coef=0.0)

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """Every party fine-tunes the new ``w̃`` (even in a round whose parties all dropped out)."""
        fine_tune(state, plan.round_index, cohort, self.finetune_steps, None)

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """Personal models equal to ``w̃`` (nothing fine-tuned yet)."""
        return {"personal": np.tile(global_model, (models.shape[0], 1))}

    def with_knobs(self, **knobs: object) -> FineTuned:
        return configure(self, self.name, self.tunable, knobs,
                         {"sigma": Schedule.coerce, "finetune_steps": count(0)})


FACTORIES: dict[str, Factory] = {
    "fedavg-ft": FineTuned("fedavg-ft").with_knobs,
    "fedprox-ft": FineTuned("fedprox-ft", sigma=Schedule(0.01), tunable=("sigma", "finetune_steps"),
                            needs_sigma=True).with_knobs,
}
