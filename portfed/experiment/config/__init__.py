"""The experiment configs: YAML validated into typed objects; unknown keys are errors (DESIGN.md §8).

:func:`load_config` / :func:`parse_config` pick the model from the ``experiment`` key:
``single_party`` (:class:`SinglePartyConfig`, :mod:`.loading`) or ``federated``
(:class:`FederatedConfig`, :mod:`.federated`: market(s), parties, federation, diagnostics).  The shared
parts (the error type, strict sections, the ``agent`` section) are :mod:`.base`; the collapse study's
config (a base federated config, the factors to vary, the seeds) is :mod:`.collapse_study`.
"""

from portfed.experiment.config.algorithms import portfolio_algorithm
from portfed.experiment.config.base import ConfigError, StrictModel, describe_problems, load_yaml, read_yaml
from portfed.experiment.config.collapse_study import (
    BASE,
    Cell,
    CollapseStudyConfig,
    cell_config,
    cells,
    load_study_config,
    parse_study_config,
)
from portfed.experiment.config.federated import (
    FaultSection,
    FederatedConfig,
    FederatedDataSection,
    FederationSection,
    MarketSection,
    PartiesSection,
)
from portfed.experiment.config.loading import (
    ExperimentConfig,
    SinglePartyConfig,
    apply_overrides,
    config_mapping,
    dump_config,
    load_config,
    parse_config,
    set_key,
)

__all__ = [
    "BASE",
    "Cell",
    "CollapseStudyConfig",
    "ConfigError",
    "ExperimentConfig",
    "FaultSection",
    "FederatedConfig",
    "FederatedDataSection",
    "FederationSection",
    "MarketSection",
    "PartiesSection",
    "SinglePartyConfig",
    "StrictModel",
    "apply_overrides",
    "cell_config",
    "cells",
    "config_mapping",
    "describe_problems",
    "dump_config",
    "load_config",
    "load_study_config",
    "parse_config",
    "parse_study_config",
    "load_yaml",
    "read_yaml",
    "set_key",
    "portfolio_algorithm",
]
