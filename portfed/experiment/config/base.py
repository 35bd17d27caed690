"""The shared parts of the experiment configs: the error type, strict sections, the ``agent`` section.

The ``agent`` section is validated by :class:`portfed.agents.AgentConfig` itself, so the agent's
fields are declared exactly once.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from portfed.agents import AgentConfig
from portfed.agents.optimisation_baselines import OptimisationSchedule


class ConfigError(ValueError):
    """An experiment config that cannot be used; the message names the offending key."""


#: The most values a YAML document may hold once its aliases are followed.  PyYAML shares an aliased
#: value instead of copying it, so nine nested lists of nine aliases (a "billion laughs") load at once as
#: 9⁹ values — which validation and ``model_dump`` would then walk one by one, for hours.  Experiment
#: configs hold hundreds.
MAX_YAML_VALUES = 100_000
#: ``agent`` keys at their default value that are left out of a loaded section (so of its fingerprint): the
#: keys added after stored runs existed (:class:`AgentSectionModel`).
DEFAULTS_LEFT_OUT = (("backend", "auto"), ("capture", "none"))


def expanded_size(value: Any, limit: int = MAX_YAML_VALUES) -> int:
    """The number of values in ``value`` with every shared (aliased) one counted each time it appears,
    stopping past ``limit``; a value that contains itself counts as ``limit + 1``."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, dict | list):
            return 1
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = limit + 1  # while its children are counted: a cycle is over the limit
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[id(node)] = total
        return total

    return size(value)


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats.  PyYAML follows YAML 1.1, whose floats need a dot, so it
    reads ``1e-3`` and ``3e-05`` — how Python prints small floats, and how people write learning rates — as
    strings; a field that takes a number or something else (``lam_t``: a number, a schedule or a mapping)
    would then refuse ``--set …lam_t=3e-05``.  Here a number with an exponent and no dot is a float too."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """``text`` parsed by :class:`YamlLoader` (PyYAML's safe loader, YAML 1.2's floats); ``yaml.YAMLError``
    when it is not YAML."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 -- a SafeLoader subclass: no Python objects


def parse_yaml(text: str, origin: str) -> Any:
    """:func:`load_yaml` of ``text``, refused as a :class:`ConfigError` naming ``origin`` when it is not YAML,
    nests too deeply, or expands to more than :data:`MAX_YAML_VALUES` values (:func:`expanded_size`)."""
    try:
        value = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin} is not valid YAML: {exc}") from exc
    except RecursionError:
        raise ConfigError(f"{origin} nests too deeply to be a config") from None
    if expanded_size(value) > MAX_YAML_VALUES:
        raise ConfigError(f"{origin} expands to more than {MAX_YAML_VALUES} values once its YAML aliases are "
                          "followed (an alias bomb, or a recursive alias): refused")
    return value


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """The parsed YAML of ``path`` (``{}`` for an empty file); ``ConfigError`` if missing, unreadable, not
    YAML or too large once expanded (:func:`parse_yaml`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file {str(path)!r} does not exist")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} file {str(path)!r} cannot be read: {exc}") from exc
    return parse_yaml(text, f"{what} {str(path)!r}") or {}


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

    Subclasses declare ``agent: dict[str, Any]`` where it belongs in their field order.  ``backend: auto`` and
    ``capture: none`` are dropped from the section (they are the defaults): a config that writes them keeps the
    fingerprint, the stored runs and the checkpoints of one that does not (:mod:`portfed.agents.backend`)."""

    @field_validator("agent", check_fields=False)
    @classmethod
    def _agent_is_valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        make_agent_config(value)
        return {key: item for key, item in value.items() if (key, item) not in DEFAULTS_LEFT_OUT}

    def agent_config(self) -> AgentConfig:
        return make_agent_config(self.agent)


def make_agent_config(section: dict[str, Any]) -> AgentConfig:
    """Build the agent's config from the YAML ``agent`` section (lists become tuples)."""
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
    try:
        return AgentConfig(**kwargs)
    except TypeError as exc:  # unknown key
        raise ValueError(f"agent: {exc}") from exc
