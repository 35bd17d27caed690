"""``portfed orders`` and ``portfed backtest``: a trained party's model on today's book and on new prices
(:mod:`portfed.deploy.orders`, :mod:`portfed.deploy.agent`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console() if sys.stdout.isatty() else Console(width=200)

RUN_DIR = typer.Argument(..., help="A federated run directory (portfed compare / run / flower launch).")
ALGORITHM = typer.Option(None, "--algorithm", "-a", help="The algorithm whose deployed model to use (default: the "
                         "run's only trained algorithm).")
PARTY = typer.Option(0, "--party", "-p", help="The party (0-based) whose model and tickers to use.")


def _fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {exc}")
    return typer.Exit(code=1)


def orders(
    run_dir: Path = RUN_DIR,
    party: int = PARTY,
    capital: float = typer.Option(..., "--capital", "-c", help="Cash in the account, in the prices' currency."),
    holdings: Path = typer.Option(None, "--holdings", help="CSV asset,shares of the shares held (default: none)."),
    lot: float = typer.Option(1.0, "--lot", help="Trade in multiples of this many shares (e.g. 100; 0.001 for "
                              "fractional shares)."),
    algorithm: str = ALGORITHM,
    prices: Path = typer.Option(None, "--prices", help="CSV of prices holding the party's tickers (default: the "
                                "run's own market)."),
    as_of: str = typer.Option(None, "--as-of", help="Decide and value the book at the close of this date (default: "
                              "the last date of the prices)."),
    out: Path = typer.Option(None, "--out", "-o", help="CSV file of the orders (default "
                             "RUN_DIR/orders/<algorithm>_party_<k>_<date>.csv)."),
) -> None:
    """The share orders that move today's book to the party's target weights (a CSV for review; nothing is sent)."""
    import numpy as np

    from portfed.deploy.agent import load, read_prices
    from portfed.deploy.allocate import allocate, price_window
    from portfed.deploy.orders import book_weights, read_holdings, share_orders, write_orders

    try:
        agent = load(run_dir, algorithm, party)
        trained = agent.trained
        panel = trained.market.panel if prices is None else read_prices(prices)
        window, _ = price_window(panel, trained.tickers, trained.agent.features, trained.agent.window, as_of)
        closes = window.close.iloc[-1].to_numpy(dtype=np.float64)
        shares = np.zeros(len(trained.tickers)) if holdings is None else read_holdings(holdings, trained.tickers)
        book = book_weights(capital, shares, closes)
        allocation = allocate(trained, panel, as_of, current=book, held=book)
        result = share_orders(allocation.weights, capital, shares, closes, trained.agent.commission, lot,
                              trained.tickers)
    except ValueError as exc:  # RunDirectoryError, DataError and the price-window errors are ValueErrors
        raise _fail(exc) from None
    frame = result.frame()
    console.print(f"{trained.algorithm}, party {party}: orders at the close of {allocation.date.date()} "
                  f"(lot {lot:g}, commission {trained.agent.commission:g}); nothing is sent")
    table = Table()
    for column in ("asset", "price", "held", "target_weight", "order", "side", "shares_after", "weight_after"):
        table.add_column(column, justify="left" if column in ("asset", "side") else "right")
    for row in frame.itertuples(index=False):
        table.add_row(row.asset, f"{row.price:.4f}", f"{row.held:g}", f"{row.target_weight:.4f}", f"{row.order:+g}",
                      row.side, f"{row.shares_after:g}", f"{row.weight_after:.4f}")
    console.print(table)
    path = out if out is not None else (run_dir / "orders" /
                                        f"{trained.algorithm}_party_{party}_{allocation.date.date()}.csv")
    console.print(f"written: {write_orders(result, path)}")


def backtest(
    run_dir: Path = RUN_DIR,
    prices: Path = typer.Option(..., "--prices", help="CSV of prices holding the party's tickers (wide closes or "
                                "portfed data fetch's long layout)."),
    party: int = PARTY,
    algorithm: str = ALGORITHM,
    start: str = typer.Option(None, "--start", help="First decision at this close (default: the first day with a "
                              "full window)."),
    end: str = typer.Option(None, "--end", help="Last day traded (default: the last date of the prices)."),
    baselines: str = typer.Option("ucrp,ubah", "--baselines", help="Comma-separated baselines to trade beside the "
                                  "model (names of evaluation.baselines; '' for none)."),
    out: Path = typer.Option(None, "--out", "-o", help="Directory for metrics.csv, portfolio_values.csv and "
                             "weights.csv (default RUN_DIR/backtests/<algorithm>_party_<k>_<first>_<last>)."),
) -> None:
    """A trained party's deployed model (frozen) traded on new prices, beside baselines, with the run's costs."""
    import pandas as pd

    from portfed._io import atomic_save
    from portfed.deploy.agent import load
    from portfed.evaluation.tables import metrics_table
    from portfed.experiment.party import trades_frame
    from portfed.validation import parse_date

    try:
        agent = load(run_dir, algorithm, party)
        names = tuple(n.strip() for n in baselines.split(",") if n.strip())
        results = agent.backtest(prices, None if start is None else parse_date(start, "--start"),
                                 None if end is None else parse_date(end, "--end"), names)
    except ValueError as exc:
        raise _fail(exc) from None
    own = results[agent.trained.algorithm]
    first, last = own.dates[0].date(), own.dates[-1].date()
    target = out if out is not None else run_dir / "backtests" / f"{agent.trained.algorithm}_party_{party}_{first}_{last}"
    metrics = metrics_table(results)
    values = pd.DataFrame({name: r.value_series for name, r in results.items()})
    values.index.name = "date"
    trades = trades_frame(own, agent.tickers)
    console.print(f"{agent.trained.algorithm}, party {party} on {prices.name}: {len(own.rewards)} days traded, "
                  f"decisions {first} … {own.dates[-2].date()}")
    console.print(metrics.to_string(float_format=lambda v: f"{v:.4f}"))
    written = [atomic_save(target / "metrics.csv", lambda p: metrics.to_csv(p)),
               atomic_save(target / "portfolio_values.csv", lambda p: values.to_csv(p)),
               atomic_save(target / "weights.csv", lambda p: trades.to_csv(p))]
    console.print("written: " + ", ".join(str(p) for p in written))
