"""The per-party engine: a :class:`~portfed.federation.cohort.Cohort` over parties that each train themselves.

:class:`LocalTrainer` is one party with ``local_train(params, steps, objective)`` (and, to run the
personalised baselines' local rules, ``train_rule(params, steps, rule)``); :class:`PartyCohort` trains
a plan by calling them one after another; :func:`as_cohort` lets the round loop take either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from portfed.federation.cohort import Cohort, CohortPlan, CohortResult, LocalObjective
from portfed.federation.local_rules import RULES, RuleOutput


class StepRecordLike(Protocol):
    """What the per-party adapter reads from one local step's record."""

    @property
    def mean_log_return(self) -> float: ...

    @property
    def loss(self) -> float: ...


class LocalTrainResultLike(Protocol):
    @property
    def params(self) -> np.ndarray: ...

    @property
    def records(self) -> Sequence[StepRecordLike]: ...


class LocalTrainer(Protocol):
    """One party that trains itself (e.g. ``portfed.experiment.party.Party``, a supervised party).

    ``local_train(params, steps, objective)`` loads ``params`` (``None``: keep the current ones), runs
    ``steps`` optimizer steps under ``objective`` (:class:`LocalObjective`; ``None``: plain steps; the
    trainer turns its pull into its update with its own learning rate) and returns the new flat
    parameters and one record per step.
    """

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResultLike: ...


class PartyCohort:
    """The per-party engine: a :class:`Cohort` over N :class:`LocalTrainer` objects, trained one after another.

    Each party applies the plan's pull with its own learning rate, so the parties' rates may differ.
    ``local_rules``: every local rule when every party has ``train_rule`` (:func:`train_rule_per_party`), else none.
    """

    def __init__(self, parties: Sequence[LocalTrainer]) -> None:
        self.parties = list(parties)
        if not self.parties:
            raise ValueError("a cohort needs at least one party")
        for k, party in enumerate(self.parties):
            if not callable(getattr(party, "local_train", None)):
                raise TypeError(f"party {k} ({type(party).__name__}) has no local_train method")
        rules = all(callable(getattr(party, "train_rule", None)) for party in self.parties)
        self.local_rules = frozenset(RULES) if rules else frozenset()

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    def train(self, plan: CohortPlan) -> CohortResult:
        """Each party's ``local_train`` in turn; a party that returns parameters of another size than the
        plan's models gets a NaN row and a ``rejected`` entry (the round goes on without it)."""
        if plan.optimizer_state != "keep":
            raise ValueError(f"the per-party engine keeps every party's optimizer state; optimizer_state "
                             f"{plan.optimizer_state!r} needs the batched engine")
        if plan.rule is not None:
            return train_rule_per_party(self.parties, plan)
        d = None if plan.start is None else plan.start.shape[1]  # without a start: the first party's size
        params, records, rejected = np.empty((plan.size, 0 if d is None else d)), [], []
        for row, party in enumerate(plan.parties.tolist()):
            start = None if plan.start is None else plan.start[row].copy()
            try:
                result = self.parties[party].local_train(start, int(plan.steps[row]), plan.objective(row))
            except ValueError as error:
                raise ValueError(f"round {plan.round_index}, party {party}: {error}") from error
            if len(result.records) != plan.steps[row]:
                raise ValueError(f"round {plan.round_index}, party {party}: the trainer returned "
                                 f"{len(result.records)} step records for {plan.steps[row]} steps")
            value = np.asarray(result.params, dtype=np.float64)
            if d is None:
                d = value.size
                params = np.empty((plan.size, d))
            if value.shape == (d,):
                params[row] = value
            else:
                rejected.append((row, f"parameters of shape {value.shape}, expected ({d},)"))
                params[row] = np.nan
            records.append(result.records)
        return CohortResult.from_records(params, records, rejected)


def as_cohort(parties: Cohort | Sequence[LocalTrainer]) -> Cohort:
    """``parties`` itself when it is a :class:`Cohort`, else the per-party adapter over the sequence."""
    if callable(getattr(parties, "train", None)) and hasattr(parties, "n_parties"):
        return parties  # type: ignore[return-value]
    if isinstance(parties, Sequence):
        return PartyCohort(parties)
    raise TypeError(f"{type(parties).__name__} is neither a cohort (train(plan), n_parties) nor a sequence of "
                    "parties with local_train")


def train_rule_per_party(parties: Sequence[object], plan: CohortPlan) -> CohortResult:
    """``PartyCohort``'s answer to a plan with a local rule: each party's
    ``train_rule(start, steps, rule) -> (result with params and records, RuleOutput)`` in turn.

    Raises:
        TypeError: a party whose trainer has no ``train_rule`` (e.g. the portfolio agents).
    """
    rule = plan.rule
    if rule is None or plan.start is None:
        raise ValueError("train_rule_per_party needs a plan with a local rule and a start")
    params, records, companions, alphas = [], [], [], []
    for row, party in enumerate(plan.parties.tolist()):
        trainer = parties[party]
        if not callable(getattr(trainer, "train_rule", None)):
            raise TypeError(f"party {party} ({type(trainer).__name__}) cannot run the local rule {rule.kind!r} of "
                            "a personalised baseline: its trainer has no train_rule")
        result, output = trainer.train_rule(plan.start[row].copy(), int(plan.steps[row]),  # type: ignore[attr-defined]
                                            rule.take(np.array([row])))
        params.append(np.asarray(result.params, dtype=np.float64))
        records.append(result.records)
        companions.append(None if output.companion is None else output.companion[0])
        alphas.append(None if output.alpha is None else output.alpha[0])
    personal = RuleOutput(companion=None if companions[0] is None else np.stack(companions),
                          alpha=None if alphas[0] is None else np.array(alphas))
    base = CohortResult.from_records(np.stack(params), records)
    return replace(base, personal=personal)
