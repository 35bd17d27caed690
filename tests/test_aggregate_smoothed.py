"""Fast solvers of the smoothed aggregates (paper 000 eq. 5, 34): exact sort for ‖·‖₁, IRLS for ‖·‖₂ (issue 13).

Acceptance case: ten seeded random points in 20 dimensions, one of them moved by +50 in every
coordinate, and ρ = 1e-4 or 1e-6 — where eq. 34 (steps of at most ρ) stops at its cap far away.
"""

from __future__ import annotations

import numpy as np
import pytest

from portfed.federation.aggregate import (
    coordinate_median,
    geometric_median,
    smoothed_aggregate,
    smoothed_coordinate_median,
    smoothed_geometric_median,
)
from portfed.federation.prox import Penalty


def _outlier_points(seed: int, k: int = 10, d: int = 20) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(k, d))
    x[-1] += 50.0
    return x


def _weights(seed: int, k: int) -> np.ndarray:
    return np.random.default_rng(100 + seed).uniform(0.2, 1.0, size=k)


@pytest.mark.parametrize("rho", [1e-4, 1e-6])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_smoothed_geometric_median_reaches_the_exact_one_fast(rho: float, weighted: bool, seed: int) -> None:
    x = _outlier_points(seed)
    p = _weights(seed, 10) if weighted else None
    exact = geometric_median(x, weights=p, tol=1e-13, max_iter=10_000)
    assert exact.converged
    result = smoothed_aggregate(x, Penalty("l2", rho), weights=p)
    assert result.converged and 0 < result.iterations <= 200
    np.testing.assert_allclose(result.center, exact.center, atol=1e-6)
    # eq. 34 cannot get there: it moves at most ρ per update, and its start (the mean) is ~22 away.
    slow = smoothed_aggregate(x, Penalty("l2", rho), weights=p, solver="eq34")
    assert not slow.converged and slow.iterations == 1000
    assert np.linalg.norm(slow.center - exact.center) > 1.0


@pytest.mark.parametrize("rho", [1e-4, 1e-6])
@pytest.mark.parametrize("k", [9, 10])
def test_smoothed_coordinate_median_is_the_exact_one_for_equal_weights(rho: float, k: int) -> None:
    """Odd K: the middle point; even K: the midpoint of the minimizing interval, as :func:`numpy.median`."""
    x = _outlier_points(3, k=k)
    center = smoothed_aggregate(x, Penalty("l1", rho)).center
    np.testing.assert_allclose(center, coordinate_median(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(center, np.median(x, axis=0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rho", [1e-4, 1e-6])
@pytest.mark.parametrize("k", [9, 10])
def test_weighted_smoothed_coordinate_median_is_within_rho_of_the_exact_one(rho: float, k: int) -> None:
    """With the weight crossing ½ strictly at a point w_m, the root of ``P_below − P_above + p_m (x − w_m)/ρ``
    lies within ρ of ``w_m``: 1e-6 close for ρ = 1e-6."""
    x, p = _outlier_points(4, k=k), _weights(4, k)
    center = smoothed_coordinate_median(x, rho, weights=p)
    assert np.max(np.abs(center - coordinate_median(x, weights=p))) <= rho
    np.testing.assert_allclose(center, coordinate_median(x, weights=p), atol=max(rho, 1e-6))


def test_a_flat_minimizing_interval_returns_its_midpoint() -> None:
    x = np.array([[0.0], [1.0], [9.0], [10.0]])
    # Every c in [1 + ρ, 9 − ρ] minimizes: two points on each side, none within ρ.
    assert smoothed_coordinate_median(x, 0.5)[0] == pytest.approx(5.0, abs=1e-12)
    asymmetric = np.array([[0.0], [1.0], [3.0], [10.0]])
    assert smoothed_coordinate_median(asymmetric, 0.5)[0] == pytest.approx(2.0, abs=1e-12)  # [1.5, 2.5]
    # Equal weights given explicitly (sums rounding to not exactly ½) keep the same convention.
    np.testing.assert_allclose(smoothed_coordinate_median(asymmetric, 1e-6, weights=np.full(4, 0.1)), [2.0],
                               atol=1e-12)


@pytest.mark.parametrize("kind", ["l1", "l2"])
@pytest.mark.parametrize(("k", "weighted"), [(7, False), (7, True), (8, True)])
def test_fast_solvers_agree_with_eq34_where_it_converges(kind: str, k: int, weighted: bool) -> None:
    """ρ comparable to the spread: eq. 34 converges, and both reach the same (unique) minimizer."""
    rng = np.random.default_rng(k + 10 * weighted)
    x = rng.normal(size=(k, 6))
    x[0] += 4.0
    p = rng.uniform(0.2, 1.0, size=k) if weighted else None
    for rho in (0.5, 1.0, 3.0):
        penalty = Penalty(kind, rho)
        reference = smoothed_aggregate(x, penalty, weights=p, solver="eq34", tol=1e-14, max_iter=200_000)
        assert reference.converged
        fast = smoothed_aggregate(x, penalty, weights=p)
        assert fast.converged
        np.testing.assert_allclose(fast.center, reference.center, rtol=0, atol=1e-8)
        value = p if p is not None else np.full(k, 1.0)
        assert value @ penalty.moreau_envelope(x - fast.center) <= value @ penalty.moreau_envelope(
            x - reference.center) + 1e-12


def test_smoothed_coordinate_median_vectorizes_over_coordinates() -> None:
    x = np.random.default_rng(5).normal(size=(6, 40)) * 3
    p = np.random.default_rng(6).uniform(0.1, 1.0, size=6)
    together = smoothed_coordinate_median(x, 0.7, weights=p)
    alone = [smoothed_coordinate_median(x[:, [j]], 0.7, weights=p)[0] for j in range(40)]
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-14)


def test_smoothed_solvers_refuse_bad_rho() -> None:
    x = np.zeros((3, 2))
    for solve in (smoothed_coordinate_median, smoothed_geometric_median):
        with pytest.raises(ValueError, match=r"rho must be a finite number > 0, got 0.0"):
            solve(x, 0.0)


@pytest.mark.parametrize("outlier", [1e12, 1e200])
def test_an_astronomical_outlier_cannot_move_the_fast_smoothed_medians(outlier: float) -> None:
    """An attacker picks the magnitude: the rounding allowances must not grow with it."""
    rng = np.random.default_rng(7)
    honest = 0.1 + 0.01 * rng.standard_normal((9, 4))
    x = np.vstack([honest, np.full((1, 4), outlier)])
    for kind, exact in (("l1", coordinate_median(x)), ("l2", geometric_median(honest).center)):
        result = smoothed_aggregate(x, Penalty(kind, 1e-3))
        assert result.converged
        assert np.max(np.abs(result.center - np.median(honest, axis=0))) < 0.05, kind
        if kind == "l1":
            np.testing.assert_allclose(result.center, exact, atol=1e-3)
