"""FedAMP / HeurFedAMP (paper 004 §4, §6): message weights, cloud models and the party's proximal step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from portfed.federation.algorithms import make_algorithm
from portfed.federation.fedamp import cloud_models, fedamp_weights, heurfedamp_weights
from portfed.federation.local_solve import local_solve
from portfed.federation.rounds import run_rounds
from portfed.federation.server import ServerContext, server_step
from portfed.federation.testing import QuadraticParty

RNG = np.random.default_rng(4004)


def test_fedamp_weights_follow_equations_5_and_7() -> None:
    w = RNG.normal(size=(5, 3))
    alpha, sigma = 0.3, 2.0
    xi = fedamp_weights(w, alpha=alpha, sigma=sigma)
    for i in range(5):
        for j in range(5):
            if i != j:
                expected = alpha * math.exp(-float(np.sum((w[i] - w[j]) ** 2)) / sigma) / sigma
                assert xi[i, j] == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(xi.sum(axis=1), 1.0, atol=1e-15)
    assert np.all(xi >= 0)
    np.testing.assert_allclose(cloud_models(w, xi), xi @ w)


def test_fedamp_cloud_model_is_a_gradient_step_on_the_attention_term() -> None:
    """Eq. 3: ``U = W − α ∇𝒜(W)`` with ``𝒜 = Σ_{i<j} A(‖w_i − w_j‖²)`` — eq. 5 absorbs the factor 2 of
    ``∇‖w_i − w_j‖²`` into α, so U equals the gradient step with step α/2 on the exact gradient."""
    w = RNG.normal(size=(4, 3))
    alpha, sigma = 0.2, 1.5
    grad = np.zeros_like(w)
    for i in range(4):
        for j in range(4):
            if i != j:
                diff = w[i] - w[j]
                grad[i] += math.exp(-diff @ diff / sigma) / sigma * 2 * diff
    np.testing.assert_allclose(cloud_models(w, fedamp_weights(w, alpha=alpha, sigma=sigma)), w - alpha / 2 * grad,
                               atol=1e-14)


def test_closer_parties_get_more_weight() -> None:
    w = np.array([[0.0, 0.0], [0.1, 0.0], [1.0, 0.0], [3.0, 0.0]])
    for xi in (fedamp_weights(w, alpha=0.5, sigma=2.0), heurfedamp_weights(w + 1.0, sigma=5.0, self_weight=0.4)):
        assert xi[0, 1] > xi[0, 2] > xi[0, 3]
        np.testing.assert_allclose(xi.sum(axis=1), 1.0, atol=1e-15)


def test_heurfedamp_weights_follow_equation_8() -> None:
    w = RNG.normal(size=(4, 6))
    sigma, self_weight = 10.0, 0.3
    xi = heurfedamp_weights(w, sigma=sigma, self_weight=self_weight)
    cos = (w @ w.T) / np.outer(np.linalg.norm(w, axis=1), np.linalg.norm(w, axis=1))
    for i in range(4):
        others = [j for j in range(4) if j != i]
        denominator = sum(math.exp(sigma * cos[i, h]) for h in others)
        for j in others:
            assert xi[i, j] == pytest.approx(math.exp(sigma * cos[i, j]) / denominator * (1 - self_weight), rel=1e-12)
        assert xi[i, i] == self_weight
    np.testing.assert_allclose(xi.sum(axis=1), 1.0, atol=1e-15)
    np.testing.assert_array_equal(heurfedamp_weights(w[:1], sigma=sigma, self_weight=self_weight), [[1.0]])


def test_a_step_too_large_for_convex_weights_is_refused() -> None:
    w = np.zeros((3, 2))  # A'(0) = 1/σ: α·2/σ = 2 > 1
    with pytest.raises(ValueError, match="self-weight .* < 0 .*alpha=1.0"):
        fedamp_weights(w, alpha=1.0, sigma=1.0)
    with pytest.raises(ValueError, match="non-zero models"):
        heurfedamp_weights(np.zeros((2, 3)), sigma=1.0, self_weight=0.5)


def test_proximal_term_carries_a_gradient_and_pulls_towards_the_cloud_model() -> None:
    """Many steps on ``f(w) + c/2 ‖w − u‖²`` reach its minimizer ``(A + cI)^{-1}(A c_k + c u)``, which a
    party trained without the term (a detached proximal term) would not: it stays at ``c_k``."""
    party = QuadraticParty.random(3, RNG, learning_rate=0.2)
    u = party.center + np.array([2.0, -1.0, 0.5])
    spec = make_algorithm("fedamp", fedamp_lambda=2.0, fedamp_alpha=0.5)
    coef = 2.0 / 0.5
    solve = local_solve(party, party.center.copy(), u, spec, 200, round_index=0)
    expected = np.linalg.solve(party.hessian + coef * np.eye(3), party.hessian @ party.center + coef * u)
    np.testing.assert_allclose(solve.params, expected, atol=1e-10)
    assert np.linalg.norm(solve.params - u) < np.linalg.norm(party.center - u) - 1.0
    np.testing.assert_array_equal(solve.start, party.center)  # FedAMP starts from the party's own model


def test_fedamp_server_returns_one_centre_per_party_with_alpha_of_the_next_round() -> None:
    spec = make_algorithm("fedamp", fedamp_alpha={"initial": 0.4, "decay": 0.5, "every": 1}, attention_scale=3.0)
    received = RNG.normal(size=(4, 5))
    out = server_step(spec.server, received, ServerContext(global_model=np.zeros(5), round_index=2))
    xi = fedamp_weights(received, alpha=0.4 * 0.5**3, sigma=3.0)
    np.testing.assert_allclose(out.centers, xi @ received)
    np.testing.assert_allclose(out.global_model, received.mean(axis=0))


def test_fedamp_round_loop_on_quadratics_matches_the_alternating_method() -> None:
    """With exact local solves, FedAMP is paper 004's general method: ``U^k = Ξ(W^{k−1}) W^{k−1}``, then
    ``w_i^k = argmin f_i(w) + λ/(2α)‖w − u_i^k‖²``.  Replay it by hand for a few rounds from a per-party
    random initialization (Alg. 1 line 1) and compare."""
    parties = [QuadraticParty.random(3, RNG, learning_rate=0.2) for _ in range(4)]
    init = RNG.normal(size=(4, 3))
    lam, alpha, sigma = 1.0, 0.5, 4.0
    spec = make_algorithm("fedamp", fedamp_lambda=lam, fedamp_alpha=alpha, attention_scale=sigma)
    run = run_rounds(parties, spec, 3, 300, seed=0, init_params=init)
    models = init.copy()
    coef = lam / alpha
    for _ in range(3):
        centers = cloud_models(models, fedamp_weights(models, alpha=alpha, sigma=sigma))
        models = np.array([np.linalg.solve(p.hessian + coef * np.eye(3), p.hessian @ p.center + coef * u)
                           for p, u in zip(parties, centers, strict=True)])
    np.testing.assert_allclose(run.state.party_models, models, atol=1e-9)
    np.testing.assert_allclose(run.state.centers, cloud_models(models, fedamp_weights(models, alpha=alpha,
                                                                                       sigma=sigma)), atol=1e-9)
