"""The greedy EIIE policy acting in :class:`portfed.envs.PortfolioEnv` (same protocol as the baselines).

The environment's observation is ``{"history": (F, m, l) float32 window normalized by the latest
close, "weights": (m + 1,) previous action, cash first}``; the action is the portfolio
``w_t = π_θ(history, w_{t−1})`` with ``m + 1`` entries, cash first (Jiang et al. 2017 §5).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from portfed.agents.config import AgentConfig
from portfed.agents.limits import book_before_trade
from portfed.agents.networks import EIIENetwork


class EIIEPolicy:
    """Deterministic policy of an EIIE network (shares the network's parameters, never trains it)."""

    hindsight = False

    def __init__(self, net: EIIENetwork, config: AgentConfig, name: str | None = None) -> None:
        self.net = net
        self.config = config
        self.name = f"EIIE-{config.network.upper()}" if name is None else name

    def reset(self) -> None:
        """Start of an episode: nothing to clear, the previous action arrives in the observation."""

    def act(self, observation: Mapping[str, np.ndarray]) -> np.ndarray:
        """Portfolio ``w_t`` (float64, m + 1 entries summing to 1) for one observation; with the config's
        risk limits (:attr:`AgentConfig.limits`) the network's portfolio projected onto them from the book
        held (:func:`~portfed.agents.limits.book_before_trade`)."""
        missing = {"history", "weights"} - set(observation)
        if missing:
            raise ValueError(f"observation lacks {sorted(missing)}; it needs 'history' and 'weights'")
        history = np.asarray(observation["history"], dtype=np.float32)
        previous = np.asarray(observation["weights"], dtype=np.float32)
        expected = (self.config.n_features, self.config.window)
        if history.ndim != 3 or (history.shape[0], history.shape[2]) != expected:
            raise ValueError(
                f"history has shape {history.shape}; expected ({expected[0]} features, assets, "
                f"{expected[1]} days) for features {self.config.features}"
            )
        if previous.shape != (history.shape[1] + 1,):
            raise ValueError(f"weights have shape {previous.shape}; expected ({history.shape[1] + 1},), cash first")
        device = next(self.net.parameters()).device
        was_training = self.net.training
        self.net.eval()
        with torch.no_grad():
            weights = self.net(
                torch.from_numpy(history).unsqueeze(0).to(device),
                torch.from_numpy(previous[1:]).unsqueeze(0).to(device),
            )[0]
        self.net.train(was_training)
        out = weights.cpu().double().numpy()
        # float32 softmax sums to 1 within ~1e-7; renormalize in float64 for the environment's check.
        out = out / out.sum()
        limits = self.config.limits
        return limits.apply(out, book_before_trade(observation)) if limits.active else out
