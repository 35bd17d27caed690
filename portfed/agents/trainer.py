"""Deterministic policy gradient training of an EIIE agent (Jiang, Xu & Liang 2017; paper 001 §9.2).

Notation (DESIGN.md §2): assets ``1..m`` plus cash at index 0; ``y_{t+1} = v_{t+1} / v_t`` with a
cash relative of 1.  On decision day ``t`` the agent holds the drifted portfolio

    w'_t = (y_t ⊙ w_{t−1}) / (y_t · w_{t−1}),                       (paper 001 §9.2)

pays the linear transaction factor

    μ_t = 1 − c Σ_{i≥1} |w'_{t,i} − w_{t,i}|       (linear form of Jiang's μ; paper 001 §9.2)

to move to ``w_t`` and earns ``r_t = ln(μ_t · y_{t+1} · w_t)`` (paper 001 §9.2 writes the same
reward one period shifted, ``ln(β_t y_t · w_{t−1})``).  The training objective is the batch mean
reward (Jiang eq. 22, with the linear μ), maximised by gradient ascent on the network weights θ
(paper 001 eq. 5):

    loss(θ) = −(1/B) Σ_t r_t + (λ/2) ‖θ‖² + (ρ/2) ‖θ − θ_c‖²,

the last term only when a federation algorithm asks for a proximal centre (FedProx, FedAMP).
``w_{t−1}`` comes from the portfolio vector memory: it is fed to the network and drifted into
``w'_t``; the gradient flows through ``μ_t`` and ``y_{t+1} · w_t`` into θ (the PVM rows themselves
are data).  Batches are consecutive days drawn by the online stochastic batch sampler.

All windows of the panel are normalized once (:func:`portfed.envs.windows.price_windows`, the
environment's own observation builder) into a float32 ``(N, F, m, l)`` tensor that a step indexes,
so a step has no Python loop over assets or days.  :func:`log_returns` is a pure function of the
network output, the price relatives and the previous weights over any leading batch shape, so
several parties' batches can be stacked into one computation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rich.progress import track

from portfed.agents.config import AgentConfig
from portfed.agents.networks import EIIENetwork, build_network, flat_parameters, set_flat_parameters
from portfed.agents.policy import EIIEPolicy
from portfed.agents.pvm import PortfolioVectorMemory
from portfed.agents.sampler import GeometricBatchSampler
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.envs.windows import price_windows


# ---------------------------------------------------------------------- the reward, a pure function
def drifted_weights(previous: torch.Tensor, y_now: torch.Tensor) -> torch.Tensor:
    """``w'_t = (y_t ⊙ w_{t−1}) / (y_t · w_{t−1})`` over the last axis (m + 1, cash first)."""
    grown = y_now * previous
    return grown / grown.sum(dim=-1, keepdim=True)


def linear_cost_factor(drifted: torch.Tensor, weights: torch.Tensor, commission: float) -> torch.Tensor:
    """``μ_t = 1 − c Σ_{i≥1} |w'_{t,i} − w_{t,i}|`` (cash excluded), differentiable in ``w_t``."""
    return 1.0 - commission * (drifted[..., 1:] - weights[..., 1:]).abs().sum(dim=-1)


def log_returns(
    weights: torch.Tensor,
    previous: torch.Tensor,
    y_now: torch.Tensor,
    y_next: torch.Tensor,
    commission: float,
) -> torch.Tensor:
    """``r_t = ln(μ_t · y_{t+1} · w_t)`` with the linear ``μ_t``; all inputs ``(..., m + 1)``.

    Args:
        weights: ``w_t``, the portfolios chosen on day ``t``.
        previous: ``w_{t−1}``, the portfolios chosen the day before.
        y_now: ``y_t = v_t / v_{t−1}``, drifting ``w_{t−1}`` into ``w'_t``.
        y_next: ``y_{t+1} = v_{t+1} / v_t``, the return earned by ``w_t``.
        commission: ``c``.

    Returns:
        ``(...)`` log returns.
    """
    mu = linear_cost_factor(drifted_weights(previous, y_now), weights, commission)
    return torch.log(mu * (y_next * weights).sum(dim=-1))


# ---------------------------------------------------------------------- market arrays
@dataclass(frozen=True)
class MarketTensors:
    """Everything a step needs about the ``N = T − l`` decision days ``t = l − 1 … T − 2`` of a panel.

    Offset ``k`` is day ``t = first_day + k``.  ``windows[k]`` is the observation of day ``t``;
    ``y_now[k] = y_t`` and ``y_next[k] = y_{t+1}``, both with the cash relative 1 prepended.
    """

    windows: torch.Tensor
    y_now: torch.Tensor
    y_next: torch.Tensor
    first_day: int

    @property
    def n_days(self) -> int:
        return self.windows.shape[0]


