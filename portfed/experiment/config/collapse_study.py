"""The collapse study's config: a base federated config, the factors to vary, the seeds (``study: collapse``).

Five factors can plausibly cause the training collapse of paper 000 (§1, Fig. 1):

* ``learning_rate`` — the parties' Adam step size ``η`` (``agent.learning_rate``);
* ``local_steps`` — ``E``, local iterations per round (``federation.local_steps``);
* ``heterogeneity`` — ``same_market`` (the base config's parties: one market, overlapping random
  universes), ``cross_market`` (party ``k`` in market ``cross_markets[k % M]``, each with its own
  calendar and held-out final year) or ``generators`` (one market, each party extending its data
  with its own private generator ``generators[k % G]``);
* ``optimizer_state`` — what each party's Adam state does when the server's message arrives:
  ``keep``, ``reset``, ``average`` (``federation.optimizer_state``);
* ``participation`` — the fraction of parties active per round (``parties_per_round =
  max(1, round(p · count))``);

and ``keys``: any other setting of the base config, named by its dotted key (``agent.network``,
``agent.input_scale``, ``federation.proximal_update`` …), each a factor of its own with its levels —
the settings the paper fixes and an earlier study held at other values.

The **first level of every factor is the base point**.  ``design: one_at_a_time`` (the default) runs
the base cell and, for each factor, one cell per other level with every other factor at its base
(``1 + Σ (levels − 1)`` cells); ``design: full`` runs every combination.  Every cell runs every
algorithm of ``algorithms`` (the cells other than the base one: ``factor_algorithms``, when given) for
every seed of ``seeds``; the base config's ``collapse`` section is the collapse criterion, fixed before
the sweep (:mod:`portfed.experiment.reports.collapse`).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from portfed.experiment.config.base import ConfigError, StrictModel, describe_problems, read_yaml
from portfed.experiment.config.federated import FederatedConfig, MarketSection, PartiesSection
from portfed.experiment.config.loading import parse_config, set_key
from portfed.federation.cohort import OptimizerState
from portfed.validation import MAX_SEED

FACTORS = ("learning_rate", "local_steps", "heterogeneity", "optimizer_state", "participation")
#: What the named factors set (``factors.keys`` may not vary these) and the sections ``keys`` may name.
NAMED_KEYS = ("agent.learning_rate", "federation.local_steps", "federation.optimizer_state",
              "federation.parties_per_round", "federation.algorithms", "parties.markets", "parties.generators",
              "parties.generator_params")
KEY_SECTIONS = ("agent", "federation", "parties", "data", "evaluation")
Heterogeneity = Literal["same_market", "cross_market", "generators"]


class FactorsSection(StrictModel):
    """The levels of each factor; the first is the base point."""

    learning_rate: list[float] = Field(default_factory=lambda: [1e-3], min_length=1)
    local_steps: list[int] = Field(default_factory=lambda: [20], min_length=1)
    heterogeneity: list[Heterogeneity] = Field(
        default_factory=lambda: ["same_market"], min_length=1)
    optimizer_state: list[OptimizerState] = Field(default_factory=lambda: ["keep"], min_length=1)
    participation: list[float] = Field(default_factory=lambda: [1.0], min_length=1)
    keys: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _levels_are_valid(self) -> FactorsSection:
        for name, levels in self.levels().items():
            if len({repr(level) for level in levels}) != len(levels):
                raise ValueError(f"factors.{name} lists a level twice: {levels}")
        for key, levels in self.keys.items():
            if not levels:
                raise ValueError(f"factors.keys.{key} has no levels")
            if key in NAMED_KEYS or key.split(".")[0] not in KEY_SECTIONS:
                raise ValueError(f"factors.keys cannot vary {key!r}: name a setting of the sections "
                                 f"{', '.join(KEY_SECTIONS)} that the named factors do not set ({', '.join(NAMED_KEYS)})")
        if any(not (0 < lr < float("inf")) for lr in self.learning_rate):
            raise ValueError(f"factors.learning_rate must be positive numbers, got {self.learning_rate}")
        if any(e < 1 for e in self.local_steps):
            raise ValueError(f"factors.local_steps must be integers >= 1, got {self.local_steps}")
        if any(not 0 < p <= 1 for p in self.participation):
            raise ValueError(f"factors.participation must lie in (0, 1], got {self.participation}")
        return self

    def levels(self) -> dict[str, list[Any]]:
        """Every factor's levels, the named factors first, then ``keys`` in their order."""
        return {**{name: list(getattr(self, name)) for name in FACTORS}, **{k: list(v) for k, v in self.keys.items()}}


