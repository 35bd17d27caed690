"""portfed: federated reinforcement learning on financial portfolios.

The public API, one name per building block of the data flow
``data → party → federation → run → evaluation`` (DESIGN.md §1).  Names are imported lazily so
``import portfed`` (and the CLI's start-up) does not pay for torch until a name is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # data
    "PricePanel": "portfed.data",
    "DataError": "portfed.data",
    "load_market": "portfed.data",
    "load_bundled": "portfed.data",
    "fetch_yahoo": "portfed.data",
    "load_csv": "portfed.data",
    "train_test_split": "portfed.data",
    "sample_universes": "portfed.data",
    # environment
    "PortfolioEnv": "portfed.envs",
    "transaction_remainder": "portfed.envs",
    # agents
    "AgentConfig": "portfed.agents",
    "BatchedDPGTrainer": "portfed.agents",
    "EIIEPolicy": "portfed.agents",
    "make_baselines": "portfed.agents",
    # generators
    "make_generator": "portfed.generators",
    "Augmenter": "portfed.generators",
    "stylized_facts": "portfed.generators",
    # federation
    "prox": "portfed.federation",
    "aggregate": "portfed.federation",
    "make_algorithm": "portfed.federation",
    "run_rounds": "portfed.federation",
    "smoothed_aggregate": "portfed.federation",
    "plan_local_solve": "portfed.federation",
    "Cohort": "portfed.federation",
    "CohortPlan": "portfed.federation",
    "CohortResult": "portfed.federation",
    "LocalObjective": "portfed.federation",
    "PartyCohort": "portfed.federation",
    "FederationState": "portfed.federation",
    "deployed_models": "portfed.federation",
    # evaluation and experiments
    "summarize": "portfed.evaluation",
    "backtest": "portfed.evaluation",
    "load_config": "portfed.experiment.config",
    # a trained agent at the desk
    "load": "portfed.deploy",
    "TrainedAgent": "portfed.deploy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'portfed' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
