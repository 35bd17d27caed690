"""Checkpoints of a federated run: written atomically, refused when they belong to another run.

A checkpoint is one ``torch.save`` file holding the federation state
(:meth:`portfed.federation.FederationState.state_dict`), every party's state
(:meth:`portfed.experiment.party.Party.state_dict`: network, Adam moments, PVM, sampler generator —
of the party's own ``DPGTrainer``, or its slot's rows of the batched engine — and Augmenter block) and the per-round records so far.  It is written to a temporary file beside the
target and renamed over it (:func:`portfed._io.atomic_save`), so a run killed at any moment leaves
either the previous checkpoint or the new one, never a torn file.

Checkpoints hold numpy arrays and Python objects, so they are loaded with ``weights_only=False``:
load only checkpoints your own runs wrote.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from portfed._io import atomic_save

#: Bumped whenever the layout of the payload changes; older checkpoints are refused.
CHECKPOINT_FORMAT = 1
CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (unreadable, another format, another run)."""


def save_checkpoint(path: str | os.PathLike[str], fingerprint: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` with the run's ``fingerprint`` (its resolved config and algorithm) atomically."""
    content = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, **payload}
    return atomic_save(path, lambda tmp: torch.save(content, tmp))


def load_checkpoint(path: str | os.PathLike[str], fingerprint: str) -> dict[str, Any]:
    """The payload saved at ``path``; refused unless it was written by a run with ``fingerprint``.

    Raises:
        CheckpointError: the file is unreadable, of another format, or of another run.
    """
    try:
        content = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from exc
    if not isinstance(content, dict) or content.get("format") != CHECKPOINT_FORMAT:
        found = content.get("format") if isinstance(content, dict) else type(content).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} has format {found!r}, expected {CHECKPOINT_FORMAT}")
    if content["fingerprint"] != fingerprint:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was written by a run with another config or algorithm; "
            "resume with the config it was started with, or start a fresh run"
        )
    return {k: v for k, v in content.items() if k not in ("format", "fingerprint")}
