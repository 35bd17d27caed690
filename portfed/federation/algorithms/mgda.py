"""FedMGDA+ and FedAvg-n: the server takes a common descent direction of the parties' updates (paper 002).

===============  ==================================  =====  ======
name             server step                          λ      σ
===============  ==================================  =====  ======
``fedmgda+``     paper 002 eq. 25 (min-norm, ε)       1      0
``fedavg-n``     mean of normalized updates (ε = 0)   1      0
===============  ==================================  =====  ======

Every party starts its local training from ``w̃`` (λ = 1) without a pull, and deploys ``w̃``.
Defaults: ε = 0.1 and η = 1 (the middle of paper 002's grid, η ∈ {0.5, 1, 1.5, 2}, decayed by β every
100 rounds: ``global_lr=Schedule(1.0, β, 100)``); with unit-length updates η is the length of the
server's step, so scale it to the size of one round of local training.  FedAvg-n (paper 002's
"FedAvg on normalized updates", its FedAvg baseline with the FedMGDA+ normalization):
``w̃ ← w̃ + η_g Σ_k λ_k Δ_k/‖Δ_k‖`` with ``Δ_k = w_k − w̃`` and ``λ`` the party weights (uniform by
default: the mean of the unit updates); it is FedMGDA+ with ε = 0 (paper 002 §5: "setting ε = 0
recovers FedAvg"), and its one knob is the global step ``global_lr`` = η_g, default 1 like FedMGDA+.
"""

from __future__ import annotations

from dataclasses import dataclass

from portfed.federation.algorithms.base import Factory, RoundAlgorithm, configure
from portfed.federation.schedule import Schedule, number
from portfed.federation.server import FedMGDARule


@dataclass(frozen=True)
class FedMGDA(RoundAlgorithm):
    """FedMGDA+ with fairness budget ``epsilon`` ε ∈ [0, 1] and global step ``global_lr`` η_t > 0."""

    name: str
    epsilon: float = 0.1
    global_lr: Schedule = Schedule(1.0)
    tunable: tuple[str, ...] = ("epsilon", "global_lr")

    def __post_init__(self) -> None:
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"{self.name}: epsilon must lie in [0, 1], got {self.epsilon!r}")
        if self.global_lr.initial <= 0:
            raise ValueError(f"{self.name}: global_lr must be > 0, got {self.global_lr.initial!r}")

    @property
    def server(self) -> FedMGDARule:
        return FedMGDARule(epsilon=self.epsilon, global_lr=self.global_lr)

    def start_weight(self, round_index: int) -> float:
        return 1.0

    def with_knobs(self, **knobs: object) -> FedMGDA:
        return configure(self, self.name, self.tunable, knobs, {"epsilon": number, "global_lr": Schedule.coerce})


FACTORIES: dict[str, Factory] = {
    "fedmgda+": FedMGDA("fedmgda+").with_knobs,
    "fedavg-n": FedMGDA("fedavg-n", epsilon=0.0, tunable=("global_lr",)).with_knobs,
}
