"""Atomic file writes (a reader never sees a half-written result, cache or checkpoint) and the cache folder.

Files are created with the mode an ordinary ``open()`` would give them (``0o666`` less the process
umask), not the ``0o600`` of :func:`tempfile.mkstemp`, so colleagues sharing a results directory can
read them when the umask allows it.
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


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path`` atomically.

    On any exception the temporary file is removed and ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp_path = Path(tmp)
    try:
        try:
            os.fchmod(fd, 0o666 & ~current_umask())
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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_save(path: str | os.PathLike[str], writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` (e.g. ``frame.to_csv``, ``fig.savefig``) then publish atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)
