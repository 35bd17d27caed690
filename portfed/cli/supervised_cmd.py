"""``portfed supervised``: the supervised benchmarks of the Fed+, FedMGDA+ and FedAMP papers.

``list`` shows the configs in ``configs/supervised``; ``run CONFIG --out DIR`` runs one (rows ×
algorithms × seeds on the federation layer), writes ``table.md`` / ``table.csv`` (our number beside
the paper's), ``curves_<row>.png`` and FedAMP's ξ heat maps, and skips runs already stored under
``DIR/runs`` (resume); ``--jobs N`` makes the runs in N processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from portfed.experiment.config_base import ConfigError

app = typer.Typer(help="Supervised federated benchmarks of the papers (Fed+, FedMGDA+, FedAMP).",
                  no_args_is_help=True)
CONFIG_DIR = Path("configs/supervised")


def _console() -> Console:
    return Console(width=160)


@app.command("list")
def list_configs(folder: Path = typer.Option(CONFIG_DIR, "--dir", help="Folder of supervised configs.")) -> None:
    """List the benchmark configs: name, paper source, rows (with each row's data source: an image set such
    as ``mnist_5k`` or ``digits``, or a generator) and algorithms."""
    from portfed.supervised.config import load_supervised_config

    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        typer.echo(f"error: no *.yaml configs in {folder}", err=True)
        raise typer.Exit(code=1)
    table = Table(title=f"supervised benchmarks in {folder}")
    table.add_column("config", no_wrap=True)
    for column in ("source", "rows", "algorithms", "seeds"):
        table.add_column(column)
    for path in paths:
        try:
            config = load_supervised_config(path)
        except ConfigError as exc:
            table.add_row(path.stem, f"[red]invalid: {exc}[/red]", "", "", "")
            continue
        rows = [f"{r.label} ({getattr(r.data, 'source', r.data.kind)})" for r in config.rows]
        table.add_row(path.stem, config.source, ", ".join(rows),
                      ", ".join(a.label for a in config.algorithms), str(len(config.seeds)))
    _console().print(table)


@app.command("run")
def run(
    config_path: Path = typer.Argument(..., help="A config of configs/supervised."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (tables, curves, stored runs)."),
    seeds: int = typer.Option(0, "--seeds", help="Use only the first N seeds of the config (0: all)."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse the runs stored under OUT/runs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0,
                             help="Runs (grid candidates, seeds) in parallel processes (0: one per CPU); results "
                                  "are identical for any number."),
) -> None:
    """Run a benchmark and write our numbers beside the paper's."""
    from portfed.supervised.config import load_supervised_config
    from portfed.supervised.report import plot_attention, plot_curves, write_table
    from portfed.supervised.runner import Runner

    console = _console()
    try:
        config = load_supervised_config(config_path)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    if seeds < 0:
        typer.echo(f"error: --seeds must be >= 0, got {seeds}", err=True)
        raise typer.Exit(code=1)
    if seeds:
        config = config.model_copy(update={"seeds": config.seeds[:seeds]})
    started = time.perf_counter()
    try:
        cells, descriptions = Runner(config, out, resume=resume, jobs=jobs or os.cpu_count() or 1, progress=not quiet).run()
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    elapsed = time.perf_counter() - started
    text = write_table(config, cells, descriptions, out, elapsed)
    plot_curves(cells, out)
    plot_attention(cells, {row.label: config.training_for(row).rounds for row in config.rows}, out)
    console.print(text, markup=False, highlight=False)
    console.print(f"results written to {out} in {elapsed:.1f} s")
