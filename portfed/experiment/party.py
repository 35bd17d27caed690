"""A party of the federated portfolio experiment: its universe, private data, generator and agent.

A :class:`Party` implements the federation's per-party ``LocalTrainer`` protocol
(:class:`portfed.federation.LocalTrainer`): the per-party cohort hands it a flat parameter vector and
its :class:`~portfed.federation.LocalObjective` and gets a flat parameter vector back (DESIGN.md §1).
Its training panel, its Augmenter (private generator, paper 001 §9.3), its Adam moments, portfolio
vector memory and batch sampler never leave it.

Augmentation schedule.  The party counts its local iterations ``i`` over the whole run (the
trainer's ``step_count``, which survives checkpoints) and trains at iteration ``i`` on
``augmenter.panel(i)``: the real training closes followed by synthetic block ``⌊i / regenerate_every⌋``.
A :meth:`Party.local_train` call that crosses a regeneration boundary is split there, so the
schedule does not depend on how local iterations are grouped into rounds.

Engines.  A party trains either with its own :class:`DPGTrainer` (``engine="per_party"``) or in its
slot of one :class:`~portfed.agents.batched.BatchedDPGTrainer` shared by the federation's parties
(``engine="batched"``, :class:`PartyGroup`): the slot has the ``DPGTrainer`` API, so the party still
decides its own regenerations and hands its new panel to its slot, and its checkpoint holds its own
rows of the engine's state.  :class:`~portfed.experiment.party_group.PartyGroup` is the batched
engine's :class:`~portfed.federation.Cohort`.  Both engines compute the same training to float32
round-off.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import numpy as np

from portfed._crash import crash_point
from portfed.agents import AgentConfig, DPGTrainer, EIIEPolicy, LocalTrainResult, StepRecord, TrainerSlot
from portfed.agents.networks import build_network, flat_parameters, set_flat_parameters
from portfed.agents.objective import greedy_log_return
from portfed.data import PricePanel
from portfed.federation import LocalObjective
from portfed.generators import Augmenter
from portfed.validation import check_int

Engine = Literal["per_party", "batched"]
ENGINES: tuple[str, ...] = ("per_party", "batched")


class Party:
    """One party: ``tickers`` of the market, its real training panel, its Augmenter and its agent.

    Args:
        index: the party's position in the federation (for names and error messages).
        train: the party's real training prices (its universe, dates before the held-out period).
        agent_config: the EIIE agent's hyper-parameters.
        seed: seeds the agent's initial network and batch sampler (:class:`DPGTrainer`).
        augmenter: the party's private Augmenter, or ``None`` to train on real prices only.
        engine: ``"per_party"``: the party builds its own ``DPGTrainer``; ``"batched"``: it trains in
            a slot of a shared batched engine, attached by :class:`PartyGroup` before training.
    """

    def __init__(
        self, index: int, train: PricePanel, agent_config: AgentConfig, seed: int, augmenter: Augmenter | None,
        engine: Engine = "per_party",
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.index = int(index)
        self.seed = int(seed)
        self.tickers = train.tickers
        self.generator_name = None if augmenter is None else augmenter.state_dict()["generator"]
        self._config = agent_config
        self._real = train.select_features(agent_config.features)
        self._augmenter = augmenter
        self._net = build_network(agent_config, self.seed)  # evaluation only: the trainer owns the trained state
        self._trainer: DPGTrainer | TrainerSlot | None = (
            DPGTrainer(agent_config, self._panel_at(0), seed=seed) if engine == "per_party" else None
        )

    @property
    def engine(self) -> Engine:
        return "per_party" if isinstance(self._trainer, DPGTrainer) else "batched"

    @property
    def attached(self) -> bool:
        """Whether the party has a trainer (its own, or a slot of a batched engine)."""
        return self._trainer is not None

    def training_panel(self) -> PricePanel:
        """The panel the party trains on next (real prices ⊕ the current synthetic block)."""
        return self._panel_at(0 if self._trainer is None else self._trainer.step_count)

    def attach(self, slot: TrainerSlot) -> None:
        """Train in ``slot`` of a batched engine from now on (a ``"batched"`` party, once)."""
        if self._trainer is not None:
            raise ValueError(f"party {self.index} already has a trainer ({self.engine})")
        if slot.config != self._config or slot.panel.tickers != self.tickers:
            raise ValueError(f"party {self.index}: the slot holds another agent config or universe")
        self._trainer = slot

    @property
    def trainer(self) -> DPGTrainer | TrainerSlot | None:
        """The party's trainer: its own ``DPGTrainer``, its slot of a batched engine, or ``None`` (not attached)."""
        return self._trainer

    @property
    def _agent(self) -> DPGTrainer | TrainerSlot:
        if self._trainer is None:
            raise RuntimeError(f"party {self.index} trains in a batched engine but is not attached to one "
                               "(build a PartyGroup of the parties first)")
        return self._trainer

    # ------------------------------------------------------------------ the LocalTrainer protocol
    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResult:
        """:meth:`DPGTrainer.local_train` on the party's current (augmented) panel.

        Loads ``params`` and runs ``steps`` local iterations under ``objective`` (the Fed+ / FedProx
        pull as a mix after each Adam step, paper 003 eq. 14, or as a term of the loss, paper 001
        Alg. 1; FedAMP's proximal term in the loss).  The
        synthetic block is regenerated at every multiple of ``regenerate_every`` iterations, mid-call
        if need be.
        """
        steps = check_int(steps, f"party {self.index}: steps", minimum=0)
        records: list[StepRecord] = []
        load, remaining = params, steps
        while True:
            crash_point("local_train")
            chunk = min(remaining, self.sync_panel())
            result = self._agent.local_train(load, chunk, objective)
            records.extend(result.records)
            load, remaining = None, remaining - chunk
            if remaining == 0:
                return LocalTrainResult(params=result.params, records=records)

    def sync_panel(self) -> int:
        """Hand the trainer the panel of the party's current iteration; return the iterations left until
        the next regeneration (the augmentation schedule decides; unbounded without augmentation)."""
        agent = self._agent
        agent.set_panel(self._panel_at(agent.step_count))
        if self._augmenter is None:
            return int(np.iinfo(np.int64).max)
        every = self._augmenter.regenerate_every
        return every - agent.step_count % every

    # ------------------------------------------------------------------ party-side evaluation
    @property
    def n_parameters(self) -> int:
        return int(flat_parameters(self._net).size)

    @property
    def agent_config(self) -> AgentConfig:
        return self._config

    @property
    def local_iterations(self) -> int:
        """Local iterations run so far (the augmentation schedule's clock)."""
        return self._agent.step_count

    def evaluate_log_return(self, params: np.ndarray, days: int | None = None) -> float:
        """Mean daily log return of the greedy policy of ``params`` on the party's real training prices.

        The policy trades the last ``days`` price relatives of the training panel (all of them when
        ``None``), starting in cash (:func:`portfed.agents.trainer.greedy_log_return`); this is the
        "local performance" of paper 000 Fig. 1c.  The party's trained state is not touched.
        """
        panel = self._real
        window = self._config.window
        if days is not None:
            if days < 1:
                raise ValueError(f"party {self.index}: days must be >= 1 or None, got {days!r}")
            panel = panel.iloc(slice(max(0, len(panel) - days - window), None))
        set_flat_parameters(self._net, params)
        return greedy_log_return(self._net, self._config, panel)

    def policy(self, params: np.ndarray, name: str) -> EIIEPolicy:
        """The greedy policy of ``params`` on a private copy of the party's network."""
        net = copy.deepcopy(self._net)
        set_flat_parameters(net, params)
        return EIIEPolicy(net, self._config, name=name)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The agent's whole training state (its own trainer's, or its slot's rows of the batched
        engine) and the Augmenter's schedule state (deep copies)."""
        return {
            "trainer": self._agent.state_dict(),
            "augmenter": None if self._augmenter is None else self._augmenter.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the party must have been built from the same data and config."""
        if (state["augmenter"] is None) != (self._augmenter is None):
            raise ValueError(f"party {self.index}: checkpoint augmenter {state['augmenter'] is not None} does not "
                             f"match this party's ({self._augmenter is not None})")
        agent = self._agent
        if self._augmenter is not None:
            # Back to the panel trained on when the state was saved (the saved block), not the one of
            # the next iteration: a regeneration due next must reset the PVM's synthetic rows as it
            # would have without the interruption.
            self._augmenter.load_state_dict(state["augmenter"])
            block = int(state["augmenter"]["block"])
            agent.set_panel(self._augmenter.panel(block * self._augmenter.regenerate_every))
        agent.load_state_dict(state["trainer"])

    # ------------------------------------------------------------------ internals
    def _panel_at(self, iteration: int) -> PricePanel:
        return self._real if self._augmenter is None else self._augmenter.panel(iteration)
