"""Progress that shows in a terminal and in a log file.

rich draws a live bar only on a terminal; when the output is redirected (``make run > log``, CI, a
batch job) it prints each bar once, when its phase ends, so a long phase leaves a silent log.
:func:`make_progress` returns rich's :class:`~rich.progress.Progress` on a terminal (and in Jupyter) and
a :class:`PlainProgress` otherwise: the same ``add_task`` / ``advance`` / ``update`` calls, printed as
plain lines — ``description: done/total (pct %), elapsed m:ss, eta m:ss`` — when a task starts, each time
it crosses another :data:`STEP_PERCENT` percent, at most :data:`EVERY_SECONDS` seconds after the last
line of a task that moves, and when it completes.  :func:`progress_bar` is the one bar of every long loop
of the experiment (a description, done/total, elapsed and eta).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

#: A task prints a line each time it crosses another multiple of this percentage of its total.
STEP_PERCENT = 10
#: … and at least this often while it moves.
EVERY_SECONDS = 30.0


def _clock(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float
    started: float
    printed_at: float
    printed_step: int = -1
    finished: bool = field(default=False)


class PlainProgress:
    """rich ``Progress``'s task calls, printed as plain lines on ``stream`` (module docstring).

    ``clock``: the time source (seconds; tests pass a fake one)."""

    def __init__(self, stream: TextIO | None = None, *, disable: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.disable = disable
        self.clock = clock
        self.tasks: dict[int, _Task] = {}

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = 100.0, completed: float = 0,
                 **fields: Any) -> int:
        now = self.clock()
        task_id = len(self.tasks)
        self.tasks[task_id] = _Task(description, total, completed, now, now)
        self._print(self.tasks[task_id], now)
        return task_id

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def update(self, task_id: int, *, description: str | None = None, advance: float | None = None,
               completed: float | None = None, total: float | None = None, **fields: Any) -> None:
        task = self.tasks[task_id]
        if description is not None:
            task.description = description
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = completed
        if advance:
            task.completed += advance
        now = self.clock()
        if self._due(task, now):
            self._print(task, now)

    def _step(self, task: _Task) -> int:
        if not task.total:
            return 0
        return int(math.floor(100.0 * task.completed / task.total / STEP_PERCENT))

    def _due(self, task: _Task, now: float) -> bool:
        if task.finished:
            return False
        done = task.total is not None and task.completed >= task.total
        return done or self._step(task) > task.printed_step or now - task.printed_at >= EVERY_SECONDS

    def _print(self, task: _Task, now: float) -> None:
        task.printed_at, task.printed_step = now, self._step(task)
        task.finished = task.total is not None and task.completed >= task.total
        if self.disable:
            return
        elapsed = now - task.started
        if task.total:
            line = f"{task.description}: {task.completed:g}/{task.total:g} ({100.0 * task.completed / task.total:.0f} %)"
        else:
            line = f"{task.description}: {task.completed:g}"
        line += f", elapsed {_clock(elapsed)}"
        if task.total and 0 < task.completed < task.total:
            line += f", eta {_clock(elapsed * (task.total - task.completed) / task.completed)}"
        print(line, file=self.stream, flush=True)


def interactive(console: Console | None = None) -> bool:
    """Whether rich can draw a live bar: the console is a terminal or a Jupyter notebook."""
    console = Console() if console is None else console
    return console.is_terminal or console.is_jupyter


def make_progress(*columns: str | ProgressColumn, disable: bool = False, console: Console | None = None,
                  stream: TextIO | None = None, **kwargs: Any) -> Progress | PlainProgress:
    """rich's ``Progress(*columns, disable=…, console=…, **kwargs)`` on a terminal, else a
    :class:`PlainProgress` printing on ``stream`` (default: the console's file, standard output)."""
    if console is None:
        console = Console()
    if interactive(console):
        return Progress(*columns, disable=disable, console=console, **kwargs)
    return PlainProgress(console.file if stream is None else stream, disable=disable)


@contextlib.contextmanager
def progress_bar(description: str, total: int, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; shows a rich bar (plain progress lines when the output is not a terminal) when
    ``enabled``, and does nothing otherwise."""
    if not enabled:
        yield lambda n=1: None
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with make_progress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
