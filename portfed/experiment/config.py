"""Experiment configs: YAML validated into typed objects; unknown keys are errors (DESIGN.md §8).

The ``agent`` section is validated by :class:`portfed.agents.AgentConfig` itself, so the agent's
fields are declared exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from portfed.agents import AgentConfig


class ConfigError(ValueError):
    """An experiment config that cannot be used; the message names the offending key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _WithAgent(_Strict):
    """An experiment with an ``agent`` section (:class:`AgentConfig` keyword arguments, checked on load).

    Subclasses declare ``agent: dict[str, Any]`` where it belongs in their field order."""

    @field_validator("agent", check_fields=False)
    @classmethod
    def _agent_is_valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        make_agent_config(value)
        return value

    def agent_config(self) -> AgentConfig:
        return make_agent_config(self.agent)


class DataSection(_Strict):
    """Which market, which assets, which held-out period."""

    source: str = "nyse_n"
    tickers: list[str] | None = None
    n_assets: int | None = Field(default=9, ge=1)
    start: str | None = None
    end: str | None = None
    test_days: int = Field(default=252, ge=2)
    validation_days: int = Field(default=0, ge=0)


class TrainingSection(_Strict):
    steps: int = Field(default=2000, ge=1)
    log_every: int = Field(default=50, ge=1)


class AugmentationSection(_Strict):
    """A party's private generator (paper 001 §9.3); ``generator: null`` trains on real data only."""

    generator: str | None = None
    synthetic_days: int = Field(default=252, ge=1)
    regenerate_every: int = Field(default=1000, ge=1)
    params: dict[str, Any] = Field(default_factory=dict)


class EvaluationSection(_Strict):
    baselines: list[str] = Field(
        default_factory=lambda: ["ubah", "ucrp", "best_stock", "bcrp", "olmar", "pamr", "ons", "anticor", "eg"]
    )
    cost_model: Literal["exact", "linear"] = "exact"


class SinglePartyConfig(_WithAgent):
    """One EIIE agent on one market, backtested on the held-out year against the baselines."""

    experiment: Literal["single_party"] = "single_party"
    seed: int = 0
    data: DataSection = Field(default_factory=DataSection)
    agent: dict[str, Any] = Field(default_factory=dict)
    training: TrainingSection = Field(default_factory=TrainingSection)
    augmentation: AugmentationSection = Field(default_factory=AugmentationSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)


def make_agent_config(section: dict[str, Any]) -> AgentConfig:
    """Build the agent's config from the YAML ``agent`` section (lists become tuples)."""
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
    try:
        return AgentConfig(**kwargs)
    except TypeError as exc:  # unknown key
        raise ValueError(f"agent: {exc}") from exc


# ---------------------------------------------------------------------- the federated experiment
class FederatedDataSection(_Strict):
    """The market the parties draw their universes from, and the held-out period they share.

    ``pool``: the tickers the parties draw from — a list, the name of a universe of
    :data:`portfed.data.UNIVERSES` (e.g. ``sp500_tech50``), or ``null`` for every ticker of the source.
    ``options`` go to :func:`portfed.data.load_market` (e.g. ``cache_dir`` for Yahoo, ``layout`` for CSV).
    """

    source: str = "nyse_n"
    pool: list[str] | str | None = None
    start: str | None = None
    end: str | None = None
    test_days: int = Field(default=252, ge=2)
    options: dict[str, Any] = Field(default_factory=dict)


