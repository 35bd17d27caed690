"""The federated experiment's config (paper 000 §8.2): market(s), parties, federation, diagnostics.

YAML validated into typed objects; unknown keys are errors (DESIGN.md §8).  Loaded through
:func:`portfed.experiment.config.loading.load_config` (``experiment: federated``).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from portfed.agents import AgentConfig
from portfed.agents.baselines import baseline_name
from portfed.evaluation.benchmark import parse_benchmark
from portfed.experiment.config.algorithms import portfolio_algorithm
from portfed.experiment.config.base import AgentSectionModel, OptimisationSection, StrictModel
from portfed.experiment.config.privacy import PrivacyModel
from portfed.federation.cohort import OptimizerState, ProximalUpdate
from portfed.federation.faults import FAULT_KINDS, Fault, FaultInjector
from portfed.validation import MAX_SEED

if TYPE_CHECKING:
    pass


class FederatedDataSection(StrictModel):
    """The market the parties draw their universes from, and the held-out period they share.

    ``source``: a bundled dataset name (``portfed data list``), a path ending in ``.csv`` (relative
    paths are read from the config file's directory), or ``yahoo``.  ``pool``: the tickers the
    parties draw from — a list, the name of a universe of :data:`portfed.data.UNIVERSES` (e.g.
    ``sp500_tech50``), or ``null`` for every ticker of the source.  ``options`` go to
    :func:`portfed.data.load_market` (e.g. ``cache_dir`` and ``max_ffill`` for Yahoo, ``layout`` and
    ``max_ffill`` for CSV).
    """

    source: str = "nyse_n"
    pool: list[str] | str | None = None
    start: str | None = None
    end: str | None = None
    test_days: int = Field(default=252, ge=2)
    options: dict[str, Any] = Field(default_factory=dict)


class MarketSection(FederatedDataSection):
    """One market of a cross-market federation: a data section, and optionally its own universe size.

    Party ``k`` draws its universe from ``parties.markets[k % len(markets)]`` and is backtested on
    that market's own held-out final ``test_days``, on its own calendar.  With as many markets as
    parties, each party has its own data source (a CSV file per party, mixed with bundled or Yahoo
    parties).  ``n_assets`` (default
    ``parties.n_assets``) may differ between markets: the EIIE evaluates every asset with the same
    weights, so universes of different sizes share one model — and one computation of the engine, which
    pads the smaller universes (:mod:`portfed.agents.batched_head`).
    """

    n_assets: int | None = Field(default=None, ge=1)


class FaultSection(StrictModel):
    """One :class:`portfed.federation.faults.Fault`: ``kind`` hitting ``parties`` in ``rounds`` (all when null)."""

    kind: str
    parties: list[int] = Field(min_length=1)
    rounds: list[int] | None = None
    factor: float = 1e6
    std: float = Field(default=1.0, ge=0)
    steps: int = Field(default=1, ge=1)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; valid kinds: {', '.join(FAULT_KINDS)}")
        return kind

    def fault(self) -> Fault:
        return Fault(self.kind, tuple(self.parties), None if self.rounds is None else tuple(self.rounds),
                     factor=self.factor, std=self.std, steps=self.steps)


#: The most parties of one federated config (``parties.count``).  Every party holds its prices, its
#: model, its optimizer state and its engine rows in memory, and its generator is fitted at start: 1000
#: is twenty times the largest federation of the papers and of ``configs/`` (50), and far beyond what one
#: machine trains in useful time; ``parties.count: 100000`` is refused at load instead of exhausting memory.
MAX_PARTIES = 1000


class PartiesSection(StrictModel):
    """``count`` parties, each with ``n_assets`` tickers and a private generator.

    ``universes`` (optional): party ``k`` trades exactly the tickers ``universes[k]`` (one list per
    party, taken from its market; ``n_assets`` then is not used), instead of ``n_assets`` tickers drawn
    at random from its market's pool.  Party ``k`` gets ``generators[k % len(generators)]`` (``null``: no augmentation), built with
    ``generator_params[name]``; with ``markets`` (a cross-market federation, :class:`MarketSection`)
    party ``k`` belongs to ``markets[k % len(markets)]``, else every party to the ``data`` market.  Its Augmenter appends ``synthetic_days`` synthetic closes and
    regenerates them every ``regenerate_every`` local iterations (paper 001 §9.3).  ``faults`` make
    some parties faulty or hostile (:mod:`portfed.federation.faults`: what they send is corrupted,
    their data never).
    """

    count: int = Field(default=10, ge=1, le=MAX_PARTIES)
    n_assets: int = Field(default=9, ge=1)
    generators: list[str | None] = Field(default_factory=lambda: [None], min_length=1)
    generator_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    synthetic_days: int = Field(default=252, ge=1)
    regenerate_every: int = Field(default=1000, ge=1)
    faults: list[FaultSection] = Field(default_factory=list)
    markets: list[MarketSection] = Field(default_factory=list)
    universes: list[list[str]] | None = None

    @model_validator(mode="after")
    def _universes_fit(self) -> PartiesSection:
        if self.universes is None:
            return self
        if len(self.universes) != self.count:
            raise ValueError(f"parties.universes has {len(self.universes)} lists for parties.count={self.count} "
                             "parties: give one ticker list per party")
        for k, tickers in enumerate(self.universes):
            if not tickers:
                raise ValueError(f"parties.universes[{k}] is empty: party {k} needs at least one ticker")
            duplicate = next((t for i, t in enumerate(tickers) if t in tickers[:i]), None)
            if duplicate is not None:
                raise ValueError(f"parties.universes[{k}] lists ticker {duplicate!r} twice")
        if "n_assets" in self.model_fields_set:
            raise ValueError("parties.n_assets and parties.universes are both given: the universes fix each "
                             "party's tickers; remove n_assets")
        sized = [m for m, market in enumerate(self.markets) if market.n_assets is not None]
        if sized:
            raise ValueError(f"parties.markets[{sized[0]}].n_assets is given with parties.universes: the "
                             "universes fix each party's tickers; remove n_assets")
        return self

    @model_validator(mode="after")
    def _generators_are_known(self) -> PartiesSection:
        from portfed.generators import GENERATORS

        for name in [g for g in self.generators if g is not None] + list(self.generator_params):
            if name not in GENERATORS:
                raise ValueError(f"unknown generator {name!r}; known generators are {sorted(GENERATORS)}")
        unused = sorted(set(self.generator_params) - set(self.generators))
        if unused:
            raise ValueError(f"generator_params given for {unused}, which no party uses")
        FaultInjector([f.fault() for f in self.faults], self.count, 0)  # party indices, overlaps
        return self

    @property
    def honest(self) -> list[int]:
        """The parties no fault names."""
        named = {k for fault in self.faults for k in fault.parties}
        return [k for k in range(self.count) if k not in named]


class FederationSection(StrictModel):
    """``rounds`` rounds of ``local_steps`` local iterations for each algorithm of ``algorithms``.

    ``algorithm_params[name]`` overrides the knobs of :func:`portfed.federation.make_algorithm`
    (e.g. ``fedavg+: {lam: 0.001, sigma: 0.01, rho: 0.1}``; algorithms not listed may have entries, for
    ``portfed compare --algorithms``).  ``parties_per_round: null`` = all
    parties every round.  A checkpoint is written every ``checkpoint_every`` rounds and after the last.

    Every active party's local step runs in one computation of portfed's training engine
    (:class:`portfed.agents.batched.BatchedDPGTrainer`), whatever the network and universe sizes.  The
    setting ``engine`` of older configs (``auto``, ``batched``, ``per_party``) is accepted and ignored
    with a :class:`FutureWarning`: the engines it chose between computed the same rounds to float32
    round-off, and there is one now.  ``screen_factor``: quarantine messages whose
    update norm exceeds this multiple of the round's median (:func:`portfed.federation.rounds.quarantine`).
    ``optimizer_state``: what each party does with its Adam state when the server's message arrives —
    ``keep`` (the default), ``reset`` or ``average`` over the round's active parties (in-process runs;
    :meth:`portfed.agents.adam.AdamState.on_new_start`).

    ``initial_models``: ``shared`` (every party starts from one ``w^0``, built from ``seed``) or
    ``per_party`` (paper 000 / 001 Alg. 1 line 1: party k builds its own ``w_k^0`` from its own seed and
    the server starts from ``w̃^0 = 𝒜(W^0)``, the algorithm's own aggregate of them — mean, medians,
    smoothed, FedAMP centres).  ``proximal_update``: how a party applies the Fed+ / FedProx pull
    towards its target ``z_k`` with weight ``σ`` — ``mix``, ``w ← κ w + (1 − κ) z_k`` after each Adam
    step with ``κ = 1/(1 + ησ)`` (paper 000 eq. 6), or ``loss``, ``σ/2 ‖w − z_k‖²`` added to the loss
    Adam sees (paper 001 Alg. 1; FedProx's definition); FedAMP keeps its own proximal term either way.

    ``share`` (``agent.learner: actor_critic`` only): what the server aggregates of each party —
    ``actor_critic`` (the default: the federated vector is the actor's parameters followed by the
    critic's) or ``actor`` (the critic stays private to its party).  Target networks are always private.
    The direct learner has only an actor, which it shares.
    """

    algorithms: list[str] = Field(default_factory=lambda: ["fedavg+"], min_length=1)
    rounds: int = Field(default=50, ge=1)
    local_steps: int = Field(default=50, ge=1)
    parties_per_round: int | None = Field(default=None, ge=1)
    algorithm_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    checkpoint_every: int = Field(default=10, ge=1)
    screen_factor: float | None = Field(default=None, gt=1)
    optimizer_state: OptimizerState = "keep"
    initial_models: Literal["shared", "per_party"] = "shared"
    proximal_update: ProximalUpdate = "mix"
    share: Literal["actor_critic", "actor"] = "actor_critic"

    @model_validator(mode="before")
    @classmethod
    def _engine_is_gone(cls, data: Any) -> Any:
        if isinstance(data, dict) and "engine" in data:
            data = {k: v for k, v in data.items() if k != "engine"}
            warnings.warn("federation.engine is ignored: every party trains in portfed's one engine (the engines "
                          "it chose between computed the same rounds to float32 round-off); remove the setting",
                          FutureWarning, stacklevel=2)
        return data

    @model_validator(mode="after")
    def _algorithms_are_valid(self) -> FederationSection:
        duplicates = sorted({a for a in self.algorithms if self.algorithms.count(a) > 1})
        if duplicates:
            raise ValueError(f"algorithm {duplicates[0]!r} is listed more than once")
        for name in dict.fromkeys([*self.algorithms, *self.algorithm_params]):
            portfolio_algorithm(name, self.algorithm_params.get(name, {}))
        return self


class DiagnosticsSection(StrictModel):
    """Paper 000 Fig. 1c: each party's local performance along ``(1 − λ) w_k + λ w̃``.

    Evaluated after the rounds listed (0-based) on ``interpolation_points`` values of λ in
    ``[0, 1]``, on the last ``interpolation_days`` days of the party's real training data
    (``null``: all of them; one evaluation is a day-by-day pass, so long histories cost seconds).
    The cost per algorithm is ``rounds × parties × (interpolation_points + 1)`` such passes, announced
    in its progress line; the empty list (the default) skips the diagnostic.
    """

    interpolation_rounds: list[int] = Field(default_factory=list)
    interpolation_points: int = Field(default=11, ge=2)
    interpolation_days: int | None = Field(default=252, ge=2)


class NoiseCollapseSection(StrictModel):
    """The second collapse criterion's thresholds (:mod:`portfed.experiment.reports.collapse_noise`, reported
    beside the first): a drop counts when the peak gain and the fall are at least ``min_gain`` and
    ``min_drop`` times the curve's round-to-round noise, and not when local training's curve fell by
    ``local_share`` of it within ``local_tolerance`` rounds."""

    min_gain: float = Field(default=4.0, ge=0)
    min_drop: float = Field(default=4.0, ge=0)
    local_share: float = Field(default=0.5, gt=0, le=1)
    local_tolerance: int = Field(default=2, ge=0)


class CollapseSection(StrictModel):
    """The collapse rule of :mod:`portfed.experiment.reports.collapse` (see :class:`CollapseRule`).

    ``min_spike``: the absolute floor of a spike's mean parameter change (default 0: no floor, the
    criterion of the recorded collapse study), so that tiny runs whose parameters barely move are not
    flagged.  ``noise``: the thresholds of the second, noise-aware criterion with its local-training
    control (:class:`NoiseCollapseSection`)."""

    smoothing: int = Field(default=3, ge=1)
    drop_fraction: float = Field(default=0.5, gt=0)
    spike_factor: float = Field(default=3.0, gt=1)
    min_history: int = Field(default=3, ge=1)
    max_lag: int = Field(default=3, ge=0)
    all_cash_weight: float = Field(default=0.99, gt=0, le=1)
    all_cash_share: float = Field(default=0.5, gt=0, le=1)
    min_spike: float = Field(default=0.0, ge=0)
    noise: NoiseCollapseSection = Field(default_factory=NoiseCollapseSection)


class FederatedEvaluationSection(StrictModel):
    """Baselines backtested on every party's held-out year; ``ucrp`` is the reference of Fig. 3a.
    ``composition_party``: the party whose daily weights the comparison plots (``weights_party_<k>.png``).
    ``online_steps``: 0 (the default) trades the held-out period with the deployed model frozen; ``n > 0``
    trains it ``n`` more steps on the real prices up to each day just traded, as in Jiang et al. 2017's
    back-tests (:class:`portfed.agents.online.OnlineEIIEPolicy`).  ``optimisation``: the schedule of the
    optimisation baselines (``min_variance``, ``max_sharpe``, ``risk_parity``, ``hrp``, ``inverse_volatility``).
    ``benchmark``: what the benchmark-relative metrics (tracking error, information ratio, α, β, up/down
    capture) compare every strategy with — a baseline of ``baselines`` trading each party's universe, or a
    price series ``SOURCE:TICKER`` (a bundled dataset or a CSV file; :mod:`portfed.evaluation.benchmark`).
    ``risk_free``: the annual risk-free rate (a fraction, 0.02 for 2 %) of the Sharpe and Sortino ratios
    and of α.  ``disclosure``: what of each party's held-out evaluation leaves it — ``per_party`` (the
    default) every backtest (metrics, portfolio values, daily weights, Fig. 1c rows); ``averaged`` only its
    scalar metrics, of which the comparison publishes the mean over parties — on a Flower deployment with
    secure aggregation, only their sums reach the server (:mod:`portfed.experiment.reports.disclosure`)."""

    baselines: list[str] = Field(default_factory=lambda: ["ucrp", "ubah"])
    cost_model: Literal["exact", "linear"] = "exact"
    composition_party: int = Field(default=0, ge=0)
    online_steps: int = Field(default=0, ge=0)
    optimisation: OptimisationSection = Field(default_factory=OptimisationSection)
    benchmark: str = "ucrp"
    risk_free: float = Field(default=0.0, gt=-1, le=1)
    disclosure: Literal["per_party", "averaged"] = "per_party"

    @field_validator("baselines")
    @classmethod
    def _has_ucrp(cls, value: list[str]) -> list[str]:
        if "ucrp" not in value:
            raise ValueError(f"baselines {value} must include 'ucrp' (the reference of Fig. 3a)")
        names = [baseline_name(v) for v in value]  # refuses an unknown name, naming it
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"baseline {repeated[0]!r} is listed more than once")
        return value

    @model_validator(mode="after")
    def _benchmark_is_known(self) -> FederatedEvaluationSection:
        parse_benchmark(self.benchmark, self.baselines)
        return self


class TrackingSection(StrictModel):
    """``tensorboard``: log every round's scalars as TensorBoard events in each sub-run's ``tensorboard/``
    (:mod:`portfed.experiment.runs.tracking`; needs the ``tracking`` extra)."""

    tensorboard: bool = False


class FederatedConfig(AgentSectionModel, PrivacyModel):
    """N parties with private universes, data and generators, federated by each listed algorithm.

    ``torch_threads``: threads during the run; ``null`` (the default) resolves to ``min(2, CPUs)``
    (:meth:`threads`): the CNN engine's K-party products run faster on two threads (measured on the
    2-core machine, K = 50: 3.3k vs 5.2k party-steps/s, ``make bench``), and the recurrent EIIEs'
    fused kernels split the parties over them (their PyTorch operations stay on one thread,
    :meth:`BatchedEIIERecurrent.threads <portfed.agents.batched_recurrent.BatchedEIIERecurrent.threads>`).  ``fit_workers``:
    processes fitting the parties' generators (1 = in this process), each with
    ``max(1, threads // fit_workers)`` threads; the fits are seeded per party, so the parties are the
    same for any number of workers.  ``privacy``: party-level DP of what the parties share (:class:`PrivacyModel`).
    """

    experiment: Literal["federated"] = "federated"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    torch_threads: int | None = Field(default=None, ge=1)
    fit_workers: int = Field(default=1, ge=1)
    data: FederatedDataSection = Field(default_factory=FederatedDataSection)
    parties: PartiesSection = Field(default_factory=PartiesSection)
    agent: dict[str, Any] = Field(default_factory=dict)
    federation: FederationSection = Field(default_factory=FederationSection)
    diagnostics: DiagnosticsSection = Field(default_factory=DiagnosticsSection)
    collapse: CollapseSection = Field(default_factory=CollapseSection)
    evaluation: FederatedEvaluationSection = Field(default_factory=FederatedEvaluationSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)

    def agent_config(self) -> AgentConfig:
        """The ``agent`` section with ``federation.share`` (what the parties' federated vectors hold)."""
        return replace(super().agent_config(), share=self.federation.share)

    @field_validator("agent")
    @classmethod
    def _share_is_federation_setting(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "share" in value:
            raise ValueError(f"agent.share={value['share']!r}: what the server aggregates is set by "
                             "federation.share (actor_critic or actor)")
        return value

    @model_validator(mode="after")
    def _sections_agree(self) -> FederatedConfig:
        late = [t for t in self.diagnostics.interpolation_rounds if not 0 <= t < self.federation.rounds]
        if late:
            raise ValueError(
                f"diagnostics.interpolation_rounds {late} outside the rounds 0 … {self.federation.rounds - 1}"
            )
        if self.evaluation.composition_party >= self.parties.count:
            raise ValueError(f"evaluation.composition_party={self.evaluation.composition_party} is not a party "
                             f"(parties.count={self.parties.count})")
        per_round = self.federation.parties_per_round
        if per_round is not None and per_round > self.parties.count:
            raise ValueError(f"federation.parties_per_round={per_round} exceeds parties.count={self.parties.count}")
        features = self.agent_config().features
        if features != ("close",) and any(g is not None for g in self.parties.generators):
            raise ValueError(f"agent.features {list(features)} need high/low/open, which generators do not "
                             "produce (they model closes only); use features [close] with augmentation")
        return self

    def market_sections(self) -> list[FederatedDataSection]:
        """The markets: ``parties.markets``, or the ``data`` section alone."""
        return list(self.parties.markets) or [self.data]

    def party_sizes(self) -> list[tuple[int, int]]:
        """``(market index, universe size)`` of every party."""
        markets = self.market_sections()
        universes = self.parties.universes
        out = []
        for k in range(self.parties.count):
            m = k % len(markets)
            size = getattr(markets[m], "n_assets", None)
            if universes is not None:
                size = len(universes[k])
            out.append((m, self.parties.n_assets if size is None else size))
        return out

    def threads(self) -> int:
        """``torch_threads`` with ``null`` resolved: ``min(2, CPUs)`` (class doc)."""
        if self.torch_threads is not None:
            return self.torch_threads
        return min(2, os.cpu_count() or 1)
