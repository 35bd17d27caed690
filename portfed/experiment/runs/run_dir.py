"""One run per directory: a lock refuses a second writer, ``run.json`` says what a directory holds.

**``run.json``** (:data:`RUN_FILE`), written atomically into every run directory (a comparison, a
single-party run, a walk-forward, each fold) and every algorithm's sub-run: ``format``, ``kind``
(``comparison``, ``single_party``, ``walk_forward``, ``algorithm``, ``seeds``, ``tune``,
``collapse_study``), ``status`` (:data:`STATUSES`:
``running`` while it trains, then ``finished``, ``failed`` — an exception — or ``interrupted`` —
Ctrl-C or SIGTERM; a process killed outright leaves ``running``), the ``portfed`` version, the
``fingerprint`` of what it was run with, ``started`` / ``ended`` (UTC, ISO 8601) of the last leg (a resumed
run rewrites them), ``elapsed_seconds`` once it ends — the wall seconds of the leg, plus, for an algorithm's
sub-run resumed from its checkpoint, those of its earlier legs (``earlier_seconds``; a leg killed outright
never ends its record, so its time is not counted) — and details (an algorithm's name, config fingerprint and rounds;
a comparison's algorithms).

**The config fingerprint** (:func:`config_fingerprint`) is the sha256 of the resolved config less the
keys a later run into the same directory may change without making its results another experiment's:
``federation.algorithms`` (compare more algorithms), ``federation.rounds`` (``--resume`` with more
rounds), ``federation.checkpoint_every`` and ``tracking``.  A sub-run's ``fingerprint`` is its
checkpoint's (:func:`portfed.experiment.runs.federated.run_fingerprint`) and its ``config`` the config
fingerprint of the run that trained it.

**Writers** (:func:`claim`): before anything else is written, the directory is checked — not a file,
and, when it already holds a run, one of the same config fingerprint (else :class:`RunDirError`,
unless ``force``) — and locked: an exclusive ``fcntl.flock`` on ``.portfed.lock`` (:data:`LOCK_FILE`),
non-blocking, so a second writer is refused at once; the kernel drops the lock when the process ends,
however it ends (a crash, SIGKILL), so a killed run never leaves a stale lock.  The lock file itself
stays (deleting it would let two writers lock two different files).  On platforms without ``fcntl``
(Windows) :func:`claim` warns that concurrent writers are not detected and runs unlocked.  ``flock``
on a network file system (NFS) may lock for this machine only.  Under the lock, the temporary files
of interrupted atomic writes (``.*.tmp``, :func:`portfed._io.atomic_path`) are removed.

**Readers** (:func:`check_run`, :func:`check_sub_run`: ``allocate``, ``export``, ``report``,
``walk-forward``) refuse a directory whose ``run.json`` names another config than its ``config.yaml``
(another run overwrote it), an unfinished run, and a sub-run of another config or unfinished.  A
directory without ``run.json`` — written before it existed, or a Flower node's ``deployed/``
directory, whose writer records none — is read with a :class:`LegacyRunWarning`: nothing says whether
it finished or which config trained it.  (``walk-forward`` checks as a writer: :func:`claim`.)
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import socket
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from portfed._io import atomic_write_text

try:  # POSIX; absent on Windows (module docstring)
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms the tests run on
    fcntl = None  # type: ignore[assignment]

RUN_FILE = "run.json"
LOCK_FILE = ".portfed.lock"
FORMAT = 1
STATUSES: tuple[str, ...] = ("running", "finished", "failed", "interrupted")
#: Config keys left out of :func:`config_fingerprint` (module docstring), as (section, key); ``None``: the section.
UNFINGERPRINTED: tuple[tuple[str, str | None], ...] = (
    ("federation", "algorithms"), ("federation", "rounds"), ("federation", "checkpoint_every"), ("tracking", None))
#: Keys added after stored runs existed, left out of a fingerprint at their default value (section, key, default;
#: key ``None``: the section itself): a config that writes them keeps the fingerprint of one that does not.
#: (The ``agent`` section's are left out when it is loaded: ``portfed.experiment.config.base.DEFAULTS_LEFT_OUT``.)
NEW_KEYS_AT_DEFAULT: tuple[tuple[str, str | None, object], ...] = (
    ("evaluation", "disclosure", "per_party"), ("privacy", None, None))


class RunDirError(ValueError):
    """A run directory that cannot be written (locked, another config's, a file) or read (unfinished, mismatched)."""


class LegacyRunWarning(UserWarning):
    """A run directory without ``run.json`` (written before it existed) was read unchecked."""


def config_fingerprint(config: Any) -> str:
    """sha256 of ``config`` (a pydantic experiment config) less :data:`UNFINGERPRINTED` (module docstring)."""
    raw = without_new_defaults(config.model_dump(mode="json"))
    for section, key in UNFINGERPRINTED:
        if key is None:
            raw.pop(section, None)
        elif isinstance(raw.get(section), dict):
            raw[section].pop(key, None)
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()


def without_new_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a dumped config, changed in place and returned) less :data:`NEW_KEYS_AT_DEFAULT` at their default."""
    for section, key, default in NEW_KEYS_AT_DEFAULT:
        if key is None:
            if section in raw and raw[section] == default:
                raw.pop(section)
        elif isinstance(raw.get(section), dict) and raw[section].get(key, default) == default:
            raw[section].pop(key, None)
    return raw


def request_fingerprint(config: Any, **request: Any) -> str:
    """sha256 of ``config``'s :func:`config_fingerprint` and a run's other inputs (a tuning grid, a study's
    seeds): what a tuning or study directory must hold the same of to be resumed."""
    key = {"config": config_fingerprint(config), **request}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("portfed")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "unknown"


def read_record(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``run.json`` of ``directory``, or ``None`` when it has none.

    Raises:
        RunDirError: a ``run.json`` that is unreadable or not a record of :data:`FORMAT`.
    """
    path = Path(directory) / RUN_FILE
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path} cannot be read: {exc}") from exc
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("status") not in STATUSES:
        raise RunDirError(f"{path} is not a portfed run record (format {FORMAT})")
    return record


