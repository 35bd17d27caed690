"""Risk limits on a portfolio decision: a maximum weight per asset and a maximum turnover per decision.

Weights are ``m + 1`` vectors, cash first.  At the close of a decision day the book holds ``h`` (the
drifted weights ``w'_t`` of :class:`~portfed.envs.PortfolioEnv`) and the policy proposes ``v``.

* **Maximum weight** ``u ∈ (0, 1]`` (:attr:`RiskLimits.max_weight`): every asset ``i ≥ 1`` has
  ``x_i ≤ u``; cash is exempt (``x_0 ≤ 1``), so the capped simplex
  ``C = {x : Σ x = 1, 0 ≤ x_0 ≤ 1, 0 ≤ x_i ≤ u}`` is never empty.
* **Turnover** of a trade from ``h`` to ``x``: ``T(x, h) = Σ_{i≥1} |x_i − h_i|``, the risky assets' L1
  change — exactly the environment's ``turnover`` (what the commission is charged on, reported in
  every table), in ``[0, 2]``: selling 10 % of one stock into another is 0.2, into cash 0.1.
  **Maximum turnover** ``δ > 0`` (:attr:`RiskLimits.max_turnover`) bounds it per decision.  When the
  book itself breaks the cap (a stock drifted above ``u``), getting back under it needs at least
  ``T_min(h) = Σ_{i≥1} max(h_i − u, 0)`` (selling the excess into cash); the cap wins, and the budget is
  ``δ_eff = max(δ, T_min(h))``.

The limited decision is the **Euclidean projection** of ``v`` onto the feasible set,

    ``x* = argmin_x ½‖x − v‖²  s.t.  x ∈ C,  T(x, h) ≤ δ_eff``,

unique (a strictly convex objective on a non-empty convex compact set; ``x = min(h, u)`` plus the rest
in cash is feasible).  With multipliers ``τ`` (the sum) and ``ν ≥ 0`` (the turnover), each coordinate
solves a one-dimensional problem whose solution is the clip of a soft threshold:

    ``x_0 = clip(v_0 − τ, 0, 1)``,   ``x_i = clip(h_i + S_ν(v_i − τ − h_i), 0, u)``  (``i ≥ 1``),

``S_ν(a) = sign(a) max(|a| − ν, 0)``.  For fixed ``ν``, ``Σ x`` is piecewise linear and non-increasing in
``τ``: its root is found exactly between the sorted breakpoints (:func:`_solve_sum`).  ``ν = 0`` when
the projection onto ``C`` (:func:`project_capped_simplex`, the case without a turnover limit) is within
the budget; otherwise the turnover of ``x(ν)`` is continuous and non-increasing in ``ν`` and the ``ν``
with ``T = δ_eff`` is found by bisection to float64 precision (the feasible end is returned).

Where the limits act: in training (:mod:`portfed.agents.limits_torch`, the same projection batched in
torch with its gradient), every backtest of a trained agent (:class:`~portfed.agents.EIIEPolicy`, with
the book ``h`` that the backtest passes as ``observation["holdings"]``), ``portfed allocate`` / ``orders``
/ ``backtest`` and :func:`portfed.load`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Bisection steps on ν: the interval halves each time, far below float64 resolution after 200.
_BISECTIONS = 200


@dataclass(frozen=True)
class RiskLimits:
    """``max_weight`` (per risky asset) and ``max_turnover`` (per decision); ``None`` = no limit (module doc)."""

    max_weight: float | None = None
    max_turnover: float | None = None

    def __post_init__(self) -> None:
        check_limit(self.max_weight, "max_weight", 1.0)
        check_limit(self.max_turnover, "max_turnover", 2.0)

    @property
    def active(self) -> bool:
        return self.max_weight is not None or self.max_turnover is not None

    def apply(self, proposed: np.ndarray, held: np.ndarray | None = None) -> np.ndarray:
        """The limited decision ``x*`` for the proposal ``proposed`` from the book ``held`` (module doc);
        ``held`` is needed only with a turnover limit."""
        if self.max_turnover is None:
            return project_capped_simplex(proposed, self.max_weight)
        if held is None:
            raise ValueError("a turnover limit needs the weights held before the trade")
        return project_limited_step(proposed, held, self.max_weight, self.max_turnover)


def check_limit(value: object, name: str, maximum: float) -> None:
    """``None`` or a number in ``(0, maximum]``; else a ``ValueError`` naming ``name`` and the value."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= maximum:
        raise ValueError(f"{name} must be null or a number in (0, {maximum:g}], got {value!r}")


def turnover(x: np.ndarray, held: np.ndarray) -> float:
    """``T(x, h) = Σ_{i≥1} |x_i − h_i|`` (cash first; the environment's turnover)."""
    return float(np.abs(np.asarray(x)[1:] - np.asarray(held)[1:]).sum())


