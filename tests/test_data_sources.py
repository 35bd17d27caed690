"""Bundled datasets, CSV files, splits, universes, ``load_market`` and the ``portfed data`` CLI (offline)."""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from portfed.cli.data_cmd import asset_summary
from portfed.cli.main import app
from portfed.data import (
    BUNDLED_DATASETS,
    UNIVERSES,
    DataError,
    PricePanel,
    list_bundled,
    load_bundled,
    load_csv,
    load_market,
    sample_universes,
    save_csv_long,
    train_test_split,
    universe,
    validation_split,
)
from portfed.data import bundled as bundled_module

EXPECTED = {  # name: (assets, rows, documented start)
    "nyse_o": (36, 5651, "1962-07-03"),
    "nyse_n": (23, 6431, "1985-01-01"),
    "tse": (88, 1259, "1994-01-04"),
    "sp500": (25, 1276, "1998-01-02"),
    "djia": (30, 507, "2001-01-14"),
    "msci": (24, 1043, "2006-04-01"),
}


def raw_bundled(name: str) -> tuple[list[str], np.ndarray]:
    """The package CSV read with the csv module, independently of pandas."""
    text = (importlib.resources.files("universal") / "data" / f"{name}.csv").read_text(encoding="utf-8")
    # Split on "\n" only: str.splitlines would also split on TSE's ticker "\x85" (NEL).
    rows = list(csv.reader(text.rstrip("\n").split("\n")))
    return rows[0], np.array(rows[1:], dtype=float)


# ---------------------------------------------------------------------------------------- bundled
@pytest.mark.parametrize("name", list(EXPECTED))
def test_bundled_dataset_matches_the_package_file(name: str) -> None:
    assets, rows, start = EXPECTED[name]
    panel = load_bundled(name)
    header, values = raw_bundled(name)
    assert (len(panel), panel.n_assets, panel.features, panel.name) == (rows, assets, ("close",), name)
    assert panel.tickers == tuple(header)
    np.testing.assert_array_equal(panel.feature("close"), values)
    # Reconstructed dates: Mon–Fri from the documented start, no holidays.
    assert panel.dates.equals(pd.bdate_range(start, periods=rows))
    assert (panel.dates.dayofweek < 5).all()
    assert panel.dates[-1] <= BUNDLED_DATASETS[name].documented_end


def test_reconstructed_spans() -> None:
    assert load_bundled("msci").dates[-1] == pd.Timestamp("2010-03-31")  # the one exact match
    assert load_bundled("djia").dates[0] == pd.Timestamp("2001-01-15")  # documented start is a Sunday
    assert load_bundled("nyse_n").dates[-1] == pd.Timestamp("2009-08-25")  # ~10 months before 2010-06-30


def test_bundled_is_cached_and_immutable() -> None:
    panel = load_bundled("djia")
    assert load_bundled("djia") is panel
    with pytest.raises(ValueError, match="read-only"):
        panel.values[0, 0, 0] = 1.0


def test_unknown_bundled_name_lists_the_known_ones() -> None:
    with pytest.raises(
        DataError, match="unknown bundled dataset 'nyse'.*nyse_o, nyse_n, tse, sp500, djia, msci"
    ):
        load_bundled("nyse")


def test_row_count_mismatch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = dataclasses.replace(BUNDLED_DATASETS["djia"], n_days=500)
    monkeypatch.setitem(bundled_module.BUNDLED_DATASETS, "djia", spec)
    load_bundled.cache_clear()
    try:
        with pytest.raises(DataError, match="'djia' has 507 rows, documented 500"):
            load_bundled("djia")
    finally:
        load_bundled.cache_clear()


def test_list_bundled_table() -> None:
    table = list_bundled()
    assert list(table.columns) == ["name", "assets", "days", "first_date", "last_date", "description"]
    assert list(table["name"]) == [*EXPECTED, "skfolio_sp500"]  # skfolio's set: tests/test_bundled_sp500.py
    assert list(table["assets"])[:-1] == [v[0] for v in EXPECTED.values()]
    assert list(table["days"])[:-1] == [v[1] for v in EXPECTED.values()]


