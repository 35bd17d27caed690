"""The algorithm registry: every algorithm is one configuration of the same knobs (paper 003 Table 1).

Knobs of the Fed+ Local-Solve (paper 003 Alg. 1, DESIGN §5) and of the server step:

- ``penalty`` Ψ with threshold ρ: the personalization ``θ_k = prox_ρ(w_k − w̃)`` (paper 003 eq. 11)
  and, for ``aggregator="smoothed"``, the aggregate (paper 000 eq. 5), solved by ``solver``
  (``"fast"``: exact sort / IRLS, the default; ``"eq34"``: the iteration of paper 000 eq. 34);
- ``lam`` λ: the local initialization ``w ← (1 − λ) w_k + λ w̃`` (paper 000 Alg. 1 line 10);
- ``lam_t`` λ_k^t (Fed+ variants, optional): a constant weight of the server's model in the
  personalization, ``z_k = R(w̃, w_k) = (1 − λ_k^t) w_k + λ_k^t w̃`` for every variant (paper 000 §5.2,
  where each variant derives λ_k^t from ρ, and §8.2: "we keep λ_k^t … constant for all t … Results are for
  the best fixed λ_k^t").  Unset, ``z_k`` follows ρ's rule below; set, it replaces that rule and ρ
  only shapes the aggregate 𝒜;
- ``sigma`` σ_t: the pull towards ``z_k = w̃ + θ_k`` with ``κ = 1/(1 + η σ_t)``; σ = 0 means no mixing;
- ``server``/``aggregator``: how the server turns the received models into ``w̃`` (and, for
  FedAMP, the personalized centres ``u_k``); ``aggregator`` is one of
  :data:`~portfed.federation.aggregate.AGGREGATORS` (``mean``, ``geometric_median``,
  ``coordinate_median``, ``smoothed``), the server rule is :func:`portfed.federation.server.server_rule`.

===============  ==============================  =====  ======  ==============================
name             aggregate 𝒜                     λ      σ       Ψ (θ_k)
===============  ==============================  =====  ======  ==============================
``local``        none (mean kept for reports)    0      0       unused
``fedavg``       mean                            1      0       unused
``fedprox``      mean                            1      > 0     ``"none"`` (θ = 0, z = w̃)
``rfa``          geometric median                1      0       unused
``comed``        coordinate-wise median          1      0       unused
``fedavg+``      smoothed, ``"l2sq"`` (= mean)   0      > 0     ``"l2sq"``: x/(1+ρ)
``fedgeomed+``   smoothed geometric median       0      > 0     ``"l2"``: block soft-threshold
``fedcomed+``    smoothed coordinate median      0      > 0     ``"l1"``: soft-threshold
``hybrid+``      smoothed, per layer (eq. 14)    0      > 0     per layer
``fedmgda+``     server step of paper 002 eq. 25 1      0       unused
``fedavg-n``     mean of normalized updates      1      0       unused
``fedamp``       cloud models u_k (004 eq. 5)    0      0       local prox λ/α_k ‖w − u_k‖²/2
``heurfedamp``   cloud models u_k (004 eq. 8)    0      0       same
``scaffold``     mean, control variates          1      0       unused (local rule ``scaffold``)
``ditto``        mean; personal v_k              1      0       unused (personal prox, λ)
``pfedme``       (1 − β) w̃ + β mean              1      0       unused (Moreau envelope, λ)
``perfedavg``    mean (first-order MAML steps)   1      0       unused (adapt α before deploying)
``apfl``         mean; v_k, α_k                  1      0       unused (α v_k + (1 − α) w̃)
``fedavg-ft``    mean                            1      0       unused (fine-tune before deploying)
``fedprox-ft``   mean                            1      > 0     ``"none"`` (as fedprox; fine-tune)
===============  ==============================  =====  ======  ==============================

The last seven rows are the papers' personalised baselines (paper 003 Table 2, paper 004 Table 3):
``personal`` (:class:`~portfed.federation.personalization.Personalization`) names the kind and its
knobs; :mod:`~portfed.federation.personal_rounds` runs them in the round loop and
:mod:`~portfed.federation.local_rules` holds their local iterations, each with its paper's equations.
Defaults: Ditto λ = 1; pFedMe λ = 15, K = 5, ν = 0.01, β = 1 (pFedMe's MNIST setting is λ = 15,
K = 5, β = 1); Per-FedAvg α = 0.01 with one adaptation step; APFL α = 0.25 fixed (``apfl_alpha_lr``
> 0 makes it adaptive); FT: fine-tuning takes as many steps as a config gives (default 10).

Defaults.  σ = 0.01 and (for ``fedprox``) μ = σ = 0.01 are the values of the portfolio experiment
(paper 000 §8.2, "α = 0.01") and of paper 004's FedProx tuning.  λ = 0 is the Fed+ default of paper
003 Alg. 1; the portfolio experiment used λ = 0.001 (pass ``lam=0.001``).  ρ = 0.1 for all Fed+
variants is paper 003 §4.4.1's stated default ("δ to 0.1 unless mentioned otherwise", also its
FedGeoMed+/FedCoMed+ setting); its FedAvg+ experiments used 0.001 and paper 000 §8.1 used
ρ = 1000, 10, 10 — a wide range, so tune it.  FedMGDA+: ε = 0.1 and η = 1 (the middle of paper 002's
grid, η ∈ {0.5, 1, 1.5, 2}, decayed by β every 100 rounds: ``global_lr=Schedule(1.0, β, 100)``);
with unit-length updates η is the length of the server's step, so scale it to the size of one
round of local training.  FedAvg-n (paper 002's "FedAvg on normalized updates", its FedAvg baseline
with the FedMGDA+ normalization): ``w̃ ← w̃ + η_g Σ_k λ_k Δ_k/‖Δ_k‖`` with ``Δ_k = w_k − w̃`` and ``λ``
the party weights (uniform by default: the mean of the unit updates); it is FedMGDA+ with ε = 0
(paper 002 §5: "setting ε = 0 recovers FedAvg"), and its one knob is the global step
``global_lr`` = η_g, default 1 like FedMGDA+ (the length of the server's step).  FedAMP: λ = 1 (paper 004 App. C); σ = 100 (its MNIST value); α_k = 1
(paper 004 starts at 1e4 with weights far apart; α must keep ``α Σ_j A' <= 1``, and A'(0) = 1/σ, so
α = 1, σ = 100 is safe for up to 101 parties even when all models coincide), decayed like the paper
with ``fedamp_alpha=Schedule(α_0, 0.1, 30)``.  HeurFedAMP: σ = 10 (its grid is {1, …, 100}) and
ξ_ii = 0.5 (paper 004 used 1/(N_i + 1), N_i the number of same-distribution clients, unknown here).

Schedules: every ``Schedule`` knob takes the value ``initial · decay^{⌊t/every⌋}`` in round t (0-based).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

import numpy as np

from portfed.federation.aggregate import SMOOTHED_SOLVERS, check_aggregator
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.personalization import PERSONAL_KNOBS, Personalization
from portfed.federation.prox import Penalty

ServerKind = Literal["aggregate", "fedmgda", "fedamp", "heurfedamp"]
SERVER_KINDS: tuple[str, ...] = get_args(ServerKind)
DEFAULT_RHO = 0.1
DEFAULT_SIGMA = 0.01


@dataclass(frozen=True)
class Schedule:
    """A per-round value ``initial · decay^{⌊t / every⌋}`` (constant when ``decay = 1``)."""

    initial: float
    decay: float = 1.0
    every: int = 1

    def __post_init__(self) -> None:
        if not np.isfinite(self.initial):
            raise ValueError(f"schedule initial value must be finite, got {self.initial!r}")
        if not np.isfinite(self.decay) or not 0 < self.decay <= 1:
            raise ValueError(f"schedule decay must lie in (0, 1], got {self.decay!r}")
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"schedule 'every' must be a positive integer, got {self.every!r}")
        object.__setattr__(self, "initial", float(self.initial))
        object.__setattr__(self, "decay", float(self.decay))

    def at(self, round_index: int) -> float:
        if round_index < 0:
            raise ValueError(f"round_index must be >= 0, got {round_index!r}")
        return self.initial * self.decay ** (round_index // self.every)

    @classmethod
    def coerce(cls, value: float | Schedule | Mapping[str, float], name: str) -> Schedule:
        """A number (constant), a :class:`Schedule`, or a mapping with keys ``initial, decay, every``."""
        if isinstance(value, Schedule):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"initial", "decay", "every"})
            if unknown:
                raise ValueError(f"{name}: unknown schedule keys {unknown}; valid: initial, decay, every")
            return cls(**value)
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
            raise ValueError(f"{name} must be a number, a Schedule or a mapping, got {value!r}")
        return cls(float(value))


@dataclass(frozen=True)
class AlgorithmSpec:
    """One federated algorithm as a setting of the shared knobs (see the module docstring).

    ``tunable`` lists the knobs :func:`make_algorithm` lets a caller override (``rho`` stands for the
    threshold of a single-kind ``penalty``).
    """

    name: str
    server: str
    aggregator: str | None
    penalty: Penalty | LayerwisePenalty
    lam: Schedule
    sigma: Schedule
    tunable: tuple[str, ...]
    tol: float = 1e-10
    max_iter: int = 1000
    solver: str = "fast"
    epsilon: float = 0.1
    global_lr: Schedule = Schedule(1.0)
    fedamp_lambda: float = 1.0
    fedamp_alpha: Schedule = Schedule(1.0)
    attention_scale: float = 100.0
    self_weight: float = 0.5
    personal: Personalization = Personalization()
    lam_t: Schedule | None = None

    def __post_init__(self) -> None:
        if self.server not in SERVER_KINDS:
            raise ValueError(f"{self.name}: unknown server kind {self.server!r}; valid: {', '.join(SERVER_KINDS)}")
        if self.aggregator is not None:
            try:
                check_aggregator(self.aggregator)
            except ValueError as exc:
                raise ValueError(f"{self.name}: {exc}") from None
        if self.solver not in SMOOTHED_SOLVERS:
            raise ValueError(f"{self.name}: unknown solver {self.solver!r}; valid: {', '.join(SMOOTHED_SOLVERS)}")
        if not isinstance(self.penalty, Penalty | LayerwisePenalty):
            raise ValueError(f"{self.name}: penalty must be a Penalty or LayerwisePenalty, got {self.penalty!r}")
        if self.aggregator == "smoothed" and isinstance(self.penalty, Penalty):
            if self.penalty.kind in ("l1", "l2") and self.penalty.rho <= 0:
                raise ValueError(f"{self.name}: the smoothed aggregate needs rho > 0, got {self.penalty.rho!r}")
        if not 0.0 <= self.lam.initial <= 1.0:
            raise ValueError(f"{self.name}: lam must lie in [0, 1], got {self.lam.initial!r}")
        if self.sigma.initial < 0:
            raise ValueError(f"{self.name}: sigma must be >= 0, got {self.sigma.initial!r}")
        if self.lam_t is not None and not 0.0 <= self.lam_t.initial <= 1.0:
            raise ValueError(f"{self.name}: lam_t must lie in [0, 1], got {self.lam_t.initial!r}")
        if not np.isfinite(self.tol) or self.tol < 0:
            raise ValueError(f"{self.name}: tol must be a finite number >= 0, got {self.tol!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise ValueError(f"{self.name}: max_iter must be a positive integer, got {self.max_iter!r}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"{self.name}: epsilon must lie in [0, 1], got {self.epsilon!r}")
        for knob in ("global_lr", "fedamp_alpha"):
            if getattr(self, knob).initial <= 0:
                raise ValueError(f"{self.name}: {knob} must be > 0, got {getattr(self, knob).initial!r}")
        for knob in ("fedamp_lambda", "attention_scale"):
            value = getattr(self, knob)
            if not np.isfinite(value) or value <= 0:
                raise ValueError(f"{self.name}: {knob} must be a finite number > 0, got {value!r}")
        if not 0.0 <= self.self_weight <= 1.0:
            raise ValueError(f"{self.name}: self_weight must lie in [0, 1], got {self.self_weight!r}")
        if not isinstance(self.personal, Personalization):
            raise ValueError(f"{self.name}: personal must be a Personalization, got {self.personal!r}")

    @property
    def personalized_centers(self) -> bool:
        """Whether the server returns one centre ``u_k`` per party (FedAMP, HeurFedAMP)."""
        return self.server in ("fedamp", "heurfedamp")


_NONE = Penalty("none", 0.0)
_ZERO, _ONE = Schedule(0.0), Schedule(1.0)
_FEDPLUS_KNOBS = ("lam", "lam_t", "sigma", "rho", "tol", "max_iter", "solver")
_FEDAMP_KNOBS = ("fedamp_lambda", "fedamp_alpha", "attention_scale")


def _personalised(name: str, tunable: tuple[str, ...], **knobs: object) -> AlgorithmSpec:
    """A personalised baseline on FedAvg's server (:mod:`~portfed.federation.personal_rounds`)."""
    kind = {"fedavg-ft": "finetune", "fedprox-ft": "finetune"}.get(name, name)
    spec = _baseline(name, "mean", _ONE)
    sigma = Schedule(DEFAULT_SIGMA) if name == "fedprox-ft" else _ZERO
    return dataclasses.replace(spec, sigma=sigma, tunable=tunable, personal=Personalization(kind, **knobs))


