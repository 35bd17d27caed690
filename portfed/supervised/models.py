"""Convex models for many parties at once: multinomial logistic regression and linear regression.

Parameters are stacked ``(K, d)`` float64 rows, one per party, so one matrix product serves a whole
cohort.  Logistic regression (paper 000 §8.1, paper 003 §5.1; FedProx's MNIST/FEMNIST/synthetic model):
row ``w = [vec(W) (p·C, row-major), b (C)]``, loss the mean cross-entropy of ``softmax(xW + b)``,
reward the batch accuracy.  Linear regression (paper 003 §5.1): ``w = [θ (p), b]``, loss the mean
squared error ``mean((xθ + b − y)²)``, reward ``−MSE``.

:func:`sgd_steps` is the local iteration of the Fed+ Local-Solve (paper 003 Alg. 1 lines 19–20,
eq. 14): a gradient step on ``f_k(w) + μ/2 ‖w − c‖²`` (the proximal term of FedAMP, paper 004
eq. 6) followed by the mix ``w ← κ w + (1 − κ) z``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODEL_KINDS: tuple[str, ...] = ("logistic", "linear")


@dataclass(frozen=True)
class BatchStats:
    """Per row: the data loss (without any proximal term), the reward (accuracy or −MSE), the gradient."""

    loss: np.ndarray
    reward: np.ndarray
    grad: np.ndarray


@dataclass(frozen=True)
class LinearModel:
    """``kind`` ``"logistic"`` (``n_classes >= 2``) or ``"linear"`` (``n_classes = 0``) on ``n_features`` inputs."""

    kind: str
    n_features: int
    n_classes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"unknown model kind {self.kind!r}; valid: {', '.join(MODEL_KINDS)}")
        if self.kind == "logistic" and self.n_classes < 2:
            raise ValueError(f"logistic regression needs n_classes >= 2, got {self.n_classes!r}")
        if self.kind == "linear" and self.n_classes != 0:
            raise ValueError(f"linear regression takes n_classes = 0, got {self.n_classes!r}")
        if self.n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {self.n_features!r}")

    @property
    def n_outputs(self) -> int:
        return self.n_classes if self.kind == "logistic" else 1

    @property
    def n_params(self) -> int:
        return (self.n_features + 1) * self.n_outputs

    def init_params(self, rng: np.random.Generator, scale: float = 0.01) -> np.ndarray:
        """``(d,)`` small random parameters (HeurFedAMP's cosine similarity needs non-zero models)."""
        return scale * rng.standard_normal(self.n_params)

    def _unpack(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, p, c = params.shape[0], self.n_features, self.n_outputs
        return params[:, :p * c].reshape(k, p, c), params[:, p * c:]

    def outputs(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``(K, B, C)`` logits (or ``(K, B, 1)`` predictions) for ``x`` ``(K, B, p)``."""
        weights, bias = self._unpack(params)
        return x @ weights + bias[:, None, :]

    def batch(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> BatchStats:
        """Loss, reward and gradient of each row of ``params`` ``(K, d)`` on its batch ``x`` ``(K, B, p)``, ``y`` ``(K, B)``."""
        out = self.outputs(params, x)
        size = x.shape[1]
        if self.kind == "logistic":
            out = out - out.max(axis=2, keepdims=True)
            log_p = out - np.log(np.exp(out).sum(axis=2, keepdims=True))
            picked = np.take_along_axis(log_p, y[:, :, None], axis=2)[:, :, 0]
            loss = -picked.mean(axis=1)
            reward = (np.argmax(out, axis=2) == y).mean(axis=1)
            residual = np.exp(log_p)
            np.put_along_axis(residual, y[:, :, None], np.take_along_axis(residual, y[:, :, None], axis=2) - 1.0, axis=2)
            residual /= size
        else:
            error = out[:, :, 0] - y
            loss = (error**2).mean(axis=1)
            reward = -loss
            residual = (2.0 / size) * error[:, :, None]
        grad_w = x.transpose(0, 2, 1) @ residual
        grad = np.concatenate([grad_w.reshape(params.shape[0], -1), residual.sum(axis=1)], axis=1)
        return BatchStats(loss=loss, reward=reward, grad=grad)

    def score(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """``(metric, loss)`` of one model ``(d,)`` on ``(x, y)``: accuracy or MSE, and the loss."""
        if x.shape[0] == 0:
            return float("nan"), float("nan")
        stats = self.batch(params[None, :], x[None], y[None])
        metric = stats.reward[0] if self.kind == "logistic" else -stats.reward[0]
        return float(metric), float(stats.loss[0])


def sgd_steps(model: LinearModel, w: np.ndarray, batches_x: list[np.ndarray], batches_y: list[np.ndarray],
              steps: np.ndarray, learning_rate: float, *, mix_target: np.ndarray | None = None,
              kappa: np.ndarray | None = None, prox_center: np.ndarray | None = None,
              prox_coef: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run local SGD for ``K`` rows at once; row ``k`` takes ``steps[k]`` steps, then stops (stragglers).

    ``batches_x[s]`` ``(K, B, p)`` / ``batches_y[s]`` ``(K, B)`` are the minibatches of step ``s``
    (rows past their last step are ignored).  Returns the new ``(K, d)`` parameters and ``(K, S)``
    rewards and losses of each step (measured before the step, the loss with its proximal term; NaN
    after a row's last step).
    """
    w = np.array(w, dtype=np.float64)
    k = w.shape[0]
    kappa = np.ones(k) if kappa is None else np.asarray(kappa, dtype=np.float64)
    coef = np.zeros(k) if prox_coef is None else np.asarray(prox_coef, dtype=np.float64)
    n_steps = len(batches_x)
    rewards, losses = np.full((k, n_steps), np.nan), np.full((k, n_steps), np.nan)
    for s in range(n_steps):
        live = steps > s
        stats = model.batch(w, batches_x[s], batches_y[s])
        grad, loss = stats.grad, stats.loss
        if prox_center is not None:
            gap = w - prox_center
            grad = grad + coef[:, None] * gap
            loss = loss + 0.5 * coef * (gap**2).sum(axis=1)
        new = w - learning_rate * grad
        if mix_target is not None:
            new = kappa[:, None] * new + (1.0 - kappa[:, None]) * mix_target
        w = np.where(live[:, None], new, w)
        rewards[live, s], losses[live, s] = stats.reward[live], loss[live]
    return w, rewards, losses
