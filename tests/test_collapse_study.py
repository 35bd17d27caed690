"""``portfed study collapse``: the grid, each cell's config, the per-run rows, the map, and resuming a killed sweep."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.evaluation import asset_spread
from portfed.experiment.config import (
    ConfigError,
    cell_config,
    cells,
    load_config,
    load_study_config,
    parse_study_config,
)
from portfed.experiment.reports import assess_collapse, collapse_rule, detect_noise_collapse, noise_rule
from portfed.experiment.runs import RunDirError
from portfed.experiment.studies.collapse_seeds import seed_summary
from portfed.experiment.studies.collapse_study import ROWS_FILE, run_collapse_study

ROOT = Path(__file__).parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())


def _raw(**changes) -> dict:
    base = copy.deepcopy(TINY)
    base["parties"]["generators"] = [None]
    base["parties"].pop("generator_params")
    base["federation"].update(rounds=5, local_steps=3, checkpoint_every=2)
    raw = {"study": "collapse", "base": base, "algorithms": ["fedavg", "fedavg+"], "seeds": [0, 1],
           "factors": {"learning_rate": [1e-3, 1e-2], "optimizer_state": ["keep", "reset"],
                       "heterogeneity": ["same_market", "cross_market"], "participation": [1.0, 0.5]},
           "cross_markets": [{"source": "djia", "test_days": 40}, {"source": "sp500", "test_days": 40}]}
    raw.update(changes)
    return raw


def test_one_factor_at_a_time_around_the_first_levels_and_the_full_grid() -> None:
    study = parse_study_config(_raw())
    names = [c.name for c in cells(study)]
    assert names == ["base", "learning_rate=0.01", "heterogeneity=cross_market", "optimizer_state=reset",
                     "participation=0.5"]
    assert cells(study)[0].settings == {"learning_rate": 1e-3, "local_steps": 20, "heterogeneity": "same_market",
                                        "optimizer_state": "keep", "participation": 1.0}
    full = cells(parse_study_config(_raw(design="full")))
    assert len(full) == 16 and len({c.name for c in full}) == 16
    assert "learning_rate=0.01,heterogeneity=cross_market,optimizer_state=reset,participation=0.5" in {
        c.name for c in full}


def test_a_cell_config_carries_its_settings() -> None:
    study = parse_study_config(_raw())
    by_name = {c.name: c for c in cells(study)}
    base = cell_config(study, by_name["base"], 1)
    assert base.seed == 1 and base.federation.algorithms == ["fedavg", "fedavg+"]
    assert base.federation.local_steps == 20 and base.federation.parties_per_round is None
    assert base.diagnostics.interpolation_rounds == [] and base.parties.markets == []
    assert cell_config(study, by_name["learning_rate=0.01"], 0).agent_config().learning_rate == 0.01
    assert cell_config(study, by_name["participation=0.5"], 0).federation.parties_per_round == 2  # round(1.5)
    assert cell_config(study, by_name["optimizer_state=reset"], 0).federation.optimizer_state == "reset"
    assert [m.source for m in cell_config(study, by_name["heterogeneity=cross_market"], 0).parties.markets] == [
        "djia", "sp500"]


def test_any_config_key_can_be_a_factor_and_the_base_is_not_changed_by_a_cell() -> None:
    raw = _raw()
    raw["factors"]["keys"] = {"agent.network": ["cnn", "rnn"],
                              "federation.algorithm_params.fedavg+.sigma": [0.01, 5.0]}
    raw["base"]["federation"]["algorithm_params"] = {"fedavg+": {"sigma": 0.01, "lam": 0.001}}
    study = parse_study_config(raw)
    by_name = {c.name: c for c in cells(study)}
    assert list(by_name)[-2:] == ["agent.network=rnn", "federation.algorithm_params.fedavg+.sigma=5.0"]
    assert cells(study)[0].settings["agent.network"] == "cnn"
    assert cell_config(study, by_name["agent.network=rnn"], 0).agent_config().network == "rnn"
    assert cell_config(study, by_name["base"], 0).agent_config().network == "cnn"
    pulled = cell_config(study, by_name["federation.algorithm_params.fedavg+.sigma=5.0"], 0)
    assert pulled.federation.algorithm_params["fedavg+"] == {"sigma": 5.0, "lam": 0.001}
    assert study.base["federation"]["algorithm_params"]["fedavg+"]["sigma"] == 0.01  # a deep copy per cell
    assert len(cells(parse_study_config({**raw, "design": "full"}))) == 16 * 4
    # the shipped second study: 12 cells around the paper's agent
    shipped = load_study_config(ROOT / "configs" / "study_collapse_paper.yaml")
    base = cell_config(shipped, cells(shipped)[0], 0)
    agent = base.agent_config()
    assert (agent.network, agent.input_scale, agent.learner, agent.learning_rate) == ("rnn", "raw", "direct", 5e-5)
    assert (base.federation.initial_models, base.federation.rounds, base.federation.local_steps) == ("per_party", 400, 50)
    assert len(cells(shipped)) == 12
    assert sum(len(shipped.algorithms_of(c)) for c in cells(shipped)) == 8 + 11 * 3  # the 3-hour budget's runs
    # paper 000's claim 6 at the same point: K = 10 (the base), 5, 25, 50; local training and FedAvg+
    parties = load_study_config(ROOT / "configs" / "study_parties_paper.yaml")
    assert parties.base == shipped.base
    assert [cell_config(parties, c, 0).parties.count for c in cells(parties)] == [10, 5, 25, 50]
    assert all(parties.algorithms_of(c) == ["local", "fedavg+"] for c in cells(parties))


def test_the_faithful_and_the_cash_drift_configs_are_the_second_studys_base_cell() -> None:
    # what a run of the study's base cell trains (its generators included), as plain experiment configs:
    # configs/faithful_paper.yaml (tuning and the test-year comparison) and configs/cash_drift_paper.yaml (the
    # cash-drift runs of docs/reports/reproduction_earlier.md §7: local training for 150 rounds)
    shipped = load_study_config(ROOT / "configs" / "study_collapse_paper.yaml")
    base = cell_config(shipped, cells(shipped)[0], 0).model_dump()
    faithful = load_config(ROOT / "configs" / "faithful_paper.yaml").model_dump()
    assert faithful["parties"]["generators"] == ["gbm", "vom", "gan"]
    assert faithful == base
    # The cash drift of §7's dated section is the actor-critic's (portfed's DDPG variant), measured when it
    # was the study's base: the same cell with that learner.
    drift = load_config(ROOT / "configs" / "cash_drift_paper.yaml").model_dump()
    changed = {(section, key) for section in base if isinstance(base[section], dict)
               for key in base[section] if drift[section][key] != base[section][key]}
    assert changed == {("federation", "rounds"), ("federation", "algorithms"), ("federation", "checkpoint_every"),
                       ("agent", "learner")}
    assert (drift["agent"]["learner"], drift["agent"]["gamma"]) == ("actor_critic", 0.99)
    assert (drift["federation"]["rounds"], drift["federation"]["algorithms"]) == (150, ["local"])
    assert {k: v for k, v in drift.items() if not isinstance(v, dict)} == {
        k: v for k, v in base.items() if not isinstance(v, dict)}


def test_the_collapse_config_is_the_base_cell_with_fedprox_and_its_two_controls() -> None:
    # configs/collapse.yaml (the notebook's default run): the second study's base cell, only the algorithms cut
    shipped = load_study_config(ROOT / "configs" / "study_collapse_paper.yaml")
    base = cell_config(shipped, cells(shipped)[0], 0).model_dump()
    collapse = load_config(ROOT / "configs" / "collapse.yaml").model_dump()
    assert collapse["federation"].pop("algorithms") == ["local", "fedavg", "fedprox"]
    base["federation"].pop("algorithms")
    # collapse.yaml differs in one setting, on purpose: it is the collapse into cash that portfed's DDPG
    # variant (agent.learner: actor_critic) shows at the base point — the runs the notebook and §7 analyse —
    # not the paper's learner (paper 001 eq. 5, the base's `direct`).
    assert (collapse["agent"].pop("learner"), base["agent"].pop("learner")) == ("actor_critic", "direct")
    assert collapse["agent"].pop("gamma") == 0.99 and "gamma" not in base["agent"]  # the critic's discount
    assert collapse == base


def test_the_cash_drift_study_is_the_base_cell_with_the_actor_critic_at_200_rounds() -> None:
    """configs/study_cash_drift.yaml: the second study's base cell with portfed's DDPG variant (the learner
    the cash drift was found with) at 200 rounds, five seeds; FedProx's σ and what it shares as factors."""
    paper = load_study_config(ROOT / "configs" / "study_collapse_paper.yaml")
    drift = load_study_config(ROOT / "configs" / "study_cash_drift.yaml")
    base = cell_config(paper, cells(paper)[0], 0).model_dump()
    mine = cell_config(drift, cells(drift)[0], 0).model_dump()
    assert (mine["agent"].pop("learner"), mine["agent"].pop("gamma")) == ("actor_critic", 0.99)
    base["agent"].pop("learner")
    assert mine["federation"].pop("rounds") == 200
    for cfg in (base, mine):
        cfg["federation"].pop("algorithms")
        cfg["federation"].pop("rounds", None)
    assert mine == base
    assert drift.seeds == [0, 1, 2, 3, 4]
    by_name = {c.name: c for c in cells(drift)}
    assert drift.algorithms_of(by_name["base"]) == ["local", "fedavg", "fedprox"]
    low = cell_config(drift, by_name["federation.algorithm_params.fedprox.sigma=0.001"], 0)
    assert low.federation.algorithm_params["fedprox"] == {"sigma": 0.001}
    assert cell_config(drift, by_name["federation.share=actor"], 0).federation.share == "actor"
    assert sum(len(drift.algorithms_of(c)) for c in cells(drift)) * len(drift.seeds) == 25


