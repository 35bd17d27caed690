"""The desk beyond allocate: risk limits in a run's backtests and allocations, ``portfed.load`` and
``portfed backtest`` on prices that did not exist at training time, and ``portfed orders``."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import portfed
from portfed.cli.main import app
from portfed.deploy import RunDirectoryError, allocate, load_trained_party
from portfed.deploy.orders import book_weights, share_orders
from portfed.envs import transaction_remainder
from portfed.experiment.config import parse_config
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
CAP, TURNOVER = 0.3, 0.2


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    raw = copy.deepcopy(TINY)
    raw["data"]["test_days"] = 12
    raw["parties"].update({"count": 2, "generators": [None], "generator_params": {}})
    raw["agent"].update({"max_weight": CAP, "max_turnover": TURNOVER})
    raw["federation"].update({"algorithms": ["fedavg+"], "rounds": 2, "local_steps": 3, "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = []
    out = tmp_path_factory.mktemp("desk")
    compare(parse_config(raw), out, progress=False)
    return out


def new_prices(trained, path: Path, days: int = 30, seed: int = 11) -> Path:
    """The party's closes followed by ``days`` business days after the run's last date (a seeded walk)."""
    close = trained.market.panel.select(list(trained.tickers)).close
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range(close.index[-1] + pd.offsets.BDay(1), periods=days)
    walk = close.iloc[-1].to_numpy() * np.exp(np.cumsum(rng.normal(0, 0.02, (days, close.shape[1])), axis=0))
    frame = pd.concat([close, pd.DataFrame(walk, index=dates, columns=close.columns)])
    frame.index.name = "date"
    frame.to_csv(path)
    return path


def check_limits(weights: np.ndarray, turnover: np.ndarray, held: np.ndarray) -> None:
    assert weights[:, 1:].max() <= CAP + 1e-9
    floors = np.maximum(held[:, 1:] - CAP, 0).sum(axis=1)
    assert (turnover <= np.maximum(TURNOVER, floors) + 1e-9).all()


def test_a_runs_backtests_and_allocations_respect_the_limits(run: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 0)
    assert trained.agent.limits.max_weight == CAP
    rows = trained.backtest
    held = rows[["cash", *trained.tickers]].to_numpy()
    assert held[:, 1:].max() <= CAP + 1e-12
    assert rows["turnover"].iloc[0] == pytest.approx(TURNOVER, abs=1e-12)  # the first buy from cash is limited
    assert (rows["turnover"] <= TURNOVER + 1e-9).all()
    for day in rows.index[[0, 4, 9]]:
        # allocate drifts the previous decision over the day in float32 (the backtest knows the book exactly)
        np.testing.assert_allclose(allocate(trained, as_of=day).weights, rows.loc[day, ["cash", *trained.tickers]],
                                   atol=1e-6)


def test_load_backtests_a_trained_agent_on_new_prices(run: Path, tmp_path: Path) -> None:
    agent = portfed.load(run, party=1)  # the run's only algorithm
    assert isinstance(agent, portfed.TrainedAgent) and agent.trained.algorithm == "fedavg+"
    own = agent.backtest(agent.trained.market.panel, start=agent.trained.market.train_end)["fedavg+"]
    np.testing.assert_allclose(own.actions, agent.trained.backtest[["cash", *agent.tickers]].to_numpy(), atol=1e-12)
    csv = new_prices(agent.trained, tmp_path / "new.csv")
    last = agent.trained.market.panel.dates[-1]
    results = agent.backtest(csv, start=last, baselines=("ucrp", "ubah"))
    assert list(results) == ["fedavg+", "UCRP", "UBAH"]
    result = results["fedavg+"]
    assert result.dates[0] == last and len(result.rewards) == 30 and (result.dates[1:] > last).all()
    check_limits(result.actions, result.turnover, result.holdings)
    for i in (1, 17):  # the backtest's decision is allocate's, given the previous decision
        allocation = agent.allocate(csv, as_of=result.dates[i], current=result.actions[i - 1])
        np.testing.assert_allclose(allocation.weights, result.actions[i], atol=1e-6)
    with pytest.raises(RunDirectoryError, match="no trained algorithm"):
        portfed.load(run, "fedavg", 1)


def test_cli_backtest_writes_metrics_values_and_weights(run: Path, tmp_path: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 0)
    csv = new_prices(trained, tmp_path / "new.csv")
    start = str(trained.market.panel.dates[-1].date())
    result = CliRunner().invoke(app, ["backtest", str(run), "--prices", str(csv), "-p", "0", "--start", start,
                                      "--out", str(tmp_path / "bt")])
    assert result.exit_code == 0, result.output
    metrics = pd.read_csv(tmp_path / "bt" / "metrics.csv", index_col=0)
    assert {"fedavg+", "UCRP", "UBAH"} <= set(metrics.index.astype(str).str.replace(" (hindsight)", ""))
    weights = pd.read_csv(tmp_path / "bt" / "weights.csv", index_col="date", parse_dates=True)
    assert len(weights) == 30 and list(weights.columns[-len(trained.tickers):]) == list(trained.tickers)
    values = pd.read_csv(tmp_path / "bt" / "portfolio_values.csv", index_col="date", parse_dates=True)
    assert len(values) == 31 and values["fedavg+"].iloc[0] == 1.0
    close = pd.read_csv(csv, index_col="date").drop(columns=[trained.tickers[0]])
    close.to_csv(tmp_path / "missing.csv")
    bad = CliRunner().invoke(app, ["backtest", str(run), "--prices", str(tmp_path / "missing.csv"), "-p", "0"])
    assert bad.exit_code == 1 and f"lack the party's ticker(s) ['{trained.tickers[0]}']" in bad.output
    assert "Traceback" not in bad.output


def test_orders_never_spend_more_than_the_cash_and_reach_the_target_within_a_lot() -> None:
    rng = np.random.default_rng(2)
    for case in range(200):
        m = int(rng.integers(1, 8))
        prices = rng.uniform(1, 800, m)
        shares = rng.integers(0, 300, m).astype(float) * (case % 3 != 0)
        cash = float(rng.uniform(0, 5e4)) + (1e3 if shares.sum() == 0 else 0)
        weights = rng.dirichlet(np.full(m + 1, 0.4))
        if case % 5 == 0:
            weights[0] = 0.0
            weights /= weights.sum()
        lot = float(rng.choice([1, 10, 100, 0.01]))
        commission = float(rng.choice([0.0, 0.002, 0.01]))
        book = share_orders(weights, cash, shares, prices, commission, lot)
        assert book.cash_after >= 0, case
        bought = np.maximum(book.orders, 0) @ prices / (1 - commission)
        sold = (1 - commission) * np.maximum(-book.orders, 0) @ prices
        assert bought <= cash + sold + 1e-9 * (cash + sold), case  # purchases paid from the cash and the sales
        np.testing.assert_allclose(book.orders / lot, np.round(book.orders / lot), atol=1e-9)
        gap = book.target - book.shares_after
        assert (gap >= -1e-9).all() and (gap < lot + 1e-9).all(), case
        mu = transaction_remainder(book_weights(cash, shares, prices), weights, commission)
        value = cash + shares @ prices
        np.testing.assert_allclose(book.target * prices, weights[1:] * mu * value, rtol=1e-12)


def test_cli_orders_writes_a_review_table(run: Path, tmp_path: Path) -> None:
    trained = load_trained_party(run, "fedavg+", 0)
    holdings = tmp_path / "holdings.csv"
    pd.DataFrame({"asset": [trained.tickers[0]], "shares": [120]}).to_csv(holdings, index=False)
    result = CliRunner().invoke(app, ["orders", str(run), "-p", "0", "--capital", "25000", "--holdings", str(holdings),
                                      "--lot", "5", "--out", str(tmp_path / "orders.csv")])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(tmp_path / "orders.csv")
    assert list(frame["asset"]) == [*trained.tickers, "cash"]
    assets = frame.iloc[:-1]
    assert (assets["order"] % 5 == 0).all() and frame["shares_after"].iloc[-1] >= 0
    close = trained.market.panel.select(list(trained.tickers)).close.iloc[-1].to_numpy()
    np.testing.assert_allclose(assets["price"], close)
    assert ((assets["target_shares"] - assets["shares_after"]).between(-1e-9, 5)).all()
    assert assets["target_weight"].max() <= CAP + 1e-9  # the agent's limits hold in the orders too
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"asset": ["NOPE"], "shares": [1]}).to_csv(bad, index=False)
    refused = CliRunner().invoke(app, ["orders", str(run), "-p", "0", "--capital", "1000", "--holdings", str(bad)])
    assert refused.exit_code == 1 and "['NOPE'] are not traded by the party" in refused.output
    broke = CliRunner().invoke(app, ["orders", str(run), "-p", "0", "--capital", "-5"])
    assert broke.exit_code == 1 and "capital (cash) must be a finite amount >= 0, got -5.0" in broke.output


def test_the_export_spec_names_the_limits(run: Path, tmp_path: Path) -> None:
    import json

    from portfed.deploy import export_policy

    paths = export_policy(load_trained_party(run, "fedavg+", 0), tmp_path)
    limits = json.loads(paths["spec"].read_text())["risk_limits"]
    assert limits["max_weight"] == CAP and limits["max_turnover"] == TURNOVER
