"""The optimisation baselines of portfolio management, from skfolio, re-estimated walk-forward.

Five classic allocations of the risky assets, each fitted by skfolio (no optimiser of portfed's own)
on the trailing daily simple returns ``r_s = p_s / p_{s−1} − 1``:

* ``Min Variance`` — ``MeanRisk`` minimising ``wᵀ Σ w`` (long only, fully invested);
* ``Max Sharpe`` — ``MeanRisk`` maximising ``(μᵀ w − r_f) / √(wᵀ Σ w)``, ``r_f = 0`` (the cash of
  :class:`~portfed.envs.PortfolioEnv` earns nothing).  When no asset's mean return beats cash the
  ratio has no long-only maximiser; the portfolio that maximises it with cash available holds cash
  only, and so does the baseline until the next re-estimation;
* ``Risk Parity`` — ``RiskBudgeting``: equal contributions ``w_i (Σ w)_i`` to the variance;
* ``HRP`` — ``HierarchicalRiskParity`` (López de Prado 2016), variance as the risk measure;
* ``Inverse Volatility`` — ``InverseVolatility``: ``w_i ∝ 1 / σ_i``.

**Schedule** (:class:`OptimisationSchedule`; ``evaluation.optimisation`` in the configs).  The
first decision is at the close of the last training day ``d_0``: the model is fitted on the last
``lookback`` returns of the training window (all of it when shorter).  It is fitted again at the
close of every ``rebalance_every``-th decision day ``d_i`` (``i = 0, k, 2k, …``) on the ``lookback``
returns ending with ``d_i``'s close, and the book is traded to the new target; on the days between
the book is held as it drifted (the action is the drifted book itself, so no commission is paid).  A
target decided at the close of ``d_i`` is held over ``(d_i, d_{i+1}]``: the weights held on any day
``t`` use no price after ``t − 1`` (tested by perturbing the prices from ``t`` on).  Every trade goes
through :class:`~portfed.envs.PortfolioEnv`, so these baselines pay exactly the agents' costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from portfed.agents.limits import book_before_trade
from portfed.data.panel import PricePanel

#: The optimisation baselines, in table order (config keys ``min_variance``, ``max_sharpe``, …).
OPTIMISATION_BASELINES: tuple[str, ...] = ("Min Variance", "Max Sharpe", "Risk Parity", "HRP",
                                           "Inverse Volatility")


class OptimisationError(ValueError):
    """skfolio could not fit a baseline on one re-estimation date (the message names both)."""


@dataclass(frozen=True)
class OptimisationSchedule:
    """Re-fit every ``rebalance_every`` decision days on the trailing ``lookback`` daily returns."""

    rebalance_every: int = 21
    lookback: int = 252

    def __post_init__(self) -> None:
        for name in ("rebalance_every", "lookback"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "rebalance_every" else 2):
                raise ValueError(f"optimisation.{name} must be an integer >= "
                                 f"{1 if name == 'rebalance_every' else 2}, got {value!r}")


def _model(name: str) -> Any:
    """A fresh skfolio estimator for ``name`` (imported here: skfolio takes a second to import)."""
    from skfolio import RiskMeasure
    from skfolio.optimization import (
        HierarchicalRiskParity,
        InverseVolatility,
        MeanRisk,
        ObjectiveFunction,
        RiskBudgeting,
    )

    models = {
        "Min Variance": lambda: MeanRisk(objective_function=ObjectiveFunction.MINIMIZE_RISK,
                                         risk_measure=RiskMeasure.VARIANCE),
        "Max Sharpe": lambda: MeanRisk(objective_function=ObjectiveFunction.MAXIMIZE_RATIO,
                                       risk_measure=RiskMeasure.VARIANCE, risk_free_rate=0.0),
        "Risk Parity": lambda: RiskBudgeting(risk_measure=RiskMeasure.VARIANCE),
        "HRP": lambda: HierarchicalRiskParity(risk_measure=RiskMeasure.VARIANCE),
        "Inverse Volatility": InverseVolatility,
    }
    return models[name]()


def fit_target(name: str, returns: pd.DataFrame) -> np.ndarray:
    """The target portfolio (``m + 1`` weights, cash first) of baseline ``name`` fitted on ``returns``
    (days × assets).  Max Sharpe without an asset whose mean beats cash is all cash (module docstring).

    Raises:
        OptimisationError: skfolio failed, or returned weights off the simplex.
    """
    if name == "Max Sharpe" and (returns.mean() <= 0).all():
        return np.eye(returns.shape[1] + 1)[0]
    try:
        weights = np.asarray(_model(name).fit(returns).weights_, dtype=np.float64)
    except Exception as exc:  # skfolio raises ValueError, cvxpy SolverError, …: all name the failure
        raise OptimisationError(f"{name} could not be fitted on the returns up to {returns.index[-1].date()}: "
                                f"{exc}") from exc
    if not np.isfinite(weights).all() or weights.min() < -1e-6 or abs(weights.sum() - 1) > 1e-6:
        raise OptimisationError(f"{name} fitted on the returns up to {returns.index[-1].date()} gave weights "
                                f"off the simplex: {weights}")
    weights = np.clip(weights, 0.0, None)
    return np.concatenate([[0.0], weights / weights.sum()])


def optimisation_targets(name: str, close: pd.DataFrame, decision_dates: pd.DatetimeIndex,
                         schedule: OptimisationSchedule) -> pd.DataFrame:
    """The targets of baseline ``name`` on its re-estimation days (every ``schedule.rebalance_every``-th of
    ``decision_dates``, the first included), each fitted on the ``schedule.lookback`` returns of ``close``
    ending with that day's close; index the re-estimation days, columns ``cash`` and the tickers."""
    panel = PricePanel.from_close(close)
    prices = pd.DataFrame(panel.feature("close"), index=panel.dates, columns=list(panel.tickers))
    returns = prices.pct_change().iloc[1:]
    days = pd.DatetimeIndex(decision_dates)[::schedule.rebalance_every]
    rows = []
    for day in days:
        upto = int(returns.index.searchsorted(day, side="right"))
        window = returns.iloc[max(0, upto - schedule.lookback):upto]
        if len(window) < 2:
            raise OptimisationError(f"{name} needs at least 2 daily returns up to {day.date()}, the prices hold "
                                    f"{len(window)}")
        rows.append(fit_target(name, window))
    return pd.DataFrame(rows, index=days, columns=["cash", *panel.tickers])