def test_paper_sp500_is_the_papers_agent_and_the_study_base_is_it_at_ten_parties() -> None:
    """configs/paper_sp500.yaml is paper 000 §8.2's experiment as written (the recurrent EIIE, raw ratios,
    per-party initial models, the pull in the loss, the direct learner of paper 001 eq. 5, η = 5e-5,
    line-10 λ = 0.001, σ = α = 0.01, 50 × 9, 800 × 50); the second study's base cell (and so
    faithful_paper.yaml) is the same agent and federation at 10 parties and 400 rounds."""
    paper = load_config(ROOT / "configs" / "paper_sp500.yaml")
    agent = paper.agent_config()
    assert (agent.network, agent.input_scale, agent.learner, agent.learning_rate, agent.window,
            agent.batch_size, agent.commission) == ("rnn", "raw", "direct", 5e-5, 30, 50, 0.002)
    fed = paper.federation
    assert (paper.parties.count, paper.parties.n_assets, fed.rounds, fed.local_steps) == (50, 9, 800, 50)
    assert (fed.initial_models, fed.proximal_update) == ("per_party", "loss")
    for name in ("fedavg+", "fedgeomed+", "fedcomed+"):
        assert fed.algorithm_params[name]["lam"] == 0.001 and fed.algorithm_params[name]["sigma"] == 0.01
        assert "lam_t" not in fed.algorithm_params[name]  # tuned on the validation year, passed with --set
    assert fed.algorithm_params["fedprox"] == {"sigma": 0.01}
    shipped = load_study_config(ROOT / "configs" / "study_collapse_paper.yaml")
    base = cell_config(shipped, cells(shipped)[0], 0).model_dump()
    mine = paper.model_dump()
    assert base["agent"] == mine["agent"]
    assert base["data"] == mine["data"]
    same = ("local_steps", "initial_models", "proximal_update", "algorithm_params", "parties_per_round",
            "optimizer_state", "share")
    assert {k: base["federation"][k] for k in same} == {k: mine["federation"][k] for k in same}
    assert {k: v for k, v in base["parties"].items() if k != "count"} == {
        k: v for k, v in mine["parties"].items() if k != "count"}


