"""Hostile parties end to end: a scaling attack that blows a mean aggregate up never stops a comparison.

The attacked FedAvg either ends all-cash (a huge but finite model) or cannot trade at all (its policy
emits a non-finite portfolio); both are collapses with their own verdict, the robust aggregators and
the attacker-free reruns are reported beside them, and every figure is still drawn.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.envs import ActionError, NonFiniteActionError, PortfolioEnv
from portfed.experiment.reports import detect_collapse, load_comparison
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
FIGURES = ("fig1a_parameter_change.png", "fig1b_learning_curves.png", "fig3a_portfolio_values.png")


def _attacked(tmp_path: Path, factor: float):
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"algorithms": ["fedavg", "comed"], "rounds": 4})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    raw["parties"]["faults"] = [{"kind": "scale", "parties": [2], "factor": factor}]
    from portfed.experiment.config import parse_config

    return compare(parse_config(raw), tmp_path, progress=False, n_jobs=1)


def test_a_policy_that_blows_up_is_a_failed_backtest_and_a_collapse(tmp_path: Path) -> None:
    result = _attacked(tmp_path, 1e200)
    metrics = result.party_metrics
    fedavg = metrics[metrics["strategy"] == "fedavg"]
    assert fedavg["failed"].str.startswith("non-finite policy").all()
    assert fedavg["annualized_return"].isna().all()
    assert (metrics.loc[metrics["strategy"] == "comed", "failed"] == "").all()
    assert result.table.loc["fedavg", "Collapsed"] == "yes (blew up: 3 parties cannot trade)"
    assert result.table.loc["comed", "Collapsed"] == "no"
    assert np.isfinite(result.table.loc["comed", "Annualized return (fraction)"])
    robust = pd.read_csv(tmp_path / "robustness.csv", index_col=0)
    assert robust.loc["fedavg", "Failed (faults)"] == "2/2" and robust.loc["fedavg", "Failed (no faults)"] == "0/2"
    assert robust.loc["comed", "Failed (faults)"] == "0/2"
    for name in FIGURES:
        assert (tmp_path / name).stat().st_size > 0
    again = load_comparison(tmp_path)  # the verdicts survive the round trip through CSV
    assert again.table.loc["fedavg", "Collapsed"] == result.table.loc["fedavg", "Collapsed"]
    assert again.table.loc["comed", "Collapsed"] == "no"


def test_an_all_cash_collapse_still_draws_its_figures(tmp_path: Path) -> None:
    result = _attacked(tmp_path, 1e6)
    assert result.table.loc["fedavg", "Collapsed"].startswith("yes (all cash")
    assert result.table.loc["fedavg", "Sharpe ratio (annualized)"] == 0.0  # constant value: Sharpe 0, not nan
    for name in FIGURES:
        assert (tmp_path / name).stat().st_size > 0


def test_failed_parties_make_a_collapse_without_a_date() -> None:
    flat = np.zeros(10)
    report = detect_collapse(flat, flat, failed=[1, 4])
    assert report.collapsed and report.kind == "non_finite" and report.failed == (1, 4) and report.round is None
    assert not detect_collapse(flat, flat).collapsed


def test_a_non_finite_action_is_its_own_action_error() -> None:
    from portfed.data import load_bundled

    env = PortfolioEnv(load_bundled("djia").select(["A", "B"]), window_size=3)
    env.reset(seed=0)
    with pytest.raises(NonFiniteActionError, match="non-finite entries") as caught:
        env.step(np.array([np.nan, 0.5, 0.5]))
    assert isinstance(caught.value, ActionError)
    with pytest.raises(ActionError) as negative:
        env.step(np.array([-1.0, 1.0, 1.0]))
    assert not isinstance(negative.value, NonFiniteActionError)


def test_faults_on_every_party_run_without_a_robustness_table(tmp_path: Path) -> None:
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    raw["parties"]["faults"] = [{"kind": "sign_flip", "parties": [0, 1, 2]}]
    from portfed.experiment.config import parse_config

    compare(parse_config(raw), tmp_path, progress=False, n_jobs=1)
    assert (tmp_path / "table1.csv").exists()
    assert not (tmp_path / "robustness.csv").exists() and not (tmp_path / "without_faults").exists()
