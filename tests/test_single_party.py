"""The single-party experiment end to end on a tiny config: files written, reproducible, no test leakage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.agents import BatchedDPGTrainer
from portfed.agents.batched import resolved_backend
from portfed.cli.main import app
from portfed.data import train_test_split
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.runs.run_dir import read_record
from portfed.experiment.runs.single_party import run_single_party, select_market
from portfed.generators import Augmenter, make_generator

TINY = {
    "experiment": "single_party",
    "seed": 3,
    "data": {"source": "djia", "tickers": ["A", "B", "C"], "test_days": 40},
    "agent": {"network": "cnn", "window": 5, "batch_size": 8, "learning_rate": 1e-3},
    "training": {"steps": 20, "log_every": 10},
    "evaluation": {"baselines": ["ubah", "ucrp", "bcrp", "olmar"]},
}


def test_run_writes_every_output_and_is_reproducible(tmp_path):
    cfg = parse_config(TINY)
    first = run_single_party(cfg, tmp_path / "a", progress=False)
    second = run_single_party(cfg, tmp_path / "b", progress=False)
    for name in ["config.yaml", "training_curve.csv", "training_curve.png", "metrics.csv", "metrics.md",
                 "portfolio_values.csv", "portfolio_values.png"]:
        assert (tmp_path / "a" / name).stat().st_size > 0, name
    pd.testing.assert_frame_equal(first.metrics, second.metrics)
    assert list(first.metrics.index) == ["EIIE-CNN", "UBAH", "UCRP", "BCRP (hindsight)", "OLMAR"]
    # The backtest trades exactly the held-out year: 40 price relatives after the last training close.
    assert len(first.values) == 41
    resolved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert resolved["agent"]["window"] == 5 and resolved["training"]["steps"] == 20
    # run.json records the backend agent.backend (auto) resolved to here (portfed.agents.backend)
    assert read_record(tmp_path / "a")["backend"] == resolved_backend(cfg.agent_config()) in ("torch", "native")


def test_a_single_party_trains_and_backtests_with_the_actor_critic(tmp_path):
    raw = {**TINY, "agent": {**TINY["agent"], "learner": "actor_critic"}}
    first = run_single_party(parse_config(raw), tmp_path / "a", progress=False)
    second = run_single_party(parse_config(raw), tmp_path / "b", progress=False)
    pd.testing.assert_frame_equal(first.metrics, second.metrics)
    direct = run_single_party(parse_config(TINY), tmp_path / "c", progress=False)
    assert not first.metrics.loc["EIIE-CNN"].equals(direct.metrics.loc["EIIE-CNN"])


def test_different_seed_gives_a_different_agent(tmp_path):
    a = run_single_party(parse_config(TINY), tmp_path / "a", progress=False)
    b = run_single_party(parse_config({**TINY, "seed": 4}), tmp_path / "b", progress=False)
    assert a.metrics.loc["EIIE-CNN", "fAPV (× initial value)"] != b.metrics.loc["EIIE-CNN", "fAPV (× initial value)"]
    assert a.metrics.loc["UCRP", "fAPV (× initial value)"] == b.metrics.loc["UCRP", "fAPV (× initial value)"]


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"unknown_key": 1}, "unknown_key"),
        ({"training": {"steps": 0}}, "training.steps"),
        ({"agent": {"network": "transformer"}}, "transformer"),
        ({"agent": {"windw": 30}}, "windw"),
    ],
)
def test_bad_configs_name_the_offending_key(patch, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_config({**TINY, **patch})


def test_cli_run_prints_the_table(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "EIIE-CNN" in result.output and "UCRP" in result.output and "fAPV" in result.output


def test_cli_run_reports_a_bad_config_without_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**TINY, "data": {"source": "nowhere"}}))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 1
    assert "nowhere" in result.output and "Traceback" not in result.output


def test_training_follows_the_augmentation_schedule_across_log_chunks(tmp_path):
    """Iteration ``i`` trains on synthetic block ``i // regenerate_every`` (portfed.generators.augment), also
    when a logging chunk crosses a regeneration: here chunks of 5 iterations cross the regenerations at
    7 and 14.  The reference trains one iteration at a time, installing ``augmenter.panel(i)`` before each."""
    raw = {**TINY, "augmentation": {"generator": "gbm", "synthetic_days": 300, "regenerate_every": 7},
           "training": {"steps": 20, "log_every": 5}}
    cfg = parse_config(raw)
    run_single_party(cfg, tmp_path / "run", progress=False)
    deployed = np.load(tmp_path / "run" / "local" / "models.npz")["deployed"]

    train, _ = train_test_split(select_market(cfg), cfg.data.test_days)
    augmenter = Augmenter(make_generator("gbm"), synthetic_days=300, regenerate_every=7, seed=cfg.seed).fit(train)
    engine = BatchedDPGTrainer(cfg.agent_config(), [augmenter.panel(0)], [cfg.seed])
    for i in range(cfg.training.steps):
        engine.set_panel(0, augmenter.panel(i))
        engine.local_train(0, None, 1)
    np.testing.assert_array_equal(deployed, engine.parameters())
