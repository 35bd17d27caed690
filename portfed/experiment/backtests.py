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


def _metric_rows(strategy: str, party: int, result: BacktestResult | str) -> dict[str, object]:
    """One party's metrics; ``result`` a reason string for a failed backtest (metrics NaN).
    ``mean_cash``: the policy's mean target cash weight over the period (the all-cash collapse check)."""
    if isinstance(result, str):
        return {"strategy": strategy, "party": party, "hindsight": False,
                **dict.fromkeys(SUMMARY_METRICS, float("nan")), "mean_cash": float("nan"), "failed": result}
    return {"strategy": strategy, "party": party, "hindsight": result.hindsight, **result.summary(),
            "mean_cash": float(result.actions[:, 0].mean()), "failed": ""}


def _value_columns(results: dict[tuple[str, int], BacktestResult | str]) -> pd.DataFrame:
    frame = pd.DataFrame({f"{name}/party_{k}": r.value_series for (name, k), r in results.items()
                          if not isinstance(r, str)})
    for (name, k), r in results.items():
        if isinstance(r, str):
            frame[f"{name}/party_{k}"] = np.nan
    frame = frame[[f"{name}/party_{k}" for name, k in results]]
    frame.index.name = "date"
    return frame


def backtest_agents(config: FederatedConfig, federation: Federation, parties: Sequence[Party], deployed: np.ndarray,
                    algorithm: str, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Backtest party ``k``'s deployed model ``deployed[k]`` on its held-out period, for every party of ``parties``.

    Returns:
        per-party metrics (one row per party, :func:`portfed.evaluation.summarize` columns) and the
        portfolio values (dates × ``"<algorithm>/party_<k>"``).
    """
    results: dict[tuple[str, int], BacktestResult | str] = {}
    with progress_bar(f"backtest {algorithm}", total=len(parties), enabled=progress) as advance:
        for k, party in enumerate(parties):
            try:
                results[algorithm, k] = backtest(party.policy(deployed[k], algorithm),
                                                 _environment(config, federation.market_of(k), party))
            except NonFiniteActionError as exc:
                results[algorithm, k] = f"non-finite policy: {str(exc)[:80]}"
            advance(1)
    metrics = pd.DataFrame([_metric_rows(name, k, r) for (name, k), r in results.items()])
    return metrics, _value_columns(results)


def backtest_baselines(config: FederatedConfig, federation: Federation,
                       progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The baselines of ``config.evaluation`` on every party's universe and held-out period."""
    results: dict[tuple[str, int], BacktestResult] = {}
    with progress_bar("backtest baselines", total=len(federation.parties), enabled=progress) as advance:
        for k, party in enumerate(federation.parties):
            market = federation.market_of(k)
            close = market.panel.select(list(party.tickers)).close
            policies = make_baselines(close, market.train_end, names=config.evaluation.baselines)
            for name, result in backtest_all(policies, functools.partial(_environment, config, market, party)).items():
                results[name, k] = result
            advance(1)
    metrics = pd.DataFrame([_metric_rows(name, k, r) for (name, k), r in results.items()])
    return metrics, _value_columns(results)