class PartiesSection(_Strict):
    """``count`` parties, each with ``n_assets`` tickers and a private generator.

    Party ``k`` gets ``generators[k % len(generators)]`` (``null``: no augmentation), built with
    ``generator_params[name]``; its Augmenter appends ``synthetic_days`` synthetic closes and
    regenerates them every ``regenerate_every`` local iterations (paper 001 §9.3).
    """

    count: int = Field(default=10, ge=1)
    n_assets: int = Field(default=9, ge=1)
    generators: list[str | None] = Field(default_factory=lambda: [None], min_length=1)
    generator_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    synthetic_days: int = Field(default=252, ge=1)
    regenerate_every: int = Field(default=1000, ge=1)

    @model_validator(mode="after")
    def _generators_are_known(self) -> PartiesSection:
        from portfed.generators import GENERATORS

        for name in [g for g in self.generators if g is not None] + list(self.generator_params):
            if name not in GENERATORS:
                raise ValueError(f"unknown generator {name!r}; known generators are {sorted(GENERATORS)}")
        unused = sorted(set(self.generator_params) - set(self.generators))
        if unused:
            raise ValueError(f"generator_params given for {unused}, which no party uses")
        return self


class FederationSection(_Strict):
    """``rounds`` rounds of ``local_steps`` local iterations for each algorithm of ``algorithms``.

    ``algorithm_params[name]`` overrides the knobs of :func:`portfed.federation.make_algorithm`
    (e.g. ``fedavg+: {lam: 0.001, sigma: 0.01, rho: 0.1}``; algorithms not listed may have entries, for
    ``portfed compare --algorithms``).  ``parties_per_round: null`` = all
    parties every round.  A checkpoint is written every ``checkpoint_every`` rounds and after the last.

    ``engine``: how the parties' local training is computed — ``batched`` (every active party's step
    as one computation, :class:`portfed.agents.batched.BatchedDPGTrainer`; CNN EIIE only),
    ``per_party`` (one ``DPGTrainer`` per party), or ``auto`` (``batched`` for the CNN, ``per_party``
    for the RNN/LSTM; every party has ``parties.n_assets`` assets, as the batched engine needs).  Both
    engines compute the same rounds, to float32 round-off.
    """

    algorithms: list[str] = Field(default_factory=lambda: ["fedavg+"], min_length=1)
    rounds: int = Field(default=50, ge=1)
    local_steps: int = Field(default=50, ge=1)
    parties_per_round: int | None = Field(default=None, ge=1)
    algorithm_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    checkpoint_every: int = Field(default=10, ge=1)
    engine: Literal["auto", "batched", "per_party"] = "auto"

    @model_validator(mode="after")
    def _algorithms_are_valid(self) -> FederationSection:
        from portfed.federation import make_algorithm

        duplicates = sorted({a for a in self.algorithms if self.algorithms.count(a) > 1})
        if duplicates:
            raise ValueError(f"algorithm {duplicates[0]!r} is listed more than once")
        for name in dict.fromkeys([*self.algorithms, *self.algorithm_params]):
            make_algorithm(name, **self.algorithm_params.get(name, {}))
        return self


class DiagnosticsSection(_Strict):
    """Paper 000 Fig. 1c: each party's local performance along ``(1 − λ) w_k + λ w̃``.

    Evaluated after the rounds listed (0-based) on ``interpolation_points`` values of λ in
    ``[0, 1]``, on the last ``interpolation_days`` days of the party's real training data
    (``null``: all of them; one evaluation is a day-by-day pass, so long histories cost seconds).
    """

    interpolation_rounds: list[int] = Field(default_factory=list)
    interpolation_points: int = Field(default=11, ge=2)
    interpolation_days: int | None = Field(default=252, ge=2)


class CollapseSection(_Strict):
    """The collapse rule of :mod:`portfed.experiment.collapse` (see :class:`CollapseRule`)."""

    smoothing: int = Field(default=3, ge=1)
    drop_fraction: float = Field(default=0.5, gt=0)
    spike_factor: float = Field(default=3.0, gt=1)
    min_history: int = Field(default=3, ge=1)
    max_lag: int = Field(default=3, ge=0)


