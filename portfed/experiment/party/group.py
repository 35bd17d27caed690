"""An in-process federation's cohort: N parties training in the rows of one :class:`BatchedDPGTrainer`.

:class:`PartyGroup` implements the federation's :class:`~portfed.federation.Cohort` contract
(``train(plan)``): every active party's local iterations run as one computation of the shared
engine (any network, universes of any sizes), and each party still owns its
augmentation schedule — before each chunk every still-training party hands its row the panel of
its current iteration (:meth:`Party.sync_panel`), and party i runs ``min(steps left, iterations
until its next regeneration)`` iterations in that chunk, exactly as :meth:`Party.local_train` splits
a call.  A party with steps left after a regeneration continues in the next chunk from its current
parameters (the chunk's plan has no ``start``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from portfed._crash import crash_point
from portfed.agents import BatchedDPGTrainer
from portfed.experiment.party.party import Party
from portfed.federation import CohortPlan, CohortResult


class PartyGroup:
    """N parties training in the rows of one :class:`BatchedDPGTrainer` (a :class:`~portfed.federation.Cohort`).

    Built from parties that do not train in an engine yet, it creates the engine from each party's
    current training panel and seed and attaches party k to row k; built from parties already
    attached in order to the rows of one engine, it wraps that engine (training continues from its state).

    Raises:
        ValueError: an empty list, a mix of attached and unattached parties, or parties with
            different agent configs.
    """

    def __init__(self, parties: Sequence[Party]) -> None:
        self.parties = list(parties)
        if not self.parties:
            raise ValueError("a PartyGroup needs at least one party")
        configs = {p.agent_config for p in self.parties}
        if len(configs) != 1:
            raise ValueError("the parties of a PartyGroup must share one agent config")
        if not any(p.attached for p in self.parties):
            self.engine = BatchedDPGTrainer(configs.pop(), [p.training_panel() for p in self.parties],
                                            [p.seed for p in self.parties])
            for k, party in enumerate(self.parties):
                party.attach(self.engine, k)
            return
        if not all(p.attached for p in self.parties):
            raise ValueError("the parties must be all unattached, or attached in order to the rows of one engine")
        engines, rows = zip(*(p.engine for p in self.parties), strict=True)
        if len({id(e) for e in engines}) != 1 or list(rows) != list(range(len(rows))):
            raise ValueError("the parties must be all unattached, or attached in order to the rows of one engine")
        self.engine = engines[0]

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    def train(self, plan: CohortPlan) -> CohortResult:
        """Train ``plan`` in the shared engine, chunked at every party's regenerations (module docstring)."""
        if plan.size and plan.parties.max() >= self.n_parties:
            raise IndexError(f"plan parties must lie in [0, {self.n_parties - 1}], got {plan.parties.tolist()}")
        n = plan.size
        remaining = plan.steps.copy()
        rewards, losses, cash = np.zeros(n), np.zeros(n), np.zeros(n)
        out = np.empty((n, self.engine.n_parameters))
        rows, first = np.arange(n), True
        while first or rows.size:
            crash_point("local_train")
            chunk = [min(int(remaining[r]), self.parties[int(plan.parties[r])].sync_panel()) for r in rows]
            result = self.engine.train_steps(plan.subset(rows, chunk, keep_start=first))
            out[rows] = result.params
            reward_sums, loss_sums, cash_sums = result.sums()
            rewards[rows] += reward_sums
            losses[rows] += loss_sums
            cash[rows] += cash_sums
            remaining[rows] -= chunk
            rows, first = rows[remaining[rows] > 0], False
        return CohortResult.from_sums(out, rewards, losses, cash, plan.steps)
