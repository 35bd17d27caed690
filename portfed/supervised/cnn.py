"""Paper 004's small CNN as a per-party :class:`~portfed.federation.cohort.LocalTrainer` (torch, on the CPU or a CUDA device).

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

Device and precision (``training.device``, ``training.precision``): the network, each party's data,
parameters and Adam moments live on ``device`` in ``precision`` for a whole local training; the
federation sees float64 numpy vectors at the round's boundary only.  The initialization does not depend
on either (drawn on the CPU in float64, then cast).  On CUDA the arithmetic is pinned
(:meth:`CNNModel.arithmetic`): cuDNN's deterministic algorithms and no TF32, so a seed gives the same
numbers on the same card and ``float32`` means float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from portfed.agents.adam import AdamState, adam_step
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


#: ``training.precision`` → the dtype of the network's arithmetic.
PRECISIONS: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}


class CNNModel:
    """Flat-vector access to :func:`paper_cnn` on ``device`` in ``precision``: parameter count, seeded
    initialization, scoring."""

    def __init__(self, n_features: int, n_classes: int, device: str = "cpu", precision: str = "float64") -> None:
        side = int(round(np.sqrt(n_features)))
        if side * side != n_features:
            raise ValueError(f"the CNN needs square images; {n_features} features are not a square")
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
        self.device, self.dtype = torch.device(device), PRECISIONS[precision]
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this machine's PyTorch sees no CUDA device")
        self.side, self.n_classes = side, n_classes
        self.net = paper_cnn(side, n_classes).to(self.device, self.dtype)
        self.layer_shapes = [tuple(p.shape) for p in self.net.parameters()]  # the flat vector's pieces, in order
        self.n_params = int(sum(p.numel() for p in self.net.parameters()))

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        """PyTorch's default initialization, seeded from ``rng`` (on the CPU in float64, whatever the
        model's device and precision)."""
        with torch.random.fork_rng(devices=[]):  # leave the caller's global torch stream untouched
            torch.manual_seed(int(rng.integers(2**31)))
            net = paper_cnn(self.side, self.n_classes)
        return nn.utils.parameters_to_vector(net.parameters()).detach().numpy().copy()

    def tensor(self, array: np.ndarray | torch.Tensor) -> torch.Tensor:
        """``array`` (parameters or images) on the model's device in its precision."""
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            array = array.copy()  # torch refuses to wrap read-only memory (the data splits are read-only views)
        return torch.as_tensor(array, dtype=self.dtype, device=self.device)

    def labels(self, array: np.ndarray) -> torch.Tensor:
        """Class labels on the model's device."""
        return torch.as_tensor(array, device=self.device)

    def load(self, params: np.ndarray | torch.Tensor) -> None:
        nn.utils.vector_to_parameters(self.tensor(params), self.net.parameters())

    def gradient(self) -> torch.Tensor:
        """The flat gradient the last backward pass left in the network."""
        return torch.cat([p.grad.reshape(-1) for p in self.net.parameters()])

    @contextlib.contextmanager
    def arithmetic(self) -> Iterator[None]:
        """On CUDA: cuDNN's deterministic algorithms, no autotuning, no TF32 in convolutions or matrix
        products (restored afterwards); on the CPU nothing changes."""
        if self.device.type != "cuda":
            yield
            return
        matmul = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=False):
                yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = matmul

    def score(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """``(accuracy, mean cross-entropy)`` of ``params`` on ``(x, y)``."""
        if x.shape[0] == 0:
            return float("nan"), float("nan")
        self.load(params)
        with torch.no_grad(), self.arithmetic():
            logits = self.net(self.tensor(x))
            target = self.labels(y)
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
        self.adam = AdamState.zeros_like(model.tensor(torch.zeros(1, model.n_params)))  # one row: this party
        self._x, self._y = model.tensor(data.x_train), model.labels(data.y_train)  # on the device, once

    def _update(self, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """One optimizer step: ``w − η g`` (SGD) or Adam with the party's moments
        (:func:`~portfed.agents.adam.adam_step`, torch's association)."""
        if self.optimizer == "sgd":
            return w - self.learning_rate * grad
        theta = w.detach().clone()[None]
        adam_step(theta, grad[None], self.adam, learning_rate=self.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPS)
        return theta[0]

    def train_rule(self, params: np.ndarray | None, steps: int, rule: LocalRule) -> tuple[TrainResult, RuleOutput]:
        if self.optimizer != "sgd":
            raise ValueError(f"the local rule {rule.kind!r} is written for SGD steps; this party trains with "
                             f"{self.optimizer!r}")
        return super().train_rule(params, steps, rule)

    def batch_stats(self, params: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cross-entropy, accuracy and gradient of the one-row ``params`` on the training samples ``index``."""
        self.model.load(params[0])
        rows = torch.as_tensor(index, device=self.model.device)
        with self.model.arithmetic():
            logits = self.model.net(self._x[rows])
            loss = nn.functional.cross_entropy(logits, self._y[rows])
            self.model.net.zero_grad()
            loss.backward()
        grad = self.model.gradient().to("cpu", torch.float64).numpy()
        accuracy = float((logits.argmax(dim=1) == self._y[rows]).double().mean())
        return np.array([float(loss.detach())]), np.array([accuracy]), grad[None, :].copy()

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> TrainResult:
        start, objective, index = self.begin(params, steps, objective)
        model = self.model
        w = model.tensor(start)
        mix, penalty = objective.mix(self.learning_rate), objective.penalty()
        target = None if mix is None else model.tensor(mix[0])
        center = None if penalty is None else model.tensor(penalty[0])
        batches = torch.as_tensor(index, device=model.device)
        accuracies, losses = [], []  # on the device: one transfer at the end, no wait per step
        with model.arithmetic():
            for s in range(steps):
                model.load(w)
                x, y = self._x[batches[s]], self._y[batches[s]]
                logits = model.net(x)
                total = nn.functional.cross_entropy(logits, y)
                if penalty is not None:
                    flat = nn.utils.parameters_to_vector(model.net.parameters())
                    total = total + 0.5 * penalty[1] * torch.sum((flat - center) ** 2)
                model.net.zero_grad()
                total.backward()
                w = self._update(w, model.gradient())
                if mix is not None:
                    w = mix[1] * w + (1.0 - mix[1]) * target
                accuracies.append((logits.argmax(dim=1) == y).double().mean())
                losses.append(total.detach().double())
        records = [StepRecord(mean_log_return=a, loss=v) for a, v in
                   zip(torch.stack(accuracies).tolist(), torch.stack(losses).tolist(), strict=True)] if steps else []
        self.params = w.to("cpu", torch.float64).numpy().copy()
        return TrainResult(params=self.params.copy(), records=records)


def make_cnn_parties(data: FederatedData, learning_rate: float, batch_size: int, seed: int,
                     optimizer: str = "sgd", device: str = "cpu", precision: str = "float64") -> list[CNNParty]:
    """One :class:`CNNParty` per party (sharing one network object for the arithmetic, on ``device`` in
    ``precision``), seeded like the convex trainers, each with its own ``optimizer`` state."""
    if data.task != "classification":
        raise ValueError("the CNN is a classifier; the data is a regression task")
    model = CNNModel(data.n_features, data.n_classes, device, precision)
    return [CNNParty(p, model, learning_rate, batch_size, party_stream(seed, k), optimizer)
            for k, p in enumerate(data.parties)]
