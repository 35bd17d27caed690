"""A single-party run at the desk: its saved agent is what allocate and export read; ``--yahoo`` refuses a
bundled dataset's anonymised tickers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from portfed.cli.deploy_cmd import _refuse_anonymised
from portfed.cli.main import app
from portfed.data.errors import DataError
from portfed.deploy import allocate, load_trained_party
from portfed.experiment.config import parse_config
from portfed.experiment.runs.single_party import SINGLE_PARTY_ALGORITHM, run_single_party

TINY = {
    "experiment": "single_party",
    "seed": 3,
    "data": {"source": "djia", "tickers": ["A", "B", "C"], "test_days": 15},
    "agent": {"network": "cnn", "window": 5, "batch_size": 8, "learning_rate": 1e-3},
    "training": {"steps": 6, "log_every": 3},
    "evaluation": {"baselines": ["ucrp"]},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single")
    run_single_party(parse_config(TINY), out, progress=False)
    return out


def test_the_saved_agent_is_the_backtested_one(run: Path) -> None:
    trained = load_trained_party(run, SINGLE_PARTY_ALGORITHM, 0)
    assert trained.tickers == ("A", "B", "C") and trained.party == 0
    values = pd.read_csv(run / "portfolio_values.csv", index_col=0, parse_dates=True)["EIIE-CNN"]
    assert trained.market.train_end == values.index[0]  # the first decision is at the last training close
    # Every held-out decision of the saved agent, from the backtest's own holdings, is the backtest's.
    trades = trained.backtest
    assert len(trades) == 15 and list(trades.index) == list(values.index[:-1])
    np.testing.assert_allclose(trades["value"].to_numpy(), values.to_numpy()[:-1], rtol=1e-12)
    for day in (trades.index[3], trades.index[-1]):
        before = trades[trades.index < day]
        current = before[["cash", "A", "B", "C"]].iloc[-1].to_numpy()
        decided = allocate(trained, None, str(day.date()), current)
        np.testing.assert_allclose(decided.weights, trades.loc[day, ["cash", "A", "B", "C"]].to_numpy(dtype=float),
                                   atol=1e-6)


def test_allocate_and_export_run_on_a_single_party_run(run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["allocate", str(run), "--algorithm", "local", "--party", "0",
                                 "--out", str(tmp_path / "alloc")])
    assert result.exit_code == 0, result.output
    assert "local, party 0" in result.output
    result = runner.invoke(app, ["export", str(run), "--algorithm", "local", "--party", "0",
                                 "--out", str(tmp_path / "export")])
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "export" / "policy.json").read_text())
    assert meta["tickers"] == ["A", "B", "C"]
    assert torch.jit.load(str(tmp_path / "export" / "policy.pt")) is not None


def test_a_single_party_run_has_one_party_and_one_algorithm(run: Path) -> None:
    result = CliRunner().invoke(app, ["allocate", str(run), "--algorithm", "local", "--party", "1"])
    assert result.exit_code == 1 and "has no party 1" in result.output
    result = CliRunner().invoke(app, ["allocate", str(run), "--algorithm", "fedavg", "--party", "0"])
    assert result.exit_code == 1 and "'local'" in " ".join(result.output.split())


def test_yahoo_refuses_a_bundled_run_with_anonymised_tickers(run: Path, monkeypatch) -> None:
    asked = []
    monkeypatch.setattr("portfed.data.fetch_yahoo", lambda *a, **k: asked.append(a))
    result = CliRunner().invoke(app, ["allocate", str(run), "--algorithm", "local", "--party", "0", "--yahoo"])
    assert result.exit_code == 1 and not asked
    text = " ".join(result.output.split())
    assert "bundled dataset 'djia'" in text and "anonymised" in text and "--prices" in text
    assert "Traceback" not in result.output


def test_only_datasets_without_exchange_symbols_are_refused() -> None:
    def trained(source: str) -> SimpleNamespace:
        return SimpleNamespace(market=SimpleNamespace(name=source), party=0, tickers=("AAPL",))

    _refuse_anonymised(trained("skfolio_sp500"))  # real symbols: Yahoo knows them
    _refuse_anonymised(trained("/data/my_prices.csv"))  # the user's own tickers
    for bundled in ("nyse_n", "nyse_o", "djia", "sp500", "tse", "msci"):
        with pytest.raises(DataError, match="anonymised"):
            _refuse_anonymised(trained(bundled))



def test_the_single_party_table_holds_the_metrics_against_its_benchmark(tmp_path: Path) -> None:
    raw = {**TINY, "evaluation": {"baselines": ["ucrp", "ubah"], "benchmark": "djia:B", "risk_free": 0.02}}
    result = run_single_party(parse_config(raw), tmp_path, progress=False)
    table = pd.read_csv(tmp_path / "metrics.csv", index_col=0)
    values = pd.read_csv(tmp_path / "portfolio_values.csv", index_col=0, parse_dates=True)
    from portfed.data import load_bundled
    from portfed.evaluation.relative import relative_metrics

    index = load_bundled("djia").close["B"].loc[values.index]
    expected = relative_metrics(values["UBAH"].to_numpy(), index.to_numpy(), 252, 0.02)
    assert table.loc["UBAH", "Beta vs djia:B (regression slope)"] == pytest.approx(expected["beta"], rel=1e-9)
    assert table.loc["UBAH", "Alpha vs djia:B (annualized, fraction)"] == pytest.approx(expected["alpha"], rel=1e-9)
    assert "Benchmark: djia:B; risk-free rate 2 % a year" in result.metrics.attrs["note"]
    assert "Warning: Annualized figures come from 15 trading days" in (tmp_path / "metrics.md").read_text()
