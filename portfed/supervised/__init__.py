"""Supervised federated benchmarks of the seed papers on the same federation layer as the portfolio agents.

Data (:mod:`.synthetic`, :mod:`.partitions`, :mod:`.loaders`, :mod:`.build`), convex models trained for
many parties at once (:mod:`.models`, :mod:`.trainers`: a :class:`~portfed.federation.cohort.Cohort`
and per-party :class:`~portfed.federation.cohort.LocalTrainer` objects), personal evaluation
(:mod:`.metrics`), configs (:mod:`.config`), runs (:mod:`.runner`) and tables (:mod:`.report`).
See ``docs/reports/benchmarks.md`` and ``portfed supervised --help``.
"""

from portfed.supervised.data import FederatedData, PartyData, split_party
from portfed.supervised.models import LinearModel, sgd_steps
from portfed.supervised.synthetic import fedprox_synthetic, synthetic_regression
from portfed.supervised.trainers import SupervisedCohort, SupervisedParty, make_parties

__all__ = [
    "FederatedData",
    "LinearModel",
    "PartyData",
    "SupervisedCohort",
    "SupervisedParty",
    "fedprox_synthetic",
    "make_parties",
    "sgd_steps",
    "split_party",
    "synthetic_regression",
]
