"""The plain per-party actor-critic trainer: deterministic policy gradient with a critic, one party, top to bottom.

Paper 000 §8.2: each party trains "its RL agent using the deterministic policy gradient [Silver et
al., 2014]" on an MDP with "discount factor γ = 0.99".  This is that learner in the deep form of
Lillicrap et al. (2016, Alg. 1) — ``agent.learner: actor_critic`` — written for a single party with
``torch.nn.Module``s and autograd.  Not part of the library: portfed trains every party with its one
engine, :class:`portfed.agents.BatchedDPGTrainer`; the engine's tests check it against this file
(parameters, losses, to float32 round-off).  The data plumbing (panel, portfolio vector memory,
online-stochastic-batch sampler) is :class:`dpg_trainer.DPGTrainer`'s; only the step differs.

One step on a batch of ``B`` consecutive decision days (the math, with equation numbers, is in
:mod:`portfed.agents.actor_critic`):

1. act: ``a_t = μ_θ(s_t)`` with ``s_t = (X_t, w_{t−1})`` (``w_{t−1}`` from the PVM) — exploring, hold
   ``b_t = (1 − σ) a_t + σ d_t`` with a random portfolio ``d_t`` instead (below, ``a_t`` stands for the portfolio held) — reward
   ``r_t = ln(μ_t · y_{t+1} · a_t)``;
2. TD(0) targets on the ``B − 1`` consecutive pairs: ``y_t = r_t + γ Q_φ'(s_{t+1}, μ_θ'(s_{t+1}))``,
   ``s_{t+1} = (X_{t+1}, a_t)``;
3. critic gradient of ``(1/(B−1)) Σ (Q_φ(s_t, a_t) − y_t)²``; actor gradient of ``−(1/B) Σ Q_φ(s_t, μ_θ(s_t))``
   (Silver et al. 2014, Theorem 1, eq. 9), both at the step's ``(θ, φ)``, each with ``λ/2 ‖·‖²`` and its part of
   the proximal term;
4. Adam on each network (the critic with ``critic_learning_rate``), the Fed+ mix on the federated
   vector, soft target updates ``θ' ← τθ + (1 − τ)θ'``, ``φ' ← τφ + (1 − τ)φ'``; the PVM stores ``a_t``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from dpg_trainer import DPGTrainer

from portfed.agents.actor_critic import exploration_generator, explore
from portfed.agents.adam import AdamState, adam_step
from portfed.agents.config import AgentConfig
from portfed.agents.critic import build_critic
from portfed.agents.networks import flat_parameters, set_flat_parameters
from portfed.agents.objective import fedplus_mix, log_returns
from portfed.agents.records import LocalTrainResult, StepRecord
from portfed.data.panel import PricePanel
from portfed.federation.cohort import LocalObjective
from portfed.validation import check_int


def _flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.reshape(-1) for p in params])


def _load(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    with torch.no_grad():
        offset = 0
        for p in params:
            p.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


class DDPGTrainer(DPGTrainer):
    """One party's actor (its EIIE), critic, target networks, two Adam states, PVM and sampler.

    The federated vector is the actor's flat parameters followed, with ``share: actor_critic``, by the
    critic's; the target networks start as copies of the networks and stay with the party.
    """

    def __init__(self, config: AgentConfig, panel: PricePanel, seed: int) -> None:
        super().__init__(config, panel, seed)
        self.critic = build_critic(config, self.seed)
        self.target_actor, self.target_critic = copy.deepcopy(self.net), copy.deepcopy(self.critic)
        self._critic_params = list(self.critic.parameters())
        self.critic_adam = AdamState.zeros_like(_flat(self._critic_params).detach().unsqueeze(0))
        self.noise = exploration_generator(self.seed)

    @property
    def n_parameters(self) -> int:
        actor = int(self.adam.exp_avg.shape[1])
        return actor + int(self.critic_adam.exp_avg.shape[1]) if self.config.share == "actor_critic" else actor

    def _step(self, mix: Any, prox: Any) -> StepRecord:  # type: ignore[override]
        """One step, 1–4 of the module docstring; ``mix``: ``((z, κ), κ_critic)``, ``prox``: ``(c, ρ)``."""
        config, market = self.config, self._market
        offsets = self.sampler.sample(market.n_days)
        previous = torch.from_numpy(self.pvm.read(offsets + market.first_day - 1)).to(config.device)
        windows, y_now, y_next = market.windows[offsets], market.y_now[offsets], market.y_next[offsets]
        # 1. act
        actions = self.net(windows, previous[:, 1:])
        chosen = actions.detach()
        if config.exploration_noise > 0:  # the portfolio held: b_t = (1 − σ) a_t + σ d_t, d_t ~ Dirichlet(1)
            random = self.noise.dirichlet(np.ones(chosen.shape[1]), size=chosen.shape[0]).astype(np.float32)
            chosen = explore(chosen, torch.from_numpy(random).to(config.device), config.exploration_noise)
        rewards = log_returns(chosen, previous, y_now, y_next, config.commission)
        # 2. TD(0) targets from the target networks
        with torch.no_grad():
            next_action = self.target_actor(windows[1:], chosen[:-1, 1:])
            td_target = rewards[:-1] + config.gamma * self.target_critic(windows[1:], chosen[:-1], next_action)
        # 3. the two losses and their gradients
        theta, phi = _flat(self._params), _flat(self._critic_params)
        td_loss = (self.critic(windows[:-1], previous[:-1], chosen[:-1]) - td_target).pow(2).mean()
        actor_loss = -self.critic(windows, previous, actions).mean()
        critic_loss = td_loss
        if config.weight_decay > 0:
            actor_loss = actor_loss + 0.5 * config.weight_decay * theta.pow(2).sum()
            critic_loss = critic_loss + 0.5 * config.weight_decay * phi.pow(2).sum()
        if prox is not None:
            center, coef = prox
            actor_loss = actor_loss + 0.5 * coef * (theta - center[: theta.numel()]).pow(2).sum()
            if center.numel() > theta.numel():
                critic_loss = critic_loss + 0.5 * coef * (phi - center[theta.numel():]).pow(2).sum()
        actor_grad = _flat(list(torch.autograd.grad(actor_loss, self._params))).unsqueeze(0)
        critic_grad = _flat(list(torch.autograd.grad(critic_loss, self._critic_params))).unsqueeze(0)
        # 4. Adam, the Fed+ mix, soft target updates, the PVM
        theta, phi = theta.detach().unsqueeze(0), phi.detach().unsqueeze(0)
        adam_step(theta, actor_grad, self.adam, learning_rate=config.learning_rate, betas=config.adam_betas,
                  eps=config.adam_eps)
        adam_step(phi, critic_grad, self.critic_adam, learning_rate=config.critic_learning_rate,
                  betas=config.adam_betas, eps=config.adam_eps)
        if mix is not None:
            (target, kappa), kappa_critic = mix
            fedplus_mix(theta, target[:, : theta.shape[1]], kappa, 1.0 - kappa)
            if target.shape[1] > theta.shape[1]:
                fedplus_mix(phi, target[:, theta.shape[1]:], kappa_critic, 1.0 - kappa_critic)
        _load(self._params, theta[0])
        _load(self._critic_params, phi[0])
        with torch.no_grad():
            for target_net, net in ((self.target_actor, self.net), (self.target_critic, self.critic)):
                for p_target, p in zip(target_net.parameters(), net.parameters(), strict=True):
                    p_target.lerp_(p, config.tau)
        self.pvm.write(offsets + market.first_day, chosen.cpu().numpy())
        self.step_count += 1
        return StepRecord(step=self.step_count, mean_log_return=float(rewards.mean()), loss=float(td_loss.detach()),
                          grad_norm=float(torch.linalg.vector_norm(torch.cat([actor_grad, critic_grad], dim=1))),
                          cash=float(actions.detach()[:, 0].mean()))

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResult:
        """Load the federated vector ``params`` (``None`` keeps the networks), run ``steps`` steps under
        ``objective`` (the Fed+ mix with each network's own ``κ = 1/(1 + ησ)``, or the proximal term)."""
        steps = check_int(steps, "steps", minimum=0)
        objective = objective or LocalObjective()
        objective.check_size(self.n_parameters)
        mix = None
        pull, pull_critic = objective.mix(self.config.learning_rate), objective.mix(self.config.critic_learning_rate)
        if pull is not None and pull_critic is not None:
            kappa, kappa_critic = (torch.tensor([[p[1]]], device=self.config.device) for p in (pull, pull_critic))
            mix = ((self._row(pull[0]), kappa), kappa_critic)
        penalty = objective.penalty()
        prox = None if penalty is None else (self._row(penalty[0])[0], torch.tensor(penalty[1], dtype=torch.float32))
        if params is not None:
            params = np.asarray(params, dtype=np.float64)
            actor = flat_parameters(self.net).size
            set_flat_parameters(self.net, params[:actor])
            if params.size > actor:
                set_flat_parameters(self.critic, params[actor:])
        records = [self._step(mix, prox) for _ in range(steps)]
        return LocalTrainResult(params=self.federated_vector(), records=records)

    def federated_vector(self) -> np.ndarray:
        """The actor's flat parameters, then (``share: actor_critic``) the critic's."""
        actor = flat_parameters(self.net)
        return np.concatenate([actor, flat_parameters(self.critic)]) if self.config.share == "actor_critic" else actor

    def state_dict(self) -> dict[str, Any]:
        """:meth:`DPGTrainer.state_dict` and the critic, the target networks and the critic's Adam state."""
        return {**super().state_dict(), **copy.deepcopy({
            "critic": self.critic.state_dict(), "target_actor": self.target_actor.state_dict(),
            "target_critic": self.target_critic.state_dict(), "critic_adam": self.critic_adam.state_dict(),
            "noise": self.noise.bit_generator.state})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        state = copy.deepcopy(state)
        self.critic.load_state_dict(state["critic"])
        self.target_actor.load_state_dict(state["target_actor"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.critic_adam.load_state_dict(state["critic_adam"])
        self.noise.bit_generator.state = state["noise"]
