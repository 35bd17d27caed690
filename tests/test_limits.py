"""Risk limits (:mod:`portfed.agents.limits`): the exact projections against an independent solver."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from portfed.agents.limits import (
    RiskLimits,
    book_before_trade,
    project_capped_simplex,
    project_limited_step,
    turnover,
)

CASES = 150


def reference(v: np.ndarray, held: np.ndarray, cap: float | None, budget: float | None) -> np.ndarray:
    """SLSQP on the smooth reformulation: variables ``(x, s)``, ``s_i >= |x_i − h_i|`` for the assets."""
    n = len(v)
    upper = [1.0] + [1.0 if cap is None else cap] * (n - 1)
    bounds = [(0.0, u) for u in upper] + [(0.0, None)] * (n - 1)
    constraints = [{"type": "eq", "fun": lambda z: z[:n].sum() - 1.0}]
    if budget is not None:
        constraints += [{"type": "ineq", "fun": lambda z: z[n:] - (z[1:n] - held[1:])},
                        {"type": "ineq", "fun": lambda z: z[n:] + (z[1:n] - held[1:])},
                        {"type": "ineq", "fun": lambda z: budget - z[n:].sum()}]
    start = np.concatenate([np.clip(held, 0, upper), np.zeros(n - 1)])
    start[0] += 1 - start[:n].sum()
    result = minimize(lambda z: 0.5 * ((z[:n] - v) ** 2).sum(), start, jac=lambda z: np.concatenate([z[:n] - v, 0 * z[n:]]),
                      method="SLSQP", bounds=bounds, constraints=constraints, options={"ftol": 1e-15, "maxiter": 2000})
    assert result.success, result.message
    return result.x[:n]


def simplex(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.dirichlet(np.full(n, 0.5))


def test_capped_simplex_projection_matches_slsqp() -> None:
    rng = np.random.default_rng(0)
    for case in range(CASES):
        n = int(rng.integers(2, 12))
        v = rng.normal(0.2, 0.6, n) if case % 2 else simplex(rng, n)
        cap = float(rng.uniform(0.05, 1.0))
        x = project_capped_simplex(v, cap)
        assert x.sum() == pytest.approx(1.0, abs=1e-12) and x.min() >= 0 and x[1:].max() <= cap + 1e-12
        expected = reference(v, np.eye(n)[0], cap, None)
        np.testing.assert_allclose(x, expected, atol=2e-6, err_msg=f"case {case}")
        assert ((x - v) ** 2).sum() <= ((expected - v) ** 2).sum() + 1e-10  # never worse than the solver


def test_turnover_limited_step_matches_slsqp() -> None:
    rng = np.random.default_rng(1)
    binding = 0
    for case in range(CASES):
        n = int(rng.integers(2, 10))
        v, held = simplex(rng, n), simplex(rng, n)
        cap = None if case % 3 == 0 else float(rng.uniform(0.1, 1.0))
        limit = float(rng.uniform(0.01, 1.0))
        x = project_limited_step(v, held, cap, limit)
        minimum = 0.0 if cap is None else float(np.maximum(held[1:] - cap, 0).sum())
        budget = max(limit, minimum)
        assert x.sum() == pytest.approx(1.0, abs=1e-12) and x.min() >= 0
        assert cap is None or x[1:].max() <= cap + 1e-12
        assert turnover(x, held) <= budget + 1e-10
        binding += turnover(x, held) > budget - 1e-9
        expected = reference(v, held, cap, budget)
        np.testing.assert_allclose(x, expected, atol=5e-6, err_msg=f"case {case}")
        assert ((x - v) ** 2).sum() <= ((expected - v) ** 2).sum() + 1e-10
    assert binding > CASES // 3  # the turnover limit is the binding constraint in many cases


def test_limits_leave_feasible_proposals_alone_and_refuse_bad_values() -> None:
    v = np.array([0.1, 0.3, 0.3, 0.3])
    np.testing.assert_allclose(RiskLimits(max_weight=0.3).apply(v), v, atol=1e-15)
    np.testing.assert_allclose(RiskLimits(max_turnover=0.6).apply(v, np.array([0.4, 0.2, 0.2, 0.2])), v, atol=1e-15)
    # A book above the cap: the cap wins over the turnover limit (sell the excess into cash, no more).
    x = RiskLimits(max_weight=0.5, max_turnover=0.01).apply(np.array([0.0, 0.0, 1.0]), np.array([0.2, 0.8, 0.0]))
    np.testing.assert_allclose(x, [0.5, 0.5, 0.0], atol=1e-12)
    for bad in (0, -0.1, 1.5, True, "0.2"):
        with pytest.raises(ValueError, match="max_weight"):
            RiskLimits(max_weight=bad)
    with pytest.raises(ValueError, match="max_turnover"):
        RiskLimits(max_turnover=2.5)
    with pytest.raises(ValueError, match="held"):
        RiskLimits(max_turnover=0.1).apply(v)


def test_book_before_trade_drifts_the_previous_decision() -> None:
    # (features, assets, window) normalized by the last close: asset 1 doubled on the last day, asset 2 flat
    observation = {"history": np.array([[[0.5, 1.0], [1.0, 1.0]]]), "weights": np.array([0.5, 0.25, 0.25])}
    np.testing.assert_allclose(book_before_trade(observation), np.array([0.5, 0.5, 0.25]) / 1.25)
    held = np.array([0.2, 0.3, 0.5])
    np.testing.assert_array_equal(book_before_trade({**observation, "holdings": held}), held)


def test_backtests_of_an_agent_respect_the_limits() -> None:
    import torch

    from portfed.agents import AgentConfig, EIIEPolicy, build_network
    from portfed.data import load_bundled
    from portfed.envs import PortfolioEnv
    from portfed.evaluation import backtest

    panel = load_bundled("djia").select(["L", "O", "X", "A"])
    results = {}
    for limits in ({}, {"max_weight": 0.2, "max_turnover": 0.05}):
        config = AgentConfig(window=5, device="cpu", **limits)
        net = build_network(config, 7)
        with torch.no_grad():
            net.cash.bias.fill_(-3.0)  # an all-asset book, far from cash: the cap binds
        env = PortfolioEnv(panel, window_size=5, commission=config.commission, start=panel.dates[-60])
        results[bool(limits)] = backtest(EIIEPolicy(net, config), env)
    free, limited = results[False], results[True]
    assert free.actions[:, 1:].max() > 0.2 and free.turnover[0] > 0.5  # the limits change something
    assert limited.actions[:, 1:].max() <= 0.2 + 1e-12
    floors = np.maximum(limited.holdings[:, 1:] - 0.2, 0).sum(axis=1)
    assert (limited.turnover <= np.maximum(0.05, floors) + 1e-12).all()
    assert limited.turnover[0] == pytest.approx(0.05, abs=1e-12)  # from all cash, the first buy is limited


def test_the_training_projection_equals_the_exact_one_and_has_its_jacobian() -> None:
    import torch

    from portfed.agents.limits_torch import limit_actions

    rng = np.random.default_rng(3)
    k, b, n = 3, 10, 6
    previous = torch.tensor(rng.dirichlet(np.full(n, 0.7), (k, b)))
    y_now = torch.tensor(np.concatenate([np.ones((k, b, 1)), rng.uniform(0.9, 1.1, (k, b, n - 1))], axis=2))
    logits = torch.tensor(rng.normal(0, 1.5, (k, b, n)), requires_grad=True)
    limits = RiskLimits(max_weight=0.35, max_turnover=0.3)
    x = limit_actions(torch.softmax(logits, -1), previous, y_now, limits)
    grown = (y_now * previous).numpy()
    held = grown / grown.sum(-1, keepdims=True)
    v = torch.softmax(logits, -1).detach().numpy()
    for i in range(k):
        for j in range(b):
            np.testing.assert_allclose(x[i, j].detach().numpy(), limits.apply(v[i, j], held[i, j]), atol=1e-12)
    # The gradient of a smooth function of x against central differences of the exact projection.
    direction = torch.tensor(rng.normal(0, 1, (k, b, n)))
    (grad,) = torch.autograd.grad((x * direction).sum(), logits)

    def objective(z: np.ndarray) -> float:
        w = np.exp(z - z.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        return sum(float(limits.apply(w[i, j], held[i, j]) @ direction.numpy()[i, j]) for i in range(k) for j in range(b))

    z0, eps = logits.detach().numpy(), 1e-6
    for _ in range(12):
        probe = rng.normal(0, 1, z0.shape)
        numeric = (objective(z0 + eps * probe) - objective(z0 - eps * probe)) / (2 * eps)
        assert float((grad.numpy() * probe).sum()) == pytest.approx(numeric, rel=1e-4, abs=1e-6)


def test_a_limited_agent_trains_on_limited_portfolios() -> None:
    from portfed.agents import AgentConfig, BatchedDPGTrainer
    from portfed.data import load_bundled

    panel = load_bundled("djia").select(["L", "O", "X", "A"]).iloc(slice(0, 200))
    for learner in ("direct", "actor_critic"):
        tops = {}
        for limit in (None, 0.15):
            config = AgentConfig(window=5, batch_size=8, learning_rate=1e-3, device="cpu", learner=learner,
                                 max_weight=limit, max_turnover=None if limit is None else 0.1)
            trainer = BatchedDPGTrainer(config, [panel], [0])
            result = trainer.local_train(0, None, 5)
            assert np.isfinite(result.params).all()
            memory = trainer.pvm_weights(0)
            touched = memory[np.abs(memory - memory[0]).sum(axis=1) > 0]  # rows the steps wrote
            assert len(touched) > 0
            tops[limit] = touched[:, 1:].max()
        assert tops[None] > 0.15 >= tops[0.15] - 1e-6, (learner, tops)