# ---------------------------------------------------------------------------------------- csv
def ohlcv_panel() -> PricePanel:
    rng = np.random.default_rng(7)
    dates = pd.bdate_range("2020-01-01", periods=5)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0, 0.02, (5, 2)), axis=0))
    frames = {
        "close": close,
        "high": close * (1 + rng.uniform(0, 0.01, (5, 2))),
        "low": close * (1 - rng.uniform(0, 0.01, (5, 2))),
        "volume": rng.integers(0, 10**6, (5, 2)).astype(float),
    }
    return PricePanel.from_frames(
        {k: pd.DataFrame(v, index=dates, columns=["NA", "T"]) for k, v in frames.items()}, name="toy"
    )


def test_long_csv_round_trip_is_exact(tmp_path: Path) -> None:
    panel = ohlcv_panel()
    path = save_csv_long(panel, tmp_path / "sub" / "toy.csv")
    assert [p.name for p in path.parent.iterdir()] == ["toy.csv"]  # no temporary file left behind
    header = path.read_text().splitlines()[:3]
    assert header[0] == "date,ticker,field,value"
    assert header[1].startswith("2020-01-01,NA,close,")
    loaded = load_csv(path)
    assert loaded.tickers == ("NA", "T")  # "NA" is a ticker, not a missing value
    assert loaded.features == ("close", "high", "low", "volume")
    assert loaded.name == "toy"
    np.testing.assert_array_equal(loaded.values, panel.values)
    assert loaded.dates.equals(panel.dates)


def test_long_csv_round_trip_keeps_unusual_tickers(tmp_path: Path) -> None:
    panel = load_bundled("tse")  # tickers include "\\", "|" and C1 control characters such as "\x85"
    loaded = load_csv(save_csv_long(panel, tmp_path / "tse.csv"), name="tse")
    assert loaded.tickers == panel.tickers
    np.testing.assert_array_equal(loaded.values, panel.values)


def test_long_csv_row_order_does_not_matter(tmp_path: Path) -> None:
    path = tmp_path / "shuffled.csv"
    path.write_text(
        "Date,Ticker,Field,Value\n"
        "2020-01-02,BBB,close,11\n2020-01-01,AAA,close,1\n2020-01-02,AAA,close,2\n2020-01-01,BBB,close,10\n"
    )
    panel = load_csv(path, name="x")
    assert panel.tickers == ("BBB", "AAA")  # order of first appearance
    np.testing.assert_array_equal(panel.feature("close"), [[10.0, 1.0], [11.0, 2.0]])