class CollapseStudyConfig(StrictModel):
    """A collapse study (module docstring): ``base`` is a federated config (a mapping, as in configs/)."""

    study: Literal["collapse"] = "collapse"
    base: dict[str, Any]
    algorithms: list[str] = Field(
        default_factory=lambda: ["local", "fedavg", "fedprox", "rfa", "comed", "fedavg+", "fedgeomed+", "fedcomed+"],
        min_length=1)
    #: The algorithms of every cell but the base one (``None``: ``algorithms``): the base cell runs them
    #: all, the factor cells a subset, so a study at the paper's horizon fits its time budget.
    factor_algorithms: list[str] | None = Field(default=None, min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    design: Literal["one_at_a_time", "full"] = "one_at_a_time"
    factors: FactorsSection = Field(default_factory=FactorsSection)
    cross_markets: list[MarketSection] = Field(default_factory=list)
    generators: list[str | None] = Field(default_factory=lambda: ["gbm", "vom"], min_length=1)
    generator_params: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds) or any(not 0 <= s <= MAX_SEED for s in seeds):
            raise ValueError(f"seeds must be distinct integers in [0, 2**63 - 1], got {seeds}")
        return seeds

    @model_validator(mode="after")
    def _cells_are_valid(self) -> CollapseStudyConfig:
        stray = [a for a in self.factor_algorithms or [] if a not in self.algorithms]
        if stray:
            raise ValueError(f"factor_algorithms {stray} are not among the study's algorithms {self.algorithms}")
        if "cross_market" in self.factors.heterogeneity and len(self.cross_markets) < 2:
            raise ValueError("factors.heterogeneity lists 'cross_market': give at least two cross_markets")
        for cell in cells(self):  # every cell is a valid federated config
            if cell_config(self, cell, self.seeds[0]).evaluation.disclosure != "per_party":
                raise ValueError(f"cell {cell.name!r} sets evaluation.disclosure=averaged: the study's collapse "
                                 "verdicts are read from every run's per-party metrics (each party's cash weight, "
                                 "its failed backtests); run the study per_party")
        return self

    def algorithms_of(self, cell: Cell) -> list[str]:
        """The algorithms run in ``cell``: all of ``algorithms`` in the base cell, ``factor_algorithms``
        (default: the same) in the others; in the study's order."""
        if cell.name == BASE or self.factor_algorithms is None:
            return list(self.algorithms)
        return [a for a in self.algorithms if a in self.factor_algorithms]


#: The name of the cell where every factor is at its first level.
BASE = "base"


@dataclass(frozen=True)
class Cell:
    """One point of the grid: ``settings[factor]`` for every factor; ``name`` shows the non-base ones."""

    name: str
    settings: dict[str, Any]


def cells(study: CollapseStudyConfig) -> list[Cell]:
    """The grid's cells in order: the base cell first (module docstring)."""
    levels = study.factors.levels()
    names = list(levels)
    base = {name: values[0] for name, values in levels.items()}
    if study.design == "full":
        points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*levels.values())]
    else:
        points = [base] + [{**base, name: value} for name in names for value in levels[name][1:]]
    out = []
    for point in points:
        changed = [f"{name}={point[name]}" for name in names if point[name] != base[name]]
        out.append(Cell(name=",".join(changed) or BASE, settings=point))
    return out


def cell_config(study: CollapseStudyConfig, cell: Cell, seed: int) -> FederatedConfig:
    """The base config with ``cell``'s settings, ``seed``, the cell's algorithms and no Fig. 1c snapshots."""
    raw = copy.deepcopy(study.base)
    for section in ("agent", "federation", "parties", "diagnostics"):
        raw[section] = dict(raw.get(section, {}))
    s = cell.settings
    raw["seed"] = seed
    raw["agent"]["learning_rate"] = float(s["learning_rate"])
    count = int(raw["parties"].get("count", PartiesSection().count))
    per_round = max(1, round(float(s["participation"]) * count))
    raw["federation"].update(local_steps=int(s["local_steps"]), optimizer_state=s["optimizer_state"],
                             parties_per_round=None if per_round >= count else per_round,
                             algorithms=study.algorithms_of(cell))
    raw["diagnostics"]["interpolation_rounds"] = []
    if s["heterogeneity"] == "cross_market":
        raw["parties"]["markets"] = [m.model_dump(mode="json") for m in study.cross_markets]
    elif s["heterogeneity"] == "generators":
        raw["parties"].update(generators=list(study.generators), generator_params=dict(study.generator_params))
    for key in study.factors.keys:
        set_key(raw, key, copy.deepcopy(s[key]))
    config = parse_config(raw, origin=f"study cell {cell.name!r}, seed {seed}")
    if not isinstance(config, FederatedConfig):
        raise ConfigError(f"the study's base must be a federated config, got experiment {config.experiment!r}")
    return config


def load_study_config(path: str | Path) -> CollapseStudyConfig:
    """Read and validate a study YAML (``ConfigError`` naming the offending key)."""
    return parse_study_config(read_yaml(path, "study config"), str(path))


def parse_study_config(raw: Any, origin: str = "<dict>") -> CollapseStudyConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"study config {origin!r} must be a mapping, got {type(raw).__name__}")
    try:
        return CollapseStudyConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"study config {origin!r} is invalid: {describe_problems(exc)}") from exc
