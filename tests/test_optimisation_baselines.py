"""The skfolio optimisation baselines (:mod:`portfed.agents.optimisation_baselines`): walk-forward without
look-ahead, trades only on re-estimation days, rows of a comparison."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.agents import make_baselines
from portfed.agents.optimisation_baselines import (
    OPTIMISATION_BASELINES,
    OptimisationSchedule,
    fit_target,
    optimisation_targets,
)
from portfed.data import load_bundled
from portfed.envs import PortfolioEnv
from portfed.evaluation import backtest

SCHEDULE = OptimisationSchedule(rebalance_every=10, lookback=120)
TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


@pytest.fixture(scope="module")
def close() -> pd.DataFrame:
    return load_bundled("djia").select(["L", "O", "X", "A"]).close.iloc[:260]


def run(close: pd.DataFrame, name: str, start: pd.Timestamp):
    (policy,) = make_baselines(close, start, names=[name], optimisation=SCHEDULE)
    return backtest(policy, PortfolioEnv(close, window_size=5, start=start))


@pytest.mark.parametrize("name", OPTIMISATION_BASELINES)
def test_weights_of_day_t_use_no_price_after_t_minus_1(close: pd.DataFrame, name: str) -> None:
    start = close.index[200]  # decisions on days 200 … 258, re-estimated on 200, 210, …, 250
    t = 223  # the weights held on day t are decided at the close of t − 1
    perturbed = close.copy()
    rng = np.random.default_rng(5)
    perturbed.iloc[t:] *= np.exp(np.cumsum(rng.normal(0, 0.05, perturbed.iloc[t:].shape), axis=0))
    before, after = run(close, name, start), run(perturbed, name, start)
    decided = before.dates[:-1] < close.index[t]  # decisions at the closes of days <= t − 1
    assert decided.sum() == t - 200
    np.testing.assert_array_equal(before.actions[decided], after.actions[decided])
    assert np.abs(before.actions[~decided] - after.actions[~decided]).max() > 1e-4  # the test can see a change


@pytest.mark.parametrize("name", OPTIMISATION_BASELINES)
def test_targets_are_skfolio_fits_on_the_trailing_returns(close: pd.DataFrame, name: str) -> None:
    decisions = close.index[200:-1]
    targets = optimisation_targets(name, close, decisions, SCHEDULE)
    assert list(targets.index) == list(decisions[::10])
    for day in targets.index[[0, 3]]:
        returns = close.loc[:day].pct_change().iloc[-120:]
        assert returns.index[-1] == day and len(returns) == 120
        np.testing.assert_allclose(targets.loc[day].to_numpy(), fit_target(name, returns), atol=1e-12)
        assert targets.loc[day, "cash"] == 0 or name == "Max Sharpe"
    result = run(close, name, decisions[0])
    rebalanced = np.isin(result.dates[:-1], targets.index)
    np.testing.assert_allclose(result.actions[rebalanced], targets.to_numpy(), atol=1e-12)
    assert result.turnover[~rebalanced].max() < 1e-12 and (result.mu[~rebalanced] == pytest.approx(1.0, abs=1e-9))
    assert result.turnover[rebalanced].min() >= 0 and result.turnover[0] > 0.99  # bought from all cash


def test_max_sharpe_holds_cash_when_no_asset_beats_it() -> None:
    returns = pd.DataFrame(np.random.default_rng(0).normal(-0.003, 0.01, (60, 3)),
                           index=pd.bdate_range("2020-01-01", periods=60), columns=["a", "b", "c"])
    np.testing.assert_array_equal(fit_target("Max Sharpe", returns), [1.0, 0.0, 0.0, 0.0])
    assert fit_target("Max Sharpe", returns + 0.004)[0] == 0.0
    with pytest.raises(ValueError, match="rebalance_every"):
        OptimisationSchedule(rebalance_every=0)


def test_optimisation_baselines_are_rows_of_a_comparison(tmp_path: Path) -> None:
    from portfed.experiment.config import ConfigError, parse_config
    from portfed.experiment.studies import compare

    raw = copy.deepcopy(TINY)
    raw["parties"].update({"count": 2, "generators": [None], "generator_params": {}})
    raw["federation"].update({"algorithms": ["local"], "rounds": 1, "local_steps": 2, "checkpoint_every": 1})
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["evaluation"].update({"baselines": ["ucrp", "min_variance", "max_sharpe", "risk_parity", "hrp",
                                            "inverse_volatility"], "optimisation": {"rebalance_every": 5}})
    result = compare(parse_config(raw), tmp_path, progress=False)
    metrics = pd.read_csv(tmp_path / "party_metrics.csv")
    for name in OPTIMISATION_BASELINES:
        rows = metrics[metrics["strategy"] == name]
        assert len(rows) == 2 and rows["fapv"].notna().all() and (rows["failed"].fillna("") == "").all(), name
    table = (tmp_path / "table1.md").read_text()
    assert all(f"| {name} |" in table for name in OPTIMISATION_BASELINES)
    assert set(OPTIMISATION_BASELINES) <= set(result.party_metrics["strategy"])
    raw["evaluation"]["baselines"] = ["ucrp", "hrp", "HRP"]
    with pytest.raises(ConfigError, match="'HRP' is listed more than once"):
        parse_config(raw)
    raw["evaluation"]["baselines"] = ["ucrp", "min_varience"]
    with pytest.raises(ConfigError, match="min_varience"):
        parse_config(raw)