def test_wide_csv(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text("date,AAA,BBB\n2020-01-01,1.5,10\n2020-01-02,1.65,9\n")
    panel = load_csv(path)
    assert (panel.name, panel.tickers, panel.features) == ("wide", ("AAA", "BBB"), ("close",))
    np.testing.assert_allclose(panel.price_relatives(), [[1.1, 0.9]])
    assert load_csv(path, layout="wide").tickers == ("AAA", "BBB")


@pytest.mark.parametrize(
    ("content", "layout", "pattern"),
    [
        ("date,ticker,value\n2020-01-01,A,1\n", "long", r"lacks column\(s\) \['field'\]"),
        ("date,ticker,field,value\n2020-01-01,A,adjclose,1\n", "auto", "unknown field 'adjclose'"),
        ("date,AAA\n2020-01-01,1\nyesterday,2\n", "auto", "unparseable date 'yesterday' in data row 2"),
        (
            "date,AAA\n2020-01-01,1\n2020-01-02,abc\n",
            "auto",
            "non-numeric value 'abc' for ticker 'AAA' on 2020-01-02",
        ),
        ("date,AAA,AAA\n2020-01-01,1,2\n", "auto", "duplicate ticker 'AAA'"),
        ("date,AAA,BBB\n2020-01-01,1,2\n2020-01-02,,2\n", "auto", r"nan.*'AAA' on 2020-01-02"),
        ("dates\n2020-01-01\n", "wide", "needs a date column and at least one ticker column"),
        ("date,ticker,field,value\n2020-01-01,A,close,1\n2020-01-01,A,close,2\n", "auto", "duplicate row"),
        (
            "date,ticker,field,value\n2020-01-01,A,close,1\n2020-01-01,B,close,2\n2020-01-02,A,close,3\n",
            "auto",
            r"nan.*'B' on 2020-01-02",
        ),
        ("", "auto", "cannot parse CSV file"),
    ],
)
def test_bad_csv_is_a_clear_data_error(tmp_path: Path, content: str, layout: str, pattern: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(DataError, match=pattern):
        load_csv(path, layout=layout)  # type: ignore[arg-type]


def test_missing_csv_and_bad_layout(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="CSV file not found"):
        load_csv(tmp_path / "nope.csv")
    (tmp_path / "x.csv").write_text("date,A\n2020-01-01,1\n")
    with pytest.raises(DataError, match="layout must be"):
        load_csv(tmp_path / "x.csv", layout="tall")  # type: ignore[arg-type]


def test_csv_missing_value_error_carries_ticker_and_date(tmp_path: Path) -> None:
    path = tmp_path / "gap.csv"
    path.write_text("date,AAA,BBB\n2020-01-01,1,2\n2020-01-02,1,\n")
    with pytest.raises(DataError) as info:
        load_csv(path)
    assert (info.value.ticker, info.value.date) == ("BBB", pd.Timestamp("2020-01-02"))


# ---------------------------------------------------------------------------------------- split
def test_train_test_split_is_chronological_and_disjoint() -> None:
    panel = load_bundled("sp500")
    train, test = train_test_split(panel)
    assert (len(train), len(test)) == (1276 - 252, 252)
    assert train.dates[-1] < test.dates[0]
    assert test.dates[-1] == panel.dates[-1]
    np.testing.assert_array_equal(np.concatenate([train.values, test.values]), panel.values)
    fit, val = validation_split(train, 100)
    assert (len(fit), len(val)) == (1276 - 252 - 100, 100)
    assert val.dates[-1] == train.dates[-1]  # cut from the end of training, before the test period
    assert val.dates[-1] < test.dates[0]


def test_split_errors() -> None:
    panel = load_bundled("djia")  # 507 days
    with pytest.raises(DataError, match="507 days, too short for test_days=506"):
        train_test_split(panel, test_days=506)
    train_test_split(panel, test_days=505)  # two training days is the minimum
    with pytest.raises(DataError, match="test_days must be >= 2, got 1"):
        train_test_split(panel, test_days=1)
    with pytest.raises(DataError, match="val_days must be an integer, got 2.5"):
        validation_split(panel, 2.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- universes
def test_sp500_tech50_is_the_paper_list() -> None:
    tickers = UNIVERSES["sp500_tech50"]
    assert len(tickers) == len(set(tickers)) == 50
    assert list(tickers) == sorted(tickers)  # paper 000 footnote 2 lists them alphabetically
    assert {"AAPL", "FB", "GOOG", "XRX", "T", "IT"} <= set(tickers)
    assert universe("sp500_tech50") is tickers
    with pytest.raises(DataError, match="unknown universe 'tech'.*sp500_tech50"):
        universe("tech")


def test_sample_universes_is_seeded_and_uniform() -> None:
    pool = UNIVERSES["sp500_tech50"]
    parties = sample_universes(pool, n_parties=50, n_assets=9, seed=3)
    assert parties == sample_universes(pool, 50, 9, seed=3)
    assert parties == sample_universes(pool, 50, 9, seed=np.random.default_rng(3))
    assert parties != sample_universes(pool, 50, 9, seed=4)
    for party in parties:
        assert len(set(party)) == 9 and set(party) <= set(pool)
        assert list(party) == sorted(party, key=pool.index)
    assert len({frozenset(p) for p in parties}) == 50  # independent draws, almost surely distinct...
    assert len(set(parties[0]) & set().union(*map(set, parties[1:]))) > 0  # ...but overlapping
    # Each ticker belongs to a party with probability 9/50; 4000 parties: sd of a frequency ≈ 0.006.
    many = sample_universes(pool, 4000, 9, seed=11)
    freq = np.array([sum(t in p for p in many) for t in pool]) / 4000
    np.testing.assert_allclose(freq, 9 / 50, atol=0.03)


@pytest.mark.parametrize(
    ("pool", "n_parties", "n_assets", "pattern"),
    [
        (("A", "B"), 2, 3, "n_assets=3 exceeds the pool of 2"),
        (("A", "B"), 0, 1, "n_parties must be >= 1, got 0"),
        (("A", "B"), 1, -1, "n_assets must be >= 1, got -1"),
        (("A", "B", "A"), 1, 1, "duplicate ticker 'A'"),
    ],
)
def test_sample_universes_errors(pool: tuple[str, ...], n_parties: int, n_assets: int, pattern: str) -> None:
    with pytest.raises(DataError, match=pattern):
        sample_universes(pool, n_parties, n_assets, seed=0)


# ---------------------------------------------------------------------------------------- load_market
def test_load_market_bundled_with_subset_and_range() -> None:
    panel = load_market("djia", tickers=["C", "A"], start="2001-02-01", end="2001-02-28")
    full = load_bundled("djia")
    mask = (full.dates >= "2001-02-01") & (full.dates <= "2001-02-28")
    assert panel.tickers == ("C", "A")
    assert panel.dates.equals(full.dates[mask])
    np.testing.assert_array_equal(panel.feature("close"), full.close.loc[mask, ["C", "A"]].to_numpy())


def test_load_market_csv(tmp_path: Path) -> None:
    path = save_csv_long(ohlcv_panel(), tmp_path / "toy.csv")
    panel = load_market(str(path), tickers=["T"], start="2020-01-02")
    assert panel.tickers == ("T",) and len(panel) == 4
    assert load_market(str(path), layout="long").features == ("close", "high", "low", "volume")


@pytest.mark.parametrize(
    ("source", "kw", "pattern"),
    [
        ("nasdaq", {}, "unknown data source 'nasdaq'.*nyse_o.*yahoo"),
        ("", {}, "source must be a non-empty string"),
        ("yahoo", {"tickers": ["AAPL"]}, "needs tickers, start and end"),
        ("djia", {"layout": "wide"}, r"takes no options, got \['layout'\]"),
        ("djia", {"tickers": ["ZZ"]}, "ticker 'ZZ' not in panel 'djia'"),
    ],
)
def test_load_market_errors(source: str, kw: dict, pattern: str) -> None:
    with pytest.raises(DataError, match=pattern):
        load_market(source, **kw)


# ---------------------------------------------------------------------------------------- CLI
def test_asset_summary_numbers() -> None:
    panel = load_bundled("djia")
    header, values = raw_bundled("djia")
    summary = asset_summary(panel)
    log_returns = pd.DataFrame(np.log(values)).diff().iloc[1:]
    np.testing.assert_allclose(summary["total_return"], values[-1] / values[0] - 1)
    np.testing.assert_allclose(summary["ann_volatility"], log_returns.std().to_numpy() * np.sqrt(252))
    assert list(summary.index) == header


def test_cli_data_list_shows_six_datasets() -> None:
    result = CliRunner().invoke(app, ["data", "list"])
    assert result.exit_code == 0, result.output
    for name, (assets, rows, _) in EXPECTED.items():
        line = next(line for line in result.output.splitlines() if f" {name} " in line)
        assert f" {assets} " in line and f" {rows} " in line
    assert "2006-04-03 … 2010-03-31" in result.output


def test_cli_data_show_bundled_and_csv(tmp_path: Path) -> None:
    header, values = raw_bundled("djia")
    result = CliRunner().invoke(app, ["data", "show", "djia"])
    assert result.exit_code == 0, result.output
    assert "djia: 507 days × 30 assets × 1 features, 2001-01-15 … 2002-12-24" in result.output
    line_a = next(line for line in result.output.splitlines() if line.startswith("│ A "))
    assert f"{values[-1, 0] / values[0, 0] - 1:+.2%}" in line_a
    path = save_csv_long(ohlcv_panel(), tmp_path / "toy.csv")
    result = CliRunner().invoke(app, ["data", "show", str(path)])
    assert result.exit_code == 0, result.output
    assert "toy: 5 days × 2 assets × 4 features" in result.output
    assert "close, high, low, volume" in result.output


def test_cli_data_show_escapes_control_character_tickers() -> None:
    result = CliRunner().invoke(app, ["data", "show", "tse"])
    assert result.exit_code == 0, result.output
    assert "\\x80" in result.output and "\x80" not in result.output


def test_cli_data_show_error_is_one_line_exit_1() -> None:
    result = CliRunner().invoke(app, ["data", "show", "nasdaq"])
    assert result.exit_code == 1
    assert result.output.startswith("error: unknown data source 'nasdaq'")
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
