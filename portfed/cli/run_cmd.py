"""``portfed run CONFIG --out DIR``: run an experiment from a YAML config."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from portfed.agents.native import NativeBuildError
from portfed.cli.compare_cmd import (
    ALGORITHMS_HELP,
    FORCE_HELP,
    JOBS_HELP,
    OUT_HELP,
    SEEDS_HELP,
    SET_HELP,
    TENSORBOARD_HELP,
    default_out,
    parse_seeds_option,
    run_comparison,
    split_algorithms,
)
from portfed.cli.executor_options import ADDRESS_HELP, EXECUTOR_HELP, executor_option
from portfed.data.errors import DataError
from portfed.experiment.config import ConfigError, FederatedConfig, load_config
from portfed.experiment.runs import RunDirError
from portfed.generators import GeneratorError

# Piped output (make run, CI logs) has no terminal width: rich would squeeze the table into 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=200)


def run(
    config: Path = typer.Argument(..., help="YAML experiment config (see configs/)."),
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP),
    algorithms: str = typer.Option(None, "--algorithms", "-a", help=ALGORITHMS_HELP),
    resume: bool = typer.Option(False, "--resume", help="Federated runs: continue from the last checkpoints."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0, help=JOBS_HELP),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    tensorboard: bool = typer.Option(False, "--tensorboard", help="Federated runs: " + TENSORBOARD_HELP),
    seeds: str = typer.Option(None, "--seeds", help="Federated runs: " + SEEDS_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    executor: str = typer.Option("local", "--executor", help="Federated runs: " + EXECUTOR_HELP),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Run the experiment described by CONFIG and write its results into OUT.

    ``experiment: single_party`` trains one agent; ``experiment: federated`` federates the parties
    with every algorithm of ``federation.algorithms`` or ``--algorithms`` (one sub-directory each;
    ``portfed compare`` is the same command restricted to federated configs).
    """
    import torch

    from portfed.evaluation import metrics_rich_table

    # EIIE nets have ~1k parameters: for one agent intra-op threading costs far more than it saves
    # (measured 3.5 ms vs 155 ms per step on the 2-core machine under load), so a single agent trains
    # single-threaded; federated runs set FederatedConfig.threads() (2 for the batched engine).
    torch.set_num_threads(1)
    from portfed.experiment.runs import run_single_party

    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    out = default_out(config, out)
    if isinstance(cfg, FederatedConfig):
        run_comparison(cfg, out, split_algorithms(algorithms), resume, quiet, executor_option(executor, address, jobs or None),
                       tensorboard, force, command="portfed run", seeds=parse_seeds_option(seeds))
        return
    if algorithms is not None:
        console.print("[red]error:[/red] --algorithms applies to federated configs only")
        raise typer.Exit(code=1)
    if tensorboard:
        console.print("[red]error:[/red] --tensorboard applies to federated configs only")
        raise typer.Exit(code=1)
    if executor != "local" or address is not None:
        console.print("[red]error:[/red] --executor and --address apply to federated configs only")
        raise typer.Exit(code=1)
    if seeds is not None:
        console.print("[red]error:[/red] --seeds applies to federated configs only")
        raise typer.Exit(code=1)
    if resume:
        console.print("[red]error:[/red] --resume applies to federated configs only")
        raise typer.Exit(code=1)
    try:
        result = run_single_party(cfg, out, progress=not quiet, force=force)
    except (ConfigError, DataError, GeneratorError, RunDirError, NativeBuildError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted:[/yellow] a single-party run does not resume; {out} holds a partial "
                      "run (its run.json says interrupted)")
        raise typer.Exit(code=130) from None
    console.print(metrics_rich_table(result.metrics, title=f"Held-out year — {', '.join(result.tickers)}"))
    console.print(f"results written to [bold]{out}[/bold]")
