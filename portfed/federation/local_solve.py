"""The one party-side routine: Fed+ Local-Solve (paper 003 Alg. 1 lines 15–20; paper 000 Alg. 1 lines 9–12).

Given the party's model ``w_k``, the reference model ``r`` the server sent it (the global model
``w̃``; for FedAMP the party's cloud model ``u_k``) and an algorithm (:mod:`.algorithms`), which
says which of these steps it takes and with which knobs (``algorithm.local_solve``):

1. personalized component ``θ_k = prox_ρ(w_k − r)`` and target ``z_k = r + θ_k``   (paper 003 eq. 11),
   or, with a constant ``λ_k^t`` (the Fed+ knob ``lam_t``), ``z_k = (1 − λ_k^t) w_k + λ_k^t r`` (paper 000 §5.2's
   R with the weight fixed as §8.2 tunes it);
2. initialization ``w ← (1 − λ_t) w_k + λ_t r``                                    (Alg. 1 line 18);
3. ``E_k`` steps of the party's own optimizer pulled towards ``z_k`` with weight ``σ_t`` (σ_t = 0: no
   pull), as the run's ``proximal_update`` says (:mod:`.cohort`): ``mix`` — each step followed by
   ``w ← κ w + (1 − κ) z_k``, ``κ = 1/(1 + η σ_t)`` with the party's own ``η`` (paper 000 eq. 6,
   paper 003 eq. 14; with plain gradient steps, gradient descent with step ``ηκ`` on
   ``f_k(w) + σ/2 ‖w − z_k‖²``, paper 003 Prop. 1); ``loss`` — ``σ_t/2 ‖w − z_k‖²`` added to the
   loss the optimizer sees (paper 001 Alg. 1; FedProx's proximal term when ``z_k = w̃``).
4. FedAMP / HeurFedAMP add ``λ/(2α_t) ‖w − u_k‖²`` to the loss, with its gradient, so the steps
   solve paper 004 eq. 6 approximately.

Only the flat parameter vector comes back to the federation; the party's data, optimizer state and
records of its own training stay with the party.  :func:`plan_local_solve` is the pure part, for one
party or a ``(K, d)`` stack (the round loop plans a whole cohort with it, :mod:`.cohort`);
:func:`local_solve` runs it for one party.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from portfed.federation.cohort import LocalObjective, ProximalUpdate
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.party_cohort import LocalTrainer, StepRecordLike
from portfed.federation.prox import Penalty
from portfed.federation.schedule import Schedule
from portfed.validation import check_int


class LocalSolver(Protocol):
    """What Local-Solve needs of an algorithm (:class:`portfed.federation.algorithms.Algorithm` has it)."""

    def local_solve(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> LocalSolvePlan: ...


@dataclass(frozen=True)
class LocalSolveResult:
    """The new party model, the model local training started from, and the trainer's step records."""

    params: np.ndarray
    start: np.ndarray
    records: Sequence[StepRecordLike]


@dataclass(frozen=True)
class LocalSolvePlan:
    """Steps 1–4 of Local-Solve before any training, for one party (``(d,)``) or a stack (``(K, d)``).

    ``start`` the initialization ``(1 − λ_t) w_k + λ_t r``; ``target`` ``z_k = r + prox_ρ(w_k − r)``
    and its weight ``sigma`` ``σ_t`` when ``σ_t > 0`` (else ``None`` and 0); ``prox_center`` ``r`` and
    ``prox_coef`` ``λ/α_t`` for FedAMP / HeurFedAMP (else ``None`` and 0).  What the party does with
    ``(z_k, σ_t)`` — and its learning rate — is the party's (:class:`~portfed.federation.cohort.LocalObjective`).
    """

    start: np.ndarray
    target: np.ndarray | None
    sigma: float
    prox_center: np.ndarray | None
    prox_coef: float

    def objective(self, proximal_update: ProximalUpdate = "mix") -> LocalObjective:
        """The :class:`~portfed.federation.cohort.LocalObjective` of a one-party (``(d,)``) plan."""
        return LocalObjective(target=self.target, sigma=self.sigma, proximal_update=proximal_update,
                              prox_center=self.prox_center, prox_coef=self.prox_coef)


