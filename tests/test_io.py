"""Atomic writes: published files carry the process umask's mode, and a failed write leaves nothing."""

from __future__ import annotations

import os
import stat

import pytest

from portfed._io import atomic_save, atomic_write_bytes, atomic_write_text
from portfed._sources import source_digest


@pytest.fixture
def umask():
    """Set a umask for one test and put the old one back."""
    saved = os.umask(0o022)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(saved)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_files_are_created_with_the_process_umask(tmp_path, umask, mask):
    umask(mask)
    written = [
        atomic_write_text(tmp_path / "a.txt", "x"),
        atomic_write_bytes(tmp_path / "b.bin", b"x"),
        atomic_save(tmp_path / "c.csv", lambda p: p.write_text("x")),
    ]
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


def test_a_failed_write_leaves_no_file(tmp_path):
    def broken(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_save(tmp_path / "out.csv", broken)
    assert list(tmp_path.iterdir()) == []


def test_the_source_digest_covers_a_packages_folder_and_a_plain_modules_own_file(tmp_path, monkeypatch):
    import importlib

    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for path in (package / "__init__.py", package / "a.py", package / "sub" / "__init__.py", tmp_path / "single.py",
                 tmp_path / "other.py"):
        path.write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = [importlib.import_module(name) for name in ("pkg", "single")]
    before = source_digest(*modules)
    (package / "sub" / "__init__.py").write_text("x = 2\n")  # a sub-package is not the package
    (tmp_path / "other.py").write_text("x = 2\n")  # nor is a plain module's neighbour
    assert source_digest(*modules) == before
    for path in (package / "a.py", tmp_path / "single.py"):
        path.write_text("x = 3\n")
        assert source_digest(*modules) != before
        before = source_digest(*modules)

