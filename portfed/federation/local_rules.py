"""Local iterations of the personalised baselines, written once over a gradient oracle.

A :class:`LocalRule` on a :class:`~portfed.federation.cohort.CohortPlan` replaces the plain local step
``w ← w − η ∇f_k(w)`` (the Fed+ Local-Solve, :mod:`.local_solve`) by one of:

* ``scaffold`` — SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
  Learning", Alg. 1 line 10): ``y ← y − η (g(y) + s)`` with the shift ``s = c − c_k`` (server minus
  party control variate).  After the ``E_k`` steps the party's new control variate is option II of
  line 12: ``c_k⁺ = c_k − c + (x − y)/(E_k η) = (x − y)/(E_k η) − s`` (``x`` the model it started from).
* ``perfedavg`` — Per-FedAvg, first-order version (Fallah et al., "Personalized Federated Learning with
  Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", eq. (8) with the Hessian term
  dropped, their FO variant): ``w̄ = w − α g(w; D)``, ``w ← w − η g(w̄; D′)`` on two independent
  minibatches ``D``, ``D′`` of the step; ``α`` is ``inner_lr``.
* ``pfedme`` — pFedMe (Dinh et al., "Personalized Federated Learning with Moreau Envelopes", Alg. 1):
  per step on minibatch ``D``, the personal model ``θ ≈ argmin_θ f(θ; D) + λ/2 ‖θ − w‖²`` (eq. 7) by
  ``inner_steps`` proximal-gradient steps ``θ ← κ(θ − ν g(θ; D)) + (1 − κ) w`` with ``κ = 1/(1 + νλ)``,
  ``ν`` = ``inner_lr`` — the exact minimiser of the linearised problem, stable for any λ (the paper's
  solver takes plain gradient steps on the sum, which diverge once ``νλ > 2``; both have the same fixed
  point) — then the local update ``w ← w − ηλ (w − θ)`` (Alg. 1 line 8).  ``θ`` starts at the model
  the party received and is carried across the steps of the round.
* ``apfl`` — APFL (Deng et al., "Adaptive Personalized Federated Learning", Alg. 1): with the mixed
  model ``v̄ = α v + (1 − α) w``, per step on one minibatch: ``w ← w − η g(w)``, ``v ← v − η α g(v̄)``
  (``∇_v f(v̄) = α ∇f(v̄)``) and ``α ← clip₍₀,₁₎(α − η_α ⟨v − w, g(v̄)⟩)`` (``∂f(v̄)/∂α``, eq. 10);
  ``η_α = 0`` keeps α fixed.
* ``adapt`` — plain gradient steps at the step size ``inner_lr`` instead of the party's ``η``
  (Per-FedAvg's personalisation of the global model before evaluation).

:func:`rule_steps` runs a rule for ``K`` stacked rows given ``oracle(W, s, j)`` — the loss, reward and
gradient of every row of ``W`` on its ``j``-th minibatch of step ``s`` — so the batched convex models,
the per-party CNN and the closed-form quadratic parties share this one implementation.  Rows stop
after their own ``steps[k]`` (stragglers).  Besides the new models it returns a :class:`RuleOutput`:
SCAFFOLD's ``c_k⁺``, pFedMe's ``θ_k`` or APFL's ``v_k`` and ``α_k``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from portfed.validation import check_int

RULES: tuple[str, ...] = ("scaffold", "perfedavg", "pfedme", "apfl", "adapt")

#: ``oracle(W, s, j)`` → ``(loss (K,), reward (K,), grad (K, d))`` of the rows of ``W`` on their ``j``-th
#: minibatch of step ``s``.
Oracle = Callable[[np.ndarray, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _rows(value: np.ndarray | None, name: str, ndim: int) -> np.ndarray | None:
    if value is None:
        return None
    array = np.array(value, dtype=np.float64)
    if array.ndim != ndim or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a finite {ndim}-D array, got shape {array.shape}")
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class LocalRule:
    """The local iteration of a personalised baseline for ``K`` rows (module docstring).

    ``shift`` ``(K, d)``: SCAFFOLD's ``c − c_k``; ``companion`` ``(K, d)``: APFL's ``v_k``; ``alpha``
    ``(K,)``: APFL's ``α_k``; ``reg`` pFedMe's λ, ``inner_steps`` its K, ``inner_lr`` pFedMe's ν,
    Per-FedAvg's α or the ``adapt`` step; ``alpha_lr`` APFL's ``η_α``.
    """

    kind: str
    shift: np.ndarray | None = None
    companion: np.ndarray | None = None
    alpha: np.ndarray | None = None
    reg: float = 0.0
    inner_steps: int = 1
    inner_lr: float = 0.0
    alpha_lr: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in RULES:
            raise ValueError(f"unknown local rule {self.kind!r}; valid: {', '.join(RULES)}")
        object.__setattr__(self, "shift", _rows(self.shift, "shift", 2))
        object.__setattr__(self, "companion", _rows(self.companion, "companion", 2))
        object.__setattr__(self, "alpha", _rows(self.alpha, "alpha", 1))
        object.__setattr__(self, "inner_steps", check_int(self.inner_steps, "inner_steps", minimum=1))
        for name in ("reg", "inner_lr", "alpha_lr"):
            value = float(getattr(self, name))
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)
        needs = {"scaffold": ("shift",), "apfl": ("companion", "alpha")}.get(self.kind, ())
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"local rule {self.kind!r} needs {', '.join(missing)}")
        if self.kind in ("perfedavg", "adapt", "pfedme") and self.inner_lr <= 0:
            raise ValueError(f"local rule {self.kind!r} needs inner_lr > 0, got {self.inner_lr!r}")
        if self.alpha is not None and not np.all((self.alpha >= 0) & (self.alpha <= 1)):
            raise ValueError(f"APFL's alpha must lie in [0, 1], got {self.alpha.tolist()}")

    @property
    def batches_per_step(self) -> int:
        """Minibatches drawn per step: two for Per-FedAvg (``D`` and ``D′``), else one."""
        return 2 if self.kind == "perfedavg" else 1

    def check(self, k: int, d: int) -> None:
        """Raise ``ValueError`` unless the per-row arrays have ``k`` rows of ``d`` parameters."""
        for name, shape in (("shift", (k, d)), ("companion", (k, d)), ("alpha", (k,))):
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"local rule {self.kind!r}: {name} has shape {value.shape}, expected {shape}")

    def take(self, rows: np.ndarray) -> LocalRule:
        """The rule of rows ``rows`` only."""
        def pick(array: np.ndarray | None) -> np.ndarray | None:
            return None if array is None else array[rows]

        return LocalRule(kind=self.kind, shift=pick(self.shift), companion=pick(self.companion),
                         alpha=pick(self.alpha), reg=self.reg, inner_steps=self.inner_steps,
                         inner_lr=self.inner_lr, alpha_lr=self.alpha_lr)


@dataclass(frozen=True)
class RuleOutput:
    """What a rule's party keeps besides its message: ``companion`` ``(K, d)`` (SCAFFOLD ``c_k⁺``, pFedMe
    ``θ_k``, APFL ``v_k``; ``None`` for the others) and ``alpha`` ``(K,)`` (APFL ``α_k``)."""

    companion: np.ndarray | None = None
    alpha: np.ndarray | None = None


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
    theta = w.copy()
    v = None if rule.companion is None else np.array(rule.companion)
    alpha = None if rule.alpha is None else np.array(rule.alpha)
    for s in range(n_steps):
        live = (steps > s)[:, None]
        if rule.kind == "apfl":
            mixed = alpha[:, None] * v + (1.0 - alpha[:, None]) * w  # type: ignore[index, operator]
            _, _, grad_w = oracle(w, s, 0)
            loss, reward, grad_mixed = oracle(mixed, s, 0)
            new_w = w - eta * grad_w
            new_v = v - eta * (alpha[:, None] * grad_mixed)  # type: ignore[index, operator]
            if rule.alpha_lr > 0:
                slope = np.sum((v - w) * grad_mixed, axis=1)  # type: ignore[operator]
                alpha = np.where(live[:, 0], np.clip(alpha - rule.alpha_lr * slope, 0.0, 1.0), alpha)  # type: ignore[operator]
            v = np.where(live, new_v, v)
        else:
            loss, reward, grad = oracle(w, s, 0)
            if rule.kind == "scaffold":
                new_w = w - eta * (grad + rule.shift)  # type: ignore[operator]
            elif rule.kind == "adapt":
                new_w = w - rule.inner_lr * grad
            elif rule.kind == "perfedavg":
                _, _, grad_meta = oracle(w - rule.inner_lr * grad, s, 1)
                new_w = w - eta * grad_meta
            else:  # pfedme
                kappa = 1.0 / (1.0 + rule.inner_lr * rule.reg)
                new_theta = theta
                for _ in range(rule.inner_steps):
                    _, _, grad_theta = oracle(new_theta, s, 0)
                    new_theta = kappa * (new_theta - rule.inner_lr * grad_theta) + (1.0 - kappa) * w
                new_w = w - eta * rule.reg * (w - new_theta)
                theta = np.where(live, new_theta, theta)
        w = np.where(live, new_w, w)
        rewards[live[:, 0], s], losses[live[:, 0], s] = reward[live[:, 0]], loss[live[:, 0]]
    output = RuleOutput()
    if rule.kind == "scaffold":
        # c_k⁺ = (x − y)/(E_k η) − s; a row that ran no step has no new control variate (the caller keeps c_k)
        drift = (np.asarray(start, dtype=np.float64) - w) / (np.maximum(steps, 1)[:, None] * eta)
        output = RuleOutput(companion=drift - rule.shift)  # type: ignore[operator]
    elif rule.kind == "pfedme":
        output = RuleOutput(companion=theta)
    elif rule.kind == "apfl":
        output = RuleOutput(companion=v, alpha=alpha)
    return w, output, rewards, losses