def market_tensors(panel: PricePanel, config: AgentConfig) -> MarketTensors:
    """Normalized windows and price relatives of ``panel`` restricted to ``config.features``."""
    panel = panel.select_features(config.features).require_length(config.window)
    window = config.window
    days = np.arange(window - 1, len(panel) - 1)
    close = panel.feature("close")
    relatives = close[1:] / close[:-1]  # relatives[j] = y_{j+1}
    with_cash = np.concatenate([np.ones((relatives.shape[0], 1)), relatives], axis=1)

    def tensor(array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(array, dtype=np.float32), device=config.device)

    return MarketTensors(
        windows=tensor(price_windows(panel.values, days, window)),
        y_now=tensor(with_cash[days - 1]),
        y_next=tensor(with_cash[days]),
        first_day=window - 1,
    )


# ---------------------------------------------------------------------- records
@dataclass(frozen=True)
class StepRecord:
    """One gradient step: ``step`` counts the trainer's steps including this one (1-based)."""

    step: int
    mean_log_return: float
    loss: float
    grad_norm: float


@dataclass(frozen=True)
class LocalTrainResult:
    params: np.ndarray
    records: list[StepRecord]


@dataclass(frozen=True)
class BatchLoss:
    """The differentiable loss of one batch, with its rewards ``r_t`` and chosen portfolios ``w_t``."""

    loss: torch.Tensor
    log_returns: torch.Tensor
    weights: torch.Tensor


# ---------------------------------------------------------------------- the trainer
class DPGTrainer:
    """One party's EIIE agent, its Adam optimizer, portfolio vector memory and batch sampler.

    The network is initialized from ``seed`` (:func:`build_network`) and the sampler's numpy
    generator is seeded with the same ``seed``; no other randomness is involved, so equal seeds and
    data give bit-identical runs.  The Adam moments persist across :meth:`local_train` calls, also
    when a call loads new parameters from the server (the party's optimizer is part of its private
    state, like its PVM).
    """

    def __init__(self, config: AgentConfig, panel: PricePanel, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.config = config
        self.seed = int(seed)
        self.net: EIIENetwork = build_network(config, self.seed)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.learning_rate, foreach=True)
        self.sampler = GeometricBatchSampler(config.batch_size, config.beta, self.seed)
        self.step_count = 0
        self._params = list(self.net.parameters())
        self._market, self.panel = self._prepare(panel)
        self._source = panel  # the panel as given, for set_panel's identity check
        self.pvm = PortfolioVectorMemory(len(self.panel), self.panel.n_assets)

    @property
    def learning_rate(self) -> float:
        """``η`` of the Fed+ mixing coefficient ``κ = 1/(1 + ησ)`` (the Adam step size)."""
        return self.config.learning_rate

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
        unchanged are kept; rows of changed or new days restart from the initial portfolio.
        """
        if panel is self._source:
            return  # the panel already installed (panels are immutable): the per-round call costs nothing
        new = panel.select_features(self.config.features)
        if new.tickers != self.panel.tickers:
            raise DataError(f"set_panel: tickers {new.tickers} differ from the training tickers {self.panel.tickers}")
        n = min(len(new), len(self.panel))
        same = (new.dates[:n] == self.panel.dates[:n]) & np.all(
            new.values[:n] == self.panel.values[:n], axis=(1, 2)
        )
        keep = n if same.all() else int(np.argmin(same))
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
        _check_coef("prox_coef", prox_coef)
        center = None if prox_center is None else self._vector_tensor(prox_center, "prox_center")
        return self._batch_loss(offsets, center, prox_coef)

    def _batch_loss(self, offsets: np.ndarray, center: torch.Tensor | None, prox_coef: float) -> BatchLoss:
        market, days = self._market, offsets + self._market.first_day
        previous = torch.from_numpy(self.pvm.read(days - 1)).to(self.config.device)
        weights = self.net(market.windows[offsets], previous[:, 1:])
        rewards = log_returns(weights, previous, market.y_now[offsets], market.y_next[offsets], self.config.commission)
        loss = -rewards.mean()
        if self.config.weight_decay > 0:
            loss = loss + 0.5 * self.config.weight_decay * sum(p.pow(2).sum() for p in self._params)
        if center is not None and prox_coef > 0:
            loss = loss + 0.5 * prox_coef * (self._flat_tensor() - center).pow(2).sum()
        return BatchLoss(loss=loss, log_returns=rewards, weights=weights)

    def _flat_tensor(self) -> torch.Tensor:
        return torch.cat([p.reshape(-1) for p in self._params])

    def _vector_tensor(self, vector: np.ndarray, name: str) -> torch.Tensor:
        vector = np.asarray(vector, dtype=np.float64)
        n = sum(p.numel() for p in self._params)
        if vector.shape != (n,):
            raise ValueError(f"{name} has shape {vector.shape}; the network has ({n},) parameters")
        if not np.all(np.isfinite(vector)):
            raise ValueError(f"{name} has non-finite entries")
        return torch.as_tensor(vector, dtype=self._params[0].dtype, device=self.config.device)

    # ------------------------------------------------------------------ steps
    def _step(self, mix: tuple[torch.Tensor, float] | None, center: torch.Tensor | None, prox_coef: float) -> StepRecord:
        offsets = self.sampler.sample(self._market.n_days)
        batch = self._batch_loss(offsets, center, prox_coef)
        self.optimizer.zero_grad(set_to_none=True)
        batch.loss.backward()
        grad_norm = torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in self._params]))
        self.optimizer.step()
        if mix is not None:
            target, kappa = mix
            offset = 0
            with torch.no_grad():
                for p in self._params:
                    n = p.numel()
                    p.mul_(kappa).add_(target[offset : offset + n].view_as(p), alpha=1.0 - kappa)
                    offset += n
        self.pvm.write(offsets + self._market.first_day, batch.weights.detach().cpu().numpy())
        self.step_count += 1
        return StepRecord(
            step=self.step_count,
            mean_log_return=float(batch.log_returns.detach().mean()),
            loss=float(batch.loss.detach()),
            grad_norm=float(grad_norm),
        )

    def local_train(
        self,
        params: np.ndarray | None,
        steps: int,
        *,
        mix_target: np.ndarray | None = None,
        kappa: float = 1.0,
        prox_center: np.ndarray | None = None,
        prox_coef: float = 0.0,
    ) -> LocalTrainResult:
        """The one local-training call of the federation layer (DESIGN.md §5, paper 000 Alg. 1).

        Loads ``params`` (``None`` keeps the current ones), then ``steps`` times: an Adam step on
        :meth:`batch_loss` (with ``prox_coef/2 ‖θ − prox_center‖²`` when given), followed — if
        ``mix_target`` ``z`` is given — by the Fed+ mix ``θ ← κ θ + (1 − κ) z``.

        Returns:
            the new flat parameters and one :class:`StepRecord` per step.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
        if not 0.0 <= kappa <= 1.0:
            raise ValueError(f"kappa must lie in [0, 1], got {kappa!r}")
        if mix_target is None and kappa != 1.0:
            raise ValueError(f"kappa={kappa!r} mixes towards a target, but mix_target is None")
        _check_coef("prox_coef", prox_coef)
        if prox_coef > 0 and prox_center is None:
            raise ValueError(f"prox_coef={prox_coef!r} needs a prox_center")
        mix = None if mix_target is None else (self._vector_tensor(mix_target, "mix_target"), float(kappa))
        center = None if prox_center is None else self._vector_tensor(prox_center, "prox_center")
        if params is not None:
            set_flat_parameters(self.net, params)
        records = [self._step(mix, center, prox_coef) for _ in range(steps)]
        return LocalTrainResult(params=flat_parameters(self.net), records=records)

    def train(self, steps: int, progress: bool = False) -> list[StepRecord]:
        """Single-party training: ``steps`` plain steps; the records are the learning curve."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
        iterator = track(range(steps), description="training") if progress else range(steps)
        return [self._step(None, None, 0.0) for _ in iterator]

    # ------------------------------------------------------------------ evaluation
    def policy(self) -> EIIEPolicy:
        """The greedy policy of the current network (shares its parameters)."""
        return EIIEPolicy(self.net, self.config)

    def evaluate_log_return(self, panel: PricePanel) -> float:
        """Mean daily log return of the greedy policy of the current network through ``panel``
        (:func:`greedy_log_return`)."""
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
                "optimizer": self.optimizer.state_dict(),
                "pvm": self.pvm.state_dict(),
                "sampler": self.sampler.state_dict(),
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the trainer must already hold the same panel (data are private)."""
        state = copy.deepcopy(state)
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.pvm.load_state_dict(state["pvm"])
        self.sampler.load_state_dict(state["sampler"])
        self.step_count = int(state["step"])


