"""Aggregation functions 𝒜 of the server: exact and ρ-smoothed means and medians (papers 000 §4.2, 003 §4.2).

Every aggregate is ``argmin_x Σ_k p_k B(w_k, x)`` over the received points ``w_k`` (rows of a
``(K, d)`` array) with weights ``p_k`` (uniform unless given, normalized to sum 1).  The aggregator
names (:data:`AGGREGATORS`, the one vocabulary of :func:`aggregate`):

``"mean"``               B = ‖w_k − x‖²        →  Σ p_k w_k
``"geometric_median"``   B = ‖w_k − x‖₂        (paper 003 eq. 4; RFA)
``"coordinate_median"``  B = ‖w_k − x‖₁        (paper 003 eq. 5; CoMed)
``"smoothed"``           B = Φ_ρ(w_k − x), the Moreau envelope of a penalty's φ (paper 000 eq. 5):
                         φ = ‖·‖₂ the smoothed geometric median (FedGeoMed+), φ = ‖·‖₁ the smoothed
                         coordinate median (FedCoMed+), φ = ½‖·‖² or "none" the mean (FedAvg+)

``Φ_ρ`` is the Moreau envelope of :mod:`portfed.federation.prox`: for ``‖·‖₂`` the Huber function
``H_ρ(r) = r²/(2ρ)`` (r <= ρ), ``r − ρ/2`` (r > ρ) of ``r = ‖w_k − x‖``, for ``‖·‖₁`` the sum of scalar
Huber functions.  :func:`smoothed_aggregate` takes any :class:`~portfed.federation.prox.Penalty` or
:class:`~portfed.federation.hybrid.LayerwisePenalty` (per-layer φ, paper 000 eq. 14).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty
from portfed.validation import check_int, check_number

AggregatorName = Literal["mean", "geometric_median", "coordinate_median", "smoothed"]
AGGREGATORS: tuple[str, ...] = get_args(AggregatorName)
SmoothedSolver = Literal["fast", "eq34"]
SMOOTHED_SOLVERS: tuple[str, ...] = get_args(SmoothedSolver)
_COINCIDE = 1e-12  # distances below this fraction of the data scale: "the iterate sits on a data point"
_WEIGHT_SLACK = 1e-12  # rounding slack of sums of normalized weights (values in [−1, 1])
_ROUNDING = 8 * np.finfo(np.float64).eps  # relative rounding error of an iterate (a few ulps)


@dataclass(frozen=True)
class AggregateResult:
    """The aggregate ``center`` (``(d,)``), the number of iterations run and whether ``tol`` was met.

    Direct (non-iterative) aggregates report 0 iterations and ``converged=True``.
    """

    center: np.ndarray
    iterations: int
    converged: bool


def check_aggregator(name: object) -> str:
    """``name`` if it is one of :data:`AGGREGATORS`, else a ``ValueError`` naming the value."""
    if name not in AGGREGATORS:
        raise ValueError(f"unknown aggregator {name!r}; valid aggregators: {', '.join(AGGREGATORS)}")
    return name  # type: ignore[return-value]


def check_points(points: np.ndarray) -> np.ndarray:
    """``points`` as a finite float64 ``(K, d)`` array with ``K, d >= 1``."""
    arr = np.asarray(points, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"points must be a (K, d) array with K, d >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"points must be finite; points[{bad[0]}, {bad[1]}] = {arr[tuple(bad)]!r}")
    return arr


def normalized_weights(weights: np.ndarray | None, k: int) -> np.ndarray:
    """``weights / Σ weights`` (uniform ``1/k`` when ``None``); weights must be finite and >= 0."""
    if weights is None:
        return np.full(k, 1.0 / k)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (k,):
        raise ValueError(f"weights must have shape ({k},), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all zero, got {w.tolist()}")
    return w / w.sum()


def _check_iteration_controls(tol: float, max_iter: int) -> None:
    check_number(tol, "tol", minimum=0.0)
    check_int(max_iter, "max_iter", minimum=1)


def aggregate(
    points: np.ndarray,
    method: str,
    *,
    weights: np.ndarray | None = None,
    penalty: Penalty | LayerwisePenalty | None = None,
    tol: float = 1e-10,
    max_iter: int = 1000,
    solver: str = "fast",
) -> AggregateResult:
    """Aggregate the rows of ``points`` with ``method`` (one of :data:`AGGREGATORS`).

    ``penalty`` is required by ``"smoothed"`` (see :func:`smoothed_aggregate`, which also takes
    ``solver``) and refused by the others; ``tol`` and ``max_iter`` control the iterative methods.
    """
    check_aggregator(method)
    if method == "smoothed":
        if penalty is None:
            raise ValueError("aggregator 'smoothed' needs a penalty, e.g. penalty=Penalty('l1', 0.1)")
        return smoothed_aggregate(points, penalty, weights=weights, tol=tol, max_iter=max_iter, solver=solver)
    if penalty is not None:
        raise ValueError(f"aggregator {method!r} takes no penalty (got {penalty!r}); only 'smoothed' does")
    if method == "geometric_median":
        return geometric_median(points, weights=weights, tol=tol, max_iter=max_iter)
    x = check_points(points)
    p = normalized_weights(weights, x.shape[0])
    center = p @ x if method == "mean" else coordinate_median(x, weights=weights)
    return AggregateResult(center=center, iterations=0, converged=True)


def coordinate_median(points: np.ndarray, *, weights: np.ndarray | None = None) -> np.ndarray:
    """Exact (weighted) coordinate-wise median, ``argmin_x Σ_k p_k ‖w_k − x‖₁`` (paper 003 eq. 5).

    Per coordinate the minimizers are the values where the cumulative weight of the sorted points
    crosses one half; when they form an interval its midpoint is returned, which for equal weights
    is :func:`numpy.median`.
    """
    x = check_points(points)
    if weights is None:
        return np.median(x, axis=0)
    p = normalized_weights(weights, x.shape[0])
    order = np.argsort(x, axis=0, kind="stable")
    sorted_x = np.take_along_axis(x, order, axis=0)
    cumulative = np.cumsum(p[order], axis=0)
    lower = np.argmax(cumulative >= 0.5 - _WEIGHT_SLACK, axis=0)
    upper = np.argmax(cumulative > 0.5 + _WEIGHT_SLACK, axis=0)
    cols = np.arange(x.shape[1])
    return 0.5 * (sorted_x[lower, cols] + sorted_x[upper, cols])


def _vardi_zhang_residual(x: np.ndarray, p: np.ndarray, y: np.ndarray, atol: float) -> tuple[float, float]:
    """``(‖R(y)‖, η(y))``: ``R = Σ_{w_k ≠ y} p_k (w_k − y)/‖w_k − y‖`` and ``η`` the weight sitting at ``y``.

    ``y`` is a geometric median iff ``‖R(y)‖ <= η(y)`` (the subgradient optimality condition).
    """
    diff = x - y
    dist = np.linalg.norm(diff, axis=1)
    away = dist > atol
    residual = (p[away] / dist[away]) @ diff[away]
    return float(np.linalg.norm(residual)), float(p[~away].sum())


def geometric_median(
    points: np.ndarray, *, weights: np.ndarray | None = None, tol: float = 1e-10, max_iter: int = 1000
) -> AggregateResult:
    """Exact (weighted) geometric median, ``argmin_x Σ_k p_k ‖w_k − x‖₂`` (paper 003 eq. 4).

    Weiszfeld's iteration ``y ← T̃(y) = Σ_k (p_k/‖w_k − y‖) w_k / Σ_k (p_k/‖w_k − y‖)`` from the
    weighted mean, with the Vardi–Zhang (2000) modification where ``y`` coincides with data points
    of total weight ``η``: ``y ← (1 − η/r) T̃(y) + (η/r) y`` (``T̃`` and ``r = ‖R(y)‖`` over the other
    points), stopping when ``r <= η`` (``y`` is optimal).  As a safeguard against the slow linear
    approach of an optimum that sits on a data point, each iteration also tests the optimality
    condition at the data point nearest to ``y`` and stops there when it holds.  Converged when
    ``‖Δy‖₂ <= tol``.
    """
    x = check_points(points)
    _check_iteration_controls(tol, max_iter)
    p = normalized_weights(weights, x.shape[0])
    atol = _COINCIDE * max(1.0, float(np.abs(x).max()))
    y = p @ x
    for iteration in range(max_iter + 1):
        dist = np.linalg.norm(x - y, axis=1)
        nearest = int(np.argmin(dist))
        r_near, eta_near = _vardi_zhang_residual(x, p, x[nearest], atol)
        if r_near <= eta_near:
            return AggregateResult(center=x[nearest].copy(), iterations=iteration, converged=True)
        if iteration == max_iter:
            break
        away = dist > atol
        inv = np.where(away, p / np.where(away, dist, 1.0), 0.0)
        t_tilde = (inv @ x) / inv.sum()
        eta = float(p[~away].sum())
        if eta > 0:
            r = float(np.linalg.norm(inv @ (x - y)))
            t_tilde = (1.0 - eta / r) * t_tilde + (eta / r) * y
        step = float(np.linalg.norm(t_tilde - y))
        y = t_tilde
        if step <= tol:
            return AggregateResult(center=y, iterations=iteration + 1, converged=True)
    return AggregateResult(center=y, iterations=max_iter, converged=False)


def smoothed_aggregate(
    points: np.ndarray,
    penalty: Penalty | LayerwisePenalty,
    *,
    weights: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 1000,
    solver: str = "fast",
) -> AggregateResult:
    """The Fed+ aggregate ``argmin_x F(x) = Σ_k p_k Φ_ρ(w_k − x)`` (paper 000 eq. 5, 34; paper 003 eq. 25).

    ``F`` is separable over the blocks of a layer-wise penalty; each block is solved by its kind.

    ``solver="fast"`` (default) reaches the minimizer directly or in few iterations:

    - ``"l1"``: :func:`smoothed_coordinate_median`, exact and direct (0 iterations);
    - ``"l2"``: :func:`smoothed_geometric_median`, IRLS/Weiszfeld, converged when ``‖∇F‖₂ <= tol``;
    - ``"l2sq"`` and ``"none"``: ``Φ_ρ`` is a multiple of ``‖·‖²``, so the (weighted) mean, directly.

    ``solver="eq34"`` is the iteration of paper 000 eq. 34, kept as the paper's reference: from
    ``x = w_mean = Σ_k p_k w_k`` repeat ``x ← w_mean − Σ_k p_k prox_ρ(w_k − x)`` until ``‖Δx‖₂ <= tol``
    or ``max_iter`` updates.  Since ``∇Φ_ρ(v) = (v − prox_ρ(v))/ρ``, the update is ``x ← x − ρ ∇F(x)``:
    gradient descent with step ``1/L`` on the ``L = 1/ρ``-smooth convex ``F`` (per block, with its
    own ρ), so ``F`` decreases monotonically.  Every update is taken from ``w_mean``, not from the
    current ``x`` — ``x ← x − Σ_k p_k prox(w_k − x)`` is a different map, which diverges on
    {0, 0, 0, 0, 10}, ρ = 1.  An update moves ``x`` by at most ρ (per block for ``"l2"``, per
    coordinate for ``"l1"``), so it needs at least ``‖w_mean − 𝒜(W)‖/ρ`` updates: for ρ small against
    the spread or a far outlier it stops at ``max_iter`` far from the minimizer (``converged=False``),
    and stopping at ``‖Δx‖ <= tol`` leaves an error of about ``tol/(ρ μ)``, μ the curvature of ``F``.

    ``"l1"`` and ``"l2"`` blocks need ``ρ > 0``.  The result reports the most iterations of any block
    and ``converged`` only when every block converged.
    """
    x = check_points(points)
    _check_iteration_controls(tol, max_iter)
    if solver not in SMOOTHED_SOLVERS:
        raise ValueError(f"unknown smoothed-aggregate solver {solver!r}; valid solvers: {', '.join(SMOOTHED_SOLVERS)}")
    parts = penalty.parts(x.shape[1])
    for _, part in parts:
        if part.kind in ("l1", "l2") and part.rho <= 0:
            raise ValueError(f"the smoothed aggregate with a {part.kind!r} penalty needs rho > 0, got {part.rho!r}")
    p = normalized_weights(weights, x.shape[0])
    if solver == "eq34":
        return _eq34(x, p, penalty, tol, max_iter)
    center = np.empty(x.shape[1])
    iterations, converged = 0, True
    for block, part in parts:
        if part.kind == "l1":
            center[block] = smoothed_coordinate_median(x[:, block], part.rho, weights=p)
        elif part.kind == "l2":
            result = smoothed_geometric_median(x[:, block], part.rho, weights=p, tol=tol, max_iter=max_iter)
            center[block] = result.center
            iterations, converged = max(iterations, result.iterations), converged and result.converged
        else:
            center[block] = p @ x[:, block]
    return AggregateResult(center=center, iterations=iterations, converged=converged)


def _eq34(x: np.ndarray, p: np.ndarray, penalty: Penalty | LayerwisePenalty, tol: float,
          max_iter: int) -> AggregateResult:
    """Paper 000 eq. 34 (see :func:`smoothed_aggregate`)."""
    w_mean = p @ x
    center = w_mean
    for iteration in range(1, max_iter + 1):
        updated = w_mean - p @ penalty.prox(x - center)
        step = float(np.linalg.norm(updated - center))
        center = updated
        if step <= tol:
            return AggregateResult(center=center, iterations=iteration, converged=True)
    return AggregateResult(center=center, iterations=max_iter, converged=False)


def smoothed_coordinate_median(points: np.ndarray, rho: float, *, weights: np.ndarray | None = None) -> np.ndarray:
    """Exact ``argmin_x Σ_k p_k Σ_j h_ρ(w_kj − x_j)``, ``h_ρ`` the scalar Huber function (FedCoMed+).

    Separable: per coordinate the derivative ``g(c) = Σ_k p_k clip((c − w_k)/ρ, −1, 1)`` is piecewise
    linear and non-decreasing, from −1 to 1, with breakpoints ``w_k ± ρ``.  The 2K sorted breakpoints
    of every coordinate are bisected (vectorized over coordinates, ``O(K d log K)``) for the interval
    where ``g`` crosses 0, and the linear piece there gives the root.  When ``g = 0`` on a whole
    interval — no point within ρ and the weights on either side equal, e.g. an even number of equal
    weights with a gap wider than 2ρ in the middle — every point of it is a minimizer and its
    **midpoint** is returned; for ρ → 0 this is the midpoint convention of :func:`coordinate_median`
    (:func:`numpy.median`).  (Eq. 34 stops at some point of that interval, usually another one.)
    Odd K with equal weights: the middle point itself when its neighbours are more than ρ away.
    Weighted: within ρ of the exact weighted median.
    """
    x = check_points(points)
    rho = float(rho)
    if not np.isfinite(rho) or rho <= 0:
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    p = normalized_weights(weights, x.shape[0])
    breaks = np.sort(np.concatenate([x - rho, x + rho]), axis=0)  # (2K, d)
    n, cols = breaks.shape[0], np.arange(x.shape[1])

    def slope(index: np.ndarray) -> np.ndarray:
        return p @ np.clip((breaks[index, cols] - x) / rho, -1.0, 1.0)

    def prefix(threshold: np.ndarray, strict: bool) -> np.ndarray:
        """Per coordinate the number of leading breakpoints with ``g < t`` (``strict``) or ``g <= t``."""
        lo, hi = np.zeros_like(cols), np.full_like(cols, n)
        while np.any(lo < hi):
            mid = np.minimum((lo + hi) // 2, n - 1)
            g = slope(mid)
            below = g < threshold if strict else g <= threshold
            open_ = lo < hi
            lo = np.where(open_ & below, mid + 1, lo)
            hi = np.where(open_ & ~below, mid, hi)
        return lo

    def root(left: np.ndarray) -> np.ndarray:
        """The zero of ``g`` on the linear piece between breakpoints ``left`` and ``left + 1``."""
        g0, g1 = slope(left), slope(left + 1)
        b0, b1 = breaks[left, cols], breaks[left + 1, cols]
        return b0 + (b1 - b0) * (-g0) / (g1 - g0)

    # Rounding of g near its root: the weights' sums, and a few ulps of |b| + |w_k| over ρ for the unclipped
    # terms only (within ρ of the root, itself within ρ of the weighted median): outliers cannot widen it.
    slack = _WEIGHT_SLACK + _ROUNDING * 2 * (np.abs(coordinate_median(x, weights=p)) + 2 * rho) / rho
    first = prefix(-slack, strict=True)  # first breakpoint with g >= 0 (within rounding)
    last = prefix(slack, strict=False) - 1  # last breakpoint with g <= 0
    with np.errstate(divide="ignore", invalid="ignore"):  # the branch np.where discards may divide by 0
        lower = np.where(slope(first) <= slack, breaks[first, cols], root(np.maximum(first - 1, 0)))
        upper = np.where(slope(last) >= -slack, breaks[last, cols], root(np.minimum(last, n - 2)))
    return 0.5 * (lower + upper)


def smoothed_geometric_median(
    points: np.ndarray, rho: float, *, weights: np.ndarray | None = None, tol: float = 1e-10, max_iter: int = 1000
) -> AggregateResult:
    """``argmin_x F(x) = Σ_k p_k H_ρ(‖w_k − x‖₂)``, ``H_ρ`` the Huber function (FedGeoMed+).

    ``∇F(x) = Σ_k a_k (x − w_k)`` with ``a_k = p_k / max(‖x − w_k‖, ρ)`` (``H_ρ'(r)/r``), so the
    smoothed Weiszfeld / IRLS step ``x ← Σ_k a_k w_k / Σ_k a_k`` (= ``x − ∇F/Σ_k a_k``) solves the
    weighted least-squares majorizer of ``F`` at ``x`` and decreases ``F`` monotonically.  It starts
    at the weighted coordinate median (near the median even with outliers) and is converged when
    ``‖∇F(x)‖₂ <= tol``, or when ``∇F`` is at its rounding floor (``‖∇F‖ <= 8 ε Σ_k a_k max(‖x‖, ‖w_k‖, 1)``,
    ε the machine epsilon: representing ``x`` to machine precision already moves ``∇F`` that much).
    Where every ``‖x − w_k‖ >= ρ`` at the solution, ``∇F`` is the gradient of the exact geometric
    median's objective, so the smoothed and exact (:func:`geometric_median`) minimizers coincide.
    """
    x = check_points(points)
    _check_iteration_controls(tol, max_iter)
    rho = float(rho)
    if not np.isfinite(rho) or rho <= 0:
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    p = normalized_weights(weights, x.shape[0])
    with np.errstate(over="ignore"):
        sizes = np.maximum(np.linalg.norm(x, axis=1), 1.0)
    center = coordinate_median(x, weights=p)
    for iteration in range(max_iter + 1):
        diff = center - x
        # An overflowing distance gives weight 0; the floor is per term, so an outlier adds ~ε p_k, not ε‖w_k‖.
        with np.errstate(over="ignore", invalid="ignore"):
            a = p / np.maximum(np.linalg.norm(diff, axis=1), rho)
            floor = _ROUNDING * float(np.sum(np.where(a > 0, a * np.maximum(sizes, np.linalg.norm(center)), 0.0)))
        gradient = a @ diff
        if np.linalg.norm(gradient) <= max(tol, floor):
            return AggregateResult(center=center, iterations=iteration, converged=True)
        if iteration < max_iter:
            center = (a @ x) / a.sum()
    return AggregateResult(center=center, iterations=max_iter, converged=False)
