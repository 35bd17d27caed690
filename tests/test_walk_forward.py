"""Walk-forward evaluation over consecutive held-out years, and online learning during the test period."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.data import PricePanel, load_bundled, save_csv_long
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.party import Market, backtest_party, build_federation, initial_parameters
from portfed.experiment.runs import (
    CHECKPOINT_NAME,
    CheckpointError,
    InProcessParties,
    load_checkpoint,
    run_fingerprint,
    train_parties,
)
from portfed.experiment.studies.walk_forward import check_same_universes, walk_forward, walk_forward_folds
from portfed.federation import FederationState

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
TEST_DAYS = 10


def small(source: str, **evaluation) -> dict:
    raw = copy.deepcopy(TINY)
    # The poisoned market's ×25 days are the point of some tests: the jump check (portfed.data.jumps) is off.
    raw["data"].update({"source": source, "test_days": TEST_DAYS, "options": {"max_daily_ratio": None}})
    raw["parties"].update({"count": 2, "generators": [None], "generator_params": {}})
    raw["federation"].update({"algorithms": ["fedavg"], "rounds": 2, "local_steps": 2, "checkpoint_every": 2})
    raw["diagnostics"]["interpolation_rounds"] = []
    raw["evaluation"].update({"baselines": ["ucrp"], **evaluation})
    return raw


def market_csv(path: Path, poison_last: int = 0) -> Path:
    """The DJIA closes (first 200 days) as a CSV; ``poison_last`` days at the end jump wildly."""
    panel = load_bundled("djia").iloc(slice(0, 200))
    values = panel.values.copy()
    if poison_last:
        factors = np.where(np.arange(poison_last) % 2 == 0, 5.0, 0.2)[:, None, None]
        values[-poison_last:] *= factors
    save_csv_long(PricePanel(values, panel.dates, panel.tickers, panel.features, "djia"), path)
    return path


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory):
    """``walked(mode, poisoned)``: the 2-fold walk-forward of :func:`small` on the clean or poisoned
    market (fold 1's test year poisoned) and its directory; each is run once for the module."""
    root = tmp_path_factory.mktemp("walked")
    done: dict[tuple[str, bool], tuple[pd.DataFrame, Path]] = {}

    def run(mode: str, poisoned: bool) -> tuple[pd.DataFrame, Path]:
        if (mode, poisoned) not in done:
            name = "poisoned" if poisoned else "clean"
            source = root / f"{name}.csv"
            if not source.exists():
                market_csv(source, poison_last=TEST_DAYS if poisoned else 0)
            out = root / f"{mode}_{name}"
            done[mode, poisoned] = walk_forward(parse_config(small(str(source))), out, 2, mode=mode,
                                                progress=False), out
        return done[mode, poisoned]

    return run


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
@pytest.mark.parametrize("mode", ["retrain", "continue"])
def test_walk_forward_has_a_row_per_year_and_never_trains_on_its_test_year(walked, mode: str, tmp_path: Path) -> None:
    clean = parse_config(small(str(market_csv(tmp_path / "clean.csv"))))
    folds = walk_forward_folds(clean, 2)
    dates = load_bundled("djia").dates[:200]
    assert [(f.test_start, f.test_end) for f in folds] == [(dates[-20], dates[-11]), (dates[-10], dates[-1])]
    a, a_dir = walked(mode, False)
    b, b_dir = walked(mode, True)
    assert a["fold"].tolist() == [0, 0, 1, 1] and a["Strategy"].tolist() == ["fedavg", "UCRP"] * 2
    assert a["mode"].tolist() == [mode] * 4
    assert a["test_start"].tolist()[::2] == [str(dates[-20].date()), str(dates[-10].date())]
    md = (a_dir / "walk_forward.md").read_text()
    assert f"## Fold 1 ({mode}): held out" in md and f"## Mean over the 2 folds ({mode})" in md
    mean = a[a["Strategy"] == "fedavg"]["Annualized return (fraction)"].mean()
    assert f"{100 * mean:.2f} (" in md  # people read percent: mean (std) over parties
    pd.testing.assert_frame_equal(pd.read_csv(a_dir / "walk_forward.csv"), a)
    # The poisoned year is fold 1's test year: fold 0 never sees it, fold 1 trains identically without it
    # (in continue mode: from fold 0's final models, on the data up to its own cut) ...
    pd.testing.assert_frame_equal(a[a["fold"] == 0], b[b["fold"] == 0])
    for fold in ("fold_0", "fold_1"):
        pd.testing.assert_frame_equal(pd.read_csv(a_dir / fold / "fedavg" / "rounds.csv"),
                                      pd.read_csv(b_dir / fold / "fedavg" / "rounds.csv"))
        for key in ("party_models", "global_model", "deployed"):
            np.testing.assert_array_equal(np.load(a_dir / fold / "fedavg" / "models.npz")[key],
                                          np.load(b_dir / fold / "fedavg" / "models.npz")[key])
    # ... and is tested on it: its held-out results change.
    assert not np.allclose(a.loc[a["fold"] == 1, "fAPV (× initial value)"], b.loc[b["fold"] == 1, "fAPV (× initial value)"])


def test_continue_mode_starts_each_fold_from_the_previous_folds_final_state(walked, tmp_path: Path) -> None:
    retrained, retrain_dir = walked("retrain", False)
    continued, continue_dir = walked("continue", False)
    config = parse_config(small(str(continue_dir.parent / "clean.csv")))
    fold_0, fold_1 = walk_forward_folds(config, 2)
    columns = [c for c in retrained.columns if c != "mode"]
    # Fold 0 is the same run in both modes.
    pd.testing.assert_frame_equal(retrained.loc[retrained["fold"] == 0, columns],
                                  continued.loc[continued["fold"] == 0, columns])
    saved = load_checkpoint(continue_dir / "fold_0" / "fedavg" / CHECKPOINT_NAME, run_fingerprint(fold_0.config, "fedavg"))
    final_0 = FederationState.from_state_dict(saved["federation"])
    np.testing.assert_array_equal(final_0.party_models, np.load(continue_dir / "fold_0/fedavg/models.npz")["party_models"])

    def train_fold_1(start: FederationState | None, out: Path) -> np.lib.npyio.NpzFile:
        members = InProcessParties(build_federation(fold_1.config, progress=False).parties)
        rows = train_parties(fold_1.config, "fedavg", members, out, start=start, progress=False).rows
        pd.DataFrame(rows).to_csv(out / "rounds.csv", index=False)  # as the run's evaluation writes them
        return np.load(out / "models.npz")

    # Fold 1 in continue mode = fold 1's rounds started from fold 0's final state; in retrain mode = from
    # the initial models (as before the mode existed); and the two differ.
    from_0, fresh = train_fold_1(final_0.restarted(), tmp_path / "from_0"), train_fold_1(None, tmp_path / "fresh")
    for key in ("party_models", "global_model", "deployed"):
        np.testing.assert_array_equal(np.load(continue_dir / "fold_1/fedavg/models.npz")[key], from_0[key])
        np.testing.assert_array_equal(np.load(retrain_dir / "fold_1/fedavg/models.npz")[key], fresh[key])
        assert not np.allclose(from_0[key], fresh[key])
    pd.testing.assert_frame_equal(pd.read_csv(continue_dir / "fold_1/fedavg/rounds.csv"),
                                  pd.read_csv(tmp_path / "from_0" / "rounds.csv"))
    assert not np.allclose(retrained.loc[retrained["fold"] == 1, "fAPV (× initial value)"].iloc[0],
                           continued.loc[continued["fold"] == 1, "fAPV (× initial value)"].iloc[0])
    # The start is part of the checkpoint's fingerprint: fold 1's checkpoint is not a fresh run's.
    with pytest.raises(CheckpointError, match="another config"):
        load_checkpoint(continue_dir / "fold_1/fedavg" / CHECKPOINT_NAME, run_fingerprint(fold_1.config, "fedavg"))
    load_checkpoint(continue_dir / "fold_1/fedavg" / CHECKPOINT_NAME,
                    run_fingerprint(fold_1.config, "fedavg", final_0.restarted()))


def test_continue_mode_refuses_folds_on_other_universes_and_unknown_modes(tmp_path: Path) -> None:
    tickers = list(load_bundled("djia").tickers)
    raw = small(str(market_csv(tmp_path / "m.csv")))
    del raw["parties"]["n_assets"]
    raw["parties"]["universes"] = [tickers[:2], tickers[2:4]]
    same = walk_forward_folds(parse_config(raw), 2)
    check_same_universes(same)
    raw["parties"]["universes"] = [tickers[:2], tickers[2:5]]
    moved = walk_forward_folds(parse_config(raw), 2)[1]
    with pytest.raises(ValueError, match=r"in fold 1 parties \[1\] trade other tickers"):
        check_same_universes([same[0], moved])
    with pytest.raises(ValueError, match="mode must be one of"):
        walk_forward(parse_config(raw), tmp_path / "x", 2, mode="resume")


def test_walk_forward_refuses_short_markets_and_cross_market_configs(tmp_path: Path) -> None:
    config = parse_config(small(str(market_csv(tmp_path / "m.csv"))))
    with pytest.raises(ValueError, match="too few for 30 held-out periods"):
        walk_forward_folds(config, 30)
    raw = small("djia")
    raw["parties"]["markets"] = [{"source": "djia", "test_days": TEST_DAYS}, {"source": "nyse_n", "test_days": 12}]
    with pytest.raises(ConfigError, match="single-market"):
        walk_forward_folds(parse_config(raw), 2)


def test_the_command_offers_both_modes(tmp_path: Path) -> None:
    config = tmp_path / "wf.yaml"
    config.write_text(yaml.safe_dump(small(str(market_csv(tmp_path / "m.csv")))))
    shown = CliRunner().invoke(app, ["walk-forward", "--help"], terminal_width=200)
    assert shown.exit_code == 0 and "--mode" in shown.output and "continue" in shown.output
    bad = CliRunner().invoke(app, ["walk-forward", str(config), "--mode", "resume", "-q", "-o", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "mode must be one of ['retrain', 'continue']" in bad.output
    assert not (tmp_path / "x").exists()


def test_online_steps_keep_training_on_each_traded_day_without_look_ahead() -> None:
    frozen = parse_config(small("djia"))
    online = parse_config(small("djia", online_steps=2))
    federation = build_federation(frozen, progress=False)
    params = initial_parameters(frozen)
    market, party = federation.market_of(0), federation.parties[0]
    still = backtest_party(frozen, market, party, params, "x").trades
    moving = backtest_party(online, market, party, params, "x").trades
    assert len(still) == len(moving) == TEST_DAYS
    np.testing.assert_array_equal(still.iloc[0].to_numpy(), moving.iloc[0].to_numpy())  # before any update
    assert not np.allclose(still["cash"].iloc[1:], moving["cash"].iloc[1:])
    assert backtest_party(online, market, party, params, "x").trades.equals(moving)  # seeded: reproducible
    # Prices after decision day 4 poisoned: the first five decisions (trained on days up to each) do not change.
    values = market.panel.values.copy()
    values[-5:] *= 3.0
    poisoned = Market(market.name, PricePanel(values, market.panel.dates, market.panel.tickers,
                                              market.panel.features, "poisoned"), market.train_end)
    after = backtest_party(online, poisoned, party, params, "x").trades
    weights = ["cash", *party.tickers]
    np.testing.assert_array_equal(after[weights].iloc[:5].to_numpy(), moving[weights].iloc[:5].to_numpy())
    assert not np.allclose(after[weights].iloc[6:].to_numpy(), moving[weights].iloc[6:].to_numpy())
