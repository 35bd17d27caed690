"""FedAMP and HeurFedAMP: attentive message passing, one cloud model per party (paper 004 §4, §6).

===============  ==================================  =====  ======  =================================
name             server step                          λ      σ       local term
===============  ==================================  =====  ======  =================================
``fedamp``       cloud models u_k (004 eq. 5, 7)      0      0       λ/α_t ‖w − u_k‖²/2 (eq. 6)
``heurfedamp``   cloud models u_k (004 eq. 8)         0      0       same
===============  ==================================  =====  ======  =================================

Each party continues from its own model (λ = 0) with the proximal term towards its cloud model
``u_k`` (paper 004 eq. 6) and deploys its own model.  Defaults: FedAMP λ = 1 (paper 004 App. C);
σ = 100 (its MNIST value); α_k = 1 (paper 004 starts at 1e4 with weights far apart; α must keep
``α Σ_j A' <= 1``, and A'(0) = 1/σ, so α = 1, σ = 100 is safe for up to 101 parties even when all
models coincide), decayed like the paper with ``fedamp_alpha=Schedule(α_0, 0.1, 30)``.  HeurFedAMP:
σ = 10 (its grid is {1, …, 100}) and ξ_ii = 0.5 (paper 004 used 1/(N_i + 1), N_i the number of
same-distribution clients, unknown here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portfed.federation.algorithms.base import Factory, RoundAlgorithm, configure
from portfed.federation.fedamp import fedamp_weights, heurfedamp_weights
from portfed.federation.local_solve import LocalSolvePlan, initial_point
from portfed.federation.schedule import Schedule, number
from portfed.federation.server import FedAMPRule, HeurFedAMPRule

_KNOBS = ("fedamp_lambda", "fedamp_alpha", "attention_scale")
_COERCE = {"fedamp_lambda": number, "fedamp_alpha": Schedule.coerce, "attention_scale": number,
           "self_weight": number}


@dataclass(frozen=True)
class FedAMP(RoundAlgorithm):
    """FedAMP (paper 004 eq. 5–7): ``fedamp_lambda`` λ, step schedule ``fedamp_alpha`` α_t, scale
    ``attention_scale`` σ of ``A(x) = 1 − e^{−x/σ}``."""

    name: str = "fedamp"
    fedamp_lambda: float = 1.0
    fedamp_alpha: Schedule = Schedule(1.0)
    attention_scale: float = 100.0

    def __post_init__(self) -> None:
        if self.fedamp_alpha.initial <= 0:
            raise ValueError(f"{self.name}: fedamp_alpha must be > 0, got {self.fedamp_alpha.initial!r}")
        for knob in ("fedamp_lambda", "attention_scale"):
            value = getattr(self, knob)
            if not np.isfinite(value) or value <= 0:
                raise ValueError(f"{self.name}: {knob} must be a finite number > 0, got {value!r}")

    @property
    def server(self) -> FedAMPRule | HeurFedAMPRule:
        return FedAMPRule(alpha=self.fedamp_alpha, attention_scale=self.attention_scale)

    def start_weight(self, round_index: int) -> float:
        return 0.0

    def local_solve(self, w: np.ndarray, reference: np.ndarray, round_index: int) -> LocalSolvePlan:
        """Continue from ``w_k`` with ``λ/(2α_t) ‖w − u_k‖²`` in the loss (paper 004 eq. 6)."""
        return LocalSolvePlan(start=initial_point(w, reference, 0.0), target=None, sigma=0.0, prox_center=reference,
                              prox_coef=self.fedamp_lambda / self.fedamp_alpha.at(round_index))

    def message_weights(self, models: np.ndarray, rounds: int) -> np.ndarray:
        """ξ of ``models`` (paper 004 eq. 5, with α of the round after the last, ``rounds``)."""
        return fedamp_weights(models, alpha=self.fedamp_alpha.at(rounds), sigma=self.attention_scale)

    def with_knobs(self, **knobs: object) -> FedAMP:
        return configure(self, self.name, _KNOBS, knobs, _COERCE)


@dataclass(frozen=True)
class HeurFedAMP(FedAMP):
    """HeurFedAMP (paper 004 eq. 8): FedAMP's local term, cosine-softmax messages with self-weight
    ``self_weight`` ξ_ii and scale ``attention_scale``."""

    name: str = "heurfedamp"
    attention_scale: float = 10.0
    self_weight: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.self_weight <= 1.0:
            raise ValueError(f"{self.name}: self_weight must lie in [0, 1], got {self.self_weight!r}")

    @property
    def server(self) -> HeurFedAMPRule:
        return HeurFedAMPRule(attention_scale=self.attention_scale, self_weight=self.self_weight)

    def message_weights(self, models: np.ndarray, rounds: int) -> np.ndarray:
        """ξ of ``models`` (paper 004 eq. 8)."""
        return heurfedamp_weights(models, sigma=self.attention_scale, self_weight=self.self_weight)

    def with_knobs(self, **knobs: object) -> HeurFedAMP:
        return configure(self, self.name, (*_KNOBS, "self_weight"), knobs, _COERCE)


FACTORIES: dict[str, Factory] = {"fedamp": FedAMP().with_knobs, "heurfedamp": HeurFedAMP().with_knobs}
