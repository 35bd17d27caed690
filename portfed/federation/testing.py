"""A party with a convex quadratic loss, for checking the federation against closed-form answers.

``f_k(w) = ½ (w − c_k)ᵀ A_k (w − c_k)``, minimized at ``c_k``; local training takes exact gradient
steps ``w ← w − η ∇(f_k(w) + μ/2 ‖w − c‖²)`` (the objective's proximal term,
:meth:`LocalObjective.penalty`), each followed by the Fed+ mix ``w ← κ w + (1 − κ) z`` with
``κ = 1/(1 + ησ)`` when the objective mixes towards a target ``z`` — the
:class:`~portfed.federation.cohort.LocalTrainer` protocol, with the step's
:class:`~portfed.federation.cohort.LocalObjective` — and runs the personalised baselines' local rules
(:mod:`~portfed.federation.local_rules`) with the same exact gradients (``train_rule``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portfed.federation.cohort import LocalObjective
from portfed.federation.local_rules import LocalRule, RuleOutput, rule_steps


@dataclass(frozen=True)
class QuadraticStep:
    """One step: ``mean_log_return = −f_k(w)`` (a reward that rises as the loss falls) and the local
    objective ``loss = f_k(w) + μ/2 ‖w − c‖²`` after the step."""

    mean_log_return: float
    loss: float


@dataclass(frozen=True)
class QuadraticTrainResult:
    params: np.ndarray
    records: list[QuadraticStep]


class QuadraticParty:
    """A :class:`~portfed.federation.local_solve.LocalTrainer` with loss ``½ (w − c)ᵀ A (w − c)``.

    Args:
        hessian: ``A``, symmetric positive semi-definite ``(d, d)``.
        center: ``c``, ``(d,)``.
        learning_rate: the step ``η > 0``.
    """

    def __init__(self, hessian: np.ndarray, center: np.ndarray, learning_rate: float) -> None:
        a = np.asarray(hessian, dtype=np.float64)
        c = np.asarray(center, dtype=np.float64)
        if c.ndim != 1 or a.shape != (c.size, c.size):
            raise ValueError(f"hessian must be (d, d) and center (d,), got {a.shape} and {c.shape}")
        if not np.allclose(a, a.T) or np.linalg.eigvalsh(a)[0] < -1e-12:
            raise ValueError("hessian must be symmetric positive semi-definite")
        if not np.isfinite(learning_rate) or learning_rate <= 0:
            raise ValueError(f"learning_rate must be a finite number > 0, got {learning_rate!r}")
        self.hessian, self.center, self.learning_rate = a, c, float(learning_rate)
        self.params = np.zeros_like(c)

    @classmethod
    def random(cls, d: int, rng: np.random.Generator, *, eigenvalues: tuple[float, float] = (0.5, 2.0),
               spread: float = 1.0, learning_rate: float = 0.1) -> QuadraticParty:
        """A party with a random rotation of eigenvalues drawn from ``eigenvalues`` and ``c ~ N(0, spread²)``."""
        q, _ = np.linalg.qr(rng.normal(size=(d, d)))
        lam = rng.uniform(*eigenvalues, size=d)
        return cls((q * lam) @ q.T, spread * rng.normal(size=d), learning_rate)

    def loss(self, w: np.ndarray) -> float:
        r = np.asarray(w, dtype=np.float64) - self.center
        return 0.5 * float(r @ self.hessian @ r)

    def gradient(self, w: np.ndarray) -> np.ndarray:
        return self.hessian @ (np.asarray(w, dtype=np.float64) - self.center)

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> QuadraticTrainResult:
        objective = LocalObjective() if objective is None else objective
        objective.check_size(self.center.size)
        mix, penalty = objective.mix(self.learning_rate), objective.penalty()
        prox_center, prox_coef = penalty if penalty is not None else (None, 0.0)
        w = self.params.copy() if params is None else np.asarray(params, dtype=np.float64).copy()
        records = []
        for _ in range(steps):
            grad = self.gradient(w)
            if prox_coef > 0:
                grad = grad + prox_coef * (w - prox_center)
            w = w - self.learning_rate * grad
            if mix is not None:
                w = mix[1] * w + (1.0 - mix[1]) * mix[0]
            prox_term = 0.0 if prox_coef == 0 else 0.5 * prox_coef * float(np.sum((w - prox_center) ** 2))
            f = self.loss(w)
            records.append(QuadraticStep(mean_log_return=-f, loss=f + prox_term))
        self.params = w
        return QuadraticTrainResult(params=w.copy(), records=records)

    def train_rule(self, params: np.ndarray | None, steps: int, rule: LocalRule) -> tuple[QuadraticTrainResult,
                                                                                           RuleOutput]:
        """A one-row local rule with exact gradients (every "minibatch" is the whole loss)."""
        w = self.params.copy() if params is None else np.asarray(params, dtype=np.float64).copy()

        def oracle(rows: np.ndarray, s: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            loss = np.array([self.loss(row) for row in rows])
            return loss, -loss, np.stack([self.gradient(row) for row in rows])

        new, output, rewards, losses = rule_steps(rule, w[None, :], np.array([steps]), self.learning_rate, oracle)
        self.params = new[0]
        records = [QuadraticStep(mean_log_return=float(r), loss=float(v)) for r, v in zip(rewards[0], losses[0],
                                                                                        strict=True)]
        return QuadraticTrainResult(params=new[0].copy(), records=records), output
