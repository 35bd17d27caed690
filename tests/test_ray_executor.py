"""``--executor ray``: a sweep through a Ray head on 127.0.0.1 equals the local executor's, and leaves no process.

The head is started by ``ray start --head`` in a session of its own (``start_new_session``): every process
Ray starts for it — GCS, raylet, agents, workers — belongs to that session, so teardown stops exactly
those, by their ids, and checks that none is left.  Marked ``extended``: CI runs them after
``make test`` (``make test-extended`` installs the ``cluster`` extra first); without Ray they are skipped
with the install command, never passed.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from portfed._progress import PlainProgress
from portfed.cli.main import app
from portfed.ray_executor import ClusterError, RayExecutor
from portfed.sweep import Task, run_tasks

ROOT = Path(__file__).resolve().parents[1]
ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'portfed[cluster]'")
psutil = pytest.importorskip("psutil", reason="the head's processes are found with psutil: pip install psutil")

pytestmark = [pytest.mark.timeout(300), pytest.mark.extended]  # CI's second stage (make test-extended)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_processes(sid: int) -> list:
    """The live processes of session ``sid`` (what ``ray start`` started: daemons and workers)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return found


def stop_session(sid: int) -> list[int]:
    """Stop every process of session ``sid`` by its id (SIGTERM, then SIGKILL); the ids still alive."""
    processes = session_processes(sid)
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=3)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)
    time.sleep(0.5)  # a worker forked during the stop shows up now
    return [p.pid for p in session_processes(sid)]


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    """A Ray head on 127.0.0.1 with 2 CPUs, its workers importing this checkout; its address."""
    port, temp = free_port(), tempfile.mkdtemp(prefix="pfray")  # short: Ray's socket paths must fit 107 bytes
    # the workers import this checkout and this file (its task functions): as if installed on the node
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    command = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1",
               "--port", str(port), "--ray-client-server-port", str(free_port()), "--num-cpus", "2",
               "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", temp]
    starter = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    children = set(psutil.Process().children(recursive=True)) - {psutil.Process(starter.pid)}
    try:
        output, _ = starter.communicate(timeout=120)
        assert starter.returncode == 0, output
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        left = stop_session(starter.pid)
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"processes of the Ray head still running: {left}"
        extra = set(psutil.Process().children(recursive=True)) - children
        assert not [p for p in extra if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], extra


@pytest.fixture
def connected(head: str) -> str:
    """The head, this process connected to it (``ray.init``) and staying connected after the test: the
    sweeps use that connection and Ray reuses its workers (a worker's start, importing torch, is the slow
    part); the head's teardown disconnects."""
    if not ray.is_initialized():
        ray.init(address=head, logging_level="WARNING")
    return head


def square_with_threads(x: int, report) -> tuple[int, int, str, str | None]:
    """A task: reports its two units, returns x², its torch threads, its working directory and $PORTFED_PROBE."""
    import torch

    report(1)
    report(2)
    return x * x, torch.get_num_threads(), os.getcwd(), os.environ.get("PORTFED_PROBE")


def fail_on(x: int, bad: int, report) -> int:
    if x == bad:
        raise KeyError(f"task {x} failed")
    return x


def test_tasks_come_back_in_order_with_their_threads_progress_directory_and_environment(head: str,
                                                                                        monkeypatch) -> None:
    """As the commands run a sweep: the executor connects (setting the driver's PORTFED_* variables on the
    workers) and disconnects."""
    ray.shutdown()
    monkeypatch.setenv("PORTFED_PROBE", "sent by the driver")
    stream = io.StringIO()
    monkeypatch.setattr("portfed.sweep.make_progress", lambda *columns, disable: PlainProgress(stream))
    tasks = [Task(f"t{x}", 2, square_with_threads, args=(x,), threads=1 + x % 2) for x in range(5)]
    finished: list[str] = []
    results = run_tasks(tasks, RayExecutor(head), on_done=lambda name, _: finished.append(name))
    assert not ray.is_initialized()
    assert list(results) == [f"t{x}" for x in range(5)]
    assert results == {f"t{x}": (x * x, 1 + x % 2, os.getcwd(), "sent by the driver") for x in range(5)}
    assert sorted(finished) == sorted(results)
    for x in range(5):  # every task's last report reached the display
        assert f"t{x}: 2/2 (100 %)" in stream.getvalue()


def test_the_first_failure_is_raised_as_the_tasks_own_exception(connected: str) -> None:
    with pytest.raises(KeyError, match="task 3 failed"):
        run_tasks([Task(f"t{x}", 1, fail_on, args=(x, 3)) for x in range(6)], RayExecutor(connected, 2), progress=False)


def crash(report) -> None:
    os._exit(1)  # the worker process dies, as on a lost node


