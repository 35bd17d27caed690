"""Caches are private: a planted kernel library is never loaded, a fit-cache entry is used only when it
carries the user's own key, and cache directories are created 0o700."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from portfed._io import UnsafeCacheError, check_private, private_dir
from portfed.agents import AgentConfig, BatchedEIIERecurrent, native
from portfed.data.panel import PricePanel
from portfed.experiment.party.fit_cache import (
    KEY_FILE,
    FitCache,
    FitCacheError,
    FitCacheWarning,
    entry_bytes,
    fit_fingerprint,
    read_entry,
)
from portfed.generators import Augmenter, GBMGenerator

PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w"); if (f) { fputs("ran", f); fclose(f); }
}
int openmp(void) { return 0; }
int tile_width(void) { return 8; }
"""
OTHER_UID = 4242


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("PORTFED_CACHE_DIR", str(root))
    native._library.cache_clear()
    yield root
    native._library.cache_clear()


def _plant(cache: Path, marker: Path) -> Path:
    """Build the real library (for its name), then put a library with a constructor in its place."""
    native.recurrence_kernels(3)
    (library,) = (cache / "native").glob("recurrence-hidden3-*.so")
    source = cache / "planted.c"
    source.write_text(PLANTED)
    subprocess.run(["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(library), str(source)], check=True)
    native._library.cache_clear()
    return library


@pytest.mark.native
def test_the_kernel_cache_is_created_private(cache: Path) -> None:
    native.recurrence_kernels(3)
    assert (cache / "native").stat().st_mode & 0o777 == 0o700 and cache.stat().st_mode & 0o777 == 0o700
    (library,) = (cache / "native").glob("*.so")
    assert library.stat().st_mode & 0o077 == 0


@pytest.mark.native
def test_a_library_others_may_write_is_refused_and_never_runs(cache: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "marker"
    library = _plant(cache, marker)
    library.chmod(0o777)
    with pytest.raises(native.NativeBuildError, match="kernel library .* writable by group or others"):
        BatchedEIIERecurrent(AgentConfig(network="rnn", hidden_size=3, backend="native"))
    assert not marker.exists()
    # agent.backend auto (the default), on a CPU where it tries the kernels: a warning, and the PyTorch operations
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    with pytest.warns(RuntimeWarning, match="refused"):
        assert BatchedEIIERecurrent(AgentConfig(network="rnn", hidden_size=3)).backend.name == "torch"
    assert not marker.exists()


@pytest.mark.native
@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file of another user needs root")
def test_a_library_planted_by_another_user_is_refused_and_never_runs(cache: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "marker"
    library = _plant(cache, marker)
    os.chown(library, OTHER_UID, OTHER_UID)
    with pytest.raises(native.NativeBuildError, match=f"owned by uid {OTHER_UID}"):
        native.recurrence_kernels(3)
    assert not marker.exists()
    os.chown(cache / "native", OTHER_UID, OTHER_UID)  # a directory of another user: refused before any file
    library.unlink()
    with pytest.raises(native.NativeBuildError, match="kernel cache directory .* owned by uid"):
        native.recurrence_kernels(3)


def test_private_directories_and_files(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "b")
    assert made.stat().st_mode & 0o777 == 0o700 and (tmp_path / "a").stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeCacheError, match="writable by group or others"):
        private_dir(shared)
    entry = made / "x"
    entry.write_text("x")
    entry.chmod(0o644)
    assert check_private(entry, "entry") == entry  # readable by others is fine, writable is not
    entry.chmod(0o664)
    with pytest.raises(UnsafeCacheError, match=r"entry .* \(mode 0o664\)"):
        check_private(entry, "entry")


@pytest.fixture
def fitted() -> tuple[str, GBMGenerator, PricePanel]:
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, size=(200, 2)), axis=0))
    train = PricePanel.from_close(pd.DataFrame(close, index=pd.bdate_range("2001-01-01", periods=200),
                                               columns=["A", "B"]), name="toy")
    generator = GBMGenerator()
    fingerprint = fit_fingerprint(train, generator)
    return fingerprint, Augmenter(generator, synthetic_days=20, seed=0).fit(train).generator_, train


def _rewrite(path: Path, edit) -> None:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    edit(arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def test_a_fit_cache_entry_with_a_recomputed_digest_is_refused(cache: Path, tmp_path: Path, fitted) -> None:
    from portfed.experiment.party.fit_cache import _state_digest

    fingerprint, generator, _ = fitted
    path = tmp_path / "entries" / f"{fingerprint}.npz"
    FitCache((path.parent,)).store(fingerprint, generator)
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert (cache / KEY_FILE).stat().st_mode & 0o777 == 0o600 and len((cache / KEY_FILE).read_bytes()) == 32
    state = read_entry(path, fingerprint)

    def drift(arrays: dict) -> None:  # +2 %/day, and the digest recomputed as anyone could
        name = next(k for k in arrays if k.startswith("state.") and arrays[k].dtype == np.float64)
        arrays[name] = arrays[name] + 0.02
        meta = json.loads(str(arrays["__meta__"]))
        meta["digest"] = _state_digest({k[len("state."):]: v for k, v in arrays.items() if k != "__meta__"})
        arrays["__meta__"] = np.array(json.dumps(meta, sort_keys=True))

    _rewrite(path, drift)
    with pytest.raises(FitCacheError, match="not signed with this user's key"):
        read_entry(path, fingerprint)
    with pytest.warns(FitCacheWarning, match="not signed"):
        assert FitCache((path.parent,)).load(fingerprint, lambda s: s) is None
    # A good entry of another user's key (here: the key replaced) is refused the same way.
    path.write_bytes(entry_bytes(fingerprint, generator))
    assert read_entry(path, fingerprint).keys() == state.keys()
    (cache / KEY_FILE).unlink()
    with pytest.raises(FitCacheError, match="not signed"):
        read_entry(path, fingerprint)


def test_a_fit_cache_entry_others_may_write_or_a_readable_key_is_refused(cache: Path, tmp_path: Path,
                                                                        fitted) -> None:
    fingerprint, generator, _ = fitted
    path = tmp_path / "entries" / f"{fingerprint}.npz"
    FitCache((path.parent,)).store(fingerprint, generator)
    path.chmod(0o666)
    with pytest.raises(FitCacheError, match="writable by group or others"):
        read_entry(path, fingerprint)
    path.chmod(0o600)
    read_entry(path, fingerprint)
    (cache / KEY_FILE).chmod(0o644)
    with pytest.raises(FitCacheError, match="only this user can read"):
        read_entry(path, fingerprint)
