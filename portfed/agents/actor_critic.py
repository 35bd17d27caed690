"""The actor-critic learner: deterministic policy gradient with a critic (Silver et al. 2014; Lillicrap et al. 2016).

Paper 000 §8.2: each party trains "its RL agent using the deterministic policy gradient [Silver et
al., 2014]" on an MDP with "discount factor γ = 0.99"; paper 001 §9 states the objective
``J(μ_θ) = E[Σ_t γ^{t−1} r(s_t, μ_θ(s_t))]``.  The actor is the party's EIIE ``μ_θ(s)``
(``s_t = (X_t, w_{t−1})``, the price window and the previous portfolio from the PVM), the critic is
:class:`~portfed.agents.critic.EIIECritic` ``Q_φ(s, a)``; ``θ'`` and ``φ'`` are target networks.  On a
batch of ``B`` consecutive decision days ``t_1 … t_B`` (the online stochastic batch) with the actions
``a_t = μ_θ(s_t)`` (or, exploring, the portfolios ``b_t`` held, below) and rewards ``r_t = ln(μ_t · y_{t+1} · a_t)`` (:func:`~portfed.agents.objective.log_returns`):

* the transitions are the ``B − 1`` pairs of consecutive days ``(s_t, a_t, r_t, s_{t+1})`` with
  ``s_{t+1} = (X_{t+1}, a_t)`` — the next day's window and the portfolio just chosen (which the PVM
  stores for day ``t``);
* TD(0) targets (Lillicrap et al. 2016, Alg. 1)  ``y_t = r_t + γ Q_{φ'}(s_{t+1}, μ_{θ'}(s_{t+1}))``;
* the critic minimises the mean squared TD error  ``L_Q(φ) = (1/(B − 1)) Σ_t (Q_φ(s_t, a_t) − y_t)²``;
* the actor follows the deterministic policy gradient (Silver et al. 2014, Theorem 1, eq. 9:
  ``∇_θ J = E[∇_θ μ_θ(s) ∇_a Q^μ(s, a)|_{a = μ_θ(s)}]``, with the critic in place of ``Q^μ`` as in their §4)
  ``∇_θ J ≈ (1/B) Σ_t ∇_θ μ_θ(s_t) ∇_a Q_φ(s_t, a)|_{a = μ_θ(s_t)}``, i.e. it minimises
  ``L_μ(θ) = −(1/B) Σ_t Q_φ(s_t, μ_θ(s_t))`` with ``φ`` held fixed;
* after the Adam steps, the soft target updates ``θ' ← τθ + (1 − τ)θ'``, ``φ' ← τφ + (1 − τ)φ'``
  (Lillicrap et al. 2016, Alg. 1).

Both gradients are taken at the step's ``(θ, φ)`` — Alg. 1's critic and actor updates applied
together — from one backward pass of ``L_Q + L_μ`` plus the penalties of
:func:`~portfed.agents.objective.with_penalties` on the party's row ``[θ | φ]``: ``L_Q`` reads the
actions detached and ``L_μ`` the critic detached, so each loss reaches only its own network.

Exploration (``exploration_noise`` σ, :func:`explore`): the party holds ``b_t = (1 − σ) a_t + σ d_t``
with ``d_t ~ Dirichlet(1, …, 1)`` a random portfolio from its own seeded generator, and the critic
learns from ``(s_t, b_t, r_t(b_t), s_{t+1} = (X_{t+1}, b_t))`` (off-policy DPG, Silver et al. 2014 §4.2);
the actor's gradient is still taken at ``μ_θ(s_t)``.  The reward is deterministic, so one
might expect to need none — the market does not respond to the trades and the states come from the
prices.  But the critic is asked for ``∇_a Q`` at ``a = μ_θ(s)``, and the greedy actions give it one
action per state: its action-gradient is then an extrapolation.  Measured on a two-asset market whose
first asset rises 5 % a day and the second falls 2 % (``tests/test_actor_critic_learning.py``'s market,
1,500 steps, γ = 0.9, τ = 0.05, learning rates 1e-3, seeds 1–3): with σ = 0 no seed learns to hold the
rising asset (the greedy policy ends in cash or near uniform); σ = 0.1 two of three, σ = 0.2 and 0.3
all three (σ = 0.3 also at γ = 0.99; at γ = 0.99 with the default τ = 0.005, one seed of two).  So the default is σ = 0.3; σ = 0 turns exploration off.  Noise on the
scores (``b ∝ a ⊙ exp(σε)``) was tried first: it cannot leave a corner of the simplex, where an early,
wrong critic drives the actor.  With ``γ = 0``, ``Q_φ`` is a regression of the reward on ``(s, a)``,
whose action gradient is the direct learner's ``∇_a r`` when the actions cover the simplex.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from portfed.agents.batched_critic import BatchedCritic
from portfed.agents.batched_head import BatchedEIIE
from portfed.agents.config import AgentConfig
from portfed.agents.limits_torch import limit_actions
from portfed.agents.objective import log_returns, with_penalties


@dataclass(frozen=True)
class ActorCriticLoss:
    """One batch's loss of K parties (``(K,)``, differentiable in their rows), the chosen portfolios
    ``(K, B, m + 1)`` (the held ones, exploration included), the rewards ``(K, B)``, the mean squared TD
    errors ``(K,)`` and the mean cash weight of the greedy portfolios ``μ_θ(s_t)`` ``(K,)``."""

    loss: torch.Tensor
    weights: torch.Tensor
    rewards: torch.Tensor
    td_loss: torch.Tensor
    cash: torch.Tensor


def explore(weights: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
    """The portfolio held under exploration, ``b = (1 − σ) a + σ d`` with ``d`` a random portfolio
    (``noise``, uniform on the simplex: ``Dirichlet(1, …, 1)``, zero on padded assets).  ``b`` stays on the
    simplex and, unlike noise on the scores, reaches every asset even from a corner of it."""
    return torch.lerp(weights, noise, sigma)


def actor_critic_loss(actor: BatchedEIIE, critic: BatchedCritic, rows: torch.Tensor, targets: torch.Tensor,
                      batch: tuple[torch.Tensor, ...], padded: torch.Tensor | None, config: AgentConfig,
                      prox: tuple[torch.Tensor, torch.Tensor] | None = None,
                      noise: torch.Tensor | None = None) -> ActorCriticLoss:
    """``L_Q + L_μ`` plus penalties (module docstring) of K parties.

    Args:
        actor, critic: the batched networks; ``rows[:, :actor.n_parameters]`` is ``θ``, the rest ``φ``.
        rows: ``(K, d_a + d_c)`` trained rows (differentiable); ``targets``: their target rows ``[θ' | φ']``.
        batch: input rows ``(K, B, m, width)``, ``w_{t−1}``, ``y_t``, ``y_{t+1}`` ``(K, B, m + 1)``.
        padded: ``(K, 1, m)`` mask of padded assets, or ``None``.
        config: ``gamma``, ``commission``, ``weight_decay``.
        prox: proximal centres over the federated part of the rows and coefficients, or ``None``.
        noise: ``(K, B, m + 1)`` random portfolios ``d`` of the exploration (:func:`explore`), or ``None``.
    """
    history, previous, y_now, y_next = batch
    n_actor = actor.n_parameters
    theta, phi = rows[:, :n_actor], rows[:, n_actor:]
    weights = actor(theta, history, previous[..., 1:], padded)
    if config.limits.active:  # the portfolio traded is the projected one (limits_torch.py)
        weights = limit_actions(weights, previous, y_now, config.limits, padded)
    chosen = weights.detach() if noise is None else explore(weights.detach(), noise, config.exploration_noise)
    if config.limits.active and noise is not None:  # the explored portfolio is traded within the limits too
        chosen = limit_actions(chosen, previous, y_now, config.limits, padded)
    rewards = log_returns(chosen, previous, y_now, y_next, config.commission)
    with torch.no_grad():  # y_t = r_t + γ Q_φ'(s_{t+1}, μ_θ'(s_{t+1})),  s_{t+1} = (X_{t+1}, a_t)
        later, held = history[:, 1:], chosen[:, :-1]
        target_theta, target_phi = targets[:, :n_actor], targets[:, n_actor:]
        next_action = actor(target_theta, later, held[..., 1:], padded)
        if config.limits.active:
            next_action = limit_actions(next_action, held, y_next[:, :-1], config.limits, padded)
        next_value = critic(target_phi, later, held, next_action, padded)
        td_target = rewards[:, :-1] + config.gamma * next_value
    k, b, m = history.shape[:3]
    maps = critic.maps(phi, history)  # (K, B·m, D): days in order
    value = critic.head(phi, maps[:, : (b - 1) * m], previous[:, :-1], chosen[:, :-1], padded)
    td_loss = (value - td_target).pow(2).mean(dim=-1)
    actor_loss = -critic.head(phi.detach(), maps.detach(), previous, weights, padded).mean(dim=-1)
    loss = with_penalties(td_loss + actor_loss, rows, config, prox)
    return ActorCriticLoss(loss=loss, weights=chosen, rewards=rewards, td_loss=td_loss.detach(),
                           cash=weights.detach()[..., 0].mean(dim=-1))


def exploration_generator(seed: int) -> np.random.Generator:
    """Party ``seed``'s generator of exploration portfolios (a stream apart from its batch sampler's)."""
    return np.random.default_rng(np.random.SeedSequence([seed, 2]))


def soft_update(targets: torch.Tensor, rows: torch.Tensor, tau: float) -> None:
    """``θ' ← τθ + (1 − τ)θ'`` on the rows, in place (Lillicrap et al. 2016, Alg. 1), as ``θ' + τ(θ − θ')``."""
    with torch.no_grad():
        targets.lerp_(rows, tau)
