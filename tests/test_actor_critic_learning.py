"""What the actor-critic learner learns: the reward's action gradient (γ = 0), the discounted return of a
fixed policy, and to hold the asset that rises every day."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from engines import one_batch

from portfed.agents import AgentConfig
from portfed.agents.adam import AdamState, adam_step
from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.learner import actor_vector
from portfed.agents.market import market_tensors
from portfed.agents.networks import build_network, set_flat_parameters
from portfed.agents.objective import log_returns
from portfed.data.panel import PricePanel


def _panel(close: np.ndarray) -> PricePanel:
    tickers = tuple(f"S{i}" for i in range(close.shape[1]))
    return PricePanel(close[:, :, None], pd.bdate_range("2020-01-01", periods=len(close)), tickers, ("close",))


def _tangent(grad: torch.Tensor) -> torch.Tensor:
    """The component on the simplex (the softmax's Jacobian ignores a constant added to every entry)."""
    return grad - grad.mean(dim=-1, keepdim=True)


def test_with_gamma_zero_the_fitted_critic_has_the_rewards_action_gradient() -> None:
    rng = np.random.default_rng(1)
    panel = _panel(100 * np.exp(np.cumsum(0.05 * rng.standard_normal((30, 2)), axis=0)))
    config = AgentConfig(window=5, batch_size=2, learner="actor_critic", gamma=0.0, commission=0.0, critic_hidden=16)
    engine = BatchedDPGTrainer(config, [panel], [0])
    history, previous, y_now, y_next, _, _ = one_batch(engine, np.array([0]), np.array([5]), engine._offsets)
    split = engine.net.n_parameters
    theta, phi = engine._theta[:, :split], engine._theta[:, split:].clone()
    # 64 portfolios per state, uniform on the simplex; with γ = 0 the TD(0) target r + γ Q' is the reward.
    n = 64
    actions = torch.from_numpy(np.random.default_rng(0).dirichlet(np.ones(3), size=(n, 2)).astype(np.float32))
    states = history.expand(n, -1, -1, -1), previous.expand(n, -1, -1)
    targets = log_returns(actions, states[1], y_now.expand(n, -1, -1), y_next.expand(n, -1, -1), 0.0)

    def action_gradients() -> tuple[torch.Tensor, torch.Tensor]:
        chosen = engine.net(theta, history, previous[..., 1:]).detach().requires_grad_(True)
        (grad_q,) = torch.autograd.grad(engine.critic(phi, history, previous, chosen).sum(), chosen)
        chosen = chosen.detach().requires_grad_(True)
        (grad_r,) = torch.autograd.grad(log_returns(chosen, previous, y_now, y_next, 0.0).sum(), chosen)
        return _tangent(grad_q), _tangent(grad_r)

    def error() -> float:
        grad_q, grad_r = action_gradients()
        return float((grad_q - grad_r).norm() / grad_r.norm())

    assert error() > 0.5  # the untrained critic knows nothing of the reward
    adam = AdamState.zeros_like(phi)
    for i in range(2000):
        row = phi.detach().requires_grad_(True)
        loss = (engine.critic(row.expand(n, -1), *states, actions) - targets).pow(2).mean()
        (grad,) = torch.autograd.grad(loss, row)
        adam_step(phi, grad, adam, learning_rate=3e-3 if i < 1200 else 1e-3, betas=(0.9, 0.999), eps=1e-8)
    grad_q, grad_r = action_gradients()
    assert error() < 0.05
    assert float(torch.nn.functional.cosine_similarity(grad_q.flatten(), grad_r.flatten(), dim=0)) > 0.99


def test_on_a_fixed_policy_td_error_falls_and_q_is_the_discounted_return() -> None:
    days, gamma = 40, 0.5
    up = np.where(np.arange(days) % 2 == 0, 1.05, 1 / 1.05)  # a market that repeats every two days
    panel = _panel(100 * np.stack([np.cumprod(up), np.cumprod(up ** -0.5)], axis=1))
    config = AgentConfig(window=4, batch_size=8, learner="actor_critic", gamma=gamma, commission=0.0,
                         learning_rate=1e-9, critic_learning_rate=1e-2, tau=0.1, beta=0.05, weight_decay=0.0,
                         exploration_noise=0.0)  # an actor that does not move: a fixed policy
    engine = BatchedDPGTrainer(config, [panel], [0])
    td = [r.loss for r in engine.local_train(0, None, 600).records]
    assert np.mean(td[-20:]) < 1e-3 * np.mean(td[:20])
    # the rewards the policy earned on the series (its PVM rows), and their discounted sums by hand
    n_days, first = int(engine.stacks.n_days[0]), config.window - 1
    held = torch.from_numpy(engine.pvm_weights(0))
    rewards = log_returns(held[first : first + n_days], held[first - 1 : first - 1 + n_days],
                          engine.stacks.y_now[:n_days], engine.stacks.y_next[:n_days], 0.0).numpy()
    start = 4
    returns = [sum(gamma**j * rewards[t + j] for j in range(n_days - t)) for t in range(start, start + 8)]
    history, previous, _, _, _, _ = one_batch(engine, np.array([0]), np.array([start]), engine._offsets)
    split = engine.net.n_parameters
    with torch.no_grad():
        action = engine.net(engine._theta[:, :split], history, previous[..., 1:])
        value = engine.critic(engine._theta[:, split:], history, previous, action)[0].numpy()
    assert np.abs(np.diff(returns)).min() > 0.01  # the returns differ from day to day ...
    np.testing.assert_allclose(value, returns, atol=2e-4)  # ... and Q has learned each of them


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_learns_to_hold_the_asset_that_rises_every_day() -> None:
    days = 80
    panel = _panel(100 * np.stack([1.05 ** np.arange(days), 0.98 ** np.arange(days)], axis=1))
    config = AgentConfig(window=5, batch_size=10, learner="actor_critic", gamma=0.99, tau=0.05, learning_rate=1e-3,
                         commission=0.0, beta=0.05)
    engine = BatchedDPGTrainer(config, [panel], [2])
    engine.local_train(0, None, 1500)
    net = build_network(config, 0)
    set_flat_parameters(net, actor_vector(config, engine.parameters()[0]))
    market = market_tensors(panel, config)
    held = torch.tensor([[1.0, 0.0, 0.0]])
    with torch.no_grad():  # the greedy policy through the series, from cash
        for day in range(market.n_days):
            held = net(market.windows[day : day + 1], held[:, 1:])
    assert float(held[0, 1]) > 0.9
