"""The EIIE policy that keeps learning while it trades (Jiang, Xu & Liang 2017 §5.3, online learning).

In Jiang et al.'s back-tests the agent does not stay frozen over the test period: after each trading
period it trains on the newest data (their online stochastic batch learning, OSBL, on the price
history up to the current period).  :class:`OnlineEIIEPolicy` does that with a one-party
:class:`~portfed.agents.batched.BatchedDPGTrainer`: it acts with a network holding the engine's
parameters and, after every step of the backtest (:func:`portfed.evaluation.backtest` with
``online=True`` calls :meth:`on_step`), hands the engine the real prices up to the day just realized,
runs ``steps`` more Adam steps (batches sampled geometrically towards that newest day) and loads the
new parameters into the network.  Nothing after the realized day is ever seen.

It starts from the deployed parameters with a fresh Adam state and portfolio-vector memory (a run
keeps the parameters of its deployed models, not their optimizer state), seeded by ``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.config import AgentConfig
from portfed.agents.learner import actor_vector
from portfed.agents.networks import build_network, set_flat_parameters
from portfed.agents.policy import EIIEPolicy
from portfed.data.panel import PricePanel
from portfed.validation import check_int


class OnlineEIIEPolicy(EIIEPolicy):
    """The greedy policy of ``params`` that trains ``steps`` steps on ``prices`` up to each realized day.

    Args:
        prices: the party's real prices (its tickers and features), at least up to the last day traded;
            the trainer only ever sees the days up to the one the backtest has reached.
        start: the first decision day (the trainer's first panel ends there).
        params: the deployed flat parameters.  config, seed: the agent and its trainer's seed.
        steps: Adam steps after every trading day (``evaluation.online_steps``).
    """

    def __init__(self, prices: PricePanel, start: pd.Timestamp, params: np.ndarray, config: AgentConfig,
                 seed: int, steps: int, name: str | None = None) -> None:
        self.steps = check_int(steps, "online steps", minimum=1)
        self._prices = prices.select_features(config.features)
        self._start = pd.Timestamp(start)
        self._params = np.array(params, dtype=np.float64)
        self._seed = seed
        self.trainer = self._fresh_trainer(config)
        super().__init__(build_network(config, seed), config, name)
        set_flat_parameters(self.net, actor_vector(config, self._params))

    def _upto(self, day: pd.Timestamp) -> PricePanel:
        end = int(np.searchsorted(self._prices.dates, day, side="right"))
        return self._prices.iloc(slice(0, end))

    def _fresh_trainer(self, config: AgentConfig) -> BatchedDPGTrainer:
        trainer = BatchedDPGTrainer(config, [self._upto(self._start)], [self._seed])
        trainer.local_train(0, self._params, 0)
        return trainer

    def reset(self) -> None:
        """A new episode starts again from the deployed parameters."""
        self.trainer = self._fresh_trainer(self.config)
        set_flat_parameters(self.net, actor_vector(self.config, self._params))

    def on_step(self, observation: Mapping[str, Any], reward: float, info: Mapping[str, Any]) -> None:
        """Train ``steps`` steps on the prices up to the day just realized (``observation["date"]``)."""
        self.trainer.set_panel(0, self._upto(pd.Timestamp(observation["date"])))
        set_flat_parameters(self.net, actor_vector(self.config, self.trainer.local_train(0, None, self.steps).params))
