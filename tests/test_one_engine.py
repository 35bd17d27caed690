"""portfed's one training engine: a federation's parties in the rows of one BatchedDPGTrainer (PartyGroup)
train exactly as the same parties trained one by one, each in a one-party engine of its own (what a
Flower node does) — augmentation regenerations (mid-round), stragglers and the paper's agent options
included — and the retired ``federation.engine`` setting is ignored with a warning.

Tolerance: float32 parameters of size ~1 after 6 rounds of 4 Adam steps (learning rate 1e-3): the K-party
products may sum in another order than the one-party ones, asserted ``atol = 2e-6``; per-round training
losses ``rtol = 1e-4``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from portfed.agents import AgentConfig
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.party import Party, PartyGroup, build_federation, initial_parameters
from portfed.experiment.runs import make_spec, run_fingerprint
from portfed.federation import run_rounds

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ATOL = 2e-6


def _config(**federation) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update(federation)
    return raw


#: The paper's agent options (raw ratios, one initial model per party, the pull in the loss).
PAPER = {"initial_models": "per_party", "proximal_update": "loss"}


@pytest.mark.parametrize("algorithm, per_round, paper, network", [
    ("fedavg+", None, False, "cnn"), ("fedamp", 2, False, "cnn"), ("fedprox", None, True, "cnn"),
    ("comed", 2, True, "rnn"), ("fedavg+", None, False, "lstm")])
def test_the_shared_engine_trains_what_each_party_alone_trains(algorithm: str, per_round, paper: bool,
                                                                network: str) -> None:
    raw = _config(parties_per_round=per_round, **(PAPER if paper else {}),
                  algorithm_params={**TINY["federation"]["algorithm_params"], "fedamp": {}})
    raw["agent"].update({"network": network, **({"input_scale": "raw"} if paper else {})})
    config = parse_config(raw)
    federation = build_federation(config, progress=False)
    spec, fed = make_spec(config, algorithm), config.federation
    results, records = {}, {}
    for how in ("shared", "alone"):
        parties = copy.deepcopy(federation.parties)
        cohort = PartyGroup(parties) if how == "shared" else parties
        result = run_rounds(cohort, spec, fed.rounds, fed.local_steps, k_per_round=per_round, seed=config.seed,
                            init_params=initial_parameters(config), progress=False,
                            proximal_update=fed.proximal_update)
        results[how], records[how] = result.state, result.records
        engines = {id(p.engine[0]) for p in parties}
        assert len(engines) == (1 if how == "shared" else len(parties))
    a, b = results["shared"], results["alone"]
    assert np.abs(a.party_models - a.party_models[0]).max() > 1e-4  # the parties trained apart
    np.testing.assert_allclose(a.party_models, b.party_models, atol=ATOL, rtol=0)
    np.testing.assert_allclose(a.global_model, b.global_model, atol=ATOL, rtol=0)
    for ra, rb in zip(records["shared"], records["alone"], strict=True):
        assert ra.active == rb.active
        np.testing.assert_allclose([p.train_loss for p in ra.parties], [p.train_loss for p in rb.parties],
                                   rtol=1e-4, atol=1e-7)


def test_the_retired_engine_setting_is_ignored_with_a_warning() -> None:
    for old in ("auto", "batched", "per_party"):
        with pytest.warns(FutureWarning, match="federation.engine is ignored"):
            config = parse_config(_config(engine=old))
        assert "engine" not in config.federation.model_dump()
    # Fingerprints do not depend on it (and keep the batched engine's checkpoints valid).
    with pytest.warns(FutureWarning):
        old = run_fingerprint(parse_config(_config(engine="per_party")), "fedavg")
    assert old == run_fingerprint(parse_config(_config()), "fedavg")
    # torch threads: explicit wins; null resolves to min(2, CPUs) for every network (the CNN's K-party
    # products, the recurrent EIIEs' fused kernels split over the parties).
    assert parse_config(_config()).threads() == 1  # tiny.yaml sets torch_threads: 1
    unset = _config()
    unset.pop("torch_threads")
    assert parse_config(unset).threads() == min(2, os.cpu_count() or 1)
    unset["agent"]["network"] = "rnn"
    assert parse_config(unset).threads() == min(2, os.cpu_count() or 1)
    with pytest.raises(ConfigError, match="torch_threads"):
        parse_config({**unset, "torch_threads": 0})


def test_party_group_checks_its_parties() -> None:
    config = parse_config(_config())
    federation = build_federation(config, progress=False)
    parties = federation.parties
    group = PartyGroup(parties)
    assert all(p.attached for p in parties) and PartyGroup(parties).engine is group.engine  # wraps the engine
    with pytest.raises(ValueError, match="already trains in an engine"):
        parties[0].attach(group.engine, 0)
    with pytest.raises(ValueError, match="all unattached, or attached in order"):
        PartyGroup(parties[::-1])
    alone = Party(9, parties[0]._real, config.agent_config(), 1, None)
    alone.local_train(None, 1)  # a party used alone trains in a one-party engine of its own
    assert alone.engine[0].n_parties == 1 and alone.local_iterations == 1
    assert PartyGroup([alone]).engine is alone.engine[0]
    agent = config.agent_config()
    other = AgentConfig(**{**vars(agent), "learning_rate": 0.5})
    fresh = build_federation(config, progress=False).parties
    with pytest.raises(ValueError, match="one agent config"):
        PartyGroup([fresh[0], Party(1, fresh[1]._real, other, 1, None)])
    small = Party(1, fresh[1]._real.select(list(fresh[1].tickers[:2])), agent, 1, None)
    group = PartyGroup([fresh[0], small])  # universes of different sizes share the engine
    assert group.engine.n_assets.tolist() == [len(fresh[0].tickers), 2]


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_generator_fits_in_worker_processes_give_the_same_parties() -> None:
    raw = _config()
    raw["parties"].update({"generators": ["gan", "vom", "gbm", None],
                           "generator_params": {"gan": {"steps": 5}, "vom": raw["parties"]["generator_params"]["vom"]}})
    raw["parties"]["count"] = 4
    panels = {}
    for workers in (1, 2):
        federation = build_federation(parse_config({**raw, "fit_workers": workers}), progress=False)
        panels[workers] = [p.training_panel() for p in federation.parties]
        assert [p.generator_name for p in federation.parties] == ["gan", "vom", "gbm", None]
    for a, b in zip(panels[1], panels[2], strict=True):
        assert a.tickers == b.tickers
        np.testing.assert_array_equal(a.values, b.values)
    assert len(panels[1][0]) == len(panels[1][3]) + raw["parties"]["synthetic_days"]
