"""A trained agent as a Python object: ``portfed.load(run)`` and its ``allocate`` / ``backtest`` on any prices.

>>> agent = portfed.load("runs/tiny", algorithm="fedavg+", party=0)     # doctest: +SKIP
>>> agent.allocate("new_prices.csv").weights                           # tomorrow's portfolio, cash first
>>> agent.backtest("new_prices.csv").summary()                        # the deployed model on new prices

``prices`` everywhere is a :class:`~portfed.data.PricePanel`, a DataFrame of closes (dates × tickers)
or the path of a CSV file (:func:`portfed.data.load_csv`: wide closes or ``portfed data fetch``'s long
layout); it must hold the party's tickers (others are ignored).

**The backtest** trades the deployed model *frozen* (whatever the run's ``evaluation.online_steps``)
through :class:`~portfed.envs.PortfolioEnv` with the run's commission and cost model, and with the
agent's risk limits (``agent.max_weight`` / ``max_turnover``, :mod:`portfed.agents.limits`).  Its first
decision is at the close of ``start`` (default: the first day with a full window of ``window`` days) —
that window is history only — and it trades every price relative after it up to ``end``.  Starting at
the run's own held-out period (``start`` = the last training day) it repeats the run's backtest
decisions (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from portfed.agents import make_baselines
from portfed.data import PricePanel, load_csv
from portfed.deploy.allocate import Allocation, allocate
from portfed.deploy.errors import MissingTickersError, RunDirectoryError, ShortHistoryError
from portfed.deploy.trained import TrainedParty, load_trained_party
from portfed.envs import PortfolioEnv
from portfed.evaluation import BacktestResult, backtest

Prices = PricePanel | pd.DataFrame | str | Path


@dataclass(frozen=True)
class TrainedAgent:
    """One party's deployed model of a run (:class:`~portfed.deploy.TrainedParty` as ``trained``)."""

    trained: TrainedParty

    @property
    def tickers(self) -> tuple[str, ...]:
        return self.trained.tickers

    def allocate(self, prices: Prices | None = None, as_of: object = None,
                 current: np.ndarray | None = None) -> Allocation:
        """Tomorrow's target weights (:func:`portfed.deploy.allocate`); ``prices`` default the run's own."""
        return allocate(self.trained, None if prices is None else read_prices(prices), as_of, current)

    def backtest(self, prices: Prices, start: object = None, end: object = None,
                 baselines: tuple[str, ...] = ()) -> dict[str, BacktestResult]:
        """The deployed model (first, under the algorithm's name) and the ``baselines`` (names or config keys of
        :data:`portfed.agents.BASELINE_NAMES`, e.g. ``("ucrp", "ubah")``; the optimisation baselines fit on the
        prices before ``start``) on ``prices`` from ``start`` to ``end`` (module docstring)."""
        panel, first = self._panel(read_prices(prices), start, end)
        agent = self.trained.agent

        def environment() -> PortfolioEnv:
            return PortfolioEnv(panel, window_size=agent.window, commission=agent.commission,
                                cost_model=self.trained.config.evaluation.cost_model, start=first)

        policies = [self.trained.policy()]
        if baselines:
            policies += make_baselines(panel.close, first, names=list(baselines))
        return {policy.name: backtest(policy, environment()) for policy in policies}

    def _panel(self, prices: PricePanel, start: object, end: object) -> tuple[PricePanel, pd.Timestamp]:
        missing = [t for t in self.tickers if t not in prices.tickers]
        if missing:
            raise MissingTickersError(f"the prices ({prices.name or 'unnamed'}) lack the party's ticker(s) {missing}; "
                                      f"the model trades {list(self.tickers)}", missing)
        window = self.trained.agent.window
        panel = prices.select(list(self.tickers)).select_features(self.trained.agent.features).between(None, end)
        first = int(window - 1 if start is None else panel.dates.searchsorted(pd.Timestamp(start)))
        if first < window - 1 or first >= len(panel) - 1:
            day = "the first date" if start is None else pd.Timestamp(start).date()
            raise ShortHistoryError(f"a backtest from {day} needs {window} days of prices up to it and one after; "
                                    f"the prices hold {len(panel)} days from {panel.dates[0].date()} to "
                                    f"{panel.dates[-1].date()}")
        return panel, panel.dates[first]


def read_prices(prices: Prices) -> PricePanel:
    """A :class:`PricePanel` from a panel, a DataFrame of closes or a CSV path."""
    if isinstance(prices, PricePanel):
        return prices
    if isinstance(prices, pd.DataFrame):
        return PricePanel.from_close(prices)
    return load_csv(prices)


def trained_algorithms(run_dir: str | Path, party: int) -> list[str]:
    """The algorithms of ``run_dir`` with a deployed model for ``party`` (sub-runs holding models)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise RunDirectoryError(f"{run} is not a directory")
    return sorted(d.name for d in run.iterdir()
                  if (d / "models.npz").is_file() or (d / f"party_{party}.npz").is_file())


def load(run_dir: str | Path, algorithm: str | None = None, party: int = 0) -> TrainedAgent:
    """Party ``party``'s deployed model of ``algorithm`` in the run directory ``run_dir``; ``algorithm`` may be
    left out when the run trained exactly one.

    Raises:
        RunDirectoryError: not a run directory, no such party or algorithm, or several algorithms to choose from.
    """
    if algorithm is None:
        names = trained_algorithms(run_dir, party)
        if len(names) != 1:
            raise RunDirectoryError(f"{run_dir} holds {len(names)} trained algorithms {names}: name one (--algorithm)")
        algorithm = names[0]
    return TrainedAgent(load_trained_party(run_dir, algorithm, party))
