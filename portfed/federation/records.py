"""The records of a round: per party (:class:`PartyRoundRecord`) and per round (:class:`RoundRecord`),
and the passes over the models that fill them (:func:`absolute_change`, :func:`row_distances`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from portfed.federation.cohort import CohortPlan, CohortResult

if TYPE_CHECKING:
    from portfed.federation.state import FederationState


@dataclass(frozen=True)
class PartyRoundRecord:
    """One party in one round.

    ``train_reward`` / ``train_loss``: means over the local steps of the trainer's ``mean_log_return``
    and ``loss`` (NaN when inactive); ``train_cash``: the mean over them of the cash weight the party's
    policy chose (NaN when inactive, or for a task without portfolios).  ``aggregation_change_mean`` / ``_std``: mean and standard
    deviation over the coordinates of ``|start − w_k|``, the jump from the party's model to the model
    its local training starts from once the server's model has reached it (paper 000 Fig. 1a; NaN
    when inactive).  ``round_change_mean``: mean ``|w_k^{t+1} − w_k^t|`` over the whole round.
    ``distance_to_global``: ``‖w_k^{t+1} − w̃^{t+1}‖₂`` after the server step.  ``fault``: the
    :mod:`~portfed.federation.faults` kind applied to the party this round (``""`` for none);
    ``quarantined``: why the server excluded its message (``""`` when it was used).  ``part_changes``:
    for each named part of the vector (``run_rounds(parts=…)``, e.g. an actor-critic party's ``actor``
    and ``critic``), ``(name, aggregation change mean, round change mean)`` over the part's coordinates.
    """

    round: int
    party: int
    active: bool
    local_steps: int
    train_reward: float
    train_loss: float
    train_cash: float
    aggregation_change_mean: float
    aggregation_change_std: float
    round_change_mean: float
    distance_to_global: float
    fault: str = ""
    quarantined: str = ""
    part_changes: tuple[tuple[str, float, float], ...] = ()

    def row(self) -> dict[str, Any]:
        """The record as one flat dict; each part adds ``aggregation_change_mean_<name>`` and
        ``round_change_mean_<name>``."""
        row = asdict(self)
        del row["part_changes"]
        for name, jump, change in self.part_changes:
            row[f"aggregation_change_mean_{name}"], row[f"round_change_mean_{name}"] = jump, change
        return row


@dataclass(frozen=True)
class RoundRecord:
    """One round: active parties, the server solver's iterations and convergence, per-party records.

    ``quarantined`` holds ``(party, reason)`` for every message the server excluded this round.
    """

    round: int
    active: tuple[int, ...]
    aggregator_iterations: int
    aggregator_converged: bool
    parties: tuple[PartyRoundRecord, ...]
    quarantined: tuple[tuple[int, str], ...] = ()

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per party (for a CSV / DataFrame), with the round's server diagnostics."""
        extra = {"aggregator_iterations": self.aggregator_iterations, "aggregator_converged": self.aggregator_converged}
        return [party.row() | extra for party in self.parties]


#: The records' passes over ``(K, d)`` arrays go a block of rows at a time, at most this many numbers (16 MB
#: of float64), so that no ``(K, d)`` temporary is made (for 20 CNNs of 1.66 M parameters, 266 MB each).
#: Each block's differences are laid out row by row whatever the models' own order (the party models are
#: column-major when they start from one shared vector), so every statistic is the row's own pairwise sum
#: and does not depend on the block size or the storage order.
_BLOCK = 1 << 21


