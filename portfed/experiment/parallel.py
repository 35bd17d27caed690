"""A sweep is a list of runs: run them one after another, or in parallel processes sharing the parties.

A comparison (every algorithm of a config), the fault-free reruns of a robustness table and the
collapse study's grid are all lists of :class:`RunJob` — one algorithm, one resolved config, one
sub-run directory, and the parties it trains: the ``federation`` given to :func:`run_jobs` (a
comparison: built once, :func:`portfed.experiment.build.build_federation`) or the job's own (a
study: one federation per cell and seed).  :func:`run_jobs` runs them:

* ``jobs = 1``: in this process, one after another;
* ``jobs > 1``: in ``jobs`` spawned worker processes (a fork of a process that has run torch can
  deadlock in its thread pool).  Each job receives its built parties (pickled with the task, so
  no generator is fitted twice) and trains its own copy.  Every worker runs with the config's own
  ``torch_threads`` — the same number as a sequential run — so the numbers are identical for any
  ``jobs``; ``jobs × torch_threads`` threads may exceed the cores, which costs time, never
  results.  The default (:func:`default_jobs`) is what the cores allow: ``cpus // torch_threads``.

One progress display: a bar per run for up to :data:`BARS_PER_RUN` runs (in parallel, fed by the
workers' round callbacks through a queue), else one bar over every run's rounds.  ``on_done(name,
run)`` is called in this process as each run finishes (a study records its row there, so a stopped
sweep keeps what it finished).

Resuming is per sub-run (its own checkpoint), so a killed parallel sweep resumes exactly with
``resume=True``.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import queue as queue_module
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from portfed._threads import torch_threads
from portfed.experiment.build import Federation
from portfed.experiment.config import FederatedConfig
from portfed.experiment.federated import AlgorithmRun, run_algorithm
from portfed.validation import check_int

#: Up to this many runs get a progress bar each; more share one bar over all their rounds.
BARS_PER_RUN = 12


@dataclass(frozen=True)
class RunJob:
    """One run of a sweep: ``algorithm`` under ``config`` into ``out_dir``, labelled ``name``, training
    copies of ``federation``'s parties (``None``: the federation given to :func:`run_jobs`; a callable:
    built when the job starts, so a long sweep holds only the federations of the runs in flight)."""

    name: str
    config: FederatedConfig
    algorithm: str
    out_dir: Path
    federation: Federation | Callable[[], Federation] | None = None

    def parties(self, default: Federation) -> Federation:
        """The federation this job trains copies of: its own (a callable is called now), else ``default``."""
        source = default if self.federation is None else self.federation
        return source() if callable(source) else source


def default_jobs(config: FederatedConfig) -> int:
    """What the machine's cores allow: ``max(1, cpus // torch_threads)``."""
    return max(1, (os.cpu_count() or 1) // config.threads())


def _run_one(job: RunJob, federation: Federation, resume: bool, progress: bool,
             on_round: Callable[[int], None] | None = None) -> AlgorithmRun:
    with torch_threads(job.config.threads()):
        return run_algorithm(job.config, job.algorithm, federation, job.out_dir,
                             parties=copy.deepcopy(federation.parties), resume=resume, progress=progress,
                             on_round=on_round)


def _worker(job: RunJob, federation: Federation, resume: bool, reports: queue_module.Queue) -> AlgorithmRun:
    return _run_one(job, federation, resume, False, lambda t: reports.put((job.name, t + 1)))


class _Display:
    """The sweep's progress: a bar per run, or one bar over every run's rounds (module docstring)."""

    def __init__(self, bar: Progress, jobs: Sequence[RunJob]) -> None:
        self.bar, self.done = bar, {job.name: 0 for job in jobs}
        if len(jobs) <= BARS_PER_RUN:
            self.tasks = {job.name: bar.add_task(job.name, total=job.config.federation.rounds) for job in jobs}
        else:
            total = sum(job.config.federation.rounds for job in jobs)
            shared = bar.add_task(f"{len(jobs)} runs", total=total)
            self.tasks = {job.name: shared for job in jobs}

    def update(self, name: str, completed: int) -> None:
        self.bar.advance(self.tasks[name], completed - self.done[name])
        self.done[name] = completed


def run_jobs(federation: Federation | None, jobs: Sequence[RunJob], n_jobs: int = 1, *, resume: bool = False,
             progress: bool = True, on_done: Callable[[str, AlgorithmRun], None] | None = None
             ) -> dict[str, AlgorithmRun]:
    """Run every job on copies of its federation's parties; results by job name, in the order of ``jobs``.

    Raises:
        ValueError: duplicate job names, a job without a federation or ``n_jobs < 1``; whatever a run
            raises (the first failure).
    """
    n_jobs = check_int(n_jobs, "jobs", minimum=1)
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be distinct, got {names}")
    orphans = [job.name for job in jobs if job.federation is None and federation is None]
    if orphans:
        raise ValueError(f"job {orphans[0]!r} has no federation, and none was given to run_jobs")
    done = on_done or (lambda name, run: None)
    results: dict[str, AlgorithmRun] = {}
    sequential = n_jobs == 1 or len(jobs) <= 1
    if sequential and len(jobs) <= BARS_PER_RUN:  # each run shows its own bars (rounds, backtests)
        for job in jobs:
            results[job.name] = _run_one(job, job.parties(federation), resume, progress)
            done(job.name, results[job.name])
        return results
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar:
        display = _Display(bar, jobs)
        if sequential:
            for job in jobs:
                results[job.name] = _run_one(job, job.parties(federation), resume, False,
                                             lambda t, name=job.name: display.update(name, t + 1))
                done(job.name, results[job.name])
            return results
        context, workers = multiprocessing.get_context("spawn"), min(n_jobs, len(jobs))
        with context.Manager() as manager, ProcessPoolExecutor(workers, mp_context=context) as pool:
            reports, queued = manager.Queue(), iter(jobs)
            futures: dict[Future[AlgorithmRun], str] = {}

            def submit_next() -> None:  # at most 2 × workers jobs submitted and not finished
                job = next(queued, None)
                if job is not None:
                    parties = job.parties(federation)  # the worker gets the built parties, not their source
                    futures[pool.submit(_worker, replace(job, federation=None), parties, resume, reports)] = job.name

            for _ in range(2 * workers):
                submit_next()
            while futures:
                finished, _ = wait(futures, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(reports, display)
                for future in finished:
                    name = futures.pop(future)
                    results[name] = future.result()
                    done(name, results[name])
                    submit_next()
            _drain(reports, display)
    return {name: results[name] for name in names}


def _drain(reports: queue_module.Queue, display: _Display) -> None:
    while True:
        try:
            name, completed = reports.get_nowait()
        except queue_module.Empty:
            return
        display.update(name, completed)
