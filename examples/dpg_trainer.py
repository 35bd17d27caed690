"""The plain per-party DPG trainer: one party's EIIE agent, top to bottom (Jiang, Xu & Liang 2017; paper 001 §9.2).

Not part of the library: portfed trains every party — one alone, a federation of fifty, a Flower node —
with its one engine, :class:`portfed.agents.BatchedDPGTrainer`.  This file is the same training written
for a single party with a ``torch.nn.Module`` and autograd, readable top to bottom: the engine's tests
check the engine against it (outputs, gradients, local calls, to float32 round-off), and the CleanRL-style
example ``examples/fedavg_plus.py`` federates parties built from it.

The loss is :func:`portfed.agents.objective.dpg_loss` (its docstring states the reward and the
objective), minimised by Adam (:mod:`portfed.agents.adam`, the batched engine's optimizer with
K = 1).  ``w_{t−1}`` comes from the portfolio vector memory: it is fed to the network and drifted
into ``w'_t``; the gradient flows through ``μ_t`` and ``y_{t+1} · w_t`` into θ (the PVM rows
themselves are data).  Batches are consecutive days drawn by the online stochastic batch sampler
(:mod:`portfed.agents.sampler`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rich.progress import track

from portfed.agents.adam import AdamState, adam_step
from portfed.agents.config import AgentConfig
from portfed.agents.market import MarketTensors, kept_days, market_tensors
from portfed.agents.networks import EIIENetwork, build_network, flat_parameters, set_flat_parameters
from portfed.agents.objective import dpg_loss, fedplus_mix, greedy_log_return
from portfed.agents.policy import EIIEPolicy
from portfed.agents.pvm import PortfolioVectorMemory
from portfed.agents.records import LocalTrainResult, StepRecord
from portfed.agents.sampler import GeometricBatchSampler
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.federation.cohort import LocalObjective
from portfed.validation import check_int, check_seed


@dataclass(frozen=True)
class BatchLoss:
    """The differentiable loss of one batch, with its rewards ``r_t`` and chosen portfolios ``w_t``."""

    loss: torch.Tensor
    log_returns: torch.Tensor
    weights: torch.Tensor


# ---------------------------------------------------------------------- the trainer
class DPGTrainer:
    """One party's EIIE agent, its Adam state, portfolio vector memory and batch sampler.

    The network is initialized from ``seed`` (:func:`build_network`) and the sampler's numpy
    generator is seeded with the same ``seed``; no other randomness is involved, so equal seeds and
    data give bit-identical runs.  The Adam moments persist across :meth:`local_train` calls, also
    when a call loads new parameters from the server (the party's optimizer is part of its private
    state, like its PVM).
    """

    def __init__(self, config: AgentConfig, panel: PricePanel, seed: int) -> None:
        self.config = config
        self.seed = check_seed(seed)
        self.net: EIIENetwork = build_network(config, self.seed)
        self.sampler = GeometricBatchSampler(config.batch_size, config.beta, self.seed)
        self.step_count = 0
        self._params = list(self.net.parameters())
        self.adam = AdamState.zeros_like(self._flat_tensor().detach().unsqueeze(0))
        self._market, self.panel = self._prepare(panel)
        self._source = panel  # the panel as given, for set_panel's identity check
        self.pvm = PortfolioVectorMemory(len(self.panel), self.panel.n_assets)

    @property
    def n_parameters(self) -> int:
        return int(self.adam.exp_avg.shape[1])

    # ------------------------------------------------------------------ data
    def _prepare(self, panel: PricePanel) -> tuple[MarketTensors, PricePanel]:
        panel = panel.select_features(self.config.features)
        market = market_tensors(panel, self.config)
        if market.n_days < self.config.batch_size:
            raise DataError(
                f"panel {panel.name!r} has {market.n_days} decision days (T − window = {len(panel)} − "
                f"{self.config.window}), fewer than batch_size = {self.config.batch_size}"
            )
        return market, panel

    def set_panel(self, panel: PricePanel) -> None:
        """Train on ``panel`` from now on (e.g. real prices + a regenerated synthetic year).

        The tickers must be the same.  PVM rows of the leading days whose dates and prices are
        unchanged are kept (:func:`~portfed.agents.market.kept_days`); rows of changed or new days
        restart from the initial portfolio.
        """
        if panel is self._source:
            return  # the panel already installed (panels are immutable): the per-round call costs nothing
        new = panel.select_features(self.config.features)
        keep = kept_days(self.panel, new)
        if keep == len(new) == len(self.panel):
            self._source = panel
            return  # the same data: nothing to recompute
        self._market, self.panel = self._prepare(new)
        self._source = panel
        self.pvm.resize(len(new), keep)

    # ------------------------------------------------------------------ loss
    def batch_loss(
        self, offsets: np.ndarray, *, prox_center: np.ndarray | None = None, prox_coef: float = 0.0
    ) -> BatchLoss:
        """The loss of the decision days ``first_day + offsets`` (reads the PVM, writes nothing)."""
        offsets = np.asarray(offsets)
        if offsets.ndim != 1 or offsets.size == 0 or offsets.min() < 0 or offsets.max() >= self._market.n_days:
            raise IndexError(f"offsets must be a non-empty 1-D array in [0, {self._market.n_days - 1}]")
        objective = LocalObjective(prox_center=prox_center, prox_coef=prox_coef)
        objective.check_size(self.n_parameters)
        return self._batch_loss(offsets, self._prox(objective))

    def _batch_loss(self, offsets: np.ndarray, prox: tuple[torch.Tensor, torch.Tensor] | None) -> BatchLoss:
        market, days = self._market, offsets + self._market.first_day
        previous = torch.from_numpy(self.pvm.read(days - 1)).to(self.config.device)
        weights = self.net(market.windows[offsets], previous[:, 1:])
        loss, rewards = dpg_loss(self._flat_tensor().unsqueeze(0), weights.unsqueeze(0), previous.unsqueeze(0),
                                 market.y_now[offsets].unsqueeze(0), market.y_next[offsets].unsqueeze(0),
                                 self.config, prox)
        return BatchLoss(loss=loss[0], log_returns=rewards[0], weights=weights)

    def _flat_tensor(self) -> torch.Tensor:
        return torch.cat([p.reshape(-1) for p in self._params])

    def _row(self, vector: np.ndarray) -> torch.Tensor:
        return torch.tensor(vector, dtype=self._params[0].dtype, device=self.config.device).unsqueeze(0)

    def _prox(self, objective: LocalObjective) -> tuple[torch.Tensor, torch.Tensor] | None:
        penalty = objective.penalty()
        if penalty is None:
            return None
        center, coef = penalty
        return self._row(center), torch.tensor([coef], dtype=self._params[0].dtype, device=self.config.device)

    # ------------------------------------------------------------------ steps
    def _step(self, mix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
              prox: tuple[torch.Tensor, torch.Tensor] | None) -> StepRecord:
        offsets = self.sampler.sample(self._market.n_days)
        batch = self._batch_loss(offsets, prox)
        grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(batch.loss, self._params)]).unsqueeze(0)
        theta = self._flat_tensor().detach().unsqueeze(0)
        adam_step(theta, grad, self.adam, learning_rate=self.config.learning_rate, betas=self.config.adam_betas,
                  eps=self.config.adam_eps)
        if mix is not None:
            fedplus_mix(theta, *mix)
        with torch.no_grad():
            offset = 0
            for p in self._params:
                p.copy_(theta[0, offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        self.pvm.write(offsets + self._market.first_day, batch.weights.detach().cpu().numpy())
        self.step_count += 1
        return StepRecord(
            step=self.step_count,
            mean_log_return=float(batch.log_returns.detach().mean()),
            loss=float(batch.loss.detach()),
            grad_norm=float(torch.linalg.vector_norm(grad)),
            cash=float(batch.weights.detach()[:, 0].mean()),
        )

    def local_train(self, params: np.ndarray | None, steps: int,
                    objective: LocalObjective | None = None) -> LocalTrainResult:
        """The federation's local-training call (:class:`portfed.federation.LocalTrainer`; paper 003 Alg. 1).

        Loads ``params`` (``None`` keeps the current ones), then ``steps`` times: an Adam step on
        :meth:`batch_loss` plus the objective's proximal term ``μ/2 ‖θ − c‖²``
        (:meth:`LocalObjective.penalty`: FedAMP's, and the Fed+ / FedProx pull with
        ``proximal_update: loss``), followed — with ``proximal_update: mix`` and a target ``z`` — by the
        Fed+ mix ``θ ← κ θ + (1 − κ) z``, ``κ = 1/(1 + ησ)`` with this party's learning rate ``η``.

        Returns:
            the new flat parameters and one :class:`StepRecord` per step.
        """
        steps = check_int(steps, "steps", minimum=0)
        objective = objective or LocalObjective()
        objective.check_size(self.n_parameters)
        mix = None
        pull = objective.mix(self.config.learning_rate)
        if pull is not None:
            target, kappa_value = pull
            kappa = torch.tensor([[kappa_value]], dtype=self._params[0].dtype, device=self.config.device)
            mix = (self._row(target), kappa, 1.0 - kappa)
        prox = self._prox(objective)
        if params is not None:
            set_flat_parameters(self.net, params)
        records = [self._step(mix, prox) for _ in range(steps)]
        return LocalTrainResult(params=flat_parameters(self.net), records=records)

    def train(self, steps: int, progress: bool = False) -> list[StepRecord]:
        """Single-party training: ``steps`` plain steps; the records are the learning curve."""
        steps = check_int(steps, "steps", minimum=0)
        iterator = track(range(steps), description="training") if progress else range(steps)
        return [self._step(None, None) for _ in iterator]

    # ------------------------------------------------------------------ evaluation
    def policy(self) -> EIIEPolicy:
        """The greedy policy of the current network (shares its parameters)."""
        return EIIEPolicy(self.net, self.config)

    def evaluate_log_return(self, panel: PricePanel) -> float:
        """Mean daily log return of the greedy policy of the current network through ``panel``
        (:func:`~portfed.agents.objective.greedy_log_return`)."""
        if panel.n_assets != self.pvm.n_assets:
            raise DataError(f"panel {panel.name!r} has {panel.n_assets} assets; the agent trades {self.pvm.n_assets}")
        return greedy_log_return(self.net, self.config, panel)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """A deep copy of the whole training state (net, Adam, PVM, sampler generator, step)."""
        return copy.deepcopy(
            {
                "step": self.step_count,
                "net": self.net.state_dict(),
                "adam": self.adam.state_dict(),
                "pvm": self.pvm.state_dict(),
                "sampler": self.sampler.state_dict(),
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the trainer must already hold the same panel (data are private)."""
        state = copy.deepcopy(state)
        self.net.load_state_dict(state["net"])
        self.adam.load_state_dict(state["adam"])
        self.pvm.load_state_dict(state["pvm"])
        self.sampler.load_state_dict(state["sampler"])
        self.step_count = int(state["step"])
