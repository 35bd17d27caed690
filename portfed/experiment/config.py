"""Experiment configs: YAML validated into typed objects; unknown keys are errors (DESIGN.md §8).

Two experiments: ``single_party`` (:class:`SinglePartyConfig`, below) and ``federated``
(:class:`~portfed.experiment.config_federated.FederatedConfig`).  :func:`load_config` /
:func:`parse_config` pick the model from the ``experiment`` key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from portfed.experiment.config_base import (
    AgentSectionModel,
    ConfigError,
    StrictModel,
    describe_problems,
    read_yaml,
)
from portfed.experiment.config_federated import FederatedConfig

__all__ = ["ConfigError", "ExperimentConfig", "FederatedConfig", "SinglePartyConfig", "dump_config", "load_config",
           "parse_config"]


class DataSection(StrictModel):
    """Which market, which assets, which held-out period."""

    source: str = "nyse_n"
    tickers: list[str] | None = None
    n_assets: int | None = Field(default=9, ge=1)
    start: str | None = None
    end: str | None = None
    test_days: int = Field(default=252, ge=2)
    validation_days: int = Field(default=0, ge=0)


class TrainingSection(StrictModel):
    steps: int = Field(default=2000, ge=1)
    log_every: int = Field(default=50, ge=1)


class AugmentationSection(StrictModel):
    """A party's private generator (paper 001 §9.3); ``generator: null`` trains on real data only."""

    generator: str | None = None
    synthetic_days: int = Field(default=252, ge=1)
    regenerate_every: int = Field(default=1000, ge=1)
    params: dict[str, Any] = Field(default_factory=dict)


class EvaluationSection(StrictModel):
    baselines: list[str] = Field(
        default_factory=lambda: ["ubah", "ucrp", "best_stock", "bcrp", "olmar", "pamr", "ons", "anticor", "eg"]
    )
    cost_model: Literal["exact", "linear"] = "exact"


class SinglePartyConfig(AgentSectionModel):
    """One EIIE agent on one market, backtested on the held-out year against the baselines."""

    experiment: Literal["single_party"] = "single_party"
    seed: int = 0
    data: DataSection = Field(default_factory=DataSection)
    agent: dict[str, Any] = Field(default_factory=dict)
    training: TrainingSection = Field(default_factory=TrainingSection)
    augmentation: AugmentationSection = Field(default_factory=AugmentationSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)


ExperimentConfig = SinglePartyConfig | FederatedConfig


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML experiment config."""
    return parse_config(read_yaml(path), origin=str(path))


def parse_config(raw: dict[str, Any], origin: str = "<dict>") -> ExperimentConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"config {origin!r} must be a mapping, got {type(raw).__name__}")
    kind = raw.get("experiment", "single_party")
    models: dict[str, type[SinglePartyConfig] | type[FederatedConfig]] = {
        "single_party": SinglePartyConfig,
        "federated": FederatedConfig,
    }
    if kind not in models:
        raise ConfigError(f"config {origin!r}: unknown experiment {kind!r}; known: {sorted(models)}")
    try:
        return models[kind].model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"config {origin!r} is invalid: {describe_problems(exc)}") from exc


def dump_config(config: ExperimentConfig) -> str:
    """The resolved config (every default filled in) as YAML."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
