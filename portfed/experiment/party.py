"""A party of the federated portfolio experiment: its universe, private data, generator and agent.

A :class:`Party` implements the federation's ``LocalTrainer`` protocol
(:class:`portfed.federation.LocalTrainer`): the round loop hands it a flat parameter vector and gets a
flat parameter vector back (DESIGN.md §1).  Its training panel, its Augmenter (private generator,
paper 001 §9.3), its Adam moments, portfolio vector memory and batch sampler never leave it.

Augmentation schedule.  The party counts its local iterations ``i`` over the whole run (the
trainer's ``step_count``, which survives checkpoints) and trains at iteration ``i`` on
``augmenter.panel(i)``: the real training closes followed by synthetic block ``⌊i / regenerate_every⌋``.
A :meth:`Party.local_train` call that crosses a regeneration boundary is split there, so the
schedule does not depend on how local iterations are grouped into rounds.

Engines.  A party trains either with its own :class:`DPGTrainer` (``engine="per_party"``) or in its
slot of one :class:`~portfed.agents.batched.BatchedDPGTrainer` shared by the federation's parties
(``engine="batched"``, :class:`PartyGroup`): the slot has the ``DPGTrainer`` API, so the party still
decides its own regenerations and hands its new panel to its slot, and its checkpoint holds its own
rows of the engine's state.  :class:`PartyGroup` is the batched round engine's
:class:`~portfed.federation.BatchedLocalTrainer`: one ``local_train_many`` call trains every active
party, split where a party's augmentation schedule regenerates, exactly as :meth:`Party.local_train`
splits.  Both engines compute the same training to float32 round-off.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from portfed.agents import AgentConfig, DPGTrainer, EIIEPolicy, LocalTrainResult, ManyTrainResult, StepRecord
from portfed.agents.batched import BatchedDPGTrainer, TrainerSlot
from portfed.agents.networks import build_network, flat_parameters, set_flat_parameters
from portfed.agents.trainer import greedy_log_return
from portfed.data import PricePanel
from portfed.data.errors import DataError
from portfed.generators import Augmenter

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
    def _agent(self) -> DPGTrainer | TrainerSlot:
        if self._trainer is None:
            raise RuntimeError(f"party {self.index} trains in a batched engine but is not attached to one "
                               "(build a PartyGroup of the parties first)")
        return self._trainer

    # ------------------------------------------------------------------ the LocalTrainer protocol
    @property
    def learning_rate(self) -> float:
        """``η`` of the Fed+ mixing coefficient ``κ = 1/(1 + ησ)`` (paper 003 eq. 14)."""
        return self._config.learning_rate

    def local_train(
        self,
        params: np.ndarray | None,
        steps: int,
        *,
        mix_target: np.ndarray | None = None,
        kappa: float = 1.0,
        prox_center: np.ndarray | None = None,
        prox_coef: float = 0.0,
    ) -> LocalTrainResult:
        """:meth:`DPGTrainer.local_train` on the party's current (augmented) panel.

        Loads ``params`` and runs ``steps`` local iterations, each an Adam step followed by the Fed+
        mix ``w ← κ w + (1 − κ) mix_target`` when given (paper 003 eq. 14), with the proximal term
        ``prox_coef/2 ‖w − prox_center‖²`` in the loss when given (FedProx / FedAMP).  The synthetic
        block is regenerated at every multiple of ``regenerate_every`` iterations, mid-call if need be.
        """
        if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 0:
            raise ValueError(f"party {self.index}: steps must be a non-negative integer, got {steps!r}")
        options: dict[str, Any] = {"mix_target": mix_target, "kappa": kappa, "prox_center": prox_center,
                                   "prox_coef": prox_coef}
        records: list[StepRecord] = []
        load, remaining = params, int(steps)
        while True:
            chunk = min(remaining, self.sync_panel())
            result = self._agent.local_train(load, chunk, **options)
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


class PartyGroup:
    """N parties training in the slots of one :class:`BatchedDPGTrainer` (the batched round engine's trainer).

    Built from ``"batched"`` parties that are not attached yet, it creates the engine from each
    party's current training panel and seed and attaches party k to slot k; built from parties
    already attached to one engine, it wraps that engine (training continues from its state).

    Raises:
        ValueError: an empty list, per-party parties, a mix of attached and unattached parties, or
            parties with different agent configs.
        DataError: parties with different numbers of assets (the batched engine stacks them).
    """

    def __init__(self, parties: Sequence[Party]) -> None:
        self.parties = list(parties)
        if not self.parties:
            raise ValueError("a PartyGroup needs at least one party")
        per_party = [p.index for p in self.parties if isinstance(p._trainer, DPGTrainer)]
        if per_party:
            raise ValueError(f"parties {per_party} have their own DPGTrainer (engine='per_party')")
        configs = {p.agent_config for p in self.parties}
        if len(configs) != 1:
            raise ValueError("the parties of a PartyGroup must share one agent config")
        if len({len(p.tickers) for p in self.parties}) != 1:
            raise DataError("the batched engine needs the same number of assets for every party, got "
                            f"{sorted({len(p.tickers) for p in self.parties})}")
        slots = [p._trainer for p in self.parties]
        if all(slot is None for slot in slots):
            self.engine = BatchedDPGTrainer(configs.pop(), [p.training_panel() for p in self.parties],
                                            [p.seed for p in self.parties])
            for k, party in enumerate(self.parties):
                party.attach(self.engine.slot(k))
            return
        engines = {id(slot.engine) for slot in slots if isinstance(slot, TrainerSlot)}
        if None in slots or len(engines) != 1 or [s.party for s in slots] != list(range(len(slots))):
            raise ValueError("the parties must be all unattached, or attached in order to the slots of one engine")
        self.engine = slots[0].engine  # type: ignore[union-attr]

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    @property
    def learning_rate(self) -> float:
        return self.engine.learning_rate

    def local_train_many(
        self,
        params: np.ndarray | None,
        steps: int | Sequence[int],
        *,
        parties: Sequence[int] | np.ndarray | None = None,
        mix_targets: np.ndarray | None = None,
        kappas: np.ndarray | Sequence[float] | None = None,
        prox_centers: np.ndarray | None = None,
        prox_coefs: np.ndarray | Sequence[float] | float = 0.0,
    ) -> ManyTrainResult:
        """:meth:`BatchedDPGTrainer.local_train_many` with every party's augmentation schedule.

        Before each chunk every still-training party syncs its slot's panel (:meth:`Party.sync_panel`);
        party i then runs ``min(steps left, iterations until its next regeneration)`` iterations, all
        parties in one engine call; a party with steps left after a regeneration continues in the
        next chunk from its current parameters.  Arguments and result as the engine's.
        """
        index = self.engine._party_index(parties)
        n = index.size
        remaining = self.engine._steps(steps, n)
        coefs = np.broadcast_to(np.asarray(prox_coefs, dtype=np.float64), (n,))
        kappa = None if kappas is None else np.broadcast_to(np.asarray(kappas, dtype=np.float64), (n,))
        records: list[list[StepRecord]] = [[] for _ in range(n)]
        out = np.empty((n, self.engine.n_parameters))
        rows, first = np.arange(n), True
        while first or rows.size:
            chunk = [min(int(remaining[r]), self.parties[int(index[r])].sync_panel()) for r in rows]

            def pick(array: np.ndarray | None, rows: np.ndarray = rows) -> np.ndarray | None:
                return None if array is None else np.asarray(array)[rows]

            result = self.engine.local_train_many(pick(params) if first else None, chunk, parties=index[rows],
                                                  mix_targets=pick(mix_targets), kappas=pick(kappa),
                                                  prox_centers=pick(prox_centers), prox_coefs=coefs[rows])
            out[rows] = result.params
            for row, part in zip(rows.tolist(), result.records, strict=True):
                records[row].extend(part)
            remaining[rows] -= chunk
            rows, first = rows[remaining[rows] > 0], False
        return ManyTrainResult(params=out, records=records)
