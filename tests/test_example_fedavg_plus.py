"""The CleanRL-style example (examples/fedavg_plus.py) computes what the library's round loop computes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.federation import make_algorithm, run_rounds

EXAMPLE = Path(__file__).parents[1] / "examples" / "fedavg_plus.py"


def _example():
    spec = importlib.util.spec_from_file_location("fedavg_plus_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_matches_run_rounds_on_the_same_seed() -> None:
    example = _example()
    config = AgentConfig(window=10, batch_size=8, learning_rate=1e-3)
    init = flat_parameters(build_network(config, 0))
    models, global_model, rewards = example.fedavg_plus(example.make_parties(3, 3, config, seed=0), init, 3, 2,
                                                        rho=0.1, sigma=0.01)
    run = run_rounds(example.make_parties(3, 3, config, seed=0), make_algorithm("fedavg+", rho=0.1, sigma=0.01),
                     3, 2, seed=0, init_params=init)
    assert np.abs(models - init).max() > 1e-4  # the parties did train
    np.testing.assert_allclose(models, run.state.party_models, atol=1e-12, rtol=0)
    np.testing.assert_allclose(global_model, run.state.global_model, atol=1e-12, rtol=0)
    curve = [np.mean([p.train_reward for p in record.parties]) for record in run.records]
    np.testing.assert_allclose(rewards, curve, atol=1e-12)
