"""The missing-price policy shared by Yahoo Finance downloads and CSV files.

A missing day of a ticker is a day without a close.  Up to ``max_ffill`` consecutive missing days
are filled as *no-trade bars* (open = high = low = close = the last close, volume 0); values are
only ever carried forward, never backward (no look-ahead).  A longer gap, or a ticker with no
price on the first date, is a :class:`DataError` naming the ticker and the date.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from portfed.data.errors import DataError


def check_gaps(missing: np.ndarray, dates: pd.DatetimeIndex, ticker: str, max_ffill: int) -> None:
    """Refuse a ticker whose missing days (``missing``, a boolean per date) the policy cannot fill."""
    if missing.all():
        raise DataError(f"ticker {ticker!r} has no price at all", ticker=ticker)
    first_valid = int(np.argmin(missing))
    if first_valid > 0:
        raise DataError(
            f"ticker {ticker!r} has no price before {dates[first_valid].date()} (the calendar starts "
            f"{dates[0].date()}): it was listed later; choose start >= {dates[first_valid].date()} or drop it "
            "(prices are never filled backwards)",
            ticker=ticker,
            date=dates[first_valid],
        )
    # Runs of missing days: starts where missing switches on, ends where it switches off.
    edges = np.diff(np.concatenate(([0], missing.astype(np.int8), [0])))
    for begin, stop in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        if stop - begin > max_ffill:
            raise DataError(
                f"ticker {ticker!r} misses {stop - begin} consecutive days from {dates[begin].date()}, "
                f"more than max_ffill={max_ffill}",
                ticker=ticker,
                date=dates[begin],
            )


def fill_missing_days(frames: dict[str, pd.DataFrame], max_ffill: int) -> dict[str, pd.DataFrame]:
    """``frames`` (feature → dates × tickers, with ``close``) with every missing close filled by the policy.

    Other features on a filled day take the carried close (volume 0); a missing open, high or low on
    a day that has a close stays missing (the panel refuses it by name).
    """
    close = frames["close"]
    missing = close.isna()
    for ticker in close.columns:
        check_gaps(missing[ticker].to_numpy(), pd.DatetimeIndex(close.index), str(ticker), max_ffill)
    filled_close = close.ffill()
    out = {}
    for name, frame in frames.items():
        if name == "close":
            out[name] = filled_close
        elif name == "volume":
            out[name] = frame.fillna(0.0)
        else:
            out[name] = frame.mask(missing, filled_close)
    return out
