"""``portfed compare`` with ``agent.learner: actor_critic`` trains and backtests every algorithm of the config;
Fig. 1a/1b show the actor's and the critic's parameter changes; ``federation.share: actor`` federates the actor."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.agents.learner import actor_size, row_size
from portfed.cli.main import app
from portfed.experiment.config import ConfigError, parse_config

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ALGORITHMS = ["local", "fedavg", "fedprox", "fedavg+"]


def _config(tmp_path: Path, **federation: object) -> Path:
    raw = copy.deepcopy(TINY)
    raw["agent"].update({"learner": "actor_critic", "gamma": 0.99})
    raw["federation"].update({"rounds": 3, "local_steps": 3, "algorithms": ALGORITHMS, **federation})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    path = tmp_path / "tiny_ac.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_compare_trains_and_backtests_every_algorithm_with_the_actor_critic(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare", str(config), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    agent = parse_config(yaml.safe_load(config.read_text())).agent_config()
    for name in ALGORITHMS:
        with np.load(out / name / "models.npz") as models:
            assert models["party_models"].shape == (3, row_size(agent))  # actor then critic
        rounds = pd.read_csv(out / name / "rounds.csv")
        for column in ("aggregation_change_mean_actor", "aggregation_change_mean_critic", "round_change_mean_critic"):
            assert column in rounds
        assert (rounds["round_change_mean_critic"] > 0).all()  # the critic trains in every round
        values = pd.read_csv(out / name / "portfolio_values.csv", index_col=0)
        assert len(values) > 1 and np.isfinite(values.to_numpy()).all()
        assert name in result.output
    fedavg = pd.read_csv(out / "fedavg" / "rounds.csv")
    assert (fedavg.loc[fedavg["round"] > 0, "aggregation_change_mean_critic"] > 0).all()  # the server averaged it
    for figure in ("fig1a_parameter_change.png", "fig1b_learning_curves.png"):
        assert (out / figure).stat().st_size > 0


def test_share_actor_federates_the_actor_only(tmp_path: Path) -> None:
    config = _config(tmp_path, share="actor", algorithms=["fedavg"])
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare", str(config), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    agent = parse_config(yaml.safe_load(config.read_text())).agent_config()
    assert agent.share == "actor"
    with np.load(out / "fedavg" / "models.npz") as models:
        assert models["party_models"].shape == (3, actor_size(agent))
    assert "aggregation_change_mean_critic" not in pd.read_csv(out / "fedavg" / "rounds.csv")



@pytest.mark.parametrize(("agent", "federation", "words"), [
    ({"learner": "ddpg"}, {}, "'ddpg'"),
    ({"share": "actor"}, {}, "federation.share"),
    ({"learner": "actor_critic", "gamma": 1.5}, {}, "1.5"),
    ({"learner": "actor_critic"}, {"share": "critic"}, "critic"),
])
def test_bad_learner_settings_in_a_config_are_refused_by_name(agent: dict, federation: dict, words: str) -> None:
    raw = copy.deepcopy(TINY)
    raw["agent"].update(agent)
    raw["federation"].update(federation)
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_config(raw)
