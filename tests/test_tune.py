"""``portfed tune``: a knob chosen on the validation year, never on the test period."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.data import load_bundled
from portfed.experiment.config import apply_overrides, parse_config
from portfed.experiment.studies.tuning import (
    TuneError,
    choice_override,
    geometric_grid,
    parse_grid,
    sampled_grid,
    seed_ties,
    tie_warning,
    tune,
    validation_config,
    validation_cuts,
)

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
LAM = "federation.algorithm_params.fedavg+.lam"
#: Paper 000 §8.2's tuned knob: the constant λ_k^t of the personalization (not line 10's λ).
LAM_T = "federation.algorithm_params.fedavg+.lam_t"
TICKERS = ["A", "B", "C", "D", "E", "F"]
TEST_DAYS = TINY["data"]["test_days"]


def _raw(source: str | None = None, **federation: object) -> dict:
    raw = copy.deepcopy(TINY)
    raw["federation"].update({"rounds": 2, "local_steps": 2, **federation})
    raw["diagnostics"]["interpolation_rounds"] = []
    if source is not None:
        # The poisoned markets' absurd prices are the point: the jump check (portfed.data.jumps) is off.
        raw["data"].update({"source": source, "pool": None, "options": {"max_daily_ratio": None}})
    return raw


def _write_market(path: Path, poison: slice | None) -> Path:
    """The bundled DJIA's first six tickers as a wide CSV; ``poison``: rows replaced by absurd prices."""
    close = load_bundled("djia").select(TICKERS).close
    if poison is not None:
        values = close.to_numpy(copy=True)
        values[poison] = np.random.default_rng(7).uniform(1e-3, 1e6, size=values[poison].shape)
        close = pd.DataFrame(values, index=close.index, columns=close.columns)
    close.index.name = "date"
    close.to_csv(path)
    return path


def _tune(raw: dict, out: Path, values=(0.001, 0.5), seeds=(0, 1), key: str = LAM):
    return tune(parse_config(raw), key, list(values), list(seeds), out, progress=False)


@pytest.mark.parametrize(("key", "values"), [(LAM, (0.001, 0.5)), (LAM_T, (0.01, 0.9))])
def test_poisoning_the_test_period_changes_nothing_and_poisoning_the_validation_year_does(
        tmp_path: Path, key: str, values: tuple[float, float]) -> None:
    clean = _write_market(tmp_path / "clean.csv", None)
    poisoned = _write_market(tmp_path / "poisoned.csv", slice(-TEST_DAYS, None))
    validation_poisoned = _write_market(tmp_path / "validation.csv", slice(-2 * TEST_DAYS, -TEST_DAYS))
    assert not pd.read_csv(clean).equals(pd.read_csv(poisoned))
    reference = _tune(_raw(str(clean)), tmp_path / "clean", values, key=key)
    after = _tune(_raw(str(poisoned)), tmp_path / "poisoned", values, key=key)
    assert after.chosen == reference.chosen
    pd.testing.assert_frame_equal(after.runs, reference.runs)
    pd.testing.assert_frame_equal(after.curve, reference.curve)
    assert np.isfinite(reference.curve["score"]).all()
    # The control that this test can fail: the same poison one year earlier, in the validation year, is read.
    moved = _tune(_raw(str(validation_poisoned)), tmp_path / "validation", values, key=key)
    assert not np.allclose(moved.runs["score"], reference.runs["score"])
    written = json.loads((tmp_path / "clean" / "chosen.json").read_text())
    assert written["value"] == reference.chosen and written["key"] == key and written["seeds"] == [0, 1]
    dates = pd.read_csv(clean, index_col="date").index
    assert written["validation"][0]["end"] == dates[-TEST_DAYS - 1]  # the last training close
    assert written["validation"][0]["start"] == dates[-2 * TEST_DAYS]


