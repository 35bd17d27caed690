"""The batched engine's cohort: N parties training in the slots of one :class:`BatchedDPGTrainer`.

:class:`PartyGroup` implements the federation's :class:`~portfed.federation.Cohort` contract
(``train(plan)``) for parties built with ``engine="batched"``: every active party's local
iterations run as one computation of the shared engine, and each party still owns its
augmentation schedule — before each chunk every still-training party hands its slot the panel of
its current iteration (:meth:`Party.sync_panel`), and party i runs ``min(steps left, iterations
until its next regeneration)`` iterations in that chunk, exactly as :meth:`Party.local_train` splits
a call.  A party with steps left after a regeneration continues in the next chunk from its current
parameters (the chunk's plan has no ``start``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from portfed._crash import crash_point
from portfed.agents import BatchedDPGTrainer, DPGTrainer, StepRecord, TrainerSlot
from portfed.data.errors import DataError
from portfed.experiment.party import Party
from portfed.federation import CohortPlan, CohortResult


class PartyGroup:
    """N parties training in the slots of one :class:`BatchedDPGTrainer` (a :class:`~portfed.federation.Cohort`).

    Built from ``"batched"`` parties that are not attached yet, it creates the engine from each
    party's current training panel and seed and attaches party k to slot k; built from parties
    already attached to one engine, it wraps that engine (training continues from its state).

    Raises:
        ValueError: an empty list, per-party parties, a mix of attached and unattached parties, or
            parties with different agent configs.
        DataError: parties with different numbers of assets (the batched engine stacks them).
    """

    def __init__(self, parties: Sequence[Party]) -> None:
        self.parties = list(parties)
        if not self.parties:
            raise ValueError("a PartyGroup needs at least one party")
        per_party = [p.index for p in self.parties if isinstance(p.trainer, DPGTrainer)]
        if per_party:
            raise ValueError(f"parties {per_party} have their own DPGTrainer (engine='per_party')")
        configs = {p.agent_config for p in self.parties}
        if len(configs) != 1:
            raise ValueError("the parties of a PartyGroup must share one agent config")
        if len({len(p.tickers) for p in self.parties}) != 1:
            raise DataError("the batched engine needs the same number of assets for every party, got "
                            f"{sorted({len(p.tickers) for p in self.parties})}")
        slots = [p.trainer for p in self.parties]
        if all(slot is None for slot in slots):
            self.engine = BatchedDPGTrainer(configs.pop(), [p.training_panel() for p in self.parties],
                                            [p.seed for p in self.parties])
            for k, party in enumerate(self.parties):
                party.attach(self.engine.slot(k))
            return
        engines = {id(slot.engine) for slot in slots if isinstance(slot, TrainerSlot)}
        if None in slots or len(engines) != 1 or [s.party for s in slots] != list(range(len(slots))):
            raise ValueError("the parties must be all unattached, or attached in order to the slots of one engine")
        self.engine = slots[0].engine  # type: ignore[union-attr]

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    def train(self, plan: CohortPlan) -> CohortResult:
        """Train ``plan`` in the shared engine, chunked at every party's regenerations (module docstring)."""
        if plan.size and plan.parties.max() >= self.n_parties:
            raise IndexError(f"plan parties must lie in [0, {self.n_parties - 1}], got {plan.parties.tolist()}")
        n = plan.size
        remaining = plan.steps.copy()
        records: list[list[StepRecord]] = [[] for _ in range(n)]
        out = np.empty((n, self.engine.n_parameters))
        rows, first = np.arange(n), True
        while first or rows.size:
            crash_point("local_train")
            chunk = [min(int(remaining[r]), self.parties[int(plan.parties[r])].sync_panel()) for r in rows]
            result = self.engine.train_steps(plan.subset(rows, chunk, keep_start=first))
            out[rows] = result.params
            for row, part in zip(rows.tolist(), result.records, strict=True):
                records[row].extend(part)
            remaining[rows] -= chunk
            rows, first = rows[remaining[rows] > 0], False
        return CohortResult.from_records(out, records)
