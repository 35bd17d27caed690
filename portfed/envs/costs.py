"""Transaction remainder factor μ of a rebalancing (Jiang, Xu & Liang 2017 §2.3; paper 001 §9.2).

At the close of a day the portfolio holds the drifted weights ``w'`` and the agent asks for the
target weights ``w`` (both on the simplex, ``m + 1`` entries, cash at index 0).  Selling and buying
assets at commission rate ``c`` shrinks the portfolio value by the factor ``μ ∈ (0, 1]``.

* **Exact** μ (Jiang et al. 2017 eq. 14, the same rate ``c`` for buying and selling) is the unique
  fixed point of

  ``f(μ) = [1 − c·w'_0 − (2c − c²) Σ_{i≥1} max(w'_i − μ·w_i, 0)] / (1 − c·w_0)``,

  computed by iterating ``μ ← f(μ)`` from ``μ = 1 − 2c + c²`` (Jiang et al., Theorem 1).  ``f`` is
  non-decreasing with slope at most ``(2c − c²)(1 − w_0) / (1 − c·w_0) < 1``, so the iteration is a
  contraction and converges for every ``c ∈ [0, 1)``.  The cash term uses the *drifted* cash weight
  ``w'_0`` in the numerator and the *target* cash weight ``w_0`` in the denominator; swapping them
  (as a widely used open-source environment does) breaks the check "all cash → uniform over the
  assets costs ``1 − c``".

* **Linear** μ (paper 001 §9.2; used in training because it is differentiable everywhere except at
  zero trades): ``μ = 1 − c Σ_{i≥1} |w'_i − w_i|``.  It agrees with the exact μ to first order in
  ``c``; the difference is ``O(c²)``.
"""

from __future__ import annotations

import numpy as np

from portfed.validation import check_number

#: Tolerance on ``Σ w = 1`` when validating weights: float32 policy outputs cast to float64 sum to 1
#: only to within a few 1e-7.
SIMPLEX_ATOL = 1e-6


def transaction_remainder(
    w_drifted: np.ndarray,
    w_target: np.ndarray,
    commission: float,
    exact: bool = True,
    tol: float = 1e-10,
    max_iter: int = 10_000,
) -> float:
    """The remainder factor μ of rebalancing from ``w_drifted`` (``w'``) to ``w_target`` (``w``).

    Args:
        w_drifted: drifted weights ``w'`` before rebalancing, shape ``(m + 1,)``, cash first.
        w_target: target weights ``w``, same shape.
        commission: rate ``c ∈ [0, 1)`` charged on buying and on selling.
        exact: the fixed point of Jiang et al. (2017) eq. 14 if True, else the linear
            ``1 − c Σ_{i≥1} |w'_i − w_i|``.
        tol: stop the fixed-point iteration when ``|Δμ| < tol``.
        max_iter: refuse to iterate longer (a RuntimeError; only reachable for ``c`` close to 1).

    Returns:
        μ as a Python float.

    Raises:
        ValueError: shapes differ, weights are not on the simplex, or ``c`` is outside ``[0, 1)``.
        RuntimeError: the iteration did not reach ``tol`` within ``max_iter`` steps.
    """
    c = _check_commission(commission)
    wp = _check_weights(w_drifted, "w_drifted")
    w = _check_weights(w_target, "w_target")
    if wp.ndim != 1 or wp.shape != w.shape:
        raise ValueError(
            "w_drifted and w_target must be vectors of the same length m + 1, "
            f"got shapes {wp.shape} and {w.shape}"
        )
    if not exact:
        return float(1.0 - c * np.abs(wp[1:] - w[1:]).sum())
    check_number(tol, "tol", minimum=0.0, strict_min=True)
    k = 2.0 * c - c * c
    numerator_cash = 1.0 - c * wp[0]
    denominator = 1.0 - c * w[0]
    mu = float(1.0 - k)
    for _ in range(max_iter):
        new_mu = float((numerator_cash - k * np.maximum(wp[1:] - mu * w[1:], 0.0).sum()) / denominator)
        if abs(new_mu - mu) < tol:
            return new_mu
        mu = new_mu
    raise RuntimeError(
        f"exact transaction remainder did not converge to tol={tol} in {max_iter} iterations "
        f"(commission={c}, last μ={mu!r})"
    )


def linear_remainder(w_drifted: np.ndarray, w_target: np.ndarray, commission: float) -> np.ndarray:
    """Linear μ = ``1 − c Σ_{i≥1} |w'_i − w_i|`` over any leading batch axes.

    Args:
        w_drifted: ``(..., m + 1)`` drifted weights, cash first.
        w_target: target weights of the same shape.
        commission: rate ``c ∈ [0, 1)``.

    Returns:
        float64 array of shape ``(...)`` (a 0-d array for single vectors).
    """
    c = _check_commission(commission)
    wp = _check_weights(w_drifted, "w_drifted")
    w = _check_weights(w_target, "w_target")
    if wp.shape != w.shape:
        raise ValueError(f"w_drifted shape {wp.shape} differs from w_target shape {w.shape}")
    return 1.0 - c * np.abs(wp[..., 1:] - w[..., 1:]).sum(axis=-1)


def _check_commission(commission: float) -> float:
    c = float(commission)
    if not 0.0 <= c < 1.0:
        raise ValueError(f"commission must lie in [0, 1), got {commission!r}")
    return c


def _check_weights(weights: np.ndarray, name: str) -> np.ndarray:
    """Float64 copy of ``weights`` after checking they lie on the simplex along the last axis."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 0 or w.shape[-1] < 2:
        raise ValueError(f"{name} needs a last axis of m + 1 >= 2 weights (cash first), got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError(f"{name} has non-finite weights: {w[~np.isfinite(w)]}")
    if (w < 0).any():
        raise ValueError(f"{name} has negative weights: {w[w < 0]}")
    sums = w.sum(axis=-1)
    bad = np.abs(sums - 1.0) > SIMPLEX_ATOL
    if bad.any():
        raise ValueError(
            f"{name} must sum to 1 along the last axis, got sums {np.atleast_1d(sums)[np.atleast_1d(bad)]}"
        )
    return w