def test_the_factor_cells_run_the_factor_algorithms_and_the_base_cell_all(tmp_path: Path) -> None:
    study = parse_study_config(_raw(factors={"learning_rate": [1e-3, 1e-2]}, seeds=[0],
                                    factor_algorithms=["fedavg+"]))
    by_name = {c.name: c for c in cells(study)}
    assert cell_config(study, by_name["base"], 0).federation.algorithms == ["fedavg", "fedavg+"]
    assert cell_config(study, by_name["learning_rate=0.01"], 0).federation.algorithms == ["fedavg+"]
    result = run_collapse_study(study, tmp_path, progress=False)
    assert result.rows[["cell", "algorithm"]].values.tolist() == [
        ["base", "fedavg"], ["base", "fedavg+"], ["learning_rate=0.01", "fedavg+"]]
    assert np.isnan(result.collapse_map.loc["learning_rate=0.01", "fedavg"])
    assert not np.isnan(result.collapse_map.loc["learning_rate=0.01", "fedavg+"])
    with pytest.raises(ConfigError, match=r"factor_algorithms \['rfa'\] are not among"):
        parse_study_config(_raw(factor_algorithms=["rfa"]))


@pytest.mark.parametrize(("change", "message"), [
    ({"factors": {"keys": {"agent.learning_rate": [1e-3, 1e-2]}}}, "cannot vary 'agent.learning_rate'"),
    ({"factors": {"keys": {"seed": [0, 1]}}}, "cannot vary 'seed'"),
    ({"factors": {"keys": {"agent.network": []}}}, "no levels"),
    ({"factors": {"keys": {"agent.network": ["cnn", "gru"]}}}, "network"),
    ({"factors": {"participation": [1.0, 1.5]}}, "participation must lie in"),
    ({"factors": {"learning_rate": [1e-3, 1e-3]}}, "lists a level twice"),
    ({"factors": {"heterogeneity": ["same_market", "cross_market"]}, "cross_markets": []}, "at least two cross_markets"),
    ({"factors": {"heterogeneity": ["elsewhere"]}}, "heterogeneity"),
    ({"seeds": [0, 0]}, "seeds must be distinct"),
    ({"grid": "big"}, "grid"),
    ({"factors": {"optimizer_state": ["keep", "averaged"]}}, "optimizer_state"),
])
def test_bad_study_configs_name_the_offending_key(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_study_config(_raw(**change))


def test_the_study_writes_rows_that_are_the_detector_on_each_run_and_the_map(tmp_path: Path) -> None:
    study = parse_study_config(_raw(factors={"learning_rate": [1e-3], "optimizer_state": ["keep", "reset"]}))
    result = run_collapse_study(study, tmp_path, progress=False)
    rows = pd.read_csv(tmp_path / ROWS_FILE)
    assert len(rows) == 2 * 2 * 2 and list(rows["run"]) == list(result.rows["run"])
    for row in rows.itertuples():
        run_dir = tmp_path / "runs" / row.cell / f"seed{row.seed}" / row.algorithm
        config = cell_config(study, next(c for c in cells(study) if c.name == row.cell), row.seed)
        report = assess_collapse(pd.read_csv(run_dir / "learning_curve.csv"),
                                 pd.read_csv(run_dir / "party_metrics.csv").fillna({"failed": ""}),
                                 collapse_rule(config))
        assert row.collapsed == report.collapsed and row.kind == (report.kind or "none")
        # How much the deployed policies tell their assets apart: the mean of the parties' backtests, each
        # the spread of the weights the backtest held (weights.csv, the party's own tickers).
        weights = pd.read_csv(run_dir / "weights.csv")
        spreads = [asset_spread(held.drop(columns=["party", "date", "value", "turnover", "cost"])
                                .dropna(axis=1, how="all").to_numpy()) for _, held in weights.groupby("party")]
        assert row.asset_spread == pytest.approx(np.mean(spreads), rel=1e-9)
    table = pd.read_csv(tmp_path / "collapse_map.csv", index_col=0)
    assert list(table.index) == ["base", "optimizer_state=reset"] and list(table.columns) == ["fedavg", "fedavg+"]
    expected = rows.groupby(["cell", "algorithm"])["collapsed"].mean()
    for (cell, algorithm), value in expected.items():
        assert table.loc[cell, algorithm] == value
    assert (tmp_path / "collapse_map.png").stat().st_size > 0
    # The second criterion, with local training of the same cell and seed as the control when it ran.
    noise = pd.read_csv(tmp_path / "collapse_map_noise.csv", index_col=0)
    assert noise.shape == table.shape and (tmp_path / "collapse_map_noise.png").stat().st_size > 0
    for row in rows.itertuples():
        run_dir = tmp_path / "runs" / row.cell / f"seed{row.seed}" / row.algorithm
        config = cell_config(study, next(c for c in cells(study) if c.name == row.cell), row.seed)
        curve = pd.read_csv(run_dir / "learning_curve.csv")
        alone = detect_noise_collapse(curve["train_reward"].to_numpy(), curve["aggregation_change_mean"].to_numpy(),
                                      collapse_rule(config), noise_rule(config))
        assert row.noise_local_control == "absent"  # the study config has no local run
        assert row.noise_collapsed == alone.collapsed and row.noise_kind == (alone.kind or "none")
    # The arms over seeds and each factor arm against its base-cell arm (no local run: no other control).
    summary = pd.read_csv(tmp_path / "collapse_seeds.csv")
    arms = list(dict.fromkeys(zip(rows["cell"], rows["algorithm"], strict=True)))
    assert list(zip(summary["cell"], summary["algorithm"], strict=True)) == arms
    pd.testing.assert_frame_equal(summary, seed_summary(rows), check_dtype=False)
    differences = pd.read_csv(tmp_path / "collapse_differences.csv")
    assert set(differences["minus_cell"]) == {"base"} and list(differences["cell"]) == ["optimizer_state=reset"] * 2
    assert (tmp_path / "collapse_seeds.md").read_text().startswith("Per arm")
    assert (tmp_path / "collapse_seeds.png").stat().st_size > 0
    # The reset cell trains differently from the base cell (the factor is not a no-op).
    base = rows[(rows["cell"] == "base") & (rows["algorithm"] == "fedavg")]["final_train_reward"].to_numpy()
    reset = rows[(rows["cell"] == "optimizer_state=reset") & (rows["algorithm"] == "fedavg")]["final_train_reward"]
    assert not np.allclose(base, reset.to_numpy())


def test_a_collapsing_cell_colours_the_map(tmp_path: Path) -> None:
    """Positive control: every party's round-2 message scaled by 1e6 throws FedAvg's aggregate far away
    (the policies blow up or sit in cash); FedAvg+ barely moves towards the aggregate (λ = 0.001)."""
    raw = _raw(factors={}, seeds=[0])
    raw["algorithms"] = ["local", "fedavg", "fedavg+"]
    raw["base"]["parties"]["faults"] = [{"kind": "scale", "parties": [0, 1, 2], "rounds": [2], "factor": 1e6}]
    result = run_collapse_study(parse_study_config(raw), tmp_path, progress=False)
    assert result.collapse_map.loc["base", "fedavg"] == 1.0
    rows = result.rows.set_index("algorithm")
    assert rows.loc["fedavg", "kind"] in {"spike", "non_finite", "all_cash"}
    # the second criterion too, with local training of the same cell and seed as its control
    assert rows.loc["fedavg", "noise_collapsed"] and rows.loc["fedavg", "noise_local_control"] == "applied"
    assert rows.loc["local", "noise_local_control"] == "self"


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_a_killed_study_resumes_to_the_rows_of_an_uninterrupted_one(tmp_path: Path) -> None:
    raw = _raw(factors={"learning_rate": [1e-3, 1e-2]})
    config_path = tmp_path / "study.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    whole = run_collapse_study(load_study_config(config_path), tmp_path / "whole", progress=False).rows
    portfed = Path(sys.executable).parent / "portfed"
    env = {**os.environ, "PORTFED_CRASH_AT": "local_train:12"}  # in the third run (5 rounds each)
    done = subprocess.run([str(portfed), "study", "collapse", str(config_path), "--out", str(tmp_path / "cut"),
                           "-q", "--jobs", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert len(pd.read_csv(tmp_path / "cut" / ROWS_FILE)) == 2  # two runs were recorded before the kill
    resumed = run_collapse_study(load_study_config(config_path), tmp_path / "cut", resume=True, progress=False).rows
    pd.testing.assert_frame_equal(resumed, whole)
    other = parse_study_config(_raw(factors={"learning_rate": [1e-3, 1e-1]}))
    with pytest.raises(RunDirError, match="collapse_study run of another config"):
        run_collapse_study(other, tmp_path / "cut", resume=True, progress=False)
    with pytest.raises(ConfigError, match="holds a different study"):  # --force writes over it, never resumes it
        run_collapse_study(other, tmp_path / "cut", resume=True, progress=False, force=True)


def test_the_shipped_spike_regime_is_flagged_where_the_study_found_it(tmp_path: Path) -> None:
    """configs/aggregation_spikes.yaml (the study's participation=0.2 cell, seed 1): RFA is flagged at round
    20 — the study's one flag, a false positive explained in the config and docs/reports/reproduction_earlier.md."""
    from portfed.experiment.config import load_config
    from portfed.experiment.studies import compare

    config = load_config(ROOT / "configs" / "aggregation_spikes.yaml")
    config = config.model_copy(update={"diagnostics": config.diagnostics.model_copy(
        update={"interpolation_rounds": []})})
    result = compare(config, tmp_path, ["rfa", "fedavg"], progress=False)
    assert result.collapse["rfa"].collapsed and result.collapse["rfa"].round == 20
    assert result.collapse["rfa"].spike_round == 20
    assert not result.collapse["fedavg"].collapsed
    # The second criterion does not flag it: the curve never rose above its round-to-round noise.
    assert not result.noise_collapse["rfa"].collapsed and result.noise_collapse["rfa"].drops == ()


def test_the_cli_runs_a_study_with_its_options_and_names_a_missing_config(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from portfed.cli.main import app

    config_path = tmp_path / "study.yaml"
    config_path.write_text(yaml.safe_dump(_raw(factors={"learning_rate": [1e-3, 1e-2], "local_steps": [3, 2]})))
    done = CliRunner().invoke(app, ["study", "collapse", str(config_path), "--out", str(tmp_path / "s"), "-q",
                                    "--jobs", "1", "--seeds", "1", "--full"])
    assert done.exit_code == 0, done.output
    rows = pd.read_csv(tmp_path / "s" / ROWS_FILE)
    assert len(rows) == 4 * 1 * 2 and set(rows["seed"]) == {0}  # 2 × 2 cells (full design), seed 0, 2 algorithms
    assert "learning_rate=0.01,local_steps=2" in set(rows["cell"])
    missing = CliRunner().invoke(app, ["study", "collapse", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 1 and "nope.yaml' does not exist" in missing.output
    base = CliRunner().invoke(app, ["study", "collapse", str(config_path), "--out", str(tmp_path / "b"), "-q",
                                    "--jobs", "1", "--seeds", "1", "--base-only", "-a", "fedavg+"])
    assert base.exit_code == 0, base.output
    rows = pd.read_csv(tmp_path / "b" / ROWS_FILE)
    assert rows[["cell", "algorithm"]].values.tolist() == [["base", "fedavg+"]]
    unknown = CliRunner().invoke(app, ["study", "collapse", str(config_path), "--out", str(tmp_path / "u"),
                                       "-a", "fedavg,fedsgd"])
    assert unknown.exit_code == 1 and "fedsgd" in unknown.output
    config_path.write_text(yaml.safe_dump(_raw(factor_algorithms=["fedavg+"])))
    outside = CliRunner().invoke(app, ["study", "collapse", str(config_path), "--out", str(tmp_path / "o"), "-a", "fedavg"])
    assert outside.exit_code == 1 and "none of them runs in the factor cells" in outside.output


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
def test_two_processes_give_the_rows_of_one(tmp_path: Path) -> None:
    """The parallel path builds each cell's federation when its first run is submitted (a callable
    source) and keeps at most 2 × workers runs queued; the rows are those of the sequential study."""
    study = parse_study_config(_raw(factors={"learning_rate": [1e-3, 1e-2]}, seeds=[0]))
    one = run_collapse_study(study, tmp_path / "one", jobs=1, progress=False).rows
    two = run_collapse_study(study, tmp_path / "two", jobs=2, progress=False).rows
    pd.testing.assert_frame_equal(one, two)
