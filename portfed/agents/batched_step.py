"""One local iteration of the parties the engine trains together (:class:`~portfed.agents.batched.BatchedDPGTrainer`).

A local-training call uploads its per-step inputs once (:class:`CallTables`), gathers the state of
its active parties (:class:`ActiveParties`: views of the engine's rows when every party trains,
gathered copies otherwise) and runs :meth:`LocalStep.run` once per iteration ``j``:

* the batch of each party from its stacks (:meth:`~portfed.agents.stacks.PartyStacks.gather`);
* the loss ``L_k`` of party k (:func:`~portfed.agents.objective.dpg_loss`, or the actor-critic's
  :func:`~portfed.agents.actor_critic.actor_critic_loss`) and its gradient — from the fused kernels
  without autograd (:meth:`BatchedEIIE.reward_gradient` plus
  :func:`~portfed.agents.objective.penalty_gradient`) or one backward pass of ``Σ_k L_k``,
  ``chunk`` parties per pass;
* :meth:`LocalStep.update`: Adam on each network's columns, the Fed+ mix
  ``θ ← κ_k θ + (1 − κ_k) z_k`` with ``κ_k = 1/(1 + ησ_k)`` (paper 003 eq. 14) on the federated
  columns, the actor-critic's soft target updates;
* the chosen portfolios written back to the PVMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from portfed.agents.actor_critic import actor_critic_loss, soft_update
from portfed.agents.adam import AdamState, adam_step
from portfed.agents.batched_critic import BatchedCritic
from portfed.agents.batched_head import BatchedEIIE
from portfed.agents.config import AgentConfig
from portfed.agents.critic_state import CriticState
from portfed.agents.limits_torch import limit_actions
from portfed.agents.objective import dpg_loss, fedplus_mix, penalty_gradient, with_penalties
from portfed.agents.stacks import PartyStacks


@dataclass
class CallTables:
    """A local call's per-step inputs on the device, uploaded once so that a step moves nothing from the
    host: the stack rows of every party's batch start (``(K, E)`` windows and PVM,
    :meth:`PartyStacks.start_rows`), its padding mask, and the actor's (and critic's) Adam bias corrections
    ``(E, K, 1)`` (:meth:`AdamState.corrections`)."""

    window_rows: torch.Tensor
    pvm_rows: torch.Tensor
    padded: torch.Tensor | None
    actor: tuple[torch.Tensor, torch.Tensor]
    critic: tuple[torch.Tensor, torch.Tensor] | None

    def subset(self, index: torch.Tensor) -> CallTables:
        def rows(pair: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor] | None:
            return None if pair is None else (pair[0][:, index], pair[1][:, index])

        return CallTables(self.window_rows[index], self.pvm_rows[index],
                          None if self.padded is None else self.padded[index], rows(self.actor),  # type: ignore[arg-type]
                          rows(self.critic))

    def at(self, j: int) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor],
                                  tuple[torch.Tensor, torch.Tensor] | None]:
        """Step ``j``'s rows: window and PVM rows ``(K,)``, the actor's and the critic's corrections ``(K, 1)``."""
        critic = None if self.critic is None else (self.critic[0][j], self.critic[1][j])
        return self.window_rows[:, j], self.pvm_rows[:, j], (self.actor[0][j], self.actor[1][j]), critic


@dataclass
class ActiveParties:
    """The state of the parties trained together in one step (views or gathered copies) and their plan;
    ``critic`` only with the actor-critic learner.  ``tables``: the whole call's per-step inputs, uploaded
    once (:class:`CallTables`)."""

    theta: torch.Tensor
    adam: AdamState
    parties: np.ndarray
    mix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
    prox: tuple[torch.Tensor, torch.Tensor] | None
    tables: CallTables
    critic: CriticState | None = None

    def subset(self, rows: np.ndarray) -> ActiveParties:
        index = torch.from_numpy(rows).to(self.theta.device)
        mix = None if self.mix is None else tuple(t[index] for t in self.mix)
        prox = None if self.prox is None else (self.prox[0][index], self.prox[1][index])
        return ActiveParties(self.theta[index], self.adam.rows(rows), self.parties[rows], mix, prox,  # type: ignore[arg-type]
                             self.tables.subset(index), None if self.critic is None else self.critic.rows(rows))

    def put(self, rows: np.ndarray, part: ActiveParties) -> None:
        self.theta[torch.from_numpy(rows).to(self.theta.device)] = part.theta
        self.adam.put(rows, part.adam)
        if self.critic is not None and part.critic is not None:
            self.critic.put(rows, part.critic)


