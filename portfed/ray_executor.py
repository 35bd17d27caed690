"""Sweeps on a Ray cluster: :class:`RayExecutor`, the :class:`portfed.sweep.Executor` of ``--executor ray``.

The same loop as on one machine (:func:`portfed.sweep.run_tasks`: the display, the ``2 × workers``
submit window, ``on_done`` in this process, the first failure raised); only where a task runs
changes.  Each task is a Ray task asking for ``threads`` CPUs (its torch threads, so Ray packs a node
as the local pool packs cores) that

* checks that its node runs the driver's code — the same portfed sources (Python and C) and the same
  torch and numpy versions, :func:`code_digest` — so a stale install on one node cannot change the
  numbers unnoticed;
* runs in the driver's working directory, so the run directories it writes (``--out``, relative or
  absolute) are the driver's: the directory must exist on every node at the same path (a shared file
  system), else the task fails with one line naming the node and the path;
* reports its progress to a small actor that the driver reads every 0.2 s (at most every
  :data:`REPORT_EVERY` s per task, the last count always).

Ray is imported only here, when a sweep starts (``pip install 'portfed[cluster]'``).  Tasks are not
retried by Ray (``max_retries=0``): a lost node fails the sweep, whose finished runs are kept; run
the same command with ``--resume`` to continue from every run's checkpoint.  The driver's
``PORTFED_*`` environment variables are set on the workers.  See ``docs/cluster.md``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import portfed
from portfed.sweep import Task, _execute

#: A running task sends its progress at most this often (seconds); its last count is always sent.
REPORT_EVERY = 0.25

INSTALL = "pip install 'portfed[cluster]'"


class ClusterError(RuntimeError):
    """The cluster cannot run the sweep: Ray missing, no head at the address, a node without the working
    directory or with other code; one line that says what to fix."""


@functools.cache
def code_digest() -> str:
    """sha256 of every portfed source file (``*.py``, ``*.c``, ``*.h``, by relative path) and the Python,
    torch and numpy versions: what a run's numbers depend on besides its config."""
    import numpy
    import torch

    root = Path(portfed.__file__).parent
    digest = hashlib.sha256(f"{sys.version_info[:2]} torch {torch.__version__} numpy {numpy.__version__}".encode())
    for path in sorted(p for p in root.rglob("*") if p.suffix in {".py", ".c", ".h"}):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class Progress:
    """The actor the tasks report to: ``(task name, units done)`` kept until the driver takes them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, int]] = []

    def report(self, name: str, done: int) -> None:
        self.items.append((name, done))

    def take(self) -> list[tuple[str, int]]:
        items, self.items = self.items, []
        return items


def _check_node(directory: str, digest: str) -> None:
    node = socket.gethostname()
    if not os.path.isdir(directory):
        raise ClusterError(f"node {node} has no directory {directory} (the sweep's working directory): run the "
                           "sweep from a directory every node shares at the same path (docs/cluster.md)")
    if code_digest() != digest:
        raise ClusterError(f"node {node} runs other code than the driver (portfed at {Path(portfed.__file__).parent}, "
                           "or other torch / numpy / Python versions): install the driver's portfed and "
                           "dependencies on every node (docs/cluster.md)")


def run_task(call: Callable[..., Any], args: tuple, threads: int | None, name: str, progress: Any,
             directory: str, digest: str) -> Any:
    """A sweep task on a Ray worker: the node checks (module docstring), then ``call`` in ``directory``,
    reporting to the ``progress`` actor (throttled; the last count synchronously, so it is in before the
    result)."""
    _check_node(directory, digest)
    os.chdir(directory)
    sent, pending = [0.0], [None]

    def report(done: int) -> None:
        now = time.monotonic()
        if now - sent[0] >= REPORT_EVERY:
            progress.report.remote(name, done)
            sent[0], pending[0] = now, None
        else:
            pending[0] = done

    result = _execute(call, args, threads, report)
    if pending[0] is not None:
        import ray

        ray.get(progress.report.remote(name, pending[0]))
    return result


def _cluster_error(exc: Exception) -> ClusterError:
    """A Ray system error (no run's own error) as one line: a node without the driver's portfed, or a lost run."""
    missing = re.search(r"No module named '(portfed[\w.]*)'", str(exc))
    if missing:
        return ClusterError(f"a Ray worker cannot import {missing[1]}: install the driver's portfed on every node "
                            "(docs/cluster.md)")
    first = (str(exc).strip().splitlines() or [""])[0]
    return ClusterError(f"a run was lost on the Ray cluster ({type(exc).__name__}: {first}); the finished runs and "
                        "every run's last checkpoint are kept: continue with --resume")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--executor ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


def _check_reachable(address: str) -> None:
    """A ``HOST:PORT`` address must accept a connection (Ray itself would retry for a long time)."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # "auto", ray://… (Ray Client): Ray's own check
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ClusterError(f"--address {address}: no Ray head answers there ({exc.strerror or exc}); start "
                           "one with `ray start --head` and pass the address it prints") from None


def _connect(ray: Any, address: str) -> None:
    _check_reachable(address)
    env = {k: v for k, v in os.environ.items() if k.startswith("PORTFED_")}
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False,
                 runtime_env={"env_vars": env} if env else None)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"--address {address}: cannot join the Ray cluster: {str(exc).splitlines()[0]}") from None


