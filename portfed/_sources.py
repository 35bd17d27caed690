"""A digest of a package's source files: the code part of a cache key.

A stored result (a fitted generator, a supervised run) is reused only while the code that made it
is unchanged; hashing the sources makes an edit a new key, never a stale hit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType


def source_digest(*packages: ModuleType) -> str:
    """sha256 over the ``*.py`` files of each package (its own folder, not sub-packages), in name order."""
    digest = hashlib.sha256()
    for package in packages:
        folder = Path(package.__file__).parent
        digest.update(package.__name__.encode() + b"\0")
        for path in sorted(folder.glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
