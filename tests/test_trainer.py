"""DPG trainer: the reward and loss against numpy, penalties' gradients, Fed+ mixing, PVM traffic,
checkpoints, panel swaps, greedy evaluation (against numpy and the environment) and the policy."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pandas as pd
import pytest
import torch
from dpg_trainer import DPGTrainer
from engines import random_walk

from portfed.agents import (
    AgentConfig,
    EIIEPolicy,
    GeometricBatchSampler,
    PortfolioVectorMemory,
    flat_parameters,
    linear_cost_factor,
    log_returns,
)
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.envs import PortfolioEnv
from portfed.envs.windows import price_windows
from portfed.federation import LocalObjective

torch.set_num_threads(1)

CONFIG = AgentConfig(network="cnn", window=10, batch_size=8, learning_rate=1e-3, weight_decay=0.0, beta=0.05)


def _grad(trainer: DPGTrainer, loss: torch.Tensor) -> np.ndarray:
    grads = torch.autograd.grad(loss, list(trainer.net.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]).double().numpy()


# ---------------------------------------------------------------------- config
def test_config_defaults_are_the_fed_plus_settings() -> None:
    c = AgentConfig()
    assert (c.network, c.window, c.batch_size, c.learning_rate, c.commission, c.beta) == ("cnn", 30, 50, 5e-5, 0.002, 5e-5)
    assert (c.conv_maps, c.dense_maps, c.hidden_size, c.features) == (2, 20, 20, ("close",))
    assert AgentConfig(features=("low", "close", "high")).features == ("close", "high", "low")


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"network": "gru"}, "network"),
        ({"window": 2}, "window"),
        ({"network": "rnn", "window": 1}, "window"),
        ({"batch_size": 0}, "batch_size"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"weight_decay": -1.0}, "weight_decay"),
        ({"commission": 0.5}, "commission"),
        ({"beta": 0.0}, "beta"),
        ({"features": ("high",)}, "close"),
        ({"features": ("close", "volume")}, "volume"),
        ({"features": ("close", "close")}, "distinct"),
        ({"hidden_size": 2.5}, "hidden_size"),
        ({"device": "nonsense"}, "device"),
    ],
)
def test_config_refuses_bad_values_naming_them(kwargs: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        AgentConfig(**kwargs)


# ---------------------------------------------------------------------- reward
def test_log_returns_match_numpy_over_leading_batch_axes() -> None:
    rng = np.random.default_rng(0)
    shape = (2, 5, 4)  # (parties, days, m + 1): the reward is batched over any leading axes
    w, prev = rng.dirichlet(np.ones(4), size=shape[:2]), rng.dirichlet(np.ones(4), size=shape[:2])
    y_now = np.concatenate([np.ones(shape[:2] + (1,)), rng.uniform(0.9, 1.1, shape[:2] + (3,))], axis=-1)
    y_next = np.concatenate([np.ones(shape[:2] + (1,)), rng.uniform(0.9, 1.1, shape[:2] + (3,))], axis=-1)
    c = 0.01
    drifted = y_now * prev / np.sum(y_now * prev, axis=-1, keepdims=True)
    mu = 1 - c * np.abs(drifted[..., 1:] - w[..., 1:]).sum(axis=-1)
    expected = np.log(mu * np.sum(y_next * w, axis=-1))
    got = log_returns(*(torch.tensor(a) for a in (w, prev, y_now, y_next)), commission=c)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_linear_cost_factor_reference_cases() -> None:
    c = 0.002
    uniform, cash = torch.tensor([0.0, 0.5, 0.5]), torch.tensor([1.0, 0.0, 0.0])
    assert linear_cost_factor(uniform, uniform, c).item() == 1.0
    assert linear_cost_factor(cash, uniform, c).item() == pytest.approx(1 - c)
    assert linear_cost_factor(uniform, cash, c).item() == pytest.approx(1 - c)


def test_batch_loss_matches_an_independent_numpy_computation() -> None:
    panel = random_walk(ohlc=True)
    config = dataclasses.replace(CONFIG, features=("close", "high", "low"))
    trainer = DPGTrainer(config, panel, seed=0)
    offsets = np.arange(5, 5 + config.batch_size)
    batch = trainer.batch_loss(offsets)

    days = offsets + config.window - 1
    close = panel.feature("close")
    prev = np.tile(PortfolioVectorMemory.initial_weights(3), (len(days), 1)).astype(np.float64)
    windows = price_windows(panel.values, days, config.window)
    with torch.no_grad():
        w = trainer.net(torch.from_numpy(windows), torch.tensor(prev[:, 1:], dtype=torch.float32)).double().numpy()
    ones = np.ones((len(days), 1))
    y_now = np.hstack([ones, close[days] / close[days - 1]])
    y_next = np.hstack([ones, close[days + 1] / close[days]])
    drifted = y_now * prev / np.sum(y_now * prev, axis=1, keepdims=True)
    mu = 1 - config.commission * np.abs(drifted[:, 1:] - w[:, 1:]).sum(axis=1)
    rewards = np.log(mu * np.sum(y_next * w, axis=1))
    np.testing.assert_allclose(batch.log_returns.detach().numpy(), rewards, rtol=1e-5, atol=1e-7)
    assert batch.loss.item() == pytest.approx(-rewards.mean(), rel=1e-4, abs=1e-7)


def test_weight_decay_and_proximal_terms_have_the_right_gradients() -> None:
    panel = random_walk()
    plain = DPGTrainer(CONFIG, panel, seed=1)
    decayed = DPGTrainer(dataclasses.replace(CONFIG, weight_decay=0.3), panel, seed=1)
    offsets = np.arange(10, 18)
    theta = flat_parameters(plain.net)
    g0 = _grad(plain, plain.batch_loss(offsets).loss)
    np.testing.assert_allclose(_grad(decayed, decayed.batch_loss(offsets).loss) - g0, 0.3 * theta, atol=1e-6)

    center = theta + np.random.default_rng(0).standard_normal(theta.size)
    prox = plain.batch_loss(offsets, prox_center=center, prox_coef=0.7)
    diff = _grad(plain, prox.loss) - g0
    assert np.linalg.norm(diff) > 1.0  # the proximal term carries a real gradient (FedAMP needs it)
    np.testing.assert_allclose(diff, 0.7 * (theta - center), rtol=1e-4, atol=1e-5)
    expected_penalty = 0.35 * np.sum((theta - center) ** 2)
    assert prox.loss.item() - plain.batch_loss(offsets).loss.item() == pytest.approx(expected_penalty, rel=1e-4)


# ---------------------------------------------------------------------- local training
def test_a_huge_sigma_lands_on_the_target_and_the_party_mixes_with_its_own_kappa() -> None:
    panel = random_walk()
    trainer = DPGTrainer(CONFIG, panel, seed=2)
    target = flat_parameters(trainer.net) + 0.05
    result = trainer.local_train(None, 3, LocalObjective(target=target, sigma=1e30))  # κ ≈ 1e-27
    np.testing.assert_allclose(result.params, target.astype(np.float32), rtol=0, atol=0)

    a, b = DPGTrainer(CONFIG, panel, seed=3), DPGTrainer(CONFIG, panel, seed=3)
    stepped = a.local_train(None, 1).params
    sigma = 3.0 / CONFIG.learning_rate  # κ = 1/(1 + ησ) = 1/4 with this party's η
    mixed = b.local_train(None, 1, LocalObjective(target=target, sigma=sigma)).params
    np.testing.assert_allclose(mixed, 0.25 * stepped + 0.75 * target, rtol=1e-6, atol=1e-7)
    slower = DPGTrainer(dataclasses.replace(CONFIG, learning_rate=CONFIG.learning_rate / 3), panel, seed=3)
    slow_step = DPGTrainer(dataclasses.replace(CONFIG, learning_rate=CONFIG.learning_rate / 3), panel, seed=3)
    slow_mixed = slower.local_train(None, 1, LocalObjective(target=target, sigma=sigma)).params  # κ = 1/2
    np.testing.assert_allclose(slow_mixed, 0.5 * slow_step.local_train(None, 1).params + 0.5 * target,
                               rtol=1e-6, atol=1e-7)
    c = DPGTrainer(CONFIG, panel, seed=3)
    np.testing.assert_array_equal(c.local_train(None, 1, LocalObjective(target=target, sigma=0.0)).params, stepped)


def test_local_train_loads_params_and_returns_one_record_per_step() -> None:
    trainer = DPGTrainer(CONFIG, random_walk(), seed=4)
    start = np.random.default_rng(1).standard_normal(flat_parameters(trainer.net).size) * 0.1
    unchanged = trainer.local_train(start, 0)
    np.testing.assert_allclose(unchanged.params, start.astype(np.float32))
    assert unchanged.records == []
    first = trainer.local_train(None, 4)
    second = trainer.local_train(None, 3)
    assert [r.step for r in first.records + second.records] == list(range(1, 8))
    for r in first.records:
        assert np.isfinite([r.mean_log_return, r.loss, r.grad_norm]).all() and r.grad_norm > 0
        assert r.loss == pytest.approx(-r.mean_log_return, rel=1e-5)  # weight_decay = 0
    assert not np.array_equal(first.params, second.params)


def test_adam_state_persists_across_local_train_calls() -> None:
    panel = random_walk()
    once, twice = DPGTrainer(CONFIG, panel, seed=5), DPGTrainer(CONFIG, panel, seed=5)
    np.testing.assert_array_equal(once.local_train(None, 10).params,
                                  twice.local_train(twice.local_train(None, 4).params, 6).params)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": -1}, "steps"),
        ({"steps": 1, "sigma": 0.5}, "target is None"),
        ({"steps": 1, "target": "target", "sigma": -1.5}, "sigma"),
        ({"steps": 1, "target": "target", "proximal_update": "both"}, "proximal_update"),
        ({"steps": 1, "prox_coef": 0.1}, "prox_center"),
        ({"steps": 1, "prox_center": "target", "prox_coef": -0.1}, "prox_coef"),
        ({"steps": 1, "target": "short"}, r"target has shape"),
    ],
)
def test_local_train_refuses_inconsistent_arguments(kwargs: dict, message: str) -> None:
    trainer = DPGTrainer(CONFIG, random_walk(), seed=0)
    n = flat_parameters(trainer.net).size
    vectors = {"target": np.zeros(n), "short": np.zeros(n - 1)}
    kwargs = {k: vectors.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    steps = kwargs.pop("steps")
    with pytest.raises(ValueError, match=message):
        trainer.local_train(None, steps, LocalObjective(**kwargs) if kwargs else None)


def test_a_step_writes_the_pre_step_portfolios_of_its_batch_into_the_pvm() -> None:
    panel = random_walk()
    trainer = DPGTrainer(CONFIG, panel, seed=6)
    offsets = GeometricBatchSampler(CONFIG.batch_size, CONFIG.beta, seed=6).sample(len(panel) - CONFIG.window)
    expected = trainer.batch_loss(offsets).weights.detach().numpy()
    before = trainer.pvm.read(np.arange(len(panel)))
    trainer.train(1)
    after = trainer.pvm.read(np.arange(len(panel)))
    days = offsets + CONFIG.window - 1
    np.testing.assert_array_equal(after[days], expected)
    untouched = np.setdiff1d(np.arange(len(panel)), days)
    np.testing.assert_array_equal(after[untouched], before[untouched])


# ---------------------------------------------------------------------- reproducibility
def test_same_seed_same_training_different_seed_different() -> None:
    panel = random_walk()
    runs = [DPGTrainer(dataclasses.replace(CONFIG, network="rnn"), panel, seed=s).local_train(None, 15) for s in (7, 7, 8)]
    np.testing.assert_array_equal(runs[0].params, runs[1].params)
    assert runs[0].records == runs[1].records
    assert not np.array_equal(runs[0].params, runs[2].params)


@pytest.mark.parametrize("network", ["cnn", "lstm"])
def test_checkpoint_resume_is_bit_identical(network: str) -> None:
    panel = random_walk()
    config = dataclasses.replace(CONFIG, network=network, weight_decay=1e-4)
    trainer = DPGTrainer(config, panel, seed=9)
    trainer.train(12)
    buffer = io.BytesIO()
    torch.save(trainer.state_dict(), buffer)
    continued = trainer.train(10)

    buffer.seek(0)
    resumed = DPGTrainer(config, panel, seed=123)  # a different seed: everything comes from the checkpoint
    resumed.load_state_dict(torch.load(buffer, weights_only=False))
    assert resumed.train(10) == continued
    np.testing.assert_array_equal(flat_parameters(resumed.net), flat_parameters(trainer.net))
    np.testing.assert_array_equal(resumed.pvm.read(np.arange(len(panel))), trainer.pvm.read(np.arange(len(panel))))
    assert resumed.step_count == trainer.step_count == 22


def test_state_dict_is_a_snapshot() -> None:
    trainer = DPGTrainer(CONFIG, random_walk(), seed=0)
    trainer.train(2)
    state = trainer.state_dict()
    snapshot = state["net"]["conv1.weight"].clone()
    trainer.train(3)
    torch.testing.assert_close(state["net"]["conv1.weight"], snapshot)


# ---------------------------------------------------------------------- panels
def test_set_panel_keeps_the_pvm_rows_of_the_unchanged_prefix() -> None:
    real = random_walk(T=100, seed=0)

    def joined(days: int, seed: int) -> PricePanel:
        """The real panel plus a synthetic path appended to its last close (an augmenter's output)."""
        steps = np.exp(np.cumsum(0.02 * np.random.default_rng(seed).standard_normal((days, 3)), axis=0))
        tail = real.values[-1] * steps[:, :, None]
        dates = real.dates.append(pd.bdate_range(real.dates[-1] + pd.offsets.BDay(), periods=days))
        return PricePanel(np.concatenate([real.values, tail]), dates, real.tickers, real.features)

    trainer = DPGTrainer(dataclasses.replace(CONFIG, beta=1e-3), joined(60, seed=1), seed=0)
    trainer.train(30)
    memory = trainer.pvm.read(np.arange(160))
    trainer.set_panel(joined(80, seed=2))
    assert trainer.pvm.n_days == 180
    now = trainer.pvm.read(np.arange(180))
    np.testing.assert_array_equal(now[:100], memory[:100])
    np.testing.assert_array_equal(now[100:], np.tile(PortfolioVectorMemory.initial_weights(3), (80, 1)))
    assert trainer.train(2)[-1].step == 32

    same = trainer.pvm.read(np.arange(180))
    trainer.set_panel(joined(80, seed=2))  # the same data again: the whole memory is kept
    np.testing.assert_array_equal(trainer.pvm.read(np.arange(180)), same)

    with pytest.raises(DataError, match="tickers"):
        trainer.set_panel(random_walk(T=100, m=3).select(["S1", "S0", "S2"]))


def test_too_short_or_featureless_panels_are_refused() -> None:
    with pytest.raises(DataError, match="fewer than batch_size"):
        DPGTrainer(CONFIG, random_walk(T=CONFIG.window + CONFIG.batch_size - 1), seed=0)
    with pytest.raises(DataError, match="high"):
        DPGTrainer(dataclasses.replace(CONFIG, features=("close", "high")), random_walk(), seed=0)
    with pytest.raises(ValueError, match="seed"):
        DPGTrainer(CONFIG, random_walk(), seed=-1)


# ---------------------------------------------------------------------- evaluation and policy
def _numpy_greedy_mean_log_return(policy: EIIEPolicy, panel: PricePanel, window: int, c: float) -> float:
    close = panel.feature("close")
    held, previous, rewards = np.eye(4)[0], np.eye(4)[0], []
    for t in range(window - 1, len(panel) - 1):
        obs = {"history": price_windows(panel.values, t, window), "weights": previous.astype(np.float32)}
        w = policy.act(obs)
        mu = 1 - c * np.abs(held[1:] - w[1:]).sum()
        y = np.concatenate([[1.0], close[t + 1] / close[t]])
        rewards.append(np.log(mu * (y @ w)))
        held, previous = y * w / (y @ w), w
    return float(np.mean(rewards))


def test_evaluate_log_return_matches_a_sequential_rollout_and_the_environment() -> None:
    train, test = random_walk(T=150, seed=3), random_walk(T=70, seed=4)
    config = dataclasses.replace(CONFIG, commission=0.01)
    trainer = DPGTrainer(config, train, seed=0)
    trainer.train(40)  # move away from the near-uniform initial policy
    got = trainer.evaluate_log_return(test)
    policy = trainer.policy()
    # float32 network, float64 bookkeeping: daily log returns agree to ~1e-8
    assert got == pytest.approx(_numpy_greedy_mean_log_return(policy, test, config.window, 0.01), abs=1e-7)

    env = PortfolioEnv(test, window_size=config.window, commission=0.01, cost_model="linear")
    obs, _ = env.reset()
    policy.reset()
    rewards, done = [], False
    while not done:
        obs, reward, done, _, _ = env.step(policy.act(obs))
        rewards.append(reward)
    assert len(rewards) == len(test) - config.window
    assert got == pytest.approx(np.mean(rewards), abs=1e-7)


def test_policy_acts_like_the_network_and_refuses_bad_observations() -> None:
    config = dataclasses.replace(CONFIG, features=("close", "high", "low"))
    panel = random_walk(ohlc=True)
    trainer = DPGTrainer(config, panel, seed=0)
    policy = EIIEPolicy(trainer.net, config)
    assert (policy.name, policy.hindsight) == ("EIIE-CNN", False)
    assert EIIEPolicy(trainer.net, config, name="party 3").name == "party 3"
    history = price_windows(panel.values, 40, config.window)
    previous = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    w = policy.act({"history": history, "weights": previous})
    assert w.dtype == np.float64 and w.shape == (4,) and w.sum() == pytest.approx(1.0, abs=1e-12)
    with torch.no_grad():
        direct = trainer.net(torch.from_numpy(history)[None], torch.from_numpy(previous[1:])[None])[0]
    np.testing.assert_allclose(w, direct.double().numpy(), rtol=1e-6)
    assert trainer.net.training  # acting does not leave the shared network in eval mode

    with pytest.raises(ValueError, match="lacks"):
        policy.act({"history": history})
    with pytest.raises(ValueError, match="history has shape"):
        policy.act({"history": history[:1], "weights": previous})
    with pytest.raises(ValueError, match="weights have shape"):
        policy.act({"history": history, "weights": previous[1:]})
    with pytest.raises(DataError, match="assets"):
        trainer.evaluate_log_return(random_walk(T=60, m=2, ohlc=True))