def test_one_row_per_value_and_seed_and_the_curve_averages_the_seeds(tmp_path: Path) -> None:
    result = _tune(_raw(), tmp_path, values=(0.0, 0.01, 1.0), seeds=(0, 3))
    assert len(result.runs) == 6
    assert sorted(zip(result.runs["value"], result.runs["seed"], strict=True)) == [
        (v, s) for v in (0.0, 0.01, 1.0) for s in (0, 3)]
    assert result.curve["value"].tolist() == [0.0, 0.01, 1.0] and (result.curve["seeds"] == 2).all()
    for value, at in result.runs.groupby("value"):
        assert result.curve.set_index("value").loc[value, "score"] == pytest.approx(at["score"].mean())
    best = result.curve["score"].idxmax()
    assert result.chosen == result.curve["value"].iloc[best] and result.score == result.curve["score"].max()
    for name in ("validation_runs.csv", "validation_curve.csv", "validation_curve.png", "chosen.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    # the seed is the config's seed: different seeds, different parties, different scores
    seed0 = result.runs[result.runs["seed"] == 0]["score"].to_numpy()
    seed3 = result.runs[result.runs["seed"] == 3]["score"].to_numpy()
    assert not np.allclose(seed0, seed3)


def test_a_choice_within_the_seed_spread_is_flagged() -> None:
    """Value 1 is chosen (mean 0.104).  Value 0 is below it by 0.012 on seed 0 and above it by 0.004 on seed
    1: mean 0.004, spread 0.008, a tie.  Value 2 is below it by 0.05 on both seeds: no tie, however much
    the seeds' levels differ."""
    runs = pd.DataFrame({"value_index": [0, 0, 1, 1, 2, 2], "seed": [0, 1] * 3,
                         "score": [0.090, 0.110, 0.102, 0.106, 0.052, 0.056]})
    assert seed_ties(runs, 1) == [0]
    assert seed_ties(runs[runs["seed"] == 0], 1) == []  # one seed: no spread, no tie
    assert "within the seed spread of 0.001" in tie_warning(0.01, [0.001], 2)
    assert tie_warning(0.01, [], 2) is None
    assert "one seed" in tie_warning(0.01, [], 1)


@pytest.mark.parametrize(("key", "values", "message"), [
    ("federation.algorithm_params.fedavg+.lamb", [0.1], r"takes no parameter\(s\) \['lamb'\]"),
    ("federation.algorithm_params.nosuch.lam", [0.1], "unknown algorithm 'nosuch'"),
    ("federation.roundz", [3], "key 'federation.roundz' with value 3"),
    (LAM, [], "the grid is empty"),
    (LAM, ["abc"], "key '.*lam' with value 'abc': .*lam must be a number"),
    (LAM, [0.1, 0.1], "the grid repeats a value"),
    ("agent.learning_rate", [0.01], "names no algorithm: give --algorithm"),
    ("data.end", ["2002-12-24"], "key 'data.end' cannot be tuned: the data sections decide the validation cut"),
    ("seed", [1], "key 'seed' cannot be tuned"),
])
def test_bad_requests_are_typed_errors_naming_the_value(tmp_path: Path, key: str, values: list, message: str) -> None:
    with pytest.raises(TuneError, match=message):
        tune(parse_config(_raw()), key, values, [0], tmp_path)
    assert not (tmp_path / "runs").exists()  # refused before any training


def test_bad_seeds_and_a_key_of_another_algorithm_are_refused(tmp_path: Path) -> None:
    config = parse_config(_raw())
    with pytest.raises(TuneError, match=r"seeds must be distinct integers >= 0, at least one, got \[0, 0\]"):
        tune(config, LAM, [0.1], [0, 0], tmp_path)
    with pytest.raises(TuneError, match="is a parameter of 'fedavg\\+', not of --algorithm 'fedavg'"):
        tune(config, LAM, [0.1], [0], tmp_path, algorithm="fedavg")


def test_grids() -> None:
    np.testing.assert_allclose(geometric_grid(1e-4, 1.0, 10.0), [1e-4, 1e-3, 1e-2, 1e-1, 1.0])
    assert len(geometric_grid(1e-12, 1.0, 10.0)) == 13  # the paper's "10–13 values"
    assert parse_grid("0.1, 1e-3,true,abc") == [0.1, 0.001, True, "abc"]
    first, again = sampled_grid(1e-4, 1.0, 5, seed=3), sampled_grid(1e-4, 1.0, 5, seed=3)
    assert first == again and first == sorted(first) and all(1e-4 <= v <= 1.0 for v in first)
    assert sampled_grid(1e-4, 1.0, 5, seed=4) != first
    with pytest.raises(TuneError, match="factor > 1, got 1.0"):
        geometric_grid(0.1, 1.0, 1.0)
    with pytest.raises(TuneError, match="0 < low <= high, got low=0.0"):
        sampled_grid(0.0, 1.0, 3, seed=0)
    with pytest.raises(TuneError, match="holds no value"):
        parse_grid(" , ")
    with pytest.raises(TuneError, match="'\\[1' is not YAML"):
        parse_grid("0.1,[1")


@pytest.mark.parametrize("value", [3e-05, 1e-4, 0.001, 0.3, 1, 1e20, 2.5e-10, True, "abc"])
def test_the_chosen_override_reads_back_as_the_chosen_value(value) -> None:
    """chosen.json's ``override`` (``KEY=<value as Python prints it>``) is what ``compare --set`` is given:
    it must read back as the value (``3e-05`` was read as text once, and ``lam_t`` refused it)."""
    override = choice_override(LAM, value)
    got = apply_overrides({}, [override])["federation"]["algorithm_params"]["fedavg+"]["lam"]
    assert got == value and type(got) is type(value)
    assert parse_grid(str(value)) == [value]


def test_each_market_of_a_cross_market_federation_is_cut_on_its_own_calendar() -> None:
    raw = _raw()
    raw["parties"]["markets"] = [{"source": "djia", "test_days": 40}, {"source": "nyse_o", "test_days": 60}]
    del raw["parties"]["generator_params"]
    raw["parties"]["generators"] = [None]
    config = parse_config(raw)
    cuts = validation_cuts(config)
    for cut, (name, days) in zip(cuts, (("djia", 40), ("nyse_o", 60)), strict=True):
        dates = load_bundled(name).dates
        assert (cut.source, cut.start, cut.end) == (name, str(dates[-2 * days].date()), str(dates[-days - 1].date()))
    cut_config = validation_config(config, cuts)
    assert [m.end for m in cut_config.parties.markets] == [c.end for c in cuts]
    assert cut_config.data.end is None


def test_cli_tune_prints_the_curve_and_refuses_bad_input(tmp_path: Path) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_raw()))
    runner = CliRunner()
    result = runner.invoke(app, ["tune", str(config), "-k", LAM, "--range", "1e-3:1e-1:10", "--seeds", "0",
                                 "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    assert "chosen federation.algorithm_params.fedavg+.lam" in result.output
    assert json.loads((tmp_path / "out" / "chosen.json").read_text())["values"] == pytest.approx([1e-3, 1e-2, 1e-1])
    both = runner.invoke(app, ["tune", str(config), "-k", LAM, "--grid", "0.1", "--range", "1e-3:1:10"])
    assert both.exit_code == 1 and "give --grid or --range, not both" in both.output
    bad = runner.invoke(app, ["tune", str(config), "-k", LAM, "--grid", "0.1", "--seeds", "0,x"])
    assert bad.exit_code == 1 and "--seeds '0,x' is not a comma-separated list of integers" in bad.output
