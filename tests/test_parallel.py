"""Parallel comparisons: ``--jobs 2`` gives the same tables and models as ``--jobs 1``, and a robustness
table is written for a config with faults."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.runs import RunJob, default_jobs, run_jobs
from portfed.experiment.studies import CLEAN_DIR, compare

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
ALGORITHMS = ["fedavg", "fedavg+"]


def _raw(**federation) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"algorithms": ALGORITHMS, "rounds": 4, **federation})
    raw["diagnostics"]["interpolation_rounds"] = [1]
    return raw


def _same_models(a: Path, b: Path, names: list[str]) -> None:
    for name in names:
        with np.load(a / name / "models.npz") as x, np.load(b / name / "models.npz") as y:
            for key in ("party_models", "global_model", "deployed"):
                np.testing.assert_array_equal(x[key], y[key])


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_two_jobs_give_bit_identical_tables_and_models(tmp_path: Path) -> None:
    config = parse_config(_raw())
    one = compare(config, tmp_path / "one", progress=False, n_jobs=1)
    two = compare(config, tmp_path / "two", progress=False, n_jobs=2)
    pd.testing.assert_frame_equal(one.table, two.table)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "one" / "party_metrics.csv"),
                                  pd.read_csv(tmp_path / "two" / "party_metrics.csv"))
    _same_models(tmp_path / "one", tmp_path / "two", ALGORITHMS)
    for name in ALGORITHMS:
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "one" / name / "rounds.csv"),
                                      pd.read_csv(tmp_path / "two" / name / "rounds.csv"))


def test_faults_add_a_robustness_table_of_the_honest_parties(tmp_path: Path) -> None:
    raw = _raw()
    raw["parties"]["faults"] = [{"kind": "sign_flip", "parties": [2]}]
    result = compare(parse_config(raw), tmp_path, progress=False)
    robust = pd.read_csv(tmp_path / "robustness.csv", index_col=0)
    assert list(robust.index) == ALGORITHMS
    metrics = result.party_metrics
    honest = metrics[(metrics["strategy"] == "fedavg") & metrics["party"].isin([0, 1])]
    assert robust.loc["fedavg", "Annualized return (faults) (fraction)"] == pytest.approx(honest["annualized_return"].mean())
    clean = pd.read_csv(tmp_path / CLEAN_DIR / "fedavg" / "party_metrics.csv")
    assert robust.loc["fedavg", "Annualized return (no faults) (fraction)"] == pytest.approx(
        clean[clean["party"].isin([0, 1])]["annualized_return"].mean())
    rounds = pd.read_csv(tmp_path / "fedavg" / "rounds.csv")
    assert set(rounds.loc[rounds["party"] == 2, "fault"]) == {"sign_flip"}
    assert (tmp_path / "robustness.md").stat().st_size > 0


def test_nan_fault_is_quarantined_in_the_run_summary(tmp_path: Path) -> None:
    raw = _raw(algorithms=["rfa"])
    raw["parties"]["faults"] = [{"kind": "nan", "parties": [1], "rounds": [0, 2]}]
    compare(parse_config(raw), tmp_path, progress=False)
    quarantine = pd.read_csv(tmp_path / "rfa" / "quarantine.csv", keep_default_na=False)  # the kind "nan" is a string
    assert quarantine[["round", "party", "fault"]].values.tolist() == [[0, 1, "nan"], [2, 1, "nan"]]
    assert quarantine["quarantined"].str.startswith("non-finite update").all()


def test_bad_fault_configs_and_jobs_are_refused() -> None:
    raw = _raw()
    raw["parties"]["faults"] = [{"kind": "nan", "parties": [5]}]
    with pytest.raises(ConfigError, match=r"names parties \[5\]"):
        parse_config(raw)
    raw["parties"]["faults"] = [{"kind": "explode", "parties": [0]}]
    with pytest.raises(ConfigError, match="explode"):
        parse_config(raw)
    config = parse_config(_raw())  # tiny.yaml: torch_threads 1
    import os

    for cpus, expected in ((4, 4), (1, 1), (None, 1)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
            assert default_jobs(config) == expected
    with pytest.raises(ValueError, match="job names must be distinct"):
        run_jobs(None, [RunJob("a", config, "fedavg", Path("x")), RunJob("a", config, "fedavg+", Path("y"))])
    with pytest.raises(ValueError, match="job 'a' has no federation, and none was given"):
        run_jobs(None, [RunJob("a", config, "fedavg", Path("x"))])
