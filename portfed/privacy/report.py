"""What a run's outputs say of its privacy: ε after each round (``rounds.csv``) and the final description.

Central mode: after round t the run's ε is the accountant's for ``t + 1`` rounds at ``q = K/N``, the
same in every party's row.  Local mode: party k's row holds its own ε after the ``c_k`` messages it
has sent so far (rounds in which it was active, quarantined or not; a dropped party sent nothing),
without sampling amplification (:mod:`.accountant`); the run's ε is the largest over parties.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from portfed.privacy.accountant import accountant_name, epsilon
from portfed.privacy.mechanism import PrivacySettings

#: The column of ``rounds.csv`` that holds ε at δ after the row's round (private runs only).
EPSILON_COLUMN = "epsilon"


class PrivacyLedger:
    """ε after every round of one run (module docstring); ``rows``: the rows of rounds already run (a resumed
    run's, from its checkpoint)."""

    def __init__(self, settings: PrivacySettings, sampling: float, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self.settings, self.sampling = settings, sampling
        self.messages: Counter[int] = Counter()
        self.rounds = 0
        for row in rows:
            self._count(row)

    def _count(self, row: Mapping[str, Any]) -> None:
        self.rounds = max(self.rounds, int(row["round"]) + 1)
        if row["active"]:
            self.messages[int(row["party"])] += 1

    def epsilon_of(self, party: int) -> float:
        """ε at δ so far: the run's (central) or ``party``'s own (local)."""
        s = self.settings
        if s.mode == "central":
            return epsilon(s.noise_multiplier, self.sampling, self.rounds, s.delta)
        return epsilon(s.noise_multiplier, 1.0, self.messages[party], s.delta)

    def add(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One round's ``rows`` (one per party), each with its ε after the round in :data:`EPSILON_COLUMN`."""
        for row in rows:
            self._count(row)
        return [{**row, EPSILON_COLUMN: self.epsilon_of(int(row["party"]))} for row in rows]


def describe(settings: PrivacySettings, sampling: float, rounds: int, final_epsilon: float) -> str:
    """One line naming everything the ε rests on: unit, mode, ε at δ, z, S, rounds, sampling, accountant."""
    sampled = ("every party every round" if sampling >= 1 else
               f"Poisson q = {sampling:g} (approximating the uniform K-of-N sample)")
    if settings.mode == "local":
        sampled = "none credited (the server chooses who takes part); the largest party's ε"
    return (f"party-level DP, {settings.mode}: ε = {final_epsilon:.3g} at δ = {settings.delta:g}, noise multiplier "
            f"z = {settings.noise_multiplier:.4g}, clip S = {settings.clip:g}, {rounds} rounds, sampling {sampled}, "
            f"accountant {accountant_name()}")
