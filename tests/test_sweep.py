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


SLOW_SWEEP = '''
import time

from portfed.sweep import Task, run_tasks


def slow(seconds, report):
    time.sleep(seconds)


if __name__ == "__main__":
    run_tasks([Task(name=f"t{i}", units=1, call=slow, args=(300,)) for i in range(2)], n_jobs=2, progress=False)
'''


@pytest.mark.extended  # CI's second stage (make test-extended): one of make test's slowest, kept out of its 10 minutes
@pytest.mark.timeout(120)
def test_workers_of_a_killed_sweep_stop_instead_of_finishing_their_runs(tmp_path) -> None:
    """SIGKILL runs no clean-up in the sweep's process; its workers must notice and exit on their own."""
    import os
    import signal
    import subprocess
    import sys
    import time

    psutil = pytest.importorskip("psutil")
    script = tmp_path / "slow_sweep.py"
    script.write_text(SLOW_SWEEP)
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    workers: list = []  # every process the sweep started: its two pool workers
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.5)
            workers = [p for p in psutil.Process(parent.pid).children(recursive=True)
                       if "resource_tracker" not in " ".join(p.cmdline())]
        assert len(workers) == 2, "the sweep did not start its two workers"
        time.sleep(2.0)  # the workers are inside their 300-second tasks
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        gone, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"workers still running after their parent was killed: {[p.pid for p in alive]}"
    finally:
        for process in [*workers]:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        if parent.poll() is None:
            parent.kill()
