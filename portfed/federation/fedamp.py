"""FedAMP and HeurFedAMP: attentive message passing on the server (paper 004 §4, §6; DESIGN §6).

FedAMP minimizes ``Σ_i F_i(w_i) + λ Σ_{i<j} A(‖w_i − w_j‖²)`` with ``A(x) = 1 − e^{−x/σ}`` (paper 004
eq. 1) by alternating a gradient step on the attention term on the server (eq. 3) with a proximal
step on each client (eq. 4/6).  The server step gives each client ``i`` a personalized cloud model

    u_i = Σ_j ξ_ij w_j,   ξ_ij = α_k A'(‖w_i − w_j‖²)  (j ≠ i),   ξ_ii = 1 − Σ_{j≠i} ξ_ij     (eq. 5, 7)

with ``A'(x) = e^{−x/σ}/σ`` (the factor 2 of ``∇‖w_i − w_j‖²`` is absorbed into the step ``α_k``, as
in eq. 5), and client ``i`` then solves ``min_w F_i(w) + λ/(2α_k) ‖w − u_i‖²`` (eq. 6).

HeurFedAMP (eq. 8) keeps ``ξ_ii`` as a self-attention hyper-parameter and shares ``1 − ξ_ii`` over
the others by a softmax of scaled cosine similarities: ``ξ_ij ∝ exp(σ cos(w_i, w_j))``, ``j ≠ i``.

Rows of ``ξ`` sum to 1.  Paper 004 asks for a step ``α_k`` small enough that all weights are
non-negative, so that ``u_i`` is a convex combination; :func:`fedamp_weights` refuses a step that
would make a self-weight ``ξ_ii`` negative (then ``u_i`` would extrapolate away from the others).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist, squareform


def _check_models(models: np.ndarray) -> np.ndarray:
    w = np.asarray(models, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] < 1 or not np.all(np.isfinite(w)):
        raise ValueError(f"models must be a finite (K, d) array, got shape {w.shape}")
    return w


def fedamp_weights(models: np.ndarray, *, alpha: float, sigma: float) -> np.ndarray:
    """The ``(K, K)`` message weights ``ξ`` of FedAMP (paper 004 eq. 5, 7) for the rows of ``models``.

    Args:
        models: ``(K, d)`` client models ``w_j``.
        alpha: the server step ``α_k > 0``.
        sigma: the scale ``σ > 0`` of the attention-inducing function ``A(x) = 1 − e^{−x/σ}``.

    Raises:
        ValueError: when ``α_k Σ_{j≠i} A'(‖w_i − w_j‖²) > 1`` for some client ``i`` (negative ``ξ_ii``).
    """
    w = _check_models(models)
    if not np.isfinite(alpha) or alpha <= 0 or not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"alpha and sigma must be finite and > 0, got alpha={alpha!r}, sigma={sigma!r}")
    squared = squareform(pdist(w, metric="sqeuclidean"))  # each pair once (cdist's values, half its work)
    xi = alpha * np.exp(-squared / sigma) / sigma
    np.fill_diagonal(xi, 0.0)
    self_weights = 1.0 - xi.sum(axis=1)
    if np.any(self_weights < 0):
        i = int(np.argmin(self_weights))
        raise ValueError(
            f"FedAMP self-weight ξ_ii = {self_weights[i]:.6g} < 0 for client row {i}: the step "
            f"alpha={alpha!r} is too large for sigma={sigma!r} (α Σ_j A'(‖w_i − w_j‖²) = "
            f"{1.0 - self_weights[i]:.6g} > 1); lower alpha or raise sigma (paper 004 §4)"
        )
    np.fill_diagonal(xi, self_weights)
    return xi


def heurfedamp_weights(models: np.ndarray, *, sigma: float, self_weight: float) -> np.ndarray:
    """The ``(K, K)`` message weights ``ξ`` of HeurFedAMP (paper 004 eq. 8).

    ``ξ_ii = self_weight`` and ``ξ_ij = (1 − ξ_ii) exp(σ cos(w_i, w_j)) / Σ_{h≠i} exp(σ cos(w_i, w_h))``.
    With a single client, ``ξ = [[1]]`` (there is no one to pass messages).

    Raises:
        ValueError: for a zero model (its cosine similarity is undefined) or bad hyper-parameters.
    """
    w = _check_models(models)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    if not 0.0 <= self_weight <= 1.0:
        raise ValueError(f"self_weight must lie in [0, 1], got {self_weight!r}")
    k = w.shape[0]
    if k == 1:
        return np.ones((1, 1))
    norms = np.linalg.norm(w, axis=1)
    if np.any(norms == 0):
        raise ValueError(f"HeurFedAMP needs non-zero models; rows {np.flatnonzero(norms == 0).tolist()} are zero")
    unit = w / norms[:, None]
    logits = sigma * (unit @ unit.T)
    np.fill_diagonal(logits, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    attention = np.exp(logits)
    xi = (1.0 - self_weight) * attention / attention.sum(axis=1, keepdims=True)
    np.fill_diagonal(xi, self_weight)
    return xi


def cloud_models(models: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The personalized cloud models ``u_i = Σ_j ξ_ij w_j`` (paper 004 eq. 5), ``(K, d)``."""
    return np.asarray(weights, dtype=np.float64) @ _check_models(models)
