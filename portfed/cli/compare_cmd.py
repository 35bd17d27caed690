"""``portfed compare CONFIG --algorithms a,b,… --out DIR``: one federated config, several algorithms.

``portfed run`` on a federated config does exactly the same (same options, same defaults); ``compare``
is the name that refuses a single-party config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from portfed.agents.native import NativeBuildError
from portfed.cli.executor_options import ADDRESS_HELP, EXECUTOR_HELP, executor_option
from portfed.data.errors import DataError
from portfed.experiment.config import ConfigError, FederatedConfig, load_config
from portfed.experiment.runs import CheckpointError, RunDirError
from portfed.generators import GeneratorError
from portfed.ray_executor import ClusterError
from portfed.sweep import Executor

# Piped output (make run, CI logs) has no terminal width: rich would squeeze the table into 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=200)


SET_HELP = ("Override a config key before validation, KEY.PATH=VALUE with a YAML value (repeatable), e.g. "
            "--set agent.input_scale=raw --set federation.rounds=10.")
JOBS_HELP = ("Parallel processes for the algorithms (0 = what the cores allow: CPUs // torch_threads); "
             "results are identical for any number. With torch_threads: 1 that is a process per core, "
             "the fastest way to compare on a CPU (README, 'Fit once').")


RESUME_HELP = ("Continue every sub-run from its last checkpoint (with --seeds, a seed that finished is read back, "
               "not re-run).")
OUT_HELP = "Run directory for every output (default: runs/<config file name without .yaml>)."
ALGORITHMS_HELP = ("Federated configs: comma-separated algorithms, e.g. local,fedavg,fedprox,rfa,comed,fedavg+,"
                   "fedgeomed+,fedcomed+ (default: federation.algorithms of CONFIG).")


def default_out(config: Path, out: Path | None) -> Path:
    """``out``, or ``runs/<config stem>`` when not given: ``run`` and ``compare`` write to the same place."""
    return Path("runs") / config.stem if out is None else out


def split_algorithms(algorithms: str | None) -> list[str] | None:
    """``a,b , c`` as a list of names; ``None`` when not given."""
    return None if algorithms is None else [a.strip() for a in algorithms.split(",") if a.strip()]


def print_comparison(table, out: Path, title: str) -> None:
    """Print Table 1 (rich) and where the results are."""
    from portfed.evaluation import metrics_rich_table

    console.print(metrics_rich_table(table, title=title))
    console.print(f"results written to [bold]{out}[/bold]")


TENSORBOARD_HELP = ("Log every round's rewards, parameter changes, distances to the global model, quarantines "
                    "and server iterations as TensorBoard scalars in each sub-run's tensorboard/ "
                    "(as the config's tracking.tensorboard: true).")


SEEDS_HELP = ("Run the comparison once per seed, e.g. 0,1,2 (each into OUT/seed_<s>; a seed draws the universes, "
              "initial models, generator fits and batches) and write Table 1 over seeds with 95 % intervals "
              "(OUT/table1_seeds.md) and Fed+'s paired differences (OUT/differences.md).")


def parse_seeds_option(seeds: str | None) -> list[int] | None:
    """``--seeds`` as a list of seeds (``None`` when not given); a bad value exits with one line."""
    if seeds is None:
        return None
    from portfed.experiment.studies import parse_seeds

    try:
        return parse_seeds(seeds)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None


FORCE_HELP = ("Write into an --out that holds another config's run (or other files); its sub-runs of other "
              "algorithms stay, refused by allocate / export as another config's.")


def interrupted(command: str, out: Path) -> typer.Exit:
    """Ctrl-C / SIGTERM during a run: say how to continue it; exit code 130 (128 + SIGINT), no traceback."""
    console.print(f"[yellow]interrupted:[/yellow] the checkpoints in {out} are kept; continue with the same "
                  f"command and --resume ({command} … --out {out} --resume)")
    return typer.Exit(code=130)


def run_comparison(config: FederatedConfig, out: Path, algorithms: list[str] | None, resume: bool,
                   quiet: bool, jobs: int | Executor | None = None, tensorboard: bool = False, force: bool = False,
                   command: str = "portfed compare", seeds: list[int] | None = None) -> None:
    """Run :func:`portfed.experiment.studies.compare.compare` (or, with ``seeds``,
    :func:`portfed.experiment.studies.seeds.compare_seeds`) with ``jobs`` as their ``n_jobs`` (``None``: what the
    cores allow; :func:`portfed.cli.executor_options.executor_option`) and print its table; user errors exit with code 1,
    an interruption with 130 (:func:`interrupted`)."""
    from portfed.agents.batched import resolved_backend
    from portfed.experiment.runs import make_spec
    from portfed.experiment.studies import compare as compare_algorithms
    from portfed.experiment.studies import compare_seeds, differences_markdown, seed_table_markdown

    if tensorboard:
        config = config.model_copy(update={"tracking": config.tracking.model_copy(update={"tensorboard": True})})

    for name in algorithms or []:
        try:
            make_spec(config, name)
        except ValueError as exc:
            console.print(f"[red]error:[/red] --algorithms: {exc}")
            raise typer.Exit(code=1) from None
    try:  # agent.backend native where the kernels do not build: refused before anything is written
        resolved_backend(config.agent_config())
    except (NativeBuildError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    try:
        if seeds is not None:
            over = compare_seeds(config, out, seeds, algorithms, resume=resume, progress=not quiet,
                                 n_jobs=jobs, force=force)
            console.print(seed_table_markdown(over.table, over.seeds), markup=False)
            console.print(differences_markdown(over.differences), markup=False)
            console.print(f"results written to [bold]{out}[/bold] (one comparison per seed in seed_<s>/)")
            return
        result = compare_algorithms(config, out, algorithms, resume=resume, progress=not quiet,
                                    n_jobs=jobs, force=force)
    except (ConfigError, DataError, CheckpointError, GeneratorError, RunDirError, ClusterError, NativeBuildError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        raise interrupted(command, out) from None
    n = config.parties.count
    print_comparison(result.table, out, f"Held-out period, mean (std) over {n} parties — Table 1 of the Fed+ paper")


def compare(
    config: Path = typer.Argument(..., help="YAML config with `experiment: federated` (see configs/)."),
    algorithms: str = typer.Option(None, "--algorithms", "-a", help=ALGORITHMS_HELP),
    out: Path = typer.Option(None, "--out", "-o", help=OUT_HELP),
    resume: bool = typer.Option(False, "--resume", help=RESUME_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0, help=JOBS_HELP),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    tensorboard: bool = typer.Option(False, "--tensorboard", help=TENSORBOARD_HELP),
    seeds: str = typer.Option(None, "--seeds", help=SEEDS_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Federate the same parties with each algorithm; print Table 1 and write the figures.

    The same as ``portfed run`` on a federated config; a single-party config is refused."""
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    if not isinstance(cfg, FederatedConfig):
        console.print(f"[red]error:[/red] {config} is a {cfg.experiment!r} config; compare needs `experiment: federated`")
        raise typer.Exit(code=1)
    run_comparison(cfg, default_out(config, out), split_algorithms(algorithms), resume, quiet,
                   executor_option(executor, address, jobs or None), tensorboard, force, seeds=parse_seeds_option(seeds))
