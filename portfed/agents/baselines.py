"""Classic portfolio baselines as :class:`~portfed.agents.policy_protocol.Policy` objects.

Every baseline trades through :class:`~portfed.envs.PortfolioEnv`, so every strategy pays the same
transaction costs as the EIIE agents.  Weights are ``m + 1`` vectors, cash first; ``y_{t+1}`` is the
price relative from the close of decision day ``t`` to the next close (cash relative 1).

- **UBAH** (uniform buy and hold): buys ``1/m`` of each asset at the first decision and then holds,
  i.e. its action is the drifted holding ``w'_{t} = (y_t ⊙ w_{t−1}) / (y_t · w_{t−1})``
  (DESIGN.md §2).  The observation carries the previous *action*, not the drift, so the policy
  drifts its own previous action with the last close relative of the history window,
  ``y_t = history[0, :, −1] / history[0, :, −2]`` (the window is normalized by the latest close, so
  this is ``v_t / v_{t−1}``).  Holding costs nothing (``w = w'`` ⇒ μ = 1) up to the float32 rounding
  of the window (relative 1e-7); the only real cost is the initial purchase, ``μ_0 = 1 − c``.
- **UCRP**: rebalance to ``1/m`` per asset every day (Cover 1991).
- **Best Stock** (hindsight): all wealth in the asset with the largest total return
  ``v_end / v_start`` over the test period, held.
- **BCRP** (hindsight): the constant rebalanced portfolio ``argmax_{w ∈ Δ} Σ_t ln(y_t · w)`` over
  the test period's relatives (cash allowed, relative 1), solved with SLSQP.  The objective is
  concave, so the local optimum is global.
- **OLPS** strategies of the ``universal-portfolios`` package (Li & Hoi's survey; OLMAR, PAMR, ONS,
  Anticor, EG, CWMR, RMR).  The package computes a weight row ``B_s`` for every price date ``s``
  that is *held over* ``(s−1, s]`` (``AlgoResult`` multiplies ``B_s`` with ``X_s = p_s / p_{s−1}``)
  and is built by ``Algo.weights`` from the relatives up to ``s−1`` only (``B.iloc[t] = last_b``
  is stored *before* ``step`` sees ``x_t``; Anticor's vectorized ``weights`` sets row ``t+1`` from
  rolling statistics ending at ``t``).  So the action at the close of decision day ``d_i`` is the
  row of the next date, ``B_{d_{i+1}}``, a causal function of prices up to ``d_i``.  The algorithm is
  run once on all closes up to the end of the test period (the history before it warms it up) and
  its test-day actions are replayed by :class:`PrecomputedWeightsPolicy`, aligned by date.
  The package's weights carry no cash (entry 0 is 0).
- **Optimisation baselines** (Min Variance, Max Sharpe, Risk Parity, HRP, Inverse Volatility): skfolio's
  estimators re-fitted walk-forward on trailing returns (:mod:`portfed.agents.optimisation_baselines`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from portfed.agents.optimisation_baselines import (
    OPTIMISATION_BASELINES,
    OptimisationSchedule,
    ScheduledTargetsPolicy,
    optimisation_policy,
)
from portfed.data.panel import PricePanel
from portfed.envs.costs import SIMPLEX_ATOL

#: The OLPS strategies wrapped from ``universal-portfolios``, with the package's recommended
#: parameters (the authors' defaults).  Values are (class name, keyword arguments).
OLPS_ALGORITHMS: dict[str, tuple[str, dict[str, Any]]] = {
    "OLMAR": ("OLMAR", {"window": 5, "eps": 10}),
    "PAMR": ("PAMR", {"eps": 0.5}),
    "ONS": ("ONS", {"delta": 0.125, "beta": 1.0, "eta": 0.0}),
    "Anticor": ("Anticor", {"window": 30, "c_version": False}),
    "EG": ("EG", {"eta": 0.05}),
    "CWMR": ("CWMR", {"eps": -0.5, "confidence": 0.95}),
    "RMR": ("RMR", {"window": 5, "eps": 10.0, "tau": 0.001}),
}

#: Baselines that need the test period's prices (an upper reference, not tradeable).
HINDSIGHT_BASELINES: tuple[str, ...] = ("Best Stock", "BCRP")

#: Every name :func:`make_baselines` accepts, in table order.
BASELINE_NAMES: tuple[str, ...] = ("UBAH", "UCRP", *HINDSIGHT_BASELINES, *OLPS_ALGORITHMS, *OPTIMISATION_BASELINES)


# ---------------------------------------------------------------------------------------- policies
class UniformBuyAndHold:
    """UBAH: ``1/m`` per asset at the first decision, then hold (act = drifted holdings)."""

    hindsight = False

    def __init__(self, name: str = "UBAH") -> None:
        self.name = name
        self._last: np.ndarray | None = None

    def reset(self) -> None:
        self._last = None

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        history = np.asarray(observation["history"], dtype=np.float64)
        m = history.shape[1]
        if self._last is None:
            self._last = uniform_weights(m)
            return self._last.copy()
        if history.shape[2] < 2:
            raise ValueError(
                f"UBAH needs a history window of at least 2 days to drift its holdings, got {history.shape[2]}"
            )
        if self._last.shape != (m + 1,):
            raise ValueError(f"UBAH was started on {self._last.size - 1} assets but sees {m}: call reset()")
        relatives = np.concatenate([[1.0], history[0, :, -1] / history[0, :, -2]])
        drifted = relatives * self._last
        self._last = drifted / drifted.sum()
        return self._last.copy()


@dataclasses.dataclass
class ConstantRebalancedPolicy:
    """Rebalance to the same ``weights`` (``m + 1``, cash first) at every decision.

    UCRP, BCRP and Best Stock (a one-hot vector stays one-hot under drift, so rebalancing to it is
    buying and holding) are instances.
    """

    weights: np.ndarray
    name: str = "CRP"
    hindsight: bool = False

    def __post_init__(self) -> None:
        self.weights = _checked_simplex(np.asarray(self.weights, dtype=np.float64), self.name)

    def reset(self) -> None:
        """Stateless: nothing to forget."""

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        expected = np.shape(observation["weights"])
        if self.weights.shape != expected:
            raise ValueError(f"{self.name} holds {self.weights.shape} weights but the env expects {expected}")
        return self.weights.copy()


@dataclasses.dataclass
class PrecomputedWeightsPolicy:
    """Replay a schedule of actions indexed by decision date.

    ``schedule.loc[d]`` is the target portfolio (``m + 1`` columns, cash first) chosen at the close of
    day ``d``.  The policy reads the decision date from ``observation["date"]``, which
    :func:`portfed.evaluation.backtest` supplies; a date missing from the schedule is an error, never
    a silent default.
    """

    schedule: pd.DataFrame
    name: str
    hindsight: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.schedule.index, pd.DatetimeIndex):
            raise TypeError(f"{self.name}: the schedule index must be a DatetimeIndex of decision dates")
        _checked_simplex(self.schedule.to_numpy(dtype=np.float64), self.name)

    def reset(self) -> None:
        """Stateless: the schedule is indexed by date."""

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        if "date" not in observation:
            raise ValueError(
                f"{self.name} replays weights by date and needs observation['date'] "
                "(run it with portfed.evaluation.backtest)"
            )
        date = pd.Timestamp(observation["date"])
        if date not in self.schedule.index:
            span = f"{self.schedule.index[0].date()}…{self.schedule.index[-1].date()}"
            raise ValueError(f"{self.name} has no weights for decision date {date.date()} (schedule {span})")
        return self.schedule.loc[date].to_numpy(dtype=np.float64)


# ---------------------------------------------------------------------------------------- weights
def uniform_weights(n_assets: int) -> np.ndarray:
    """``[0, 1/m, …, 1/m]``: no cash, equal weight on each of the ``m`` assets."""
    if n_assets < 1:
        raise ValueError(f"n_assets must be >= 1, got {n_assets}")
    return np.concatenate([[0.0], np.full(n_assets, 1.0 / n_assets)])


def best_stock_weights(close: pd.DataFrame) -> np.ndarray:
    """One-hot on the asset with the largest ``close[-1] / close[0]`` (cash entry 0; ties: first)."""
    panel = PricePanel.from_close(close)
    if len(panel) < 2:
        raise ValueError(f"best stock needs at least 2 dates, got {len(panel)}")
    prices = panel.feature("close")
    w = np.zeros(panel.n_assets + 1)
    w[1 + int(np.argmax(prices[-1] / prices[0]))] = 1.0
    return w


def best_constant_rebalanced_weights(relatives: np.ndarray) -> np.ndarray:
    """BCRP: ``argmax_{w ∈ Δ_{m+1}} Σ_t ln(y_t · w)`` with ``y_t = (1, relatives_t)`` (cash first).

    Args:
        relatives: ``(T, m)`` asset price relatives of the period, all finite and positive.

    Raises:
        ValueError: bad relatives.  RuntimeError: SLSQP did not converge.
    """
    rel = np.asarray(relatives, dtype=np.float64)
    if rel.ndim != 2 or rel.shape[0] == 0 or rel.shape[1] == 0:
        raise ValueError(f"relatives must be a non-empty (periods, assets) array, got shape {rel.shape}")
    if not (np.isfinite(rel).all() and (rel > 0).all()):
        raise ValueError("relatives must be finite and positive")
    y = np.column_stack([np.ones(len(rel)), rel])
    k = y.shape[1]

    def negative_mean_log_growth(w: np.ndarray) -> tuple[float, np.ndarray]:
        growth = y @ w
        return -float(np.mean(np.log(growth))), -(y / growth[:, None]).mean(axis=0)

    result = minimize(
        negative_mean_log_growth,
        np.full(k, 1.0 / k),
        jac=True,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * k,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones_like(w)}],
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    if not result.success:
        raise RuntimeError(f"BCRP optimization did not converge: {result.message}")
    w = np.clip(result.x, 0.0, None)
    return w / w.sum()


def olps_schedule(
    algorithm: str, close: pd.DataFrame, decision_dates: pd.DatetimeIndex | Sequence[object]
) -> pd.DataFrame:
    """Actions of a ``universal-portfolios`` strategy on the given decision dates.

    Runs ``OLPS_ALGORITHMS[algorithm]`` on ``close`` (all dates up to the end of the test period) and
    returns, for each decision date ``d_i`` of ``close``, the package's row of the next date
    ``B_{d_{i+1}}`` (held over ``(d_i, d_{i+1}]``, computed from prices up to ``d_i``), with a cash
    column of zeros in front.

    Raises:
        ValueError: unknown algorithm, decision dates missing from ``close`` or without a next date,
            or package weights that are not on the simplex.
    """
    if algorithm not in OLPS_ALGORITHMS:
        raise ValueError(f"unknown OLPS algorithm {algorithm!r}; available: {sorted(OLPS_ALGORITHMS)}")
    panel = PricePanel.from_close(close)
    dates, decision_dates = panel.dates, pd.DatetimeIndex(decision_dates)
    positions = dates.get_indexer(decision_dates)
    if (positions < 0).any() or (positions >= len(dates) - 1).any():
        bad = decision_dates[(positions < 0) | (positions >= len(dates) - 1)][0]
        raise ValueError(
            f"decision date {pd.Timestamp(bad).date()} has no next close in the {algorithm} prices"
        )
    from universal import algos  # imported here: the package pulls seaborn and takes seconds to import

    class_name, kwargs = OLPS_ALGORITHMS[algorithm]
    prices = pd.DataFrame(panel.feature("close"), index=dates, columns=list(panel.tickers))
    # The package's first relative row is all ones, on which PAMR and CWMR divide 0 by 0 and then
    # discard the result (their step leaves the weights unchanged); the weights are validated below.
    # ONS and CWMR compute with np.matrix, which numpy flags with a PendingDeprecationWarning per step.
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        result = getattr(algos, class_name)(**kwargs).run(prices, log_progress=False)
    held = np.asarray(result.B, dtype=np.float64)
    actions = np.column_stack([np.zeros(len(positions)), held[positions + 1]])
    actions = _checked_simplex(actions, algorithm, dates=decision_dates)
    return pd.DataFrame(actions, index=decision_dates, columns=["cash", *panel.tickers])


# ---------------------------------------------------------------------------------------- factory
def make_baselines(
    close: pd.DataFrame,
    test_start: object,
    test_end: object = None,
    names: Sequence[str] | None = None,
    olps_warmup: int | None = 252,
    optimisation: OptimisationSchedule | None = None,
) -> list[ConstantRebalancedPolicy | UniformBuyAndHold | PrecomputedWeightsPolicy | ScheduledTargetsPolicy]:
    """Build the baselines ``names`` (default :data:`BASELINE_NAMES`) for one market.

    Args:
        close: close prices (index dates, columns tickers) from any time before the test period up to
            at least its end; OLPS strategies warm up on the days before ``test_start``.
        test_start: first decision date of the test period (first date on or after it), as in
            ``PortfolioEnv(start=...)``.
        test_end: last date of the test period (last date on or before it); ``None`` = ``close``'s end.
        names: which baselines, from :data:`BASELINE_NAMES` or their config keys (see
            :func:`baseline_name`: ``"best_stock"`` is ``"Best Stock"``).
        olps_warmup: days of ``close`` before the first decision day that the OLPS strategies see;
            ``None`` = all of them.  One year by default: the package's loops cost about 3 ms a day,
            and the strategies' state is short-memory (OLMAR/RMR 5 days, Anticor 2 × 30 days) or
            converges within months (EG, ONS, PAMR, CWMR).
        optimisation: the re-estimation schedule of the optimisation baselines (default
            :class:`~portfed.agents.optimisation_baselines.OptimisationSchedule`: every 21 decision days on
            the trailing 252 returns).

    The test period's closes (needed by the hindsight baselines) are ``close`` restricted to
    ``[test_start, test_end]``; its relatives are those of :class:`PortfolioEnv` with the same start
    and end.  Nothing after ``test_end`` is used.
    """
    chosen = [baseline_name(n) for n in (BASELINE_NAMES if names is None else names)]
    panel = PricePanel.from_close(close)
    history = panel.between(None, test_end)
    period = history.between(test_start, None)
    if len(period) < 2:
        raise ValueError(
            f"the test period [{test_start}, {test_end}] of {len(period)} date(s) has no price relative"
        )
    if olps_warmup is not None and olps_warmup < 0:
        raise ValueError(f"olps_warmup must be >= 0 days or None, got {olps_warmup!r}")
    first = len(history) - len(period)
    olps_close = history.iloc(slice(0 if olps_warmup is None else max(0, first - olps_warmup), None)).close
    m = panel.n_assets
    builders: dict[str, Callable[[], Any]] = {
        "UBAH": UniformBuyAndHold,
        "UCRP": lambda: ConstantRebalancedPolicy(uniform_weights(m), name="UCRP"),
        "Best Stock": lambda: ConstantRebalancedPolicy(
            best_stock_weights(period.close), name="Best Stock", hindsight=True
        ),
        "BCRP": lambda: ConstantRebalancedPolicy(
            best_constant_rebalanced_weights(period.price_relatives()), name="BCRP", hindsight=True
        ),
    }
    for algorithm in OLPS_ALGORITHMS:
        builders[algorithm] = lambda a=algorithm: PrecomputedWeightsPolicy(
            olps_schedule(a, olps_close, period.dates[:-1]), name=a
        )
    schedule = OptimisationSchedule() if optimisation is None else optimisation
    for name in OPTIMISATION_BASELINES:
        builders[name] = lambda n=name: optimisation_policy(n, history.close, period.dates[:-1], schedule)
    return [builders[n]() for n in chosen]


def baseline_name(key: str) -> str:
    """The :data:`BASELINE_NAMES` entry of ``key``, ignoring case and treating ``_``, ``-`` and space alike.

    Config files spell baselines as ``ubah``, ``best_stock``, ``anticor``; tables use the names.

    Raises:
        ValueError: no baseline has that name.
    """
    by_key = {_normalized(n): n for n in BASELINE_NAMES}
    if not isinstance(key, str) or _normalized(key) not in by_key:
        raise ValueError(f"unknown baseline {key!r}; available: {list(BASELINE_NAMES)}")
    return by_key[_normalized(key)]


def _normalized(name: str) -> str:
    return name.lower().replace("-", " ").replace("_", " ")


def _checked_simplex(weights: np.ndarray, name: str, dates: pd.DatetimeIndex | None = None) -> np.ndarray:
    """Refuse weights off the simplex; clip solver round-off (|negative| ≤ SIMPLEX_ATOL) and renormalize.

    Quadratic-programming projections (ONS) return entries like −1e-12 and sums like 1 ± 1e-9.
    """
    rows = np.atleast_2d(weights)
    sums = rows.sum(axis=1)
    bad = (
        ~np.isfinite(rows).all(axis=1)
        | (rows.min(axis=1) < -SIMPLEX_ATOL)
        | (np.abs(sums - 1) > SIMPLEX_ATOL)
    )
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = (
            f" on {dates[i].date()}" if dates is not None else (f" (row {i})" if rows.shape[0] > 1 else "")
        )
        raise ValueError(f"{name} weights{where} are not on the simplex: {rows[i]}")
    clipped = np.clip(rows, 0.0, None)
    clipped = clipped / clipped.sum(axis=1, keepdims=True)
    return clipped.reshape(np.shape(weights))
