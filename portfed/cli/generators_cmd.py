"""``portfed generators``: list the private augmenters, write the stylized-facts report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from portfed._progress import make_progress
from portfed.data.bundled import load_bundled
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.generators.base import GeneratorError
from portfed.generators.registry import GENERATORS
from portfed.generators.report import generators_report

app = typer.Typer(
    help="Private data augmenters (GBM, VOM, GAN, bootstrap, GARCH) and their stylized facts.",
    no_args_is_help=True,
)


def _console() -> Console:
    return Console(width=160)


@app.command("list")
def list_generators() -> None:
    """List the registered generators and their default parameters."""
    table = Table(title="Generators (portfed.generators.make_generator)")
    for column in ("name", "class", "default parameters"):
        table.add_column(column)
    for name, cls in GENERATORS.items():
        params = ", ".join(f"{k}={v!r}" for k, v in cls().get_params().items())
        table.add_row(name, cls.__name__, params)
    _console().print(table)


def _universe(panel: PricePanel, assets: str | None, n_assets: int, seed: int) -> PricePanel:
    if assets:
        return panel.select([a.strip() for a in assets.split(",") if a.strip()])
    if not 1 <= n_assets <= panel.n_assets:
        raise DataError(f"--n-assets must be in 1..{panel.n_assets} for {panel.name!r}, got {n_assets}")
    picked = np.sort(np.random.default_rng(seed).choice(panel.n_assets, size=n_assets, replace=False))
    return panel.select([panel.tickers[i] for i in picked])


@app.command("report")
def report(
    dataset: str = typer.Option(..., "--dataset", help="Bundled dataset name (see `portfed data list`)."),
    assets: str | None = typer.Option(
        None, "--assets", help="Comma-separated tickers (overrides --n-assets)."
    ),
    n_assets: int = typer.Option(9, "--n-assets", help="Number of assets drawn at random (with --seed)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the asset draw and of the synthetic paths."),
    out: Path | None = typer.Option(
        None, "--out", help="Output folder [default: reports/generators/DATASET]."
    ),
    generators: str = typer.Option(
        ",".join(GENERATORS), "--generators", help="Comma-separated generator names (see `generators list`)."
    ),
    days: int = typer.Option(252, "--days", help="Held-out days and length of every synthetic path."),
    paths: int = typer.Option(20, "--paths", help="Synthetic paths per generator."),
) -> None:
    """Fit generators on all but the last DAYS days of one universe; tabulate stylized facts and plot them.

    Writes stylized_facts.csv / .md, curves.csv, paths.png, acf.png and histograms.png into --out.
    """
    names = [g.strip() for g in generators.split(",") if g.strip()]
    unknown = [g for g in names if g not in GENERATORS]
    if unknown:
        typer.echo(f"error: unknown generator {unknown[0]!r}; known: {', '.join(GENERATORS)}", err=True)
        raise typer.Exit(code=1)
    out_dir = out if out is not None else Path("reports") / "generators" / dataset
    try:
        panel = _universe(load_bundled(dataset), assets, n_assets, seed)
        with make_progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_console(),
        ) as progress:
            task = progress.add_task(f"fit + sample {names[0]}", total=len(names))

            def step(done: str) -> None:
                progress.advance(task)
                following = names.index(done) + 1
                if following < len(names):
                    progress.update(task, description=f"fit + sample {names[following]}")

            result = generators_report(panel, names, out_dir, days=days, paths=paths, seed=seed, on_step=step)
    except (DataError, GeneratorError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    table = Table(title=f"Stylized facts, {panel.name} {', '.join(panel.tickers)} ({days}-day windows)")
    table.add_column("source")
    for column in result.table.columns:
        table.add_column(column, justify="right")
    for label, row in result.table.iterrows():
        table.add_row(str(label), *(f"{v:.4f}" for v in row))
    _console().print(table)
    typer.echo(f"wrote {out_dir}")
