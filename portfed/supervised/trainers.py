"""The supervised parties behind the federation's contract (:mod:`portfed.federation.cohort`).

* :class:`SupervisedCohort` — all ``N`` parties of a :class:`~portfed.supervised.data.FederatedData`
  as one :class:`~portfed.federation.cohort.Cohort`: ``train(plan)`` runs the Local-Solve of the
  ``K`` planned parties as stacked ``(K, d)`` matrix products (:func:`~portfed.supervised.models.sgd_steps`).
* :class:`SupervisedParty` — one party as a :class:`~portfed.federation.cohort.LocalTrainer`
  (``local_train``), for the per-party adapter and as the reference the batched cohort must match.

Both draw party ``k``'s minibatches (``B`` samples with replacement per step) from the same seeded
stream ``SeedSequence([seed, k])``, one ``(E_k, B)`` draw per local training, so a run gives the
same numbers with either engine.  The reward of a step is the batch accuracy (classification) or
``−MSE`` (regression), the loss includes the proximal term (see ``CohortResult``).  A plan with a
local rule (the personalised baselines, :mod:`portfed.federation.local_rules`) draws ``(E_k, b, B)``
indices instead — ``b`` minibatches per step, the same stream as ``(E_k, B)`` when ``b = 1`` — and runs
:func:`~portfed.federation.local_rules.rule_steps` on the model's gradients.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from portfed.federation.cohort import CohortPlan, CohortResult, LocalObjective
from portfed.federation.local_rules import RULES, LocalRule, RuleOutput, rule_steps
from portfed.supervised.data import FederatedData, PartyData
from portfed.supervised.models import LinearModel, sgd_steps
from portfed.validation import check_int, check_number


class ParameterCount(Protocol):
    """A model with a flat parameter vector of ``n_params`` entries."""

    @property
    def n_params(self) -> int: ...


def party_stream(seed: int, party: int) -> np.random.Generator:
    """Party ``party``'s minibatch generator."""
    return np.random.default_rng(np.random.SeedSequence([seed, party]))


@dataclass(frozen=True)
class StepRecord:
    """One local step: ``mean_log_return`` is the batch reward (accuracy or −MSE), ``loss`` the local loss."""

    mean_log_return: float
    loss: float


@dataclass(frozen=True)
class TrainResult:
    params: np.ndarray
    records: list[StepRecord]


def model_for(data: FederatedData) -> LinearModel:
    """Logistic regression for a classification task, linear regression for a regression task."""
    if data.task == "classification":
        return LinearModel("logistic", data.n_features, data.n_classes)
    return LinearModel("linear", data.n_features)


