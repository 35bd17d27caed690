"""Federation layer: proximal operators, aggregators, the Fed+ local step, server steps, the round loop.

Market-agnostic: it sees flat float64 parameter vectors and parties behind the
:class:`Cohort` contract only: a round hands the cohort one :class:`CohortPlan` and gets back one
:class:`CohortResult` (DESIGN §1, §5, §6; ``docs/architecture.md``).  Algorithms are objects
(:mod:`.algorithms`): the round reads ``algorithm.plan → cohort.train → finish_round(algorithm.server)
→ algorithm.after_round``.
"""

from portfed.federation.aggregate import (
    AGGREGATORS,
    AggregateResult,
    aggregate,
    coordinate_median,
    geometric_median,
    smoothed_aggregate,
)
from portfed.federation.algorithms import ALGORITHMS, Algorithm, Schedule, deployed_models, make_algorithm
from portfed.federation.cohort import Cohort, CohortPlan, CohortResult, LocalObjective, cohort_rules
from portfed.federation.fedamp import cloud_models, fedamp_weights, heurfedamp_weights
from portfed.federation.fedmgda import FedMGDAStep, MinNormResult, fedmgda_step, min_norm_weights
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.local_solve import LocalSolveResult, local_solve, plan_local_solve
from portfed.federation.party_cohort import LocalTrainer, PartyCohort
from portfed.federation.prox import PROX_KINDS, Penalty, moreau_envelope, prox
from portfed.federation.records import PartyRoundRecord, RoundRecord
from portfed.federation.rounds import FederationRun, run_rounds
from portfed.federation.server import ServerContext, ServerOutput, initial_server_output, server_step
from portfed.federation.state import FederationState

__all__ = [
    "AGGREGATORS",
    "ALGORITHMS",
    "PROX_KINDS",
    "AggregateResult",
    "Algorithm",
    "Cohort",
    "CohortPlan",
    "CohortResult",
    "FedMGDAStep",
    "FederationRun",
    "FederationState",
    "LayerwisePenalty",
    "LocalObjective",
    "LocalSolveResult",
    "LocalTrainer",
    "MinNormResult",
    "PartyCohort",
    "PartyRoundRecord",
    "Penalty",
    "RoundRecord",
    "Schedule",
    "ServerContext",
    "ServerOutput",
    "aggregate",
    "cloud_models",
    "cohort_rules",
    "coordinate_median",
    "deployed_models",
    "fedamp_weights",
    "fedmgda_step",
    "geometric_median",
    "heurfedamp_weights",
    "initial_server_output",
    "local_solve",
    "make_algorithm",
    "min_norm_weights",
    "moreau_envelope",
    "plan_local_solve",
    "prox",
    "run_rounds",
    "server_step",
    "smoothed_aggregate",
]
