"""``portfed report RUN_DIR``: tearsheets of a comparison directory (:mod:`portfed.experiment.reports.tearsheets`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from portfed.experiment.config import ConfigError

console = Console() if sys.stdout.isatty() else Console(width=200)


def report(
    run_dir: Path = typer.Argument(..., help="A comparison directory (portfed compare / run / flower launch)."),
    out: Path = typer.Option(None, "--out", "-o", help="Directory for the HTML pages (default RUN_DIR/report)."),
) -> None:
    """One self-contained HTML tearsheet per algorithm and a summary page (index.html)."""
    from portfed.experiment.reports import write_report

    if not (run_dir / "config.yaml").is_file():
        console.print(f"[red]error:[/red] {run_dir} is not a run directory: it has no config.yaml")
        raise typer.Exit(code=1)
    try:
        pages = write_report(run_dir, out)
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    console.print("written: " + ", ".join(str(p) for p in pages.values()))