class LocalStep:
    """Local iteration ``j`` of a call's active parties (module doc), on the engine's network, critic and stacks.

    Args:
        config: the agent hyper-parameters.
        net: the engine's batched EIIE; ``critic``: its batched critic (the actor-critic learner) or ``None``.
        stacks: the parties' market data and PVMs.
        offsets: ``0 … B − 1`` on the device (a batch's days after its start).
        chunk: parties per forward/backward pass.
        n_actor, n_shared, row_size: the actor's columns, the federated vector's and a party's whole row's.
    """

    def __init__(self, config: AgentConfig, net: BatchedEIIE, critic: BatchedCritic | None, stacks: PartyStacks,
                 offsets: torch.Tensor, chunk: int, n_actor: int, n_shared: int, row_size: int) -> None:
        self.config, self.net, self.critic, self.stacks = config, net, critic, stacks
        self._offsets, self._chunk = offsets, chunk
        self._n_actor, self._n_shared, self._row_size = n_actor, n_shared, row_size

    def run(self, active: ActiveParties, j: int, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Local iteration ``j`` of the parties in ``active``; returns ``(K, 4)``: mean r, loss, ‖g‖ (the
        actor-critic's loss: its mean squared TD error) and the mean cash weight of the greedy portfolios."""
        window_rows, start_pvm, actor, critic = active.tables.at(j)
        # kernel calls without autograd (batched_head.py); risk limits project the head's output, which the
        # fused kernels compute inside, so a limited agent takes the autograd path (limits_torch.py)
        fused = self.critic is None and self.net.fused_step and not self.config.limits.active
        history, previous, y_now, y_next, pvm_rows, padded = self.stacks.gather(
            window_rows, start_pvm, active.tables.padded, self._offsets, windows=not fused)
        parts = []
        for lo in range(0, active.parties.size, self._chunk):
            rows = slice(lo, lo + self._chunk)
            prox = None if active.prox is None else (active.prox[0][rows], active.prox[1][rows])
            mask = None if padded is None else padded[rows]
            if fused:
                theta = active.theta[rows]
                weights, rewards, grad = self.net.reward_gradient(theta, self.stacks.windows, window_rows[rows],
                                                                  previous[rows], y_now[rows], y_next[rows], mask,
                                                                  self.config.commission)
                loss = with_penalties(-rewards.mean(dim=-1), theta, self.config, prox)
                penalty = penalty_gradient(theta, self.config, prox)
                if penalty is not None:
                    grad += penalty
                parts.append((weights, loss, rewards, grad, weights[..., 0].mean(dim=1)))
                continue
            assert history is not None  # gathered unless fused
            theta = active.theta[rows].detach().requires_grad_(True)
            if self.critic is None or active.critic is None:
                weights = self.net(theta, history[rows], previous[rows, :, 1:], mask)
                if self.config.limits.active:
                    weights = limit_actions(weights, previous[rows], y_now[rows], self.config.limits, mask)
                loss, rewards = dpg_loss(theta, weights, previous[rows], y_now[rows], y_next[rows], self.config, prox)
                (grad,) = torch.autograd.grad(loss.sum(), theta)
                parts.append((weights.detach(), loss.detach(), rewards.detach(), grad, weights.detach()[..., 0].mean(dim=1)))
            else:
                batch = (history[rows], previous[rows], y_now[rows], y_next[rows])
                result = actor_critic_loss(self.net, self.critic, theta, active.critic.targets[rows], batch, mask,
                                           self.config, prox, None if noise is None else noise[rows])
                (grad,) = torch.autograd.grad(result.loss.sum(), theta)
                parts.append((result.weights, result.td_loss, result.rewards, grad, result.cash))
        weights, loss, rewards, grad, cash = parts[0] if len(parts) == 1 else (torch.cat(c) for c in zip(*parts, strict=True))
        self.update(active, grad, actor, critic)
        with torch.no_grad():
            self.stacks.write_pvm(pvm_rows, weights)
            return torch.stack([rewards.mean(dim=1), loss, torch.linalg.vector_norm(grad, dim=1), cash], dim=1)

    def update(self, active: ActiveParties, grad: torch.Tensor, actor: tuple[torch.Tensor, torch.Tensor],
               critic: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Adam on each network's columns (with this step's bias corrections ``actor``, ``critic``), the
        Fed+ mix on the federated ones, the soft target updates."""
        config, split = self.config, self._n_actor
        if active.critic is None:
            adam_step(active.theta, grad, active.adam, learning_rate=config.learning_rate, betas=config.adam_betas,
                      eps=config.adam_eps, corrections=actor)
        else:
            adam_step(active.theta[:, :split], grad[:, :split], active.adam, learning_rate=config.learning_rate,
                      betas=config.adam_betas, eps=config.adam_eps, corrections=actor)
            adam_step(active.theta[:, split:], grad[:, split:], active.critic.adam,
                      learning_rate=config.critic_learning_rate, betas=config.adam_betas, eps=config.adam_eps,
                      corrections=critic)
        if active.mix is not None:
            shared = active.theta if self._n_shared == self._row_size else active.theta[:, : self._n_shared]
            fedplus_mix(shared, *active.mix)
        if active.critic is not None:
            soft_update(active.critic.targets, active.theta, config.tau)
