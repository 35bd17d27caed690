"""``federation.engine``: the batched engine (parties in the slots of one BatchedDPGTrainer) runs the same
federated experiment as the per-party engine, augmentation regenerations (mid-round) included.

Tolerance: float32 parameters of size ~1 after 6 rounds of 4 Adam steps (learning rate 1e-3): the
engines sum the network's layers in a different order, measured max |Δ| ≈ 4e-7 on the party models,
asserted ``atol = 2e-6``; per-round training losses ``rtol = 1e-4``; backtest metrics (a year of the
deployed models trading) ``rtol = 1e-4, atol = 1e-6``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.agents import AgentConfig
from portfed.data.errors import DataError
from portfed.experiment.build import build_federation
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.federated import run_algorithm, run_fingerprint
from portfed.experiment.party import Party
from portfed.experiment.party_group import PartyGroup

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ATOL = 2e-6


def _config(engine: str, **federation) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"engine": engine, **federation})
    return raw


#: The paper's agent options (raw ratios, one initial model per party, the pull in the loss).
PAPER = {"initial_models": "per_party", "proximal_update": "loss"}


@pytest.mark.parametrize("algorithm, per_round, paper", [("fedavg+", None, False), ("fedprox", None, False),
                                                         ("fedamp", 2, False), ("fedavg+", None, True),
                                                         ("fedprox", None, True), ("comed", 2, True)])
def test_batched_and_per_party_engines_give_the_same_run(tmp_path: Path, algorithm: str, per_round,
                                                         paper: bool) -> None:
    runs, models = {}, {}
    for engine in ("batched", "per_party"):
        raw = _config(engine, parties_per_round=per_round, **(PAPER if paper else {}),
                      algorithm_params={**TINY["federation"]["algorithm_params"], "fedamp": {}})
        if paper:
            raw["agent"]["input_scale"] = "raw"
        config = parse_config(raw)
        federation = build_federation(config, progress=False)
        runs[engine] = run_algorithm(config, algorithm, federation, tmp_path / engine, progress=False)
        assert {p.engine for p in federation.parties} == {engine}
        models[engine] = np.load(tmp_path / engine / "models.npz")
    a, b = models["batched"], models["per_party"]
    assert np.abs(a["party_models"] - a["party_models"][0]).max() > 1e-4  # the parties trained apart
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_allclose(a[key], b[key], atol=ATOL, rtol=0, err_msg=key)
    ra, rb = runs["batched"].rounds, runs["per_party"].rounds
    pd.testing.assert_frame_equal(ra[["round", "party", "active", "local_steps"]],
                                  rb[["round", "party", "active", "local_steps"]])
    np.testing.assert_allclose(ra["train_loss"], rb["train_loss"], rtol=1e-4, atol=1e-7)
    numeric = runs["batched"].party_metrics.select_dtypes("number").columns
    np.testing.assert_allclose(runs["batched"].party_metrics[numeric], runs["per_party"].party_metrics[numeric],
                               rtol=1e-4, atol=1e-6)


def test_engine_setting_resolves_and_refuses_rnn_batched() -> None:
    assert parse_config(_config("auto")).engine() == "batched"
    lstm = _config("auto")
    lstm["agent"]["network"] = "lstm"
    assert parse_config(lstm).engine() == "per_party"
    lstm["federation"]["engine"] = "batched"
    with pytest.raises(ConfigError, match="CNN EIIE only"):
        parse_config(lstm)
    with pytest.raises(ConfigError, match="engine"):
        parse_config(_config("gpu"))
    # torch threads: explicit wins; null resolves by engine (2 for the batched products, 1 per party).
    assert parse_config(_config("batched")).threads() == 1  # tiny.yaml sets torch_threads: 1
    unset = _config("batched")
    unset.pop("torch_threads")
    assert parse_config(unset).threads() == min(2, os.cpu_count() or 1)
    unset["federation"]["engine"] = "per_party"
    assert parse_config(unset).threads() == 1
    with pytest.raises(ConfigError, match="torch_threads"):
        parse_config({**unset, "torch_threads": 0})
    # Checkpoints of one engine are not resumed by the other (they agree to round-off only).
    fingerprints = {run_fingerprint(parse_config(_config(e)), "fedavg") for e in ("batched", "per_party", "auto")}
    assert len(fingerprints) == 2


def test_party_group_checks_its_parties() -> None:
    config = parse_config(_config("batched"))
    federation = build_federation(config, progress=False)
    parties = federation.parties
    with pytest.raises(RuntimeError, match="not attached"):
        parties[0].local_train(None, 1)
    group = PartyGroup(parties)
    assert all(p.attached for p in parties) and PartyGroup(parties).engine is group.engine  # wraps the engine
    with pytest.raises(ValueError, match="already has a trainer"):
        parties[0].attach(group.engine.slot(0))
    with pytest.raises(ValueError, match="all unattached, or attached in order"):
        PartyGroup(parties[::-1])
    own = Party(9, parties[0]._real, config.agent_config(), 1, None)
    with pytest.raises(ValueError, match="own DPGTrainer"):
        PartyGroup([own])
    agent = config.agent_config()
    other = AgentConfig(**{**vars(agent), "learning_rate": 0.5})
    fresh = build_federation(config, progress=False).parties
    mixed = [fresh[0], Party(1, fresh[1]._real, other, 1, None, engine="batched")]
    with pytest.raises(ValueError, match="one agent config"):
        PartyGroup(mixed)
    small = Party(1, fresh[1]._real.select(list(fresh[1].tickers[:2])), agent, 1, None, engine="batched")
    with pytest.raises(DataError, match="same number of assets"):
        PartyGroup([fresh[0], small])


def test_generator_fits_in_worker_processes_give_the_same_parties() -> None:
    raw = _config("batched")
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
