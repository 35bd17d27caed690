"""The federated experiment end to end on configs/tiny.yaml: records, deployed models, backtests, privacy."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import portfed.federation.rounds as rounds_module
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.party import build_federation, initial_parameters
from portfed.experiment.runs import make_spec, run_algorithm
from portfed.federation import ServerContext

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())


def tiny(**federation) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update(federation)
    return raw


@pytest.fixture(scope="module")
def setup():
    config = parse_config(tiny())
    return config, build_federation(config, progress=False)


def _fresh(federation):
    clone = copy.copy(federation)
    clone.parties = copy.deepcopy(federation.parties)
    return clone


def test_parties_get_their_own_universe_generator_and_the_shared_held_out_period(setup) -> None:
    config, federation = setup
    assert len(federation.parties) == 3
    assert all(len(p.tickers) == 3 for p in federation.parties)
    assert [p.generator_name for p in federation.parties] == ["gbm", "vom", None]
    test_start = federation.market.dates[-config.data.test_days - 1]
    assert federation.train_end == test_start  # the last training close precedes the held-out days
    assert len(set(p.n_parameters for p in federation.parties)) == 1


def test_records_deployed_models_and_backtests(setup, tmp_path) -> None:
    config, federation = setup
    runs = {name: run_algorithm(config, name, _fresh(federation), tmp_path / name, progress=False)
            for name in ("local", "fedavg", "fedavg+")}
    rounds, n = config.federation.rounds, len(federation.parties)
    for name, run in runs.items():
        assert len(run.rounds) == rounds * n and set(run.rounds["round"]) == set(range(rounds))
        for column in ("train_reward", "train_cash", "aggregation_change_mean", "aggregation_change_std",
                       "round_change_mean", "distance_to_global", "aggregator_iterations", "aggregator_converged"):
            assert run.rounds[column].notna().all(), (name, column)
        # the cash the policies chose in training: a weight, and the curve's value the party mean of the rounds'
        assert run.rounds["train_cash"].between(0, 1).all()
        np.testing.assert_allclose(run.curve["train_cash"], run.rounds.groupby("round")["train_cash"].mean(),
                                   rtol=1e-12)
        written = pd.read_csv(tmp_path / name / "rounds.csv", dtype={"fault": str, "quarantined": str},
                              keep_default_na=False, na_values={"train_reward": [""], "train_loss": [""]})
        pd.testing.assert_frame_equal(written, run.rounds, check_dtype=False)
        assert len(run.curve) == rounds
        # One backtest per party over the whole held-out period, starting at the last training close.
        assert list(run.party_metrics["party"]) == list(range(n))
        assert len(run.values) == config.data.test_days + 1
        assert run.values.index[0] == federation.train_end
        models = np.load(tmp_path / name / "models.npz")
        np.testing.assert_array_equal(models["deployed"], run.deployed)
    # Fig. 1a: λ = 1 jumps to the global model, λ = 0 / local do not.
    assert (runs["fedavg"].curve["aggregation_change_mean"].iloc[1:] > 0).all()
    assert (runs["local"].curve["aggregation_change_mean"] == 0).all()
    fedplus = runs["fedavg+"].curve["aggregation_change_mean"].iloc[1:]
    assert (fedplus < runs["fedavg"].curve["aggregation_change_mean"].iloc[1:]).all()
    # The deployed model: global for FedAvg, own for local, 0.999 own + 0.001 global for Fed+ (λ = 0.001).
    for name, lam in (("local", 0.0), ("fedavg", 1.0), ("fedavg+", 0.001)):
        models = np.load(tmp_path / name / "models.npz")
        expected = (1 - lam) * models["party_models"] + lam * models["global_model"]
        np.testing.assert_allclose(models["deployed"], expected, rtol=0, atol=1e-15)
    assert not np.allclose(runs["fedavg"].deployed[0], runs["local"].deployed[0])
    # Fig. 1c: at λ = 0 and λ = 1 the interpolation evaluates the snapshot's own and server models.
    interp = runs["fedavg"].interpolation
    assert set(interp["round"]) == set(config.diagnostics.interpolation_rounds)
    assert len(interp) == len(config.diagnostics.interpolation_rounds) * n * config.diagnostics.interpolation_points
    snap = np.load(tmp_path / "fedavg" / "snapshots" / "round_0005.npz")
    at = interp[(interp["round"] == 5) & (interp["party"] == 1)].set_index("lam")["log_return"]
    party = federation.parties[1]
    assert at.loc[0.0] == party.evaluate_log_return(snap["party_models"][1], config.diagnostics.interpolation_days)
    assert (snap["references"] == snap["references"][0]).all()  # FedAvg sends every party the same w̃
    assert at.loc[1.0] == party.evaluate_log_return(snap["references"][1], config.diagnostics.interpolation_days)


def test_the_server_receives_parameter_vectors_and_nothing_else(setup, tmp_path, monkeypatch) -> None:
    config, federation = setup
    d = federation.parties[0].n_parameters
    calls = []
    real = rounds_module.server_step

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(rounds_module, "server_step", spy)
    run_algorithm(config, "fedavg+", _fresh(federation), tmp_path, progress=False)
    assert len(calls) == config.federation.rounds
    for (rule, received, context), kwargs in calls:
        assert kwargs == {}
        assert rule == make_spec(config, "fedavg+").server
        assert type(received) is np.ndarray and received.dtype == np.float64
        assert received.shape == (len(federation.parties), d)
        assert type(context) is ServerContext
        assert set(vars(context)) == {"global_model", "round_index", "weights", "extras"} and not context.extras
        assert context.global_model.shape == (d,) and context.weights is None


def test_same_seed_same_run_other_seed_other_universes(setup, tmp_path) -> None:
    config, federation = setup
    a = run_algorithm(config, "fedavg", _fresh(federation), tmp_path / "a", progress=False)
    b = run_algorithm(config, "fedavg", _fresh(federation), tmp_path / "b", progress=False)
    pd.testing.assert_frame_equal(a.rounds, b.rounds)
    np.testing.assert_array_equal(a.deployed, b.deployed)
    other = parse_config({**tiny(), "seed": 1})
    assert [p.tickers for p in build_federation(other, progress=False).parties] != [p.tickers for p in federation.parties]
    assert not np.array_equal(initial_parameters(other), initial_parameters(config))


def test_partial_participation(setup, tmp_path) -> None:
    config = parse_config(tiny(parties_per_round=2))
    _, federation = setup
    run = run_algorithm(config, "fedavg+", _fresh(federation), tmp_path, progress=False)
    per_round = run.rounds.groupby("round")["active"].sum()
    assert (per_round == 2).all()
    assert run.rounds.loc[~run.rounds["active"], "train_reward"].isna().all()


@pytest.mark.parametrize("change, message", [
    ({"federation": {"algorithms": ["fedavg", "nope"]}}, "unknown algorithm 'nope'"),
    ({"federation": {"algorithms": ["fedavg", "fedavg"]}}, "more than once"),
    ({"federation": {"algorithms": ["fedavg"], "algorithm_params": {"fedavg": {"sigma": 1.0}}}}, "takes no parameter"),
    ({"parties": {"generators": ["gbm", "magic"]}}, "unknown generator 'magic'"),
    ({"diagnostics": {"interpolation_rounds": [99]}}, "interpolation_rounds"),
    ({"evaluation": {"baselines": ["ubah"]}}, "ucrp"),
    ({"agent": {"features": ["close", "high"]}}, "features"),
    ({"federation": {"algorithms": ["fedavg"], "parties_per_round": 9}}, "parties_per_round"),
    ({"surprise": 1}, "surprise"),
])
def test_bad_configs_are_refused_naming_the_value(change, message) -> None:
    raw = copy.deepcopy(TINY)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    if "parties" in change:
        raw["parties"].pop("generator_params", None)
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_a_seeded_generator_gets_the_party_seed_unless_the_config_sets_one() -> None:
    from portfed.experiment.party.build import generator_params

    raw = tiny()
    raw["parties"] = {**raw["parties"], "generators": ["gan", "gbm"], "generator_params": {"gan": {"steps": 3}}}
    config = parse_config(raw)
    assert generator_params(config, "gan", 7) == {"steps": 3, "seed": 7}
    assert generator_params(config, "gbm", 7) == {}  # GBM takes no seed: its draws come from the Augmenter
    raw["parties"]["generator_params"] = {"gan": {"steps": 3, "seed": 11}}
    assert generator_params(parse_config(raw), "gan", 7) == {"steps": 3, "seed": 11}


@pytest.mark.parametrize("name, params", [("ditto", {"personal_lambda": 0.1}), ("fedavg-ft", {"finetune_steps": 2})])
def test_portfolio_parties_run_the_plain_plan_personalised_baselines(setup, tmp_path, name, params) -> None:
    """Ditto and FedAvg-FT need only plain plans: the portfolio engine trains them, and each party
    deploys its own personal model (the server's model is FedAvg's mean)."""
    config = parse_config(tiny(parties_per_round=2, algorithms=[name], algorithm_params={name: params}))
    _, federation = setup
    run = run_algorithm(config, name, _fresh(federation), tmp_path, progress=False)
    assert np.all(np.isfinite(run.deployed))
    assert len({row.tobytes() for row in run.deployed}) == len(federation.parties)  # one model per party
