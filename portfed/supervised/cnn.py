"""Paper 004's small CNN as a per-party :class:`~portfed.federation.cohort.LocalTrainer` (torch, CPU).

Architecture (paper 004 §7): conv 5×5, 32 channels → max-pool 2 → conv 5×5, 64 channels → max-pool 2
→ fully connected 512 → softmax, with ReLU activations and "same" padding, for square one-channel
images of side ``side`` (MNIST: 28; scikit-learn digits: 8).  Trained with plain SGD at the config's
η (the default), so that the Fed+ mix ``κ = 1/(1 + ησ)`` and the proximal term of the Local-Solve
(paper 003 eq. 14, paper 004 eq. 6) apply exactly as for the convex models, or — paper 004's own
setting, "Adam with learning rate 1e-3" — with Adam (``optimizer="adam"``; Kingma & Ba's update with
torch's defaults β = (0.9, 0.999), ε = 1e-8): each party keeps its moments across rounds, the gradient
includes FedAMP's proximal term ``λ/(2α) ‖w − u_i‖²`` (so the steps approximately solve paper 004
eq. 6, as the paper's Adam did), and a Fed+ mix, where the algorithm has one, follows each step.  The
personalised baselines' local rules are SGD maths (:mod:`portfed.federation.local_rules`) and refuse Adam.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from portfed.federation.cohort import LocalObjective
from portfed.federation.local_rules import LocalRule, RuleOutput
from portfed.supervised.data import FederatedData, PartyData
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


OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


class CNNParty(SGDParty):
    """One party training its own copy of the CNN with minibatch SGD or Adam
    (:class:`~portfed.federation.cohort.LocalTrainer`; module docstring)."""

    def __init__(self, data: PartyData, model: CNNModel, learning_rate: float, batch_size: int,
                 rng: np.random.Generator, optimizer: str = "sgd") -> None:
        super().__init__(data, model, learning_rate, batch_size, rng)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        self.optimizer = optimizer
        self.adam_moments = (torch.zeros(model.n_params, dtype=torch.float64),
                             torch.zeros(model.n_params, dtype=torch.float64))
        self.adam_steps = 0

    def _update(self, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """One optimizer step: ``w − η g`` (SGD) or Adam's ``w − η m̂/(√v̂ + ε)`` with the party's moments."""
        if self.optimizer == "sgd":
            return w - self.learning_rate * grad
        (b1, b2), (m, v) = ADAM_BETAS, self.adam_moments
        self.adam_steps += 1
        m, v = b1 * m + (1.0 - b1) * grad, b2 * v + (1.0 - b2) * grad * grad
        self.adam_moments = (m, v)
        m_hat, v_hat = m / (1.0 - b1 ** self.adam_steps), v / (1.0 - b2 ** self.adam_steps)
        return w - self.learning_rate * m_hat / (torch.sqrt(v_hat) + ADAM_EPS)

    def train_rule(self, params: np.ndarray | None, steps: int, rule: LocalRule) -> tuple[TrainResult, RuleOutput]:
        if self.optimizer != "sgd":
            raise ValueError(f"the local rule {rule.kind!r} is written for SGD steps; this party trains with "
                             f"{self.optimizer!r}")
        return super().train_rule(params, steps, rule)

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
        mix, penalty = objective.mix(self.learning_rate), objective.penalty()
        target = None if mix is None else torch.tensor(mix[0], dtype=torch.float64)
        center = None if penalty is None else torch.tensor(penalty[0], dtype=torch.float64)
        records = []
        for s in range(steps):
            self.model.load(w)
            x, y = torch.as_tensor(self.data.x_train[index[s]]), torch.as_tensor(self.data.y_train[index[s]])
            logits = self.model.net(x)
            loss = nn.functional.cross_entropy(logits, y)
            total = loss
            if penalty is not None:
                flat = nn.utils.parameters_to_vector(self.model.net.parameters())
                total = loss + 0.5 * penalty[1] * torch.sum((flat - center) ** 2)
            self.model.net.zero_grad()
            total.backward()
            grad = torch.cat([p.grad.reshape(-1) for p in self.model.net.parameters()])
            w = self._update(w, grad)
            if mix is not None:
                w = mix[1] * w + (1.0 - mix[1]) * target
            accuracy = float((logits.argmax(dim=1) == y).double().mean())
            records.append(StepRecord(mean_log_return=accuracy, loss=float(total.detach())))
        self.params = w.numpy().copy()
        return TrainResult(params=self.params.copy(), records=records)


def make_cnn_parties(data: FederatedData, learning_rate: float, batch_size: int, seed: int,
                     optimizer: str = "sgd") -> list[CNNParty]:
    """One :class:`CNNParty` per party (sharing one network object for the arithmetic), seeded like the
    convex trainers, each with its own ``optimizer`` state."""
    if data.task != "classification":
        raise ValueError("the CNN is a classifier; the data is a regression task")
    model = CNNModel(data.n_features, data.n_classes)
    return [CNNParty(p, model, learning_rate, batch_size, party_stream(seed, k), optimizer)
            for k, p in enumerate(data.parties)]
