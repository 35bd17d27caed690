"""The one engine with the recurrent EIIEs (paper 000 §8.2's "RNN implementation of the EIIE") and with
universes of different sizes, against the plain per-party reference (examples/dpg_trainer.py).

Tolerances: float32 round-off — the hand-written backpropagation through time sums in another order
than PyTorch's RNN kernels (measured max |Δ| ≈ 1e-7 relative on outputs and gradients); after 20 Adam
steps at learning rate 1e-3 the parameters agree to ``atol = 2e-6``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from dpg_trainer import DPGTrainer
from engines import CONFIG, SEEDS, assert_equal_but_for_adams_round_off, one_batch, random_walk, train_plan

from portfed.agents import AgentConfig, BatchedDPGTrainer, build_network, flat_parameters, set_flat_parameters
from portfed.agents.batched_recurrent import (
    TORCH_PARTIES_PER_PASS,
    BatchedEIIERecurrent,
    TorchDayLoops,
    parties_per_pass,
)
from portfed.agents.market import market_tensors
from portfed.agents.native import RecurrenceKernels
from portfed.agents.objective import greedy_log_return
from portfed.federation import LocalObjective

ATOL = 2e-6


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
@pytest.mark.parametrize("scale", ["centred", "raw"])
@pytest.mark.parametrize("features", [("close",), ("close", "high", "low")])
def test_batched_recurrent_eiie_equals_the_per_party_networks(cell: str, scale: str, features: tuple,
                                                               backend: str) -> None:
    config = AgentConfig(network=cell, window=12, features=features, input_scale=scale, backend=backend)
    nets = [build_network(config, s) for s in (1, 2, 3)]
    batched = BatchedEIIERecurrent(config)
    loops = RecurrenceKernels if backend == "native" else TorchDayLoops
    assert isinstance(batched.day_loops, loops) and batched.backend.name == backend
    theta = torch.tensor(np.stack([flat_parameters(n) for n in nets]), dtype=torch.float32, requires_grad=True)
    assert batched.n_parameters == theta.shape[1]
    generator = torch.Generator().manual_seed(0)
    k, b, m = 3, 5, 4
    history = 1 + 0.02 * torch.randn(k, b, len(features), m, 12, generator=generator)
    previous = torch.softmax(torch.randn(k, b, m + 1, generator=generator), -1)
    weights = batched(theta, torch.stack([batched.layout(h) for h in history]), previous[..., 1:])
    probe = torch.randn(weights.shape, generator=generator)
    (weights * probe).sum().backward()
    for i, net in enumerate(nets):
        want = net(history[i], previous[i, :, 1:])
        (want * probe[i]).sum().backward()
        grad = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        torch.testing.assert_close(weights[i], want, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(theta.grad[i], grad, atol=2e-6, rtol=1e-4)


def _recurrent(cell: str) -> AgentConfig:
    return dataclasses.replace(CONFIG, network=cell, hidden_size=6)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_twenty_steps_with_adam_and_the_fedplus_mix_equal_the_reference(cell: str) -> None:
    config = _recurrent(cell)
    panels = [random_walk(50 + 9 * k, k) for k in range(len(SEEDS))]
    reference = [DPGTrainer(config, p, s) for p, s in zip(panels, SEEDS, strict=True)]
    engine = BatchedDPGTrainer(config, panels, SEEDS)
    d = engine.n_parameters
    rng = np.random.default_rng(0)
    start, targets = rng.normal(0, 0.3, (4, d)), rng.normal(0, 0.3, (4, d))
    sigmas = [0.0, 5.0, 20.0, 50.0]
    got = train_plan(engine, start, 20, targets=targets, sigmas=sigmas)
    for k, trainer in enumerate(reference):
        want = trainer.local_train(start[k], 20, LocalObjective(target=targets[k], sigma=sigmas[k]))
        # measured with the fused kernels: one coordinate of 63 off by 8.8e-6 on an Intel Xeon, 2.1e-5 on an AMD EPYC
        assert_equal_but_for_adams_round_off(got.params[k], want.params, ATOL, config.learning_rate, 20)
        np.testing.assert_allclose([r.loss for r in got.records[k]], [r.loss for r in want.records], rtol=1e-4,
                                   atol=1e-7)
        np.testing.assert_allclose(engine.pvm_weights(k), trainer.pvm.state_dict()["weights"], atol=1e-5)
    alone = BatchedDPGTrainer(config, [panels[2]], [SEEDS[2]])  # K = 1 is the reference too
    once = alone.local_train(0, start[2], 20, LocalObjective(target=targets[2], sigma=sigmas[2]))
    np.testing.assert_allclose(once.params, got.params[2], atol=ATOL, rtol=0)


@pytest.mark.parametrize("network", ["cnn", "rnn"])
def test_universes_of_five_and_nine_assets_in_one_call_equal_two_separate_calls(network: str) -> None:
    config = CONFIG if network == "cnn" else _recurrent(network)
    panels = [random_walk(70, 1, m=5), random_walk(80, 2, m=9)]
    together = BatchedDPGTrainer(config, panels, [3, 4])
    apart = [BatchedDPGTrainer(config, [p], [s]) for p, s in zip(panels, [3, 4], strict=True)]
    assert together.n_assets.tolist() == [5, 9]
    d = together.n_parameters
    targets = np.stack([flat_parameters(build_network(config, 9))] * 2)
    got = train_plan(together, None, [12, 7], targets=targets, sigmas=[10.0, 10.0])
    for k, engine in enumerate(apart):
        want = train_plan(engine, None, [12, 7][k], targets=targets[k:k + 1], sigmas=[10.0])
        # Adam divides by √v: a coordinate whose gradient is round-off small moves by up to η per step on
        # its round-off (measured one coordinate of 771 off by 7e-6 after 12 steps at η = 1e-3).
        np.testing.assert_allclose(got.params[k], want.params[0], atol=10 * ATOL, rtol=0)
        np.testing.assert_allclose([r.loss for r in got.records[k]], [r.loss for r in want.records[0]], rtol=1e-4,
                                   atol=1e-7)
        pvm = together.pvm_weights(k)
        assert pvm.shape == (len(panels[k]), panels[k].n_assets + 1)  # a party reads its own m_k + 1 columns
        np.testing.assert_allclose(pvm, engine.pvm_weights(0), atol=1e-6)
        np.testing.assert_allclose(pvm.sum(axis=1), 1.0, atol=1e-5)
    assert d == apart[0].n_parameters
    saved = together.party_state(0)  # the five-asset party's state moves to an engine of its own
    apart[0].load_party_state(0, saved)
    np.testing.assert_allclose(apart[0].local_train(0, None, 3).params, together.local_train(0, None, 3).params,
                               atol=ATOL, rtol=0)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_a_model_trained_in_the_engine_loads_into_the_plain_network_and_trades_identically(cell: str) -> None:
    config = _recurrent(cell)
    panel = random_walk(60, 5)
    engine = BatchedDPGTrainer(config, [panel], [7])
    trained = engine.local_train(0, None, 10).params
    net = build_network(config, 0)
    set_flat_parameters(net, trained)
    offsets = torch.arange(config.batch_size)
    history, previous, *_ = one_batch(engine, np.array([0]), np.array([3]), offsets)
    theta = torch.tensor(trained, dtype=torch.float32)[None]
    in_engine = engine.net(theta, history, previous[..., 1:])[0]
    windows = market_tensors(panel, config).windows[3 : 3 + config.batch_size]
    torch.testing.assert_close(net(windows, previous[0, :, 1:]), in_engine, atol=1e-6, rtol=1e-5)
    reference = DPGTrainer(config, panel, seed=7)
    reference.local_train(trained, 0)
    assert greedy_log_return(net, config, panel) == reference.evaluate_log_return(panel)


def test_the_parties_per_pass_do_not_change_the_training() -> None:
    config = _recurrent("rnn")
    panels = [random_walk(50 + 9 * k, k) for k in range(len(SEEDS))]
    runs = [train_plan(BatchedDPGTrainer(config, panels, SEEDS, chunk=c), None, 5).params for c in (1, 3, 4)]
    for other in runs[1:]:
        np.testing.assert_allclose(other, runs[0], atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="chunk"):
        BatchedDPGTrainer(config, panels, SEEDS, chunk=0)


def test_the_cpu_cache_chunks_apply_to_the_pytorch_loops_on_the_cpu_only() -> None:
    """The parties-per-pass figure was tuned to the CPU's cache; the fused kernels and a GPU take every
    party in one pass."""
    for cell in ("rnn", "lstm"):
        assert parties_per_pass(cell, torch.device("cpu"), fused=False) == TORCH_PARTIES_PER_PASS[cell]
        assert parties_per_pass(cell, torch.device("cpu"), fused=True) is None
        assert parties_per_pass(cell, torch.device("cuda", 0), fused=False) is None
