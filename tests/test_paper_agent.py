"""The paper's agent options: raw price ratios, one initial model per party, and where the Fed+ pull acts.

Paper 000 §8.2 feeds the EIIE the normalised closes ``Y_t`` (values ≈ 1); Algorithm 1 line 1 has each
party send its own initial model ``w_k^0`` and the aggregator start from ``w̃^0 = 𝒜(W^0)``; paper 001's
Algorithm 1 writes the Fed+ update as a gradient step on ``f_k(w) + (α/2)‖w − z_k‖²`` where paper 000
eq. 6 mixes after the step.  ``agent.input_scale``, ``federation.initial_models`` and
``federation.proximal_update`` select each reading.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from dpg_trainer import DPGTrainer
from typer.testing import CliRunner

from portfed.agents import AgentConfig
from portfed.agents.batched_networks import BatchedEIIECNN
from portfed.agents.networks import build_network, flat_parameters, set_flat_parameters
from portfed.cli.main import app
from portfed.experiment.config import ConfigError, apply_overrides, load_config, parse_config
from portfed.experiment.party import build_federation, initial_parameters
from portfed.experiment.runs import run_algorithm, run_fingerprint
from portfed.experiment.studies import parse_grid
from portfed.federation import FederationState, make_algorithm
from portfed.federation.aggregate import coordinate_median, smoothed_aggregate
from portfed.federation.fedamp import cloud_models, fedamp_weights
from portfed.federation.prox import Penalty

CONFIGS = Path(__file__).parents[1] / "configs"
TINY = yaml.safe_load((CONFIGS / "tiny.yaml").read_text())
PAPER = {"input_scale": "raw", "initial_models": "per_party", "proximal_update": "loss"}


def _tiny(**settings: object) -> dict:
    raw = copy.deepcopy(TINY)
    raw["diagnostics"]["interpolation_rounds"] = []
    if "input_scale" in settings:
        raw["agent"]["input_scale"] = settings["input_scale"]
    raw["federation"].update({k: v for k, v in settings.items() if k != "input_scale"})
    return raw


def _windows(n: int, features: int, m: int, window: int, seed: int) -> torch.Tensor:
    """Normalised windows ``v_{t−j} / v_t`` of a random walk: values near 1, the last column exactly 1."""
    rng = np.random.default_rng(seed)
    steps = 0.02 * rng.standard_normal((n, features, m, window))
    logs = np.cumsum(steps, axis=-1)
    return torch.tensor(np.exp(logs - logs[..., -1:]), dtype=torch.float32)


def _shifted_first_layer(net: torch.nn.Module) -> None:
    """Add the first layer's kernel sums to its bias: a network reading raw ratios then computes what the
    centred network computes (``W(x − 1) + b = Wx + (b − ΣW)``, so raw with ``b − ΣW`` ≡ centred with ``b``;
    here the raw network gets ``b`` and the centred one ``b + ΣW``)."""
    with torch.no_grad():
        if hasattr(net, "conv1"):
            net.conv1.bias += net.conv1.weight.sum(dim=(1, 2, 3))
        else:
            net.recurrent.bias_ih_l0 += net.recurrent.weight_ih_l0.sum(dim=1)


@pytest.mark.parametrize("network", ["cnn", "rnn", "lstm"])
def test_raw_and_centred_inputs_are_one_function_class(network: str) -> None:
    config = AgentConfig(network=network, window=8, features=("close", "high", "low"), device="cpu")
    raw = build_network(dataclasses.replace(config, input_scale="raw"), seed=3)
    centred = build_network(config, seed=3)
    np.testing.assert_array_equal(flat_parameters(raw), flat_parameters(centred))  # same initialisation
    history, previous = _windows(6, 3, 4, 8, seed=0), torch.full((6, 4), 0.2)
    assert not torch.allclose(raw(history, previous), centred(history, previous), atol=1e-4)
    _shifted_first_layer(centred)
    torch.testing.assert_close(raw(history, previous), centred(history, previous), atol=2e-6, rtol=1e-5)


def test_the_batched_cnn_reads_the_same_scale_as_the_per_party_cnn() -> None:
    for scale in ("centred", "raw"):
        config = AgentConfig(network="cnn", window=8, input_scale=scale, device="cpu")
        nets = [build_network(config, seed=s) for s in (1, 2)]
        batched = BatchedEIIECNN(config)
        history = _windows(5, 1, 3, 8, seed=4)
        theta = torch.tensor(np.stack([flat_parameters(n) for n in nets]), dtype=torch.float32)
        rows = batched.layout(history)
        previous = torch.full((5, 3), 0.25)
        got = batched(theta, torch.stack([rows, rows]), torch.stack([previous, previous]))
        for k, net in enumerate(nets):
            torch.testing.assert_close(got[k], net(history, previous), atol=2e-6, rtol=1e-5)


def test_raw_and_centred_inputs_train_along_different_trajectories() -> None:
    from engines import random_walk

    panel = random_walk(80, 0)
    config = AgentConfig(window=10, batch_size=8, learning_rate=1e-2, beta=0.05, device="cpu")
    centred = DPGTrainer(config, panel, seed=5)
    raw = DPGTrainer(dataclasses.replace(config, input_scale="raw"), panel, seed=5)
    np.testing.assert_array_equal(flat_parameters(raw.net), flat_parameters(centred.net))
    a, b = centred.local_train(None, 10), raw.local_train(None, 10)
    assert np.abs(a.params - b.params).max() > 1e-4
    assert [r.mean_log_return for r in a.records] != [r.mean_log_return for r in b.records]


def test_per_party_initial_models_are_the_parties_own_and_the_server_starts_from_their_aggregate() -> None:
    config = parse_config(_tiny(initial_models="per_party"))
    init = initial_parameters(config)
    shared = initial_parameters(parse_config(_tiny()))
    assert init.shape == (3, shared.size) and shared.ndim == 1
    assert min(np.abs(init[i] - init[j]).max() for i in range(3) for j in range(i + 1, 3)) > 1e-3
    federation = build_federation(config, progress=False)
    for k, party in enumerate(federation.parties):  # row k is the network party k's own trainer starts with
        np.testing.assert_array_equal(init[k], flat_parameters(build_network(config.agent_config(), party.seed)))
    expected = {
        "fedavg": init.mean(axis=0),
        "comed": coordinate_median(init),
        "fedavg+": smoothed_aggregate(init, Penalty("l2sq", 0.1)).center,
        "fedcomed+": smoothed_aggregate(init, Penalty("l1", 0.1)).center,
    }
    for name, w_tilde in expected.items():
        state = FederationState.initial(make_algorithm(name), init, 3, seed=0)
        np.testing.assert_allclose(state.global_model, w_tilde, rtol=0, atol=1e-12, err_msg=name)
        np.testing.assert_array_equal(state.party_models, init)
    fedamp = make_algorithm("fedamp")
    state = FederationState.initial(fedamp, init, 3, seed=0)
    xi = fedamp_weights(init, alpha=fedamp.fedamp_alpha.at(0), sigma=fedamp.attention_scale)
    np.testing.assert_allclose(state.centers, cloud_models(init, xi), atol=1e-12)


def test_per_party_initial_models_reach_round_zero(tmp_path: Path) -> None:
    """FedAvg (λ = 1) starts round 0 at ``w̃^0 = mean W^0``, local training (λ = 0) at each party's own
    ``w_k^0``: their round-0 rewards differ, where a shared ``w^0`` makes them equal."""
    rewards = {}
    for initial in ("shared", "per_party"):
        config = parse_config(_tiny(initial_models=initial, rounds=1))
        federation = build_federation(config, progress=False)
        for name in ("local", "fedavg"):
            run = run_algorithm(config, name, federation, tmp_path / initial / name, progress=False,
                                parties=copy.deepcopy(federation.parties))
            rewards[initial, name] = run.rounds["train_reward"].to_numpy()
    np.testing.assert_array_equal(rewards["shared", "local"], rewards["shared", "fedavg"])
    assert not np.array_equal(rewards["per_party", "local"], rewards["per_party", "fedavg"])


def test_the_new_settings_are_in_the_run_fingerprint_only_when_they_differ_from_the_defaults() -> None:
    base = parse_config(_tiny())
    assert run_fingerprint(base, "fedavg+") == run_fingerprint(
        parse_config(_tiny(initial_models="shared", proximal_update="mix")), "fedavg+")
    others = {run_fingerprint(parse_config(_tiny(**{key: value})), "fedavg+") for key, value in PAPER.items()}
    assert len(others) == 3 and run_fingerprint(base, "fedavg+") not in others
    for key, bad in (("input_scale", "log"), ("initial_models", "each"), ("proximal_update", "both")):
        with pytest.raises(ConfigError, match=key):
            parse_config(_tiny(**{key: bad}))


def test_resume_with_the_paper_settings_is_bit_exact(tmp_path: Path) -> None:
    whole_config = parse_config(_tiny(**PAPER, rounds=4, checkpoint_every=2))
    federation = build_federation(whole_config, progress=False)
    whole = run_algorithm(whole_config, "fedavg+", federation, tmp_path / "whole", progress=False)
    half_config = parse_config(_tiny(**PAPER, rounds=2, checkpoint_every=2))
    run_algorithm(half_config, "fedavg+", build_federation(half_config, progress=False), tmp_path / "resumed",
                  progress=False)
    resumed = run_algorithm(whole_config, "fedavg+", build_federation(whole_config, progress=False),
                            tmp_path / "resumed", progress=False, resume=True)
    with np.load(tmp_path / "whole" / "models.npz") as a, np.load(tmp_path / "resumed" / "models.npz") as b:
        for key in ("party_models", "global_model", "deployed"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    pd.testing.assert_frame_equal(whole.rounds, resumed.rounds)


def test_compare_runs_end_to_end_with_the_paper_settings(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(_tiny()))
    settings = ["agent.input_scale=raw", "federation.initial_models=per_party", "federation.proximal_update=loss",
                "federation.algorithms=[local, fedavg, fedprox, fedavg+]"]
    result = CliRunner().invoke(app, ["compare", str(path), "--out", str(tmp_path / "out"), "-q", "--jobs", "1",
                                      *[arg for item in settings for arg in ("--set", item)]])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "out" / "table1.csv", index_col=0)
    assert {"local", "fedavg", "fedprox", "fedavg+", "UCRP", "UBAH"} <= set(table.index)
    resolved = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert resolved["agent"]["input_scale"] == "raw"
    assert (resolved["federation"]["initial_models"], resolved["federation"]["proximal_update"]) == (
        "per_party", "loss")
    assert np.isfinite(table.loc[["local", "fedavg", "fedprox", "fedavg+"], "Annualized return (fraction)"]).all()


def test_two_parties_with_different_learning_rates_train_in_one_portfolio_cohort() -> None:
    """Each party turns σ into its own κ = 1/(1 + η_k σ): two DPGTrainers with η = 1e-3 and 1e-2 in one
    per-party cohort under FedAvg+ give exactly what each gives alone with its own κ."""
    from engines import random_walk

    from portfed.federation import LocalObjective, PartyCohort, run_rounds

    configs = [AgentConfig(window=10, batch_size=8, learning_rate=rate, beta=0.05, device="cpu") for rate in (1e-3, 1e-2)]
    panels = [random_walk(70, k) for k in range(2)]
    parties = [DPGTrainer(c, p, seed=k) for k, (c, p) in enumerate(zip(configs, panels, strict=True))]
    init = flat_parameters(parties[0].net)
    spec = make_algorithm("fedavg+", sigma=50.0, rho=1.0)
    run = run_rounds(PartyCohort(parties), spec, 1, 3, seed=0, init_params=init)
    for k, (config, panel) in enumerate(zip(configs, panels, strict=True)):
        alone = DPGTrainer(config, panel, seed=k)
        set_flat_parameters(alone.net, init)
        want = alone.local_train(init, 3, LocalObjective(target=init, sigma=50.0))  # z_k = w̃ = w_k at round 0
        np.testing.assert_array_equal(run.state.party_models[k], want.params)


def test_overrides_set_dotted_keys_as_yaml_values_and_refuse_malformed_ones() -> None:
    raw = {"agent": {"window": 5}, "data": {"source": "djia"}}
    got = apply_overrides(raw, ["agent.input_scale=raw", "data.end=2019-12-31", "federation.rounds=7",
                                "federation.algorithms=[local, fedavg]"])
    assert got == {"agent": {"window": 5, "input_scale": "raw"}, "data": {"source": "djia", "end": "2019-12-31"},
                   "federation": {"rounds": 7, "algorithms": ["local", "fedavg"]}}
    assert raw == {"agent": {"window": 5}, "data": {"source": "djia"}}  # a copy
    for bad in ("agent.input_scale", "=raw", "agent..window=3", "agent.window.size=3"):
        with pytest.raises(ConfigError, match="override"):
            apply_overrides(raw, [bad])


def test_a_number_with_an_exponent_and_no_dot_is_a_number_in_overrides_configs_and_grids(tmp_path: Path) -> None:
    """PyYAML (YAML 1.1) reads ``3e-05`` as a string; ``portfed tune`` writes the chosen λ_t as
    ``…lam_t=3e-05``, and ``lam_t`` (a number, a schedule or a mapping) refused the string."""
    chosen = "federation.algorithm_params.fedcomed+.lam_t=3e-05"
    raw = apply_overrides({}, [chosen, "agent.learning_rate=1E-4", "agent.beta=-2e3", "parties.universes=[[1e2]]"])
    assert raw["federation"]["algorithm_params"]["fedcomed+"]["lam_t"] == 3e-05
    assert raw["agent"] == {"learning_rate": 1e-4, "beta": -2000.0}
    assert raw["parties"]["universes"] == [[100.0]]
    assert apply_overrides({}, ["data.source=1e"])["data"]["source"] == "1e"  # not a number: text
    config = load_config(CONFIGS / "paper_sp500.yaml", overrides=[chosen])
    assert config.federation.algorithm_params["fedcomed+"]["lam_t"] == 3e-05
    path = tmp_path / "config.yaml"
    text = (CONFIGS / "paper_sp500.yaml").read_text()
    path.write_text(text.replace("fedcomed+: {lam: 0.001,", "fedcomed+: {lam_t: 3e-5, lam: 1e-3,"))
    assert load_config(path).federation.algorithm_params["fedcomed+"]["lam_t"] == 3e-05
    assert parse_grid("3e-5,1e-4,0.3,1") == [3e-05, 1e-04, 0.3, 1]
