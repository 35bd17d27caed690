"""Federated algorithms as objects: one class per family, a registry from name to factory.

An algorithm (:class:`Algorithm`) is what the round loop asks of it — its server rule, its plan for
the active parties, its work after the round, its initial extras and its deployed models
(:mod:`.base`).  Families: :mod:`.fedplus` (local, FedAvg, FedProx, RFA, CoMed, the Fed+ variants
and hybrid+ as settings of one dataclass), :mod:`.mgda` (FedMGDA+, FedAvg-n), :mod:`.amp` (FedAMP,
HeurFedAMP), one module per personalised baseline (:mod:`.scaffold`, :mod:`.ditto`, :mod:`.pfedme`,
:mod:`.perfedavg`, :mod:`.apfl`, :mod:`.finetune`, sharing :mod:`.personal`).  :func:`make_algorithm`
builds one by name with its knobs (:mod:`.registry`).

Schedules: every :class:`Schedule` knob takes the value ``initial · decay^{⌊t/every⌋}`` in round t (0-based).
"""

from portfed.federation.algorithms.base import (
    Algorithm,
    RoundAlgorithm,
    deployed_models,
    require_rules,
    solved_by_parties,
)
from portfed.federation.algorithms.registry import ALGORITHMS, make_algorithm
from portfed.federation.schedule import Schedule

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "RoundAlgorithm",
    "Schedule",
    "deployed_models",
    "make_algorithm",
    "require_rules",
    "solved_by_parties",
]
