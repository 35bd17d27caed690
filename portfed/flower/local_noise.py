"""The noise of a party's local-DP messages on its own node (docs/privacy.md, "Where local noise is drawn").

The in-process run draws party k's noise of round t from :func:`portfed.privacy.mechanism.noise_generator`
``(seed, LOCAL_STREAM, t, k)``, seeded by the config's seed — which the server holds too: it could draw the
same noise and subtract it, so on a deployment that noise protects nothing.  A node therefore seeds its
noise (``secret``, the default) with a **key of its own**, ``<state_dir>/noise_key`` (32 random bytes made
on first use, readable by the node's user only, never sent), the stream, the run key, the round and the
party: the same node answers a resent round with the same message (a resumed run is the uninterrupted one),
and the server cannot predict it.  ``run`` (the node config's ``dp-noise=run``) draws the in-process noise
instead, so a deployment reproduces the simulation to float32 round-off — for checking it only.

**One answer per round.**  The same noise answering two different requests for one round would cancel in
the difference of the two messages.  The node keeps the digest of every request it answered (``requests.json``
beside its states, never pruned) and refuses another request for a round it answered (:func:`check_request`);
the same request again gets the same message, which tells nothing new.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import numpy as np

from portfed._io import atomic_write_bytes, atomic_write_text
from portfed.privacy.mechanism import LOCAL_STREAM, noise_generator

NOISE_SOURCES: tuple[str, ...] = ("secret", "run")
KEY_FILE, REQUESTS_FILE = "noise_key", "requests.json"
_KEY_BYTES = 32


def check_noise_source(source: object) -> str:
    """``source`` when it is one of :data:`NOISE_SOURCES` (``ValueError`` naming it otherwise)."""
    if source not in NOISE_SOURCES:
        raise ValueError(f"dp-noise must be one of {', '.join(NOISE_SOURCES)}, got {source!r}")
    return str(source)


def node_key(state_dir: Path) -> list[int]:
    """The node's secret noise key as eight 32-bit words, made (``0o600``) on first use."""
    path = state_dir / KEY_FILE
    if not path.exists():
        atomic_write_bytes(path, secrets.token_bytes(_KEY_BYTES), mode=0o600)
    key = path.read_bytes()
    if len(key) != _KEY_BYTES:
        raise ValueError(f"{path} holds {len(key)} bytes, not a {_KEY_BYTES}-byte noise key; remove it to make a new one")
    return np.frombuffer(key, dtype="<u4").tolist()


def message_noise(source: str, state_dir: Path, seed: int, run: str, round_index: int,
                  party: int) -> np.random.Generator:
    """The generator of party ``party``'s noise in round ``round_index`` of run ``run`` (module docstring)."""
    if check_noise_source(source) == "run":
        return noise_generator(seed, LOCAL_STREAM, round_index, party)
    run_words = np.frombuffer(hashlib.sha256(run.encode()).digest(), dtype="<u4").tolist()
    return np.random.default_rng(np.random.SeedSequence(
        [*node_key(state_dir), LOCAL_STREAM, *run_words, int(round_index), int(party)]))


def request_digest(algorithm: str, reference: np.ndarray, steps: int) -> str:
    """A hash of what a private train request asks: the algorithm, the reference's bytes and the steps."""
    digest = hashlib.sha256(f"{algorithm}/{int(steps)}/".encode())
    digest.update(np.ascontiguousarray(reference, dtype=np.float64).tobytes())
    return digest.hexdigest()


def check_request(folder: Path, round_index: int, digest: str) -> None:
    """Record that round ``round_index`` is answered for the request ``digest`` (in ``folder/requests.json``), or
    ``ValueError`` when that round was answered for another request."""
    path = folder / REQUESTS_FILE
    answered = json.loads(path.read_text()) if path.exists() else {}
    known = answered.get(str(round_index))
    if known is not None and known != digest:
        raise ValueError(f"refused: round {round_index} of this run was answered for another request (reference, "
                         "steps or algorithm); a second answer with the same noise would let the server cancel it")
    if known is None:
        atomic_write_text(path, json.dumps({**answered, str(round_index): digest}, sort_keys=True))
