"""A sweep is a list of runs: run them one after another, or in parallel processes sharing the parties.

A comparison (every algorithm of a config), the fault-free reruns of a robustness table and the
collapse study's grid are all lists of :class:`RunJob` — one algorithm, one resolved config, one
sub-run directory — over parties built once (:func:`portfed.experiment.build.build_federation`:
market, universes, fitted private generators).  :func:`run_jobs` runs them:

* ``jobs = 1``: in this process, one after another;
* ``jobs > 1``: in ``jobs`` spawned worker processes (a fork of a process that has run torch can
  deadlock in its thread pool).  Each job receives the built parties (pickled with the task, so
  no generator is fitted twice) and trains its own copy.  Every worker runs with the config's own
  ``torch_threads`` — the same number as a sequential run — so the numbers are identical for any
  ``jobs``; ``jobs × torch_threads`` threads may exceed the cores, which costs time, never
  results.  The default (:func:`default_jobs`) is what the cores allow: ``cpus // torch_threads``.
  The parent shows one progress display with a bar per run, fed by the workers' round callbacks
  through a queue.

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
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from portfed._threads import torch_threads
from portfed.experiment.build import Federation
from portfed.experiment.config import FederatedConfig
from portfed.experiment.federated import AlgorithmRun, run_algorithm
from portfed.validation import check_int


@dataclass(frozen=True)
class RunJob:
    """One run of a sweep: ``algorithm`` under ``config`` into ``out_dir``, labelled ``name``."""

    name: str
    config: FederatedConfig
    algorithm: str
    out_dir: Path


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


def run_jobs(federation: Federation, jobs: Sequence[RunJob], n_jobs: int = 1, *, resume: bool = False,
             progress: bool = True) -> dict[str, AlgorithmRun]:
    """Run every job on copies of ``federation.parties``; results by job name, in the order of ``jobs``.

    Raises:
        ValueError: duplicate job names or ``n_jobs < 1``; whatever a run raises (the first failure).
    """
    n_jobs = check_int(n_jobs, "jobs", minimum=1)
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be distinct, got {names}")
    if n_jobs == 1 or len(jobs) <= 1:
        return {job.name: _run_one(job, federation, resume, progress) for job in jobs}
    context = multiprocessing.get_context("spawn")
    results: dict[str, AlgorithmRun] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with context.Manager() as manager, Progress(*columns, disable=not progress) as bar:
        reports = manager.Queue()
        tasks = {job.name: bar.add_task(job.name, total=job.config.federation.rounds) for job in jobs}
        with ProcessPoolExecutor(min(n_jobs, len(jobs)), mp_context=context) as pool:
            futures: dict[Future[AlgorithmRun], str] = {
                pool.submit(_worker, job, federation, resume, reports): job.name for job in jobs}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(reports, bar, tasks)
                for future in done:
                    results[futures[future]] = future.result()
        _drain(reports, bar, tasks)
    return {name: results[name] for name in names}


def _drain(reports: queue_module.Queue, bar: Progress, tasks: dict[str, int]) -> None:
    while True:
        try:
            name, completed = reports.get_nowait()
        except queue_module.Empty:
            return
        bar.update(tasks[name], completed=completed)