def test_a_lost_worker_is_one_line_that_says_how_to_continue(connected: str) -> None:
    with pytest.raises(ClusterError, match=r"a run was lost on the Ray cluster \(.*\); .* continue with --resume"):
        run_tasks([Task("t", 1, crash)], RayExecutor(connected), progress=False)


def test_a_node_with_other_code_is_refused(connected: str, monkeypatch) -> None:
    monkeypatch.setattr("portfed.ray_executor.code_digest", lambda: "the driver's sources")
    with pytest.raises(ClusterError, match="runs other code than the driver"):
        run_tasks([Task("t", 1, fail_on, args=(0, 1))], RayExecutor(connected), progress=False)


def test_a_run_needing_more_cpus_than_any_node_is_refused(connected: str) -> None:
    with pytest.raises(ClusterError, match="needs 3 CPUs .* has 2"):
        run_tasks([Task("t", 1, fail_on, args=(0, 1), threads=3)], RayExecutor(connected), progress=False)


def files(out: Path, npz_values: bool = False) -> dict[str, object]:
    """Every result file of a comparison directory (tables, per-round CSVs, models), by relative path: its
    bytes, or for a ``.npz`` with ``npz_values`` its arrays' bits (dtype, shape, C-order bytes), whatever
    their memory layout (a resumed run stores its party models in C order, a fresh one in Fortran order)."""
    def content(path: Path) -> object:
        if npz_values and path.suffix == ".npz":
            with np.load(path) as arrays:
                return {k: (a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()) for k, a in arrays.items()}
        return path.read_bytes()

    return {p.relative_to(out).as_posix(): content(p) for p in sorted(out.rglob("*"))
            if p.suffix in {".csv", ".md", ".npz"} and "fit_cache" not in p.parts}


TINY_COMPARE = ["compare", str(ROOT / "configs" / "tiny.yaml"), "-a", "local,fedavg", "-q",
                "--set", "federation.rounds=2", "--set", "diagnostics.interpolation_rounds=[1]"]


@pytest.fixture(scope="module")
def compared(head: str, tmp_path_factory) -> Path:
    """A tiny comparison run twice, through the CLI as a user runs it: ``local`` by the local executor,
    ``ray`` through the head (the command connects, runs, disconnects)."""
    ray.shutdown()
    out = tmp_path_factory.mktemp("compared")
    local = CliRunner().invoke(app, [*TINY_COMPARE, "--out", str(out / "local"), "--jobs", "1"])
    assert local.exit_code == 0, local.output
    on_ray = CliRunner().invoke(app, [*TINY_COMPARE, "--out", str(out / "ray"), "--executor", "ray",
                                      "--address", head])
    assert on_ray.exit_code == 0, on_ray.output
    assert not ray.is_initialized()
    return out


def test_a_comparison_through_the_head_equals_the_local_executors(compared: Path) -> None:
    expected, got = files(compared / "local"), files(compared / "ray")
    assert "table1.csv" in expected and "fedavg/weights.csv" in expected and "fedavg/models.npz" in expected
    assert got.keys() == expected.keys()
    assert [name for name in expected if got[name] != expected[name]] == []


@pytest.mark.slow
def test_the_local_executors_comparison_resumes_on_the_cluster(compared: Path, head: str) -> None:
    """Every run found finished in the shared directory: only the evaluation again, the same results."""
    resumed = CliRunner().invoke(app, [*TINY_COMPARE, "--out", str(compared / "local"), "--resume",
                                       "--executor", "ray", "--address", head])
    assert resumed.exit_code == 0, resumed.output
    before, again = files(compared / "ray", npz_values=True), files(compared / "local", npz_values=True)
    assert [name for name in before if again[name] != before[name]] == []


def test_without_ray_the_error_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ClusterError, match=r"pip install 'portfed\[cluster\]'"):
        run_tasks([Task("t", 1, fail_on, args=(0, 1))], RayExecutor("127.0.0.1:1"), progress=False)


def test_an_address_without_a_head_is_one_line() -> None:
    ray.shutdown()  # connected, the sweep would use that connection
    with pytest.raises(ClusterError, match=r"--address 127\.0\.0\.1:\d+: no Ray head answers there"):
        run_tasks([Task("t", 1, fail_on, args=(0, 1))], RayExecutor(f"127.0.0.1:{free_port()}"), progress=False)


def test_a_node_without_portfed_is_named_in_one_line() -> None:
    """What Ray reports when a worker cannot import portfed (its actor's or task's import), as one line."""
    from portfed.ray_executor import _cluster_error

    error = _cluster_error(RuntimeError("The actor died …\nModuleNotFoundError: No module named 'portfed.ray_executor'"))
    assert str(error) == ("a Ray worker cannot import portfed.ray_executor: install the driver's portfed on every node "
                          "(docs/cluster.md)")
    lost = _cluster_error(RuntimeError("The worker died unexpectedly\nmore"))
    assert str(lost).startswith("a run was lost on the Ray cluster (RuntimeError: The worker died unexpectedly)")
