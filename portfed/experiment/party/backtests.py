"""Backtests of a federated run on the held-out period (paper 000 Table 1, Fig. 3a).

Each party's deployed model trades its universe over its market's held-out period through
:class:`~portfed.envs.PortfolioEnv` with the exact transaction costs; the first decision is at the
close of the last training day (its window is training history), so every price relative of the
held-out period is traded.  The baselines run through the same environment once per party.

A deployed model whose policy emits a non-finite portfolio (its parameters blew up, e.g. under a
scaling attack on a mean aggregate) cannot trade: that party's backtest is recorded as **failed**
(``failed`` names the reason, its metrics are NaN and its value column is empty) instead of stopping
the comparison; tables average over the parties that traded and the collapse detector counts the
failed ones (:mod:`portfed.experiment.reports.collapse`).  Any other bad action is still an error.

With ``evaluation.online_steps > 0`` the deployed model keeps training on each held-out day after
trading it (Jiang et al. 2017's online learning, :class:`~portfed.agents.online.OnlineEIIEPolicy`).

**The weights held.**  An agent's backtest also keeps its trades (:func:`trades_frame`): per decision day
``t`` the value ``P_t`` before trading, the turnover ``Σ_{i≥1} |w'_{t,i} − w_{t,i}|``, the cost
``1 − μ_t`` (the fraction of ``P_t`` paid in commissions) and the target weights ``w_t`` (cash first),
so ``P_{t+1} = P_t (1 − cost_t) (y_{t+1} · w_t)``; :func:`weights_frame` stacks the parties' trades
into a sub-run's ``weights.csv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from portfed._progress import progress_bar
from portfed.agents import EIIEPolicy, make_baselines
from portfed.agents.baselines import baseline_name
from portfed.agents.online import OnlineEIIEPolicy
from portfed.agents.optimisation_baselines import OptimisationError
from portfed.envs import NonFiniteActionError, PortfolioEnv
from portfed.evaluation import BacktestResult, asset_spread, backtest
from portfed.evaluation.metrics import SUMMARY_METRICS
from portfed.experiment.config import FederatedConfig
from portfed.experiment.party.build import Federation, Market
from portfed.experiment.party.party import Party


def _environment(config: FederatedConfig, market: Market, party: Party) -> PortfolioEnv:
    agent = party.agent_config
    panel = market.panel.select(list(party.tickers)).select_features(agent.features)
    return PortfolioEnv(panel, window_size=agent.window, commission=agent.commission,
                        cost_model=config.evaluation.cost_model, start=market.train_end)


@dataclass(frozen=True)
class PartyBacktest:
    """One strategy's backtest on one party's held-out period, reduced to what the tables need: the
    metrics ``row`` (:func:`portfed.evaluation.summarize` columns, ``mean_cash`` — the policy's mean
    target cash weight, the all-cash collapse check —, ``asset_spread`` — how much the policy tells its
    risky assets apart, :func:`portfed.evaluation.asset_spread` — and ``failed``) and the portfolio ``values``
    (``None`` for a failed backtest, whose metrics are NaN).  Small enough to cross a wire."""

    strategy: str
    party: int
    row: dict[str, object]
    values: pd.Series | None
    trades: pd.DataFrame | None = None

    @classmethod
    def of(cls, strategy: str, party: int, result: BacktestResult | str,
           tickers: Sequence[str] | None = None, risk_free: float = 0.0) -> PartyBacktest:
        """From a backtest's result, or the reason string of a failed one; with the universe's ``tickers``
        the trades are kept too (:func:`trades_frame`); ``risk_free``: the annual rate of the Sharpe and
        Sortino ratios (``evaluation.risk_free``)."""
        if isinstance(result, str):
            row = {"strategy": strategy, "party": party, "hindsight": False,
                   **dict.fromkeys(SUMMARY_METRICS, float("nan")), "mean_cash": float("nan"),
                   "asset_spread": float("nan"), "failed": result}
            return cls(strategy, party, row, None)
        row = {"strategy": strategy, "party": party, "hindsight": result.hindsight, **result.summary(risk_free),
               "mean_cash": float(result.actions[:, 0].mean()), "asset_spread": asset_spread(result.actions), "failed": ""}
        trades = None if tickers is None else trades_frame(result, tickers)
        return cls(strategy, party, row, result.value_series, trades)


#: The columns of a trades frame before the weights (cash, then the universe's tickers).
TRADE_COLUMNS: tuple[str, ...] = ("value", "turnover", "cost")
CASH = "cash"


def trades_frame(result: BacktestResult, tickers: Sequence[str]) -> pd.DataFrame:
    """Per decision day (index ``date``): ``value`` ``P_t``, ``turnover``, ``cost`` ``1 − μ_t`` and the
    target weights ``w_t`` (columns ``cash`` and ``tickers``), the module docstring's identity."""
    if result.actions.shape[1] != len(tickers) + 1:
        raise ValueError(f"{len(tickers)} tickers for actions of {result.actions.shape[1]} entries (cash first)")
    frame = pd.DataFrame(result.actions, index=pd.DatetimeIndex(result.dates[:-1], name="date"),
                         columns=[CASH, *tickers])
    frame.insert(0, "cost", 1.0 - result.mu)
    frame.insert(0, "turnover", result.turnover)
    frame.insert(0, "value", result.values[:-1])
    return frame


