"""Adam for K stacked parameter vectors, functional, with its whole state in one object.

The training engine (:class:`~portfed.agents.batched.BatchedDPGTrainer`) steps its K training
parties at once with it (and ``examples/dpg_trainer.py``, the per-party reference, with K = 1).  Row k has
its own step count (a straggler's Adam clock runs slower); with ``(β₁, β₂, ε)`` from the
agent config (:class:`~portfed.agents.config.AgentConfig`), one step is Kingma & Ba (2015) Alg. 1
in torch's association (``torch.optim.Adam``, no optimizer weight decay — the L2 term is in the
loss), with the bias-correction clock ``t_k = steps_k − origin_k``:

    steps_k ← steps_k + 1,
    m ← m + (1 − β₁)(g − m),          v ← β₂ v + (1 − β₂) g²,
    θ ← θ − (η / (1 − β₁^{t_k})) · m / (√v / √(1 − β₂^{t_k}) + ε).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from portfed.federation.cohort import OPTIMIZER_STATES


@dataclass
class AdamState:
    """First and second moments ``(K, d)``, step counts ``(K,)`` (local iterations run) and the step
    counts ``origin`` ``(K,)`` at the last reset; the bias-correction clock is ``steps − origin``."""

    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    steps: np.ndarray
    origin: np.ndarray

    @classmethod
    def zeros_like(cls, theta: torch.Tensor) -> AdamState:
        """The state before the first step (zero moments, ``t = 0``) for ``theta`` ``(K, d)``."""
        never = np.zeros(theta.shape[0], dtype=np.int64)
        return cls(torch.zeros_like(theta), torch.zeros_like(theta), never.copy(), never)

    def rows(self, index: np.ndarray) -> AdamState:
        """Copies of rows ``index``."""
        at = torch.from_numpy(index).to(self.exp_avg.device)
        return AdamState(self.exp_avg[at], self.exp_avg_sq[at], self.steps[index].copy(),
                         self.origin[index].copy())

    def put(self, index: np.ndarray, part: AdamState) -> None:
        """Write ``part`` into rows ``index``."""
        at = torch.from_numpy(index).to(self.exp_avg.device)
        self.exp_avg[at] = part.exp_avg
        self.exp_avg_sq[at] = part.exp_avg_sq
        self.steps[index] = part.steps
        self.origin[index] = part.origin

    def row_state(self, k: int) -> dict[str, Any]:
        """Row ``k`` as a party's checkpoint entries: CPU copies of its moments, its step and reset origin."""
        return {"exp_avg": self.exp_avg[k].cpu().clone(), "exp_avg_sq": self.exp_avg_sq[k].cpu().clone(),
                "step": int(self.steps[k]), "origin": int(self.origin[k])}

    def load_row_state(self, k: int, state: dict[str, Any]) -> None:
        """Restore row ``k`` from :meth:`row_state` (``origin`` may be absent: a state saved before resets)."""
        for name in ("exp_avg", "exp_avg_sq"):
            if tuple(state[name].shape) != (self.exp_avg.shape[1],):
                raise ValueError(f"Adam {name} has shape {tuple(state[name].shape)}, expected ({self.exp_avg.shape[1]},)")
        device = self.exp_avg.device
        self.put(np.array([k]), AdamState(state["exp_avg"].to(device, torch.float32)[None],
                                          state["exp_avg_sq"].to(device, torch.float32)[None],
                                          np.array([int(state["step"])], dtype=np.int64),
                                          np.array([int(state.get("origin", 0))], dtype=np.int64)))

    def on_new_start(self, index: np.ndarray, how: str) -> None:
        """Rows ``index`` load the server's message: apply ``how`` (one of :data:`OPTIMIZER_STATES`).

        ``reset``: ``m = v = 0`` and ``origin = steps`` (the next step is a fresh Adam's first);
        ``average``: ``m`` and ``v`` of every row become their means over ``index`` (each row keeps its
        own clock; with full participation the clocks agree).
        """
        if how not in OPTIMIZER_STATES:
            raise ValueError(f"unknown optimizer state handling {how!r}; valid: {', '.join(OPTIMIZER_STATES)}")
        if how == "keep" or index.size == 0:
            return
        at = torch.from_numpy(index).to(self.exp_avg.device)
        with torch.no_grad():
            for moments in (self.exp_avg, self.exp_avg_sq):
                moments[at] = 0.0 if how == "reset" else moments[at].mean(dim=0, keepdim=True)
        if how == "reset":
            self.origin[index] = self.steps[index]

    def corrections(self, steps: int, learning_rate: float, betas: tuple[float, float]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The bias corrections of every row's next ``steps`` steps, ``(steps, K, 1)`` each on the moments'
        device: ``−η / (1 − β₁^t)`` and ``√(1 − β₂^t)`` at the clocks ``t = steps_k − origin_k + 1 … + steps``
        (one upload for a whole local call; row ``j`` is what :func:`adam_step` computes at step ``j``)."""
        clock = (self.steps - self.origin)[None, :] + np.arange(1, steps + 1, dtype=np.int64)[:, None]
        beta1, beta2 = betas
        device, dtype = self.exp_avg.device, self.exp_avg.dtype
        return (torch.as_tensor(-learning_rate / (1.0 - beta1**clock), dtype=dtype, device=device).unsqueeze(2),
                torch.as_tensor(np.sqrt(1.0 - beta2**clock), dtype=dtype, device=device).unsqueeze(2))

    def state_dict(self) -> dict[str, Any]:
        """CPU copies of the moments, the step counts and the reset origins."""
        return {"exp_avg": self.exp_avg.cpu().clone(), "exp_avg_sq": self.exp_avg_sq.cpu().clone(),
                "steps": self.steps.copy(), "origin": self.origin.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (same shapes; a state without ``origin`` never reset)."""
        for name in ("exp_avg", "exp_avg_sq"):
            current = getattr(self, name)
            if tuple(state[name].shape) != tuple(current.shape):
                raise ValueError(f"Adam {name} has shape {tuple(state[name].shape)}, expected {tuple(current.shape)}")
            setattr(self, name, state[name].to(current.device, current.dtype).clone())
        steps = np.asarray(state["steps"], dtype=np.int64)
        origin = np.asarray(state.get("origin", np.zeros_like(steps)), dtype=np.int64)
        if steps.shape != self.steps.shape or origin.shape != steps.shape:
            raise ValueError(f"Adam steps/origin have shapes {steps.shape}/{origin.shape}, expected {self.steps.shape}")
        self.steps, self.origin = steps.copy(), origin.copy()


def adam_step(theta: torch.Tensor, grad: torch.Tensor, state: AdamState, *, learning_rate: float,
              betas: tuple[float, float], eps: float,
              corrections: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """One Adam step of every row of ``theta`` ``(K, d)`` in place (module docstring), under ``no_grad``.

    ``corrections``: this step's ``(K, 1)`` rows of :meth:`AdamState.corrections` (already on the device),
    or ``None`` to compute them from the step counts here (an upload per step)."""
    with torch.no_grad():
        if corrections is None:
            (step_size,), (bias2_sqrt,) = state.corrections(1, learning_rate, betas)
        else:
            step_size, bias2_sqrt = corrections
        state.steps += 1
        adam_update(theta, grad, state.exp_avg, state.exp_avg_sq, step_size, bias2_sqrt, betas=betas, eps=eps)


def adam_update(theta: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                step_size: torch.Tensor, bias2_sqrt: torch.Tensor, *, betas: tuple[float, float], eps: float) -> None:
    """The tensor part of :func:`adam_step` (module docstring), in place: the moments and ``θ`` from this step's
    ``(K, 1)`` bias corrections, no step count on the host (the captured step, :mod:`portfed.agents.captured`,
    records it as one graph)."""
    beta1, beta2 = betas
    exp_avg.lerp_(grad, 1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(eps)
    # (value · m) / denom: the association of torch's addcdiv kernel.
    theta.add_((step_size * exp_avg).div_(denom))
