"""Faulty and hostile parties, by configuration: what a party *sends* is corrupted, never its data.

A :class:`Fault` names a kind, the parties and the rounds it hits (every round when ``rounds`` is
``None``).  With ``r_k`` the model the server sent party k and ``w_k`` the model its honest local
training produced, the update it sends is ``u_k = w_k − r_k`` and the kinds are:

==============  ========================================================================================
``nan``         the message is non-finite (every entry NaN)
``scale``       ``r_k + factor · u_k`` — paper 002 §6.2's scaling attack (one user multiplies its update)
``sign_flip``   ``r_k − u_k``
``noise``       ``w_k + ε``, ``ε ~ N(0, std² I)`` seeded by ``(seed, round, party)``
``drop``        the party is absent this round: it neither trains nor sends (as if it were not sampled)
``straggle``    the party runs ``steps`` local iterations instead of its ``E_k``
``stale``       the party sends the model it held before this round's training (its old ``w_k^t``)
==============  ========================================================================================

The faults are a pure function of ``(seed, round, party)``, so a run with faults is as reproducible
and as exactly resumable as one without.  The round loop records every fault applied; what it does
with a message it cannot use is :mod:`portfed.federation.rounds`' quarantine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from portfed.validation import check_int, check_number, check_seed

FAULT_KINDS: tuple[str, ...] = ("nan", "scale", "sign_flip", "noise", "drop", "straggle", "stale")
#: SeedSequence key of the noise draws (party k's noise in round t uses [seed, _NOISE_STREAM, t, k]).
_NOISE_STREAM = 2**30


@dataclass(frozen=True)
class Fault:
    """``kind`` hitting ``parties`` in ``rounds`` (all rounds when ``None``); ``factor`` (scale), ``std``
    (noise) and ``steps`` (straggle) parametrize their kinds."""

    kind: str
    parties: tuple[int, ...]
    rounds: tuple[int, ...] | None = None
    factor: float = 1e6
    std: float = 1.0
    steps: int = 1

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; valid kinds: {', '.join(FAULT_KINDS)}")
        parties = tuple(check_int(k, "fault party", minimum=0) for k in self.parties)
        if not parties:
            raise ValueError(f"a {self.kind!r} fault needs at least one party")
        object.__setattr__(self, "parties", parties)
        if self.rounds is not None:
            object.__setattr__(self, "rounds", tuple(check_int(t, "fault round", minimum=0) for t in self.rounds))
        object.__setattr__(self, "factor", check_number(self.factor, "fault factor"))
        object.__setattr__(self, "std", check_number(self.std, "fault std", minimum=0.0))
        object.__setattr__(self, "steps", check_int(self.steps, "fault steps", minimum=1))

    def hits(self, party: int, round_index: int) -> bool:
        return party in self.parties and (self.rounds is None or round_index in self.rounds)


class FaultInjector:
    """Applies a list of :class:`Fault` to the rounds of a run (at most one fault per party and round).

    Raises:
        ValueError: two faults hitting the same party in the same round, or a party index ``>= n``.
    """

    def __init__(self, faults: Sequence[Fault], n_parties: int, seed: int) -> None:
        self.faults = tuple(faults)
        self.seed = check_seed(seed)
        for fault in self.faults:
            bad = [k for k in fault.parties if k >= n_parties]
            if bad:
                raise ValueError(f"{fault.kind!r} fault names parties {bad}, but the run has {n_parties} (0 … "
                                 f"{n_parties - 1})")
        for i, a in enumerate(self.faults):
            for b in self.faults[i + 1:]:
                shared = set(a.parties) & set(b.parties)
                if shared and (a.rounds is None or b.rounds is None or set(a.rounds) & set(b.rounds)):
                    raise ValueError(f"faults {a.kind!r} and {b.kind!r} both hit parties {sorted(shared)} in the "
                                     "same round; give each party at most one fault per round")

    def fault(self, party: int, round_index: int) -> Fault | None:
        return next((f for f in self.faults if f.hits(party, round_index)), None)

    def present(self, round_index: int, active: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """The sampled parties minus those a ``drop`` fault makes absent, and the absent ones."""
        dropped = [k for k in active.tolist() if (f := self.fault(k, round_index)) is not None and f.kind == "drop"]
        return active[~np.isin(active, dropped)], dropped

    def steps(self, round_index: int, active: np.ndarray, steps: Sequence[int]) -> list[int]:
        """Every party's local iterations this round (``straggle`` parties run ``fault.steps``)."""
        out = list(steps)
        for k in active.tolist():
            fault = self.fault(k, round_index)
            if fault is not None and fault.kind == "straggle":
                out[k] = min(fault.steps, out[k])
        return out

    def corrupt(self, round_index: int, parties: np.ndarray, sent: np.ndarray, references: np.ndarray,
                before: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
        """The messages as the faulty parties send them (a copy) and ``{party: kind}`` of the faults applied.

        ``sent``, ``references`` and ``before`` are ``(K, d)``: the honest new models, the models the
        server sent, the models the parties held before training; row i belongs to ``parties[i]``.
        """
        out = np.array(sent, dtype=np.float64)
        applied: dict[int, str] = {}
        for row, k in enumerate(parties.tolist()):
            fault = self.fault(k, round_index)
            if fault is None or fault.kind == "drop":
                continue
            applied[k] = fault.kind
            update = out[row] - references[row]
            if fault.kind == "nan":
                out[row] = np.nan
            elif fault.kind == "scale":
                with np.errstate(over="ignore", invalid="ignore"):  # an overflow is a non-finite message:
                    out[row] = references[row] + fault.factor * update  # quarantined by the round loop
            elif fault.kind == "sign_flip":
                out[row] = references[row] - update
            elif fault.kind == "noise":
                rng = np.random.default_rng(np.random.SeedSequence([self.seed, _NOISE_STREAM, round_index, k]))
                out[row] = out[row] + fault.std * rng.standard_normal(out.shape[1])
            elif fault.kind == "stale":
                out[row] = before[row]
        return out, applied
