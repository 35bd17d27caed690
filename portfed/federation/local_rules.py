"""Local iterations of the personalised baselines, written once over a gradient oracle.

A :class:`LocalRule` on a :class:`~portfed.federation.cohort.CohortPlan` replaces the plain local step
``w ← w − η ∇f_k(w)`` (the Fed+ Local-Solve, :mod:`.local_solve`) by one of these classes (``kind`` in
brackets, the name a cohort lists in its ``local_rules``):

* :class:`ScaffoldRule` (``scaffold``) — SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
  Learning", Alg. 1 line 10): ``y ← y − η (g(y) + s)`` with the shift ``s = c − c_k`` (server minus
  party control variate).  After the ``E_k`` steps the party's new control variate is option II of
  line 12: ``c_k⁺ = c_k − c + (x − y)/(E_k η) = (x − y)/(E_k η) − s`` (``x`` the model it started from).
* :class:`PerFedAvgRule` (``perfedavg``) — Per-FedAvg, first-order version (Fallah et al., "Personalized Federated Learning with
  Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", eq. (8) with the Hessian term
  dropped, their FO variant): ``w̄ = w − α g(w; D)``, ``w ← w − η g(w̄; D′)`` on two independent
  minibatches ``D``, ``D′`` of the step; ``α`` is ``inner_lr``.
* :class:`PFedMeRule` (``pfedme``) — pFedMe (Dinh et al., "Personalized Federated Learning with Moreau Envelopes", Alg. 1):
  per step on minibatch ``D``, the personal model ``θ ≈ argmin_θ f(θ; D) + λ/2 ‖θ − w‖²`` (eq. 7) by
  ``inner_steps`` proximal-gradient steps ``θ ← κ(θ − ν g(θ; D)) + (1 − κ) w`` with ``κ = 1/(1 + νλ)``,
  ``ν`` = ``inner_lr`` — the exact minimiser of the linearised problem, stable for any λ (the paper's
  solver takes plain gradient steps on the sum, which diverge once ``νλ > 2``; both have the same fixed
  point) — then the local update ``w ← w − ηλ (w − θ)`` (Alg. 1 line 8).  ``θ`` starts at the model
  the party received and is carried across the steps of the round.
* :class:`APFLRule` (``apfl``) — APFL (Deng et al., "Adaptive Personalized Federated Learning", Alg. 1): with the mixed
  model ``v̄ = α v + (1 − α) w``, per step on one minibatch: ``w ← w − η g(w)``, ``v ← v − η α g(v̄)``
  (``∇_v f(v̄) = α ∇f(v̄)``) and ``α ← clip₍₀,₁₎(α − η_α ⟨v − w, g(v̄)⟩)`` (``∂f(v̄)/∂α``, eq. 10);
  ``η_α = 0`` keeps α fixed.
* :class:`AdaptRule` (``adapt``) — plain gradient steps at the step size ``inner_lr`` instead of the party's ``η``
  (Per-FedAvg's personalisation of the global model before evaluation).

:func:`rule_steps` runs a rule for ``K`` stacked rows given ``oracle(W, s, j)`` — the loss, reward and
gradient of every row of ``W`` on its ``j``-th minibatch of step ``s`` — so the batched convex models,
the per-party CNN and the closed-form quadratic parties share this one implementation.  Rows stop
after their own ``steps[k]`` (stragglers).  Besides the new models it returns a :class:`RuleOutput`:
SCAFFOLD's ``c_k⁺``, pFedMe's ``θ_k`` or APFL's ``v_k`` and ``α_k``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from portfed.validation import check_int

#: ``oracle(W, s, j)`` → ``(loss (K,), reward (K,), grad (K, d))`` of the rows of ``W`` on their ``j``-th
#: minibatch of step ``s``.
Oracle = Callable[[np.ndarray, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]
#: One step's ``(new rows, loss (K,), reward (K,))``.
Step = tuple[np.ndarray, np.ndarray, np.ndarray]


def _rows(value: np.ndarray | None, name: str, ndim: int) -> np.ndarray | None:
    if value is None:
        return None
    array = np.array(value, dtype=np.float64)
    if array.ndim != ndim or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a finite {ndim}-D array, got shape {array.shape}")
    array.setflags(write=False)
    return array


def _step_size(value: object, name: str, kind: str, positive: bool) -> float:
    result = float(value)  # type: ignore[arg-type]
    if not np.isfinite(result) or result < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if positive and result <= 0:
        raise ValueError(f"local rule {kind!r} needs {name} > 0, got {value!r}")
    return result


@dataclass(frozen=True)
class RuleOutput:
    """What a rule's party keeps besides its message: ``companion`` ``(K, d)`` (SCAFFOLD ``c_k⁺``, pFedMe
    ``θ_k``, APFL ``v_k``; ``None`` for the others) and ``alpha`` ``(K,)`` (APFL ``α_k``)."""

    companion: np.ndarray | None = None
    alpha: np.ndarray | None = None


@dataclass(frozen=True)
class LocalRule(ABC):
    """The local iteration of a personalised baseline for ``K`` rows (module docstring); ``ROWS`` names its
    per-row arrays (``(K, d)`` or ``(K,)``), which :meth:`take` selects and :meth:`check` sizes."""

    kind: ClassVar[str]
    ROWS: ClassVar[tuple[tuple[str, int], ...]] = ()

    @property
    def batches_per_step(self) -> int:
        """Minibatches drawn per step (one; Per-FedAvg's ``D`` and ``D′``: two)."""
        return 1

    def check(self, k: int, d: int) -> None:
        """Raise ``ValueError`` unless the per-row arrays have ``k`` rows of ``d`` parameters."""
        for name, ndim in self.ROWS:
            value, shape = getattr(self, name), (k, d) if ndim == 2 else (k,)
            if value.shape != shape:
                raise ValueError(f"local rule {self.kind!r}: {name} has shape {value.shape}, expected {shape}")

    def take(self, rows: np.ndarray) -> LocalRule:
        """The rule of rows ``rows`` only."""
        return dataclasses.replace(self, **{name: getattr(self, name)[rows] for name, _ in self.ROWS})

    def begin(self, start: np.ndarray) -> dict[str, np.ndarray]:
        """What the rule carries from step to step besides the rows (nothing by default)."""
        return {}

    @abstractmethod
    def step(self, w: np.ndarray, s: int, live: np.ndarray, eta: float, oracle: Oracle,
             carry: dict[str, np.ndarray]) -> Step:
        """Step ``s`` of the rows ``w`` (``live``: ``(K, 1)``, the rows still stepping; ``carry`` updated in place)."""

    def output(self, start: np.ndarray, w: np.ndarray, steps: np.ndarray, eta: float,
               carry: dict[str, np.ndarray]) -> RuleOutput:
        """What the parties keep after their steps (nothing by default)."""
        return RuleOutput()


@dataclass(frozen=True)
class ScaffoldRule(LocalRule):
    """SCAFFOLD's step ``y ← y − η (g(y) + s)`` with ``shift`` ``s = c − c_k`` ``(K, d)``; output ``c_k⁺``."""

    kind: ClassVar[str] = "scaffold"
    ROWS: ClassVar[tuple[tuple[str, int], ...]] = (("shift", 2),)
    shift: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "shift", _rows(self.shift, "shift", 2))

    def step(self, w: np.ndarray, s: int, live: np.ndarray, eta: float, oracle: Oracle,
             carry: dict[str, np.ndarray]) -> Step:
        loss, reward, grad = oracle(w, s, 0)
        return w - eta * (grad + self.shift), loss, reward

    def output(self, start: np.ndarray, w: np.ndarray, steps: np.ndarray, eta: float,
               carry: dict[str, np.ndarray]) -> RuleOutput:
        """``c_k⁺ = (x − y)/(E_k η) − s``; a row that ran no step has none (the caller keeps ``c_k``)."""
        drift = (np.asarray(start, dtype=np.float64) - w) / (np.maximum(steps, 1)[:, None] * eta)
        return RuleOutput(companion=drift - self.shift)


