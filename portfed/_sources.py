"""A digest of a package's source files: the code part of a cache key.

A stored result (a fitted generator, a supervised run) is reused only while the code that made it
is unchanged; hashing the sources makes an edit a new key, never a stale hit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType


def source_digest(*modules: ModuleType) -> str:
    """sha256 over the sources of each module: a package's ``*.py`` files (its own folder, not sub-packages),
    in name order; a plain module's own file."""
    digest = hashlib.sha256()
    for module in modules:
        path = Path(module.__file__)
        digest.update(module.__name__.encode() + b"\0")
        files = sorted(path.parent.glob("*.py")) if hasattr(module, "__path__") else [path]
        for file in files:
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()