@dataclass
class ScheduledTargetsPolicy:
    """Trade to ``targets.loc[d]`` at the close of each re-estimation day ``d``; on any other day return the
    book held (``observation["holdings"]`` from the backtest, else the previous decision drifted), so
    nothing is traded (module docstring)."""

    targets: pd.DataFrame
    name: str
    hindsight: bool = False

    def reset(self) -> None:
        """Stateless: the targets are indexed by date and the book arrives in the observation."""

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        if "date" not in observation:
            raise ValueError(f"{self.name} trades on a schedule and needs observation['date'] "
                             "(run it with portfed.evaluation.backtest)")
        date = pd.Timestamp(observation["date"])
        if date in self.targets.index:
            return self.targets.loc[date].to_numpy(dtype=np.float64)
        if date < self.targets.index[0]:
            raise ValueError(f"{self.name} has no target before its first re-estimation day "
                             f"{self.targets.index[0].date()} (asked on {date.date()})")
        return book_before_trade(observation)


def optimisation_policy(name: str, close: pd.DataFrame, decision_dates: pd.DatetimeIndex,
                        schedule: OptimisationSchedule) -> ScheduledTargetsPolicy:
    """Baseline ``name`` of :data:`OPTIMISATION_BASELINES` on the decision days ``decision_dates`` of ``close``."""
    return ScheduledTargetsPolicy(optimisation_targets(name, close, decision_dates, schedule), name)
