"""``portfed data``: list the bundled datasets, inspect a dataset, fetch prices from Yahoo Finance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from portfed.data.bundled import BUNDLED_DATASETS, list_bundled
from portfed.data.csv_source import save_csv_long
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.data.sources import load_market
from portfed.data.split import TRADING_DAYS_PER_YEAR
from portfed.data.universes import universe
from portfed.data.yahoo import DEFAULT_MAX_FFILL, fetch_yahoo

app = typer.Typer(
    help="Market data: bundled offline datasets, CSV files and Yahoo Finance.", no_args_is_help=True
)


def _console() -> Console:
    # Wide enough that a table is never squeezed into unreadable columns in pipes and tests.
    return Console(width=140)


def _fail(exc: DataError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(code=1)


def _printable(ticker: str) -> str:
    # Some bundled TSE tickers are control characters; show them as Python escapes, never raw.
    return ticker if ticker.isprintable() else ascii(ticker)[1:-1]


@app.command("list")
def list_datasets() -> None:
    """List the real datasets bundled with installed packages (offline): the six universal-portfolios
    sets (Mon–Fri dates reconstructed from the documented start) and skfolio's S&P 500 set (real dates)."""
    table = Table(title="Bundled datasets (offline; read from installed universal-portfolios and skfolio)")
    for column in ("name", "assets", "days", "span", "dates", "description"):
        table.add_column(column, justify="right" if column in ("assets", "days") else "left")
    for row in list_bundled().itertuples(index=False):
        span = f"{row.first_date.date()} … {row.last_date.date()}"
        dates = "real" if BUNDLED_DATASETS[row.name].dated else "reconstructed"
        table.add_row(row.name, str(row.assets), str(row.days), span, dates, row.description)
    _console().print(table)


@app.command("show")
def show(
    name: str = typer.Argument(
        ..., help="A bundled dataset name (see `portfed data list`) or a path to a .csv file."
    ),
) -> None:
    """Shape, span, features and a per-asset summary of a bundled dataset or a CSV file."""
    try:
        panel = load_market(name)
    except DataError as exc:
        raise _fail(exc) from None
    _print_summary(panel)


@app.command("fetch")
def fetch(
    tickers: list[str] = typer.Argument(
        None, help="Ticker symbols, e.g. AAPL MSFT (may be combined with --universe)."
    ),
    start: str = typer.Option(..., help="First day, YYYY-MM-DD (inclusive)."),
    end: str = typer.Option(..., help="Last day, YYYY-MM-DD (inclusive)."),
    out: Path | None = typer.Option(None, help="Write the panel to this file as long CSV."),
    universe_name: str | None = typer.Option(
        None, "--universe", help="Add the tickers of a named universe, e.g. sp500_tech50."
    ),
    max_ffill: int = typer.Option(
        DEFAULT_MAX_FFILL,
        help="Longest run of missing days forward-filled per ticker; longer gaps are refused.",
    ),
    refresh: bool = typer.Option(False, help="Ignore the local cache and download again."),
    cache_dir: Path | None = typer.Option(
        None, help="Cache folder (default $PORTFED_CACHE_DIR/yahoo or ~/.cache/portfed/yahoo)."
    ),
) -> None:
    """Download adjusted daily OHLCV from Yahoo Finance (cached locally), print a summary, optionally save it."""
    try:
        symbols = [t.strip().upper() for t in tickers or []]
        if universe_name is not None:
            symbols += [t for t in universe(universe_name) if t not in symbols]
        if not symbols:
            raise DataError("no tickers: give ticker symbols or --universe")
        panel = fetch_yahoo(symbols, start, end, cache_dir=cache_dir, max_ffill=max_ffill, refresh=refresh)
        if out is not None:
            save_csv_long(panel, out)
    except DataError as exc:
        raise _fail(exc) from None
    _print_summary(panel)
    if out is not None:
        typer.echo(f"wrote {out}")


def asset_summary(panel: PricePanel) -> pd.DataFrame:
    """Per asset: first and last close, total return ``v_T / v_1 − 1`` and annualized volatility.

    Volatility is the standard deviation of daily log returns ``ln y_t`` times ``√252`` (sample
    std, ``ddof=1``; NaN for a one-day panel).
    """
    close = panel.feature("close")
    log_returns = np.log(panel.price_relatives())
    volatility = (
        log_returns.std(axis=0, ddof=1) * np.sqrt(TRADING_DAYS_PER_YEAR)
        if len(log_returns) > 1
        else np.full(panel.n_assets, np.nan)
    )
    return pd.DataFrame(
        {
            "first": close[0],
            "last": close[-1],
            "total_return": close[-1] / close[0] - 1.0,
            "ann_volatility": volatility,
        },
        index=pd.Index(panel.tickers, name="ticker"),
    )


def _print_summary(panel: PricePanel) -> None:
    console = _console()
    console.print(
        f"[bold]{escape(panel.name)}[/bold]: {len(panel)} days × {panel.n_assets} assets × {panel.n_features} features, "
        f"{panel.dates[0].date()} … {panel.dates[-1].date()}; features: {', '.join(panel.features)}",
        markup=True,
        highlight=False,
    )
    table = Table(title="Per-asset summary (close)")
    for column in ("ticker", "first", "last", "total return", "ann. volatility"):
        table.add_column(column, justify="left" if column == "ticker" else "right")
    for ticker, row in asset_summary(panel).iterrows():
        table.add_row(
            escape(_printable(str(ticker))),
            f"{row['first']:.4g}",
            f"{row['last']:.4g}",
            f"{row['total_return']:+.2%}",
            f"{row['ann_volatility']:.2%}",
        )
    console.print(table)