@dataclass(frozen=True)
class PerFedAvgRule(LocalRule):
    """Per-FedAvg (FO): ``w̄ = w − α g(w; D)``, ``w ← w − η g(w̄; D′)`` with ``inner_lr`` α > 0."""

    kind: ClassVar[str] = "perfedavg"
    inner_lr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "inner_lr", _step_size(self.inner_lr, "inner_lr", self.kind, True))

    @property
    def batches_per_step(self) -> int:
        return 2

    def step(self, w: np.ndarray, s: int, live: np.ndarray, eta: float, oracle: Oracle,
             carry: dict[str, np.ndarray]) -> Step:
        loss, reward, grad = oracle(w, s, 0)
        _, _, grad_meta = oracle(w - self.inner_lr * grad, s, 1)
        return w - eta * grad_meta, loss, reward


@dataclass(frozen=True)
class AdaptRule(LocalRule):
    """Plain gradient steps of size ``inner_lr`` > 0 instead of the party's η (Per-FedAvg's adaptation)."""

    kind: ClassVar[str] = "adapt"
    inner_lr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "inner_lr", _step_size(self.inner_lr, "inner_lr", self.kind, True))

    def step(self, w: np.ndarray, s: int, live: np.ndarray, eta: float, oracle: Oracle,
             carry: dict[str, np.ndarray]) -> Step:
        loss, reward, grad = oracle(w, s, 0)
        return w - self.inner_lr * grad, loss, reward


