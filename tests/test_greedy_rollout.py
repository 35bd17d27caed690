"""The batched greedy rollout (paper 000 Fig. 1c's local performance of many models at once) against the per-party
reference, :func:`portfed.agents.objective.greedy_log_return` of each model: equal to float32 round-off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from engines import random_walk

from portfed.agents import AgentConfig
from portfed.agents.batched import batched_network
from portfed.agents.networks import build_network, flat_parameters, set_flat_parameters
from portfed.agents.objective import greedy_log_return, greedy_log_returns
from portfed.experiment.config import load_config
from portfed.experiment.party import Party
from portfed.experiment.party.diagnostics import party_interpolation


def reference_returns(config: AgentConfig, panel, thetas: np.ndarray) -> np.ndarray:
    net = build_network(config, 0)
    out = []
    for theta in thetas:
        set_flat_parameters(net, theta)
        out.append(greedy_log_return(net, config, panel))
    return np.array(out)


@pytest.mark.parametrize("limits", [{}, {"max_weight": 0.4, "max_turnover": 0.5}])
@pytest.mark.parametrize("network", ["cnn", "rnn", "lstm"])
def test_the_batched_rollout_is_the_greedy_rollout_of_each_model(network: str, limits: dict, backend: str) -> None:
    config = AgentConfig(network=network, window=8, hidden_size=6, input_scale="raw", backend=backend, **limits)
    panel = random_walk(T=60, m=4, seed=3)
    # models far from the near-uniform portfolios of fresh networks, so that their returns differ
    thetas = 3 * np.stack([flat_parameters(build_network(config, s)) for s in range(5)])
    net = batched_network(config)
    assert net.backend.name == backend
    got = greedy_log_returns(net, config, panel, torch.as_tensor(thetas, dtype=torch.float32)).numpy()
    want = reference_returns(config, panel, thetas)
    assert got.shape == (5,) and np.ptp(want) > 2e-5  # the models differ by 10 × the tolerance: a mixed-up row would show
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_fig_1c_rows_are_each_interpolated_models_own_rollout() -> None:
    config = load_config(Path(__file__).parents[1] / "configs" / "tiny.yaml")
    agent = AgentConfig(window=8, input_scale="raw")
    config = config.model_copy(update={"diagnostics": config.diagnostics.model_copy(
        update={"interpolation_points": 5, "interpolation_days": 30})})
    party = Party(0, random_walk(T=80, m=3, seed=1), agent, seed=0, augmenter=None)
    model, reference, previous = (flat_parameters(build_network(agent, s)) for s in (1, 2, 3))
    rows = party_interpolation(config, party, 7, model, reference, previous)
    assert [r["lam"] for r in rows] == [0.0, 0.25, 0.5, 0.75, 1.0]
    for row in rows:
        lam = row["lam"]
        assert row["round"] == 7 and row["party"] == 0
        assert row["log_return"] == pytest.approx(party.evaluate_log_return((1 - lam) * model + lam * reference, 30),
                                                  abs=2e-6)
        assert row["previous_global_log_return"] == pytest.approx(party.evaluate_log_return(previous, 30), abs=2e-6)
    panel = random_walk(T=80, m=3, seed=1).iloc(slice(80 - 30 - 8, None))  # the last 30 decision days
    want = reference_returns(agent, panel, np.stack([model, reference]))
    np.testing.assert_allclose([rows[0]["log_return"], rows[-1]["log_return"]], want, rtol=0, atol=2e-6)