class SGDParty:
    """What every party trained by minibatch SGD holds: its data, the (shared) model, the learning rate,
    the batch size, its minibatch stream and its current parameters; subclasses write ``local_train``."""

    def __init__(self, data: PartyData, model: ParameterCount, learning_rate: float, batch_size: int,
                 rng: np.random.Generator) -> None:
        self.data, self.model = data, model
        self.learning_rate = check_number(learning_rate, "learning_rate", minimum=0.0, strict_min=True)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.rng = rng
        self.params = np.zeros(model.n_params)

    def begin(self, params: np.ndarray | None, steps: int,
              objective: LocalObjective | None) -> tuple[np.ndarray, LocalObjective, np.ndarray]:
        """The start ``w`` (``params``, or the party's own model when ``None``), the checked objective and
        the ``(steps, B)`` minibatch indices of this local training (one draw, as the batched cohort)."""
        objective = LocalObjective() if objective is None else objective
        objective.check_size(self.model.n_params)
        w = self.params if params is None else np.asarray(params, dtype=np.float64)
        return w, objective, self.rng.integers(0, self.data.n_train, size=(steps, self.batch_size))

    def batch_stats(self, params: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(loss (1,), reward (1,), grad (1, d))`` of the one-row ``params`` ``(1, d)`` on the training
        samples ``index`` (the gradient oracle of :func:`~portfed.federation.local_rules.rule_steps`)."""
        raise NotImplementedError(f"{type(self).__name__} has no gradient oracle")

    def train_rule(self, params: np.ndarray | None, steps: int, rule: LocalRule) -> tuple[TrainResult, RuleOutput]:
        """A personalised baseline's local iterations (one-row ``rule``) from ``params`` (``None``: the
        party's own model); ``(E, b, B)`` minibatch indices in one draw, as the batched cohort."""
        w = self.params if params is None else np.asarray(params, dtype=np.float64)
        index = self.rng.integers(0, self.data.n_train, size=(steps, rule.batches_per_step, self.batch_size))
        new, output, rewards, losses = rule_steps(rule, w[None, :], np.array([steps]), self.learning_rate,
                                                  lambda rows, s, j: self.batch_stats(rows, index[s, j]))
        self.params = new[0]
        records = [StepRecord(float(r), float(v)) for r, v in zip(rewards[0], losses[0], strict=True)]
        return TrainResult(params=new[0].copy(), records=records), output


class SupervisedParty(SGDParty):
    """One party's local SGD on a convex model (:class:`~portfed.federation.cohort.LocalTrainer`)."""

    def batch_stats(self, params: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        stats = self.model.batch(params, self.data.x_train[index][None], self.data.y_train[index][None])
        return stats.loss, stats.reward, stats.grad

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> TrainResult:
        w, objective, index = self.begin(params, steps, objective)
        xs = [self.data.x_train[index[s]][None] for s in range(steps)]
        ys = [self.data.y_train[index[s]][None] for s in range(steps)]

        mix, penalty = objective.mix(self.learning_rate), objective.penalty()
        new, rewards, losses = sgd_steps(self.model, w[None, :], xs, ys, np.array([steps]), self.learning_rate,
                                         mix_target=None if mix is None else mix[0][None, :],
                                         kappa=None if mix is None else np.array([mix[1]]),
                                         prox_center=None if penalty is None else penalty[0][None, :],
                                         prox_coef=None if penalty is None else np.array([penalty[1]]))
        self.params = new[0]
        return TrainResult(params=new[0].copy(),
                           records=[StepRecord(float(r), float(v)) for r, v in zip(rewards[0], losses[0], strict=True)])


def make_parties(data: FederatedData, learning_rate: float, batch_size: int, seed: int) -> list[SupervisedParty]:
    """One :class:`SupervisedParty` per party of ``data``, seeded like :class:`SupervisedCohort`."""
    model = model_for(data)
    return [SupervisedParty(p, model, learning_rate, batch_size, party_stream(seed, k))
            for k, p in enumerate(data.parties)]


class SupervisedCohort:
    """All parties of ``data`` trained together (:class:`~portfed.federation.cohort.Cohort`), every local rule
    included (:func:`~portfed.federation.local_rules.rule_steps`)."""

    local_rules = frozenset(RULES)

    def __init__(self, data: FederatedData, learning_rate: float, batch_size: int, seed: int) -> None:
        self.data, self.model = data, model_for(data)
        self.learning_rate = check_number(learning_rate, "learning_rate", minimum=0.0, strict_min=True)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.streams = [party_stream(seed, k) for k in range(data.n_parties)]
        self.sizes = data.train_sizes()
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.x = np.concatenate([p.x_train for p in data.parties])
        self.y = np.concatenate([p.y_train for p in data.parties])
        self.params = np.zeros((data.n_parties, self.model.n_params))

    @property
    def n_parties(self) -> int:
        return self.data.n_parties

    def train(self, plan: CohortPlan) -> CohortResult:
        if plan.optimizer_state != "keep":
            raise ValueError(f"plain SGD has no optimizer state: optimizer_state {plan.optimizer_state!r} "
                             "is for the portfolio engine's Adam")
        if plan.rule is not None:
            return self._train_rule(plan, plan.rule)
        parties, steps = plan.parties, plan.steps
        k, n_steps = plan.size, int(steps.max()) if plan.size else 0
        index = np.zeros((k, n_steps, self.batch_size), dtype=np.int64)
        for row, party in enumerate(parties.tolist()):
            draw = self.streams[party].integers(0, self.sizes[party], size=(int(steps[row]), self.batch_size))
            index[row, :steps[row]] = self.offsets[party] + draw
        start = self.params[parties] if plan.start is None else plan.start
        xs = [self.x[index[:, s]] for s in range(n_steps)]
        ys = [self.y[index[:, s]] for s in range(n_steps)]
        mix, penalty = plan.mix(self.learning_rate), plan.penalty()
        new, rewards, losses = sgd_steps(self.model, start, xs, ys, steps, self.learning_rate,
                                         mix_target=None if mix is None else mix[0],
                                         kappa=None if mix is None else mix[1],
                                         prox_center=None if penalty is None else penalty[0],
                                         prox_coef=None if penalty is None else penalty[1])
        self.params[parties] = new
        with warnings.catch_warnings():  # a row that ran no step has an all-NaN row: NaN, as the contract says
            warnings.simplefilter("ignore", RuntimeWarning)
            reward = np.nanmean(rewards, axis=1) if n_steps else np.full(k, np.nan)
            loss = np.nanmean(losses, axis=1) if n_steps else np.full(k, np.nan)
        return CohortResult(params=new, train_reward=reward, train_loss=loss)

    def _train_rule(self, plan: CohortPlan, rule: LocalRule) -> CohortResult:
        """A plan with a local rule: ``(K, E, b, B)`` indices, :func:`rule_steps` on the stacked rows."""
        parties, steps = plan.parties, plan.steps
        k, n_steps, b = plan.size, int(steps.max()) if plan.size else 0, rule.batches_per_step
        index = np.zeros((k, n_steps, b, self.batch_size), dtype=np.int64)
        for row, party in enumerate(parties.tolist()):
            draw = self.streams[party].integers(0, self.sizes[party], size=(int(steps[row]), b, self.batch_size))
            index[row, :steps[row]] = self.offsets[party] + draw
        start = self.params[parties] if plan.start is None else plan.start

        def oracle(rows: np.ndarray, s: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            stats = self.model.batch(rows, self.x[index[:, s, j]], self.y[index[:, s, j]])
            return stats.loss, stats.reward, stats.grad

        new, output, rewards, losses = rule_steps(rule, start, steps, self.learning_rate, oracle)
        self.params[parties] = new
        with warnings.catch_warnings():  # a row that ran no step has an all-NaN row
            warnings.simplefilter("ignore", RuntimeWarning)
            reward = np.nanmean(rewards, axis=1) if n_steps else np.full(k, np.nan)
            loss = np.nanmean(losses, axis=1) if n_steps else np.full(k, np.nan)
        return CohortResult(params=new, train_reward=reward, train_loss=loss, personal=output)
