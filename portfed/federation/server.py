"""The server rules: received models → global model (and personalized centres, and the server's own state).

The server sees a ``(K, d)`` float array of the models sent by the K active parties, and only
what it owns itself (:class:`ServerContext`: its previous global model, the round index, the
party weights it was configured with and its own state ``extras``, e.g. FedAdam's moments).  Each
rule is a small frozen object an algorithm holds (:mod:`portfed.federation.algorithms`), with
``step(received, context)`` and ``initial(models, weights)`` returning a :class:`ServerOutput`:

- ``w̃ = 𝒜(W)`` (paper 003 Table 1): :class:`MeanRule`, :class:`CoordinateMedianRule`,
  :class:`GeometricMedianRule` and :class:`SmoothedRule` with the algorithm's penalty (paper 000
  eq. 5, by default the fast solvers, ``solver="eq34"`` the iteration of eq. 34).  ``local``'s
  ``w̃`` is the plain mean, kept only for the reported distances (λ = σ = 0, it never reaches training).
- :class:`FedMGDARule`, ``w̃ ← w̃ + η_t Σ λ*_i d̂_i`` (paper 002 eq. 25, :mod:`.fedmgda`); with
  ε = 0 it is FedAvg-n, the weighted mean of the normalized updates.
- :class:`FedAMPRule` / :class:`HeurFedAMPRule`, the cloud models ``u_i = Σ_j ξ_ij w_j`` (paper 004
  eq. 5, eq. 8) as per-party ``centers`` (row ``i`` for received row ``i``); ``w̃`` is the mean, for reports.

Schedules: the step at the end of round ``t`` uses ``η_t`` (FedMGDA+); FedAMP's centres made then
serve round ``t + 1`` and are computed with ``α_{t+1}``, the α whose ``λ/α_{t+1}`` the parties
use in that round (paper 004 eq. 3 and 6 share ``α_k``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

import numpy as np

from portfed.federation.aggregate import (
    SMOOTHED_SOLVERS,
    AggregateResult,
    check_points,
    coordinate_median,
    geometric_median,
    normalized_weights,
    smoothed_aggregate,
)
from portfed.federation.fedamp import cloud_models, fedamp_weights, heurfedamp_weights
from portfed.federation.fedmgda import fedmgda_step
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty
from portfed.federation.schedule import Schedule


@dataclass(frozen=True)
class ServerContext:
    """What the server knows besides the received models: nothing of the parties' data or training.

    ``extras``: the server's own state between rounds (e.g. FedAdam's moments), read-only."""

    global_model: np.ndarray
    round_index: int
    weights: np.ndarray | None = None
    extras: Mapping[str, np.ndarray] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class ServerOutput:
    """``global_model`` (``(d,)``), per-party ``centers`` (``(K, d)``, FedAMP only), solver diagnostics,
    and the server's new state ``extras`` (the entries it replaces in the federation's state)."""

    global_model: np.ndarray
    centers: np.ndarray | None
    iterations: int
    converged: bool
    extras: Mapping[str, np.ndarray] = field(default_factory=lambda: MappingProxyType({}))


class ServerRule(Protocol):
    """One server variant: its round step and its state before round 0 (from ``W^0``)."""

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput: ...

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput: ...


def check_iterations(tol: float, max_iter: int) -> None:
    """Raise ``ValueError`` unless ``tol`` is a finite number >= 0 and ``max_iter`` a positive integer."""
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")


@dataclass(frozen=True)
class _AggregateRule(ABC):
    """``w̃ = 𝒜(W)`` at every round and before round 0 (paper 000 Alg. 1 line 1)."""

    @abstractmethod
    def aggregate(self, models: np.ndarray, weights: np.ndarray | None) -> AggregateResult:
        """``𝒜`` of the ``(K, d)`` models with the parties' weights."""

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput:
        return self.initial(received, context.weights)

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput:
        result = self.aggregate(models, weights)
        return ServerOutput(global_model=result.center, centers=None, iterations=result.iterations,
                            converged=result.converged)


@dataclass(frozen=True)
class MeanRule(_AggregateRule):
    """The (weighted) mean: FedAvg, FedProx; ``local``'s reported centre."""

    def aggregate(self, models: np.ndarray, weights: np.ndarray | None) -> AggregateResult:
        x = check_points(models)
        return AggregateResult(center=normalized_weights(weights, x.shape[0]) @ x, iterations=0, converged=True)


@dataclass(frozen=True)
class CoordinateMedianRule(_AggregateRule):
    """The exact (weighted) coordinate-wise median (CoMed, paper 003 eq. 5)."""

    def aggregate(self, models: np.ndarray, weights: np.ndarray | None) -> AggregateResult:
        return AggregateResult(center=coordinate_median(check_points(models), weights=weights), iterations=0,
                               converged=True)


@dataclass(frozen=True)
class GeometricMedianRule(_AggregateRule):
    """The exact (weighted) geometric median (RFA, paper 003 eq. 4), Weiszfeld with ``tol``, ``max_iter``."""

    tol: float
    max_iter: int

    def __post_init__(self) -> None:
        check_iterations(self.tol, self.max_iter)

    def aggregate(self, models: np.ndarray, weights: np.ndarray | None) -> AggregateResult:
        return geometric_median(models, weights=weights, tol=self.tol, max_iter=self.max_iter)


