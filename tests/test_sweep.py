"""``portfed.sweep``: a list of tasks run here or in worker processes, with the same results."""

from __future__ import annotations

import pytest
import torch

from portfed.sweep import Task, run_tasks


def square_with_threads(x: int, report) -> tuple[int, int]:
    """A task: reports its two units, returns x² and the torch threads it ran with."""
    report(1)
    report(2)
    return x * x, torch.get_num_threads()


def fail_on(x: int, bad: int, report) -> int:
    if x == bad:
        raise RuntimeError(f"task {x} failed")
    return x


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_results_come_back_by_name_in_order_with_the_tasks_threads(n_jobs: int) -> None:
    built: list[int] = []

    def lazy(x: int):
        def build() -> tuple:
            built.append(x)
            return (x,)
        return build

    tasks = [Task(f"t{x}", 2, square_with_threads, args=lazy(x), threads=1 + x % 2) for x in range(5)]
    finished: list[str] = []
    results = run_tasks(tasks, n_jobs, progress=False, on_done=lambda name, _: finished.append(name))
    assert list(results) == [f"t{x}" for x in range(5)]
    assert results == {f"t{x}": (x * x, 1 + x % 2) for x in range(5)}
    assert sorted(built) == list(range(5)) and sorted(finished) == sorted(results)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_the_first_failure_is_raised(n_jobs: int) -> None:
    tasks = [Task(f"t{x}", 1, fail_on, args=(x, 3)) for x in range(6)]
    with pytest.raises(RuntimeError, match="task 3 failed"):
        run_tasks(tasks, n_jobs, progress=False)


def test_bad_sweeps_are_refused() -> None:
    with pytest.raises(ValueError, match="task names must be distinct"):
        run_tasks([Task("a", 1, fail_on, args=(0, 1)), Task("a", 1, fail_on, args=(1, 2))], progress=False)
    with pytest.raises(ValueError, match="jobs"):
        run_tasks([], 0, progress=False)
