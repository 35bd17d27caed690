"""Federated algorithms on convex quadratics, where the answers are known in closed form.

Party k has ``f_k(w) = ½ (w − c_k)ᵀ A_k (w − c_k)``.  Paper 000's ``α`` is paper 003's ``σ``.  With many
exact gradient steps per round, Local-Solve returns the exact minimizer of
``f_k(w) + σ/2 ‖w − z_k‖²``, i.e. ``w_k = prox_{f_k/σ}(z_k) = (A_k + σI)^{-1}(A_k c_k + σ z_k)``
(paper 000 Assumption 1, eq. 15), and the Moreau envelope ``f̃_k(z) = min_w f_k(w) + σ/2 ‖w − z‖²``
(eq. 16) has gradient ``∇f̃_k(z) = σ (z − prox_{f_k/σ}(z))``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from portfed.federation.aggregate import coordinate_median
from portfed.federation.algorithms import ALGORITHMS, Schedule, make_algorithm
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty
from portfed.federation.rounds import run_rounds
from portfed.federation.server import CoordinateMedianRule
from portfed.federation.testing import QuadraticParty

D = 3


def _parties(k: int, seed: int) -> list[QuadraticParty]:
    rng = np.random.default_rng(seed)
    return [QuadraticParty.random(D, rng, spread=2.0, learning_rate=0.3) for _ in range(k)]


def _prox_f(party: QuadraticParty, z: np.ndarray, sigma: float) -> np.ndarray:
    return np.linalg.solve(party.hessian + sigma * np.eye(D), party.hessian @ party.center + sigma * z)


def _grad_envelope(party: QuadraticParty, z: np.ndarray, sigma: float) -> np.ndarray:
    return sigma * (z - _prox_f(party, z, sigma))


def test_fedavg_with_one_exact_gradient_step_minimizes_the_average_loss() -> None:
    """FedAvg, E = 1: ``w̃ ← mean_k (w̃ − η∇f_k(w̃))`` is gradient descent on ``mean_k f_k``, whose
    minimizer is ``(Σ_k A_k)^{-1} Σ_k A_k c_k``."""
    parties = _parties(4, seed=1)
    run = run_rounds(parties, make_algorithm("fedavg"), 300, 1, seed=0, init_params=np.zeros(D))
    expected = np.linalg.solve(sum(p.hessian for p in parties), sum(p.hessian @ p.center for p in parties))
    np.testing.assert_allclose(run.state.global_model, expected, atol=1e-10)
    assert np.linalg.norm(expected - np.mean([p.center for p in parties], axis=0)) > 0.05  # not just the mean


def test_local_training_converges_to_each_partys_own_minimizer() -> None:
    """Local (λ = σ = 0): paper 000 Corollary 1(a), ``w_k* ∈ argmin f_k``, i.e. ``w_k* = c_k``."""
    parties = _parties(4, seed=2)
    run = run_rounds(parties, make_algorithm("local"), 20, 50, seed=0, init_params=np.zeros(D))
    np.testing.assert_allclose(run.state.party_models, [p.center for p in parties], atol=1e-10)


@pytest.mark.parametrize("update", ["mix", "loss"])
def test_fedprox_reaches_its_fixed_point_corollary_1b(update: str) -> None:
    """FedProx (θ = 0, so z_k = w̃): paper 000 Corollary 1(b), eq. 24:
    ``mean_k ∇f̃_k(w̃*) = 0`` and ``w_k* = w̃* − (1/σ) ∇f̃_k(w̃*)``.
    Independently, ``w̃* = mean_k prox_{f_k/σ}(w̃*)`` is a linear system, solved here directly.

    Both readings of the pull reach it: with exact gradient steps the mix is gradient descent with step
    ``ηκ`` on ``f_k + σ/2 ‖w − z_k‖²`` (paper 003 Prop. 1) and ``loss`` is gradient descent with step
    ``η`` on the same function, so a local solve run to convergence is ``prox_{f_k/σ}(z_k)`` either way
    (the paths differ: :func:`test_mix_and_loss_take_their_own_first_step`)."""
    sigma = 1.0
    parties = _parties(4, seed=3)
    run = run_rounds(parties, make_algorithm("fedprox", sigma=sigma), 100, 80, seed=0, init_params=np.zeros(D),
                     proximal_update=update)
    w_tilde, models = run.state.global_model, run.state.party_models
    m = [np.linalg.inv(p.hessian + sigma * np.eye(D)) for p in parties]
    lhs = np.eye(D) - sigma * np.mean(m, axis=0)
    rhs = np.mean([mk @ p.hessian @ p.center for mk, p in zip(m, parties, strict=True)], axis=0)
    np.testing.assert_allclose(w_tilde, np.linalg.solve(lhs, rhs), atol=1e-9)
    grads = [_grad_envelope(p, w_tilde, sigma) for p in parties]
    np.testing.assert_allclose(np.mean(grads, axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(models, [w_tilde - g / sigma for g in grads], atol=1e-9)
    # The personalized models differ from the global one: FedProx does not reach consensus here.
    assert np.min(np.linalg.norm(models - w_tilde, axis=1)) > 1e-2


def _fedavg_plus_fixed_point(parties: list[QuadraticParty], sigma: float, gamma: float) -> np.ndarray:
    """Solve ``w_k = prox_{f_k/σ}(z_k)``, ``z_k = (1−γ) w_k + γ mean_j w_j`` as one linear system."""
    k = len(parties)
    system = np.zeros((k * D, k * D))
    rhs = np.zeros(k * D)
    for i, p in enumerate(parties):
        block = slice(i * D, (i + 1) * D)
        # (A_i + σI) w_i − σ(1−γ) w_i − (σγ/K) Σ_j w_j = A_i c_i
        system[block, block] += p.hessian + sigma * np.eye(D) - sigma * (1 - gamma) * np.eye(D)
        for j in range(k):
            system[block, j * D:(j + 1) * D] -= sigma * gamma / k * np.eye(D)
        rhs[block] = p.hessian @ p.center
    return np.linalg.solve(system, rhs).reshape(k, D)


@pytest.mark.parametrize("update", ["mix", "loss"])
def test_fedavg_plus_reaches_its_fixed_point_corollary_1c(update: str) -> None:
    """FedAvg+ (Ψ = ½‖·‖², threshold ρ): ``z_k = w̃ + (w_k − w̃)/(1+ρ) = (1−γ) w_k + γ w̃`` with
    ``γ = ρ/(1+ρ)``; paper 000 Corollary 1(c), eq. 25:
    ``w_k* = w̃* − 1/(σγ) ∇f̃_k((1−γ) w_k* + γ w̃*)`` with ``w̃* = mean_k w_k*``, and (eq. 29 with the
    mean) ``mean_k ∇f̃_k(z_k*) = 0``."""
    sigma, rho = 1.0, 1.0
    gamma = rho / (1 + rho)
    parties = _parties(4, seed=4)
    spec = make_algorithm("fedavg+", sigma=sigma, rho=rho)
    run = run_rounds(parties, spec, 100, 80, seed=0, init_params=np.zeros(D), proximal_update=update)
    w_tilde, models = run.state.global_model, run.state.party_models
    expected = _fedavg_plus_fixed_point(parties, sigma, gamma)
    np.testing.assert_allclose(models, expected, atol=1e-9)
    np.testing.assert_allclose(w_tilde, expected.mean(axis=0), atol=1e-9)
    z = (1 - gamma) * models + gamma * w_tilde
    grads = np.array([_grad_envelope(p, zk, sigma) for p, zk in zip(parties, z, strict=True)])
    np.testing.assert_allclose(models, w_tilde - grads / (sigma * gamma), atol=1e-9)
    np.testing.assert_allclose(grads.mean(axis=0), 0.0, atol=1e-9)


@pytest.mark.parametrize("name", ["fedprox", "fedavg+"])
def test_mix_and_loss_take_their_own_first_step(name: str) -> None:
    """One local step of each reading, in closed form, for two parties with different learning rates in
    one cohort (each party computes its own ``κ_k = 1/(1 + η_k σ)``; the server never sees ``η_k``):
    ``mix``: ``w⁺ = κ_k (w − η_k ∇f_k(w)) + (1 − κ_k) z_k``; ``loss``: ``w⁺ = w − η_k (∇f_k(w) + σ (w − z_k))``."""
    sigma, rho = 2.0, 1.0
    rng = np.random.default_rng(7)
    parties = [QuadraticParty.random(D, rng, spread=2.0, learning_rate=rate) for rate in (0.05, 0.3)]
    init = rng.normal(size=(2, D))
    spec = make_algorithm(name, sigma=sigma, **({"rho": rho} if name == "fedavg+" else {}))
    w_tilde = init.mean(axis=0)  # both aggregates are the mean here (Ψ = ½‖·‖², or FedProx's mean)
    start = np.tile(w_tilde, (2, 1)) if name == "fedprox" else init  # λ = 1 or 0
    z = np.tile(w_tilde, (2, 1)) if name == "fedprox" else w_tilde + (init - w_tilde) / (1 + rho)
    results = {}
    for update in ("mix", "loss"):
        fresh = [QuadraticParty(p.hessian, p.center, p.learning_rate) for p in parties]
        results[update] = run_rounds(fresh, spec, 1, 1, seed=0, init_params=init, proximal_update=update)
    for k, party in enumerate(parties):
        eta, grad = party.learning_rate, party.gradient(start[k])
        kappa = 1.0 / (1.0 + eta * sigma)
        np.testing.assert_allclose(results["mix"].state.party_models[k],
                                   kappa * (start[k] - eta * grad) + (1 - kappa) * z[k], atol=1e-12)
        np.testing.assert_allclose(results["loss"].state.party_models[k],
                                   start[k] - eta * (grad + sigma * (start[k] - z[k])), atol=1e-12)
    assert np.abs(results["mix"].state.party_models - results["loss"].state.party_models).max() > 1e-3


def test_proposition_3_with_a_coordinate_median_aggregate() -> None:
    """Paper 000 Proposition 3: personalization ``z_k = (1−γ) w_k + γ w̃`` with any aggregate 𝒜 has
    fixed points ``w_k* = w̃* − 1/(σγ) ∇f̃_k(z_k*)`` with ``w̃* = 𝒜(W*)`` (eq. 27); for a translation-
    and sign-invariant 𝒜 such as the coordinate median, ``𝒜(1/(σγ) ∇f̃_k(z_k*)) = 0`` (eq. 29).
    The algorithm is FedAvg+'s personalization with the coordinate-median knob: one more setting."""
    sigma, rho = 1.0, 1.0
    gamma = rho / (1 + rho)
    parties = _parties(5, seed=5)
    spec = dataclasses.replace(make_algorithm("fedavg+", sigma=sigma, rho=rho), server=CoordinateMedianRule())
    run = run_rounds(parties, spec, 100, 80, seed=0, init_params=np.zeros(D))
    w_tilde, models = run.state.global_model, run.state.party_models
    np.testing.assert_allclose(w_tilde, np.median(models, axis=0), atol=1e-12)
    z = (1 - gamma) * models + gamma * w_tilde
    scaled = np.array([_grad_envelope(p, zk, sigma) for p, zk in zip(parties, z, strict=True)]) / (sigma * gamma)
    np.testing.assert_allclose(models, w_tilde - scaled, atol=1e-9)
    np.testing.assert_allclose(coordinate_median(scaled), 0.0, atol=1e-9)
    assert np.linalg.norm(scaled.mean(axis=0)) > 1e-3  # the mean of the gradients is not what vanishes


