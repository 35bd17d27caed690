"""``evaluation.disclosure: averaged``: only party means of the scalar metrics leave the comparison (issue 49)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.reports import load_comparison, write_report
from portfed.experiment.reports.disclosure import MEANS_FILE, WITHHELD
from portfed.experiment.runs import config_fingerprint
from portfed.experiment.studies import compare
from portfed.flower.node import config_digest

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ALGORITHMS = ["local", "fedavg"]
PER_PARTY_FILES = ("party_metrics.csv", "portfolio_values.csv", "weights.csv", "interpolation.csv",
                   "baseline_values.csv")


def tiny(disclosure: str | None) -> dict:
    raw = copy.deepcopy(TINY)
    if disclosure is not None:
        raw["evaluation"]["disclosure"] = disclosure
    return raw


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("disclosure")
    for mode in ("per_party", "averaged"):
        compare(parse_config(tiny(mode)), out / mode, ALGORITHMS, progress=False)
    return out / "per_party", out / "averaged"


def test_an_averaged_comparison_writes_no_per_party_file(runs) -> None:
    per_party, averaged = runs
    written = {p.name for p in averaged.rglob("*") if p.is_file()}
    assert not written & set(PER_PARTY_FILES), written & set(PER_PARTY_FILES)
    assert not {"fig1c_interpolation.png", "fig3a_portfolio_values.png", "weights_party_0.png"} & written
    assert {"table1.csv", "table1.md", MEANS_FILE, "collapse.csv", "fig1a_parameter_change.png"} <= written
    assert "all_cash_parties" not in pd.read_csv(averaged / "collapse.csv").columns
    assert json.loads((averaged / "run.json").read_text())["disclosure"] == "averaged"
    # the per_party run of the same config writes them all, and run.json as before the key existed
    assert {"party_metrics.csv", "weights.csv", "portfolio_values.csv"} <= {p.name for p in per_party.rglob("*")}
    assert "disclosure" not in json.loads((per_party / "run.json").read_text())


def test_table1_holds_exactly_the_per_party_runs_means_and_no_spread(runs) -> None:
    per_party, averaged = runs
    full = pd.read_csv(per_party / "table1.csv", index_col="Strategy", float_precision="round_trip")
    means = pd.read_csv(averaged / "table1.csv", index_col="Strategy", float_precision="round_trip")
    assert not [c for c in means.columns if " std " in c]
    assert [c for c in full.columns if " std " in c]  # the per_party table has them
    pd.testing.assert_frame_equal(means, full[means.columns], check_exact=True)
    assert list(means.columns) == [c for c in full.columns if " std " not in c]
    assert WITHHELD in (averaged / "table1.md").read_text()


def test_mean_metrics_are_the_party_means_of_every_scalar_metric(runs) -> None:
    per_party, averaged = runs
    rows = pd.read_csv(per_party / "party_metrics.csv", float_precision="round_trip")
    means = pd.read_csv(averaged / MEANS_FILE, float_precision="round_trip").set_index("strategy")
    for key in ("annualized_volatility", "sortino", "turnover", "mean_cash", "tracking_error"):
        for strategy, row in means.iterrows():
            assert row[key] == rows.loc[rows["strategy"] == strategy, key].mean(), (strategy, key)
    assert means["parties"].tolist() == [3] * len(means)
    assert means["days"].tolist() == [40] * len(means)


def test_an_averaged_directory_reads_back_and_its_tearsheet_says_what_was_withheld(runs, tmp_path) -> None:
    _, averaged = runs
    comparison = load_comparison(averaged)
    assert comparison.party_metrics.empty and not comparison.values and comparison.disclosure == "averaged"
    pd.testing.assert_frame_equal(comparison.table, pd.read_csv(averaged / "table1.csv", index_col="Strategy",
                                                                float_precision="round_trip"), check_exact=True)
    assert WITHHELD in comparison.table.attrs["note"]
    pages = write_report(averaged, tmp_path / "report")
    assert list(pages) == ["summary"]
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["index.html", "plotly.min.js"]
    summary = (tmp_path / "report" / "index.html").read_text()
    assert "Per-party results were withheld" in summary and "party 0" not in summary


def test_allocate_refuses_an_averaged_comparison_in_one_line(runs) -> None:
    _, averaged = runs
    result = CliRunner().invoke(app, ["allocate", str(averaged), "-a", "fedavg", "-p", "0"])
    assert result.exit_code == 1
    assert "evaluation.disclosure=averaged" in result.output and "Traceback" not in result.output


def test_the_default_keeps_every_fingerprint_and_averaged_is_another_experiment() -> None:
    plain, explicit, averaged = (parse_config(tiny(mode)) for mode in (None, "per_party", "averaged"))
    assert config_fingerprint(plain) == config_fingerprint(explicit) != config_fingerprint(averaged)
    assert config_digest(plain) == config_digest(explicit) != config_digest(averaged)
    with pytest.raises(ConfigError, match="disclosure"):
        parse_config(tiny("mean"))


def test_a_collapse_study_refuses_the_averaged_mode_naming_why() -> None:
    from portfed.experiment.config import parse_study_config

    raw = yaml.safe_load((Path(__file__).parents[1] / "configs" / "study_collapse.yaml").read_text())
    raw["base"].setdefault("evaluation", {})["disclosure"] = "averaged"
    with pytest.raises(ConfigError, match="evaluation.disclosure=averaged: the study's collapse verdicts"):
        parse_study_config(raw)
    raw["base"]["evaluation"]["disclosure"] = "per_party"
    parse_study_config(raw)


def test_the_cli_sets_the_mode_and_prints_the_means_only(tmp_path: Path) -> None:
    config = Path(__file__).parents[1] / "configs" / "tiny.yaml"
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(tmp_path / "run"), "-a", "fedavg", "-q",
                                      "--set", "evaluation.disclosure=averaged", "--set", "federation.rounds=2",
                                      "--set", "diagnostics.interpolation_rounds=[1]"])
    assert result.exit_code == 0, result.output
    assert "withheld" in result.output  # the note under the printed Table 1
    assert not (tmp_path / "run" / "party_metrics.csv").exists() and (tmp_path / "run" / MEANS_FILE).is_file()
    refused = CliRunner().invoke(app, ["run", str(config), "--out", str(tmp_path / "bad"), "--set",
                                       "evaluation.disclosure=everything"])
    assert refused.exit_code != 0 and "disclosure" in refused.output and "Traceback" not in refused.output