@dataclass(frozen=True)
class SmoothedRule(_AggregateRule):
    """The Fed+ aggregate ``argmin_x Σ_k p_k Φ_ρ(w_k − x)`` of ``penalty`` (paper 000 eq. 5, 34)."""

    penalty: Penalty | LayerwisePenalty
    tol: float
    max_iter: int
    solver: str = "fast"

    def __post_init__(self) -> None:
        check_iterations(self.tol, self.max_iter)
        if self.solver not in SMOOTHED_SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r}; valid: {', '.join(SMOOTHED_SOLVERS)}")
        if not isinstance(self.penalty, Penalty | LayerwisePenalty):
            raise ValueError(f"penalty must be a Penalty or LayerwisePenalty, got {self.penalty!r}")
        if isinstance(self.penalty, Penalty) and self.penalty.kind in ("l1", "l2") and self.penalty.rho <= 0:
            raise ValueError(f"the smoothed aggregate needs rho > 0, got {self.penalty.rho!r}")

    def aggregate(self, models: np.ndarray, weights: np.ndarray | None) -> AggregateResult:
        return smoothed_aggregate(models, self.penalty, weights=weights, tol=self.tol, max_iter=self.max_iter,
                                  solver=self.solver)


@dataclass(frozen=True)
class FedMGDARule:
    """FedMGDA+ (paper 002 eq. 25) with fairness budget ``epsilon`` and global step ``global_lr``;
    ``epsilon = 0`` is FedAvg-n.  Starts from the (weighted) mean of ``W^0``."""

    epsilon: float
    global_lr: Schedule

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput:
        prior = None if context.weights is None else normalized_weights(context.weights, received.shape[0])
        step = fedmgda_step(received, context.global_model, epsilon=self.epsilon,
                            step_size=self.global_lr.at(context.round_index), prior=prior)
        return ServerOutput(global_model=step.global_model, centers=None, iterations=step.iterations,
                            converged=step.converged)

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput:
        return MeanRule().initial(models, weights)


def _centers(models: np.ndarray, weights: np.ndarray | None, xi: np.ndarray) -> ServerOutput:
    """Cloud models ``u = ξ W`` as centres; the (weighted) mean as ``w̃``, for reports."""
    mean = normalized_weights(weights, models.shape[0]) @ models
    return ServerOutput(global_model=mean, centers=cloud_models(models, xi), iterations=0, converged=True)


@dataclass(frozen=True)
class FedAMPRule:
    """FedAMP's cloud models (paper 004 eq. 5, 7) with step schedule ``alpha`` and scale ``attention_scale``.

    The first centres ``u^1`` come from ``W^0`` before any local training (paper 004 Alg. 1), with ``α_0``.
    """

    alpha: Schedule
    attention_scale: float

    def _output(self, models: np.ndarray, weights: np.ndarray | None, alpha_round: int) -> ServerOutput:
        xi = fedamp_weights(models, alpha=self.alpha.at(alpha_round), sigma=self.attention_scale)
        return _centers(models, weights, xi)

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput:
        return self._output(received, context.weights, context.round_index + 1)

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput:
        return self._output(models, weights, 0)


@dataclass(frozen=True)
class HeurFedAMPRule:
    """HeurFedAMP's cloud models (paper 004 eq. 8): self-weight ``self_weight``, softmax scale ``attention_scale``."""

    attention_scale: float
    self_weight: float

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput:
        return self.initial(received, context.weights)

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput:
        xi = heurfedamp_weights(models, sigma=self.attention_scale, self_weight=self.self_weight)
        return _centers(models, weights, xi)


def server_step(rule: ServerRule, received: np.ndarray, context: ServerContext) -> ServerOutput:
    """``rule.step`` at the end of round ``context.round_index`` on the checked ``received`` models.

    Args:
        rule: the algorithm's server rule (``algorithm.server``).
        received: ``(K, d)`` float array, row ``i`` the model of the i-th active party.
        context: the server's own state; ``context.weights`` (``(K,)`` or ``None``) are the active
            parties' aggregation weights / FedMGDA+ prior ``λ_0``.
    """
    models = check_points(received)
    if models.shape[1] != context.global_model.shape[0]:
        raise ValueError(f"received models have size {models.shape[1]}, the global model {context.global_model.shape[0]}")
    return rule.step(models, context)


def initial_server_output(rule: ServerRule, models: np.ndarray, weights: np.ndarray | None = None) -> ServerOutput:
    """The server's state before round 0, from the parties' initial models ``W^0`` (``(N, d)``): ``rule.initial``.

    ``w̃^0 = 𝒜(W^0)`` (paper 000 Alg. 1 line 1); FedAMP's first centres ``u^1`` come from ``W^0``
    before any local training (paper 004 Alg. 1: clients initialize, the server computes ``U^1`` from
    ``W^0``, then clients solve eq. 6), with ``α_0``; FedMGDA+ starts from the (weighted) mean.
    """
    return rule.initial(check_points(models), weights)
