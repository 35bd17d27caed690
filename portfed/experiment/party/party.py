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

The engine.  A party's agent lives in a row of portfed's one training engine,
:class:`~portfed.agents.batched.BatchedDPGTrainer`: the row a
:class:`~portfed.experiment.party.group.PartyGroup` gives it in the engine it shares with the
federation's other parties (:meth:`Party.attach`), or — a party used alone, e.g. on a Flower node —
row 0 of a one-party engine of its own, built on first use.  Either way the party decides its own
regenerations and hands its new panel to its row, and its checkpoint holds its own rows of the
engine's state (parameters, Adam moments and step, PVM, sampler).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from portfed._crash import crash_point
from portfed.agents import AgentConfig, BatchedDPGTrainer, EIIEPolicy, LocalTrainResult, StepRecord
from portfed.agents.batched import batched_network
from portfed.agents.learner import actor_vector, shared_size
from portfed.agents.networks import build_network, set_flat_parameters
from portfed.agents.objective import greedy_log_returns
from portfed.data import PricePanel
from portfed.federation import LocalObjective
from portfed.generators import Augmenter
from portfed.validation import check_int


class Party:
    """One party: ``tickers`` of the market, its real training panel, its Augmenter and its agent.

    Args:
        index: the party's position in the federation (for names and error messages).
        train: the party's real training prices (its universe, dates before the held-out period).
        agent_config: the EIIE agent's hyper-parameters.
        seed: seeds the agent's initial network and batch sampler.
        augmenter: the party's private Augmenter, or ``None`` to train on real prices only.
    """

    def __init__(self, index: int, train: PricePanel, agent_config: AgentConfig, seed: int,
                 augmenter: Augmenter | None) -> None:
        self.index = int(index)
        self.seed = int(seed)
        self.tickers = train.tickers
        self.generator_name = None if augmenter is None else augmenter.state_dict()["generator"]
        self._config = agent_config
        self._real = train.select_features(agent_config.features)
        self._augmenter = augmenter
        self._net = build_network(agent_config, self.seed)  # evaluation only: the engine owns the trained state
        self._engine: BatchedDPGTrainer | None = None
        self._row = 0

    @property
    def attached(self) -> bool:
        """Whether the party has its row of an engine (a shared one, or its own)."""
        return self._engine is not None

    def training_panel(self) -> PricePanel:
        """The panel the party trains on next (real prices ⊕ the current synthetic block)."""
        return self._panel_at(0 if self._engine is None else self._engine.step_count(self._row))

    def attach(self, engine: BatchedDPGTrainer, row: int) -> None:
        """Train in row ``row`` of ``engine`` from now on (once, before the party's first training)."""
        if self._engine is not None:
            raise ValueError(f"party {self.index} already trains in an engine")
        if engine.config != self._config or engine.panel(row).tickers != self.tickers:
            raise ValueError(f"party {self.index}: row {row} of the engine holds another agent config or universe")
        self._engine, self._row = engine, row

    @property
    def engine(self) -> tuple[BatchedDPGTrainer, int]:
        """The engine the party trains in and its row; a party never attached gets a one-party engine."""
        if self._engine is None:
            self._engine = BatchedDPGTrainer(self._config, [self.training_panel()], [self.seed])
        return self._engine, self._row

    # ------------------------------------------------------------------ the LocalTrainer protocol
    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResult:
        """:meth:`BatchedDPGTrainer.local_train` of the party's row on its current (augmented) panel.

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
            engine, row = self.engine
            result = engine.local_train(row, load, chunk, objective)
            records.extend(result.records)
            load, remaining = None, remaining - chunk
            if remaining == 0:
                return LocalTrainResult(params=result.params, records=records)

    def sync_panel(self) -> int:
        """Hand the trainer the panel of the party's current iteration; return the iterations left until
        the next regeneration (the augmentation schedule decides; unbounded without augmentation)."""
        engine, row = self.engine
        done = engine.step_count(row)
        engine.set_panel(row, self._panel_at(done))
        if self._augmenter is None:
            return int(np.iinfo(np.int64).max)
        every = self._augmenter.regenerate_every
        return every - done % every

    # ------------------------------------------------------------------ party-side evaluation
    @property
    def n_parameters(self) -> int:
        """The length of the party's federated vector (:func:`~portfed.agents.learner.shared_size`)."""
        return shared_size(self._config)

    @property
    def agent_config(self) -> AgentConfig:
        return self._config

    @property
    def local_iterations(self) -> int:
        """Local iterations run so far (the augmentation schedule's clock)."""
        engine, row = self.engine
        return engine.step_count(row)

    def evaluate_log_return(self, params: np.ndarray, days: int | None = None) -> float:
        """Mean daily log return of the greedy policy of ``params`` on the party's real training prices.

        The policy trades the last ``days`` price relatives of the training panel (all of them when
        ``None``), starting in cash (:func:`portfed.agents.objective.greedy_log_return`); this is the
        "local performance" of paper 000 Fig. 1c.  The party's trained state is not touched.
        """
        return float(self.evaluate_log_returns(np.asarray(params)[None], days)[0])

    def evaluate_log_returns(self, params: np.ndarray, days: int | None = None) -> np.ndarray:
        """:meth:`evaluate_log_return` of each row of ``params`` ``(M, d)``, in one batched rollout
        (:func:`~portfed.agents.objective.greedy_log_returns`); ``(M,)``."""
        panel = self._real
        window = self._config.window
        if days is not None:
            if days < 1:
                raise ValueError(f"party {self.index}: days must be >= 1 or None, got {days!r}")
            panel = panel.iloc(slice(max(0, len(panel) - days - window), None))
        actors = np.stack([actor_vector(self._config, row) for row in np.asarray(params)])
        theta = torch.as_tensor(actors, dtype=torch.float32, device=self._config.device)
        return greedy_log_returns(batched_network(self._config), self._config, panel, theta).cpu().numpy()

    def policy(self, params: np.ndarray, name: str) -> EIIEPolicy:
        """The greedy policy of the federated vector ``params`` (its actor) on a private copy of the party's network."""
        net = copy.deepcopy(self._net)
        set_flat_parameters(net, actor_vector(self._config, params))
        return EIIEPolicy(net, self._config, name=name)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The agent's whole training state (its rows of the engine) and the Augmenter's schedule state
        (deep copies)."""
        engine, row = self.engine
        return {
            "trainer": engine.party_state(row),
            "augmenter": None if self._augmenter is None else self._augmenter.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the party must have been built from the same data and config."""
        if (state["augmenter"] is None) != (self._augmenter is None):
            raise ValueError(f"party {self.index}: checkpoint augmenter {state['augmenter'] is not None} does not "
                             f"match this party's ({self._augmenter is not None})")
        engine, row = self.engine
        if self._augmenter is not None:
            # Back to the panel trained on when the state was saved (the saved block), not the one of
            # the next iteration: a regeneration due next must reset the PVM's synthetic rows as it
            # would have without the interruption.
            self._augmenter.load_state_dict(state["augmenter"])
            block = int(state["augmenter"]["block"])
            engine.set_panel(row, self._augmenter.panel(block * self._augmenter.regenerate_every))
        engine.load_party_state(row, state["trainer"])

    # ------------------------------------------------------------------ internals
    def _panel_at(self, iteration: int) -> PricePanel:
        return self._real if self._augmenter is None else self._augmenter.panel(iteration)
