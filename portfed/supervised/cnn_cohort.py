"""Paper 004's CNN for all parties at once: a :class:`~portfed.federation.cohort.Cohort` whose step is one
batched forward and backward pass over the ``K`` planned parties' own networks.

Each party ``k`` has its own parameter vector ``w_k`` (the flat layout of :func:`~portfed.supervised.cnn.paper_cnn`);
the ``K`` networks are evaluated together: the convolutions as *grouped* convolutions (party ``k`` owns group
``k``'s input and output channels, so no weight is shared between parties), the fully connected layers as
batched matrix products.  Party ``k``'s loss is its own

    ``L_k(w_k) = CE(f(w_k; x_k), y_k) + μ_k/2 ‖w_k − c_k‖²``

(the Local-Solve's proximal term, :meth:`~portfed.federation.cohort.CohortPlan.penalty`), and since
``∂(Σ_j L_j)/∂w_k = ∇L_k(w_k)`` one backward pass of ``Σ_k L_k`` gives every party's gradient.  The
optimizer step (SGD or Adam with each party's own moments and step count) and the Fed+ mix
``w ← κ w + (1 − κ) z`` (paper 003 eq. 14) follow row by row, exactly as :class:`~portfed.supervised.cnn.CNNParty`
does for one party; the minibatches come from the same per-party streams, so the two engines compute the
same run and differ by floating-point round-off only (grouped and single convolutions sum in other
orders; checked in ``tests/test_supervised_cnn.py``).  :class:`~portfed.supervised.cnn.CNNParty` stays the
reference.

Measured on an H100 at commit af01a0c (``benchmarks/bench_supervised_cnn.py --device cuda``, float32, paper 004's MNIST
row, 20 parties): 2.01 ms per party-step against 2.69 ms for one party alone, so cuDNN runs the 20 groups
nearly one after another; the convolutions as batched matrix products over unfolded patches were slower
still (4.36 ms) and were not kept.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch.nn import functional

from portfed.agents.adam import AdamState, adam_step
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult
from portfed.federation.local_rules import RULES, LocalRule, RuleOutput, rule_steps
from portfed.federation.party_cohort import PartyCohort
from portfed.supervised.cnn import ADAM_BETAS, ADAM_EPS, OPTIMIZERS, CNNModel, make_cnn_parties
from portfed.supervised.data import FederatedData
from portfed.supervised.trainers import party_stream
from portfed.validation import check_int, check_number


def stacked_logits(model: CNNModel, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The logits ``(K, B, C)`` of ``K`` networks ``params`` ``(K, P)`` on their own images ``x`` ``(K, B, side²)``.

    The layers are those of :func:`~portfed.supervised.cnn.paper_cnn` (conv 5×5 → ReLU → max-pool 2, twice,
    then two fully connected layers), with party ``k``'s channels as group ``k`` of each convolution."""
    k, b = x.shape[:2]
    shapes = model.layer_shapes
    pieces = [piece.reshape(k, *shape) for piece, shape in
              zip(torch.split(params, [int(np.prod(s)) for s in shapes], dim=1), shapes, strict=True)]
    conv1_w, conv1_b, conv2_w, conv2_b, fc1_w, fc1_b, fc2_w, fc2_b = pieces
    h = x.reshape(k, b, model.side, model.side).transpose(0, 1)  # (B, K, side, side): party k's image is channel k
    for weight, bias in ((conv1_w, conv1_b), (conv2_w, conv2_b)):
        h = functional.conv2d(h, weight.reshape(-1, *weight.shape[2:]), bias.reshape(-1),
                              padding=weight.shape[-1] // 2, groups=k)
        h = functional.max_pool2d(functional.relu(h), 2)
    h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, 64 · (side/4)²), each party's maps in nn.Flatten's order
    h = functional.relu(torch.baddbmm(fc1_b.unsqueeze(1), h, fc1_w.transpose(1, 2)))
    return torch.baddbmm(fc2_b.unsqueeze(1), h, fc2_w.transpose(1, 2))


