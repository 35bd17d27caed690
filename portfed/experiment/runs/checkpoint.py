"""Checkpoints of a federated run: written atomically, refused when they belong to another run.

A checkpoint is one ``torch.save`` file holding the federation state
(:meth:`portfed.federation.FederationState.state_dict`), every party's state
(:meth:`portfed.experiment.party.party.Party.state_dict`: network, Adam moments, PVM, sampler generator —
of its rows of the training engine — and Augmenter block) and the per-round records so far.  It is written to a temporary file beside the
target and renamed over it (:func:`portfed._io.atomic_save`), so a run killed at any moment leaves
either the previous checkpoint or the new one, never a torn file.

Loading executes no code: the payload is made of tensors, plain containers (dict, list, tuple) and
Python scalars and strings only — numpy arrays are stored as tagged tensors and numpy scalars as
Python numbers (:func:`to_plain`) — and it is read with ``torch.load(weights_only=True)``, whose
unpickler refuses any other object.  A truncated or tampered file is a :class:`CheckpointError`.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from portfed._crash import crash_point
from portfed._io import atomic_save

#: Bumped whenever the layout of the payload changes; older checkpoints are refused.
CHECKPOINT_FORMAT = 2
_ARRAY_TAG = "__ndarray__"
CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (unreadable, another format, another run)."""


def to_plain(value: Any) -> Any:
    """``value`` with numpy arrays as ``{"__ndarray__": tensor}`` and numpy scalars as Python numbers.

    Raises:
        TypeError: an object that ``torch.load(weights_only=True)`` would refuse (named by its type).
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"cannot checkpoint a numpy array of dtype {value.dtype}")
        return {_ARRAY_TAG: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return type(value)((key, to_plain(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return type(value)(to_plain(item) for item in value)
    if value is None or isinstance(value, bool | int | float | str | torch.Tensor):
        return value
    raise TypeError(f"cannot checkpoint an object of type {type(value).__name__}")


def from_plain(value: Any) -> Any:
    """The inverse of :func:`to_plain`."""
    if isinstance(value, dict):
        if set(value) == {_ARRAY_TAG}:
            return value[_ARRAY_TAG].numpy()
        return type(value)((key, from_plain(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return type(value)(from_plain(item) for item in value)
    return value


def save_checkpoint(path: str | os.PathLike[str], fingerprint: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` with the run's ``fingerprint`` (its resolved config and algorithm) atomically."""
    content = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, **to_plain(payload)}

    def write(tmp: Path) -> None:
        torch.save(content, tmp)
        crash_point("checkpoint_write")

    return atomic_save(path, write)


def load_checkpoint(path: str | os.PathLike[str], fingerprint: str) -> dict[str, Any]:
    """The payload saved at ``path``; refused unless it was written by a run with ``fingerprint``.

    Raises:
        CheckpointError: the file is unreadable, of another format, or of another run.
    """
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from exc
    if not isinstance(content, dict) or content.get("format") != CHECKPOINT_FORMAT:
        found = content.get("format") if isinstance(content, dict) else type(content).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} has format {found!r}, expected {CHECKPOINT_FORMAT}")
    if content["fingerprint"] != fingerprint:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was written by a run with another config or algorithm; "
            "resume with the config it was started with, or start a fresh run"
        )
    return {k: from_plain(v) for k, v in content.items() if k not in ("format", "fingerprint")}
