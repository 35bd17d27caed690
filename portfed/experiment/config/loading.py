"""Experiment configs: YAML validated into typed objects; unknown keys are errors (DESIGN.md §8).

Two experiments: ``single_party`` (:class:`SinglePartyConfig`, below) and ``federated``
(:class:`~portfed.experiment.config.federated.FederatedConfig`).  :func:`load_config` /
:func:`parse_config` pick the model from the ``experiment`` key.
"""

from __future__ import annotations

import copy
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from portfed.agents.baselines import baseline_name
from portfed.evaluation.benchmark import parse_benchmark
from portfed.experiment.config.base import (
    AgentSectionModel,
    ConfigError,
    OptimisationSection,
    StrictModel,
    describe_problems,
    parse_yaml,
    read_yaml,
)
from portfed.experiment.config.federated import FederatedConfig
from portfed.validation import MAX_SEED


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
    """The baselines backtested beside the agent; ``benchmark`` and ``risk_free`` as in a federated
    config's ``evaluation`` (a baseline of ``baselines`` or a ``SOURCE:TICKER`` series; the annual
    risk-free rate of the Sharpe and Sortino ratios and of α)."""

    baselines: list[str] = Field(
        default_factory=lambda: ["ubah", "ucrp", "best_stock", "bcrp", "olmar", "pamr", "ons", "anticor", "eg"]
    )
    cost_model: Literal["exact", "linear"] = "exact"
    optimisation: OptimisationSection = Field(default_factory=OptimisationSection)
    benchmark: str = "ucrp"
    risk_free: float = Field(default=0.0, gt=-1, le=1)

    @model_validator(mode="after")
    def _benchmark_is_known(self) -> EvaluationSection:
        parse_benchmark(self.benchmark, self.baselines)
        return self

    @field_validator("baselines")
    @classmethod
    def _known_baselines(cls, value: list[str]) -> list[str]:
        for name in value:  # a typo is refused at load, before the agent trains
            baseline_name(name)
        return value


class SinglePartyConfig(AgentSectionModel):
    """One EIIE agent on one market, backtested on the held-out year against the baselines."""

    experiment: Literal["single_party"] = "single_party"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    data: DataSection = Field(default_factory=DataSection)
    agent: dict[str, Any] = Field(default_factory=dict)
    training: TrainingSection = Field(default_factory=TrainingSection)
    augmentation: AugmentationSection = Field(default_factory=AugmentationSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)


ExperimentConfig = SinglePartyConfig | FederatedConfig


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read and validate a YAML experiment config, with ``overrides`` (``KEY.PATH=VALUE``) applied first
    (:func:`apply_overrides`).

    A relative CSV ``source`` written in the file is read from the file's directory, one given by an
    override from the working directory; both are stored absolute, so the resolved config a run
    directory keeps (``config.yaml``) reads the same files from anywhere.
    """
    raw = read_yaml(path)
    if isinstance(raw, dict):
        raw = resolve_sources(raw, Path(path).absolute().parent)
    if overrides:
        raw = resolve_sources(apply_overrides(raw, overrides, origin=str(path)), Path.cwd())
    return parse_config(raw, origin=str(path))


def resolve_sources(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    """A copy of the config mapping ``raw`` with every relative ``.csv`` source (``data.source``,
    ``parties.markets[*].source``, the file of ``evaluation.benchmark``'s ``FILE.csv:TICKER``) made
    absolute against ``base``; anything else left as it is."""
    result = copy.deepcopy(raw)
    parties = result.get("parties")
    markets = parties.get("markets") if isinstance(parties, dict) else None
    sections = [result.get("data")] + (list(markets) if isinstance(markets, list) else [])
    for section in sections:
        source = section.get("source") if isinstance(section, dict) else None
        if isinstance(source, str) and source.lower().endswith(".csv") and not Path(source).is_absolute():
            section["source"] = os.path.normpath(base / Path(source).expanduser())
    evaluation = result.get("evaluation")
    benchmark = evaluation.get("benchmark") if isinstance(evaluation, dict) else None
    if isinstance(benchmark, str):  # SOURCE.csv:TICKER
        source, sep, ticker = benchmark.rpartition(":")
        if sep and source.lower().endswith(".csv") and not Path(source).is_absolute():
            evaluation["benchmark"] = f"{os.path.normpath(base / Path(source).expanduser())}:{ticker}"
    return result


def apply_overrides(raw: Any, overrides: Sequence[str], origin: str = "<dict>") -> dict[str, Any]:
    """A copy of the config mapping ``raw`` with each ``dotted.key=value`` of ``overrides`` set
    (``value`` read as YAML: ``agent.input_scale=raw``, ``federation.rounds=10``,
    ``federation.algorithms=[local,fedavg]``); missing sections are created.

    Raises:
        ConfigError: an override without ``=`` or a key, or one that descends into a value that is
            not a mapping.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"config {origin!r} must be a mapping, got {type(raw).__name__}")
    result = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise ConfigError(f"override {item!r} is not KEY.PATH=VALUE (e.g. agent.input_scale=raw)")
        value = parse_yaml(text, f"override {item!r}: the value")
        if isinstance(value, datetime.date):  # YAML reads 2019-01-02 as a date; configs spell dates as text
            value = value.isoformat()
        try:
            set_key(result, key.strip(), value)
        except ConfigError as exc:
            raise ConfigError(f"override {item!r}: {exc}") from None
    return result


def set_key(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` of the config mapping ``raw`` to ``value`` in place, creating missing sections.

    Raises:
        ConfigError: the key descends into a value that is not a mapping.
    """
    path = key.split(".")
    node = raw
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(path[:depth + 1])} is {child!r}, not a section")
        node = child
    node[path[-1]] = value


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


def config_mapping(config: ExperimentConfig) -> dict[str, Any]:
    """The resolved config (every default filled in) as the mapping that :func:`parse_config` reads back to an
    equal config.  ``parties.n_assets`` is left out when ``parties.universes`` fixes the tickers: its default
    is not used then, and given beside the universes it is refused (a saved run would not load back)."""
    raw = config.model_dump(mode="json")
    parties = raw.get("parties")
    if isinstance(parties, dict) and parties.get("universes") is not None:
        del parties["n_assets"]
    return raw


def dump_config(config: ExperimentConfig) -> str:
    """The resolved config (:func:`config_mapping`) as YAML."""
    return yaml.safe_dump(config_mapping(config), sort_keys=False)