class CNNCohort:
    """All parties of ``data`` training paper 004's CNN together (:class:`~portfed.federation.cohort.Cohort`).

    Holds every party's data and Adam state (:class:`~portfed.agents.adam.AdamState`, ``(N, P)``) on
    ``device`` in ``precision``, the parties' current parameters (float64, for plans without a start)
    and their minibatch streams (:func:`~portfed.supervised.trainers.party_stream`, one ``(E_k, B)``
    draw per local training, as :class:`~portfed.supervised.cnn.CNNParty`).  A personalised baseline's local rule runs on the
    stacked models through :func:`~portfed.federation.local_rules.rule_steps` (SGD only, as for one party).
    """

    local_rules = frozenset(RULES)

    def __init__(self, data: FederatedData, learning_rate: float, batch_size: int, seed: int,
                 optimizer: str = "sgd", device: str = "cpu", precision: str = "float64") -> None:
        if data.task != "classification":
            raise ValueError("the CNN is a classifier; the data is a regression task")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        self.data, self.optimizer = data, optimizer
        self.model = CNNModel(data.n_features, data.n_classes, device, precision)
        self.learning_rate = check_number(learning_rate, "learning_rate", minimum=0.0, strict_min=True)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.streams = [party_stream(seed, k) for k in range(data.n_parties)]
        self.sizes = data.train_sizes()
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.x = self.model.tensor(np.concatenate([p.x_train for p in data.parties]))
        self.y = self.model.labels(np.concatenate([p.y_train for p in data.parties]))
        n, d = data.n_parties, self.model.n_params
        self.params = np.zeros((n, d))
        self.adam = AdamState.zeros_like(self.model.tensor(torch.zeros(n, d)))  # row k: party k's moments and clock

    @property
    def n_parties(self) -> int:
        return self.data.n_parties

    def _draw(self, plan: CohortPlan, *shape: int) -> np.ndarray:
        """Row ``i``'s minibatch indices ``(E_i, *shape)`` into the stacked training data, in ``(K, max E, *shape)``."""
        n_steps = int(plan.steps.max()) if plan.size else 0
        index = np.zeros((plan.size, n_steps, *shape), dtype=np.int64)
        for row, party in enumerate(plan.parties.tolist()):
            draw = self.streams[party].integers(0, self.sizes[party], size=(int(plan.steps[row]), *shape))
            index[row, :plan.steps[row]] = self.offsets[party] + draw
        return index

    def _losses(self, w: torch.Tensor, index: np.ndarray,
                penalty: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's loss ``L_k`` (cross-entropy + proximal term) and batch accuracy on the samples ``index`` ``(K, B)``."""
        rows = torch.as_tensor(index, device=self.model.device)
        logits, y = stacked_logits(self.model, w, self.x[rows]), self.y[rows]
        loss = functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").reshape(y.shape).mean(1)
        if penalty is not None:
            center, coef = penalty
            loss = loss + 0.5 * coef * torch.sum((w - center) ** 2, dim=1)
        return loss, (logits.argmax(dim=2) == y).double().mean(1)

    def _update(self, parties: np.ndarray, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """Rows ``w`` after one optimizer step of their ``parties``: SGD, or Adam with each party's own
        moments and clock (:func:`~portfed.agents.adam.adam_step`, in place)."""
        if self.optimizer == "sgd":
            return w - self.learning_rate * grad
        state = self.adam.rows(parties)
        adam_step(w, grad, state, learning_rate=self.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPS)
        self.adam.put(parties, state)
        return w

    def train(self, plan: CohortPlan) -> CohortResult:
        if plan.optimizer_state != "keep":
            raise ValueError(f"the CNN cohort keeps every party's optimizer state; optimizer_state "
                             f"{plan.optimizer_state!r} needs the batched portfolio engine")
        if plan.rule is not None:
            return self._train_rule(plan, plan.rule)
        model, index = self.model, self._draw(plan, self.batch_size)
        start = self.params[plan.parties] if plan.start is None else plan.start
        mix, penalty = plan.mix(self.learning_rate), plan.penalty()
        w = model.tensor(start)
        target = None if mix is None else (model.tensor(mix[0]), model.tensor(mix[1])[:, None])
        pull = None if penalty is None else (model.tensor(penalty[0]), model.tensor(penalty[1]))
        with model.arithmetic():
            rewards, losses = self._steps(plan.parties, plan.steps, index, w, target, pull)
        new_params = w.to("cpu", torch.float64).numpy()
        self.params[plan.parties] = new_params
        return self._result(new_params, rewards, losses)

    def _steps(self, parties: np.ndarray, steps: np.ndarray, index: np.ndarray, w: torch.Tensor,
               target: tuple[torch.Tensor, torch.Tensor] | None,
               pull: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``w`` (updated in place) of ``parties`` through their ``steps`` local steps on the minibatches
        ``index`` ``(rows, max E, B)``: the gradient of ``L_k``, the optimizer step, then the Fed+ mix towards
        ``target`` ``(z, κ)``; returns each step's batch accuracy and loss (NaN after a row's last step)."""
        device = self.model.device
        rewards = torch.full(index.shape[:2], torch.nan, dtype=torch.float64, device=device)
        losses = torch.full(index.shape[:2], torch.nan, dtype=torch.float64, device=device)
        for s in range(index.shape[1]):
            live = np.flatnonzero(steps > s)
            if live.size == 0:
                break
            rows = torch.as_tensor(live, device=device)
            w_live = w[rows].requires_grad_(True)
            loss, accuracy = self._losses(w_live, index[live, s], None if pull is None else (pull[0][rows], pull[1][rows]))
            (grad,) = torch.autograd.grad(loss.sum(), w_live)
            new = self._update(parties[live], w_live.detach(), grad)
            if target is not None:
                kappa = target[1][rows]
                new = kappa * new + (1.0 - kappa) * target[0][rows]
            w[rows] = new
            rewards[rows, s], losses[rows, s] = accuracy, loss.detach().double()
        return rewards.cpu().numpy(), losses.cpu().numpy()

    def _train_rule(self, plan: CohortPlan, rule: LocalRule) -> CohortResult:
        """A personalised baseline's local iterations on the stacked models (plain SGD steps only)."""
        if self.optimizer != "sgd":
            raise ValueError(f"the local rule {rule.kind!r} is written for SGD steps; this cohort trains with "
                             f"{self.optimizer!r}")
        index = self._draw(plan, rule.batches_per_step, self.batch_size)
        start = self.params[plan.parties] if plan.start is None else plan.start

        def oracle(rows: np.ndarray, s: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            with self.model.arithmetic():
                w = self.model.tensor(rows).requires_grad_(True)
                loss, accuracy = self._losses(w, index[:, s, j], None)
                (grad,) = torch.autograd.grad(loss.sum(), w)
            return (loss.detach().to("cpu", torch.float64).numpy(), accuracy.cpu().numpy(),
                    grad.to("cpu", torch.float64).numpy())

        new, output, rewards, losses = rule_steps(rule, start, plan.steps, self.learning_rate, oracle)
        self.params[plan.parties] = new
        return self._result(new, rewards, losses, output)

    @staticmethod
    def _result(params: np.ndarray, rewards: np.ndarray, losses: np.ndarray,
                personal: RuleOutput | None = None) -> CohortResult:
        """Each row's mean reward and loss over the steps it took (NaN for a row that took none)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            reward = np.nanmean(rewards, axis=1) if rewards.shape[1] else np.full(len(params), np.nan)
            loss = np.nanmean(losses, axis=1) if losses.shape[1] else np.full(len(params), np.nan)
        return CohortResult(params=params, train_reward=reward, train_loss=loss, personal=personal)


def cnn_engine(data: FederatedData, learning_rate: float, batch_size: int, seed: int, optimizer: str = "sgd",
               device: str = "cpu", precision: str = "float64") -> tuple[Cohort, CNNModel]:
    """The cohort that trains paper 004's CNN fastest on ``device``, and its model (for scoring).

    On a GPU: :class:`CNNCohort`, every party in one pass.  On the CPU: the parties one after another
    (:class:`~portfed.federation.party_cohort.PartyCohort` over :class:`~portfed.supervised.cnn.CNNParty`), which
    is faster there (``benchmarks/bench_supervised_cnn.py``, two cores, float32: 48–53 ms per party-step
    against 108–129 ms for 20 parties stacked; grouped convolutions are slower than single ones on the CPU,
    and Adam's passes over 20 × 1.66 M parameters leave the caches that one party's 6.6 MB stay in).
    Both compute the same run (the same minibatch streams and updates, round-off apart)."""
    if torch.device(device).type == "cuda":
        cohort = CNNCohort(data, learning_rate, batch_size, seed, optimizer, device, precision)
        return cohort, cohort.model
    parties = make_cnn_parties(data, learning_rate, batch_size, seed, optimizer, device, precision)
    return PartyCohort(parties), parties[0].model