def _row_blocks(n_rows: int, d: int) -> list[slice]:
    step = max(1, _BLOCK // max(d, 1))
    return [slice(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


@dataclass
class ChangeStats:
    """Per row of ``|a − b|``: ``mean`` and ``std`` over the coordinates and ``part_means`` ``(rows, parts)``,
    the mean over each named part's coordinates."""

    mean: np.ndarray
    std: np.ndarray
    part_means: np.ndarray

    @classmethod
    def filled(cls, rows: int, parts: Mapping[str, slice], value: float) -> ChangeStats:
        return cls(mean=np.full(rows, value), std=np.full(rows, value), part_means=np.full((rows, len(parts)), value))

    def put(self, rows: np.ndarray, other: ChangeStats) -> None:
        """Rows ``rows`` of this record set to ``other``'s (in order)."""
        self.mean[rows], self.std[rows], self.part_means[rows] = other.mean, other.std, other.part_means


def absolute_change(new: np.ndarray, old: np.ndarray, rows: np.ndarray, parts: Mapping[str, slice]) -> ChangeStats:
    """:class:`ChangeStats` of ``|new[i] − old[rows[i]]|`` for every row ``i`` of ``new`` (block by block)."""
    stats = ChangeStats.filled(new.shape[0], parts, 0.0)
    for block in _row_blocks(new.shape[0], new.shape[1]):
        change = np.subtract(new[block], old[rows[block]], order="C")
        np.abs(change, out=change)
        stats.mean[block], stats.std[block] = change.mean(axis=1), change.std(axis=1)
        for j, part in enumerate(parts.values()):
            stats.part_means[block, j] = change[:, part].mean(axis=1)
    return stats


def row_distances(models: np.ndarray, point: np.ndarray) -> np.ndarray:
    """``‖models[k] − point‖₂`` for every row ``k`` (block by block)."""
    distances = np.empty(models.shape[0])
    for block in _row_blocks(models.shape[0], models.shape[1]):
        distances[block] = np.linalg.norm(np.subtract(models[block], point, order="C"), axis=1)
    return distances


def round_changes(plan: CohortPlan, state: FederationState, kept: np.ndarray, kept_params: np.ndarray,
                   parts: Mapping[str, slice]) -> tuple[ChangeStats, ChangeStats]:
    """The active rows' aggregation jumps ``|start − w_k|`` and every party's round change
    ``|w_k^{t+1} − w_k^t|`` (zero where the party keeps its model), before the ``kept`` rows' new models
    ``kept_params`` are written into ``state``."""
    active = plan.parties
    with np.errstate(over="ignore", invalid="ignore"):  # a blown-up model's records are inf, not warnings
        if plan.start is None:
            jumps = ChangeStats.filled(plan.size, parts, 0.0)
        else:
            jumps = absolute_change(plan.start, state.party_models, active, parts)
        moved = ChangeStats.filled(state.party_models.shape[0], parts, 0.0)
        moved.put(active[kept], absolute_change(kept_params, state.party_models, active[kept], parts))
    return jumps, moved


def party_records(plan: CohortPlan, result: CohortResult, n: int, jumps: ChangeStats, moved: ChangeStats,
                  distances: np.ndarray, faults: Mapping[int, str], bad: Mapping[int, str],
                  parts: Mapping[str, slice]) -> tuple[PartyRoundRecord, ...]:
    """Round ``plan.round_index``'s record of each of the ``n`` parties (NaN training fields when inactive)."""
    t, active = plan.round_index, plan.parties
    row_of = {int(k): row for row, k in enumerate(active.tolist())}
    nan = float("nan")
    records = []
    for k in range(n):
        row = row_of.get(k)
        trained = row is not None
        records.append(PartyRoundRecord(
            round=t, party=k, active=trained, local_steps=int(plan.steps[row]) if trained else 0,
            train_reward=float(result.train_reward[row]) if trained else nan,
            train_loss=float(result.train_loss[row]) if trained else nan,
            train_cash=float(result.train_cash[row]) if trained and result.train_cash is not None else nan,
            aggregation_change_mean=float(jumps.mean[row]) if trained else nan,
            aggregation_change_std=float(jumps.std[row]) if trained else nan,
            round_change_mean=float(moved.mean[k]), distance_to_global=float(distances[k]),
            fault=faults.get(k, ""), quarantined=bad.get(row, "") if trained else "",
            part_changes=tuple((name, float(jumps.part_means[row, j]) if trained else nan,
                                float(moved.part_means[k, j])) for j, name in enumerate(parts))))
    return tuple(records)
