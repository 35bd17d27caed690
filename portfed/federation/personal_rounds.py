"""The personalised baselines in the one round loop (:func:`~portfed.federation.rounds.run_round`).

Each baseline is a row of the algorithm table (:mod:`.algorithms`) whose server is FedAvg's mean
(``λ = 1``: local training starts from ``w̃``) plus, per :class:`~portfed.federation.personalization.Personalization`
kind, a local rule (:mod:`.local_rules`) and what :func:`after_round` does once the server has
stepped.  What survives between rounds lives in ``FederationState.extras`` (saved with the state, so a
resumed run continues bit for bit):

* ``scaffold`` — Karimireddy et al., Alg. 1: the plan carries ``s_k = c − c_k``; the party returns
  ``c_k⁺`` (option II); the server keeps ``c_k`` of the parties (``extras["controls"]``, ``(N, d)``)
  and ``c ← c + (1/N) Σ_{k∈S} (c_k⁺ − c_k)`` (line 17, ``extras["server_control"]``).  Deploys ``w̃``.
* ``ditto`` — Li et al., "Ditto: Fair and Robust Federated Learning Through Personalization", Alg. 1:
  the message is FedAvg's; then each active party takes ``E_k`` steps on its personal model ``v_k``
  for ``f_k(v) + λ/2 ‖v − w̃^t‖²`` (eq. 2), as the Fed+ proximal mix ``v ← κ(v − η∇f_k) + (1 − κ) w̃^t``
  with ``κ = 1/(1 + ηλ)`` (paper 003 eq. 14; the paper's plain gradient step on the sum has the same
  fixed point but diverges for ``ηλ > 2``).  Deploys ``v_k`` (``extras["personal"]``).
* ``pfedme`` — Dinh et al., Alg. 1: local rule ``pfedme``; the server's step is
  ``w̃ ← (1 − β) w̃ + β mean(w_k)`` (line 11); deploys the personal models ``θ_k``.
* ``perfedavg`` — Fallah et al.: local rule ``perfedavg`` (first-order MAML step); after the server
  step every party adapts the new ``w̃`` with ``finetune_steps`` steps of size α (rule ``adapt``, their
  evaluation protocol) and deploys the result.
* ``apfl`` — Deng et al., Alg. 1: local rule ``apfl``; the party keeps ``v_k`` and ``α_k``
  (``extras["personal"]``, ``extras["apfl_alpha"]``) and deploys ``α_k v_k + (1 − α_k) w̃``.
* ``finetune`` — FedAvg-FT / FedProx-FT (paper 004 §7's baselines): the base algorithm, then every party
  fine-tunes the new ``w̃`` with ``finetune_steps`` plain local steps and deploys the result.

Fine-tuning and adaptation (``finetune``, ``perfedavg``) train every party after every round — the
deployed model of a FedAvg-type method changes for all parties each round — and draw from the
parties' own minibatch streams, so FedAvg-FT's global model differs from FedAvg's unless
``finetune_steps = 0`` (then they are equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from portfed.federation.algorithms import AlgorithmSpec
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_rules import LocalRule, RuleOutput

if TYPE_CHECKING:
    from portfed.federation.state import FederationState

#: Kinds whose parties train with a local rule the portfolio engines do not implement.
NEEDS_RULE: tuple[str, ...] = ("scaffold", "pfedme", "perfedavg", "apfl")


def with_local_rule(spec: AlgorithmSpec, state: FederationState, plan: CohortPlan) -> CohortPlan:
    """``plan`` with the local rule of the algorithm's kind (unchanged for kinds without one)."""
    knobs, active = spec.personal, plan.parties
    if knobs.kind not in NEEDS_RULE or plan.size == 0:
        return plan
    if knobs.kind == "scaffold":
        rule = LocalRule("scaffold", shift=state.extras["server_control"] - state.extras["controls"][active])
    elif knobs.kind == "pfedme":
        rule = LocalRule("pfedme", reg=knobs.personal_lambda, inner_steps=knobs.inner_steps, inner_lr=knobs.inner_lr)
    elif knobs.kind == "perfedavg":
        rule = LocalRule("perfedavg", inner_lr=knobs.inner_lr)
    else:
        rule = LocalRule("apfl", companion=state.extras["personal"][active], alpha=state.extras["apfl_alpha"][active],
                         alpha_lr=knobs.apfl_alpha_lr)
    return CohortPlan(round_index=plan.round_index, parties=active, steps=plan.steps, start=plan.start,
                      optimizer_state=plan.optimizer_state, rule=rule)