def _earlier_seconds(directory: str | os.PathLike[str], kind: str, fingerprint: str) -> float:
    """The wall seconds of the earlier legs of the same run (``kind`` and ``fingerprint``) in ``directory``:
    its record's ``elapsed_seconds`` when that leg ended, its ``earlier_seconds`` when it was killed outright
    (still ``running``), 0 for a new run or another run's record."""
    try:
        previous = read_record(directory)
    except RunDirError:
        return 0.0
    if previous is None or previous["kind"] != kind or previous["fingerprint"] != fingerprint:
        return 0.0
    return float(previous.get("elapsed_seconds", previous.get("earlier_seconds", 0.0)))


def _seconds_between(started: str, ended: str) -> float:
    return (datetime.datetime.fromisoformat(ended) - datetime.datetime.fromisoformat(started)).total_seconds()


def write_record(directory: str | os.PathLike[str], kind: str, fingerprint: str, status: str = "running",
                 resumed: bool = False, **details: Any) -> dict[str, Any]:
    """Write a fresh ``run.json`` (``started`` now) into ``directory`` atomically; returns it.  ``resumed``:
    the run continues the one recorded there, whose legs' seconds it carries (``earlier_seconds``)."""
    earlier = _earlier_seconds(directory, kind, fingerprint) if resumed else 0.0
    record = {"format": FORMAT, "kind": kind, "status": status, "portfed": _version(), "fingerprint": fingerprint,
              "started": _now(), "ended": None, "earlier_seconds": earlier,
              "pid": os.getpid(), "host": socket.gethostname(), **details}
    if status != "running":
        record["ended"] = record["started"]
        record["elapsed_seconds"] = record["earlier_seconds"]
    atomic_write_text(Path(directory) / RUN_FILE, json.dumps(record, indent=2, allow_nan=False) + "\n")
    return record