def initial_point(w: np.ndarray, reference: np.ndarray, lam: float) -> np.ndarray:
    """``(1 − λ) w + λ r`` (paper 003 Alg. 1 line 18), a new array of ``w``'s shape; ``reference`` may be
    one ``(d,)`` model broadcast over the rows of ``w``.

    At ``λ = 0`` and ``λ = 1`` it is a copy of ``w`` or of ``r``: the values of the formula for finite
    models, without the two products and the sum, each a ``(K, d)`` array (for 20 CNNs of 1.66 M
    parameters, 266 MB apiece, and FedAMP, local training and FedAvg-type methods sit at these ends)."""
    if lam == 0.0:
        return np.array(w, dtype=np.float64)
    if lam == 1.0:
        return np.array(np.broadcast_to(reference, np.shape(w)), dtype=np.float64)
    return (1.0 - lam) * w + lam * reference


def personal_target(w: np.ndarray, reference: np.ndarray, penalty: Penalty | LayerwisePenalty,
                    lam_t: Schedule | None, round_index: int) -> np.ndarray:
    """``z_k = R(r, w_k)`` (paper 000 Alg. 1 line 9) for one party or a ``(K, d)`` stack.

    By default R is eq. 11's closed form ``r + prox_ρ(w_k − r)``: for the Fed+ variants the convex
    combination ``(1 − λ_k^t) w_k + λ_k^t r`` with λ_k^t derived from ρ (ρ/(1 + ρ) for FedAvg+,
    ``min{1, ρ/‖w_k − r‖}`` for FedGeoMed+, per coordinate for FedCoMed+; paper 000 §5.2).  With
    ``lam_t`` set, λ_k^t is that constant for every party and variant — what paper 000 §8.2 tunes:
    "we keep λ_k^t (also the diagonal entries for the diagonal matrix Λ_k^t) constant for all t".
    """
    if lam_t is not None:
        return initial_point(w, reference, lam_t.at(round_index))
    return reference + penalty.prox(w - reference)


def plan_local_solve(w: np.ndarray, reference: np.ndarray, algorithm: LocalSolver, *,
                     round_index: int) -> LocalSolvePlan:
    """The pure part of Local-Solve in round ``round_index``: what local training starts from and aims at
    (``algorithm.local_solve``).

    ``w`` and ``reference`` are ``(d,)`` (one party) or ``(K, d)`` (row k: party k's model and the
    model the server sent it); :meth:`Penalty.prox` acts row by row, so a stack gets every party's
    own ``θ_k``.  Shared by :func:`local_solve` and the round loop's plan.
    """
    return algorithm.local_solve(np.asarray(w, dtype=np.float64), np.asarray(reference, dtype=np.float64),
                                 round_index)


def local_solve(
    trainer: LocalTrainer,
    w_k: np.ndarray,
    reference: np.ndarray,
    algorithm: LocalSolver,
    steps: int,
    *,
    round_index: int,
    proximal_update: ProximalUpdate = "mix",
) -> LocalSolveResult:
    """Run Local-Solve for one party in round ``round_index`` (0-based; indexes the λ_t, σ_t, α_t schedules).

    Args:
        trainer: the party.
        w_k: ``(d,)`` the party's current model.
        reference: ``(d,)`` the model the server sent: ``w̃``, or the cloud model ``u_k`` for FedAMP.
        algorithm: the algorithm (:func:`~portfed.federation.algorithms.make_algorithm`).
        steps: ``E_k >= 1`` local iterations.
        proximal_update: how the trainer applies the pull towards ``z_k`` (``mix`` or ``loss``).

    Raises:
        ValueError: bad ``steps``, or a trainer that returns parameters of the wrong size, non-finite
            parameters, or not one record per step.
    """
    steps = check_int(steps, "steps", minimum=1)
    w_k = np.asarray(w_k, dtype=np.float64)
    plan = plan_local_solve(w_k, reference, algorithm, round_index=round_index)
    result = trainer.local_train(plan.start.copy(), steps, plan.objective(proximal_update))
    params = np.asarray(result.params, dtype=np.float64)
    if params.shape != w_k.shape:
        raise ValueError(f"the trainer returned parameters of shape {params.shape}, expected {w_k.shape}")
    if not np.all(np.isfinite(params)):
        raise ValueError(f"the trainer returned non-finite parameters ({int(np.sum(~np.isfinite(params)))} entries)")
    if len(result.records) != steps:
        raise ValueError(f"the trainer returned {len(result.records)} step records for {steps} steps")
    return LocalSolveResult(params=params.copy(), start=plan.start, records=result.records)
