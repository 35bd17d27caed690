"""Fit once: the parties' fitted private generators, stored by a fingerprint of what the fit depends on.

A party's fitted generator is a pure function of its training closes and of the generator's class
and parameters, so :func:`portfed.experiment.party.build.build_federation` looks every fit up in a
:class:`FitCache` before fitting, and stores the fits it had to make.  :func:`portfed.experiment.studies.compare.compare`
keeps the cache in its comparison directory, ``<out>/fit_cache/`` (:data:`CACHE_DIR`): every algorithm,
its parallel ``--jobs`` workers (they receive the parties built once in the parent) and the fault-free
reruns share the fits, and a later ``compare`` / ``run`` into the same directory fits nothing.  With
``$PORTFED_FIT_CACHE`` (:data:`ENV`) set to a directory, that directory is looked up too (after the run's)
and receives every entry as well, so fits are shared across comparison directories.  Parties whose
fingerprints agree (the same universe and generator parameters) share one fit within a build too.

**The fingerprint** (:func:`fit_fingerprint`, sha256) covers exactly the inputs of the fit:

* :data:`FORMAT_VERSION`, the version of this file layout;
* the generator: its registry name, its class (module and name) and *all* its constructor parameters
  after defaults are filled in (``get_params``; the GAN's ``seed``, which is the party's seed unless
  ``generator_params`` sets it, is one of them);
* the training panel the generator is fitted on, close-only as the Augmenter fits it: the close
  values (float64 bytes and shape), the dates (int64 nanoseconds and time zone), the tickers in
  order and the panel's name (the synthetic panels' label) — so the market, the pool, ``n_assets``,
  the universe drawn from the config's ``seed``, ``test_days``, ``start`` / ``end`` all reach it
  through the data itself;
* the code: a sha256 of the sources of :mod:`portfed.generators`, :mod:`portfed.data` and the
  top-level :mod:`portfed` helpers, and the versions of
  numpy, scipy, torch and arch (a fit changed by an edit or an upgrade is a new entry, never a stale hit).

Not covered, because they do not change the fitted state: the Augmenter's ``seed``,
``synthetic_days`` and ``regenerate_every`` (the synthetic blocks are drawn afresh from the fitted
generator with the party's seed, exactly as after a fit) and the party's index.  Not covered either:
the machine (CPU, BLAS) — a cache copied to another machine gives the fits made on the first one.

**An entry** is one file ``<fingerprint>.npz``, written atomically (:func:`portfed._io.atomic_write_bytes`,
mode ``0o600``, in a directory created ``0o700``): the arrays of
:meth:`portfed.generators.Generator.fitted_state` (numbers and unicode strings; the GAN's
networks as their ``state_dict`` tensors) under ``state.<name>``, and ``__meta__``, a JSON string: the
format version, the fingerprint, the generator, its parameters, the tickers, a sha256 ``digest``
of the state arrays and ``mac``, the HMAC-SHA256 of the fingerprint and that digest under the user's
secret key (:func:`secret_key`: 32 random bytes in ``$PORTFED_CACHE_DIR/fit_cache.key``, else
``~/.cache/portfed/fit_cache.key``, created ``0o600`` on first use).  It is read with
``np.load(..., allow_pickle=False)``: loading runs no code.

**Who may share a cache.**  The digest alone proves nothing — anyone who can write an entry can
recompute it — so an entry is used only when its ``mac`` is the user's own: entries are shared between
the runs of one user (every comparison directory, ``$PORTFED_FIT_CACHE``), never between users; a
cache directory or entry that another user owns, or that group or others may write, is refused too
(:func:`portfed._io.check_private`).  Another user's entries are fitted again and overwritten.

**A bad entry** — unreadable, truncated, of another format version or fingerprint, failing its digest
or its key, not owned by the user, or not matching the party's data — raises :class:`FitCacheError`
in :func:`read_entry`; the build then warns (:class:`FitCacheWarning`, naming the file and the
reason), fits the generator again and overwrites the entry.  A cache is never needed for a run to
succeed, and never silently used wrong.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import importlib.metadata
import io
import json
import os
import secrets
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import portfed
import portfed.data as data_package
import portfed.generators as generators_package
from portfed._io import atomic_write_bytes, cache_root, check_private, private_dir
from portfed._sources import source_digest
from portfed.data import PricePanel
from portfed.generators import Augmenter, Generator, GeneratorError

#: Version of the entry layout; bump it when the layout or a fitted-state encoding changes (2: the ``mac``).
FORMAT_VERSION = 2
#: The cache's sub-directory of a comparison directory.
CACHE_DIR = "fit_cache"
#: Environment variable naming an extra cache directory shared by every run.
ENV = "PORTFED_FIT_CACHE"
_META = "__meta__"
_STATE = "state."
_LIBRARIES = ("numpy", "scipy", "torch", "arch")
#: The file of the user's secret key in portfed's cache folder (:func:`secret_key`).
KEY_FILE = "fit_cache.key"
_KEY_BYTES = 32


class FitCacheError(GeneratorError):
    """A fit cache entry that cannot be used (unreadable, truncated, stale or not this party's)."""


class FitCacheWarning(UserWarning):
    """A bad fit cache entry was ignored: the generator is fitted again and the entry rewritten."""


@functools.cache
def code_version() -> dict[str, str]:
    """sha256 of the sources a fit runs (:mod:`portfed.generators`, :mod:`portfed.data` — the panels'
    price relatives —, and the top-level helpers: threads, validation) and the libraries' versions."""
    out = {"portfed.generators": source_digest(generators_package, data_package, portfed)}
    for name in _LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _json_value(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"generator parameter value {value!r} ({type(value).__name__}) has no JSON form")


def _params_json(generator: Generator) -> str:
    return json.dumps(generator.get_params(deep=False), sort_keys=True, default=_json_value)


def fit_fingerprint(train: PricePanel, generator: Generator) -> str:
    """The sha256 (hex) of everything the fit of ``generator`` on ``train``'s closes depends on
    (see the module docstring); ``generator`` is unfitted, its parameters as the party's.

    The agent's settings — ``agent.input_scale``, the network, the learner — are deliberately not
    part of it: a fit reads only the training closes and the generator's parameters, so runs that
    differ only in how the EIIE reads its windows share their fits (``tests/test_fit_cache.py`` checks
    that only a change of the fit's inputs refits)."""
    close = np.ascontiguousarray(train.feature("close"), dtype=np.float64)
    dates = train.dates
    header = {
        "format": FORMAT_VERSION,
        "generator": generator.name,
        "class": f"{type(generator).__module__}.{type(generator).__qualname__}",
        "params": json.loads(_params_json(generator)),
        "tickers": list(train.tickers),
        "name": train.name,
        "shape": list(close.shape),
        "tz": None if dates.tz is None else str(dates.tz),
        "code": code_version(),
    }
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    digest.update(close.tobytes())
    digest.update(np.asarray(dates.asi8, dtype=np.int64).tobytes())
    return digest.hexdigest()


def _state_digest(state: Mapping[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for key in sorted(state):
        array = np.ascontiguousarray(state[key])
        digest.update(json.dumps([key, array.dtype.str, list(array.shape)]).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def secret_key() -> bytes:
    """The user's fit-cache key: ``KEY_FILE`` in :func:`portfed._io.cache_root` (``0o700``), created
    ``0o600`` with :data:`_KEY_BYTES` random bytes on first use (atomically: concurrent runs agree on one).

    Raises:
        FitCacheError: the key file or its folder is another user's, readable or writable by others, or
            not a key.
    """
    try:
        path = private_dir(cache_root(), "portfed cache directory") / KEY_FILE
        if not path.exists():
            fd, tmp = tempfile.mkstemp(prefix=f".{KEY_FILE}.", suffix=".tmp", dir=path.parent)  # mode 0o600
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(secrets.token_bytes(_KEY_BYTES))
                with contextlib.suppress(FileExistsError):  # another process made one first: use theirs
                    os.link(tmp, path)
            finally:
                os.unlink(tmp)
        status = check_private(path, "fit cache key").stat()
        key = path.read_bytes()
    except OSError as exc:
        raise FitCacheError(f"the fit cache key cannot be used: {exc}") from exc
    if status.st_mode & 0o077 or len(key) != _KEY_BYTES:
        raise FitCacheError(f"fit cache key {path} must be {_KEY_BYTES} bytes that only this user can read "
                            f"(mode {status.st_mode & 0o777:#o}, {len(key)} bytes): delete it to make a new one")
    return key


def entry_mac(key: bytes, fingerprint: str, digest: str) -> str:
    """HMAC-SHA256 (hex) under ``key`` of an entry's fingerprint and state digest."""
    return hmac.new(key, json.dumps([fingerprint, digest]).encode(), hashlib.sha256).hexdigest()


def entry_bytes(fingerprint: str, generator: Generator) -> bytes:
    """The ``.npz`` file of an entry for the fitted ``generator`` (:meth:`Generator.fitted_state`)."""
    state = generator.fitted_state()
    meta = {
        "format": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "generator": generator.name,
        "params": json.loads(_params_json(generator)),
        "tickers": list(generator.tickers_),
        "digest": _state_digest(state),
    }
    meta["mac"] = entry_mac(secret_key(), fingerprint, meta["digest"])
    buffer = io.BytesIO()
    np.savez(buffer, **{_META: np.array(json.dumps(meta, sort_keys=True))},
             **{f"{_STATE}{k}": v for k, v in state.items()})
    return buffer.getvalue()


def read_entry(path: str | os.PathLike[str], fingerprint: str) -> dict[str, np.ndarray]:
    """The fitted state stored in ``path`` for ``fingerprint``, checked (no pickle, no code run).

    Raises:
        FitCacheError: unreadable or truncated file, not this user's own (:func:`portfed._io.check_private`),
            another format version or fingerprint, state arrays that fail the entry's digest, or a
            ``mac`` that is not the user's key's (:func:`entry_mac`).
    """
    try:
        check_private(path, "fit cache entry")
    except OSError as exc:
        raise FitCacheError(str(exc)) from exc
    try:
        # Our own handle: np.load leaves the file it opened unclosed when the zip is unreadable.
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        meta = json.loads(str(arrays.pop(_META)[()]))
        if not isinstance(meta, dict):
            raise TypeError(f"metadata is a {type(meta).__name__}, not an object")
    except Exception as exc:  # zipfile, numpy, json, KeyError: all mean the same, an unusable file
        raise FitCacheError(f"fit cache entry {path} is unreadable ({type(exc).__name__}: {exc})") from exc
    if meta.get("format") != FORMAT_VERSION:
        raise FitCacheError(f"fit cache entry {path} has format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    if meta.get("fingerprint") != fingerprint:
        raise FitCacheError(f"fit cache entry {path} holds fingerprint {meta.get('fingerprint')!r}, "
                            f"not {fingerprint!r}")
    if any(not key.startswith(_STATE) for key in arrays):
        raise FitCacheError(f"fit cache entry {path} has unexpected arrays {sorted(arrays)}")
    state = {key[len(_STATE):]: value for key, value in arrays.items()}
    digest = _state_digest(state)
    if digest != meta.get("digest"):
        raise FitCacheError(f"fit cache entry {path} fails its digest: the file was modified or damaged")
    if not hmac.compare_digest(entry_mac(secret_key(), fingerprint, digest), str(meta.get("mac", ""))):
        raise FitCacheError(f"fit cache entry {path} is not signed with this user's key ({KEY_FILE}): written by "
                            "another user, or modified")
    return state


@dataclass(frozen=True)
class FitCache:
    """Fit cache directories: every one is looked up, in order, and receives every entry it lacks."""

    directories: tuple[Path, ...]
    _bad: set[Path] = field(default_factory=set, compare=False, repr=False)

    @classmethod
    def for_run(cls, out: str | os.PathLike[str]) -> FitCache:
        """``<out>/fit_cache``, then ``$PORTFED_FIT_CACHE`` when that variable names a directory."""
        shared = os.environ.get(ENV, "").strip()
        directories = [Path(out) / CACHE_DIR] + ([Path(shared).expanduser()] if shared else [])
        return cls(tuple(dict.fromkeys(directories)))

    def path(self, directory: Path, fingerprint: str) -> Path:
        return directory / f"{fingerprint}.npz"

    def load(self, fingerprint: str, restore: Callable[[dict[str, np.ndarray]], Augmenter]) -> Augmenter | None:
        """``restore(state)`` of the first good entry for ``fingerprint``, or ``None`` when there is none.

        A bad entry (:class:`FitCacheError` from :func:`read_entry`, or a :class:`GeneratorError` of
        ``restore``: a state that does not fit the party's data) is warned about, skipped, and
        overwritten by the next :meth:`store`.
        """
        for directory in self.directories:
            path = self.path(directory, fingerprint)
            if not path.is_file():
                continue
            try:
                check_private(directory, "fit cache directory")
            except OSError as exc:
                warnings.warn(f"{exc}; not read", FitCacheWarning, stacklevel=2)
                continue
            try:
                return restore(read_entry(path, fingerprint))
            except GeneratorError as exc:
                self._bad.add(path)
                reason = exc if isinstance(exc, FitCacheError) else f"fit cache entry {path} does not fit: {exc}"
                warnings.warn(f"{reason}; fitting the generator again", FitCacheWarning, stacklevel=2)
        return None

    def store(self, fingerprint: str, generator: Generator) -> None:
        """Write the entry of the fitted ``generator`` into every directory that lacks a good one."""
        targets = [path for path in (self.path(d, fingerprint) for d in self.directories)
                   if path in self._bad or not path.is_file()]
        if not targets:
            return
        try:
            data = entry_bytes(fingerprint, generator)
        except GeneratorError as exc:  # no array form, or no usable key (FitCacheError): not cached
            warnings.warn(f"{generator.name} fit not cached: {exc}", FitCacheWarning, stacklevel=2)
            return
        for path in targets:
            try:
                private_dir(path.parent, "fit cache directory")
            except OSError as exc:
                warnings.warn(f"{exc}; the fit is not stored there", FitCacheWarning, stacklevel=2)
                continue
            atomic_write_bytes(path, data, mode=0o600)
            self._bad.discard(path)
