"""Aggregators against independent optimizers (scipy, numpy) on random points (papers 000 §4.2, 003 §4.2)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from portfed.federation.aggregate import aggregate, coordinate_median, geometric_median, smoothed_aggregate
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty

RNG = np.random.default_rng(7)


def _huber(t: np.ndarray, rho: float) -> np.ndarray:
    """Moreau envelope of |·| written out independently of portfed."""
    return np.where(np.abs(t) <= rho, t * t / (2 * rho), np.abs(t) - rho / 2)


def _scipy_argmin(objective, gradient, x0: np.ndarray) -> np.ndarray:
    res = minimize(objective, x0, jac=gradient, method="BFGS", options={"gtol": 1e-13, "maxiter": 10_000})
    return res.x


def test_geometric_median_matches_scipy_on_random_points() -> None:
    for trial in range(5):
        k, d = RNG.integers(4, 12), RNG.integers(2, 6)
        x = RNG.normal(size=(k, d)) * (1 + trial)
        p = RNG.uniform(0.2, 1.0, size=k) if trial % 2 else np.ones(k)

        def objective(y, x=x, p=p):
            return p @ np.linalg.norm(x - y, axis=1)

        def gradient(y, x=x, p=p):
            diff = y - x
            return (p / np.linalg.norm(diff, axis=1)) @ diff

        expected = _scipy_argmin(objective, gradient, x.mean(axis=0))
        result = geometric_median(x, weights=p if trial % 2 else None)
        assert result.converged
        np.testing.assert_allclose(result.center, expected, atol=1e-6)
        assert objective(result.center) <= objective(expected) + 1e-12


def test_geometric_median_on_a_data_point_vardi_zhang() -> None:
    """A point carrying more than half the weight is the geometric median; the iteration must land on it."""
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [5.0, 5.0]])
    result = geometric_median(x, weights=np.array([3.0, 1.0, 1.0, 1.0, 1.0]))
    assert result.converged
    np.testing.assert_array_equal(result.center, [0.0, 0.0])
    # Unweighted, the origin of a symmetric cross is the median and also the starting mean.
    cross = np.array([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    np.testing.assert_array_equal(geometric_median(cross).center, [0.0, 0.0])


def test_geometric_median_of_collinear_points_is_their_median() -> None:
    x = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [10.0, 10.0]])
    center = geometric_median(x).center
    # Any point of the segment [x_1, x_2] is a median of 4 collinear points; check optimality instead.
    objective = np.linalg.norm(x - center, axis=1).sum()
    assert objective == pytest.approx(np.linalg.norm(x - x[1], axis=1).sum(), abs=1e-9)


def test_coordinate_median_matches_numpy() -> None:
    for k in (1, 2, 5, 8):
        x = RNG.normal(size=(k, 30))
        np.testing.assert_array_equal(aggregate(x, "coordinate_median").center, np.median(x, axis=0))
        np.testing.assert_allclose(coordinate_median(x, weights=np.full(k, 2.5)), np.median(x, axis=0),
                                   rtol=0, atol=1e-15)


def test_weighted_coordinate_median_minimizes_weighted_l1() -> None:
    x = RNG.normal(size=(9, 20))
    p = RNG.uniform(0.0, 1.0, size=9)
    center = coordinate_median(x, weights=p)
    for j in range(20):
        # The minimum of the piecewise-linear Σ p_k |x_kj − m| is attained at a data point.
        candidates = x[:, j]
        values = np.array([p @ np.abs(x[:, j] - m) for m in candidates])
        assert p @ np.abs(x[:, j] - center[j]) == pytest.approx(values.min(), abs=1e-12)


def test_mean_is_the_weighted_mean() -> None:
    x, p = RNG.normal(size=(6, 4)), RNG.uniform(0.1, 1, size=6)
    np.testing.assert_allclose(aggregate(x, "mean", weights=p).center, (p / p.sum()) @ x)


@pytest.mark.parametrize("solver", ["fast", "eq34"])
@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_smoothed_aggregates_match_scipy_on_moreau_losses(kind: str, solver: str) -> None:
    for trial in range(4):
        k, d = RNG.integers(4, 10), RNG.integers(2, 5)
        x = RNG.normal(size=(k, d)) * 2
        rho = [0.3, 1.0, 2.5, 0.8][trial]
        p = RNG.uniform(0.2, 1.0, size=k) if trial % 2 else np.ones(k)

        if kind == "l2":
            def objective(y, x=x, p=p, rho=rho):
                return p @ _huber(np.linalg.norm(x - y, axis=1), rho)

            def gradient(y, x=x, p=p, rho=rho):
                diff = y - x
                n = np.linalg.norm(diff, axis=1)
                return (p / np.maximum(n, rho)) @ diff
        else:
            def objective(y, x=x, p=p, rho=rho):
                return p @ _huber(x - y, rho).sum(axis=1)

            def gradient(y, x=x, p=p, rho=rho):
                return p @ (np.clip(y - x, -rho, rho) / rho)

        expected = _scipy_argmin(objective, gradient, x.mean(axis=0))
        result = aggregate(x, "smoothed", penalty=Penalty(kind, rho), weights=p if trial % 2 else None,
                           max_iter=100_000, solver=solver)
        assert result.converged
        # The l1 minimizer is not unique where no point lies within ρ (a flat stretch of the
        # objective, e.g. between the two middle points of an even K): compare values there.
        assert objective(result.center) <= objective(expected) + 1e-12
        np.testing.assert_allclose(gradient(result.center), 0.0, atol=1e-7)
        if kind == "l2":
            np.testing.assert_allclose(result.center, expected, atol=1e-6)


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_smoothed_iteration_decreases_the_objective_monotonically(kind: str) -> None:
    x = RNG.normal(size=(8, 3)) * 3
    rho = 0.5
    penalty = Penalty(kind, rho)
    values = []
    for iters in range(1, 40):
        center = smoothed_aggregate(x, penalty, tol=0.0, max_iter=iters, solver="eq34").center
        values.append(penalty.moreau_envelope(x - center).sum())
    assert np.all(np.diff(values) <= 1e-12)


def test_the_paper_example_gives_a_quarter_and_the_wrong_update_does_not() -> None:
    x = np.array([[0.0], [0.0], [0.0], [0.0], [10.0]])
    for kind in ("l2", "l1"):
        for solver in ("fast", "eq34"):
            result = smoothed_aggregate(x, Penalty(kind, 1.0), solver=solver)
            assert result.converged
            assert result.center[0] == pytest.approx(0.25, abs=1e-9)
        assert result.center[0] == pytest.approx(0.25, abs=1e-9)
    # The update from the current iterate, w̃ ← w̃ − mean prox(w_k − w̃), is a different map: it
    # does not stay at 0.25 (so it cannot be the aggregate's fixed-point iteration).
    center = np.array([0.25])
    wrong = center - Penalty("l1", 1.0).prox(x - center).mean(axis=0)
    assert abs(wrong[0] - 0.25) > 0.1


def test_smoothed_with_l2sq_or_none_is_the_mean() -> None:
    """Directly with the fast solver, after one update of eq. 34."""
    x, p = RNG.normal(size=(5, 3)), RNG.uniform(0.1, 1, size=5)
    for penalty in (Penalty("l2sq", 0.1), Penalty("none", 0.0)):
        fast = smoothed_aggregate(x, penalty, weights=p)
        np.testing.assert_array_equal(fast.center, (p / p.sum()) @ x)
        assert fast.iterations == 0 and fast.converged
        result = smoothed_aggregate(x, penalty, weights=p, solver="eq34")
        np.testing.assert_allclose(result.center, (p / p.sum()) @ x, atol=1e-15)
        assert result.iterations == 1


KINDS = ("l2", "l1")


def test_rho_limits_mean_and_exact_medians() -> None:
    x = RNG.normal(size=(7, 3)) * 2
    mean = x.mean(axis=0)
    for kind in KINDS:
        # ρ larger than every ‖w_k − mean‖: every point is in the quadratic zone, the aggregate is the mean.
        np.testing.assert_allclose(smoothed_aggregate(x, Penalty(kind, 100.0)).center, mean, atol=1e-12)
    # ρ → 0: the smoothed aggregates approach the exact medians, which are far from the mean here.
    exact = {"l2": geometric_median(x).center, "l1": np.median(x, axis=0)}
    for kind, target in exact.items():
        assert np.linalg.norm(target - mean) > 0.1
        for solver in ("fast", "eq34"):
            result = smoothed_aggregate(x, Penalty(kind, 1e-3), max_iter=100_000, solver=solver)
            assert result.converged
            np.testing.assert_allclose(result.center, target, atol=1e-5)


def test_one_far_outlier_moves_the_smoothed_medians_by_at_most_rho() -> None:
    rho = 0.5
    inliers = RNG.normal(size=(9, 4)) * 0.01
    base = {kind: smoothed_aggregate(inliers, Penalty(kind, rho)).center for kind in KINDS}
    for distance in (1e2, 1e3):
        outlier = np.full((1, 4), distance)
        x = np.vstack([inliers, outlier])
        mean_shift = np.linalg.norm(x.mean(axis=0) - inliers.mean(axis=0))
        assert mean_shift > distance / 10 * 1.9  # the mean is dragged by ~distance·√4/10
        for kind, center in base.items():
            result = smoothed_aggregate(x, Penalty(kind, rho))
            assert result.converged
            assert np.linalg.norm(result.center - center) <= rho
            # Each update of eq. 34 moves the iterate by at most ρ, so its cap must cover ‖mean − 𝒜‖/ρ.
            slow = smoothed_aggregate(x, Penalty(kind, rho), max_iter=100_000, solver="eq34")
            assert slow.converged and slow.iterations > mean_shift / rho / 2
            np.testing.assert_allclose(slow.center, result.center, atol=1e-8)
    # Beyond the quadratic zone the outlier's pull is saturated: the coordinate version is independent
    # of how far away it is.
    near, far = (smoothed_aggregate(np.vstack([inliers, np.full((1, 4), r)]), Penalty("l1", rho)).center
                 for r in (1e2, 1e3))
    np.testing.assert_allclose(near, far, atol=1e-12)


@pytest.mark.parametrize("solver", ["fast", "eq34"])
def test_layerwise_smoothed_aggregate_is_the_blockwise_aggregate(solver: str) -> None:
    x = RNG.normal(size=(8, 9)) * 2
    hybrid = LayerwisePenalty({"a": slice(0, 3), "b": slice(3, 6)},
                              {"a": Penalty("l2", 0.7), "b": Penalty("l1", 0.4)}, Penalty("l2sq", 0.1))
    center = smoothed_aggregate(x, hybrid, max_iter=10_000, solver=solver).center
    for block, penalty in ((slice(0, 3), Penalty("l2", 0.7)), (slice(3, 6), Penalty("l1", 0.4))):
        alone = smoothed_aggregate(x[:, block], penalty, max_iter=10_000, solver=solver).center
        np.testing.assert_allclose(center[block], alone, atol=1e-9)
    np.testing.assert_allclose(center[6:9], x[:, 6:9].mean(axis=0), atol=1e-12)


def test_single_point_and_iteration_cap() -> None:
    one = RNG.normal(size=(1, 4))
    for method in ("mean", "geometric_median", "coordinate_median"):
        np.testing.assert_array_equal(aggregate(one, method).center, one[0])
    for kind in KINDS:
        np.testing.assert_allclose(aggregate(one, "smoothed", penalty=Penalty(kind, 0.1)).center, one[0])
    spread = RNG.normal(size=(20, 3)) * 10
    for solver in ("fast", "eq34"):
        capped = smoothed_aggregate(spread, Penalty("l2", 1e-3), max_iter=3, solver=solver)
        assert capped.iterations == 3 and not capped.converged


def test_bad_arguments_raise_clear_errors() -> None:
    x = RNG.normal(size=(3, 2))
    with pytest.raises(ValueError, match="unknown aggregator 'median'; valid aggregators: mean, geometric_median"):
        aggregate(x, "median")
    with pytest.raises(ValueError, match="unknown aggregator 'smoothed_coordinate_median'"):
        aggregate(x, "smoothed_coordinate_median")
    with pytest.raises(ValueError, match="needs a penalty"):
        aggregate(x, "smoothed")
    with pytest.raises(ValueError, match="takes no penalty"):
        aggregate(x, "mean", penalty=Penalty("l1", 1.0))
    with pytest.raises(ValueError, match="needs rho > 0"):
        aggregate(x, "smoothed", penalty=Penalty("l2", 0.0))
    with pytest.raises(ValueError, match="unknown smoothed-aggregate solver 'newton'; valid solvers: fast, eq34"):
        smoothed_aggregate(x, Penalty("l2", 1.0), solver="newton")
    with pytest.raises(ValueError, match=r"points\[1, 0\]"):
        aggregate(np.array([[0.0, 1.0], [np.nan, 2.0]]), "mean")
    with pytest.raises(ValueError, match="weights must"):
        aggregate(x, "mean", weights=np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        aggregate(np.zeros(3), "mean")
