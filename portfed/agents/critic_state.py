"""What an actor-critic party trains beside its row ``[θ | φ]``: the critic's Adam state and the target rows.

The engine (:class:`~portfed.agents.batched.BatchedDPGTrainer`) keeps the K parties' rows ``(K, d_a + d_c)``
and the actor's Adam state; with ``learner: actor_critic`` it also keeps a :class:`CriticState`: Adam's
state of the critic's columns (``critic_learning_rate``) and the target networks' rows ``[θ' | φ']``,
which start as copies of the rows (Lillicrap et al. 2016, Alg. 1: ``θ' ← θ``, ``φ' ← φ``) and stay with
the party (never federated; checkpointed with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from portfed.agents.adam import AdamState


@dataclass
class CriticState:
    """The critic's Adam state ``(K, d_c)`` and the target rows ``(K, d_a + d_c)`` of K parties."""

    adam: AdamState
    targets: torch.Tensor

    @classmethod
    def initial(cls, rows: torch.Tensor, n_actor: int) -> CriticState:
        """Before the first step: zero moments for the critic's columns ``rows[:, n_actor:]``, targets = ``rows``."""
        return cls(AdamState.zeros_like(rows[:, n_actor:]), rows.clone())

    def rows(self, index: np.ndarray) -> CriticState:
        """Copies of rows ``index``."""
        return CriticState(self.adam.rows(index), self.targets[torch.from_numpy(index).to(self.targets.device)])

    def put(self, index: np.ndarray, part: CriticState) -> None:
        """Write ``part`` into rows ``index``."""
        self.adam.put(index, part.adam)
        self.targets[torch.from_numpy(index).to(self.targets.device)] = part.targets

    def row_state(self, k: int) -> dict[str, Any]:
        """Row ``k`` as a party's checkpoint entries ``critic_adam`` and ``targets`` (CPU copies)."""
        return {"critic_adam": self.adam.row_state(k), "targets": self.targets[k].cpu().clone()}

    def load_row_state(self, k: int, state: dict[str, Any]) -> None:
        """Restore row ``k`` from :meth:`row_state`'s entries."""
        if tuple(state["targets"].shape) != (self.targets.shape[1],):
            raise ValueError(f"party {k}: targets have shape {tuple(state['targets'].shape)}, expected "
                             f"({self.targets.shape[1]},)")
        self.adam.load_row_state(k, state["critic_adam"])
        self.targets[k] = state["targets"].to(self.targets.device, torch.float32)

    def state_dict(self) -> dict[str, Any]:
        """Every row: ``critic_adam`` (:meth:`AdamState.state_dict`) and ``targets`` (CPU copies)."""
        return {"critic_adam": self.adam.state_dict(), "targets": self.targets.cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (same shapes)."""
        if tuple(state["targets"].shape) != tuple(self.targets.shape):
            raise ValueError(f"state targets has shape {tuple(state['targets'].shape)}, expected "
                             f"{tuple(self.targets.shape)}")
        self.adam.load_state_dict(state["critic_adam"])
        self.targets = state["targets"].to(self.targets.device, torch.float32).clone()
