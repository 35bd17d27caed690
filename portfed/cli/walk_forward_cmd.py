"""``portfed walk-forward CONFIG --years N [--mode retrain|continue] --out DIR``: the comparison on N
consecutive held-out years (:mod:`portfed.experiment.studies.walk_forward`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from portfed.cli.compare_cmd import FORCE_HELP, JOBS_HELP
from portfed.cli.executor_options import ADDRESS_HELP, EXECUTOR_HELP, executor_option
from portfed.data.errors import DataError
from portfed.experiment.config import ConfigError, FederatedConfig, load_config
from portfed.generators import GeneratorError
from portfed.ray_executor import ClusterError

console = Console() if sys.stdout.isatty() else Console(width=200)
MODE_HELP = ("retrain: every fold trains from scratch (the config's initial models). continue: each fold's "
             "federation starts from the previous fold's final one (party models, global model, FedAMP centres, "
             "personalised extras; round counter, party sampling and each party's optimizer and portfolio "
             "memory start afresh) and trains its rounds with the newly revealed year added.")


def walk_forward(
    config: Path = typer.Argument(..., help="YAML config with `experiment: federated` (one market)."),
    years: int = typer.Option(2, "--years", "-y", min=1, help="Consecutive held-out periods of data.test_days days."),
    algorithms: str = typer.Option(None, "--algorithms", "-a", help="Comma-separated algorithms "
                                   "(default: federation.algorithms of CONFIG)."),
    out: Path = typer.Option(Path("runs/walk_forward"), "--out", "-o", help="Output directory."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0, help=JOBS_HELP),
    mode: str = typer.Option("retrain", "--mode", "-m", help=MODE_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Train up to each held-out year and test on it (from scratch, or continuing from the previous year's
    models); a table per year and the mean."""
    from portfed.evaluation import metrics_rich_table
    from portfed.experiment.studies import fold_table, fold_title, mean_over_folds, mean_title
    from portfed.experiment.studies import walk_forward as run_walk_forward

    n_jobs = executor_option(executor, address, jobs or None)
    try:
        cfg = load_config(config)
        if not isinstance(cfg, FederatedConfig):
            raise ConfigError(f"{config} is a {cfg.experiment!r} config; walk-forward needs `experiment: federated`")
        names = None if algorithms is None else [a.strip() for a in algorithms.split(",") if a.strip()]
        frame = run_walk_forward(cfg, out, years, names, mode=mode, progress=not quiet,
                                 n_jobs=n_jobs, force=force)
    except (ConfigError, DataError, GeneratorError, ValueError, ClusterError) as exc:  # RunDirError is a ValueError
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted:[/yellow] walk-forward does not resume; {out} holds the folds done "
                      "(each fold's run.json says whether it finished)")
        raise typer.Exit(code=130) from None
    for _, at in frame.groupby("fold", sort=True):
        console.print(metrics_rich_table(fold_table(at), title=fold_title(at)))
    console.print(metrics_rich_table(mean_over_folds(frame), title=mean_title(frame)))
    console.print(f"results written to [bold]{out}[/bold]")
