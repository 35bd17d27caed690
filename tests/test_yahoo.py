"""Yahoo Finance source on recorded ``yfinance.download`` responses (no network; see fixtures/yahoo)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yfinance
from typer.testing import CliRunner

from portfed.cli.main import app
from portfed.data import DataError, DataSourceError, fetch_yahoo, load_csv, load_market
from portfed.data.yahoo import POLICY_VERSION, cache_key, default_cache_dir

FIXTURES = Path(__file__).parent / "fixtures" / "yahoo"
START, END = "2019-01-02", "2019-03-01"


def recorded(name: str) -> pd.DataFrame:
    return pd.read_csv(FIXTURES / f"{name}.csv", header=[0, 1], index_col=0, parse_dates=True)


class FakeDownload:
    """Stands in for ``yfinance.download``: returns a recorded response and records each call."""

    def __init__(self, response: pd.DataFrame | None = None, error: Exception | None = None) -> None:
        self.response, self.error, self.calls = response, error, []

    def __call__(self, tickers, **kwargs):
        self.calls.append((tickers, kwargs))
        if self.error is not None:
            raise self.error
        return self.response


def test_download_is_called_like_yfinance_download(tmp_path: Path) -> None:
    fake = FakeDownload(recorded("gap2"))
    fetch_yahoo(["aapl", "MSFT", " ibm "], START, END, cache_dir=tmp_path, download=fake)
    assert fake.calls == [
        (
            ["AAPL", "MSFT", "IBM"],
            {
                "start": "2019-01-02",
                "end": "2019-03-02",  # yfinance's end is exclusive; ours is inclusive
                "auto_adjust": True,
                "actions": False,
                "progress": False,
                "threads": False,
                "group_by": "column",
            },
        )
    ]


def test_two_day_gap_is_forward_filled_as_no_trade_bars(tmp_path: Path) -> None:
    raw = recorded("gap2")
    panel = fetch_yahoo(["MSFT", "AAPL", "IBM"], START, END, cache_dir=tmp_path, download=FakeDownload(raw))
    assert panel.tickers == ("MSFT", "AAPL", "IBM")  # requested order, not yfinance's sorted order
    assert panel.features == ("close", "high", "low", "open", "volume")
    assert panel.dates.equals(raw.index)
    gap = raw[("Close", "MSFT")].isna().to_numpy()
    assert gap.sum() == 2 and np.flatnonzero(gap).tolist() == [15, 16]
    last_close = raw[("Close", "MSFT")].iloc[14]
    for feature in ("close", "high", "low", "open"):
        filled = panel.feature(feature)[:, 0]
        np.testing.assert_array_equal(filled[gap], [last_close, last_close])
        np.testing.assert_array_equal(filled[~gap], raw[(feature.capitalize(), "MSFT")].to_numpy()[~gap])
    np.testing.assert_array_equal(panel.feature("volume")[gap, 0], [0.0, 0.0])
    for j, ticker in enumerate(("MSFT", "AAPL", "IBM")):
        np.testing.assert_array_equal(
            panel.feature("volume")[~gap, j], raw[("Volume", ticker)].to_numpy()[~gap]
        )
    np.testing.assert_array_equal(panel.feature("close")[:, 1], raw[("Close", "AAPL")].to_numpy())


def test_gap_longer_than_max_ffill_is_refused_naming_ticker_and_gap_start(tmp_path: Path) -> None:
    raw = recorded("gap_long")
    gap_start = raw.index[raw[("Close", "INTC")].isna().to_numpy()][0]
    with pytest.raises(DataError, match=r"'INTC' misses 7 consecutive days from 2019-01-31") as info:
        fetch_yahoo(["AAPL", "INTC"], START, END, cache_dir=tmp_path, download=FakeDownload(raw))
    assert (info.value.ticker, info.value.date) == ("INTC", gap_start)
    assert not isinstance(info.value, DataSourceError)
    panel = fetch_yahoo(
        ["AAPL", "INTC"], START, END, cache_dir=tmp_path, max_ffill=7, download=FakeDownload(raw)
    )
    assert panel.feature("close")[20:27, 1].tolist() == [raw[("Close", "INTC")].iloc[19]] * 7
    assert list(tmp_path.iterdir()) == [
        tmp_path / f"{cache_key(['AAPL', 'INTC'], *map(pd.Timestamp, (START, END)), 7)}.csv"
    ]


def test_gap_reaching_the_end_counts_as_a_gap(tmp_path: Path) -> None:
    raw = recorded("gap2")
    raw.loc[raw.index[-3:], pd.IndexSlice[:, "IBM"]] = np.nan
    assert str(raw.index[-3].date()) == "2019-02-26"
    with pytest.raises(DataError, match=r"'IBM' misses 3 consecutive days from 2019-02-26"):
        fetch_yahoo(
            ["AAPL", "IBM", "MSFT"], START, END, cache_dir=tmp_path, max_ffill=2, download=FakeDownload(raw)
        )
    panel = fetch_yahoo(["AAPL", "IBM", "MSFT"], START, END, cache_dir=tmp_path, download=FakeDownload(raw))
    assert (panel.feature("close")[-3:, 1] == raw[("Close", "IBM")].iloc[-4]).all()


def test_late_listed_ticker_is_refused_naming_its_first_date(tmp_path: Path) -> None:
    raw = recorded("late_listing")
    with pytest.raises(DataError, match=r"'FB' has no price before 2019-01-16") as info:
        fetch_yahoo(["AAPL", "FB"], START, END, cache_dir=tmp_path, download=FakeDownload(raw))
    assert (info.value.ticker, info.value.date) == ("FB", raw.index[10])
    assert "start >= 2019-01-16" in str(info.value)


def test_unknown_ticker_is_a_source_error_pointing_offline(tmp_path: Path) -> None:
    raw = recorded("unknown")
    assert raw[("Close", "NOSUCHTICKER")].isna().all() and ("Adj Close", "NOSUCHTICKER") in raw.columns
    with pytest.raises(DataSourceError, match=r"\['NOSUCHTICKER'\].*portfed data list") as info:
        fetch_yahoo(
            ["AAPL", "NOSUCHTICKER", "MSFT"], START, END, cache_dir=tmp_path, download=FakeDownload(raw)
        )
    assert info.value.ticker == "NOSUCHTICKER"
    # A ticker missing from the response altogether is unknown as well.
    with pytest.raises(DataSourceError, match=r"\['IBM'\]"):
        fetch_yahoo(["AAPL", "IBM"], START, END, cache_dir=tmp_path, download=FakeDownload(raw))
    assert list(tmp_path.iterdir()) == []  # nothing cached on failure


@pytest.mark.parametrize(
    "fake",
    [
        FakeDownload(recorded("unknown").iloc[:0]),  # all tickers failed: columns but no rows
        FakeDownload(pd.DataFrame()),
        FakeDownload(None),
        FakeDownload(error=ConnectionError("Failed to resolve 'query2.finance.yahoo.com'")),
    ],
)
def test_empty_download_or_no_network_is_a_source_error(tmp_path: Path, fake: FakeDownload) -> None:
    with pytest.raises(DataSourceError, match="portfed data list") as info:
        fetch_yahoo(["AAPL"], START, END, cache_dir=tmp_path, download=fake)
    if fake.error is not None:
        assert info.value.__cause__ is fake.error and "query2.finance.yahoo.com" in str(info.value)


def test_single_ticker_in_both_yfinance_layouts(tmp_path: Path) -> None:
    raw = recorded("single")
    multi = fetch_yahoo("AAPL", START, END, cache_dir=tmp_path / "a", download=FakeDownload(raw))
    flat_raw = raw.droplevel("Ticker", axis=1).rename_axis(None, axis=1)  # multi_level_index=False
    flat = fetch_yahoo("AAPL", START, END, cache_dir=tmp_path / "b", download=FakeDownload(flat_raw))
    np.testing.assert_array_equal(multi.values, flat.values)
    np.testing.assert_array_equal(multi.feature("close")[:, 0], raw[("Close", "AAPL")].to_numpy())
    with pytest.raises(DataSourceError, match="flat columns"):
        fetch_yahoo(["AAPL", "MSFT"], START, END, cache_dir=tmp_path / "c", download=FakeDownload(flat_raw))


def test_second_call_reads_the_cache_without_downloading(tmp_path: Path) -> None:
    first = fetch_yahoo(
        ["AAPL", "MSFT", "IBM"], START, END, cache_dir=tmp_path, download=FakeDownload(recorded("gap2"))
    )
    (cache_file,) = tmp_path.iterdir()
    assert cache_file.read_text().splitlines()[0] == "date,ticker,field,value"  # human-readable long CSV
    offline = FakeDownload(error=AssertionError("the network must not be touched"))
    again = fetch_yahoo(["IBM", "AAPL", "MSFT"], START, END, cache_dir=tmp_path, download=offline)
    assert offline.calls == []
    assert again.tickers == ("IBM", "AAPL", "MSFT")
    np.testing.assert_array_equal(again.values, first.select(["IBM", "AAPL", "MSFT"]).values)
    assert again.dates.equals(first.dates) and again.features == first.features
    np.testing.assert_array_equal(load_csv(cache_file).values, first.values)
    # refresh downloads again; other arguments are other cache entries.
    with pytest.raises(DataSourceError):
        fetch_yahoo(["AAPL", "MSFT", "IBM"], START, END, cache_dir=tmp_path, refresh=True, download=offline)
    with pytest.raises(DataSourceError):
        fetch_yahoo(["AAPL", "MSFT", "IBM"], START, END, cache_dir=tmp_path, max_ffill=3, download=offline)
    assert len(offline.calls) == 2


def test_cache_key_and_default_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    day = pd.Timestamp
    key = cache_key(["B", "A"], day("2019-01-02"), day("2019-03-01"), 5)
    assert key == cache_key(["A", "B"], day("2019-01-02"), day("2019-03-01"), 5)
    assert key != cache_key(["A", "B"], day("2019-01-02"), day("2019-03-01"), 4)
    assert key != cache_key(["A", "B"], day("2019-01-03"), day("2019-03-01"), 5)
    assert POLICY_VERSION == 1
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "yahoo"
    fetch_yahoo(["AAPL"], START, END, download=FakeDownload(recorded("single")))
    assert len(list((tmp_path / "yahoo").glob("*.csv"))) == 1
    monkeypatch.delenv("PORTFED_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "portfed" / "yahoo"


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"tickers": []}, "empty universe"),
        ({"tickers": ["AAPL", "aapl"]}, "duplicate ticker 'AAPL'"),
        ({"start": "2019-03-01", "end": "2019-01-02"}, "end 2019-01-02 is before start 2019-03-01"),
        ({"start": "someday"}, "cannot read start date 'someday'"),
        ({"max_ffill": -1}, "max_ffill must be >= 0, got -1"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict, pattern: str) -> None:
    args = {"tickers": ["AAPL"], "start": START, "end": END} | kwargs
    with pytest.raises(DataError, match=pattern):
        fetch_yahoo(args.pop("tickers"), args.pop("start"), args.pop("end"), cache_dir=tmp_path, **args)


def test_load_market_yahoo(tmp_path: Path) -> None:
    panel = load_market(
        "yahoo",
        tickers=["AAPL"],
        start=START,
        end=END,
        cache_dir=tmp_path,
        download=FakeDownload(recorded("single")),
    )
    assert panel.tickers == ("AAPL",) and len(panel) == 40 and panel.name == "yahoo"


def test_cli_fetch_writes_long_csv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeDownload(recorded("gap2"))
    monkeypatch.setattr(yfinance, "download", fake)
    out = tmp_path / "prices.csv"
    args = ["data", "fetch", "AAPL", "MSFT", "IBM", "--start", START, "--end", END]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert "yahoo: 40 days × 3 assets × 5 features, 2019-01-02 … 2019-02-28" in result.output
    assert f"wrote {out}" in result.output.replace("\n", "")
    saved = load_csv(out)
    raw = recorded("gap2")
    np.testing.assert_array_equal(saved.feature("close")[:, 0], raw[("Close", "AAPL")].to_numpy())
    assert len(fake.calls) == 1


def test_cli_fetch_errors_are_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(yfinance, "download", FakeDownload(recorded("gap_long")))
    args = ["data", "fetch", "AAPL", "INTC", "--start", START, "--end", END, "--cache-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: ticker 'INTC' misses 7 consecutive days from 2019-01-31, more than max_ffill=5"
    )
    monkeypatch.setattr(yfinance, "download", FakeDownload(error=OSError("network is unreachable")))
    result = CliRunner().invoke(app, ["data", "fetch", "--universe", "sp500_tech50", *args[4:]])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith("error: Yahoo Finance download of ['AAPL', 'ADBE',")
    assert "portfed data list" in result.output
    result = CliRunner().invoke(app, ["data", "fetch", "--start", START, "--end", END])
    assert (result.exit_code, result.output.strip()) == (
        1,
        "error: no tickers: give ticker symbols or --universe",
    )


class LoggingDownload(FakeDownload):
    """Like yfinance, which logs per-ticker failures on the ``yfinance`` logger instead of raising."""

    def __init__(self, response: pd.DataFrame, level: int, message: str) -> None:
        super().__init__(response)
        self.level, self.message = level, message

    def __call__(self, tickers, **kwargs):
        logging.getLogger("yfinance").log(self.level, self.message)
        return super().__call__(tickers, **kwargs)


def test_yfinance_failure_log_goes_into_the_error_not_stderr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = LoggingDownload(
        recorded("unknown"), logging.ERROR, "$NOSUCHTICKER: possibly delisted; no timezone"
    )
    with caplog.at_level(logging.WARNING), pytest.raises(DataSourceError) as info:
        fetch_yahoo(["AAPL", "NOSUCHTICKER"], START, END, cache_dir=tmp_path, download=fake)
    assert "(yfinance reported: $NOSUCHTICKER: possibly delisted; no timezone)" in str(info.value)
    assert caplog.records == []
    assert logging.getLogger("yfinance").propagate and logging.getLogger("yfinance").handlers == []


def test_yfinance_warnings_pass_through_when_the_download_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = LoggingDownload(recorded("single"), logging.WARNING, "AAPL: price repaired")
    with caplog.at_level(logging.WARNING):
        fetch_yahoo(["AAPL"], START, END, cache_dir=tmp_path, download=fake)
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("yfinance", "AAPL: price repaired")]
