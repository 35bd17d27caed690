"""``--executor local|ray --address ADDRESS``: where a command's sweep of runs goes (:mod:`portfed.sweep`).

Shared by every command that runs a sweep (``run``/``compare``, ``--seeds``, ``tune``, ``study
collapse``, ``walk-forward``, ``supervised run``).  ``local`` (the default) is this machine's process
pool of ``--jobs`` processes; ``ray`` the Ray cluster at ``--address``, ``--jobs`` runs at once there
(0: the cluster's CPUs // torch_threads).  Results are identical for either (docs/cluster.md).
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

import typer
from rich.console import Console
from rich.markup import escape

from portfed.sweep import Executor

console = Console() if sys.stdout.isatty() else Console(width=200)

EXECUTORS = ("local", "ray")
# "\\[": a literal "[" in rich markup (the help is printed by rich)
EXECUTOR_HELP = ("Where the runs go: local (this machine's processes, --jobs of them) or ray (the Ray cluster at "
                 "--address, --jobs runs at once, 0 = its CPUs // torch_threads; pip install 'portfed\\[cluster]', "
                 "docs/cluster.md). Results are identical.")
ADDRESS_HELP = ("--executor ray: the Ray head, HOST:PORT as `ray start --head` prints it, or auto (the cluster "
                "running on this machine).")


def executor_option(executor: str, address: str | None, jobs: int | None) -> int | Executor | None:
    """What a study takes as ``n_jobs``: ``jobs`` for ``local`` (``None``: what the cores allow), a
    :class:`~portfed.ray_executor.RayExecutor` for ``ray``; a bad combination exits with one line."""
    def refuse(message: str) -> typer.Exit:
        console.print(f"[red]error:[/red] {message}")
        return typer.Exit(code=1)

    if executor not in EXECUTORS:
        raise refuse(f"--executor {executor!r}: choose one of {', '.join(EXECUTORS)}")
    if executor == "local":
        if address is not None:
            raise refuse(f"--address {address} applies to --executor ray only")
        return jobs
    if not address:
        raise refuse("--executor ray needs --address HOST:PORT (the head's, as `ray start --head` prints it)")
    from portfed.ray_executor import INSTALL, RayExecutor

    if find_spec("ray") is None:  # before any work; escaped, or rich would take "[cluster]" for markup
        raise refuse(escape(f"--executor ray needs Ray, which is not installed: {INSTALL}"))

    return RayExecutor(address, jobs)