def _baseline(name: str, aggregator: str | None, lam: Schedule, **knobs: object) -> AlgorithmSpec:
    return AlgorithmSpec(name=name, server="aggregate", aggregator=aggregator, penalty=_NONE, lam=lam, sigma=_ZERO,
                         tunable=(), **knobs)


def _fedplus(name: str, penalty: Penalty | LayerwisePenalty, tunable: tuple[str, ...]) -> AlgorithmSpec:
    return AlgorithmSpec(name=name, server="aggregate", aggregator="smoothed", penalty=penalty, lam=_ZERO,
                         sigma=Schedule(DEFAULT_SIGMA), tunable=tunable)


ALGORITHMS: Mapping[str, AlgorithmSpec] = MappingProxyType({
    "local": _baseline("local", None, _ZERO),
    "fedavg": _baseline("fedavg", "mean", _ONE),
    "fedprox": dataclasses.replace(_baseline("fedprox", "mean", _ONE), sigma=Schedule(DEFAULT_SIGMA),
                                   tunable=("sigma",)),
    "rfa": dataclasses.replace(_baseline("rfa", "geometric_median", _ONE), tunable=("tol", "max_iter")),
    "comed": _baseline("comed", "coordinate_median", _ONE),
    "fedavg+": _fedplus("fedavg+", Penalty("l2sq", DEFAULT_RHO), _FEDPLUS_KNOBS),
    "fedgeomed+": _fedplus("fedgeomed+", Penalty("l2", DEFAULT_RHO), _FEDPLUS_KNOBS),
    "fedcomed+": _fedplus("fedcomed+", Penalty("l1", DEFAULT_RHO), _FEDPLUS_KNOBS),
    # A template: make_algorithm("hybrid+", penalty=LayerwisePenalty(...)) supplies the layers.
    "hybrid+": _fedplus("hybrid+", LayerwisePenalty({}, {}, Penalty("l2sq", DEFAULT_RHO)),
                        ("lam", "sigma", "penalty", "tol", "max_iter", "solver")),
    "fedmgda+": AlgorithmSpec(name="fedmgda+", server="fedmgda", aggregator=None, penalty=_NONE, lam=_ONE,
                              sigma=_ZERO, tunable=("epsilon", "global_lr")),
    "fedavg-n": AlgorithmSpec(name="fedavg-n", server="fedmgda", aggregator=None, penalty=_NONE, lam=_ONE,
                              sigma=_ZERO, epsilon=0.0, tunable=("global_lr",)),
    "fedamp": AlgorithmSpec(name="fedamp", server="fedamp", aggregator=None, penalty=_NONE, lam=_ZERO,
                            sigma=_ZERO, tunable=_FEDAMP_KNOBS),
    "heurfedamp": AlgorithmSpec(name="heurfedamp", server="heurfedamp", aggregator=None, penalty=_NONE,
                                lam=_ZERO, sigma=_ZERO, attention_scale=10.0,
                                tunable=(*_FEDAMP_KNOBS, "self_weight")),
    "scaffold": _personalised("scaffold", ()),
    "ditto": _personalised("ditto", ("personal_lambda",)),
    "pfedme": _personalised("pfedme", ("personal_lambda", "inner_steps", "inner_lr", "pfedme_beta"),
                            personal_lambda=15.0),
    "perfedavg": _personalised("perfedavg", ("inner_lr", "finetune_steps"), finetune_steps=1),
    "apfl": _personalised("apfl", ("apfl_alpha", "apfl_alpha_lr")),
    "fedavg-ft": _personalised("fedavg-ft", ("finetune_steps",), finetune_steps=10),
    "fedprox-ft": _personalised("fedprox-ft", ("sigma", "finetune_steps"), finetune_steps=10),
})
_NEEDS_SIGMA = ("fedprox", "fedavg+", "fedgeomed+", "fedcomed+", "hybrid+", "fedprox-ft")
_SCHEDULES = ("lam", "lam_t", "sigma", "global_lr", "fedamp_alpha")


