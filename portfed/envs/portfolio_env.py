"""The portfolio-management environment of Jiang, Xu & Liang (2017), paper 001 §9.2 (DESIGN.md §2).

Assets ``1..m`` plus cash at index 0.  Day indices ``t`` refer to the rows of the price panel.  At
the close of decision day ``t`` the portfolio holds the drifted weights ``w'_t`` and the agent picks
``w_t`` on the simplex (the action).  Rebalancing keeps the fraction ``μ_t`` of the value
(:func:`~portfed.envs.costs.transaction_remainder`), then prices move by the price relatives
``y_{t+1} = close_{t+1} / close_t`` (cash relative 1)::

    P_{t+1}  = P_t · μ_t · (y_{t+1} · w_t)
    r_t      = ln(μ_t · y_{t+1} · w_t)            (so Σ_t r_t = ln(P_end / P_start))
    w'_{t+1} = (y_{t+1} ⊙ w_t) / (y_{t+1} · w_t)

The observation at day ``t`` is the normalized price window ending at ``t``
(:func:`~portfed.envs.windows.price_windows`, Jiang et al. §3.2) and the previous action
``w_{t−1}`` (all cash ``[1, 0, …, 0]`` at reset).  An episode covers the trading period (or a
window of ``episode_length`` steps of it) and terminates right after the last decision day that has
a next price, so it has exactly as many steps as there are price relatives in it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from gymnasium import spaces

from portfed.data.errors import DataError
from portfed.data.panel import PRICE_FEATURES, PricePanel
from portfed.envs.costs import transaction_remainder
from portfed.envs.windows import price_windows
from portfed.validation import check_int, check_number, parse_date

COST_MODELS: tuple[str, ...] = ("exact", "linear")


class ActionError(ValueError):
    """An action that cannot be read as portfolio weights (wrong shape, negative, non-finite, all zero)."""


class NonFiniteActionError(ActionError):
    """An action with NaN or infinite entries: the policy that produced it has failed (e.g. a model whose
    parameters blew up), as opposed to a malformed action."""


class PortfolioEnv(gym.Env):
    """Daily rebalancing of ``m`` assets plus cash with proportional transaction costs.

    Args:
        prices: a :class:`PricePanel`, or a DataFrame of close prices (index dates, columns tickers).
        window_size: ``l``, days of history in an observation.
        commission: rate ``c ∈ [0, 1)`` on buying and selling (0.2 % in the papers).
        cost_model: ``"exact"`` (Jiang et al. eq. 14) or ``"linear"`` (``1 − c Σ|w' − w|``).
        start: first decision date (the first panel date on or after it); ``None`` = the first day
            with a full window of history.  The window of the first decision may reach before
            ``start``: history before the trading period is legitimately known at its start.
        end: last date of the period (the last panel date on or before it), on which the last value
            is realized; the last decision is at the close of the day before.  ``None`` = the panel's end.
        episode_length: number of steps per episode; ``None`` = the whole period.  With it, ``reset``
            draws the first decision day uniformly among those leaving ``episode_length`` steps.
        initial_value: portfolio value ``P`` at the first decision.
        features: price features of the observation (``close`` always first); ``None`` = all the
            panel's price features (close/high/low/open; volume is not a price and is refused).
        render_mode: only ``None`` is supported.

    Spaces:
        observation ``Dict(history=Box(float32, (features, m, l)), weights=Box(float32, (m + 1,)))``;
        action ``Box(0, 1, (m + 1,), float32)``, cash first, normalized to sum 1 by the environment.

    ``info`` after a step holds ``portfolio_value`` (``P_{t+1}``), ``mu`` (``μ_t``), ``turnover``
    (``Σ_{i≥1} |w'_{i,t} − w_{i,t}|``), ``date`` (date of ``t + 1``, when the value is realized) and
    ``holdings`` (``w'_{t+1}``).  After ``reset`` it holds ``portfolio_value``, ``date`` and ``holdings``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        prices: PricePanel | pd.DataFrame,
        window_size: int = 30,
        commission: float = 0.002,
        cost_model: str = "exact",
        start: object = None,
        end: object = None,
        episode_length: int | None = None,
        initial_value: float = 1.0,
        features: tuple[str, ...] | list[str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None")
        if cost_model not in COST_MODELS:
            raise ValueError(f"unknown cost_model {cost_model!r}; choose one of {COST_MODELS}")
        window_size = check_int(window_size, "window_size", minimum=1)
        if not 0.0 <= float(commission) < 1.0:
            raise ValueError(f"commission must lie in [0, 1), got {commission!r}")
        initial_value = check_number(initial_value, "initial_value", minimum=0.0, strict_min=True)

        panel = _as_panel(prices)
        panel = panel.select_features(_price_features(panel, features))
        panel.require_length(int(window_size))

        self.window_size = int(window_size)
        self.commission = float(commission)
        self.cost_model = cost_model
        self.initial_value = float(initial_value)
        self._panel = panel
        self._first, self._last = _period_bounds(panel, self.window_size, start, end)
        n_steps = self._last - self._first
        self.episode_length = (
            None
            if episode_length is None
            else check_int(episode_length, "episode_length (period steps)", minimum=1, maximum=n_steps)
        )

        # Everything step() reads is computed once here: no I/O and no pandas in the loop.
        self._values = np.ascontiguousarray(panel.values)
        relatives = panel.price_relatives()  # row t holds y_{t+1}
        self._relatives = np.concatenate([np.ones((len(relatives), 1)), relatives], axis=1)
        self._relatives.setflags(write=False)

        m = panel.n_assets
        self.observation_space = spaces.Dict(
            {
                "history": spaces.Box(0.0, np.inf, (panel.n_features, m, self.window_size), np.float32),
                "weights": spaces.Box(0.0, 1.0, (m + 1,), np.float32),
            }
        )
        self.action_space = spaces.Box(0.0, 1.0, (m + 1,), np.float32)
        self.render_mode = render_mode

        self._t = -1  # current decision day; -1 until reset
        self._stop = -1  # the episode terminates when _t reaches _stop
        self._value = self.initial_value
        self._holdings = _all_cash(m)
        self._last_action = _all_cash(m)

    # ------------------------------------------------------------------ read-only views
    @property
    def panel(self) -> PricePanel:
        """The price panel, restricted to the observed features (all dates, history included)."""
        return self._panel

    @property
    def tickers(self) -> tuple[str, ...]:
        return self._panel.tickers

    @property
    def n_assets(self) -> int:
        """``m``, the number of risky assets (actions have ``m + 1`` entries)."""
        return self._panel.n_assets

    @property
    def features(self) -> tuple[str, ...]:
        return self._panel.features

    @property
    def n_steps(self) -> int:
        """Steps in the whole trading period (= its number of price relatives)."""
        return self._last - self._first

    @property
    def dates(self) -> pd.DatetimeIndex:
        """The ``n_steps + 1`` dates of the trading period.

        ``dates[:-1]`` are the decision dates (closes at which weights are chosen), ``dates[1:]`` the
        value dates (closes at which each step's value is realized); the initial value belongs to
        ``dates[0]``.
        """
        return self._panel.dates[self._first : self._last + 1]

    @property
    def price_relatives(self) -> np.ndarray:
        """``(n_steps, m + 1)`` price relatives of the period, cash first (column 0 is 1).

        Row ``k`` is ``y`` from ``dates[k]`` to ``dates[k + 1]``.
        """
        return self._relatives[self._first : self._last]

    @property
    def portfolio_value(self) -> float:
        return self._value

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode: all cash, value ``initial_value``.

        The first decision day is ``options["start"]`` (a date: the first panel date on or after it)
        when given; otherwise a uniform draw with ``self.np_random`` when ``episode_length`` is set;
        otherwise the start of the trading period.
        """
        super().reset(seed=seed)
        unknown = set(options or {}) - {"start"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; only 'start' is supported")
        length = self.episode_length
        latest_start = self._last - (length or 1)
        if options and options.get("start") is not None:
            first = self._decision_index(options["start"], latest_start)
        elif length is not None:
            first = int(self.np_random.integers(self._first, latest_start + 1))
        else:
            first = self._first
        self._t = first
        self._stop = self._last if length is None else first + length
        self._value = self.initial_value
        m = self.n_assets
        self._holdings = _all_cash(m)
        self._last_action = _all_cash(m)
        info = {
            "portfolio_value": self._value,
            "date": self._panel.dates[first],
            "holdings": self._holdings.copy(),
        }
        return self._observation(), info

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Rebalance to ``action`` at the close of day ``t`` and move to the close of ``t + 1``."""
        if self._t < 0 or self._t >= self._stop:
            raise RuntimeError("the episode is over (or never started): call reset() before step()")
        w = self._normalize(action)
        w_drifted = self._holdings
        mu = transaction_remainder(w_drifted, w, self.commission, exact=self.cost_model == "exact")
        y = self._relatives[self._t]
        growth = float(y @ w)
        self._value *= mu * growth
        reward = float(np.log(mu * growth))
        self._holdings = y * w / growth
        self._last_action = w
        self._t += 1
        info = {
            "portfolio_value": self._value,
            "mu": mu,
            "turnover": float(np.abs(w_drifted[1:] - w[1:]).sum()),
            "date": self._panel.dates[self._t],
            "holdings": self._holdings.copy(),
        }
        return self._observation(), reward, self._t == self._stop, False, info

    # ------------------------------------------------------------------ internals
    def _observation(self) -> dict[str, np.ndarray]:
        return {
            "history": price_windows(self._values, self._t, self.window_size),
            "weights": self._last_action.astype(np.float32),
        }

    def _normalize(self, action: np.ndarray) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64)
        expected = (self.n_assets + 1,)
        if a.shape != expected:
            raise ActionError(f"action must have shape {expected} (cash first), got {a.shape}")
        if not np.isfinite(a).all():
            raise NonFiniteActionError(f"action has non-finite entries {a[~np.isfinite(a)]} in {a}")
        if (a < 0).any():
            raise ActionError(f"action has negative entries {a[a < 0]} in {a}")
        total = a.sum()
        if total <= 0:
            raise ActionError(f"action {a} is all zero: it cannot be normalized to portfolio weights")
        return a / total

    def _decision_index(self, date: object, latest: int) -> int:
        stamp = parse_date(date, "reset start")
        idx = int(self._panel.dates.searchsorted(stamp, side="left"))
        if not self._first <= idx <= latest:
            first_ok, last_ok = self._panel.dates[self._first], self._panel.dates[latest]
            raise ValueError(
                f"reset start {stamp.date()} is outside the admissible first decision days "
                f"[{first_ok.date()}, {last_ok.date()}]"
            )
        return idx


def _as_panel(prices: PricePanel | pd.DataFrame) -> PricePanel:
    if isinstance(prices, PricePanel):
        return prices
    if isinstance(prices, pd.DataFrame):
        return PricePanel.from_close(prices)
    raise TypeError(
        f"prices must be a PricePanel or a DataFrame of close prices, got {type(prices).__name__}"
    )


def _price_features(panel: PricePanel, features: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    if features is None:
        return tuple(f for f in panel.features if f in PRICE_FEATURES)
    not_prices = [f for f in features if f not in PRICE_FEATURES]
    if not_prices:
        raise ValueError(
            f"feature {not_prices[0]!r} is not a price feature {PRICE_FEATURES}: it cannot be normalized "
            "by the latest close"
        )
    return tuple(features)


def _period_bounds(panel: PricePanel, window: int, start: object, end: object) -> tuple[int, int]:
    """Panel row indices of the first decision day and of the last value day of the trading period."""
    dates = panel.dates
    start_ts = None if start is None else parse_date(start, "start")
    end_ts = None if end is None else parse_date(end, "end")
    if start_ts is not None and end_ts is not None and start_ts > end_ts:
        raise ValueError(f"start {start_ts.date()} is after end {end_ts.date()}")
    last = len(dates) - 1 if end_ts is None else int(dates.searchsorted(end_ts, side="right")) - 1
    if last < 0:
        raise DataError(f"end {end_ts.date()} is before the first date {dates[0].date()} of the panel")
    if start_ts is None:
        first = window - 1
    else:
        first = int(dates.searchsorted(start_ts, side="left"))
        if first < window - 1:
            raise DataError(
                f"start {start_ts.date()} has {first} day(s) of history before it; a window of {window} "
                f"needs {window - 1}"
            )
    if first >= last:
        raise DataError(
            f"the trading period [{start}, {end}] has no price relative after a full window of {window} days "
            f"(panel {dates[0].date()}…{dates[-1].date()})"
        )
    return first, last


def _all_cash(m: int) -> np.ndarray:
    w = np.zeros(m + 1)
    w[0] = 1.0
    return w