def end_record(directory: str | os.PathLike[str], status: str) -> None:
    """Set the ``status`` (not ``running``) and ``ended`` time of ``directory``'s ``run.json`` (nothing
    when it has none)."""
    if status not in STATUSES[1:]:
        raise ValueError(f"a run ends as one of {STATUSES[1:]}, not {status!r}")
    record = read_record(directory)
    if record is None:
        return
    ended = _now()
    record.update(status=status, ended=ended,
                  elapsed_seconds=float(record.get("earlier_seconds", 0.0)) + _seconds_between(record["started"], ended))
    atomic_write_text(Path(directory) / RUN_FILE, json.dumps(record, indent=2, allow_nan=False) + "\n")


def status_of(exc: BaseException) -> str:
    """The status a run stopped by ``exc`` ends with: ``interrupted`` (Ctrl-C, SIGTERM, exit) or ``failed``."""
    return "interrupted" if isinstance(exc, KeyboardInterrupt | SystemExit) else "failed"


@contextlib.contextmanager
def recorded(directory: str | os.PathLike[str], kind: str, fingerprint: str, **details: Any) -> Iterator[None]:
    """``run.json`` of ``directory``: ``running`` now, then ``finished`` — or ``failed`` / ``interrupted``
    when the block raises (the exception propagates)."""
    write_record(directory, kind, fingerprint, **details)
    try:
        yield
    except BaseException as exc:
        end_record(directory, status_of(exc))
        raise
    end_record(directory, "finished")


def held_by_another(directory: str | os.PathLike[str]) -> bool:
    """Whether another process holds ``directory``'s lock now (``False`` without a lock file or ``fcntl``)."""
    path = Path(directory) / LOCK_FILE
    if fcntl is None or not path.is_file():
        return False
    with open(path, "rb") as handle:  # read-only: a reader may not write the directory (flock needs no write)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