def agent_policy(config: FederatedConfig, market: Market, party: Party, params: np.ndarray,
                 strategy: str) -> EIIEPolicy:
    """The policy of ``params`` that trades the held-out period: frozen, or with ``evaluation.online_steps``
    the :class:`~portfed.agents.online.OnlineEIIEPolicy` that keeps training on each new day."""
    steps = config.evaluation.online_steps
    if steps == 0:
        return party.policy(params, strategy)
    prices = market.panel.select(list(party.tickers))
    return OnlineEIIEPolicy(prices, market.train_end, params, party.agent_config, party.seed, steps, name=strategy)


def backtest_party(config: FederatedConfig, market: Market, party: Party, params: np.ndarray,
                   strategy: str) -> PartyBacktest:
    """The greedy policy of ``params`` (:func:`agent_policy`) on ``party``'s universe and ``market``'s
    held-out period; a non-finite portfolio is a failed backtest, not an error (module docstring)."""
    policy = agent_policy(config, market, party, params, strategy)
    try:
        result: BacktestResult | str = backtest(policy, _environment(config, market, party),
                                                online=config.evaluation.online_steps > 0)
    except NonFiniteActionError as exc:
        result = f"non-finite policy: {str(exc)[:80]}"
    return PartyBacktest.of(strategy, party.index, result, party.tickers, config.evaluation.risk_free)


def backtest_party_baselines(config: FederatedConfig, market: Market, party: Party) -> list[PartyBacktest]:
    """The baselines of ``config.evaluation`` on ``party``'s universe and ``market``'s held-out period; an
    optimisation baseline that skfolio cannot fit is a failed backtest (its reason in ``failed``), as a
    deployed model that cannot trade is."""
    close = market.panel.select(list(party.tickers)).close
    backtests = []
    for name in config.evaluation.baselines:
        try:
            (policy,) = make_baselines(close, market.train_end, names=[name],
                                       optimisation=config.evaluation.optimisation.schedule())
        except OptimisationError as exc:
            backtests.append(PartyBacktest.of(baseline_name(name), party.index, f"optimisation failed: {exc}"))
            continue
        result = backtest(policy, _environment(config, market, party))
        backtests.append(PartyBacktest.of(policy.name, party.index, result, risk_free=config.evaluation.risk_free))
    return backtests


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


def weights_frame(backtests: Sequence[PartyBacktest]) -> pd.DataFrame:
    """The trades of every backtest that has them, one row per party and decision day: ``party``, ``date``,
    :data:`TRADE_COLUMNS`, ``cash`` and the weights of every ticker of the parties' universes (in order of
    first appearance; NaN for a ticker outside a party's universe).  A failed backtest has no row."""
    frames = [b.trades.reset_index().assign(party=b.party) for b in backtests if b.trades is not None]
    columns = ["party", "date", *TRADE_COLUMNS, CASH]
    if not frames:
        return pd.DataFrame(columns=columns)
    tickers = list(dict.fromkeys(c for f in frames for c in f.columns if c not in columns))
    return pd.concat(frames, ignore_index=True)[columns + tickers]


def party_weights(weights: pd.DataFrame, party: int) -> pd.DataFrame:
    """Party ``party``'s trades from a ``weights.csv`` frame: dates × (value, turnover, cost, ``cash`` and
    its tickers).

    Raises:
        ValueError: the frame has no row for that party (a failed backtest, or no such party).
    """
    rows = weights[weights["party"] == party]
    if rows.empty:
        raise ValueError(f"no weights for party {party}: parties with weights are {sorted(set(weights['party']))}")
    frame = rows.drop(columns=["party", "date"]).set_index(pd.DatetimeIndex(pd.to_datetime(rows["date"]), name="date"))
    return frame[[c for c in frame.columns if frame[c].notna().all()]]  # other parties' tickers are NaN


def backtest_agents(config: FederatedConfig, federation: Federation, parties: Sequence[Party], deployed: np.ndarray,
                    algorithm: str, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Backtest party ``k``'s deployed model ``deployed[k]`` on its held-out period, for every party of ``parties``.

    Returns:
        per-party metrics (one row per party, :func:`portfed.evaluation.summarize` columns), the
        portfolio values (dates × ``"<algorithm>/party_<k>"``) and the weights held (:func:`weights_frame`).
    """
    backtests = []
    with progress_bar(f"backtest {algorithm}", total=len(parties), enabled=progress) as advance:
        for k, party in enumerate(parties):
            backtests.append(backtest_party(config, federation.market_of(k), party, deployed[k], algorithm))
            advance(1)
    return *backtest_frames(backtests), weights_frame(backtests)


def backtest_baselines(config: FederatedConfig, federation: Federation,
                       progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The baselines of ``config.evaluation`` on every party's universe and held-out period."""
    backtests = []
    with progress_bar("backtest baselines", total=len(federation.parties), enabled=progress) as advance:
        for k, party in enumerate(federation.parties):
            backtests.extend(backtest_party_baselines(config, federation.market_of(k), party))
            advance(1)
    return backtest_frames(backtests)
