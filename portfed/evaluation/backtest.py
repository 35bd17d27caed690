"""Backtests: one full episode of a policy through :class:`~portfed.envs.PortfolioEnv`.

The backtest only reads the environment.  At the close of each decision day ``t`` the policy sees
the env's observation plus ``date`` (the decision day, from the env's ``info["date"]``) and
``holdings`` (the book ``w'_t`` before the trade, ``info["holdings"]``: what risk limits measure
turnover from, :mod:`portfed.agents.limits`) and returns
``w_t``; the env charges ``μ_t`` and moves to ``t + 1`` (``P_{t+1} = P_t μ_t y_{t+1}·w_t``,
DESIGN.md §2).  With ``online=True`` a policy that defines ``on_step(observation, reward, info)`` is
called after every step with the new observation (again with ``date``), so it may keep learning
from the test days it has already traded (Jiang et al. 2017 §5.3); it is off by default, and a
policy without the hook is refused rather than silently run frozen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from portfed._progress import make_progress
from portfed.agents.policy_protocol import Policy
from portfed.envs import PortfolioEnv
from portfed.evaluation.metrics import summarize


@dataclasses.dataclass(frozen=True)
class BacktestResult:
    """One episode of one policy.

    Attributes:
        name: the policy's name.  hindsight: the policy's hindsight flag.
        values: ``(n + 1,)`` portfolio values ``P_0 … P_n`` (initial value included).
        dates: ``(n + 1,)`` dates of ``values`` (``dates[0]`` is the first decision day).
        rewards: ``(n,)`` ``r_t = ln(μ_t y_{t+1}·w_t)``.
        actions: ``(n, m + 1)`` the env-normalized target weights ``w_t`` (cash first).
        holdings: ``(n, m + 1)`` the pre-trade weights ``w'_t`` (all cash before the first trade).
        turnover: ``(n,)`` the env's ``Σ_{i≥1} |w'_{t,i} − w_{t,i}|``.
        mu: ``(n,)`` transaction remainder factors ``μ_t``.
        periods_per_year: used by :meth:`summary`.
    """

    name: str
    hindsight: bool
    values: np.ndarray
    dates: pd.DatetimeIndex
    rewards: np.ndarray
    actions: np.ndarray
    holdings: np.ndarray
    turnover: np.ndarray
    mu: np.ndarray
    periods_per_year: float = 252

    @property
    def value_series(self) -> pd.Series:
        """Portfolio values indexed by date."""
        return pd.Series(self.values, index=self.dates, name=self.name)

    def summary(self, risk_free: float = 0.0) -> dict[str, float]:
        """:func:`~portfed.evaluation.metrics.summarize` of the values, with turnover from the trades;
        ``risk_free``: the annual risk-free rate of the Sharpe and Sortino ratios."""
        return summarize(self.values, self.periods_per_year, weights=self.actions, holdings=self.holdings,
                         risk_free=risk_free)


def backtest(
    policy: Policy, env: PortfolioEnv, online: bool = False, periods_per_year: float = 252
) -> BacktestResult:
    """Run one full episode of ``policy`` in ``env`` from ``env.reset()``.

    Args:
        policy: the strategy; ``reset()`` is called first.
        env: a fresh or reused environment; it is reset here.  Build it without ``episode_length``
            so the episode covers the whole test period.
        online: call ``policy.on_step(observation, reward, info)`` after every step.
        periods_per_year: annualization of :meth:`BacktestResult.summary`.

    Raises:
        TypeError: ``online=True`` for a policy without ``on_step``.
        ValueError: ``env`` has an ``episode_length`` (its episodes start on a random day, so it would
            not backtest the whole period).
    """
    if env.episode_length is not None:
        raise ValueError(
            f"env has episode_length={env.episode_length}: its episodes start on random days; "
            "build the backtest env without episode_length to cover the whole test period"
        )
    if online and not callable(getattr(policy, "on_step", None)):
        raise TypeError(
            f"policy {policy.name!r} has no on_step(observation, reward, info) for online updates"
        )
    policy.reset()
    observation, info = env.reset()
    values, dates = [float(info["portfolio_value"])], [pd.Timestamp(info["date"])]
    holdings = [np.asarray(info["holdings"], dtype=np.float64)]
    rewards: list[float] = []
    actions: list[np.ndarray] = []
    turnover: list[float] = []
    mu: list[float] = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = np.asarray(policy.act(_dated(observation, dates[-1], holdings[-1])), dtype=np.float64)
        observation, reward, terminated, truncated, info = env.step(action)
        actions.append(action / action.sum())  # what the env holds: it normalizes the action
        rewards.append(float(reward))
        values.append(float(info["portfolio_value"]))
        dates.append(pd.Timestamp(info["date"]))
        turnover.append(float(info["turnover"]))
        mu.append(float(info["mu"]))
        holdings.append(np.asarray(info["holdings"], dtype=np.float64))
        if online:
            policy.on_step(_dated(observation, dates[-1], holdings[-1]), reward, info)
    return BacktestResult(
        name=policy.name,
        hindsight=bool(policy.hindsight),
        values=np.asarray(values),
        dates=pd.DatetimeIndex(dates),
        rewards=np.asarray(rewards),
        actions=np.asarray(actions),
        holdings=np.asarray(holdings[:-1]),  # the last holding is never traded from
        turnover=np.asarray(turnover),
        mu=np.asarray(mu),
        periods_per_year=periods_per_year,
    )


def backtest_all(
    policies: Iterable[Policy],
    make_env: Callable[[], PortfolioEnv],
    progress: bool = False,
    online: bool = False,
    periods_per_year: float = 252,
) -> dict[str, BacktestResult]:
    """Backtest each policy on its own fresh env from ``make_env()``; keys are policy names.

    Raises:
        ValueError: two policies share a name (their results would overwrite each other).
    """
    policies = list(policies)
    names = [p.name for p in policies]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"policy name {duplicates[0]!r} is used more than once")
    results: dict[str, BacktestResult] = {}
    with make_progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("backtest", total=len(policies))
        for policy in policies:
            bar.update(task, description=f"backtest {policy.name}")
            results[policy.name] = backtest(
                policy, make_env(), online=online, periods_per_year=periods_per_year
            )
            bar.advance(task)
    return results


def _dated(observation: Mapping[str, Any], date: pd.Timestamp, holdings: np.ndarray) -> dict[str, Any]:
    return {**observation, "date": date, "holdings": holdings}