class FederatedEvaluationSection(_Strict):
    """Baselines backtested on every party's held-out year; ``ucrp`` is the reference of Fig. 3a."""

    baselines: list[str] = Field(default_factory=lambda: ["ucrp", "ubah"])
    cost_model: Literal["exact", "linear"] = "exact"

    @field_validator("baselines")
    @classmethod
    def _has_ucrp(cls, value: list[str]) -> list[str]:
        if "ucrp" not in value:
            raise ValueError(f"baselines {value} must include 'ucrp' (the reference of Fig. 3a)")
        return value


class FederatedConfig(_WithAgent):
    """N parties with private universes, data and generators, federated by each listed algorithm.

    ``torch_threads``: intra-op threads during the run; ``null`` (the default) resolves by the engine
    (:meth:`threads`): the per-party engine's single EIIE steps are fastest on one thread, the
    batched engine's K-party products on two (measured on the 2-core machine, K = 50: 3.3k vs 5.2k
    party-steps/s, ``make bench``), so ``batched`` takes ``min(2, CPUs)``.  ``fit_workers``:
    processes fitting the parties' generators (1 = in this process), each with
    ``max(1, threads // fit_workers)`` threads; the fits are seeded per party, so the parties are the
    same for any number of workers.
    """

    experiment: Literal["federated"] = "federated"
    seed: int = Field(default=0, ge=0)
    torch_threads: int | None = Field(default=None, ge=1)
    fit_workers: int = Field(default=1, ge=1)
    data: FederatedDataSection = Field(default_factory=FederatedDataSection)
    parties: PartiesSection = Field(default_factory=PartiesSection)
    agent: dict[str, Any] = Field(default_factory=dict)
    federation: FederationSection = Field(default_factory=FederationSection)
    diagnostics: DiagnosticsSection = Field(default_factory=DiagnosticsSection)
    collapse: CollapseSection = Field(default_factory=CollapseSection)
    evaluation: FederatedEvaluationSection = Field(default_factory=FederatedEvaluationSection)

    @model_validator(mode="after")
    def _sections_agree(self) -> FederatedConfig:
        late = [t for t in self.diagnostics.interpolation_rounds if not 0 <= t < self.federation.rounds]
        if late:
            raise ValueError(
                f"diagnostics.interpolation_rounds {late} outside the rounds 0 … {self.federation.rounds - 1}"
            )
        per_round = self.federation.parties_per_round
        if per_round is not None and per_round > self.parties.count:
            raise ValueError(f"federation.parties_per_round={per_round} exceeds parties.count={self.parties.count}")
        network = self.agent_config().network
        if self.federation.engine == "batched" and network != "cnn":
            raise ValueError(f"federation.engine 'batched' trains the CNN EIIE only; agent.network {network!r} "
                             "needs engine 'per_party' (or 'auto')")
        features = self.agent_config().features
        if features != ("close",) and any(g is not None for g in self.parties.generators):
            raise ValueError(f"agent.features {list(features)} need high/low/open, which generators do not "
                             "produce (they model closes only); use features [close] with augmentation")
        return self

    def threads(self) -> int:
        """``torch_threads`` with ``null`` resolved: ``min(2, CPUs)`` for the batched engine, else 1."""
        if self.torch_threads is not None:
            return self.torch_threads
        return min(2, os.cpu_count() or 1) if self.engine() == "batched" else 1

    def engine(self) -> Literal["batched", "per_party"]:
        """``federation.engine`` with ``auto`` resolved: ``batched`` for the CNN EIIE, else ``per_party``."""
        engine = self.federation.engine
        if engine == "auto":
            return "batched" if self.agent_config().network == "cnn" else "per_party"
        return engine


ExperimentConfig = SinglePartyConfig | FederatedConfig


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML experiment config."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {str(path)!r} is not valid YAML: {exc}") from exc
    return parse_config(raw, origin=str(path))


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
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"config {origin!r} is invalid: {problems}") from exc


def dump_config(config: ExperimentConfig) -> str:
    """The resolved config (every default filled in) as YAML."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