@dataclass
class _RayPool:
    """A :class:`portfed.sweep.Pool` of Ray tasks, reporting through a :class:`Progress` actor."""

    ray: Any
    remote: Any
    progress: Any
    workers: int
    directory: str = field(default_factory=os.getcwd)
    running: set = field(default_factory=set)

    def submit(self, task: Task, args: tuple) -> Hashable:
        ref = self.remote.options(num_cpus=task.threads or 1).remote(
            task.call, args, task.threads, task.name, self.progress, self.directory, code_digest())
        self.running.add(ref)
        return ref

    def wait(self, handles: Collection[Hashable], timeout: float) -> Collection[Hashable]:
        refs = list(handles)
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=False)
        if ready:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        return ready

    def result(self, handle: Hashable) -> Any:
        self.running.discard(handle)
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayTaskError as exc:  # the run's own error, raised as itself
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, ImportError):
                raise cause from None
            raise _cluster_error(exc) from None
        except self.ray.exceptions.RayError as exc:  # a worker or node lost, a task cancelled
            raise _cluster_error(exc) from None

    def reports(self) -> list[tuple[str, int]]:
        try:
            return self.ray.get(self.progress.take.remote())
        except self.ray.exceptions.RayError as exc:  # the actor's node cannot import portfed, or was lost
            raise _cluster_error(exc) from None


@dataclass(frozen=True)
class RayExecutor:
    """The Ray cluster whose head is at ``address`` (``HOST:PORT`` as ``ray start --head`` prints, or
    ``auto``: the cluster running on this machine); ``jobs`` tasks at once (``None``: the cluster's CPUs
    // the largest task's threads).  Each sweep connects and disconnects; a process already connected
    (``ray.init`` called by the caller, e.g. in a notebook) keeps its connection, whatever ``address``."""

    address: str
    jobs: int | None = None

    def in_process(self, count: int) -> bool:
        return False

    @contextmanager
    def pool(self, tasks: Sequence[Task]) -> Iterator[_RayPool]:
        ray = _import_ray()
        connected = ray.is_initialized()
        if not connected:
            _connect(ray, self.address)
        try:
            with self._pool(ray, tasks) as pool:
                yield pool
        finally:
            if not connected:
                ray.shutdown()

    @contextmanager
    def _pool(self, ray: Any, tasks: Sequence[Task]) -> Iterator[_RayPool]:
        threads = max(task.threads or 1 for task in tasks)
        nodes = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
        if threads > max(nodes, default=0):
            raise ClusterError(f"a run needs {threads} CPUs (its torch_threads) and the largest node of the Ray "
                               f"cluster at {self.address} has {int(max(nodes, default=0))}")
        workers = self.jobs or max(1, int(sum(nodes)) // threads)
        progress = ray.remote(num_cpus=0)(Progress).remote()
        pool = _RayPool(ray, ray.remote(max_retries=0)(run_task), progress, min(workers, len(tasks)))
        try:
            pool.reports()  # the actor is up: its node imports portfed
            yield pool
        finally:
            for ref in pool.running:
                ray.cancel(ref, force=True)
            ray.kill(progress)
