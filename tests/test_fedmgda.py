"""FedMGDA+ (paper 002 §5, eq. 25): the constrained min-norm QP against SLSQP, its limits, the server step."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from portfed.federation.algorithms import make_algorithm
from portfed.federation.fedmgda import fedmgda_step, min_norm_weights, project_capped_simplex
from portfed.federation.server import ServerContext, server_step

RNG = np.random.default_rng(2002)


def _slsqp(gram: np.ndarray, prior: np.ndarray, epsilon: float) -> np.ndarray:
    k = gram.shape[0]
    bounds = [(max(0.0, p - epsilon), min(1.0, p + epsilon)) for p in prior]
    res = minimize(lambda lam: 0.5 * lam @ gram @ lam, prior, jac=lambda lam: gram @ lam, method="SLSQP",
                   bounds=bounds, constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1.0,
                                                "jac": lambda lam: np.ones(k)}],
                   options={"ftol": 1e-16, "maxiter": 1000})
    assert res.success
    return res.x


def test_qp_matches_slsqp_on_random_gram_matrices() -> None:
    for trial in range(12):
        k = int(RNG.integers(2, 9))
        d = int(RNG.integers(k, 20))  # full rank: the minimizer is unique
        updates = RNG.normal(size=(k, d)) + RNG.normal(size=d)  # correlated updates, as in FL
        unit = updates / np.linalg.norm(updates, axis=1, keepdims=True)
        gram = unit @ unit.T
        prior = RNG.dirichlet(np.ones(k)) if trial % 2 else np.full(k, 1.0 / k)
        epsilon = [0.05, 0.2, 0.5, 1.0][trial % 4]
        ours = min_norm_weights(gram, prior=prior, epsilon=epsilon)
        reference = _slsqp(gram, prior, epsilon)
        assert ours.converged
        np.testing.assert_allclose(ours.weights, reference, atol=1e-6)
        assert 0.5 * ours.weights @ gram @ ours.weights <= 0.5 * reference @ gram @ reference + 1e-12
        assert ours.weights.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(np.abs(ours.weights - prior) <= epsilon + 1e-12) and np.all(ours.weights >= 0)


def test_epsilon_zero_is_the_prior_and_epsilon_one_is_mgda() -> None:
    updates = RNG.normal(size=(5, 8))
    unit = updates / np.linalg.norm(updates, axis=1, keepdims=True)
    gram = unit @ unit.T
    prior = RNG.dirichlet(np.ones(5))
    np.testing.assert_array_equal(min_norm_weights(gram, prior=prior, epsilon=0.0).weights, prior)
    mgda = min_norm_weights(gram, prior=prior, epsilon=1.0).weights
    np.testing.assert_allclose(mgda, _slsqp(gram, np.full(5, 0.2), 1.0), atol=1e-6)
    # The min-norm point d of the convex hull is a common descent direction: d·g_i >= ‖d‖² for every i.
    d = mgda @ unit
    assert np.all(unit @ d >= d @ d - 1e-9)


def test_fedmgda_step_with_epsilon_zero_moves_along_the_mean_normalized_update() -> None:
    w = RNG.normal(size=6)
    received = w + RNG.normal(size=(4, 6)) * np.array([[0.1], [1.0], [3.0], [10.0]])
    step = fedmgda_step(received, w, epsilon=0.0, step_size=0.5)
    unit = (received - w) / np.linalg.norm(received - w, axis=1, keepdims=True)
    np.testing.assert_allclose(step.global_model, w + 0.5 * unit.mean(axis=0), atol=1e-14)


def test_normalization_removes_multiplicative_inflation() -> None:
    """A client that scales its update by 1000 gets the same weight as before (paper 002 §5)."""
    w = np.zeros(5)
    received = RNG.normal(size=(4, 5))
    inflated = received.copy()
    inflated[2] *= 1000.0
    a = fedmgda_step(received, w, epsilon=0.3, step_size=1.0)
    b = fedmgda_step(inflated, w, epsilon=0.3, step_size=1.0)
    np.testing.assert_allclose(a.global_model, b.global_model, atol=1e-9)


def test_one_client_and_zero_updates() -> None:
    w = RNG.normal(size=4)
    single = fedmgda_step((w + np.array([3.0, 0.0, 4.0, 0.0]))[None, :], w, epsilon=1.0, step_size=2.0)
    np.testing.assert_allclose(single.global_model, w + 2.0 * np.array([0.6, 0.0, 0.8, 0.0]))
    np.testing.assert_array_equal(single.weights, [1.0])
    frozen = fedmgda_step(np.tile(w, (3, 1)), w, epsilon=1.0, step_size=1.0)
    np.testing.assert_array_equal(frozen.global_model, w)
    assert np.all(np.isfinite(frozen.weights))
    # One client at a stationary point (zero update) makes the MGDA direction zero.
    mixed = np.vstack([w, w + RNG.normal(size=4)])
    np.testing.assert_allclose(fedmgda_step(mixed, w, epsilon=1.0, step_size=1.0).direction, 0.0, atol=1e-9)


def test_capped_simplex_projection_is_the_nearest_feasible_point() -> None:
    for _ in range(10):
        k = 6
        prior = RNG.dirichlet(np.ones(k))
        eps = RNG.uniform(0.01, 0.5)
        lower, upper = np.maximum(prior - eps, 0), np.minimum(prior + eps, 1)
        v = RNG.normal(size=k)
        ours = project_capped_simplex(v, lower, upper)
        res = minimize(lambda x, v=v: 0.5 * (x - v) @ (x - v), prior, jac=lambda x, v=v: x - v, method="SLSQP",
                       bounds=list(zip(lower, upper, strict=True)),
                       constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}], options={"ftol": 1e-16})
        np.testing.assert_allclose(ours, res.x, atol=1e-7)


def test_server_step_uses_prior_weights_and_the_global_lr_schedule() -> None:
    spec = make_algorithm("fedmgda+", epsilon=0.0, global_lr={"initial": 2.0, "decay": 0.5, "every": 10})
    w = np.zeros(3)
    received = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    out = server_step(spec.server, received, ServerContext(global_model=w, round_index=10, weights=np.array([3.0, 1.0])))
    np.testing.assert_allclose(out.global_model, 1.0 * np.array([0.75, 0.25, 0.0]))


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="symmetric"):
        min_norm_weights(np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="simplex"):
        min_norm_weights(np.eye(2), prior=np.array([0.7, 0.7]))
    with pytest.raises(ValueError, match="epsilon"):
        make_algorithm("fedmgda+", epsilon=1.5)
    with pytest.raises(ValueError, match="step_size"):
        fedmgda_step(np.ones((2, 2)), np.zeros(2), epsilon=0.1, step_size=0.0)
