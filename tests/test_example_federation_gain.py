"""examples/federation_gain.py: the per-cell gains it reports from a study's party_metrics.csv files."""

from __future__ import annotations

from pathlib import Path

import federation_gain  # examples/federation_gain.py: tests/conftest.py puts examples/ on the path
import pandas as pd
import pytest


def _write(run: Path, strategy: str, returns: list[float], sharpes: list[float], cash: list[float]) -> None:
    run.mkdir(parents=True)
    frame = pd.DataFrame({"strategy": strategy, "party": range(len(returns)), "annualized_return": returns,
                          "sharpe": sharpes, "mean_cash": cash})
    # a baseline row of another strategy in the same file must be ignored
    extra = pd.DataFrame({"strategy": ["ucrp"], "party": [0], "annualized_return": [9.0], "sharpe": [9.0],
                          "mean_cash": [0.0]})
    pd.concat([frame, extra]).to_csv(run / "party_metrics.csv", index=False)


def test_gains_per_cell_mean_max_and_on_the_common_parties(tmp_path: Path) -> None:
    study = tmp_path / "study"
    _write(study / "runs" / "base" / "seed0" / "local", "local", [0.10, 0.20, 0.30], [1.0, 1.0, 1.0], [0.1, 1.0, 0.2])
    _write(study / "runs" / "base" / "seed0" / "fedavg+", "fedavg+", [0.15, 0.10, 0.30], [1.5, 0.5, 1.0],
           [0.1, 0.2, 0.995])
    _write(study / "runs" / "parties.count=2" / "seed0" / "local", "local", [0.10, 0.20], [1.0, 1.0], [0.1, 1.0])
    _write(study / "runs" / "parties.count=2" / "seed0" / "fedavg+", "fedavg+", [0.05, 0.20], [0.5, 2.0], [0.1, 0.1])
    (study / "runs" / "parties.count=9" / "seed0" / "local").mkdir(parents=True)  # unfinished: left out
    table = federation_gain.federation_gains(study).set_index("cell")
    assert table.index.tolist() == ["parties.count=2", "base"]  # by party count
    base = table.loc["base"]
    assert base["parties"] == 3 and base["local_in_cash"] == 1 and base["fedavg+_in_cash"] == 1
    assert base["gain_mean"] == pytest.approx((0.05 - 0.10 + 0.0) / 3) and base["gain_max"] == pytest.approx(0.05)
    assert base["sharpe_gain_max"] == pytest.approx(0.5)
    assert base["gain_mean_first_2"] == pytest.approx((0.05 - 0.10) / 2)
    small = table.loc["parties.count=2"]
    assert small["gain_mean"] == pytest.approx(-0.025) and small["gain_mean_first_2"] == pytest.approx(-0.025)
    assert small["fedavg+_return"] == pytest.approx(0.125) and small["sharpe_gain_max"] == pytest.approx(1.0)


def test_a_study_without_both_arms_or_with_different_parties_is_refused(tmp_path: Path) -> None:
    study = tmp_path / "study"
    _write(study / "runs" / "base" / "seed0" / "local", "local", [0.1, 0.2], [1.0, 1.0], [0.1, 0.1])
    with pytest.raises(SystemExit, match="no cell below .* 'local' and 'fedavg\\+'"):
        federation_gain.federation_gains(study)
    _write(study / "runs" / "base" / "seed0" / "fedavg+", "fedavg+", [0.1], [1.0], [0.1])
    with pytest.raises(SystemExit, match="report different parties"):
        federation_gain.federation_gains(study)


def test_a_comparison_directory_is_one_cell(tmp_path: Path) -> None:
    compare = tmp_path / "paper_sp500"
    _write(compare / "local", "local", [0.10, 0.20, 0.30], [1.0, 1.0, 1.0], [0.995, 0.1, 0.2])
    _write(compare / "fedavg", "fedavg", [0.30, 0.10, 0.40], [1.5, 0.5, 1.0], [0.1, 0.1, 0.1])
    row = federation_gain.federation_gains(compare, "fedavg").iloc[0]
    assert row["cell"] == "compare" and row["parties"] == 3 and row["local_in_cash"] == 1
    assert row["gain_mean"] == pytest.approx(0.2 / 3) and row["gain_median"] == pytest.approx(0.1)  # 0.2, −0.1, 0.1
    assert row["gain_max"] == pytest.approx(0.2)
