"""Atomic file writes (a reader never sees a half-written result, cache or checkpoint) and the cache folder.

Files are created with the mode an ordinary ``open()`` would give them (``0o666`` less the process
umask), not the ``0o600`` of :func:`tempfile.mkstemp`, so colleagues sharing a results directory can
read them when the umask allows it — unless the writer asks for a ``mode`` (the caches' files).

**Caches are private** (:func:`private_dir`, :func:`check_private`): portfed creates its cache
directories ``0o700`` and refuses to use a cache directory or file that is not owned by the user
running it, or that group or others may write (a library or entry planted by another account).
Where the platform has no user ids (Windows) the checks are skipped.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def cache_root() -> Path:
    """portfed's cache folder: ``$PORTFED_CACHE_DIR`` when that variable is set, else ``~/.cache/portfed``."""
    root = os.environ.get("PORTFED_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "portfed"


def current_umask() -> int:
    """The process umask (read by setting it and putting it back: there is no read-only call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class UnsafeCacheError(OSError):
    """A cache directory or file that another user owns, or that group or others may write."""


def check_private(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` if this user owns it and neither group nor others may write it (symlinks followed).

    Raises:
        UnsafeCacheError: naming ``what``, the path, its owner or its mode.
    """
    path = Path(path)
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows
        return path
    status = path.stat()
    if status.st_uid != os.getuid():
        raise UnsafeCacheError(f"{what} {path} is owned by uid {status.st_uid}, not by this user "
                               f"(uid {os.getuid()}): refused")
    if status.st_mode & 0o022:
        raise UnsafeCacheError(f"{what} {path} is writable by group or others (mode {status.st_mode & 0o777:#o}): "
                               "refused")
    return path


def private_dir(path: str | os.PathLike[str], what: str = "cache directory") -> Path:
    """The directory ``path``, its missing parts created ``0o700``, checked with :func:`check_private`.

    Raises:
        UnsafeCacheError: the directory is another user's or writable by group or others.
        OSError: it cannot be created.
    """
    path = Path(path)
    for missing in reversed([p for p in (path, *path.parents) if not p.exists()]):
        missing.mkdir(mode=0o700, exist_ok=True)
    return check_private(path, what)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path`` atomically.

    The file gets ``mode`` (default: ``0o666`` less the umask).  On any exception the temporary file
    is removed and ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp_path = Path(tmp)
    try:
        try:
            os.fchmod(fd, 0o666 & ~current_umask() if mode is None else mode)
        finally:
            os.close(fd)
        yield tmp_path
        os.replace(tmp_path, target)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    with atomic_path(path, mode) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_save(path: str | os.PathLike[str], writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` (e.g. ``frame.to_csv``, ``fig.savefig``) then publish atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)