HYBRID = LayerwisePenalty({"first": slice(0, 1), "rest": slice(1, D)},
                          {"first": Penalty("l1", 0.3), "rest": Penalty("l2", 0.5)}, Penalty("l2sq", 0.1))


@pytest.mark.parametrize(("name", "overrides", "penalty"), [
    ("fedgeomed+", {"rho": 0.5}, Penalty("l2", 0.5)),
    ("fedcomed+", {"rho": 0.5}, Penalty("l1", 0.5)),
    ("hybrid+", {"penalty": HYBRID}, HYBRID),
])
def test_robust_fed_plus_reaches_the_fixed_point_of_theorem_1(name: str, overrides: dict, penalty) -> None:
    """Paper 000 Theorem 1, eq. 17 (and eq. 19–21): ``mean_k ∇f̃_k(z_k*) = 0``,
    ``w_k* = z_k* − (1/σ) ∇f̃_k(z_k*)``, ``z_k* = w̃* + prox_ρ(w_k* − w̃*)``, and w̃* the smoothed aggregate
    ``w̃* = mean_k w_k* − mean_k prox_ρ(w_k* − w̃*)``; for ``hybrid+`` the prox is the per-layer one (eq. 14)."""
    sigma = 1.0
    parties = _parties(4, seed=6)
    run = run_rounds(parties, make_algorithm(name, sigma=sigma, **overrides), 200, 80, seed=0,
                     init_params=np.zeros(D))
    w_tilde, models = run.state.global_model, run.state.party_models
    theta = penalty.prox(models - w_tilde)
    z = w_tilde + theta
    np.testing.assert_allclose(w_tilde, models.mean(axis=0) - theta.mean(axis=0), atol=1e-9)
    grads = np.array([_grad_envelope(p, zk, sigma) for p, zk in zip(parties, z, strict=True)])
    np.testing.assert_allclose(grads.mean(axis=0), 0.0, atol=1e-8)
    np.testing.assert_allclose(models, z - grads / sigma, atol=1e-9)
    # A genuinely robust regime: some θ_k are shrunk but not zero.
    assert np.any(theta != 0) and np.any(np.abs(theta) < np.abs(models - w_tilde))


