"""FedAdam, FedYogi and FedAdagrad: adaptive server optimisers (Reddi et al., "Adaptive Federated
Optimization", ICLR 2021, Alg. 2), as Flower's ``flwr.server.strategy.FedAdam`` / ``FedYogi`` /
``FedAdagrad`` compute them.

The parties train from the global model ``w̃_t`` (λ = 1, no pull) and send their models; the server
treats the change of the (party-weighted) mean as a pseudo-gradient and takes an adaptive step:

    Δ_t = Σ_k p_k w_k − w̃_t                       (Alg. 2 line 8; their sign: the step adds η m_t/…)
    m_t = β₁ m_{t−1} + (1 − β₁) Δ_t               (line 9)
    v_t = v_{t−1} + Δ_t²                           (FedAdagrad, line 10)
    v_t = v_{t−1} − (1 − β₂) Δ_t² sign(v_{t−1} − Δ_t²)   (FedYogi, line 11)
    v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²               (FedAdam, line 12)
    w̃_{t+1} = w̃_t + η m_t / (√v_t + τ)            (line 13)

elementwise.  As in Flower (and Alg. 2) there is no bias correction; ``m`` and ``v`` start at 0
(Alg. 2 allows ``v_{−1} >= τ²``; Flower's zeros are what its users get), and ``w̃_0`` is the weighted
mean of the parties' initial models.  The moments are the server's state: they live in the
federation's ``extras`` (``server_m``, ``server_v``), so a checkpoint holds them and a resumed run
continues with the same numbers.  A round without a usable message leaves ``w̃``, ``m`` and ``v`` as
they were; the parties deploy ``w̃``.

Defaults are Flower's, per strategy: FedAdam η = 0.1, β₁ = 0.9, β₂ = 0.99, τ = 1e-9; FedYogi
η = 0.01, β₁ = 0.9, β₂ = 0.99, τ = 1e-3; FedAdagrad η = 0.1, τ = 1e-9 and β₁ = 0 (Flower's FedAdagrad
passes β₁ = 0: no momentum; β₂ plays no part).  Flower's client step ``eta_l`` is the parties' own
learning rate here, not a server knob.  Knobs: ``eta``, ``beta_1``, ``tau`` and, for FedAdam and
FedYogi, ``beta_2``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from portfed.federation.algorithms.base import Factory, RoundAlgorithm, refuse_unknown, replaced
from portfed.federation.schedule import number
from portfed.federation.server import MeanRule, ServerContext, ServerOutput

MOMENTS = ("server_m", "server_v")


@dataclass(frozen=True)
class AdaptiveRule(ABC):
    """The adaptive server step (module docstring) with step ``eta`` η, ``beta_1`` β₁, ``beta_2`` β₂ and
    adaptivity ``tau`` τ; a subclass says how ``v`` follows ``Δ²``."""

    eta: float
    beta_1: float
    beta_2: float
    tau: float

    def __post_init__(self) -> None:
        if not np.isfinite(self.eta) or self.eta <= 0:
            raise ValueError(f"eta must be a finite number > 0, got {self.eta!r}")
        for knob in ("beta_1", "beta_2"):
            if not 0.0 <= getattr(self, knob) < 1.0:
                raise ValueError(f"{knob} must lie in [0, 1), got {getattr(self, knob)!r}")
        if not np.isfinite(self.tau) or self.tau <= 0:
            raise ValueError(f"tau must be a finite number > 0, got {self.tau!r}")

    @abstractmethod
    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        """``v_t`` from ``v_{t−1}`` and ``Δ_t²``."""

    def step(self, received: np.ndarray, context: ServerContext) -> ServerOutput:
        """``w̃_{t+1}`` and the new moments from the received models and ``m_{t−1}``, ``v_{t−1}``."""
        delta = MeanRule().aggregate(received, context.weights).center - context.global_model
        m = self.beta_1 * context.extras["server_m"] + (1.0 - self.beta_1) * delta
        v = self.second_moment(context.extras["server_v"], delta * delta)
        return ServerOutput(global_model=context.global_model + self.eta * m / (np.sqrt(v) + self.tau), centers=None,
                            iterations=0, converged=True, extras={"server_m": m, "server_v": v})

    def initial(self, models: np.ndarray, weights: np.ndarray | None) -> ServerOutput:
        """``w̃_0``: the (weighted) mean of ``W^0``."""
        return MeanRule().initial(models, weights)


@dataclass(frozen=True)
class AdamRule(AdaptiveRule):
    """FedAdam: ``v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²`` (Alg. 2 line 12)."""

    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        return self.beta_2 * v + (1.0 - self.beta_2) * squared


@dataclass(frozen=True)
class YogiRule(AdaptiveRule):
    """FedYogi: ``v_t = v_{t−1} − (1 − β₂) Δ_t² sign(v_{t−1} − Δ_t²)`` (Alg. 2 line 11)."""

    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        return v - (1.0 - self.beta_2) * squared * np.sign(v - squared)


@dataclass(frozen=True)
class AdagradRule(AdaptiveRule):
    """FedAdagrad: ``v_t = v_{t−1} + Δ_t²`` (Alg. 2 line 10)."""

    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        return v + squared


@dataclass(frozen=True)
class AdaptiveServer(RoundAlgorithm):
    """FedAvg's parties with an adaptive server ``server`` (module docstring); ``tunable``: its knobs."""

    name: str
    server: AdaptiveRule
    tunable: tuple[str, ...] = ("eta", "beta_1", "beta_2", "tau")

    def start_weight(self, round_index: int) -> float:
        return 1.0

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]:
        """``m = v = 0``."""
        return {name: np.zeros(models.shape[1]) for name in MOMENTS}

    def with_knobs(self, **knobs: object) -> AdaptiveServer:
        refuse_unknown(self.name, self.tunable, knobs)
        try:
            values = {knob: number(value, knob) for knob, value in knobs.items()}
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        return replaced(self, self.name, server=replaced(self.server, self.name, **values))


FACTORIES: dict[str, Factory] = {
    "fedadam": AdaptiveServer("fedadam", AdamRule(eta=0.1, beta_1=0.9, beta_2=0.99, tau=1e-9)).with_knobs,
    "fedyogi": AdaptiveServer("fedyogi", YogiRule(eta=0.01, beta_1=0.9, beta_2=0.99, tau=1e-3)).with_knobs,
    "fedadagrad": AdaptiveServer("fedadagrad", AdagradRule(eta=0.1, beta_1=0.0, beta_2=0.0, tau=1e-9),
                                 tunable=("eta", "beta_1", "tau")).with_knobs,
}
