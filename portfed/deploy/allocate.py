"""Tomorrow's target weights from a trained party's deployed model and the latest prices.

At the close of the as-of day ``t`` the deployed policy reads the window of the party's last ``l``
closes (and the other features of ``agent.features``) up to ``t`` — normalized by the environment's
own observation builder, :func:`portfed.envs.windows.price_windows` — and the current portfolio
``w_{t−1}`` (cash first), and returns the portfolio ``w_t`` to hold over the next trading day
(Jiang et al. 2017 §5: the same greedy decision the backtest makes each day, through the same
:class:`~portfed.agents.EIIEPolicy`).

**Current weights.**  ``current`` when given; else the model's own target from the last backtest
decision day before ``t`` (``weights.csv``), so on a day of the backtest the allocation equals the
backtest's decision; before the backtest's first decision (or when it failed) the portfolio is all
cash, as at the start of the backtest.

**Refused weights**: the target weights must be finite, ``>= 0`` and sum to 1
(:func:`check_target_weights`), else :class:`~portfed.deploy.errors.TargetWeightsError` and nothing is
written — a deployed model whose parameters blew up never reaches a desk as NaN weights.

**Refused windows** (typed, :mod:`portfed.deploy.errors`): missing tickers; fewer than ``l`` days up to
``t``; two consecutive days more than ``max_gap_days`` business days apart (a normal weekend is 1,
a one-day holiday 2); a last day older than ``t`` by more than ``max_stale_days`` business days.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import atomic_save, atomic_write_text
from portfed.data import PricePanel
from portfed.deploy.errors import (
    MissingTickersError,
    PriceGapError,
    ShortHistoryError,
    StalePricesError,
    TargetWeightsError,
)
from portfed.deploy.trained import TrainedParty
from portfed.envs.windows import price_windows
from portfed.experiment.party import CASH
from portfed.validation import check_int, parse_date

#: Default tolerances of :func:`price_window`, in business days.
DEFAULT_MAX_GAP_DAYS = 4
DEFAULT_MAX_STALE_DAYS = 3
#: How far from 1 current weights may sum.
_SUM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Allocation:
    """The target weights ``weights`` (cash first, then ``tickers``) decided at the close of ``date`` for the
    next trading day, from the ``current`` weights; ``as_of`` is the date asked for (``date`` is the
    window's last day, at most ``max_stale_days`` business days before it)."""

    algorithm: str
    party: int
    as_of: pd.Timestamp
    date: pd.Timestamp
    tickers: tuple[str, ...]
    weights: np.ndarray
    current: np.ndarray
    input_scale: str

    @property
    def assets(self) -> list[str]:
        return [CASH, *self.tickers]

    def frame(self) -> pd.DataFrame:
        """One row per asset (cash first): ``weight``, ``current`` and ``change = weight − current``."""
        return pd.DataFrame({"asset": self.assets, "weight": self.weights, "current": self.current,
                             "change": self.weights - self.current})

    def to_json(self) -> dict[str, object]:
        return {"algorithm": self.algorithm, "party": self.party, "as_of": str(self.as_of.date()),
                "prices_through": str(self.date.date()), "input_scale": self.input_scale,
                "weights": dict(zip(self.assets, map(float, self.weights), strict=True)),
                "current": dict(zip(self.assets, map(float, self.current), strict=True))}


def price_window(prices: PricePanel, tickers: tuple[str, ...], features: tuple[str, ...], window: int,
                 as_of: object = None, *, max_gap_days: int = DEFAULT_MAX_GAP_DAYS,
                 max_stale_days: int = DEFAULT_MAX_STALE_DAYS) -> tuple[PricePanel, pd.Timestamp]:
    """The last ``window`` days of ``prices`` up to ``as_of`` (default: the last date), restricted to
    ``tickers`` (in that order) and ``features``; and ``as_of``.  Refusals in the module docstring."""
    window = check_int(window, "window", minimum=1)
    max_gap_days = check_int(max_gap_days, "max_gap_days", minimum=1)
    max_stale_days = check_int(max_stale_days, "max_stale_days", minimum=0)
    missing = [t for t in tickers if t not in prices.tickers]
    if missing:
        raise MissingTickersError(f"the prices ({prices.name or 'unnamed'}) lack the party's ticker(s) {missing}; "
                                  f"the model trades {list(tickers)}", missing)
    panel = prices.select(list(tickers)).select_features(features)
    day = prices.dates[-1] if as_of is None else parse_date(as_of, "as-of date")
    upto = int(np.searchsorted(panel.dates, day, side="right"))
    if upto < window:
        raise ShortHistoryError(f"the model needs {window} days of prices up to {day.date()}; the prices hold "
                                f"{upto}", date=day)
    panel = panel.iloc(slice(upto - window, upto))
    last = panel.dates[-1]
    stale = int(np.busday_count(last.date(), day.date()))
    if stale > max_stale_days:
        raise StalePricesError(f"the latest prices are of {last.date()}, {stale} business days before the as-of "
                               f"date {day.date()} (at most {max_stale_days} allowed)", date=last)
    days = panel.dates.to_numpy(dtype="datetime64[D]")
    apart = np.busday_count(days[:-1], days[1:])
    if (apart > max_gap_days).any():
        i = int(np.flatnonzero(apart > max_gap_days)[0])
        raise PriceGapError(f"the price window has a gap: {panel.dates[i].date()} is followed by "
                            f"{panel.dates[i + 1].date()}, {int(apart[i])} business days later (at most "
                            f"{max_gap_days} allowed)", date=panel.dates[i + 1])
    return panel, day


def read_current(path: str | Path, assets: list[str]) -> np.ndarray:
    """Current weights from a JSON object ``{asset: weight}`` or a CSV with columns ``asset, weight``
    (an allocation's own files qualify), in the order of ``assets`` (cash first).

    Raises:
        ValueError: a missing or unknown asset, a negative or non-finite weight, or a sum other than 1.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"current weights file {file} does not exist")
    if file.suffix.lower() == ".json":
        raw = json.loads(file.read_text())
        given = raw.get("weights", raw) if isinstance(raw, dict) else raw
        if not isinstance(given, dict):
            raise ValueError(f"{file} must hold a JSON object {{asset: weight}}")
    else:
        table = pd.read_csv(file)
        if not {"asset", "weight"} <= set(table.columns):
            raise ValueError(f"{file} must have the columns asset, weight; it has {list(table.columns)}")
        given = dict(zip(table["asset"].astype(str), table["weight"], strict=True))
    unknown = sorted(set(given) - set(assets))
    missing = [a for a in assets if a not in given]
    if unknown or missing:
        raise ValueError(f"current weights in {file}: unknown asset(s) {unknown}, missing {missing}; "
                         f"the portfolio is {assets}")
    weights = np.array([float(given[a]) for a in assets])
    if not np.all(np.isfinite(weights)) or (weights < 0).any():
        raise ValueError(f"current weights in {file} must be finite and >= 0, got {weights.tolist()}")
    if abs(weights.sum() - 1.0) > _SUM_TOLERANCE:
        raise ValueError(f"current weights in {file} sum to {weights.sum()!r}, not 1")
    return weights


def check_target_weights(weights: np.ndarray, assets: list[str]) -> np.ndarray:
    """``weights`` (one per asset of ``assets``, cash first) as float64, if a desk may trade them: finite,
    ``>= 0`` and summing to 1 within :data:`_SUM_TOLERANCE`.

    Raises:
        TargetWeightsError: naming the assets whose weights are not finite or negative, or the sum.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (len(assets),):
        raise TargetWeightsError(f"the model gave {weights.shape} target weights for the {len(assets)} assets "
                                 f"{assets}")
    bad = [a for a, w in zip(assets, weights, strict=True) if not np.isfinite(w)]
    if bad:
        raise TargetWeightsError(f"the deployed model's target weights are not finite for {bad} (its parameters "
                                 "blew up or are not finite): nothing to trade, nothing written")
    negative = [a for a, w in zip(assets, weights, strict=True) if w < 0]
    if negative:
        raise TargetWeightsError(f"the deployed model's target weights are negative for {negative}: nothing written")
    if abs(weights.sum() - 1.0) > _SUM_TOLERANCE:
        raise TargetWeightsError(f"the deployed model's target weights sum to {weights.sum()!r}, not 1: "
                                 "nothing written")
    return weights


def backtest_current(trained: TrainedParty, date: pd.Timestamp) -> np.ndarray:
    """The model's own target from the last backtest decision day before ``date``; all cash without one."""
    cash = np.zeros(len(trained.tickers) + 1)
    cash[0] = 1.0
    if trained.backtest is None:
        return cash
    before = trained.backtest[trained.backtest.index < date]
    return cash if before.empty else before[[CASH, *trained.tickers]].iloc[-1].to_numpy(dtype=np.float64)


def allocate(trained: TrainedParty, prices: PricePanel | None = None, as_of: object = None,
             current: np.ndarray | None = None, *, max_gap_days: int = DEFAULT_MAX_GAP_DAYS,
             max_stale_days: int = DEFAULT_MAX_STALE_DAYS, held: np.ndarray | None = None) -> Allocation:
    """The deployed policy's portfolio for the trading day after ``as_of`` (module docstring).

    ``prices``: default the run's own market (the bundled data it trained on); ``as_of``: default the
    prices' last date; ``current``: ``(m + 1,)`` weights, cash first (default: the backtest's).  With risk
    limits (:mod:`portfed.agents.limits`) the turnover is measured from ``held``, the book at the as-of
    close when known exactly (``portfed orders`` values it from the shares), else ``current`` drifted over
    the window's last day.
    """
    agent = trained.agent
    panel, day = price_window(trained.market.panel if prices is None else prices, trained.tickers,
                              agent.features, agent.window, as_of, max_gap_days=max_gap_days,
                              max_stale_days=max_stale_days)
    date = panel.dates[-1]
    previous = backtest_current(trained, date) if current is None else np.asarray(current, dtype=np.float64)
    if previous.shape != (len(trained.tickers) + 1,):
        raise ValueError(f"current weights have shape {previous.shape}; expected ({len(trained.tickers) + 1},), "
                         "cash first")
    history = price_windows(panel.values, len(panel) - 1, agent.window)
    book = {} if held is None else {"holdings": np.asarray(held, dtype=np.float64)}
    weights = check_target_weights(trained.policy().act({"history": history, "weights": previous, **book}),
                                   [CASH, *trained.tickers])
    return Allocation(trained.algorithm, trained.party, day, date, trained.tickers, weights, previous,
                      trained.input_scale)


def write_allocation(allocation: Allocation, out_dir: str | Path) -> tuple[Path, Path]:
    """``<algorithm>_party_<k>_<date>.csv`` (:meth:`Allocation.frame`) and ``.json`` in ``out_dir``, atomically;
    nothing when the weights fail :func:`check_target_weights`."""
    out = Path(out_dir)
    stem = f"{allocation.algorithm}_party_{allocation.party}_{allocation.as_of.date()}"
    frame = allocation.frame()
    check_target_weights(allocation.weights, allocation.assets)
    text = json.dumps(allocation.to_json(), indent=2, allow_nan=False) + "\n"  # strict JSON: no NaN, no Infinity
    csv = atomic_save(out / f"{stem}.csv", lambda p: frame.to_csv(p, index=False))
    return csv, atomic_write_text(out / f"{stem}.json", text)
