"""``portfed study collapse [CONFIG] --out DIR``: the collapse study (:mod:`portfed.experiment.studies.collapse_study`)."""

from __future__ import annotations

from pathlib import Path

import typer

from portfed.cli.compare_cmd import console
from portfed.cli.executor_options import ADDRESS_HELP, EXECUTOR_HELP, executor_option
from portfed.data.errors import DataError
from portfed.experiment.config import ConfigError
from portfed.experiment.runs import CheckpointError
from portfed.generators import GeneratorError
from portfed.ray_executor import ClusterError

app = typer.Typer(help="Studies: sweeps of federated runs over a grid of settings.", no_args_is_help=True)

DEFAULT_STUDY = Path("configs/study_collapse.yaml")


@app.callback()
def studies() -> None:
    """Studies: sweeps of federated runs over a grid of settings (``portfed study collapse``).

    A callback keeps ``study`` a group of sub-commands: Typer turns an app of one command without one
    into that command, and ``portfed study collapse CONFIG`` would then read ``collapse`` as the config.
    """


@app.command("collapse")
def collapse(
    config: Path = typer.Argument(DEFAULT_STUDY, help="Study YAML (`study: collapse`)."),
    out: Path = typer.Option(Path("runs/study_collapse"), "--out", "-o", help="Study directory."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped study in OUT (same config)."),
    force: bool = typer.Option(False, "--force", help="Write into an OUT that holds another study (or other files)."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0,
                             help="Parallel processes (0 = CPUs // the base config's torch_threads); "
                                  "the rows are identical for any number."),
    seeds: int = typer.Option(0, "--seeds", min=0, help="Use seeds 0 … N−1 instead of the config's (0 = config)."),
    full: bool = typer.Option(False, "--full", help="Every combination of the levels instead of one factor at a time."),
    algorithms: str = typer.Option("", "--algorithms", "-a",
                                   help="Comma-separated subset of the config's algorithms (default: all)."),
    base_only: bool = typer.Option(False, "--base-only", help="Only the base cell (every factor at its first level)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
    address: str = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Sweep learning rate, local iterations, heterogeneity, Adam state, participation and any config key
    (factors.keys) for every algorithm and seed; write the per-run CSV and the collapse map (fraction of
    seeds collapsed)."""
    from portfed.experiment.config import load_study_config, parse_study_config
    from portfed.experiment.runs import RunDirError
    from portfed.experiment.studies import run_collapse_study

    n_jobs = executor_option(executor, address, jobs or None)
    try:
        study = load_study_config(config)
        if seeds or full or algorithms or base_only:
            raw = study.model_dump(mode="json")
            raw.update({"seeds": list(range(seeds))} if seeds else {})
            raw.update({"design": "full"} if full else {})
            if algorithms:
                chosen = [a.strip() for a in algorithms.split(",") if a.strip()]
                unknown = [a for a in chosen if a not in study.algorithms]
                if unknown or not chosen:
                    raise ConfigError(f"--algorithms {algorithms!r}: {unknown or 'none given'} not among the study's "
                                      f"algorithms {study.algorithms}")
                raw["algorithms"] = chosen
                if study.factor_algorithms is not None:
                    raw["factor_algorithms"] = [a for a in study.factor_algorithms if a in chosen] or None
                    if raw["factor_algorithms"] is None and not base_only:
                        raise ConfigError(f"--algorithms {algorithms!r}: none of them runs in the factor cells "
                                          f"(factor_algorithms: {study.factor_algorithms}); add --base-only")
            if base_only:
                raw["factors"] = {name: levels[:1] for name, levels in raw["factors"].items() if name != "keys"}
                raw["factors"]["keys"] = {key: levels[:1] for key, levels in study.factors.keys.items()}
            study = parse_study_config(raw, str(config))
        result = run_collapse_study(study, out, jobs=n_jobs, resume=resume, progress=not quiet, force=force)
    except (ConfigError, DataError, CheckpointError, GeneratorError, RunDirError, ClusterError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    from portfed.evaluation import metrics_rich_table

    console.print(metrics_rich_table(result.collapse_map, title="Fraction of seeds that collapsed (cell × algorithm)"))
    console.print(metrics_rich_table(result.noise_map, title="The same, noise-aware criterion with local control"))
    console.print(f"{len(result.rows)} runs; {result.seconds / 60:.1f} min; results written to [bold]{out}[/bold] "
                  "(each arm over seeds: collapse_seeds.md; against its controls, paired: collapse_differences.md)")
