"""Walk-forward evaluation over consecutive held-out years, and online learning during the test period."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from portfed.data import PricePanel, load_bundled, save_csv_long
from portfed.experiment.backtests import backtest_party
from portfed.experiment.build import Market, build_federation, initial_parameters
from portfed.experiment.config import ConfigError, parse_config
from portfed.experiment.walk_forward import walk_forward, walk_forward_folds

TINY = yaml.safe_load((Path(__file__).parents[1] / "configs" / "tiny.yaml").read_text())
TEST_DAYS = 10


def small(source: str, **evaluation) -> dict:
    raw = copy.deepcopy(TINY)
    raw["data"].update({"source": source, "test_days": TEST_DAYS})
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


def test_walk_forward_has_a_row_per_year_and_never_trains_on_its_test_year(tmp_path: Path) -> None:
    clean = parse_config(small(str(market_csv(tmp_path / "clean.csv"))))
    poisoned = parse_config(small(str(market_csv(tmp_path / "poisoned.csv", poison_last=TEST_DAYS))))
    folds = walk_forward_folds(clean, 2)
    dates = load_bundled("djia").dates[:200]
    assert [(f.test_start, f.test_end) for f in folds] == [(dates[-20], dates[-11]), (dates[-10], dates[-1])]
    a = walk_forward(clean, tmp_path / "a", 2, progress=False)
    b = walk_forward(poisoned, tmp_path / "b", 2, progress=False)
    assert a["fold"].tolist() == [0, 0, 1, 1] and a["Strategy"].tolist() == ["fedavg", "UCRP"] * 2
    assert a["test_start"].tolist()[::2] == [str(dates[-20].date()), str(dates[-10].date())]
    md = (tmp_path / "a" / "walk_forward.md").read_text()
    assert "## Fold 1: held out" in md and "## Mean over the 2 folds" in md
    mean = a[a["Strategy"] == "fedavg"]["Annualized return"].mean()
    assert f"{mean:.4f}" in md
    # The poisoned year is fold 1's test year: fold 0 never sees it, fold 1 trains identically without it ...
    pd.testing.assert_frame_equal(a[a["fold"] == 0], b[b["fold"] == 0])
    for fold in ("fold_0", "fold_1"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / fold / "fedavg" / "rounds.csv"),
                                      pd.read_csv(tmp_path / "b" / fold / "fedavg" / "rounds.csv"))
    # ... and is tested on it: its held-out results change.
    assert not np.allclose(a.loc[a["fold"] == 1, "fAPV"], b.loc[b["fold"] == 1, "fAPV"])


def test_walk_forward_refuses_short_markets_and_cross_market_configs(tmp_path: Path) -> None:
    config = parse_config(small(str(market_csv(tmp_path / "m.csv"))))
    with pytest.raises(ValueError, match="too few for 30 held-out periods"):
        walk_forward_folds(config, 30)
    raw = small("djia")
    raw["parties"]["markets"] = [{"source": "djia", "test_days": TEST_DAYS}, {"source": "nyse_n", "test_days": 12}]
    with pytest.raises(ConfigError, match="single-market"):
        walk_forward_folds(parse_config(raw), 2)


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
