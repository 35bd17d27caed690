"""Backtests of a federated run on the held-out period (paper 000 Table 1, Fig. 3a).

Each party's deployed model trades its universe over its market's held-out period through
:class:`~portfed.envs.PortfolioEnv` with the exact transaction costs; the first decision is at the
close of the last training day (its window is training history), so every price relative of the
held-out period is traded.  The baselines run through the same environment once per party.

A deployed model whose policy emits a non-finite portfolio (its parameters blew up, e.g. under a
scaling attack on a mean aggregate) cannot trade: that party's backtest is recorded as **failed**
(``failed`` names the reason, its metrics are NaN and its value column is empty) instead of stopping
the comparison; tables average over the parties that traded and the collapse detector counts the
failed ones (:mod:`portfed.experiment.collapse`).  Any other bad action is still an error.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from portfed.agents import make_baselines
from portfed.envs import NonFiniteActionError, PortfolioEnv
from portfed.evaluation import BacktestResult, backtest, backtest_all
from portfed.evaluation.metrics import SUMMARY_METRICS
from portfed.experiment.build import Federation, Market
from portfed.experiment.config import FederatedConfig
from portfed.experiment.party import Party
from portfed.experiment.progress import progress_bar


def _environment(config: FederatedConfig, market: Market, party: Party) -> PortfolioEnv:
    agent = party.agent_config
    panel = market.panel.select(list(party.tickers)).select_features(agent.features)
    return PortfolioEnv(panel, window_size=agent.window, commission=agent.commission,
                        cost_model=config.evaluation.cost_model, start=market.train_end)


@dataclass(frozen=True)
class PartyBacktest:
    """One strategy's backtest on one party's held-out period, reduced to what the tables need: the
    metrics ``row`` (:func:`portfed.evaluation.summarize` columns, ``mean_cash`` — the policy's mean
    target cash weight, the all-cash collapse check — and ``failed``) and the portfolio ``values``
    (``None`` for a failed backtest, whose metrics are NaN).  Small enough to cross a wire."""

    strategy: str
    party: int
    row: dict[str, object]
    values: pd.Series | None

    @classmethod
    def of(cls, strategy: str, party: int, result: BacktestResult | str) -> PartyBacktest:
        """From a backtest's result, or the reason string of a failed one."""
        if isinstance(result, str):
            row = {"strategy": strategy, "party": party, "hindsight": False,
                   **dict.fromkeys(SUMMARY_METRICS, float("nan")), "mean_cash": float("nan"), "failed": result}
            return cls(strategy, party, row, None)
        row = {"strategy": strategy, "party": party, "hindsight": result.hindsight, **result.summary(),
               "mean_cash": float(result.actions[:, 0].mean()), "failed": ""}
        return cls(strategy, party, row, result.value_series)


def backtest_party(config: FederatedConfig, market: Market, party: Party, params: np.ndarray,
                   strategy: str) -> PartyBacktest:
    """The greedy policy of ``params`` on ``party``'s universe and ``market``'s held-out period; a
    non-finite portfolio is a failed backtest, not an error (module docstring)."""
    try:
        result: BacktestResult | str = backtest(party.policy(params, strategy), _environment(config, market, party))
    except NonFiniteActionError as exc:
        result = f"non-finite policy: {str(exc)[:80]}"
    return PartyBacktest.of(strategy, party.index, result)


def backtest_party_baselines(config: FederatedConfig, market: Market, party: Party) -> list[PartyBacktest]:
    """The baselines of ``config.evaluation`` on ``party``'s universe and ``market``'s held-out period."""
    close = market.panel.select(list(party.tickers)).close
    policies = make_baselines(close, market.train_end, names=config.evaluation.baselines)
    results = backtest_all(policies, functools.partial(_environment, config, market, party))
    return [PartyBacktest.of(name, party.index, result) for name, result in results.items()]


def backtest_frames(backtests: Sequence[PartyBacktest]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-party metrics (a row per backtest) and the portfolio values (dates × ``"<strategy>/party_<k>"``,
    NaN columns for failed backtests)."""
    metrics = pd.DataFrame([b.row for b in backtests])
    frame = pd.DataFrame({f"{b.strategy}/party_{b.party}": b.values for b in backtests if b.values is not None})
    for b in backtests:
        if b.values is None:
            frame[f"{b.strategy}/party_{b.party}"] = np.nan
    frame = frame[[f"{b.strategy}/party_{b.party}" for b in backtests]]
    frame.index.name = "date"
    return metrics, frame


def backtest_agents(config: FederatedConfig, federation: Federation, parties: Sequence[Party], deployed: np.ndarray,
                    algorithm: str, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Backtest party ``k``'s deployed model ``deployed[k]`` on its held-out period, for every party of ``parties``.

    Returns:
        per-party metrics (one row per party, :func:`portfed.evaluation.summarize` columns) and the
        portfolio values (dates × ``"<algorithm>/party_<k>"``).
    """
    backtests = []
    with progress_bar(f"backtest {algorithm}", total=len(parties), enabled=progress) as advance:
        for k, party in enumerate(parties):
            backtests.append(backtest_party(config, federation.market_of(k), party, deployed[k], algorithm))
            advance(1)
    return backtest_frames(backtests)


def backtest_baselines(config: FederatedConfig, federation: Federation,
                       progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The baselines of ``config.evaluation`` on every party's universe and held-out period."""
    backtests = []
    with progress_bar("backtest baselines", total=len(federation.parties), enabled=progress) as advance:
        for k, party in enumerate(federation.parties):
            backtests.extend(backtest_party_baselines(config, federation.market_of(k), party))
            advance(1)
    return backtest_frames(backtests)
