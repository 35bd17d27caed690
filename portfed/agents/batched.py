"""portfed's training engine: K parties' DPG training as one computation (Jiang, Xu & Liang 2017; paper 001 §9.2).

Every EIIE agent of the library trains here — the N parties of an in-process federation, a
single-party experiment (K = 1), a Flower node's party (K = 1).  At paper scale (50 parties × 800
rounds × 50 local iterations) a party's step is a few hundred microseconds of Python, autograd and
optimizer bookkeeping around tiny tensors; :class:`BatchedDPGTrainer` holds the N parties' state as
stacked arrays and runs a local step of every training party as one pass:

* parameters ``Θ`` ``(N, d)`` float32 (row k = party k's ``flat_parameters``), evaluated by the
  batched EIIE of the config's network (:func:`batched_network`: the CNN of
  :mod:`~portfed.agents.batched_networks`, the RNN / LSTM of :mod:`~portfed.agents.batched_recurrent`);
* the loss of party k is :func:`~portfed.agents.objective.dpg_loss`; with the C kernels its value and
  gradient come from kernel calls without autograd (:meth:`BatchedEIIE.reward_gradient`, plus
  :func:`~portfed.agents.objective.penalty_gradient`), otherwise one backward pass of ``Σ_k L_k``
  gives every party its own gradient (the losses share no parameters), all parties in one pass or
  ``net.parties_per_pass`` at a time (:attr:`BatchedEIIE.parties_per_pass`);
* Adam is :func:`~portfed.agents.adam.adam_step` on the active rows (each party its own step count),
  then, with ``proximal_update: mix``, the Fed+ mix ``θ ← κ_k θ + (1 − κ_k) z_k`` with
  ``κ_k = 1/(1 + ησ_k)`` (paper 003 eq. 14) when the plan has targets (with ``loss`` the pull is a
  term of the loss, :meth:`CohortPlan.penalty`);
* market data and PVMs are :class:`~portfed.agents.stacks.PartyStacks` — universes of different sizes
  are padded and masked (:mod:`~portfed.agents.batched_head`), so a cross-market federation is one
  computation;
* each party keeps its own :class:`~portfed.agents.sampler.GeometricBatchSampler` seeded with its
  seed, and a local-training call draws that party's ``E_k`` batch starts at once
  (:meth:`GeometricBatchSampler.sample_starts`: the numbers of ``E_k`` single draws);
* a call's per-step inputs — the batch starts' stack rows, the padding mask, Adam's bias corrections —
  go to the device once, before its first step (:class:`~portfed.agents.batched_step.CallTables`), so
  that a step moves nothing from the host (on a GPU an upload from host memory makes the host wait for
  the GPU's queue).

This module holds the engine's state (its rows, Adam states, samplers, checkpoints) and its calls;
one iteration of the parties trained together is :class:`~portfed.agents.batched_step.LocalStep`, or with
``agent.capture`` (``compile``, ``cuda_graph``) the same step recorded once and replayed,
:class:`~portfed.agents.captured.CapturedStep`, for the steps in which every party of the call trains.

**Learners** (:attr:`AgentConfig.learner`).  ``direct`` is the above.  ``actor_critic`` trains each
party's row ``[θ | φ]`` — its EIIE actor and its critic (:class:`~portfed.agents.batched_critic.BatchedCritic`)
— on :func:`~portfed.agents.actor_critic.actor_critic_loss` (TD(0) targets from private target rows
``[θ' | φ']``, the actor following ``∇_a Q_φ``), with one Adam state per network (the critic's with
``critic_learning_rate``), the Fed+ mix on the federated part of the row (each network's ``κ`` from its
own learning rate) and the soft target updates after each step.  The federation sees the federated
vector of :mod:`portfed.agents.learner` (the whole row, or the actor with ``share: actor``).

The federation's call is :meth:`train`, the :class:`~portfed.federation.Cohort` contract: one
:class:`~portfed.federation.CohortPlan` for the active parties.  Parties with fewer local iterations
(stragglers) drop out of the batch when their iterations are done.  :meth:`local_train` is one
party's call (the ``LocalTrainer`` form).  The plain per-party implementations of the same training,
``examples/dpg_trainer.py`` (and ``examples/ddpg_trainer.py``, the actor-critic), are the tests' references: given the same configs, panels and seeds the
two reproduce each other's parameters to float32 round-off (the layers sum in a different order, and
the steps without autograd compute the head in double: ``tests/test_batched_engine.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from portfed.agents.actor_critic import exploration_generator
from portfed.agents.adam import AdamState
from portfed.agents.batched_critic import BatchedCritic
from portfed.agents.batched_head import BatchedEIIE
from portfed.agents.batched_networks import BatchedEIIECNN
from portfed.agents.batched_recurrent import BatchedEIIERecurrent
from portfed.agents.batched_step import ActiveParties, CallTables, LocalStep
from portfed.agents.captured import CapturedStep
from portfed.agents.config import AgentConfig
from portfed.agents.critic_state import CriticState
from portfed.agents.learner import initial_row, shared_size, shares_critic
from portfed.agents.records import LocalTrainResult, ManyTrainResult
from portfed.agents.sampler import GeometricBatchSampler
from portfed.agents.stacks import PartyStacks
from portfed.data.panel import PricePanel
from portfed.federation.cohort import CohortPlan, CohortResult, LocalObjective
from portfed.validation import check_int, check_seed


def batched_network(config: AgentConfig) -> BatchedEIIE:
    """The batched EIIE of ``config.network`` (the CNN, or the RNN / LSTM)."""
    return BatchedEIIECNN(config) if config.network == "cnn" else BatchedEIIERecurrent(config)


def resolved_backend(config: AgentConfig) -> str:
    """The backend ``config``'s parties train on in this process: ``config.backend`` resolved
    (:mod:`portfed.agents.backend`; ``auto`` builds the kernels, or warns and falls back to ``torch``)."""
    return batched_network(config).backend.name


class BatchedDPGTrainer:
    """N parties' EIIE agents, Adam states, PVMs and samplers, trained as one computation.

    Args:
        config: the agent hyper-parameters shared by every party (any network).
        panels: party k's training prices (numbers of assets and days may differ).
        seeds: party k's seed: its initial network (:func:`~portfed.agents.networks.build_network`)
            and its batch sampler.
        chunk: parties per forward/backward pass; ``None``: the network's ``parties_per_pass`` (all of them
            unless the recurrent EIIEs run without their fused kernels).  The results do not depend on it
            (to float32 round-off).

    Raises:
        ValueError: mismatched lengths, bad seeds or an empty party list.
        DataError: a panel too short for one batch.
    """

    def __init__(self, config: AgentConfig, panels: Sequence[PricePanel], seeds: Sequence[int],
                 chunk: int | None = None) -> None:
        if len(panels) == 0 or len(panels) != len(seeds):
            raise ValueError(f"need one seed per panel and at least one party, got {len(panels)} panels, "
                             f"{len(seeds)} seeds")
        self.seeds = [check_seed(s, "seeds") for s in seeds]
        self.config = config
        self.net = batched_network(config)
        self.critic = BatchedCritic(config, self.net) if config.learner == "actor_critic" else None
        default = self.net.parties_per_pass or self.n_parties
        chunk = default if chunk is None else check_int(chunk, "chunk", minimum=1)
        self.stacks = PartyStacks(config, panels, self.net.layout, self.net.input_width)
        init = np.stack([initial_row(config, s) for s in self.seeds])
        self._theta = torch.as_tensor(init, dtype=torch.float32, device=torch.device(config.device))
        self._n_actor, self._n_shared = self.net.n_parameters, shared_size(config)
        self._adam = AdamState.zeros_like(self._theta[:, : self._n_actor])
        self._critic_state = None if self.critic is None else CriticState.initial(self._theta, self._n_actor)
        self._samplers = [GeometricBatchSampler(config.batch_size, config.beta, s) for s in self.seeds]
        self._noise = [exploration_generator(s) for s in self.seeds] if self._explores else []
        self._offsets = torch.arange(config.batch_size, device=self._theta.device)
        self._local_step = LocalStep(config, self.net, self.critic, self.stacks, self._offsets, chunk,
                                     self._n_actor, self._n_shared, self.row_size)
        #: The step every party of a call runs, recorded once and replayed (``agent.capture``), or ``None``.
        self._captured = None if config.capture == "none" else CapturedStep(config, self.net, self.stacks, self._offsets)

    # ------------------------------------------------------------------ properties and per-party state
    @property
    def n_parties(self) -> int:
        return len(self.seeds)

    @property
    def n_parameters(self) -> int:
        """The federated vector's length (:func:`~portfed.agents.learner.shared_size`)."""
        return self._n_shared

    @property
    def row_size(self) -> int:
        """A party's trained row: its actor, then (actor-critic) its critic."""
        return int(self._theta.shape[1])

    @property
    def n_assets(self) -> np.ndarray:
        """``(N,)``: party k's number of assets ``m_k``."""
        return self.stacks.assets.copy()

    @property
    def step_counts(self) -> np.ndarray:
        """Local iterations run so far by each party (its Adam step ``t_k``)."""
        return self._adam.steps.copy()

    @property
    def data_bytes(self) -> int:
        """Bytes of the stacked market data, PVMs, parameters and Adam moments."""
        tensors = [self.stacks.windows, self.stacks.y_now, self.stacks.y_next, self.stacks.pvm, self._theta,
                   self._adam.exp_avg, self._adam.exp_avg_sq]
        if self._critic_state is not None:
            tensors += [self._critic_state.adam.exp_avg, self._critic_state.adam.exp_avg_sq, self._critic_state.targets]
        return sum(t.numel() * t.element_size() for t in tensors)

    def step_count(self, party: int) -> int:
        return int(self._adam.steps[self._party(party)])

    def parameters(self) -> np.ndarray:
        """``(N, d)`` float64 copy of every party's federated vector."""
        return self._theta[:, : self._n_shared].detach().to("cpu", torch.float64).numpy()

    def panel(self, party: int) -> PricePanel:
        """The panel party ``party`` trains on (restricted to ``config.features``)."""
        return self.stacks.panel(self._party(party))

    def set_panel(self, party: int, panel: PricePanel) -> None:
        """Party ``party`` trains on ``panel`` from now on (:meth:`PartyStacks.set_panel`)."""
        self.stacks.set_panel(self._party(party), panel)

    def pvm_weights(self, party: int) -> np.ndarray:
        """Party ``party``'s portfolio vector memory, ``(T_k, m_k + 1)`` (a copy)."""
        return self.stacks.pvm_rows(self._party(party)).cpu().numpy()

    def party_state(self, party: int) -> dict[str, Any]:
        """Copies of party ``party``'s rows of :meth:`state_dict` (its checkpoint): its trained row, Adam
        state, PVM and sampler; with the actor-critic also its critic's Adam state and its target row."""
        k = self._party(party)
        state = {"params": self._theta[k].cpu().clone(), **self._adam.row_state(k),
                 "pvm": self.stacks.pvm_rows(k).cpu(), "sampler": copy.deepcopy(self._samplers[k].state_dict())}
        if self._critic_state is not None:
            state |= self._critic_state.row_state(k)
        if self._explores:
            state["noise"] = copy.deepcopy(self._noise[k].bit_generator.state)
        return state

    def load_party_state(self, party: int, state: dict[str, Any]) -> None:
        """Restore :meth:`party_state`; the party must already hold the panel it was saved with."""
        required = {"params", "exp_avg", "exp_avg_sq", "step", "pvm", "sampler"}
        if self.critic is not None:
            required |= {"critic_adam", "targets"} | ({"noise"} if self._explores else set())
        expected = required | {"origin"}  # origin: absent from states saved before optimizer resets
        if not required <= set(state) <= expected:
            raise ValueError(f"slot state keys {sorted(state)} differ from {sorted(expected)}")
        k = self._party(party)
        for name, size in (("params", self.row_size), ("exp_avg", self._n_actor), ("exp_avg_sq", self._n_actor)):
            if tuple(state[name].shape) != (size,):
                raise ValueError(f"party {k}: slot state {name} has shape {tuple(state[name].shape)}, "
                                 f"expected ({size},)")
        try:
            self.stacks.set_pvm_rows(k, state["pvm"])
        except ValueError as error:
            raise ValueError(f"party {k}: slot state pvm: {error}") from error
        self._theta[k] = state["params"].to(self._theta.device, torch.float32)
        self._adam.load_row_state(k, state)
        if self._critic_state is not None:
            self._critic_state.load_row_state(k, state)
        if self._explores:
            self._noise[k].bit_generator.state = copy.deepcopy(state["noise"])
        self._samplers[k].load_state_dict(copy.deepcopy(state["sampler"]))

    # ------------------------------------------------------------------ a party's call
    def local_train(self, party: int, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResult:
        """Party ``party`` alone (the ``LocalTrainer`` form of :meth:`train_steps`): loads ``params``
        (``None`` keeps its current ones) and runs ``steps`` local iterations under ``objective``."""
        objective = objective or LocalObjective()
        steps = check_int(steps, "steps", minimum=0)

        def row(vector: np.ndarray | None) -> np.ndarray | None:
            return None if vector is None else np.asarray(vector, dtype=np.float64)[None]

        plan = CohortPlan(round_index=0, parties=np.array([self._party(party)]), steps=np.array([steps]),
                          start=row(params), target=row(objective.target), sigma=np.array([objective.sigma]),
                          prox_center=row(objective.prox_center), prox_coef=np.array([objective.prox_coef]),
                          proximal_update=objective.proximal_update)
        result = self.train_steps(plan)
        return LocalTrainResult(params=result.params[0], records=result.records[0])

    # ------------------------------------------------------------------ the federation's call
    def train(self, plan: CohortPlan) -> CohortResult:
        """The :class:`~portfed.federation.Cohort` call: :meth:`train_steps`, summarised per party."""
        return self.train_steps(plan).summary()

    def train_steps(self, plan: CohortPlan) -> ManyTrainResult:
        """Run ``plan``: party ``plan.parties[i]`` loads ``plan.start[i]`` (when given; its Adam state is
        then handled as ``plan.optimizer_state`` says, :meth:`AdamState.on_new_start`) and runs
        ``plan.steps[i]`` local iterations — an Adam step on its loss (with the plan's proximal term,
        :meth:`CohortPlan.penalty`) followed, when the plan mixes (:meth:`CohortPlan.mix`), by
        ``θ ← κ_i θ + (1 − κ_i) z_i`` with ``κ_i = 1/(1 + ησ_i)``.

        Returns:
            the parties' new parameters ``(K, d)`` and their step records.
        """
        if plan.rule is not None:
            raise ValueError(f"the batched portfolio engine runs the Fed+ Local-Solve only, not the local rule "
                             f"{plan.rule.kind!r} of a personalised baseline (portfed.federation.local_rules)")
        index, steps, n, device = plan.parties.copy(), plan.steps, plan.size, self._theta.device
        if n and index.max() >= self.n_parties:
            raise IndexError(f"plan parties must lie in [0, {self.n_parties - 1}], got {index.tolist()}")
        for name in ("start", "target", "prox_center"):
            value = getattr(plan, name)
            if value is not None and value.shape[1] != self.n_parameters:
                raise ValueError(f"plan {name} has {value.shape[1]} columns; the network has {self.n_parameters} "
                                 "parameters")

        def rows(array: np.ndarray) -> torch.Tensor:
            return torch.tensor(array, dtype=torch.float32, device=device)

        mix = self._mix(plan, rows)
        penalty = plan.penalty()
        prox = None if penalty is None else (rows(penalty[0]), rows(penalty[1]))
        torch_index = torch.from_numpy(index).to(device)
        if plan.start is not None:
            self._theta[torch_index, : self._n_shared] = rows(plan.start)
            self._adam.on_new_start(index, plan.optimizer_state)
            if self._critic_state is not None and shares_critic(self.config):
                self._critic_state.adam.on_new_start(index, plan.optimizer_state)
        width = int(steps.max()) if n else 0
        starts = np.zeros((n, width), dtype=np.int64)
        for i, (k, e) in enumerate(zip(index.tolist(), steps.tolist(), strict=True)):
            starts[i, :e] = self._samplers[k].sample_starts(int(self.stacks.n_days[k]), e)
        noise = self._draw_noise(index, steps, width)
        everyone = n == self.n_parties and np.array_equal(index, np.arange(n))
        if everyone:  # views: the step updates the stored state in place
            adam, critic_state = self._adam, self._critic_state
            theta = self._theta
        else:
            adam = self._adam.rows(index)
            critic_state = None if self._critic_state is None else self._critic_state.rows(index)
            theta = self._theta[torch_index]
        config = self.config
        tables = CallTables(*self.stacks.start_rows(index, starts), self.stacks.padding(index),
                            adam.corrections(width, config.learning_rate, config.adam_betas),
                            None if critic_state is None else
                            critic_state.adam.corrections(width, config.critic_learning_rate, config.adam_betas))
        active = ActiveParties(theta, adam, index, mix, prox, tables, critic_state)
        stats = torch.full((width, n, 4), float("nan"), device=device)
        with self.net.threads():
            for j in range(width):
                live = np.flatnonzero(steps > j)
                if live.size == n:
                    step = self._captured or self._local_step
                    stats[j] = step.run(active, j, None if noise is None else noise[:, j])
                else:
                    part = active.subset(live)
                    at = torch.from_numpy(live).to(device)
                    stats[j, at] = self._local_step.run(part, j, None if noise is None else noise[at, j])
                    active.put(live, part)
        if not everyone:
            self._theta[torch_index] = active.theta
            self._adam.put(index, active.adam)
            if self._critic_state is not None and active.critic is not None:
                self._critic_state.put(index, active.critic)
        return ManyTrainResult(params=self._theta[torch_index, : self._n_shared].to("cpu", torch.float64).numpy(),
                               stats=stats.cpu().numpy().transpose(1, 0, 2).astype(np.float64), steps=steps.copy(),
                               first_step=self._adam.steps[index] - steps)

    def _mix(self, plan: CohortPlan, rows: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The Fed+ mix's ``(z, κ, 1 − κ)``; a shared critic's columns take ``κ`` from the critic's learning rate."""
        pull = plan.mix(self.config.learning_rate)
        if pull is None:
            return None
        target, kappa = pull
        if self._n_shared == self._n_actor:
            return rows(target), rows(kappa).unsqueeze(1), rows(1.0 - kappa).unsqueeze(1)
        _, kappa_critic = plan.mix(self.config.critic_learning_rate)  # type: ignore[misc]
        columns = np.concatenate([np.repeat(kappa[:, None], self._n_actor, axis=1),
                                  np.repeat(kappa_critic[:, None], self._n_shared - self._n_actor, axis=1)], axis=1)
        return rows(target), rows(columns), rows(1.0 - columns)

    @property
    def _explores(self) -> bool:
        return self.critic is not None and self.config.exploration_noise > 0

    def _draw_noise(self, index: np.ndarray, steps: np.ndarray, width: int) -> torch.Tensor | None:
        """``(K, width, B, M + 1)`` exploration portfolios ``Dirichlet(1, …, 1)`` over each party's ``m_k + 1``
        columns (zero on padded assets), party ``index[i]``'s ``steps[i]`` steps drawn at once from its own
        generator, or ``None``."""
        if not self._explores:
            return None
        b, m = self.config.batch_size, self.stacks.n_assets
        noise = np.zeros((index.size, width, b, m + 1), dtype=np.float32)
        for i, (k, e) in enumerate(zip(index.tolist(), steps.tolist(), strict=True)):
            columns = int(self.stacks.assets[k]) + 1
            noise[i, :e, :, :columns] = self._noise[k].dirichlet(np.ones(columns), size=(e, b))
        return torch.from_numpy(noise).to(self._theta.device)

    def _party(self, party: int) -> int:
        party = check_int(party, "party")
        if not 0 <= party < self.n_parties:
            raise IndexError(f"party must lie in [0, {self.n_parties - 1}], got {party}")
        return party

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """A deep copy of the whole training state: parameters, Adam moments and steps, PVMs, samplers (and
        the actor-critic's critic Adam state and target rows)."""
        adam = self._adam.state_dict()
        state = {"params": self._theta.cpu().clone(), "exp_avg": adam["exp_avg"], "exp_avg_sq": adam["exp_avg_sq"],
                 "steps": adam["steps"], "origin": adam["origin"], "pvm": self.stacks.pvm.cpu().clone(),
                 "samplers": [copy.deepcopy(s.state_dict()) for s in self._samplers]}
        if self._critic_state is not None:
            state |= self._critic_state.state_dict()
        if self._explores:
            state["noise"] = [copy.deepcopy(g.bit_generator.state) for g in self._noise]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the trainer must hold the same parties (configs, panels)."""
        required = {"params", "exp_avg", "exp_avg_sq", "steps", "pvm", "samplers"}
        if self.critic is not None:
            required |= {"critic_adam", "targets"} | ({"noise"} if self._explores else set())
        expected = required | {"origin"}  # origin: absent from states saved before optimizer resets
        if not required <= set(state) <= expected:
            raise ValueError(f"state dict keys {sorted(state)} differ from {sorted(expected)}")
        for name, current in (("params", self._theta), ("pvm", self.stacks.pvm)):
            if tuple(state[name].shape) != tuple(current.shape):
                raise ValueError(f"state {name} has shape {tuple(state[name].shape)}, expected {tuple(current.shape)}")
        if len(state["samplers"]) != self.n_parties or np.shape(state["steps"]) != (self.n_parties,):
            raise ValueError(f"state is for {len(state['samplers'])} parties, this trainer has {self.n_parties}")
        self._adam.load_state_dict({k: state[k] for k in ("exp_avg", "exp_avg_sq", "steps", "origin") if k in state})
        self._theta = state["params"].to(self._theta.device, torch.float32).clone()
        if self._critic_state is not None:
            self._critic_state.load_state_dict(state)
        self.stacks.pvm = state["pvm"].to(self.stacks.pvm.device, torch.float32).clone()
        for sampler, sampler_state in zip(self._samplers, state["samplers"], strict=True):
            sampler.load_state_dict(copy.deepcopy(sampler_state))
        for generator, noise_state in zip(self._noise, state.get("noise", []), strict=True):
            generator.bit_generator.state = copy.deepcopy(noise_state)

