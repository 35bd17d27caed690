"""Covariance helpers shared by the generators: a jittered Cholesky and shrinkage to the diagonal."""

from __future__ import annotations

import numpy as np

from portfed.generators.base import GeneratorError
from portfed.validation import check_fraction

# Jitter ladder relative to the mean variance: 1e-12 … 1e-4.  A covariance that needs more than
# 1e-4 of its scale on the diagonal to factorize is not "not quite PD", it is broken input.
_JITTERS = tuple(10.0**-k for k in range(12, 3, -1))


def cholesky_jittered(cov: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor ``L`` of ``cov`` (``L Lᵀ = cov``), adding a tiny ridge if not PD.

    The ridge ``ε · mean(diag cov) · I`` grows from ε = 1e-12 to 1e-4; beyond that a
    :class:`GeneratorError` is raised naming the smallest eigenvalue.
    """
    cov = np.asarray(cov, dtype=np.float64)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or not np.all(np.isfinite(cov)):
        raise GeneratorError(f"covariance must be a finite square matrix, got shape {cov.shape}")
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        pass
    scale = float(np.mean(np.diag(cov)))
    if scale <= 0:
        raise GeneratorError(f"covariance has non-positive mean variance {scale!r}")
    eye = np.eye(cov.shape[0])
    for eps in _JITTERS:
        try:
            return np.linalg.cholesky(cov + eps * scale * eye)
        except np.linalg.LinAlgError:
            continue
    raise GeneratorError(
        f"covariance is not positive definite (smallest eigenvalue {np.linalg.eigvalsh(cov)[0]!r})"
    )


def shrink_to_diagonal(x: np.ndarray, shrinkage: float | None = None) -> tuple[np.ndarray, float]:
    """Covariance of the rows of ``x`` (``n × m``) with the correlations shrunk toward zero.

    ``Σ* = (1 − λ) S + λ diag(S)``: variances are kept, off-diagonal covariances are multiplied by
    ``1 − λ``.  With ``shrinkage=None`` λ is the Schäfer & Strimmer (2005, target "D") estimate of
    the Ledoit–Wolf optimal intensity on standardized data ``z``:

        λ* = Σ_{i≠j} Var̂(r_ij) / Σ_{i≠j} r_ij²,
        Var̂(r_ij) = n / (n − 1)³ · Σ_k (w_kij − w̄_ij)²,   w_kij = z_ki z_kj,

    clipped to [0, 1].  Returns ``(Σ*, λ)``.  Needs ``n ≥ 2`` rows and positive variances.
    """
    x = np.asarray(x, dtype=np.float64)
    n, m = x.shape
    if n < 2:
        raise GeneratorError(f"a covariance needs at least 2 observations, got {n}")
    cov = np.cov(x, rowvar=False, ddof=1).reshape(m, m)
    var = np.diag(cov)
    if np.any(var <= 0):
        raise GeneratorError(f"zero variance in column {int(np.argmin(var))}: cannot fit a covariance")
    if shrinkage is None:
        lam = _schafer_strimmer_intensity(x)
    else:
        lam = check_fraction(shrinkage, "shrinkage", error=GeneratorError)
    shrunk = (1.0 - lam) * cov
    np.fill_diagonal(shrunk, var)
    return shrunk, lam


def _schafer_strimmer_intensity(x: np.ndarray) -> float:
    n, m = x.shape
    if m == 1:
        return 0.0
    z = (x - x.mean(axis=0)) / x.std(axis=0, ddof=1)
    w = z[:, :, None] * z[:, None, :]
    w_mean = w.mean(axis=0)
    r = w_mean * n / (n - 1)
    var_r = n / (n - 1) ** 3 * ((w - w_mean) ** 2).sum(axis=0)
    off = ~np.eye(m, dtype=bool)
    denom = float((r[off] ** 2).sum())
    if denom == 0.0:
        return 1.0
    return float(np.clip(var_r[off].sum() / denom, 0.0, 1.0))
