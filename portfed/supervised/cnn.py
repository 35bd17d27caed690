"""Paper 004's small CNN as a per-party :class:`~portfed.federation.cohort.LocalTrainer` (torch, CPU).

Architecture (paper 004 §7): conv 5×5, 32 channels → max-pool 2 → conv 5×5, 64 channels → max-pool 2
→ fully connected 512 → softmax, with ReLU activations and "same" padding, for square one-channel
images of side ``side`` (MNIST: 28; scikit-learn digits: 8).  Trained with plain SGD at the config's
η, so that the Fed+ mix ``κ = 1/(1 + ησ)`` and the proximal term of the Local-Solve (paper 003 eq. 14,
paper 004 eq. 6) apply exactly as for the convex models; paper 004 used Adam (a documented substitution).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from portfed.federation.cohort import LocalObjective
from portfed.supervised.data import FederatedData
from portfed.supervised.trainers import SGDParty, StepRecord, TrainResult, party_stream


def paper_cnn(side: int, n_classes: int) -> nn.Sequential:
    """The network of paper 004 for ``side × side`` images (``side`` divisible by 4)."""
    if side % 4:
        raise ValueError(f"the CNN needs an image side divisible by 4, got {side}")
    return nn.Sequential(
        nn.Unflatten(1, (1, side, side)),
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (side // 4) ** 2, 512), nn.ReLU(), nn.Linear(512, n_classes),
    ).double()


class CNNModel:
    """Flat-vector access to :func:`paper_cnn`: parameter count, seeded initialization, scoring."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        side = int(round(np.sqrt(n_features)))
        if side * side != n_features:
            raise ValueError(f"the CNN needs square images; {n_features} features are not a square")
        self.side, self.n_classes = side, n_classes
        self.net = paper_cnn(side, n_classes)
        self.n_params = int(sum(p.numel() for p in self.net.parameters()))

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        """PyTorch's default initialization, seeded from ``rng``."""
        with torch.random.fork_rng(devices=[]):  # leave the caller's global torch stream untouched
            torch.manual_seed(int(rng.integers(2**31)))
            net = paper_cnn(self.side, self.n_classes)
        return nn.utils.parameters_to_vector(net.parameters()).detach().numpy().copy()

    def load(self, params: np.ndarray) -> None:
        nn.utils.vector_to_parameters(torch.as_tensor(np.asarray(params, dtype=np.float64)), self.net.parameters())

    def score(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """``(accuracy, mean cross-entropy)`` of ``params`` on ``(x, y)``."""
        if x.shape[0] == 0:
            return float("nan"), float("nan")
        self.load(params)
        with torch.no_grad():
            logits = self.net(torch.as_tensor(x))
            target = torch.as_tensor(y)
            loss = nn.functional.cross_entropy(logits, target)
            return float((logits.argmax(dim=1) == target).double().mean()), float(loss)


class CNNParty(SGDParty):
    """One party training its own copy of the CNN with minibatch SGD (:class:`~portfed.federation.cohort.LocalTrainer`)."""

    def batch_stats(self, params: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cross-entropy, accuracy and gradient of the one-row ``params`` on the training samples ``index``."""
        self.model.load(params[0])
        x, y = torch.as_tensor(self.data.x_train[index]), torch.as_tensor(self.data.y_train[index])
        logits = self.model.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.model.net.zero_grad()
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in self.model.net.parameters()]).numpy()
        accuracy = float((logits.argmax(dim=1) == y).double().mean())
        return np.array([float(loss.detach())]), np.array([accuracy]), grad[None, :].copy()

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> TrainResult:
        start, objective, index = self.begin(params, steps, objective)
        w = torch.tensor(start, dtype=torch.float64)
        target = None if objective.mix_target is None else torch.tensor(objective.mix_target, dtype=torch.float64)
        center = None if objective.prox_center is None else torch.tensor(objective.prox_center, dtype=torch.float64)
        records = []
        for s in range(steps):
            self.model.load(w)
            x, y = torch.as_tensor(self.data.x_train[index[s]]), torch.as_tensor(self.data.y_train[index[s]])
            logits = self.model.net(x)
            loss = nn.functional.cross_entropy(logits, y)
            total = loss
            if objective.prox_coef > 0:
                flat = nn.utils.parameters_to_vector(self.model.net.parameters())
                total = loss + 0.5 * objective.prox_coef * torch.sum((flat - center) ** 2)
            self.model.net.zero_grad()
            total.backward()
            grad = torch.cat([p.grad.reshape(-1) for p in self.model.net.parameters()])
            w = w - self.learning_rate * grad
            if target is not None:
                w = objective.kappa * w + (1.0 - objective.kappa) * target
            accuracy = float((logits.argmax(dim=1) == y).double().mean())
            records.append(StepRecord(mean_log_return=accuracy, loss=float(total.detach())))
        self.params = w.numpy().copy()
        return TrainResult(params=self.params.copy(), records=records)


def make_cnn_parties(data: FederatedData, learning_rate: float, batch_size: int, seed: int) -> list[CNNParty]:
    """One :class:`CNNParty` per party (sharing one network object for the arithmetic), seeded like the
    convex trainers."""
    if data.task != "classification":
        raise ValueError("the CNN is a classifier; the data is a regression task")
    model = CNNModel(data.n_features, data.n_classes)
    return [CNNParty(p, model, learning_rate, batch_size, party_stream(seed, k)) for k, p in enumerate(data.parties)]
