"""The processes a launch starts, and stopping every one of them: whole trees, by id, with bounded waits.

Each process is started in a session of its own (its own process group), with its output in a log
file.  :meth:`Processes.stop` stops a process's group and every descendant — also those that left
the group (the SuperLink starts its executor in a new session), and for a process that has exited on
its own whatever it left in its group (a refused SuperNode's executor) — with SIGTERM, waits ``grace``
seconds, then SIGKILLs what is left and waits again: when it returns nothing it started is running.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, process: subprocess.Popen[bytes] | None = None,
                  log: Path | None = None) -> None:
    """Until something listens on 127.0.0.1:``port``; ``TimeoutError`` after ``timeout`` seconds, or
    ``RuntimeError`` (with the end of ``log``) as soon as ``process`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{process.args[0]} exited with code {process.returncode} before listening on "
                               f"port {port}:\n{tail}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


def _group_members(group: int) -> list[psutil.Process]:
    """The processes in process group ``group`` (a started process's own: it was started in a new session)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group:
                members.append(process)
        except (ProcessLookupError, PermissionError):
            continue
    return members


class Processes:
    """The processes of one launch, by name (a context manager that stops them all on exit)."""

    def __init__(self, logs: Path, env: Mapping[str, str], grace: float = 10.0) -> None:
        self.logs, self.env, self.grace = Path(logs), dict(env), grace
        self.logs.mkdir(parents=True, exist_ok=True)
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self._orphans: list[psutil.Process] = []
        self._exited: list[subprocess.Popen[bytes]] = []  # replaced by a restart of the same name

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def start(self, name: str, args: Sequence[str], cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``args`` as ``name`` (``ValueError`` if one by that name is running)."""
        if name in self.running and self.running[name].poll() is None:
            raise ValueError(f"{name} is already running (pid {self.running[name].pid})")
        if name in self.running:  # it exited: what it left in its group is stopped with the rest
            self._exited.append(self.running.pop(name))
        with open(self.log(name), "ab") as log:
            log.write((" ".join(args) + "\n").encode())
            log.flush()
            process = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=cwd,
                                       start_new_session=True)
        self.running[name] = process
        logger.debug("started %s (pid %d): %s", name, process.pid, " ".join(args))
        return process

    def kill(self, name: str) -> None:
        """SIGKILL ``name`` alone, as a crash would; its children are left running (and stopped with the rest)."""
        process = self.running.pop(name)
        try:
            self._orphans += psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        process.kill()
        process.wait(timeout=self.grace)

    def _tree(self, process: subprocess.Popen[bytes]) -> list[psutil.Process]:
        """``process`` and its descendants; once it has exited, what it left in its own process group
        (flower-supernode's executor outlives a SuperNode that exits until its parent monitor notices)."""
        if process.poll() is not None:
            return _group_members(process.pid)
        try:
            root = psutil.Process(process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return _group_members(process.pid)

    def stop(self, name: str) -> None:
        """Stop ``name`` and all its descendants (module docstring)."""
        process = self.running.pop(name, None)
        if process is not None:
            self._stop_trees([process], self._tree(process))

    def _stop_trees(self, processes: list[subprocess.Popen[bytes]], tree: list[psutil.Process]) -> None:
        """SIGTERM every process group of ``tree`` at once, wait ``grace`` seconds, SIGKILL the rest."""
        own = os.getpgid(0)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            groups = set()
            for member in tree:
                try:
                    groups.add(os.getpgid(member.pid))
                except ProcessLookupError:
                    continue
            for group in groups - {own}:
                try:
                    os.killpg(group, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            _, tree = psutil.wait_procs(tree, timeout=self.grace)
            for process in processes:
                try:
                    process.wait(timeout=self.grace if tree else 1.0)
                except subprocess.TimeoutExpired:
                    pass
            if not tree:
                return
        logger.warning("processes %s did not stop", [p.pid for p in tree])

    def stop_all(self) -> None:
        """Stop every process and its descendants, the orphans of killed ones and what exited ones left in
        their groups, all at once."""
        processes = list(self.running.values()) + self._exited
        tree = [member for process in processes for member in self._tree(process)] + self._orphans
        self.running, self._orphans, self._exited = {}, [], []
        self._stop_trees(processes, tree)
