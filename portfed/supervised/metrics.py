"""Personal evaluation of a federated run, round by round (SUPERVISED.md, "personal" evaluation).

Every party is scored on its own validation and test splits with the model it deploys
(:func:`~portfed.federation.algorithms.deployed_models`: the global model for FedAvg-type methods, its own
``w_k`` for local training, FedAMP and Fed+ with λ = 0).  Per evaluated round: per-party accuracy (or
MSE), their mean and standard deviation over parties (paper 002's fairness measure), and paper 002
§6.2.3's fraction of the round's participants whose training loss (full training split, deployed
model) did not increase over the round (its footnote 5).  :meth:`RunTrace.summary` gives the final
mean, paper 004's best mean test accuracy over rounds (BMTA), and the validation-selected round's
test mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from portfed.federation import Algorithm, FederationState, RoundRecord, deployed_models
from portfed.supervised.data import FederatedData


class ScoredModel(Protocol):
    """A model that scores a flat parameter vector on data (:class:`~portfed.supervised.models.LinearModel`,
    :class:`~portfed.supervised.cnn.CNNModel`)."""

    def score(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]: ...


def party_scores(model: ScoredModel, params: np.ndarray, data: FederatedData, split: str,
                 parties: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(metric, loss)`` per party of ``parties`` (all when ``None``) on its own ``split``;
    ``params`` row ``k`` is party ``k``'s model."""
    rows = range(data.n_parties) if parties is None else parties.tolist()
    scores = [model.score(params[k], *data.parties[k].split(split)) for k in rows]
    return np.array([s[0] for s in scores]), np.array([s[1] for s in scores])


@dataclass
class RunTrace:
    """Curves of one run: ``rounds`` evaluated (rounds completed), per-party ``test`` / ``val`` metrics
    ``(R, N)``, per completed round the ``improved`` fraction of participants (NaN: not tracked), and
    FedAMP's / HeurFedAMP's final ``(N, N)`` message weights ξ (for the heat map; ``None`` for the others;
    the ``(N, d)`` models themselves are not stored: 20 CNNs are 33 million numbers)."""

    higher_is_better: bool
    rounds: list[int] = field(default_factory=list)
    test: list[np.ndarray] = field(default_factory=list)
    val: list[np.ndarray] = field(default_factory=list)
    improved: list[float] = field(default_factory=list)
    message_weights: np.ndarray | None = None

    def mean_curve(self, split: str = "test") -> np.ndarray:
        return np.array([np.nanmean(v) for v in getattr(self, split)])

    def summary(self) -> dict[str, float]:
        """``final`` mean and ``final_std`` over parties at the last evaluation, ``best`` (BMTA; the
        lowest mean for an error metric) and ``selected``: the test mean at the round whose validation
        mean is best, and the mean ``improved`` fraction."""
        test, val = self.mean_curve("test"), self.mean_curve("val")
        pick = np.nanargmax if self.higher_is_better else np.nanargmin
        improved = np.array(self.improved, dtype=np.float64)
        return {"final": float(test[-1]), "final_std": float(np.nanstd(self.test[-1])),
                "best": float(test[pick(test)]), "selected": float(test[pick(val)]),
                "improved": float(np.nanmean(improved)) if np.any(np.isfinite(improved)) else float("nan")}

    def to_dict(self) -> dict[str, object]:
        return {"higher_is_better": self.higher_is_better, "rounds": list(self.rounds),
                "test": [v.tolist() for v in self.test], "val": [v.tolist() for v in self.val],
                "improved": list(self.improved),
                "message_weights": None if self.message_weights is None else self.message_weights.tolist()}

    @classmethod
    def from_dict(cls, raw: dict) -> RunTrace:
        return cls(higher_is_better=bool(raw["higher_is_better"]), rounds=list(raw["rounds"]),
                   test=[np.array(v, dtype=np.float64) for v in raw["test"]],
                   val=[np.array(v, dtype=np.float64) for v in raw["val"]],
                   improved=[float(v) for v in raw["improved"]],
                   message_weights=None if raw.get("message_weights") is None else np.array(raw["message_weights"]))


class Evaluator:
    """The ``run_rounds`` callback that fills a :class:`RunTrace` (every ``every`` rounds and after the last).

    ``state`` is the run's initial state: its deployed models are the "before" of round 0's improvement.
    A party's training loss under the models deployed after a round is scored once: it is the "after" of
    that round and, when the party trains again in the next, the "before" of the next.
    """

    def __init__(self, model: ScoredModel, data: FederatedData, spec: Algorithm, state: FederationState,
                 rounds: int, every: int = 1, track_improvement: bool = True) -> None:
        self.model, self.data, self.spec, self.rounds, self.every = model, data, spec, rounds, every
        self.track_improvement = track_improvement
        self.trace = RunTrace(higher_is_better=data.task == "classification")
        self.previous = deployed_models(spec, state)
        self.previous_loss = np.full(data.n_parties, np.nan)  # each party's training loss under `previous`, once scored
        self.evaluate(state, self.previous)

    def evaluate(self, state: FederationState, deployed: np.ndarray) -> None:
        """Record every party's test and validation metric under the ``deployed`` models of ``state``."""
        self.trace.rounds.append(state.round_index)
        self.trace.test.append(party_scores(self.model, deployed, self.data, "test")[0])
        self.trace.val.append(party_scores(self.model, deployed, self.data, "val")[0])

    def __call__(self, round_index: int, state: FederationState, record: RoundRecord) -> None:
        deployed = deployed_models(self.spec, state)
        fraction, losses = float("nan"), np.full(self.data.n_parties, np.nan)
        if self.track_improvement:
            used = np.array(sorted(set(record.active) - {k for k, _ in record.quarantined}), dtype=np.int64)
            if used.size:
                before = self.previous_loss[used]
                unscored = np.isnan(before)
                if unscored.any():
                    before[unscored] = party_scores(self.model, self.previous, self.data, "train", used[unscored])[1]
                losses[used] = party_scores(self.model, deployed, self.data, "train", used)[1]
                fraction = float(np.mean(losses[used] <= before))
        self.trace.improved.append(fraction)
        self.previous, self.previous_loss = deployed, losses
        if state.round_index % self.every == 0 or state.round_index == self.rounds:
            self.evaluate(state, deployed)
