"""The CleanRL-style example (examples/fedavg_plus.py) computes what the library's round loop computes."""

from __future__ import annotations

import fedavg_plus  # examples/fedavg_plus.py: tests/conftest.py puts examples/ on the path
import numpy as np

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.federation import make_algorithm, run_rounds


def test_the_example_matches_run_rounds_on_the_same_seed() -> None:
    config = AgentConfig(window=10, batch_size=8, learning_rate=1e-3)
    init = flat_parameters(build_network(config, 0))
    models, global_model, rewards = fedavg_plus.fedavg_plus(fedavg_plus.make_parties(3, 3, config, seed=0), init, 3, 2,
                                                        rho=0.1, sigma=0.01)
    run = run_rounds(fedavg_plus.make_parties(3, 3, config, seed=0), make_algorithm("fedavg+", rho=0.1, sigma=0.01),
                     3, 2, seed=0, init_params=init)
    assert np.abs(models - init).max() > 1e-4  # the parties did train
    np.testing.assert_allclose(models, run.state.party_models, atol=1e-12, rtol=0)
    np.testing.assert_allclose(global_model, run.state.global_model, atol=1e-12, rtol=0)
    curve = [np.mean([p.train_reward for p in record.parties]) for record in run.records]
    np.testing.assert_allclose(rewards, curve, atol=1e-12)