def greedy_log_return(net: EIIENetwork, config: AgentConfig, panel: PricePanel) -> float:
    """Mean daily log return of the greedy policy of ``net`` run through ``panel`` day by day.

    The policy starts all in cash, feeds its own previous portfolio back (not a PVM), trades on
    every decision day ``t = l − 1 … T − 2`` and is charged the training objective's linear ``μ_t``
    (within ``O(c²)`` of the exact μ of Jiang eq. 14 that the environment uses):
    ``(1/N) Σ_t ln(μ_t · y_{t+1} · w_t)``.  ``net`` is left in the train/eval mode it was in.
    """
    market = market_tensors(panel, config)
    all_cash = torch.zeros(1, panel.n_assets + 1, device=config.device)
    all_cash[0, 0] = 1.0
    previous, chosen = all_cash, []
    was_training = net.training
    net.eval()
    with torch.no_grad():
        for k in range(market.n_days):
            weights = net(market.windows[k : k + 1], previous[:, 1:])
            chosen.append(weights)
            previous = weights
        weights = torch.cat(chosen)
        rewards = log_returns(weights, torch.cat([all_cash, weights[:-1]]), market.y_now, market.y_next,
                              config.commission)
    net.train(was_training)
    return float(rewards.double().mean())


def _check_coef(name: str, value: float) -> None:
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
