"""The validated price panel: dates × assets × features.

Every source (bundled datasets, Yahoo Finance, CSV) produces a :class:`PricePanel`; everything
downstream (environment, agents, generators) consumes one.  Validation happens once, in the
constructor, so a panel that exists is a panel that is sound: finite positive prices, strictly
increasing unique dates, unique tickers, and ``low <= close <= high`` when the source has highs and
lows.  Every refusal is a :class:`DataError` that names the offending ticker and date.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from portfed.data.errors import DataError
from portfed.validation import check_int, parse_date

#: Canonical feature order.  ``close`` is always present and always first.
FEATURE_ORDER: tuple[str, ...] = ("close", "high", "low", "open", "volume")
#: Features that are prices (normalizable by the latest close); ``volume`` is not.
PRICE_FEATURES: tuple[str, ...] = ("close", "high", "low", "open")

# Relative tolerance for ``low <= close <= high``: vendors round adjusted OHLC independently, so a
# close can sit a hair outside [low, high] after adjustment without being wrong data.
_RANGE_RTOL = 1e-6


@dataclass(frozen=True, eq=False)
class PricePanel:
    """Prices of ``m`` assets on ``T`` dates with ``F`` features, ``values[t, i, f]``.

    Attributes:
        values: float64 array of shape ``(dates, assets, features)``.
        dates: strictly increasing, unique :class:`pandas.DatetimeIndex` of length ``T``.
        tickers: unique asset names, length ``m``.
        features: feature names in :data:`FEATURE_ORDER` order, ``"close"`` first.
        name: a label for tables and plots (dataset name, ``"yahoo"``, file stem…).
    """

    values: np.ndarray
    dates: pd.DatetimeIndex
    tickers: tuple[str, ...]
    features: tuple[str, ...] = ("close",)
    name: str = ""

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=np.float64)
        if values.flags.writeable:
            # Own the data: a caller mutating its array later must not change a validated panel,
            # and freezing below must not freeze the caller's array.
            values = values.copy()
        if values.ndim == 2:
            values = values[:, :, None]
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "dates", pd.DatetimeIndex(self.dates))
        object.__setattr__(self, "tickers", tuple(str(t) for t in self.tickers))
        object.__setattr__(self, "features", tuple(str(f) for f in self.features))
        self._validate()
        values.setflags(write=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_close(cls, close: pd.DataFrame, name: str = "") -> PricePanel:
        """Panel with the single feature ``close`` from a frame (index dates, columns tickers)."""
        _require_frame(close, "close")
        return cls(
            values=close.to_numpy(dtype=np.float64)[:, :, None],
            dates=_as_dates(close.index),
            tickers=tuple(close.columns),
            features=("close",),
            name=name,
        )

    @classmethod
    def from_frames(cls, frames: Mapping[str, pd.DataFrame], name: str = "") -> PricePanel:
        """Panel from one frame per feature (same index and columns), e.g. ``{"close": …, "high": …}``."""
        unknown = [f for f in frames if f not in FEATURE_ORDER]
        if unknown:
            raise DataError(f"unknown feature {unknown[0]!r}; known features are {FEATURE_ORDER}")
        if "close" not in frames:
            raise DataError("a price panel needs a 'close' feature")
        features = tuple(f for f in FEATURE_ORDER if f in frames)
        close = frames["close"]
        _require_frame(close, "close")
        for f in features:
            _require_frame(frames[f], f)
            if not frames[f].index.equals(close.index) or list(frames[f].columns) != list(close.columns):
                raise DataError(f"feature {f!r} is not aligned with 'close' (dates or tickers differ)")
        values = np.stack([frames[f].to_numpy(dtype=np.float64) for f in features], axis=-1)
        return cls(values, _as_dates(close.index), tuple(close.columns), features, name)

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        v, dates, tickers, features = self.values, self.dates, self.tickers, self.features
        if v.ndim != 3:
            raise DataError(f"values must have shape (dates, assets, features), got ndim={v.ndim}")
        if len(tickers) == 0 or v.shape[1] == 0:
            raise DataError("empty universe: a price panel needs at least one asset")
        if v.shape != (len(dates), len(tickers), len(features)):
            raise DataError(
                f"values shape {v.shape} does not match "
                f"(dates={len(dates)}, tickers={len(tickers)}, features={len(features)})"
            )
        if len(dates) == 0:
            raise DataError("a price panel needs at least one date")
        if not features or features[0] != "close":
            raise DataError(f"'close' must be the first feature, got {features}")
        if len(set(features)) != len(features) or any(f not in FEATURE_ORDER for f in features):
            raise DataError(f"features must be distinct names from {FEATURE_ORDER}, got {features}")
        seen: set[str] = set()
        for t in tickers:
            if t in seen:
                raise DataError(f"duplicate ticker {t!r}", ticker=t)
            seen.add(t)
        if dates.hasnans:
            raise DataError("missing date (NaT) in the date index")
        if len(dates) > 1:
            steps = np.diff(dates.asi8)
            bad = np.flatnonzero(steps <= 0)
            if bad.size:
                i = int(bad[0]) + 1
                kind = "duplicate" if steps[bad[0]] == 0 else "unsorted"
                raise DataError(
                    f"{kind} date {dates[i].date()} (follows {dates[i - 1].date()})", date=dates[i]
                )
        for f_idx, f in enumerate(features):
            col = v[:, :, f_idx]
            bad_mask = ~np.isfinite(col) | ((col < 0) if f == "volume" else (col <= 0))
            if bad_mask.any():
                t_idx, a_idx = np.argwhere(bad_mask)[0]
                what = "negative or non-finite volume" if f == "volume" else "non-finite or non-positive price"
                self._fail(f"{what} {float(col[t_idx, a_idx])!r} in {f!r}", int(t_idx), int(a_idx))
        if "high" in features and "low" in features:
            high, low = self.feature("high"), self.feature("low")
            bad_mask = high < low
            if bad_mask.any():
                t_idx, a_idx = np.argwhere(bad_mask)[0]
                self._fail(f"high {high[t_idx, a_idx]} < low {low[t_idx, a_idx]}", int(t_idx), int(a_idx))
            close = self.feature("close")
            tol = _RANGE_RTOL * close
            bad_mask = (close < low - tol) | (close > high + tol)
            if bad_mask.any():
                t_idx, a_idx = np.argwhere(bad_mask)[0]
                self._fail(
                    f"close {close[t_idx, a_idx]} outside [low {low[t_idx, a_idx]}, high {high[t_idx, a_idx]}]",
                    int(t_idx),
                    int(a_idx),
                )

    def _fail(self, message: str, t_idx: int, a_idx: int) -> None:
        ticker, date = self.tickers[a_idx], self.dates[t_idx]
        raise DataError(f"{message} for ticker {ticker!r} on {date.date()}", ticker=ticker, date=date)

    def require_length(self, window: int) -> PricePanel:
        """Refuse a history shorter than ``window + 1`` days (one window plus one price relative)."""
        window = check_int(window, "window", minimum=1, error=DataError)
        if len(self) < window + 1:
            raise DataError(
                f"history of {len(self)} days in panel {self.name!r} is shorter than window + 1 = {window + 1}"
            )
        return self

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return self.values.shape[0]

    @property
    def n_assets(self) -> int:
        return self.values.shape[1]

    @property
    def n_features(self) -> int:
        return self.values.shape[2]

    def feature(self, name: str) -> np.ndarray:
        """The ``(dates, assets)`` array of one feature."""
        if name not in self.features:
            raise DataError(f"feature {name!r} not in panel {self.name!r} (has {self.features})")
        return self.values[:, :, self.features.index(name)]

    @property
    def close(self) -> pd.DataFrame:
        """Close prices as a frame (index dates, columns tickers)."""
        return pd.DataFrame(self.feature("close"), index=self.dates, columns=list(self.tickers))

    def price_relatives(self) -> np.ndarray:
        """``y_{t+1} = v_{t+1} / v_t`` of the close, shape ``(dates − 1, assets)`` (no cash column)."""
        close = self.feature("close")
        return close[1:] / close[:-1]

    # ------------------------------------------------------------------ sub-panels
    def select(self, tickers: Sequence[str]) -> PricePanel:
        """Sub-panel with these tickers, in this order."""
        missing = [t for t in tickers if t not in self.tickers]
        if missing:
            raise DataError(f"ticker {missing[0]!r} not in panel {self.name!r}", ticker=missing[0])
        idx = [self.tickers.index(t) for t in tickers]
        return PricePanel(self.values[:, idx, :], self.dates, tuple(tickers), self.features, self.name)

    def select_features(self, features: Iterable[str]) -> PricePanel:
        """Sub-panel with these features (kept in canonical order; ``close`` is always kept)."""
        wanted = set(features) | {"close"}
        missing = [f for f in wanted if f not in self.features]
        if missing:
            raise DataError(f"feature {missing[0]!r} not in panel {self.name!r} (has {self.features})")
        keep = tuple(f for f in self.features if f in wanted)
        idx = [self.features.index(f) for f in keep]
        return PricePanel(self.values[:, :, idx], self.dates, self.tickers, keep, self.name)

    def iloc(self, rows: slice) -> PricePanel:
        """Sub-panel of a positional date slice."""
        return PricePanel(self.values[rows], self.dates[rows], self.tickers, self.features, self.name)

    def between(self, start: object = None, end: object = None) -> PricePanel:
        """Sub-panel of the dates in ``[start, end]`` (inclusive; ``None`` = open end)."""
        mask = np.ones(len(self), dtype=bool)
        if start is not None:
            mask &= self.dates >= parse_date(start, "start date", error=DataError)
        if end is not None:
            mask &= self.dates <= parse_date(end, "end date", error=DataError)
        if not mask.any():
            raise DataError(f"no dates of panel {self.name!r} in [{start}, {end}]")
        idx = np.flatnonzero(mask)
        return self.iloc(slice(int(idx[0]), int(idx[-1]) + 1))

    def with_name(self, name: str) -> PricePanel:
        return PricePanel(self.values, self.dates, self.tickers, self.features, name)

    def __repr__(self) -> str:
        span = f"{self.dates[0].date()}…{self.dates[-1].date()}" if len(self) else "empty"
        return (
            f"PricePanel(name={self.name!r}, dates={len(self)} [{span}], assets={self.n_assets}, "
            f"features={self.features})"
        )


def _require_frame(frame: object, what: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"{what} must be a pandas DataFrame, got {type(frame).__name__}")
    if frame.shape[1] == 0:
        raise DataError("empty universe: the frame has no ticker columns")


def _as_dates(index: pd.Index) -> pd.DatetimeIndex:
    try:
        return pd.DatetimeIndex(pd.to_datetime(index))
    except (ValueError, TypeError) as exc:
        raise DataError(f"the index cannot be read as dates: {exc}") from exc