def project_capped_simplex(v: np.ndarray, max_weight: float | None) -> np.ndarray:
    """``argmin_{x ∈ C} ½‖x − v‖²``: the projection onto the simplex with the risky assets capped at
    ``max_weight`` (``None``: the plain simplex), cash uncapped (module docstring, ``ν = 0``)."""
    v = _vector(v, "proposed weights")
    upper = _upper(len(v), max_weight)
    return _solve_sum(v, np.zeros_like(v), upper, np.zeros_like(v))


def project_limited_step(v: np.ndarray, held: np.ndarray, max_weight: float | None,
                         max_turnover: float) -> np.ndarray:
    """``x*`` of the module docstring: the projection of ``v`` onto the capped simplex within the turnover
    budget ``max(max_turnover, T_min(held))`` of the book ``held``."""
    v = _vector(v, "proposed weights")
    h = _vector(held, "held weights")
    if h.shape != v.shape:
        raise ValueError(f"held weights have shape {h.shape}; the proposal has {v.shape}")
    upper = _upper(len(v), max_weight)
    budget = max(float(max_turnover), float(np.maximum(h[1:] - upper[1:], 0).sum()))
    nu = np.zeros_like(v)
    x = _solve_sum(v, h, upper, nu)
    if turnover(x, h) <= budget:
        return x
    # ν large enough that every soft threshold is 0: then x_i = min(h_i, u), T = T_min <= budget.
    low, high = 0.0, 2.0 * (float(np.abs(v).max()) + float(np.abs(h).max()) + 2.0)
    for _ in range(_BISECTIONS):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        nu[1:] = middle
        if turnover(_solve_sum(v, h, upper, nu), h) <= budget:
            high = middle
        else:
            low = middle
    nu[1:] = high
    return _solve_sum(v, h, upper, nu)


def _coordinates(tau: np.ndarray, v: np.ndarray, h: np.ndarray, upper: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """``x_i(τ) = clip(h_i + S_ν(v_i − τ − h_i), 0, u_i)`` for every ``τ`` of ``tau`` (rows)."""
    a = v[None, :] - tau[:, None] - h[None, :]
    shrunk = np.sign(a) * np.maximum(np.abs(a) - nu[None, :], 0.0)
    return np.clip(h[None, :] + shrunk, 0.0, upper[None, :])


def _solve_sum(v: np.ndarray, h: np.ndarray, upper: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """``x(τ)`` with ``Σ x(τ) = 1``: ``Σ x`` is linear between the breakpoints ``τ`` where a coordinate
    reaches a bound or leaves its threshold, so the root is interpolated exactly between two of them."""
    breaks = np.unique(np.concatenate([v - h - nu, v - h + nu, v - nu, v + nu, v - nu - upper, v + nu - upper]))
    sums = _coordinates(breaks, v, h, upper, nu).sum(axis=1)  # non-increasing along the sorted breakpoints
    above = np.flatnonzero(sums >= 1.0)
    if above.size == 0 or above[-1] == len(breaks) - 1:
        tau = breaks[0] if above.size == 0 else breaks[-1]
    else:
        k = above[-1]
        s0, s1 = sums[k], sums[k + 1]
        tau = breaks[k] + (s0 - 1.0) * (breaks[k + 1] - breaks[k]) / (s0 - s1)
    x = _coordinates(np.array([tau]), v, h, upper, nu)[0]
    return x / x.sum()  # removes the interpolation's last-bit round-off


def _upper(size: int, max_weight: float | None) -> np.ndarray:
    check_limit(max_weight, "max_weight", 1.0)
    upper = np.ones(size)
    if max_weight is not None:
        upper[1:] = max_weight
    return upper


def _vector(weights: np.ndarray, what: str) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size < 2 or not np.isfinite(w).all():
        raise ValueError(f"{what} must be a finite vector of m + 1 >= 2 entries (cash first), got {w!r}")
    return w


def book_before_trade(observation: Mapping[str, Any]) -> np.ndarray:
    """The weights held at the decision: ``observation["holdings"]`` when the caller passes them (the
    backtest does), else the previous decision ``observation["weights"]`` drifted over the last day by the
    window's last close relative ``y_t = history[0, :, −1] / history[0, :, −2]`` (float32 accuracy)."""
    if "holdings" in observation:
        return np.asarray(observation["holdings"], dtype=np.float64)
    previous = np.asarray(observation["weights"], dtype=np.float64)
    history = np.asarray(observation["history"], dtype=np.float64)
    if history.shape[2] < 2:
        return previous / previous.sum()
    relatives = np.concatenate([[1.0], history[0, :, -1] / history[0, :, -2]])
    drifted = relatives * previous
    return drifted / drifted.sum()
