"""``portfed allocate`` and ``portfed export``: a trained party's model at the desk (:mod:`portfed.deploy`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from portfed.data.errors import DataError

console = Console() if sys.stdout.isatty() else Console(width=200)

RUN_DIR = typer.Argument(..., help="A run directory (portfed run / compare / flower launch; a single-party run's "
                         "agent is algorithm local, party 0).")
ALGORITHM = typer.Option(..., "--algorithm", "-a", help="The algorithm whose deployed model to use.")
PARTY = typer.Option(..., "--party", "-p", help="The party (0-based) whose model and tickers to use.")


def _fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {exc}")
    return typer.Exit(code=1)


def _trained(run_dir: Path, algorithm: str, party: int):
    from portfed.deploy import RunDirectoryError, load_trained_party

    try:
        return load_trained_party(run_dir, algorithm, party)
    except (RunDirectoryError, DataError) as exc:
        raise _fail(exc) from None


def _refuse_anonymised(trained) -> None:
    """``--yahoo`` needs exchange symbols: refuse a party that trades a bundled dataset whose tickers are
    anonymised letters (Yahoo would be asked for ``A``, ``B``, …: other companies, or nothing)."""
    from portfed.data.bundled import BUNDLED_DATASETS

    spec = BUNDLED_DATASETS.get(trained.market.name)
    if spec is not None and not spec.symbols:
        raise DataError(
            f"--yahoo: party {trained.party} trades the bundled dataset {spec.name!r}, whose tickers "
            f"({', '.join(trained.tickers)}) are anonymised column labels, not exchange symbols; Yahoo Finance "
            "cannot give their prices. Give --prices FILE with these tickers' prices instead.")


def allocate(
    run_dir: Path = RUN_DIR,
    algorithm: str = ALGORITHM,
    party: int = PARTY,
    prices: Path = typer.Option(None, "--prices", help="CSV of prices (wide closes or long OHLC, portfed data "
                                "fetch's format) holding the party's tickers; default: the run's own market."),
    yahoo: bool = typer.Option(False, "--yahoo", help="Fetch the party's tickers from Yahoo Finance (cached) up "
                               "to the as-of date (default today)."),
    as_of: str = typer.Option(None, "--as-of", help="Decide at the close of this date (default: the last date of "
                              "the prices; today with --yahoo)."),
    current: Path = typer.Option(None, "--current", help="Current weights: JSON {asset: weight} or CSV asset,weight "
                                 "(cash first; default: the model's last backtest weights before the as-of date)."),
    out: Path = typer.Option(None, "--out", "-o", help="Directory for the CSV and JSON (default RUN_DIR/allocations)."),
    max_gap_days: int = typer.Option(4, "--max-gap-days", min=1, help="Most business days between two "
                                     "consecutive days of the window."),
    max_stale_days: int = typer.Option(3, "--max-stale-days", min=0, help="Most business days between the "
                                       "window's last day and the as-of date."),
) -> None:
    """Tomorrow's target weights of a party's deployed model from the latest window of its tickers' prices."""
    import pandas as pd

    from portfed.data import fetch_yahoo, load_csv
    from portfed.data.jumps import check_jumps
    from portfed.deploy import allocate as decide
    from portfed.deploy import read_current, write_allocation
    from portfed.validation import parse_date

    if prices is not None and yahoo:
        raise _fail(ValueError("--prices and --yahoo exclude each other"))
    trained = _trained(run_dir, algorithm, party)
    try:
        panel = None
        if prices is not None:
            panel = check_jumps(load_csv(prices))  # a bad tick is refused, not fed to the model
        elif yahoo:
            _refuse_anonymised(trained)
            day = pd.Timestamp.today().normalize() if as_of is None else parse_date(as_of, "--as-of")
            # Enough calendar days for the window, weekends and holidays.
            start = day - pd.offsets.BDay(2 * trained.agent.window + 10)
            panel = fetch_yahoo(trained.tickers, start, day)
            as_of = str(day.date())
        weights = None if current is None else read_current(current, ["cash", *trained.tickers])
        allocation = decide(trained, panel, as_of, weights, max_gap_days=max_gap_days, max_stale_days=max_stale_days)
    except ValueError as exc:  # DataError and the price-window errors are ValueErrors
        raise _fail(exc) from None
    console.print(f"{algorithm}, party {party}: target weights for the trading day after {allocation.date.date()} "
                  f"(as of {allocation.as_of.date()}; input scale {allocation.input_scale})")
    table = Table()
    for column in ("asset", "weight", "current", "change"):
        table.add_column(column, justify="left" if column == "asset" else "right")
    for row in allocation.frame().itertuples(index=False):
        table.add_row(row.asset, f"{row.weight:.4f}", f"{row.current:.4f}", f"{row.change:+.4f}")
    console.print(table)
    paths = write_allocation(allocation, run_dir / "allocations" if out is None else out)
    console.print("written: " + ", ".join(str(p) for p in paths))


def export(
    run_dir: Path = RUN_DIR,
    algorithm: str = ALGORITHM,
    party: int = PARTY,
    out: Path = typer.Option(..., "--out", "-o", help="Directory for policy.pt, policy.json (and policy.onnx)."),
    onnx: bool = typer.Option(False, "--onnx", help="Also write policy.onnx (needs the onnx extra)."),
) -> None:
    """Write a party's deployed policy as TorchScript (and ONNX) with a JSON of what feeds it."""
    from portfed.deploy import export_policy

    trained = _trained(run_dir, algorithm, party)
    try:
        paths = export_policy(trained, out, onnx=onnx)
    except (ImportError, ValueError) as exc:
        raise _fail(exc) from None
    console.print("written: " + ", ".join(str(p) for p in paths.values()))
