"""The DPG objective of an EIIE agent, written once for both engines (Jiang, Xu & Liang 2017; paper 001 §9.2).

Notation (DESIGN.md §2): assets ``1..m`` plus cash at index 0; ``y_{t+1} = v_{t+1} / v_t`` with a
cash relative of 1.  On decision day ``t`` the agent holds the drifted portfolio

    w'_t = (y_t ⊙ w_{t−1}) / (y_t · w_{t−1}),                       (paper 001 §9.2)

pays the linear transaction factor

    μ_t = 1 − c Σ_{i≥1} |w'_{t,i} − w_{t,i}|       (linear form of Jiang's μ; paper 001 §9.2)

to move to ``w_t`` and earns ``r_t = ln(μ_t · y_{t+1} · w_t)`` (paper 001 §9.2 writes the same
reward one period shifted, ``ln(β_t y_t · w_{t−1})``).  The training objective of party k is the
batch mean reward (Jiang eq. 22, with the linear μ), maximised by gradient ascent on its weights θ_k
(paper 001 eq. 5):

    L_k(θ_k) = −(1/B) Σ_t r_t + (λ/2) ‖θ_k‖² + (ρ_k/2) ‖θ_k − c_k‖²,

the last term only when a federation algorithm asks for a proximal centre (FedProx, FedAMP).
Every function works over any leading batch shape, so one party's batch ``(B, m + 1)`` and K
parties' stacked batches ``(K, B, m + 1)`` go through the same code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from portfed.agents.config import AgentConfig
from portfed.agents.limits_torch import limit_actions
from portfed.agents.market import market_tensors
from portfed.agents.networks import EIIENetwork
from portfed.data.panel import PricePanel

if TYPE_CHECKING:
    from portfed.agents.batched_head import BatchedEIIE


def drifted_weights(previous: torch.Tensor, y_now: torch.Tensor) -> torch.Tensor:
    """``w'_t = (y_t ⊙ w_{t−1}) / (y_t · w_{t−1})`` over the last axis (m + 1, cash first)."""
    grown = y_now * previous
    return grown / grown.sum(dim=-1, keepdim=True)


def linear_cost_factor(drifted: torch.Tensor, weights: torch.Tensor, commission: float) -> torch.Tensor:
    """``μ_t = 1 − c Σ_{i≥1} |w'_{t,i} − w_{t,i}|`` (cash excluded), differentiable in ``w_t``."""
    return 1.0 - commission * (drifted[..., 1:] - weights[..., 1:]).abs().sum(dim=-1)


def log_returns(
    weights: torch.Tensor,
    previous: torch.Tensor,
    y_now: torch.Tensor,
    y_next: torch.Tensor,
    commission: float,
) -> torch.Tensor:
    """``r_t = ln(μ_t · y_{t+1} · w_t)`` with the linear ``μ_t``; all inputs ``(..., m + 1)``.

    Args:
        weights: ``w_t``, the portfolios chosen on day ``t``.
        previous: ``w_{t−1}``, the portfolios chosen the day before.
        y_now: ``y_t = v_t / v_{t−1}``, drifting ``w_{t−1}`` into ``w'_t``.
        y_next: ``y_{t+1} = v_{t+1} / v_t``, the return earned by ``w_t``.
        commission: ``c``.

    Returns:
        ``(...)`` log returns.
    """
    mu = linear_cost_factor(drifted_weights(previous, y_now), weights, commission)
    return torch.log(mu * (y_next * weights).sum(dim=-1))


def fedplus_mix(theta: torch.Tensor, target: torch.Tensor, kappa: torch.Tensor, rest: torch.Tensor) -> None:
    """The Fed+ mix after a local step, ``θ ← κ θ + (1 − κ) z`` (paper 003 eq. 14), in place.

    ``theta`` and ``target`` ``(K, d)``; ``kappa`` and ``rest = 1 − κ`` ``(K, 1)``, computed once per call.
    """
    with torch.no_grad():
        theta.mul_(kappa).add_(rest * target)


