"""Seeded synthetic federated tasks: FedProx's Synthetic(ζ, β) and paper 003's synthetic regression.

**Synthetic(ζ, β)** (Li et al., FedProx §5.1; used by paper 000 §8.1 / Fig. 2, paper 003 §5.2), party k:
``u_k ~ N(0, ζ)``, ``W_k ∈ R^{60×10}`` and ``b_k`` entries ``~ N(u_k, 1)``; ``B_k ~ N(0, β)``,
``v_k`` entries ``~ N(B_k, 1)``; ``x ~ N(v_k, Σ)`` with ``Σ_jj = j^{−1.2}``;
``y = argmax softmax(W_k x + b_k)``; samples per party ``⌊lognormal(4, 2)⌋ + 50``.  As in the public
FedProx generator, ζ and β are the *standard deviations* of ``u_k`` and ``B_k``.  The IID variant
shares one ``(W, b) ~ N(0, 1)`` and ``v = 0`` across parties.

**Synthetic regression** (paper 003 §5.1), party k: ``y = w_kᵀ x + v``, ``v ~ N(0, 2)``;
``x ~ N(μ_k, Σ)``, ``Σ_jj = (mod(j − 1, 50) + 1)^{−1.1}`` (the printed ``mod(j, 50)^{−1.1}`` is
infinite at multiples of 50), ``μ_k`` entries ``~ N(0, 0.5)``; ``w_k = w̄ + Laplace(0.5)`` with
``w̄ ~ N(0, 5 I)``; the outlier party draws its own ``w̄ ~ N(0, 50 I)``.  The paper's ``N(m, s)``
are read as variances here (``v`` has standard deviation √2), which the paper does not state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from portfed.supervised.data import FederatedData, split_party
from portfed.validation import check_int, check_number


@dataclass(frozen=True)
class RegressionTruth:
    """The true per-party weights of a synthetic regression and the index of its outlier party."""

    weights: np.ndarray
    outlier: int | None


def power_law_sizes(n_parties: int, rng: np.random.Generator, *, mean: float = 4.0, sigma: float = 2.0,
                    minimum: int = 50, maximum: int | None = None) -> np.ndarray:
    """FedProx's sample counts ``⌊lognormal(mean, sigma)⌋ + minimum`` (capped at ``maximum`` when given)."""
    sizes = rng.lognormal(mean, sigma, n_parties).astype(np.int64) + minimum
    return sizes if maximum is None else np.minimum(sizes, maximum)


def fedprox_synthetic(n_parties: int, zeta: float, beta: float, *, seed: int, iid: bool = False,
                      n_features: int = 60, n_classes: int = 10, max_samples: int | None = None,
                      fractions: Sequence[float] = (0.7, 0.1, 0.2)) -> FederatedData:
    """Synthetic(ζ, β) of FedProx (module docstring); ``fractions`` cut each party into train/val/test
    (FedProx: 80/20 train/test; here 10 % of the samples move from train to validation)."""
    n_parties = check_int(n_parties, "n_parties", minimum=1)
    zeta = check_number(zeta, "zeta", minimum=0.0)
    beta = check_number(beta, "beta", minimum=0.0)
    rng = np.random.default_rng(seed)
    sizes = power_law_sizes(n_parties, rng, maximum=max_samples)
    scale = np.sqrt(np.arange(1, n_features + 1, dtype=np.float64) ** -1.2)
    shared_w = rng.normal(0.0, 1.0, (n_features, n_classes))
    shared_b = rng.normal(0.0, 1.0, n_classes)
    parties = []
    for k in range(n_parties):
        if iid:
            w, b, v = shared_w, shared_b, np.zeros(n_features)
        else:
            u = rng.normal(0.0, zeta)
            w = rng.normal(u, 1.0, (n_features, n_classes))
            b = rng.normal(u, 1.0, n_classes)
            v = rng.normal(rng.normal(0.0, beta), 1.0, n_features)
        x = v + scale * rng.standard_normal((int(sizes[k]), n_features))
        y = np.argmax(x @ w + b, axis=1).astype(np.int64)
        parties.append(split_party(x, y, fractions, rng))
    name = "IID" if iid else f"ζ={zeta:g}, β={beta:g}"
    return FederatedData(parties=tuple(parties), task="classification", n_features=n_features,
                         n_classes=n_classes, description=f"Synthetic({name}), {n_parties} parties (FedProx generator)")


def regression_covariance_diagonal(n_features: int) -> np.ndarray:
    """``Σ_jj = (mod(j − 1, 50) + 1)^{−1.1}`` for ``j = 1 … n_features`` (paper 003 §5.1, corrected)."""
    j = np.arange(1, n_features + 1)
    return (np.mod(j - 1, 50) + 1.0) ** -1.1


def synthetic_regression(n_parties: int = 10, *, seed: int, n_features: int = 1000, samples: int = 100,
                         outlier: int | None = 0, noise_var: float = 2.0, mean_var: float = 0.5,
                         weight_var: float = 5.0, outlier_var: float = 50.0, laplace_scale: float = 0.5,
                         fractions: Sequence[float] = (0.4, 0.1, 0.5)) -> tuple[FederatedData, RegressionTruth]:
    """Paper 003's synthetic regression (module docstring) and its true weights.

    ``outlier`` is the party whose ``w̄`` has variance ``outlier_var`` (``None``: no outlier);
    ``fractions``: the paper's 50/50 train/test split with a fifth of the training half kept for validation.
    """
    n_parties = check_int(n_parties, "n_parties", minimum=1)
    samples = check_int(samples, "samples", minimum=3)
    if outlier is not None:
        check_int(outlier, "outlier", minimum=0, maximum=n_parties - 1)
    rng = np.random.default_rng(seed)
    scale = np.sqrt(regression_covariance_diagonal(n_features))
    w_bar = rng.normal(0.0, np.sqrt(weight_var), n_features)
    weights, parties = np.empty((n_parties, n_features)), []
    for k in range(n_parties):
        center = rng.normal(0.0, np.sqrt(outlier_var), n_features) if k == outlier else w_bar
        weights[k] = center + rng.laplace(0.0, laplace_scale, n_features)
        mu = rng.normal(0.0, np.sqrt(mean_var), n_features)
        x = mu + scale * rng.standard_normal((samples, n_features))
        y = x @ weights[k] + rng.normal(0.0, np.sqrt(noise_var), samples)
        parties.append(split_party(x, y, fractions, rng))
    tag = "no outlier" if outlier is None else f"outlier party {outlier}"
    data = FederatedData(parties=tuple(parties), task="regression", n_features=n_features, n_classes=0,
                         description=f"synthetic regression (paper 003 §5.1), {n_parties} parties, d={n_features}, {tag}")
    return data, RegressionTruth(weights=weights, outlier=outlier)