@contextlib.contextmanager
def locked(directory: str | os.PathLike[str]) -> Iterator[None]:
    """Hold ``directory``'s exclusive lock (created with the directory if need be) for the block.

    Raises:
        RunDirError: ``directory`` is a file, cannot be created, or another process holds its lock.
    """
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise RunDirError(f"output directory {out} is a file, not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = open(out / LOCK_FILE, "a")  # noqa: SIM115 - held open for the block: the lock lives with it
    except OSError as exc:
        raise RunDirError(f"cannot create the output directory {out}: {exc.strerror or exc}") from exc
    with handle:
        if fcntl is None:  # pragma: no cover - Windows
            warnings.warn(f"no file locks on this platform: a second run writing into {out} is not detected",
                          RuntimeWarning, stacklevel=3)
        else:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                record = read_record(out) if (out / RUN_FILE).is_file() else None
                who = "" if record is None else f" (pid {record.get('pid')} on {record.get('host')})"
                raise RunDirError(f"{out} is being written by another portfed run{who}; wait for it to end, "
                                  "or choose another --out") from None
        yield


def remove_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files of interrupted atomic writes (``.*.tmp``) under ``directory``; call it
    only under the directory's lock (no other writer is mid-write).  Returns what was removed."""
    stale = [p for p in Path(directory).rglob(".*.tmp") if p.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def check_target(directory: str | os.PathLike[str], kind: str, fingerprint: str, *, force: bool = False,
                 legacy_fingerprint: str | None = None) -> None:
    """Refuse to write a ``kind`` run of ``fingerprint`` into ``directory`` when it holds another one.

    ``legacy_fingerprint``: the fingerprint of the ``config.yaml`` of a directory without ``run.json``
    (``None`` when it has no readable one).  An empty or absent directory, or one holding a run of the
    same kind and fingerprint, is accepted; anything else only with ``force``.

    Raises:
        RunDirError: naming what the directory holds and ``--force``.
    """
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise RunDirError(f"output directory {out} is a file, not a directory")
    if force or not out.is_dir():
        return
    record = read_record(out)
    if record is not None:
        if record.get("kind") == kind and record.get("fingerprint") == fingerprint:
            return
        raise RunDirError(f"{out} holds a {record.get('kind')} run of another config (its {RUN_FILE}); choose "
                          "another --out, or pass --force to write this run over it")
    entries = [p.name for p in out.iterdir() if p.name != LOCK_FILE]
    if not entries or (legacy_fingerprint is not None and legacy_fingerprint == fingerprint):
        return
    raise RunDirError(f"{out} is not empty and holds no run of this config ({len(entries)} entries, e.g. "
                      f"{sorted(entries)[0]!r}); choose another --out, or pass --force to write into it")


@contextlib.contextmanager
def claim(directory: str | os.PathLike[str], kind: str, fingerprint: str, *, force: bool = False,
          legacy_fingerprint: str | None = None, checks: Callable[[], object] | None = None,
          **details: Any) -> Iterator[Path]:
    """Lock ``directory``, check it may receive this run (:func:`check_target`) and run the caller's
    ``checks`` (e.g. of the checkpoints to resume from), then remove stale temporary files and record the
    run in ``run.json`` (:func:`recorded`) for the block; yields the directory.

    A refusal — of the directory, of the lock or raised by ``checks`` — leaves the directory as it was
    (bar the directory itself and its lock file, created to take the lock)."""
    out = Path(directory)
    check_target(out, kind, fingerprint, force=force, legacy_fingerprint=legacy_fingerprint)
    with locked(out):
        check_target(out, kind, fingerprint, force=force, legacy_fingerprint=legacy_fingerprint)  # under the lock
        if checks is not None:
            checks()
        remove_temporaries(out)
        with recorded(out, kind, fingerprint, **details):
            yield out


def describe(record: Mapping[str, Any], locked_directory: Path) -> str:
    """The record's status; a ``running`` one says so when no process holds ``locked_directory``'s lock."""
    status = str(record.get("status"))
    if status == "running" and not held_by_another(locked_directory):
        return "running (no process holds its lock: it was killed)"
    return status


def check_run(directory: str | os.PathLike[str], fingerprint: str, *, finished: bool = True) -> dict[str, Any] | None:
    """The ``run.json`` of a run directory whose ``config.yaml`` has config fingerprint ``fingerprint``;
    ``None`` (and a :class:`LegacyRunWarning`) for a directory without one.

    Raises:
        RunDirError: the record names another config, or (``finished``) the run did not finish.
    """
    out = Path(directory)
    record = read_record(out)
    if record is None:
        warnings.warn(f"{out} has no {RUN_FILE} (an older portfed's run, or a Flower server's or node's directory): "
                      "whether it finished, and with which config its sub-runs were trained, cannot be checked",
                      LegacyRunWarning, stacklevel=2)
        return None
    if record.get("fingerprint") != fingerprint:
        raise RunDirError(f"{out}/config.yaml is not the config its {RUN_FILE} records: another run wrote into "
                          "the directory; rerun the experiment into a fresh --out")
    if finished and record.get("status") != "finished":
        raise RunDirError(f"the run in {out} is {describe(record, out)}, not finished; finish it with --resume")
    return record


def check_sub_run(directory: str | os.PathLike[str], algorithm: str, config: str,
                  parent: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``run.json`` of ``algorithm``'s sub-run ``directory`` of a run of config fingerprint ``config``
    (``parent``: the run's own record, ``None`` for a legacy directory, whose sub-runs need none).

    Raises:
        RunDirError: no record under a recorded run, another algorithm or config, or not finished.
    """
    out = Path(directory)
    record = read_record(out)
    if record is None:
        if parent is None:
            return None
        raise RunDirError(f"{out} has no {RUN_FILE}: it was not written by the run recorded in {out.parent}")
    if record.get("algorithm") != algorithm or record.get("config") != config:
        raise RunDirError(f"{out} holds a run of another config or algorithm than {out.parent}/config.yaml "
                          f"({algorithm!r}); rerun the experiment into a fresh --out")
    if record.get("status") != "finished":
        raise RunDirError(f"{algorithm!r} in {out.parent} is {describe(record, out.parent)}, not finished: its models "
                          "were never backtested; finish the run with --resume")
    return record


def directory_config_fingerprint(directory: str | os.PathLike[str]) -> str | None:
    """The :func:`config_fingerprint` of ``directory/config.yaml``; ``None`` when it has no readable one."""
    from portfed.experiment.config import ConfigError, load_config

    path = Path(directory) / "config.yaml"
    if not path.is_file():
        return None
    try:
        return config_fingerprint(load_config(path))
    except (ConfigError, OSError):
        return None
