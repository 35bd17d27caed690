"""What an algorithm is to the round loop: the :class:`Algorithm` protocol and its shared defaults.

One round (:func:`portfed.federation.rounds.run_round`) reads::

    plan = algorithm.plan(state, active, steps, ...)     # each active party's Local-Solve (and local rule)
    result = cohort.train(plan)                          # whatever trains the parties
    finish_round(algorithm.server, state, plan, result)  # quarantine, the server rule, the records
    algorithm.after_round(state, plan, result, ...)      # a personalised baseline's own work

and a run starts from ``algorithm.server.initial(W^0)`` and ``algorithm.initial_extras`` and ends with
``algorithm.deployed(state)``, the models the parties would use.  :class:`RoundAlgorithm` holds the
defaults: the plan of the Local-Solve that ``local_solve`` describes (paper 003 Alg. 1 lines 15–20),
nothing after the round, no extras, and the deployed models ``ŵ_k = (1 − λ_T) w_k + λ_T r_k`` with
``λ_T = start_weight(T)`` (paper 003 Alg. 1 line 18: the model party k would start its next local
training from once the server's last message has reached it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

import numpy as np

from portfed.federation.cohort import Cohort, CohortPlan, CohortResult, OptimizerState, ProximalUpdate
from portfed.federation.local_solve import LocalSolvePlan, initial_point
from portfed.federation.server import ServerRule

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


class Algorithm(Protocol):
    """One federated algorithm as the round loop uses it (module docstring)."""

    name: str
    #: The local rules (:data:`portfed.federation.local_rules.RULES`) its plans ask a cohort to run.
    local_rules: ClassVar[frozenset[str]]

    @property
    def server(self) -> ServerRule:
        """The server rule: received models → ``w̃`` (and centres, and server state)."""

    def local_solve(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> LocalSolvePlan:
        """The Local-Solve of parties with models ``w`` sent ``reference`` (``(d,)`` or ``(K, d)``)."""

    def plan(self, state: FederationState, active: np.ndarray, steps: Sequence[int],
             optimizer_state: OptimizerState = "keep", proximal_update: ProximalUpdate = "mix") -> CohortPlan:
        """Round ``state.round_index``'s plan for the ``active`` parties."""

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """Work once the server has stepped (updates ``state`` in place)."""

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """Round-0 arrays of the algorithm's own (personal models, control variates, server moments)."""

    def deployed(self, state: FederationState) -> np.ndarray:
        """``(N, d)``: the models the parties deploy after the rounds of ``state``."""

    def deploy(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> np.ndarray:
        """The deployed models of parties with models ``w`` last sent ``reference``, after ``round_index`` rounds."""


class RoundAlgorithm:
    """The defaults of :class:`Algorithm` (module docstring); a family overrides what it does differently."""

    name: str
    local_rules: ClassVar[frozenset[str]] = frozenset()
    #: Whether a party can make its own round from its own model ``w_k`` and the reference ``r_k`` the server sent
    #: (:func:`solved_by_parties`): its Local-Solve is :meth:`local_solve`, its deployed model :meth:`deploy`,
    #: no local rule, and nothing of the party's lives on the server (personal models, control variates).
    party_side: ClassVar[bool] = True

    def start_weight(self, round_index: int) -> float:
        """``λ_t`` of the initialization ``(1 − λ_t) w_k + λ_t r_k`` (paper 003 Alg. 1 line 18)."""
        raise NotImplementedError

    def local_solve(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> LocalSolvePlan:
        """Start from ``(1 − λ_t) w_k + λ_t r_k``, no pull, no proximal term."""
        return LocalSolvePlan(start=initial_point(w, reference, self.start_weight(round_index)), target=None,
                              sigma=0.0, prox_center=None, prox_coef=0.0)

    def plan(self, state: FederationState, active: np.ndarray, steps: Sequence[int],
             optimizer_state: OptimizerState = "keep", proximal_update: ProximalUpdate = "mix") -> CohortPlan:
        """The Local-Solve (:meth:`local_solve`) of the ``active`` parties on their stacked models and references,
        with ``optimizer_state`` and ``proximal_update`` (:class:`~portfed.federation.cohort.CohortPlan`)."""
        everyone = np.array_equal(active, np.arange(state.party_models.shape[0]))  # no (N, d) copy of all the models
        solve = self.local_solve(state.party_models if everyone else state.party_models[active],
                                 state.references(None if everyone else active), state.round_index)
        for array in (solve.start, solve.target, solve.prox_center):  # new arrays: the plan takes them, read-only
            if array is not None:
                array.setflags(write=False)
        k = active.size
        return CohortPlan(round_index=state.round_index, parties=active, steps=[steps[i] for i in active.tolist()],
                          start=solve.start, target=solve.target, sigma=np.full(k, solve.sigma),
                          prox_center=solve.prox_center, prox_coef=np.full(k, solve.prox_coef),
                          optimizer_state=optimizer_state, proximal_update=proximal_update)

    def after_round(self, state: FederationState, plan: CohortPlan, result: CohortResult, sent_global: np.ndarray,
                    cohort: Cohort) -> None:
        """Nothing: the server step was the round's last work."""

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """None."""
        return {}

    def deployed(self, state: FederationState) -> np.ndarray:
        """``ŵ_k = (1 − λ_T) w_k + λ_T r_k`` with ``r_k`` the FedAMP centre or ``w̃`` (:meth:`deploy`)."""
        reference = state.global_model if state.centers is None else state.centers
        return self.deploy(state.party_models, reference, state.round_index)

    def deploy(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> np.ndarray:
        """``ŵ = (1 − λ_T) w + λ_T r`` with ``λ_T = start_weight(T)``, ``T = round_index`` (module docstring), for
        one party (``(d,)``) or a stack: what a party computes on its own when the server holds only its
        noisy messages (:func:`solved_by_parties`)."""
        return initial_point(w, reference, self.start_weight(round_index))


def solved_by_parties(algorithm: Algorithm) -> bool:
    """Whether ``algorithm``'s parties can make their own Local-Solve and deployed model from their own models
    and the references the server sent (its ``party_side``; ``False`` when it declares nothing): needed where the
    server holds only the parties' local-DP messages (:func:`portfed.federation.cohort.cohort_sends_private`)."""
    return bool(getattr(algorithm, "party_side", False))


def require_rules(algorithm: Algorithm, rules: frozenset[str], runner: str) -> Algorithm:
    """``algorithm`` when ``runner`` runs every local rule its plans need (``rules``), else one line naming them."""
    missing = sorted(algorithm.local_rules - rules)
    if missing:
        raise ValueError(f"algorithm {algorithm.name!r} trains with its own local iteration (portfed.federation."
                         f"local_rules: {', '.join(missing)}), which {runner} does not run")
    return algorithm


A = TypeVar("A")
#: A knob's coercion: ``(value, knob name) → typed value`` (raising ``ValueError`` naming the knob).
Coerce = Callable[[object, str], object]
#: A registry entry: knobs → the algorithm (:mod:`.registry`).
Factory = Callable[..., Algorithm]


def refuse_unknown(name: str, tunable: Sequence[str], knobs: Mapping[str, object]) -> None:
    """One line naming the ``knobs`` outside ``tunable`` (and the tunable ones), if any."""
    refused = sorted(set(knobs) - set(tunable))
    if refused:
        valid = ", ".join(tunable) if tunable else "none"
        raise ValueError(f"algorithm {name!r} takes no parameter(s) {refused}; tunable parameters: {valid}")


def replaced(algorithm: A, name: str, **fields: object) -> A:
    """``dataclasses.replace(algorithm, **fields)``, its ``ValueError`` prefixed with ``name``."""
    try:
        return dataclasses.replace(algorithm, **fields)  # type: ignore[type-var]
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(name) else f"{name}: {message}") from None


def configure(algorithm: A, name: str, tunable: Sequence[str], knobs: Mapping[str, object],
              coerce: Mapping[str, Coerce]) -> A:
    """``algorithm`` (a frozen dataclass) with ``knobs`` (all of them fields) replaced after ``coerce``,
    refusing knobs outside ``tunable`` (:func:`refuse_unknown`, :func:`replaced`)."""
    refuse_unknown(name, tunable, knobs)
    try:
        fields = {knob: coerce[knob](value, knob) if knob in coerce else value for knob, value in knobs.items()}
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return replaced(algorithm, name, **fields)


def deployed_models(algorithm: Algorithm, state: FederationState) -> np.ndarray:
    """The ``(N, d)`` models the parties deploy after the rounds of ``state`` (``algorithm.deployed``; module
    docstring)."""
    return algorithm.deployed(state)
