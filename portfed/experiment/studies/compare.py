"""``compare``: the same parties, data, generators and seeds federated by several algorithms (paper 000 §8.2).

The parties are built once (market, universes, fitted private generators) and every algorithm
trains its own deep copy of them, so all algorithms start from identical parties: the same
universes, training data, synthetic blocks, initial model ``w^0`` and sampler seeds.  Each
algorithm is a sub-run directory (:func:`portfed.experiment.runs.run_algorithm`); the comparison
directory that holds them, Table 1 and the figures is described in :mod:`portfed.experiment.reports.comparison`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from portfed._io import atomic_save, atomic_write_text
from portfed._threads import torch_threads
from portfed.evaluation.benchmark import check_covers, parse_benchmark
from portfed.experiment.config import FederatedConfig, dump_config
from portfed.experiment.party import PARTIES_FILE, FitCache, backtest_baselines, build_federation, party_table
from portfed.experiment.reports import Comparison, run_name, write_comparison
from portfed.experiment.reports.disclosure import run_record
from portfed.experiment.runs import (
    RunJob,
    check_resumable,
    claim,
    config_fingerprint,
    default_jobs,
    directory_config_fingerprint,
    make_spec,
    run_jobs,
)
from portfed.federation import FederationState
from portfed.sweep import Executor

#: Sub-directory of the fault-free reruns of a comparison whose config has faults.
CLEAN_DIR = "without_faults"


def compare(
    config: FederatedConfig,
    out_dir: str | Path,
    algorithms: Sequence[str] | None = None,
    *,
    resume: bool = False,
    progress: bool = True,
    n_jobs: int | Executor | None = 1,
    fit_cache: bool = True,
    start: Mapping[str, FederationState] | None = None,
    force: bool = False,
) -> Comparison:
    """Run every algorithm of ``algorithms`` (default ``config.federation.algorithms``) on the same parties.

    ``resume`` resumes every sub-run from its last checkpoint (sub-runs that had finished only
    redo their evaluation).  ``n_jobs`` parallel processes (``None``: what the cores allow,
    :func:`portfed.experiment.runs.parallel.default_jobs`) or an :class:`~portfed.sweep.Executor` (e.g.
    :class:`~portfed.ray_executor.RayExecutor`, a Ray cluster); results are identical for any of them.
    ``fit_cache``: load the parties' fitted generators from ``out_dir/fit_cache`` (and
    ``$PORTFED_FIT_CACHE``) and store new fits there; ``False`` fits every one and stores nothing.
    ``start``: the federation state a run's rounds start from, by run name (:func:`run_name`; e.g. the
    :meth:`~portfed.federation.FederationState.restarted` :attr:`Comparison.states` of an earlier
    comparison); a run it does not name starts from the initial models.
    Writes the comparison directory described in the module docstring, under its lock and with its
    ``run.json`` (:func:`portfed.experiment.runs.run_dir.claim`): nothing is written when ``out_dir`` holds
    another config's run (unless ``force``), is being written by another process, or (``resume``) holds a
    checkpoint of another config.

    Raises:
        ValueError: a bad algorithm name, or a ``start`` name that is none of the comparison's runs.
        RunDirError: ``out_dir`` is a file, another run's (without ``force``) or locked by another writer.
        CheckpointError: ``resume`` and a sub-run's checkpoint is of another config or unreadable.
    """
    names = list(config.federation.algorithms if algorithms is None else algorithms)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"algorithms must be a non-empty list of distinct names, got {names}")
    for name in names:
        make_spec(config, name)  # fail on a bad name before any work
    config = config.model_copy(update={"federation": config.federation.model_copy(update={"algorithms": names})})
    clean = config.model_copy(update={"parties": config.parties.model_copy(update={"faults": []})})
    # The same runs without the faults, for the robustness table of the honest parties; with every
    # party faulty (e.g. a collapse control) there is nothing to compare and no table.
    robust_table = bool(config.parties.faults and config.parties.honest)
    out, starts = Path(out_dir), dict(start or {})
    jobs = [RunJob(name, config, name, out / name, start=starts.get(name)) for name in names]
    if robust_table:
        jobs += [RunJob(run_name(name, False), clean, name, out / CLEAN_DIR / name,
                        start=starts.get(run_name(name, False))) for name in names]
    unknown = sorted(set(starts) - {job.name for job in jobs})
    if unknown:
        raise ValueError(f"start names {unknown}, which are none of this comparison's runs {[j.name for j in jobs]}")

    def resumable() -> None:  # every checkpoint to resume from is this run's, before anything is written
        for job in jobs if resume else []:
            check_resumable(job.config, job.algorithm, job.out_dir, job.start)

    with claim(out, "comparison", config_fingerprint(config), force=force, checks=resumable,
               legacy_fingerprint=directory_config_fingerprint(out), algorithms=names, **run_record(config)):
        atomic_write_text(out / "config.yaml", dump_config(config))
        write_party_table(config, out)
        with torch_threads(config.threads()):
            federation = build_federation(config, progress, FitCache.for_run(out) if fit_cache else None)
            check_covers(parse_benchmark(config.evaluation.benchmark, config.evaluation.baselines),
                         [m.panel.dates[m.panel.dates >= m.train_end] for m in federation.markets])
            base_metrics, baseline_values = backtest_baselines(config, federation, progress)
            done = run_jobs(federation, jobs, default_jobs(config) if n_jobs is None else n_jobs, resume=resume,
                            progress=progress)
            runs = {name: done[name] for name in names}
            clean_runs = {name: done[run_name(name, False)] for name in names if robust_table}
        return write_comparison(config, out, runs, base_metrics, baseline_values, clean_runs, federation.fits)


def write_party_table(config: FederatedConfig, out: Path) -> Path:
    """``out/parties.csv``: which data every party trades (:func:`~portfed.experiment.party.build.party_table`)."""
    table = party_table(config)
    return atomic_save(out / PARTIES_FILE, lambda p: table.to_csv(p, index=False))