@dataclass(frozen=True)
class PFedMeRule(LocalRule):
    """pFedMe with λ ``reg``, K ``inner_steps`` and ν ``inner_lr`` > 0; carries and outputs ``θ``."""

    kind: ClassVar[str] = "pfedme"
    reg: float
    inner_steps: int
    inner_lr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "reg", _step_size(self.reg, "reg", self.kind, False))
        object.__setattr__(self, "inner_steps", check_int(self.inner_steps, "inner_steps", minimum=1))
        object.__setattr__(self, "inner_lr", _step_size(self.inner_lr, "inner_lr", self.kind, True))

    def begin(self, start: np.ndarray) -> dict[str, np.ndarray]:
        return {"theta": start.copy()}

    def step(self, w: np.ndarray, s: int, live: np.ndarray, eta: float, oracle: Oracle,
             carry: dict[str, np.ndarray]) -> Step:
        loss, reward, _ = oracle(w, s, 0)
        kappa = 1.0 / (1.0 + self.inner_lr * self.reg)
        theta = carry["theta"]
        for _ in range(self.inner_steps):
            _, _, grad_theta = oracle(theta, s, 0)
            theta = kappa * (theta - self.inner_lr * grad_theta) + (1.0 - kappa) * w
        carry["theta"] = np.where(live, theta, carry["theta"])
        return w - eta * self.reg * (w - theta), loss, reward

    def output(self, start: np.ndarray, w: np.ndarray, steps: np.ndarray, eta: float,
               carry: dict[str, np.ndarray]) -> RuleOutput:
        return RuleOutput(companion=carry["theta"])


@dataclass(frozen=True)
class APFLRule(LocalRule):
    """APFL with ``companion`` ``v_k`` ``(K, d)``, ``alpha`` ``α_k`` ``(K,)`` in [0, 1] and ``alpha_lr`` η_α."""

    kind: ClassVar[str] = "apfl"
    ROWS: ClassVar[tuple[tuple[str, int], ...]] = (("companion", 2), ("alpha", 1))
    companion: np.ndarray
    alpha: np.ndarray
    alpha_lr: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "companion", _rows(self.companion, "companion", 2))
        object.__setattr__(self, "alpha", _rows(self.alpha, "alpha", 1))
        object.__setattr__(self, "alpha_lr", _step_size(self.alpha_lr, "alpha_lr", self.kind, False))
        if not np.all((self.alpha >= 0) & (self.alpha <= 1)):
            raise ValueError(f"APFL's alpha must lie in [0, 1], got {self.alpha.tolist()}")

    def begin(self, start: np.ndarray) -> dict[str, np.ndarray]:
        return {"v": np.array(self.companion), "alpha": np.array(self.alpha)}

    def step(self, w: np.ndarray, s: int, live: np.ndarray, eta: float, oracle: Oracle,
             carry: dict[str, np.ndarray]) -> Step:
        """Losses and rewards are the mixed model ``v̄``'s."""
        v, alpha = carry["v"], carry["alpha"]
        mixed = alpha[:, None] * v + (1.0 - alpha[:, None]) * w
        _, _, grad_w = oracle(w, s, 0)
        loss, reward, grad_mixed = oracle(mixed, s, 0)
        new_v = v - eta * (alpha[:, None] * grad_mixed)
        if self.alpha_lr > 0:
            slope = np.sum((v - w) * grad_mixed, axis=1)
            carry["alpha"] = np.where(live[:, 0], np.clip(alpha - self.alpha_lr * slope, 0.0, 1.0), alpha)
        carry["v"] = np.where(live, new_v, v)
        return w - eta * grad_w, loss, reward

    def output(self, start: np.ndarray, w: np.ndarray, steps: np.ndarray, eta: float,
               carry: dict[str, np.ndarray]) -> RuleOutput:
        return RuleOutput(companion=carry["v"], alpha=carry["alpha"])


#: Every rule's ``kind``: what a cohort that runs them all declares.
RULES: tuple[str, ...] = tuple(rule.kind for rule in (ScaffoldRule, PerFedAvgRule, PFedMeRule, APFLRule, AdaptRule))


def rule_steps(rule: LocalRule, start: np.ndarray, steps: np.ndarray, learning_rate: float,
               oracle: Oracle) -> tuple[np.ndarray, RuleOutput, np.ndarray, np.ndarray]:
    """Run ``rule`` on the ``K`` rows of ``start`` (row ``k`` for ``steps[k]`` steps at step size η).

    Returns the new ``(K, d)`` models (the messages), the :class:`RuleOutput` and ``(K, S)`` rewards and
    losses measured before each step (NaN after a row's last step; APFL: of the mixed model ``v̄``).
    """
    w = np.array(start, dtype=np.float64)
    k, d = w.shape
    rule.check(k, d)
    steps = np.asarray(steps, dtype=np.int64)
    eta = float(learning_rate)
    n_steps = int(steps.max()) if k else 0
    rewards, losses = np.full((k, n_steps), np.nan), np.full((k, n_steps), np.nan)
    carry = rule.begin(w)
    for s in range(n_steps):
        live = (steps > s)[:, None]
        new_w, loss, reward = rule.step(w, s, live, eta, oracle, carry)
        w = np.where(live, new_w, w)
        rewards[live[:, 0], s], losses[live[:, 0], s] = reward[live[:, 0]], loss[live[:, 0]]
    return w, rule.output(start, w, steps, eta, carry), rewards, losses
