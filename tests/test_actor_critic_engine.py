"""The actor-critic learner in the batched engine equals the per-party reference ``examples/ddpg_trainer.py``,
keeps its critic private with ``share: actor``, and resumes bit-exactly from a party's state."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from ddpg_trainer import DDPGTrainer
from engines import CONFIG, SEEDS, assert_equal_but_for_adams_round_off, random_walk, train_plan

from portfed.agents import AgentConfig
from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.learner import actor_size, initial_row, row_size, shared_size, vector_parts
from portfed.federation import LocalObjective, make_algorithm, run_rounds
from portfed.federation.algorithms import ALGORITHMS
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty

AC = replace(CONFIG, learner="actor_critic", gamma=0.9, tau=0.1, critic_learning_rate=1e-2, critic_hidden=8,
             exploration_noise=0.3)
ATOL = 2e-5
LARGEST_RATE = max(AC.learning_rate, AC.critic_learning_rate)  # the critic's Adam steps are the larger


def _parties(config: AgentConfig) -> tuple[list[DDPGTrainer], BatchedDPGTrainer]:
    """Four parties of 2 or 3 assets (padded universes in the engine) and different lengths."""
    panels = [random_walk(50 + 9 * k, k, m=3 - k % 2) for k in range(len(SEEDS))]
    return ([DDPGTrainer(config, p, s) for p, s in zip(panels, SEEDS, strict=True)],
            BatchedDPGTrainer(config, panels, SEEDS))


@pytest.mark.parametrize(("network", "share", "noise"), [("cnn", "actor_critic", 0.3), ("cnn", "actor", 0.3),
                                                          ("cnn", "actor_critic", 0.0), ("lstm", "actor_critic", 0.3),
                                                          ("rnn", "actor", 0.3)])
def test_engine_equals_the_per_party_reference(network: str, share: str, noise: float) -> None:
    config = replace(AC, network=network, share=share, exploration_noise=noise)
    reference, engine = _parties(config)
    assert engine.n_parameters == reference[0].n_parameters == shared_size(config)
    steps = [4, 2, 5, 3]
    got = train_plan(engine, None, steps)
    for k, trainer in enumerate(reference):
        want = trainer.local_train(None, steps[k])
        # one critic coordinate of 1,800 off by 3.4e-5 with the kernels compiled on an AMD EPYC
        assert_equal_but_for_adams_round_off(got.params[k], want.params, ATOL, LARGEST_RATE, steps[k], share=0.01)
        np.testing.assert_allclose([r.loss for r in got.records[k]], [r.loss for r in want.records], rtol=1e-3,
                                   atol=1e-7)
        # the greedy portfolios' cash (μ_θ(s_t), not the explored ones the PVM holds): the reference's records
        np.testing.assert_allclose([r.cash for r in got.records[k]], [r.cash for r in want.records], rtol=1e-5,
                                   atol=1e-7)
        np.testing.assert_allclose(engine.pvm_weights(k), trainer.pvm.state_dict()["weights"], atol=1e-5)
    assert np.abs(got.params - np.stack([initial_row(config, s)[: shared_size(config)] for s in SEEDS])).max() > 1e-3
    # a server message with the Fed+ mix (each network its own κ), then the proximal term in the loss
    rng = np.random.default_rng(0)
    start = got.params + 0.01 * rng.standard_normal(got.params.shape)
    targets = got.params + 0.01 * rng.standard_normal(got.params.shape)
    mixed = train_plan(engine, start, 3, targets=targets, sigmas=[5.0] * 4)
    prox = train_plan(engine, None, 2, targets=targets, sigmas=[5.0] * 4, proximal_update="loss")
    for k, trainer in enumerate(reference):
        want = trainer.local_train(start[k], 3, LocalObjective(target=targets[k], sigma=5.0))
        assert_equal_but_for_adams_round_off(mixed.params[k], want.params, ATOL, LARGEST_RATE, 3, share=0.01)
        want = trainer.local_train(None, 2, LocalObjective(target=targets[k], sigma=5.0, proximal_update="loss"))
        assert_equal_but_for_adams_round_off(prox.params[k], want.params, ATOL, LARGEST_RATE, 2, share=0.01)


def test_share_actor_sends_and_loads_only_the_actor() -> None:
    config = replace(AC, share="actor")
    _, engine = _parties(config)
    d_a = actor_size(config)
    assert engine.n_parameters == d_a < engine.row_size == row_size(config)
    train_plan(engine, None, 3)
    critic_before = [engine.party_state(k)["params"][d_a:].clone() for k in range(4)]
    start = np.zeros((4, d_a))
    result = train_plan(engine, start, 0)  # the server's message, no local step
    assert result.params.shape == (4, d_a)
    for k in range(4):
        row = engine.party_state(k)["params"]
        assert torch.equal(row[:d_a], torch.zeros(d_a))
        assert torch.equal(row[d_a:], critic_before[k])  # the critic never left the party
    shared = replace(AC, share="actor_critic")
    _, engine = _parties(shared)
    assert train_plan(engine, np.zeros((4, row_size(shared))), 0).params.shape == (4, row_size(shared))
    assert torch.equal(engine.party_state(0)["params"], torch.zeros(row_size(shared)))


def test_party_state_resumes_bit_exactly() -> None:
    _, straight = _parties(AC)
    _, resumed = _parties(AC)
    train_plan(straight, None, 3)
    train_plan(resumed, None, 3)
    saved = [resumed.party_state(k) for k in range(4)]
    assert set(saved[0]) >= {"critic_adam", "targets"}
    _, fresh = _parties(AC)
    for k, state in enumerate(saved):
        fresh.load_party_state(k, state)
    a, b = train_plan(straight, None, [3, 1, 2, 3]), train_plan(fresh, None, [3, 1, 2, 3])
    np.testing.assert_array_equal(a.params, b.params)
    for k in range(4):
        for name in ("params", "targets"):
            assert torch.equal(straight.party_state(k)[name], fresh.party_state(k)[name])
        assert torch.equal(straight.party_state(k)["critic_adam"]["exp_avg_sq"],
                           fresh.party_state(k)["critic_adam"]["exp_avg_sq"])
    whole = straight.state_dict()
    _, again = _parties(AC)
    again.load_state_dict(whole)
    np.testing.assert_array_equal(train_plan(again, None, 2).params, train_plan(straight, None, 2).params)


def test_bad_actor_critic_settings_name_the_value() -> None:
    for kwargs, word in [({"learner": "ddpg"}, "'ddpg'"), ({"gamma": 1.0}, "1.0"), ({"tau": 0}, "0"),
                         ({"critic_learning_rate": -1.0}, "-1.0"),
                         ({"exploration_noise": 1.0}, "1.0"), ({"share": "critic"}, "'critic'"),
                         ({"learner": "actor_critic", "batch_size": 1}, "1")]:
        with pytest.raises(ValueError, match=word):
            AgentConfig(**kwargs)


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n == "hybrid+" or not make_algorithm(n).local_rules])
def test_every_portfolio_algorithm_federates_actor_and_critic(name: str) -> None:
    _, engine = _parties(AC)
    init = initial_row(AC, 0)
    # hybrid+ (paper 000 eq. 14): FedAvg+'s penalty on the actor, FedCoMed+'s on the critic, by their slices
    knobs = {"penalty": LayerwisePenalty(vector_parts(AC), {"actor": Penalty("l2sq", 1.0), "critic": Penalty("l1", 1.0)},
                                         Penalty("l2sq", 1.0))} if name == "hybrid+" else {}
    run = run_rounds(engine, make_algorithm(name, **knobs), 2, 2, seed=0, init_params=init)
    assert run.state.party_models.shape == (4, row_size(AC))
    assert np.isfinite(run.state.party_models).all() and np.isfinite(run.state.global_model).all()
    assert np.abs(run.state.party_models[:, actor_size(AC):] - init[actor_size(AC):]).max() > 0  # critics trained
