"""A sweep is a list of independent runs: run them here one after another, in worker processes, or on a cluster.

Every sweep of portfed — the algorithms of a portfolio comparison, the collapse study's cells, the
grid candidates and seeds of a supervised benchmark — is a list of :class:`Task`: a name, the units
of its progress (rounds), a picklable function and its arguments.  :func:`run_tasks` runs them
through an :class:`Executor`, chosen explicitly (one loop, several implementations — as torch.optim's
``foreach`` / ``fused``):

* an int ``n_jobs`` — :class:`LocalExecutor`: ``1``, in this process, one after another; ``> 1``, in
  ``n_jobs`` spawned worker processes (a fork of a process that has run torch can deadlock in its
  thread pool);
* :class:`portfed.ray_executor.RayExecutor`: as Ray tasks on a Ray cluster (``--executor ray``).

Whatever runs them, at most ``2 × workers`` tasks are submitted and unfinished, so a long sweep holds
only the arguments of the runs in flight (a task's arguments may be a callable that builds them in
this process when the task is submitted).

A task runs with its own number of torch intra-op threads, the same in this process, in a worker and
on a cluster node, so a sweep's numbers do not depend on the executor or ``n_jobs`` (more
``n_jobs × threads`` than cores costs time, never results).  One progress display: a bar per task for
up to :data:`BARS_PER_TASK` tasks, else one bar over every task's units (plain lines when the output
is not a terminal, :func:`portfed._progress.make_progress`); workers report through their pool
(:meth:`Pool.reports`).  ``on_done(name, result)`` is called in this process as each task finishes (a
study records its row there, so a stopped sweep keeps what it finished); after a failure no further
task is submitted and the first failure is raised.  A local worker whose parent has died (a sweep
killed by a signal, which runs no clean-up) exits within a second (:func:`_start_worker`) instead of
finishing its run for nobody.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import os
import queue as queue_module
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from portfed._progress import PlainProgress, make_progress
from portfed._threads import torch_threads
from portfed.validation import check_int

#: Up to this many tasks get a progress bar each; more share one bar over all their units.
BARS_PER_TASK = 12

#: ``report(done)``: a task has completed ``done`` of its units (a count, not an increment).
Report = Callable[[int], None]


@dataclass(frozen=True)
class Task:
    """One run of a sweep: ``call(*args, report)`` with ``threads`` torch threads (``None``: as is).

    ``call`` must be a module-level function (workers import it); ``args`` is a tuple, or a callable
    returning it that is called in the submitting process when the task starts (lazily built inputs).
    ``units`` is the progress total that ``report`` counts towards."""

    name: str
    units: int
    call: Callable[..., Any]
    args: tuple | Callable[[], tuple] = ()
    threads: int | None = None

    def arguments(self) -> tuple:
        """The arguments, built now if they are a callable."""
        return self.args() if callable(self.args) else self.args


class Pool(Protocol):
    """Workers that run a sweep's tasks somewhere: submitted, awaited, their progress read back here."""

    #: How many tasks run at once (the sweep keeps ``2 × workers`` submitted).
    workers: int

    def submit(self, task: Task, args: tuple) -> Hashable:
        """Start ``task`` with its built ``args``; a handle to wait on."""

    def wait(self, handles: Collection[Hashable], timeout: float) -> Collection[Hashable]:
        """The handles of ``handles`` whose task has finished (succeeded or failed), after at most ``timeout`` s."""

    def result(self, handle: Hashable) -> Any:
        """A finished task's result; raises what the task raised."""

    def reports(self) -> list[tuple[str, int]]:
        """The progress reported since the last call: ``(task name, units done)``, in report order."""


class Executor(Protocol):
    """Where a sweep's tasks run (module docstring)."""

    def in_process(self, count: int) -> bool:
        """Whether a sweep of ``count`` tasks runs here, one after another (each run may show its own bars)."""

    def pool(self, tasks: Sequence[Task]) -> AbstractContextManager[Pool]:
        """Workers for ``tasks``, released (their unfinished tasks stopped) when the block exits."""


def _execute(call: Callable[..., Any], args: tuple, threads: int | None, report: Report) -> Any:
    with torch_threads(threads):
        return call(*args, report)


#: A worker process's end of the sweep's progress queue (set by :func:`_start_worker`).
_REPORTS: multiprocessing.queues.Queue | None = None


def _start_worker(parent: int, reports: multiprocessing.queues.Queue) -> None:
    """A worker's initializer: keep the progress queue (a queue reaches a worker by inheritance, at its
    start, not as a task's argument), and end the worker once its parent process ``parent`` is gone —
    the worker is then re-parented, so ``os.getppid()`` changes — from a daemon thread."""
    global _REPORTS
    _REPORTS = reports

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="portfed-sweep-parent-watch", daemon=True).start()


