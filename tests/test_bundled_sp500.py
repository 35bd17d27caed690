"""skfolio's S&P 500 set (issue 12): 20 constituents' adjusted closes on real trading days, offline."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.data import BUNDLED_DATASETS, DataError, load_bundled, load_market, train_test_split
from portfed.data import bundled as bundled_module

NAME = "skfolio_sp500"
TICKERS = ("AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO",
           "LLY", "MRK", "MSFT", "PEP", "PFE", "PG", "RRC", "UNH", "WMT", "XOM")
# Read once from skfolio 1.12.2's datasets/data/sp500_dataset.csv.gz (load_sp500_dataset()).
KNOWN_CLOSES = [
    ("1990-01-02", "AAPL", 0.264),
    ("2019-01-02", "MSFT", 96.422),
    ("2019-12-31", "JPM", 124.434),
    ("2022-12-28", "XOM", 106.627),
]


@pytest.fixture(scope="module")
def panel():
    return load_bundled(NAME)


def test_shape_tickers_and_real_span(panel) -> None:
    assert (len(panel), panel.n_assets, panel.features, panel.name) == (8313, 20, ("close",), NAME)
    assert panel.tickers == TICKERS
    assert (panel.dates[0], panel.dates[-1]) == (pd.Timestamp("1990-01-02"), pd.Timestamp("2022-12-28"))
    assert panel.dates.is_monotonic_increasing and (panel.dates.dayofweek < 5).all()


@pytest.mark.parametrize(("date", "ticker", "close"), KNOWN_CLOSES)
def test_known_closes(panel, date: str, ticker: str, close: float) -> None:
    assert panel.close.loc[pd.Timestamp(date), ticker] == close  # exact: read with round_trip precision


def test_real_calendar_gives_252_trading_days_in_2019(panel) -> None:
    assert len(panel.between("2019-01-01", "2019-12-31")) == 252
    assert pd.Timestamp("2019-07-04") not in panel.dates  # an exchange holiday: the dates are real
    market = load_market(NAME, start="2006-01-01", end="2019-12-31")
    train, test = train_test_split(market, 252)
    assert (test.dates[0], test.dates[-1]) == (pd.Timestamp("2019-01-02"), pd.Timestamp("2019-12-31"))
    assert (train.dates[0], train.dates[-1]) == (pd.Timestamp("2006-01-03"), pd.Timestamp("2018-12-31"))


def test_a_changed_package_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = dataclasses.replace(BUNDLED_DATASETS[NAME], documented_end=pd.Timestamp("2022-12-30"))
    monkeypatch.setitem(bundled_module.BUNDLED_DATASETS, NAME, spec)
    load_bundled.cache_clear()
    try:
        expected = "spans 1990-01-02 … 2022-12-28, documented 1990-01-02 … 2022-12-30"
        with pytest.raises(DataError, match=expected):
            load_bundled(NAME)
    finally:
        load_bundled.cache_clear()


def test_data_list_shows_the_set_with_its_real_span() -> None:
    result = CliRunner().invoke(app, ["data", "list"])
    assert result.exit_code == 0, result.output
    line = next(row for row in result.output.splitlines() if NAME in row)
    cells = [cell.strip() for cell in line.split("│")]
    assert "20" in cells and "8313" in cells  # the asset and day counts, each its own cell
    assert "1990-01-02 … 2022-12-28" in line and "real" in line
