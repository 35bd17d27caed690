"""FedMGDA+: the server step of federated multiple-gradient descent (paper 002 §5, eq. 25; DESIGN §6).

The active clients send their models ``w_i``; the server forms the updates ``d_i = w_i − w`` from its
global model ``w``, normalizes them to unit length (robustness to multiplicative "inflation",
paper 002 §5), and finds the common direction of minimum norm in their convex hull, with the
weights kept within ``ε`` of the a-priori weights ``λ_0``:

    λ* = argmin_λ ½‖Σ_i λ_i d̂_i‖² = ½ λᵀGλ   s.t.  λ ∈ Δ (the simplex),  ‖λ − λ_0‖_∞ <= ε,

``G_ij = d̂_i·d̂_j`` (plus a tiny ridge that makes λ* unique); then ``w ← w + η_t Σ_i λ*_i d̂_i``.
``ε = 0`` fixes ``λ = λ_0`` (FedAvg's weighting of the normalized updates, "FedAvg-n", the registry's
``fedavg-n``); ``ε >= 1`` leaves the whole simplex (MGDA).  A zero update is kept as the zero vector (it cannot be
normalized); it then pulls the common direction to zero, as a client at a stationary point should.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MinNormResult:
    """QP weights ``λ`` (``(K,)``), accelerated projected-gradient iterations run, and convergence."""

    weights: np.ndarray
    iterations: int
    converged: bool


def project_capped_simplex(v: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{λ : Σλ = 1, lower <= λ <= upper}`` (assumed non-empty).

    The projection is ``clip(v − τ, lower, upper)`` with ``τ`` solving ``s(τ) = Σ clip(v − τ) = 1``;
    ``s`` is non-increasing and piecewise linear with breakpoints ``v − lower`` and ``v − upper``,
    so ``τ`` is found exactly by evaluating ``s`` at all breakpoints and interpolating linearly.
    """
    breaks = np.unique(np.concatenate([v - lower, v - upper]))  # ascending
    sums = np.clip(v[None, :] - breaks[:, None], lower, upper).sum(axis=1)  # non-increasing
    # The first breakpoint where s <= 1; s is linear between it and the one before.
    j = int(np.argmax(sums <= 1.0))
    if j == 0:
        tau = breaks[0]
    else:
        t0, t1, s0, s1 = breaks[j - 1], breaks[j], sums[j - 1], sums[j]
        tau = t0 + (s0 - 1.0) * (t1 - t0) / (s0 - s1)
    return np.clip(v - tau, lower, upper)


def min_norm_weights(
    gram: np.ndarray,
    *,
    prior: np.ndarray | None = None,
    epsilon: float = 1.0,
    ridge: float = 1e-12,
    tol: float = 1e-12,
    max_iter: int = 20_000,
) -> MinNormResult:
    """Solve ``min ½ λᵀ(G + ridge·I)λ`` over the simplex with ``‖λ − λ_0‖_∞ <= ε`` (paper 002 eq. 25).

    Accelerated projected gradient (FISTA with adaptive restart) with step ``1/L``,
    ``L = λ_max(G) + ridge``, and the exact projection of :func:`project_capped_simplex`; stops when
    the projected-gradient step moves ``λ`` by at most ``tol`` (∞-norm).

    Args:
        gram: ``(K, K)`` symmetric positive semi-definite Gram matrix of the (normalized) updates.
        prior: ``λ_0`` on the simplex (uniform when ``None``).
        epsilon: ``ε >= 0``; 0 returns ``λ_0``, >= 1 is the unconstrained simplex (MGDA).
        ridge: ``>= 0``, added to the diagonal so the minimizer is unique.
    """
    g = np.asarray(gram, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] != g.shape[1] or g.shape[0] < 1 or not np.all(np.isfinite(g)):
        raise ValueError(f"gram must be a finite square (K, K) matrix, got shape {g.shape}")
    if not np.allclose(g, g.T, rtol=1e-10, atol=1e-12):
        raise ValueError("gram must be symmetric")
    k = g.shape[0]
    lam0 = np.full(k, 1.0 / k) if prior is None else np.asarray(prior, dtype=np.float64)
    if lam0.shape != (k,) or np.any(lam0 < 0) or not np.isclose(lam0.sum(), 1.0, rtol=0, atol=1e-9):
        raise ValueError(f"prior must be a point of the simplex of size {k}, got {lam0.tolist()}")
    if not np.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if not np.isfinite(ridge) or ridge < 0:
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
    lower = np.maximum(lam0 - epsilon, 0.0)
    upper = np.minimum(lam0 + epsilon, 1.0)
    if k == 1 or epsilon == 0:
        return MinNormResult(weights=lam0.copy(), iterations=0, converged=True)
    q = g + ridge * np.eye(k)
    lipschitz = float(np.linalg.eigvalsh(q)[-1])
    if lipschitz <= 0:  # every update is zero: every feasible λ is optimal
        return MinNormResult(weights=lam0.copy(), iterations=0, converged=True)
    lam = project_capped_simplex(lam0, lower, upper)
    momentum_point, t = lam.copy(), 1.0
    for iteration in range(1, max_iter + 1):
        new = project_capped_simplex(momentum_point - (q @ momentum_point) / lipschitz, lower, upper)
        if float(np.max(np.abs(new - momentum_point))) <= tol:
            return MinNormResult(weights=new, iterations=iteration, converged=True)
        if (momentum_point - new) @ (new - lam) > 0:  # restart when momentum points uphill
            momentum_point, t = new.copy(), 1.0
        else:
            t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
            momentum_point = new + ((t - 1.0) / t_next) * (new - lam)
            t = t_next
        lam = new
    return MinNormResult(weights=lam, iterations=max_iter, converged=False)


@dataclass(frozen=True)
class FedMGDAStep:
    """New global model, the QP weights λ*, the common direction ``Σ λ*_i d̂_i``, and QP diagnostics."""

    global_model: np.ndarray
    weights: np.ndarray
    direction: np.ndarray
    iterations: int
    converged: bool


def fedmgda_step(
    received: np.ndarray,
    global_model: np.ndarray,
    *,
    epsilon: float,
    step_size: float,
    prior: np.ndarray | None = None,
) -> FedMGDAStep:
    """One FedMGDA+ server step: ``w ← w + η_t Σ_i λ*_i d̂_i`` with ``d̂_i = (w_i − w)/‖w_i − w‖``.

    Args:
        received: ``(K, d)`` client models ``w_i``.
        global_model: ``(d,)`` the server's model ``w`` the clients started from.
        epsilon: the fairness budget ``ε`` of :func:`min_norm_weights`.
        step_size: the global step ``η_t > 0``.
        prior: ``λ_0`` (uniform when ``None``).
    """
    if not np.isfinite(step_size) or step_size <= 0:
        raise ValueError(f"step_size must be a finite number > 0, got {step_size!r}")
    updates = received - global_model
    norms = np.linalg.norm(updates, axis=1, keepdims=True)
    unit = np.divide(updates, norms, out=np.zeros_like(updates), where=norms > 0)
    solution = min_norm_weights(unit @ unit.T, prior=prior, epsilon=epsilon)
    direction = solution.weights @ unit
    return FedMGDAStep(
        global_model=global_model + step_size * direction,
        weights=solution.weights,
        direction=direction,
        iterations=solution.iterations,
        converged=solution.converged,
    )