def dpg_loss(
    theta: torch.Tensor,
    weights: torch.Tensor,
    previous: torch.Tensor,
    y_now: torch.Tensor,
    y_next: torch.Tensor,
    config: AgentConfig,
    prox: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``L_k(θ_k)`` of K parties (module docstring) and their rewards ``r_t``.

    Args:
        theta: ``(K, d)`` flat parameters (differentiable: the weight decay and proximal terms).
        weights, previous, y_now, y_next: ``(K, B, m + 1)`` as in :func:`log_returns`.
        config: ``commission`` ``c`` and ``weight_decay`` ``λ``.
        prox: ``(centres (K, d), coefficients (K,))`` of the proximal term, or ``None``.

    Returns:
        ``(K,)`` losses and ``(K, B)`` rewards.
    """
    rewards = log_returns(weights, previous, y_now, y_next, config.commission)
    return with_penalties(-rewards.mean(dim=-1), theta, config, prox), rewards


def with_penalties(loss: torch.Tensor, theta: torch.Tensor, config: AgentConfig,
                   prox: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """``loss + (λ/2) ‖θ‖² + (ρ/2) ‖θ_shared − c‖²`` of K parties (``(K,)``; ``theta`` ``(K, d)``).

    The proximal centres ``(K, d_s)`` cover the first ``d_s`` entries of ``θ``: the whole row, or the
    federated part of an actor-critic party's row (:mod:`portfed.agents.learner`).
    """
    if config.weight_decay > 0:
        loss = loss + 0.5 * config.weight_decay * theta.pow(2).sum(dim=1)
    if prox is not None:
        center, coef = prox
        shared = theta if center.shape[1] == theta.shape[1] else theta[:, : center.shape[1]]
        loss = loss + 0.5 * coef * (shared - center).pow(2).sum(dim=1)
    return loss


def penalty_gradient(theta: torch.Tensor, config: AgentConfig,
                     prox: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor | None:
    """``∇_θ`` of :func:`with_penalties`' terms, ``λ θ + ρ (θ − c)`` ``(K, d)``, or ``None`` without penalties:
    what autograd adds to the reward's gradient in the direct learner's step without autograd
    (:meth:`~portfed.agents.batched_head.BatchedEIIE.reward_gradient`), whose proximal centres cover the
    whole row (only an actor-critic row has columns beyond them, and it trains through autograd)."""
    grad = config.weight_decay * theta if config.weight_decay > 0 else None
    if prox is not None:
        center, coef = prox
        pull = coef.unsqueeze(1) * (theta - center)
        grad = pull if grad is None else grad + pull
    return grad


def greedy_log_return(net: EIIENetwork, config: AgentConfig, panel: PricePanel) -> float:
    """Mean daily log return of the greedy policy of ``net`` run through ``panel`` day by day.

    The policy starts all in cash, feeds its own previous portfolio back (not a PVM), trades on
    every decision day ``t = l − 1 … T − 2`` (within the agent's risk limits, :mod:`portfed.agents.limits_torch`)
    and is charged the training objective's linear ``μ_t``
    (within ``O(c²)`` of the exact μ of Jiang eq. 14 that the environment uses):
    ``(1/N) Σ_t ln(μ_t · y_{t+1} · w_t)``.  ``net`` is left in the train/eval mode it was in.
    """
    market = market_tensors(panel, config)
    all_cash = torch.zeros(1, panel.n_assets + 1, device=config.device)
    all_cash[0, 0] = 1.0
    previous, chosen = all_cash, []
    was_training = net.training
    net.eval()
    with torch.no_grad():
        for k in range(market.n_days):
            weights = net(market.windows[k : k + 1], previous[:, 1:])
            if config.limits.active:  # the portfolio traded within agent.max_weight / max_turnover
                weights = limit_actions(weights, previous, market.y_now[k : k + 1], config.limits)
            chosen.append(weights)
            previous = weights
        weights = torch.cat(chosen)
        rewards = log_returns(weights, torch.cat([all_cash, weights[:-1]]), market.y_now, market.y_next,
                              config.commission)
    net.train(was_training)
    return float(rewards.double().mean())


def greedy_log_returns(net: BatchedEIIE, config: AgentConfig, panel: PricePanel, theta: torch.Tensor) -> torch.Tensor:
    """:func:`greedy_log_return` of ``M`` parameter vectors at once: the rows of ``theta`` ``(M, d)`` (flat EIIE
    parameters) run through ``panel`` day by day as ``M`` rows of the batched EIIE ``net``, one call a day
    instead of ``M``; ``(M,)`` float64.  The same rollout — all in cash at the start, each row's own previous
    portfolio fed back, the risk limits, the linear μ_t — equal to :func:`greedy_log_return` of each row
    to float32 round-off (the batched EIIE's, ``tests/test_greedy_rollout.py``).  Paper 000 Fig. 1c evaluates
    a party's 11 interpolated models and the previous global model this way."""
    market = market_tensors(panel, config)
    rows = net.layout(market.windows)  # (days, m, input_width)
    n, m = theta.shape[0], panel.n_assets
    all_cash = torch.zeros(n, m + 1, device=theta.device)
    all_cash[:, 0] = 1.0
    previous, chosen = all_cash, []
    with torch.no_grad(), net.threads():
        for k in range(market.n_days):
            weights = net(theta, rows[k].expand(n, 1, *rows.shape[1:]), previous[:, None, 1:])[:, 0]
            if config.limits.active:
                weights = limit_actions(weights, previous, market.y_now[k : k + 1], config.limits)
            chosen.append(weights)
            previous = weights
        weights = torch.stack(chosen, dim=1)  # (M, days, m + 1)
        rewards = log_returns(weights, torch.cat([all_cash[:, None], weights[:, :-1]], dim=1), market.y_now,
                              market.y_next, config.commission)
    return rewards.double().mean(dim=1)
