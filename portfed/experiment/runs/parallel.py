"""A portfolio sweep — a comparison, the fault-free reruns of a robustness table, the collapse study's
grid — as a list of :class:`RunJob`, run by :func:`portfed.sweep.run_tasks`.

A :class:`RunJob` is one algorithm, one resolved config, one sub-run directory, and the parties it
trains: the ``federation`` given to :func:`run_jobs` (a comparison: built once,
:func:`portfed.experiment.party.build.build_federation`) or the job's own (a study: one federation per cell
and seed, built when the job is submitted), and optionally the federation state its rounds start from
(:func:`portfed.experiment.runs.federated.train_parties`; default: the initial models).  In a worker
process a job receives its built parties (pickled with the task, so no generator is fitted twice)
and trains its own copy.  Every job runs with
its config's ``torch_threads`` in any process, so the numbers are identical for any ``jobs``
(:mod:`portfed.sweep`), on this machine or on a Ray cluster (:mod:`portfed.ray_executor`); the default (:func:`default_jobs`) is what the cores allow:
``cpus // torch_threads``.  Run one after another, up to :data:`portfed.sweep.BARS_PER_TASK` jobs show
their own bars (rounds, backtests); otherwise one display over the jobs' rounds.

Resuming is per sub-run (its own checkpoint), so a killed parallel sweep resumes exactly with
``resume=True``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from portfed._threads import torch_threads
from portfed.experiment.config import FederatedConfig
from portfed.experiment.party import Federation
from portfed.experiment.runs.federated import AlgorithmRun, run_algorithm
from portfed.federation import FederationState
from portfed.sweep import BARS_PER_TASK, Executor, Report, Task, as_executor, run_tasks


@dataclass(frozen=True)
class RunJob:
    """One run of a sweep: ``algorithm`` under ``config`` into ``out_dir``, labelled ``name``, training
    copies of ``federation``'s parties (``None``: the federation given to :func:`run_jobs`; a callable:
    built when the job starts, so a long sweep holds only the federations of the runs in flight) from
    ``start`` (``None``: the initial models)."""

    name: str
    config: FederatedConfig
    algorithm: str
    out_dir: Path
    federation: Federation | Callable[[], Federation] | None = None
    start: FederationState | None = None

    def parties(self, default: Federation) -> Federation:
        """The federation this job trains copies of: its own (a callable is called now), else ``default``."""
        source = default if self.federation is None else self.federation
        return source() if callable(source) else source


def default_jobs(config: FederatedConfig) -> int:
    """What the machine's cores allow: ``max(1, cpus // torch_threads)``."""
    return max(1, (os.cpu_count() or 1) // config.threads())


def _train(job: RunJob, federation: Federation, resume: bool, report: Report | None = None,
           progress: bool = False) -> AlgorithmRun:
    """A job's run on a copy of ``federation``'s parties; ``report(n)`` counts its finished rounds (the bar
    of a :class:`~portfed.sweep.Task`, which calls it so), ``progress`` shows the run's own bars."""
    return run_algorithm(job.config, job.algorithm, federation, job.out_dir,
                         parties=copy.deepcopy(federation.parties), resume=resume, progress=progress,
                         on_round=None if report is None else lambda t: report(t + 1), start=job.start)


def run_jobs(federation: Federation | None, jobs: Sequence[RunJob], n_jobs: int | Executor = 1, *, resume: bool = False,
             progress: bool = True, on_done: Callable[[str, AlgorithmRun], None] | None = None
             ) -> dict[str, AlgorithmRun]:
    """Run every job on copies of its federation's parties through ``n_jobs`` (an int: that many local
    processes; an :class:`~portfed.sweep.Executor`, e.g. a Ray cluster's); results by job name, in the
    order of ``jobs``.

    Raises:
        ValueError: duplicate job names, a job without a federation or ``n_jobs < 1``; whatever a run
            raises (the first failure).
    """
    executor = as_executor(n_jobs)
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be distinct, got {names}")
    orphans = [job.name for job in jobs if job.federation is None and federation is None]
    if orphans:
        raise ValueError(f"job {orphans[0]!r} has no federation, and none was given to run_jobs")
    if executor.in_process(len(jobs)) and len(jobs) <= BARS_PER_TASK:
        results: dict[str, AlgorithmRun] = {}
        for job in jobs:  # each run shows its own bars (rounds, backtests)
            with torch_threads(job.config.threads()):
                results[job.name] = _train(job, job.parties(federation), resume, progress=progress)
            if on_done is not None:
                on_done(job.name, results[job.name])
        return results
    tasks = [Task(job.name, job.config.federation.rounds, _train, threads=job.config.threads(),
                  args=lambda job=job: (replace(job, federation=None), job.parties(federation), resume))
             for job in jobs]
    return run_tasks(tasks, executor, progress=progress, on_done=on_done)
