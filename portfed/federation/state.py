"""The federation between rounds: the party models, the server's models and the sampling stream.

:class:`FederationState` is everything the next round depends on; its ``state_dict()`` is plain
numpy arrays and Python values, so a run saved between rounds resumes identically.  The models a
party is sent and deploys are functions of this state and the algorithm:

* the reference ``r_k`` the server sent party k: its FedAMP cloud model ``u_k`` (paper 004 eq. 5),
  else the global model ``w̃`` (:meth:`FederationState.references`);
* the deployed model (:func:`deployed_models`, the algorithm's ``deployed``): by default
  ``ŵ_k = (1 − λ_T) w_k + λ_T r_k`` — the model party k would start its next local training from once
  the server's last message has reached it (paper 003 Alg. 1 line 18).  FedAvg, FedProx, RFA,
  coordinate median and FedMGDA+ (λ = 1) deploy ``w̃``; local training, FedAMP and the Fed+ variants
  with λ = 0 deploy the party's own ``w_k``; a personalised baseline its personal model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from portfed.federation.server import ServerRule, initial_server_output
from portfed.validation import check_seed


class StartingAlgorithm(Protocol):
    """What :meth:`FederationState.initial` needs of an algorithm (:class:`portfed.federation.algorithms.Algorithm`
    has it): its name, its server rule and its round-0 extras."""

    name: str

    @property
    def server(self) -> ServerRule: ...

    def initial_extras(self, models: np.ndarray, global_model: np.ndarray) -> dict[str, np.ndarray]: ...


@dataclass
class FederationState:
    """The federation between rounds: everything the next round depends on.

    ``global_model`` (``(d,)``), ``party_models`` (``(N, d)``), ``centers`` (``(N, d)`` FedAMP cloud
    models, else ``None``), ``round_index`` (rounds completed), the sampling generator ``rng``, and the
    ``algorithm`` name and ``seed`` it was created with (checked on resume), and ``extras``: the
    algorithm's own arrays (a personalised baseline's control variates, personal models, APFL's α; an
    adaptive server's moments; the algorithm's ``initial_extras``), empty for most algorithms.
    """

    algorithm: str
    seed: int
    round_index: int
    global_model: np.ndarray
    party_models: np.ndarray
    centers: np.ndarray | None
    rng: np.random.Generator
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def initial(cls, algorithm: StartingAlgorithm, init_params: np.ndarray, n_parties: int, seed: int,
                weights: np.ndarray | None = None) -> FederationState:
        """Round-0 state: party models from ``init_params`` (``(d,)`` shared or ``(N, d)`` per party)
        and the server's initial output on them (:func:`initial_server_output`), the algorithm's initial extras."""
        init = np.asarray(init_params, dtype=np.float64)
        if init.ndim == 1:
            init = np.broadcast_to(init, (n_parties, init.size))
        if init.ndim != 2 or init.shape[0] != n_parties or init.shape[1] < 1:
            raise ValueError(f"init_params must have shape (d,) or ({n_parties}, d), got {np.shape(init_params)}")
        if not np.all(np.isfinite(init)):
            raise ValueError("init_params must be finite")
        models = np.array(init, dtype=np.float64)
        start = initial_server_output(algorithm.server, models, weights)
        return cls(algorithm=algorithm.name, seed=check_seed(seed), round_index=0, global_model=start.global_model,
                   party_models=models, centers=start.centers, rng=np.random.default_rng(seed),
                   extras=algorithm.initial_extras(models, start.global_model))

    def state_dict(self) -> dict[str, Any]:
        """A deep copy made of numpy arrays and plain Python values (picklable, ``torch.save``-able)."""
        return {
            "algorithm": self.algorithm,
            "seed": self.seed,
            "round_index": self.round_index,
            "global_model": self.global_model.copy(),
            "party_models": self.party_models.copy(),
            "centers": None if self.centers is None else self.centers.copy(),
            "rng": self.rng.bit_generator.state,
            "extras": {name: value.copy() for name, value in self.extras.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace this state by ``state`` (from :meth:`state_dict`); shapes and algorithm must match."""
        expected = {"algorithm", "seed", "round_index", "global_model", "party_models", "centers", "rng"}
        if set(state) - {"extras"} != expected:  # "extras" is absent from states saved before it existed
            raise ValueError(f"state dict keys {sorted(state)} differ from {sorted(expected)}")
        if state["algorithm"] != self.algorithm:
            raise ValueError(f"state dict is for algorithm {state['algorithm']!r}, this state for {self.algorithm!r}")
        models = np.array(state["party_models"], dtype=np.float64)
        if models.shape != self.party_models.shape:
            raise ValueError(f"state dict party_models have shape {models.shape}, expected {self.party_models.shape}")
        centers = None if state["centers"] is None else np.array(state["centers"], dtype=np.float64)
        if centers is not None and centers.shape != models.shape:
            raise ValueError(f"state dict centers have shape {centers.shape}, expected {models.shape}")
        extras = {name: np.array(value, dtype=np.float64) for name, value in state.get("extras", {}).items()}
        for name, value in extras.items():
            if name in self.extras and value.shape != self.extras[name].shape:
                raise ValueError(f"state dict extras[{name!r}] has shape {value.shape}, expected {self.extras[name].shape}")
        if self.extras and set(extras) != set(self.extras):
            raise ValueError(f"state dict extras {sorted(extras)} differ from {sorted(self.extras)}")
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        self.seed = check_seed(state["seed"])
        self.round_index = int(state["round_index"])
        self.global_model = np.array(state["global_model"], dtype=np.float64)
        self.party_models = models
        self.centers = centers
        self.rng = rng
        self.extras = extras

    def references(self, party: int | np.ndarray | None = None) -> np.ndarray:
        """The models the server sent ``party`` (an index, an index array, or all parties when ``None``):
        the FedAMP centres ``u_k``, else ``w̃`` broadcast to the party models' shape (a copy)."""
        if self.centers is not None:
            return self.centers.copy() if party is None else np.take(self.centers, party, axis=0)
        shape = self.party_models.shape if party is None else np.shape(party) + self.global_model.shape
        return np.array(np.broadcast_to(self.global_model, shape))

    def restarted(self) -> FederationState:
        """A new state holding a copy of what this federation has learned — party models, global model,
        FedAMP centres and the personalised baselines' ``extras`` — with the round counter at 0 and the
        sampling generator reseeded from ``seed``: the start of a further run that continues from these
        models while the round schedules (λ_t, σ_t, α_t), the faults' rounds and the party sampling run
        as in a fresh run (walk-forward's ``continue`` mode, :mod:`portfed.experiment.studies.walk_forward`)."""
        return FederationState(
            algorithm=self.algorithm, seed=self.seed, round_index=0, global_model=self.global_model.copy(),
            party_models=self.party_models.copy(), centers=None if self.centers is None else self.centers.copy(),
            rng=np.random.default_rng(self.seed), extras={name: value.copy() for name, value in self.extras.items()})

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> FederationState:
        models = np.array(state["party_models"], dtype=np.float64)
        blank = cls(algorithm=state["algorithm"], seed=0, round_index=0, global_model=models[0], party_models=models,
                    centers=None, rng=np.random.default_rng())
        blank.load_state_dict(state)
        return blank
