"""The README's "Your own prices" run (``parties.universes`` on a CSV) through the desk commands: its saved
config reads back, ``allocate``, ``export`` (TorchScript and a self-contained ONNX file) and ``report``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.deploy import allocate, load_trained_party
from portfed.experiment.config import dump_config, load_config, parse_config
from portfed.experiment.studies import compare

CONFIGS = Path(__file__).parents[1] / "configs"
TICKERS = ("AAPL", "MSFT", "IBM")


def write_prices(path: Path, days: int = 160, seed: int = 3) -> Path:
    """A seeded geometric random walk of three tickers on business days, as a wide CSV of closes."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2019-01-02", periods=days, name="date")
    close = 100 * np.exp(np.cumsum(rng.normal(2e-4, 0.015, size=(days, len(TICKERS))), axis=0))
    pd.DataFrame(close, index=dates, columns=list(TICKERS)).to_csv(path)
    return path


def universes_config(prices: Path) -> dict:
    return {"experiment": "federated", "seed": 0, "torch_threads": 1,
            "data": {"source": str(prices), "test_days": 12},
            "parties": {"count": 3, "universes": [["AAPL", "MSFT"], ["MSFT", "IBM"], ["AAPL", "IBM"]]},
            "agent": {"window": 5, "batch_size": 8},
            "federation": {"algorithms": ["fedavg+"], "rounds": 2, "local_steps": 2, "checkpoint_every": 2},
            "evaluation": {"baselines": ["ucrp"]}}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("universes")
    out = home / "run"
    compare(parse_config(universes_config(write_prices(home / "prices.csv"))), out, progress=False)
    return out


def test_saved_configs_read_back_equal() -> None:
    raw = universes_config(Path("/nonexistent/prices.csv"))
    config = parse_config(raw)
    text = dump_config(config)
    assert "n_assets" not in yaml.safe_load(text)["parties"]
    assert parse_config(yaml.safe_load(text)) == config
    for path in sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("study_")):
        config = load_config(path)
        assert parse_config(yaml.safe_load(dump_config(config))) == config, path.name


def test_universes_run_allocates(run: Path, tmp_path: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 2)
    assert trained.tickers == ("AAPL", "IBM")
    day = trained.backtest.index[3]
    np.testing.assert_allclose(allocate(trained, as_of=day).weights,
                               trained.backtest.loc[day, ["cash", "AAPL", "IBM"]].to_numpy(), atol=1e-12)
    result = CliRunner().invoke(app, ["allocate", str(run), "-a", "fedavg+", "-p", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "MSFT" in result.output and len(list(tmp_path.glob("fedavg+_party_1_*.csv"))) == 1


def test_universes_run_exports_a_self_contained_onnx_file(run: Path, tmp_path: Path) -> None:
    onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime (the dev extra) runs the exported file")
    result = CliRunner().invoke(app, ["export", str(run), "-a", "fedavg+", "-p", "0", "--out", str(tmp_path / "desk"),
                                      "--onnx"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "desk").iterdir()) == ["policy.json", "policy.onnx", "policy.pt"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(tmp_path / "desk" / "policy.onnx", elsewhere / "policy.onnx")  # the file alone
    trained = load_trained_party(run, "fedavg+", 0)
    day = trained.backtest.index[5]
    expected = allocate(trained, as_of=day)
    close = trained.market.panel.select(list(trained.tickers)).close.loc[:day].to_numpy()[-trained.agent.window:]
    history = (close / close[-1]).T[None, None].astype(np.float32)
    session = onnxruntime.InferenceSession(str(elsewhere / "policy.onnx"))
    (weights,) = session.run(["weights"], {"history": history, "current": expected.current[None].astype(np.float32)})
    np.testing.assert_allclose(weights[0], expected.weights, atol=1e-6)
    spec = json.loads((tmp_path / "desk" / "policy.json").read_text())
    assert spec["tickers"] == ["AAPL", "MSFT"] and spec["files"]["onnx"] == "policy.onnx"


def test_universes_run_reports(run: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report" / "fedavg+.html").is_file() and (tmp_path / "report" / "index.html").is_file()
