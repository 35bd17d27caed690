"""The shared parts of the experiment configs: the error type, strict sections, the ``agent`` section.

The ``agent`` section is validated by :class:`portfed.agents.AgentConfig` itself, so the agent's
fields are declared exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from portfed.agents import AgentConfig
from portfed.agents.optimisation_baselines import OptimisationSchedule


class ConfigError(ValueError):
    """An experiment config that cannot be used; the message names the offending key."""


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """The parsed YAML of ``path`` (``{}`` for an empty file); ``ConfigError`` if missing or not YAML."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file {str(path)!r} does not exist")
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not valid YAML: {exc}") from exc


def describe_problems(exc: ValidationError) -> str:
    """``key.path: message; …`` for every error of a pydantic validation."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors())


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OptimisationSection(StrictModel):
    """The optimisation baselines' walk-forward schedule (``min_variance``, ``max_sharpe``, ``risk_parity``,
    ``hrp``, ``inverse_volatility`` in ``evaluation.baselines``; :mod:`portfed.agents.optimisation_baselines`):
    fitted at the first decision and every ``rebalance_every`` decision days on the trailing ``lookback``
    daily returns up to that close, the book traded to the new target then and held as it drifts between."""

    rebalance_every: int = Field(default=21, ge=1)
    lookback: int = Field(default=252, ge=2)

    def schedule(self) -> OptimisationSchedule:
        return OptimisationSchedule(self.rebalance_every, self.lookback)


class AgentSectionModel(StrictModel):
    """An experiment with an ``agent`` section (:class:`AgentConfig` keyword arguments, checked on load).

    Subclasses declare ``agent: dict[str, Any]`` where it belongs in their field order."""

    @field_validator("agent", check_fields=False)
    @classmethod
    def _agent_is_valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        make_agent_config(value)
        return value

    def agent_config(self) -> AgentConfig:
        return make_agent_config(self.agent)


def make_agent_config(section: dict[str, Any]) -> AgentConfig:
    """Build the agent's config from the YAML ``agent`` section (lists become tuples)."""
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
    try:
        return AgentConfig(**kwargs)
    except TypeError as exc:  # unknown key
        raise ValueError(f"agent: {exc}") from exc