def test_registry_knobs_and_errors() -> None:
    spec = make_algorithm("fedavg+", lam=0.001, sigma={"initial": 0.01, "decay": 0.5, "every": 100}, rho=2.0)
    assert spec.lam.at(7) == 0.001 and spec.sigma.at(99) == 0.01 and spec.sigma.at(250) == 0.0025
    assert spec.penalty == Penalty("l2sq", 2.0)
    assert make_algorithm("fedprox").penalty.kind == "none" and make_algorithm("fedprox").lam.at(0) == 1.0
    assert make_algorithm("fedavg") == ALGORITHMS["fedavg"]() == make_algorithm("fedavg")
    assert make_algorithm("fedamp", fedamp_alpha=Schedule(1e-2, 0.1, 30)).fedamp_alpha.at(30) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="unknown algorithm 'fedsgd'; valid algorithms: local, fedavg"):
        make_algorithm("fedsgd")
    with pytest.raises(ValueError, match=r"'fedavg' takes no parameter\(s\) \['sigma'\]; tunable parameters: none"):
        make_algorithm("fedavg", sigma=0.1)
    with pytest.raises(ValueError, match=r"tunable parameters: lam, lam_t, sigma, rho, tol, max_iter"):
        make_algorithm("fedgeomed+", epsilon=0.1)
    with pytest.raises(ValueError, match="lam must lie in"):
        make_algorithm("fedavg+", lam=1.5)
    with pytest.raises(ValueError, match="fedprox needs sigma > 0"):
        make_algorithm("fedprox", sigma=0.0)
    with pytest.raises(ValueError, match="hybrid[+] needs penalty=LayerwisePenalty"):
        make_algorithm("hybrid+")
    with pytest.raises(ValueError, match="decay must lie in"):
        make_algorithm("fedavg+", sigma={"initial": 0.01, "decay": 2.0})
    with pytest.raises(ValueError, match="unknown schedule keys"):
        make_algorithm("fedavg+", sigma={"start": 0.01})
    with pytest.raises(ValueError, match="rho must be"):
        make_algorithm("fedcomed+", rho=-1.0)