def _worker(call: Callable[..., Any], args: tuple, threads: int | None, name: str) -> Any:
    reports = _REPORTS
    if reports is None:
        raise RuntimeError("a sweep worker must be started by run_tasks (its initializer _start_worker)")
    return _execute(call, args, threads, lambda done: reports.put((name, done)))


@dataclass
class _ProcessPool:
    """A :class:`Pool` of spawned processes on this machine, reporting through a multiprocessing queue."""

    pool: ProcessPoolExecutor
    queue: multiprocessing.queues.Queue
    workers: int

    def submit(self, task: Task, args: tuple) -> Future[Any]:
        return self.pool.submit(_worker, task.call, args, task.threads, task.name)

    def wait(self, handles: Collection[Hashable], timeout: float) -> Collection[Hashable]:
        return wait(handles, timeout=timeout, return_when=FIRST_COMPLETED).done  # type: ignore[arg-type]

    def result(self, handle: Hashable) -> Any:
        return handle.result()  # type: ignore[attr-defined]

    def reports(self) -> list[tuple[str, int]]:
        out = []
        while True:
            try:
                out.append(self.queue.get_nowait())
            except queue_module.Empty:
                return out


@dataclass(frozen=True)
class LocalExecutor:
    """This machine: ``jobs`` = 1 runs the tasks in this process, more in ``jobs`` spawned processes."""

    jobs: int = 1

    def __post_init__(self) -> None:
        check_int(self.jobs, "jobs", minimum=1)

    def in_process(self, count: int) -> bool:
        return self.jobs == 1 or count <= 1

    @contextmanager
    def pool(self, tasks: Sequence[Task]) -> Iterator[_ProcessPool]:
        context, workers = multiprocessing.get_context("spawn"), min(self.jobs, len(tasks))
        reports = context.Queue()
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                 initargs=(os.getpid(), reports)) as pool:
            yield _ProcessPool(pool, reports, workers)


def as_executor(n_jobs: int | Executor) -> Executor:
    """``n_jobs`` as an executor: an int is a :class:`LocalExecutor` of that many processes."""
    return LocalExecutor(n_jobs) if isinstance(n_jobs, int) else n_jobs


class _Display:
    """The sweep's progress: a bar per task, or one bar over every task's units (module docstring)."""

    def __init__(self, bar: Progress | PlainProgress, tasks: Sequence[Task]) -> None:
        self.bar, self.done = bar, {task.name: 0 for task in tasks}
        if len(tasks) <= BARS_PER_TASK:
            self.bars = {task.name: bar.add_task(task.name, total=task.units) for task in tasks}
        else:
            shared = bar.add_task(f"{len(tasks)} runs", total=sum(task.units for task in tasks))
            self.bars = {task.name: shared for task in tasks}

    def update(self, name: str, done: int) -> None:
        self.bar.advance(self.bars[name], done - self.done[name])
        self.done[name] = done

    def drain(self, pool: Pool) -> None:
        for name, done in pool.reports():
            self.update(name, done)


def _run_in_pool(executor: Executor, tasks: Sequence[Task], display: _Display,
                 done: Callable[[str, Any], None]) -> dict[str, Any]:
    """The tasks through ``executor``'s pool, at most ``2 × workers`` submitted and unfinished."""
    results: dict[str, Any] = {}
    queued = iter(tasks)
    with executor.pool(tasks) as pool:
        running: dict[Hashable, str] = {}

        def submit_next() -> None:
            task = next(queued, None)
            if task is not None:
                running[pool.submit(task, task.arguments())] = task.name

        for _ in range(2 * pool.workers):
            submit_next()
        while running:
            finished = pool.wait(list(running), 0.2)
            display.drain(pool)
            for handle in finished:
                name = running.pop(handle)
                results[name] = pool.result(handle)
                done(name, results[name])
                submit_next()
        display.drain(pool)
    return results


def run_tasks(tasks: Sequence[Task], n_jobs: int | Executor = 1, *, progress: bool = True,
              on_done: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Run every task through ``n_jobs`` (an executor, or an int: that many local processes); their
    results by name, in the order of ``tasks``.

    Raises:
        ValueError: duplicate task names or ``n_jobs < 1``; whatever a task raises (the first failure).
    """
    executor = as_executor(n_jobs)
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names must be distinct, got {names}")
    done = on_done or (lambda name, result: None)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with make_progress(*columns, disable=not progress) as bar:
        display = _Display(bar, tasks)
        if not tasks:
            return {}
        if executor.in_process(len(tasks)):
            results: dict[str, Any] = {}
            for task in tasks:
                results[task.name] = _execute(task.call, task.arguments(), task.threads,
                                              lambda n, name=task.name: display.update(name, n))
                done(task.name, results[task.name])
            return results
        results = _run_in_pool(executor, tasks, display, done)
    return {name: results[name] for name in names}
