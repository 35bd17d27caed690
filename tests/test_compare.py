"""``compare`` / ``portfed compare``: same parties for every algorithm, Table 1, collapse flags, figures."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.experiment.config import parse_config
from portfed.experiment.reports import load_comparison
from portfed.experiment.studies import compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
FIGURES = ["fig1a_parameter_change.png", "fig1b_learning_curves.png", "fig1c_interpolation.png",
           "fig3a_portfolio_values.png"]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return out, compare(parse_config(TINY), out, ["local", "fedavg", "fedprox", "fedavg+"], progress=False)


def test_every_algorithm_starts_from_the_same_parties(comparison) -> None:
    out, _ = comparison
    rounds = {name: pd.read_csv(out / name / "rounds.csv") for name in ("local", "fedavg", "fedprox", "fedavg+")}
    # Round 0 starts every party at w^0 with the same data, synthetic blocks and sampler seeds, so local
    # training and FedAvg (λ = 1, σ = 0: no mixing) train identically in it — and differ afterwards.
    def at(name: str, t: int) -> pd.Series:
        frame = rounds[name]
        return frame.loc[frame["round"] == t, "train_reward"].reset_index(drop=True)

    pd.testing.assert_series_equal(at("local", 0), at("fedavg", 0))
    assert not at("local", 3).equals(at("fedavg", 3))
    metrics = pd.read_csv(out / "party_metrics.csv")
    assert set(metrics["strategy"]) == {"local", "fedavg", "fedprox", "fedavg+", "UCRP", "UBAH"}
    assert (metrics.groupby("strategy").size() == 3).all()


def test_table1_is_the_party_average_with_spread_and_collapse_flags(comparison) -> None:
    out, result = comparison
    table = result.table
    assert list(table.index) == ["local", "fedavg", "fedprox", "fedavg+", "UCRP", "UBAH"]
    metrics = result.party_metrics
    fedavg = metrics[metrics["strategy"] == "fedavg"]
    assert table.loc["fedavg", "Annualized return (fraction)"] == pytest.approx(fedavg["annualized_return"].mean())
    assert table.loc["fedavg", "Sharpe ratio std (annualized)"] == pytest.approx(fedavg["sharpe"].std(ddof=0))
    assert table.loc["fedavg", "Max drawdown (fraction)"] == pytest.approx(fedavg["max_drawdown"].mean())
    assert set(table.loc[["local", "fedavg", "fedprox", "fedavg+"], "Collapsed"]) <= {"no"} | {
        f"yes (round {t})" for t in range(TINY["federation"]["rounds"])}
    assert table.loc["UCRP", "Collapsed"] == "—"
    for name in FIGURES + ["table1.csv", "table1.md", "collapse.csv", "baseline_values.csv", "config.yaml"]:
        assert (out / name).stat().st_size > 0, name
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["federation"]["algorithms"] == ["local", "fedavg", "fedprox", "fedavg+"]


def test_collapse_csv_reports_both_criteria_with_local_training_as_the_control(comparison) -> None:
    out, result = comparison
    frame = pd.read_csv(out / "collapse.csv", keep_default_na=False).set_index("algorithm")
    assert list(frame.columns[:7]) == ["collapsed", "kind", "round", "spike_round", "spikes", "drops",
                                       "all_cash_parties"]  # the first criterion's columns, unchanged
    assert frame.loc["local", "noise_local_control"] == "self"
    assert set(frame.loc[["fedavg", "fedprox", "fedavg+"], "noise_local_control"]) == {"applied"}
    for name, report in result.noise_collapse.items():
        assert str(frame.loc[name, "noise_collapsed"]) == str(report.collapsed)
        assert float(frame.loc[name, "noise_sigma"]) == pytest.approx(report.sigma)


def test_a_run_directory_reads_back(comparison) -> None:
    out, result = comparison
    loaded = load_comparison(out)
    pd.testing.assert_frame_equal(loaded.table, result.table, check_dtype=False)
    for name, curve in result.curves.items():
        pd.testing.assert_frame_equal(loaded.curves[name], curve, check_dtype=False)
        assert loaded.collapse[name] == result.collapse[name]
        again, first = loaded.noise_collapse[name], result.noise_collapse[name]
        assert again.sigma == pytest.approx(first.sigma, rel=1e-9)  # the curve went through a CSV
        assert replace(again, sigma=first.sigma) == first
    np.testing.assert_allclose(loaded.values["fedavg"].to_numpy(), result.values["fedavg"].to_numpy())


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_cli_compare_prints_table1_and_refuses_unknown_algorithms(tmp_path: Path) -> None:
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"rounds": 2, "local_steps": 2})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    runner = CliRunner()
    result = runner.invoke(app, ["compare", str(config), "--algorithms", "rfa,comed", "--out", str(tmp_path / "o"),
                                 "-q"])
    assert result.exit_code == 0, result.output
    assert "Table 1" in result.output and "rfa" in result.output and "comed" in result.output
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.is_dir()) == ["comed", "fit_cache", "rfa"]
    bad = runner.invoke(app, ["compare", str(config), "--algorithms", "fedavg,nope", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 1 and "unknown algorithm 'nope'" in bad.output
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump({"experiment": "single_party"}))
    wrong = runner.invoke(app, ["compare", str(single), "--out", str(tmp_path / "c")])
    assert wrong.exit_code == 1 and "experiment: federated" in wrong.output


def test_party_metrics_hold_the_benchmark_relative_metrics_and_table1_names_units(comparison) -> None:
    import empyrical

    out, result = comparison
    metrics = pd.read_csv(out / "party_metrics.csv")
    values = pd.read_csv(out / "fedavg" / "portfolio_values.csv", index_col="date", parse_dates=True)
    baselines = pd.read_csv(out / "baseline_values.csv", index_col="date", parse_dates=True)
    assert set(metrics["benchmark"]) == {"UCRP"}  # the default: each party's own UCRP
    for k in range(TINY["parties"]["count"]):
        x, y = values[f"fedavg/party_{k}"].pct_change().dropna(), baselines[f"UCRP/party_{k}"].pct_change().dropna()
        row = metrics[(metrics["strategy"] == "fedavg") & (metrics["party"] == k)].iloc[0]
        alpha, beta = empyrical.alpha_beta(x.to_numpy(), y.to_numpy())
        assert row["beta"] == pytest.approx(beta, rel=1e-9) and row["alpha"] == pytest.approx(alpha, rel=1e-9)
        assert row["tracking_error"] == pytest.approx((x - y).std(ddof=1) * np.sqrt(252), rel=1e-9)
        assert row["up_capture"] == pytest.approx(empyrical.up_capture(x.to_numpy(), y.to_numpy()), rel=1e-9)
    ucrp = metrics[metrics["strategy"] == "UCRP"]
    assert (ucrp["tracking_error"] == 0).all() and np.allclose(ucrp["beta"], 1.0)
    table = pd.read_csv(out / "table1.csv", index_col="Strategy")
    assert table.loc["fedavg", "Tracking error vs UCRP (annualized, fraction)"] == pytest.approx(
        metrics[metrics["strategy"] == "fedavg"]["tracking_error"].mean())
    assert {"Annualized return (fraction)", "Max drawdown (fraction)", "Collapsed",
            "Collapsed, first criterion"} <= set(table.columns)
    markdown = (out / "table1.md").read_text()
    fedavg = table.loc["fedavg", "Annualized return (fraction)"]
    assert "Annualized return (%)" in markdown and f"{100 * fedavg:.2f} (" in markdown
    days = len(baselines) - 1
    assert f"Warning: Annualized figures come from {days} trading days" in markdown  # tiny: 40 days
