"""The Fed+ family: every algorithm that is a setting of the Fed+ knobs (paper 003 Table 1, Alg. 1).

Knobs of the Fed+ Local-Solve (paper 003 Alg. 1, DESIGN §5) and of the server step:

- ``penalty`` Ψ with threshold ρ: the personalization ``θ_k = prox_ρ(w_k − w̃)`` (paper 003 eq. 11)
  and, for the Fed+ variants, the smoothed aggregate (paper 000 eq. 5), solved by ``solver``
  (``"fast"``: exact sort / IRLS, the default; ``"eq34"``: the iteration of paper 000 eq. 34);
- ``lam`` λ: the local initialization ``w ← (1 − λ) w_k + λ w̃`` (paper 000 Alg. 1 line 10);
- ``lam_t`` λ_k^t (Fed+ variants, optional): a constant weight of the server's model in the
  personalization, ``z_k = R(w̃, w_k) = (1 − λ_k^t) w_k + λ_k^t w̃`` for every variant (paper 000 §5.2,
  where each variant derives λ_k^t from ρ, and §8.2: "we keep λ_k^t … constant for all t … Results are for
  the best fixed λ_k^t").  Unset, ``z_k`` follows ρ's rule; set, it replaces that rule and ρ only shapes
  the aggregate 𝒜;
- ``sigma`` σ_t: the pull towards ``z_k = w̃ + θ_k`` with ``κ = 1/(1 + η σ_t)``; σ = 0 means no mixing;
- ``server``: the aggregate 𝒜 that turns the received models into ``w̃``
  (:mod:`portfed.federation.server`'s rules; ``tol``, ``max_iter`` and ``solver`` are its knobs).

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
===============  ==============================  =====  ======  ==============================

Defaults.  σ = 0.01 and (for ``fedprox``) μ = σ = 0.01 are the values of the portfolio experiment
(paper 000 §8.2, "α = 0.01") and of paper 004's FedProx tuning.  λ = 0 is the Fed+ default of paper
003 Alg. 1; the portfolio experiment used λ = 0.001 (pass ``lam=0.001``).  ρ = 0.1 for all Fed+
variants is paper 003 §4.4.1's stated default ("δ to 0.1 unless mentioned otherwise", also its
FedGeoMed+/FedCoMed+ setting); its FedAvg+ experiments used 0.001 and paper 000 §8.1 used
ρ = 1000, 10, 10 — a wide range, so tune it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portfed.federation.algorithms.base import Factory, RoundAlgorithm, refuse_unknown, replaced
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.local_solve import LocalSolvePlan, initial_point, personal_target
from portfed.federation.prox import Penalty
from portfed.federation.schedule import Schedule, number
from portfed.federation.server import (
    CoordinateMedianRule,
    GeometricMedianRule,
    MeanRule,
    ServerRule,
    SmoothedRule,
)

DEFAULT_RHO = 0.1
DEFAULT_SIGMA = 0.01
_NONE = Penalty("none", 0.0)
_ZERO, _ONE = Schedule(0.0), Schedule(1.0)
_SCHEDULES = ("lam", "lam_t", "sigma")
_RULE_KNOBS = ("tol", "max_iter", "solver")


@dataclass(frozen=True)
class FedPlus(RoundAlgorithm):
    """One setting of the Fed+ knobs (module docstring); ``tunable`` lists the knobs
    :func:`~portfed.federation.algorithms.make_algorithm` lets a caller override (``rho`` stands for the
    threshold of a single-kind ``penalty``), ``needs_sigma`` whether σ must stay > 0."""

    name: str
    server: ServerRule
    penalty: Penalty | LayerwisePenalty
    lam: Schedule
    sigma: Schedule
    tunable: tuple[str, ...] = ()
    lam_t: Schedule | None = None
    needs_sigma: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.penalty, Penalty | LayerwisePenalty):
            raise ValueError(f"{self.name}: penalty must be a Penalty or LayerwisePenalty, got {self.penalty!r}")
        if not 0.0 <= self.lam.initial <= 1.0:
            raise ValueError(f"{self.name}: lam must lie in [0, 1], got {self.lam.initial!r}")
        if self.sigma.initial < 0:
            raise ValueError(f"{self.name}: sigma must be >= 0, got {self.sigma.initial!r}")
        if self.lam_t is not None and not 0.0 <= self.lam_t.initial <= 1.0:
            raise ValueError(f"{self.name}: lam_t must lie in [0, 1], got {self.lam_t.initial!r}")
        if self.needs_sigma and self.sigma.initial <= 0:
            raise ValueError(f"{self.name} needs sigma > 0 (paper 003 Table 1), got {self.sigma.initial!r}")

    def start_weight(self, round_index: int) -> float:
        return self.lam.at(round_index)

    def local_solve(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> LocalSolvePlan:
        """Start from ``(1 − λ_t) w_k + λ_t r``, pulled towards ``z_k`` (paper 003 eq. 11) with ``σ_t`` when > 0."""
        sigma = self.sigma.at(round_index)
        target = personal_target(w, reference, self.penalty, self.lam_t, round_index) if sigma > 0 else None
        return LocalSolvePlan(start=initial_point(w, reference, self.lam.at(round_index)), target=target,
                              sigma=sigma if sigma > 0 else 0.0, prox_center=None, prox_coef=0.0)

    def with_knobs(self, **knobs: object) -> FedPlus:
        """This setting with ``knobs`` overridden: schedules (a number, a :class:`Schedule` or a mapping),
        ``rho`` (the threshold of the single-kind penalty), ``penalty``, and the server's ``tol``,
        ``max_iter`` and ``solver``."""
        refuse_unknown(self.name, self.tunable, knobs)
        fields: dict[str, object] = {knob: Schedule.coerce(value, knob)  # type: ignore[arg-type]
                                     for knob, value in knobs.items() if knob in _SCHEDULES}
        rule: dict[str, object] = {knob: knobs[knob] for knob in _RULE_KNOBS if knob in knobs}
        if "tol" in rule:
            rule["tol"] = number(rule["tol"], "tol")
        if "rho" in knobs:
            fields["penalty"] = Penalty(self.penalty.kind, knobs["rho"])  # type: ignore[union-attr, arg-type]
        if "penalty" in knobs:
            fields["penalty"] = knobs["penalty"]
        if "penalty" in fields:  # only the Fed+ variants take rho / penalty: their server is the smoothed one
            rule["penalty"] = fields["penalty"]
        if rule:
            fields["server"] = replaced(self.server, self.name, **rule)
        return replaced(self, self.name, **fields)


def _baseline(name: str, server: ServerRule, lam: Schedule, **knobs: object) -> FedPlus:
    return FedPlus(**{"name": name, "server": server, "penalty": _NONE, "lam": lam, "sigma": _ZERO,  # type: ignore[arg-type]
                      **knobs})


def _fedplus(name: str, penalty: Penalty | LayerwisePenalty, tunable: tuple[str, ...]) -> FedPlus:
    return FedPlus(name=name, server=SmoothedRule(penalty=penalty, tol=1e-10, max_iter=1000), penalty=penalty,
                   lam=_ZERO, sigma=Schedule(DEFAULT_SIGMA), tunable=tunable, needs_sigma=True)


_VARIANT_KNOBS = ("lam", "lam_t", "sigma", "rho", "tol", "max_iter", "solver")
_SETTINGS: tuple[FedPlus, ...] = (
    _baseline("local", MeanRule(), _ZERO),
    _baseline("fedavg", MeanRule(), _ONE),
    _baseline("fedprox", MeanRule(), _ONE, sigma=Schedule(DEFAULT_SIGMA), tunable=("sigma",), needs_sigma=True),
    _baseline("rfa", GeometricMedianRule(tol=1e-10, max_iter=1000), _ONE, tunable=("tol", "max_iter")),
    _baseline("comed", CoordinateMedianRule(), _ONE),
    _fedplus("fedavg+", Penalty("l2sq", DEFAULT_RHO), _VARIANT_KNOBS),
    _fedplus("fedgeomed+", Penalty("l2", DEFAULT_RHO), _VARIANT_KNOBS),
    _fedplus("fedcomed+", Penalty("l1", DEFAULT_RHO), _VARIANT_KNOBS),
)
# A template: make_algorithm("hybrid+", penalty=LayerwisePenalty(...)) supplies the layers.
_HYBRID = _fedplus("hybrid+", LayerwisePenalty({}, {}, Penalty("l2sq", DEFAULT_RHO)),
                   ("lam", "sigma", "penalty", "tol", "max_iter", "solver"))


def hybrid(**knobs: object) -> FedPlus:
    """``hybrid+``: the Fed+ variants per layer (paper 000 eq. 14); ``penalty=LayerwisePenalty(...)`` is required."""
    algorithm = _HYBRID.with_knobs(**knobs)
    if not isinstance(knobs.get("penalty"), LayerwisePenalty):
        raise ValueError("hybrid+ needs penalty=LayerwisePenalty(layers=..., penalties=..., default=...)")
    return algorithm


FACTORIES: dict[str, Factory] = {setting.name: setting.with_knobs for setting in _SETTINGS} | {"hybrid+": hybrid}