def _usable(result: CohortResult) -> np.ndarray:
    """Rows whose trained model the party keeps (finite, not rejected by the cohort), as in ``finish_round``."""
    rejected = [row for row, _ in result.rejected]
    return np.all(np.isfinite(result.params), axis=1) & ~np.isin(np.arange(result.params.shape[0]), rejected)


def after_round(spec: AlgorithmSpec, state: FederationState, plan: CohortPlan, result: CohortResult,
                sent_global: np.ndarray, cohort: Cohort) -> None:
    """The kind's work once ``finish_round`` has stepped the server (updates ``state.extras`` in place).

    ``sent_global`` is the ``w̃^t`` the round's parties received; ``cohort`` trains the second phase of
    Ditto (personal models) and of FT / Per-FedAvg (every party fine-tunes the new ``w̃``).
    """
    knobs, active, t = spec.personal, plan.parties, plan.round_index
    if knobs.kind == "none" or (plan.size == 0 and knobs.kind not in ("finetune", "perfedavg")):
        return
    kept = _usable(result) if plan.size else np.zeros(0, dtype=bool)
    output = result.personal if result.personal is not None else RuleOutput()
    if knobs.kind == "scaffold":
        trained = kept & (plan.steps > 0) & np.all(np.isfinite(output.companion), axis=1)  # type: ignore[arg-type]
        rows = active[trained]
        change = output.companion[trained] - state.extras["controls"][rows]  # type: ignore[index]
        state.extras["controls"][rows] = output.companion[trained]  # type: ignore[index]
        state.extras["server_control"] = state.extras["server_control"] + change.sum(axis=0) / state.party_models.shape[0]
    elif knobs.kind == "pfedme":
        state.extras["personal"][active[kept]] = output.companion[kept]  # type: ignore[index]
        beta = knobs.pfedme_beta
        if beta != 1.0:
            state.global_model = (1.0 - beta) * sent_global + beta * state.global_model
    elif knobs.kind == "apfl":
        state.extras["personal"][active[kept]] = output.companion[kept]  # type: ignore[index]
        state.extras["apfl_alpha"][active[kept]] = output.alpha[kept]  # type: ignore[index]
    elif knobs.kind == "ditto":
        _ditto_personal(spec, state, plan, sent_global, cohort)
    else:
        _fine_tune(spec, state, t, cohort)


def _ditto_personal(spec: AlgorithmSpec, state: FederationState, plan: CohortPlan, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
    lam, active = spec.personal.personal_lambda, plan.parties
    target = np.tile(sent_global, (plan.size, 1))
    mixed = lam > 0  # each party mixes with its own κ = 1/(1 + η_k λ) (the Fed+ mix, stable for any λ)
    personal_plan = CohortPlan(round_index=plan.round_index, parties=active, steps=plan.steps,
                               start=state.extras["personal"][active], target=target if mixed else None,
                               sigma=np.full(plan.size, lam if mixed else 0.0), proximal_update="mix",
                               optimizer_state=plan.optimizer_state)
    trained = cohort.train(personal_plan).checked(personal_plan, state.party_models.shape[1])
    kept = _usable(trained)
    state.extras["personal"][active[kept]] = trained.params[kept]


def _fine_tune(spec: AlgorithmSpec, state: FederationState, round_index: int, cohort: Cohort) -> None:
    n, steps = state.party_models.shape[0], spec.personal.finetune_steps
    personal = np.tile(state.global_model, (n, 1))
    if steps > 0:
        rule = LocalRule("adapt", inner_lr=spec.personal.inner_lr) if spec.personal.kind == "perfedavg" else None
        plan = CohortPlan(round_index=round_index, parties=np.arange(n), steps=np.full(n, steps), start=personal,
                          rule=rule)
        tuned = cohort.train(plan).checked(plan, personal.shape[1])
        kept = _usable(tuned)
        personal[kept] = tuned.params[kept]
    state.extras["personal"] = personal
