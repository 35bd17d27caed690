"""``portfed tune CONFIG --key K (--grid …|--range …) --seeds …``: one knob chosen on a validation year
(:mod:`portfed.experiment.studies.tuning`)."""

from __future__ import annotations

from pathlib import Path

import typer

from portfed.cli.compare_cmd import SET_HELP, console
from portfed.cli.executor_options import ADDRESS_HELP, EXECUTOR_HELP, executor_option
from portfed.data.errors import DataError
from portfed.experiment.config import ConfigError, FederatedConfig, load_config
from portfed.experiment.runs import CheckpointError
from portfed.generators import GeneratorError
from portfed.ray_executor import ClusterError

KEY_HELP = ("The knob, a dotted config key, e.g. federation.algorithm_params.fedavg+.lam (its algorithm is "
            "the one tuned) or agent.learning_rate (with --algorithm).")
GRID_HELP = "Comma-separated values, e.g. 0.1,0.01,0.001."
RANGE_HELP = ("LOW:HIGH:FACTOR, the multiplicative grid LOW, LOW·FACTOR, … up to HIGH (e.g. 1e-4:1:10); with "
              "--sample, LOW:HIGH, the range values are drawn from log-uniformly.")
SAMPLE_HELP = "Draw this many values log-uniformly from --range LOW:HIGH (seeded by --sample-seed) instead of a grid."


def range_numbers(text: str, count: int) -> list[float]:
    """``text`` as ``count`` colon-separated numbers."""
    from portfed.experiment.studies import TuneError

    parts = text.split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) != count:
        shape = "LOW:HIGH:FACTOR" if count == 3 else "LOW:HIGH"
        raise TuneError(f"--range {text!r} is not {shape} with numbers")
    return numbers


def grid_values(grid: str | None, span: str | None, sample: int | None, sample_seed: int) -> list:
    """The values to try from exactly one of ``--grid``, ``--range`` and ``--sample`` with ``--range``."""
    from portfed.experiment.studies import TuneError, geometric_grid, parse_grid, sampled_grid

    if grid is not None and span is not None:
        raise TuneError("give --grid or --range, not both")
    if sample is not None:
        if span is None:
            raise TuneError("--sample needs --range LOW:HIGH")
        low, high = range_numbers(span, 2)
        return sampled_grid(low, high, sample, sample_seed)
    if span is not None:
        return geometric_grid(*range_numbers(span, 3))
    if grid is None:
        raise TuneError("give the values: --grid, --range or --sample")
    return parse_grid(grid)


def seed_list(text: str) -> list[int]:
    from portfed.experiment.studies import TuneError

    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise TuneError(f"--seeds {text!r} is not a comma-separated list of integers") from None


def tune(
    config: Path = typer.Argument(..., help="YAML config with `experiment: federated` (see configs/)."),
    key: str = typer.Option(..., "--key", "-k", help=KEY_HELP),
    grid: str = typer.Option(None, "--grid", help=GRID_HELP),
    span: str = typer.Option(None, "--range", help=RANGE_HELP),
    sample: int = typer.Option(None, "--sample", help=SAMPLE_HELP),
    sample_seed: int = typer.Option(0, "--sample-seed", help="Seed of --sample's draw."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated run seeds per value (the config's `seed`)."),
    algorithm: str = typer.Option(None, "--algorithm", "-a", help="The algorithm to tune when KEY names none."),
    out: Path = typer.Option(None, "--out", "-o", help="Output directory (default: runs/tune_<config stem>)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Parallel processes (results identical for any number)."),
    resume: bool = typer.Option(False, "--resume", help="Continue every sub-run from its last checkpoint."),
    force: bool = typer.Option(False, "--force", help="Write into an OUT that holds another tuning (or other files)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Choose KEY's value on a validation year cut from the end of the training period (never the test
    period); write the validation curve (CSV, PNG) and chosen.json, and print the curve."""
    from rich.table import Table

    from portfed.experiment.runs import RunDirError
    from portfed.experiment.studies import TuneError
    from portfed.experiment.studies import tune as run_tune

    out = Path("runs") / f"tune_{config.stem}" if out is None else out
    n_jobs = executor_option(executor, address, jobs)
    try:
        cfg = load_config(config, overrides)
        if not isinstance(cfg, FederatedConfig):
            raise TuneError(f"{config} is a {cfg.experiment!r} config; tune needs `experiment: federated`")
        result = run_tune(cfg, key, grid_values(grid, span, sample, sample_seed), seed_list(seeds), out,
                          algorithm=algorithm, n_jobs=n_jobs, resume=resume, progress=not quiet, force=force)
    except (TuneError, ConfigError, DataError, CheckpointError, GeneratorError, RunDirError, ClusterError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    table = Table(title=f"Validation curve of {key} (mean log fAPV over parties, mean ± std over seeds)")
    for column in ("value", "score", "± std", "annualized return", "seeds"):
        table.add_column(column, justify="right")
    for row in result.curve.itertuples(index=False):
        mark = " ←" if row.value == result.chosen else ""
        table.add_row(f"{row.value}{mark}", f"{row.score:.6f}", f"{row.score_std:.6f}",
                      f"{row.annualized_return:.2%}", str(row.seeds))
    console.print(table)
    if result.warning:
        console.print(f"[yellow]warning:[/yellow] {result.warning}")
    days = ", ".join(f"{c.source} {c.start}…{c.end}" for c in result.cuts)
    console.print(f"chosen {key} = [bold]{result.chosen}[/bold] on the validation year ({days}); "
                  f"results written to [bold]{out}[/bold]; the comparison with it: "
                  f"portfed compare {config} --set {key}={result.chosen}")
