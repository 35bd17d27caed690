"""What the personalised baselines share (paper 003 Table 2, paper 004 Table 3): FedAvg's server, the
parties start from ``w̃`` (λ = 1), and the pieces their rounds are made of.

Each baseline is one module (:mod:`.scaffold`, :mod:`.ditto`, :mod:`.pfedme`, :mod:`.perfedavg`,
:mod:`.apfl`, :mod:`.finetune`) with its paper's equations; their local iterations are in
:mod:`portfed.federation.local_rules`.  A baseline that deploys a model of its own keeps it in
``state.extras["personal"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from portfed.federation.algorithms.base import RoundAlgorithm
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult, OptimizerState, ProximalUpdate
from portfed.federation.local_rules import LocalRule, RuleOutput
from portfed.federation.server import MeanRule
from portfed.validation import check_int

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


class PersonalBaseline(RoundAlgorithm):
    """FedAvg's server and start (λ = 1); the parties deploy ``state.extras["personal"]``."""

    #: The personal models (and SCAFFOLD's control variates) are the server's state, made from each party's model.
    party_side: ClassVar[bool] = False

    @property
    def server(self) -> MeanRule:
        return MeanRule()

    def start_weight(self, round_index: int) -> float:
        return 1.0

    def local_rule(self, state: FederationState, active: np.ndarray) -> LocalRule | None:
        """The local iteration of the ``active`` parties' plan (``None``: the plain step, no rule)."""
        return None

    def plan(self, state: FederationState, active: np.ndarray, steps: Sequence[int],
             optimizer_state: OptimizerState = "keep", proximal_update: ProximalUpdate = "mix") -> CohortPlan:
        """The Local-Solve from ``w̃``, training with :meth:`local_rule` where there is one."""
        plan = super().plan(state, active, steps, optimizer_state, proximal_update)
        rule = self.local_rule(state, active) if plan.size else None
        return plan if rule is None else with_rule(plan, rule)

    def deployed(self, state: FederationState) -> np.ndarray:
        return state.extras["personal"].copy()


def count(minimum: int) -> Callable[[object, str], int]:
    """The coercion of an integer knob ``>= minimum``."""
    def coerce(value: object, name: str) -> int:
        return check_int(value, name, minimum=minimum)
    return coerce


def kept_rows(plan: CohortPlan, result: CohortResult) -> np.ndarray:
    """The usable rows (:meth:`~portfed.federation.cohort.CohortResult.usable`) of a plan that may be empty."""
    return result.usable() if plan.size else np.zeros(0, dtype=bool)


def keep_personal_models(state: FederationState, plan: CohortPlan,
                         result: CohortResult) -> tuple[np.ndarray, RuleOutput]:
    """Store the usable rows' personal models (the local rule's companions ``v_k`` / ``θ_k``) in
    ``state.extras["personal"]``; the usable rows and the rule's output, for what else a baseline keeps."""
    kept = kept_rows(plan, result)
    output = result.personal if result.personal is not None else RuleOutput()
    state.extras["personal"][plan.parties[kept]] = output.companion[kept]  # type: ignore[index]
    return kept, output


def with_rule(plan: CohortPlan, rule: LocalRule) -> CohortPlan:
    """``plan`` (which starts every party from its start, without a pull) training with the local ``rule``."""
    return CohortPlan(round_index=plan.round_index, parties=plan.parties, steps=plan.steps, start=plan.start,
                      optimizer_state=plan.optimizer_state, rule=rule)


def fine_tune(state: FederationState, round_index: int, cohort: Cohort, steps: int, rule: LocalRule | None) -> None:
    """Every party's personal model: ``w̃`` after ``steps`` local steps (with ``rule`` when given) by all parties."""
    n = state.party_models.shape[0]
    personal = np.tile(state.global_model, (n, 1))
    if steps > 0:
        plan = CohortPlan(round_index=round_index, parties=np.arange(n), steps=np.full(n, steps), start=personal,
                          rule=rule)
        tuned = cohort.train(plan).checked(plan, personal.shape[1])
        kept = tuned.usable()
        personal[kept] = tuned.params[kept]
    state.extras["personal"] = personal