def make_algorithm(name: str, **overrides: object) -> AlgorithmSpec:
    """The registered algorithm ``name`` with some knobs overridden, e.g. ``make_algorithm("fedavg+",
    lam=0.001, sigma=Schedule(0.01, 0.5, 100), rho=1.0)``.

    Schedule knobs (``lam``, ``lam_t``, ``sigma``, ``global_lr``, ``fedamp_alpha``) take a number, a
    :class:`Schedule` or a mapping ``{initial, decay, every}``; ``rho`` replaces the threshold of the
    algorithm's single-kind penalty; ``hybrid+`` requires ``penalty=LayerwisePenalty(...)``; ``solver``
    (Fed+ rows) is ``"fast"`` or ``"eq34"`` (:func:`~portfed.federation.aggregate.smoothed_aggregate`);
    the personalised baselines' knobs are those of :class:`~portfed.federation.personalization.Personalization`.

    Raises:
        ValueError: unknown name, a knob the algorithm does not take, or a bad value.
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid algorithms: {', '.join(ALGORITHMS)}")
    base = ALGORITHMS[name]
    refused = sorted(set(overrides) - set(base.tunable))
    if refused:
        valid = ", ".join(base.tunable) if base.tunable else "none"
        raise ValueError(f"algorithm {name!r} takes no parameter(s) {refused}; tunable parameters: {valid}")
    if name == "hybrid+" and not isinstance(overrides.get("penalty"), LayerwisePenalty):
        raise ValueError("hybrid+ needs penalty=LayerwisePenalty(layers=..., penalties=..., default=...)")
    fields: dict[str, object] = {}
    personal = {knob: value for knob, value in overrides.items() if knob in PERSONAL_KNOBS}
    if personal:
        try:
            fields["personal"] = dataclasses.replace(base.personal, **personal)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    for knob, value in overrides.items():
        if knob in PERSONAL_KNOBS:
            continue
        if knob in _SCHEDULES:
            fields[knob] = Schedule.coerce(value, knob)  # type: ignore[arg-type]
        elif knob == "rho":
            fields["penalty"] = Penalty(base.penalty.kind, value)  # type: ignore[union-attr, arg-type]
        elif knob in ("max_iter", "penalty", "solver"):
            fields[knob] = value
        elif isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
            raise ValueError(f"{knob} must be a number, got {value!r}")
        else:
            fields[knob] = float(value)
    spec = dataclasses.replace(base, **fields)
    if name in _NEEDS_SIGMA and spec.sigma.initial <= 0:
        raise ValueError(f"{name} needs sigma > 0 (paper 003 Table 1), got {spec.sigma.initial!r}")
    return spec
