"""Price panels from CSV files, and the long CSV format used for exports and the Yahoo cache.

Two layouts are read:

* **wide**: the first column holds the dates, every other column is one ticker's close price::

      date,AAPL,MSFT
      2019-01-02,157.92,101.12

* **long**: one value per row, columns ``date, ticker, field, value`` with ``field`` among
  ``close, high, low, open, volume`` (the panel's features; ``close`` is required)::

      date,ticker,field,value
      2019-01-02,AAPL,close,157.92

The long layout is what :func:`save_csv_long` writes: human readable, any number of features,
and exact (floats are written with round-trip precision).

A missing price (an empty cell, ``nan``, or a long-layout row absent for one ticker and date) is
refused by default, naming the ticker and the date.  ``max_ffill=n`` applies the missing-price policy
of Yahoo downloads instead (:mod:`portfed.data.gaps`): at most ``n`` consecutive missing days per
ticker are filled forward as no-trade bars, never backwards.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from portfed._io import atomic_save
from portfed.data.errors import DataError
from portfed.data.gaps import fill_missing_days
from portfed.data.panel import FEATURE_ORDER, PricePanel
from portfed.validation import check_int

Layout = Literal["auto", "wide", "long"]
LONG_COLUMNS: tuple[str, ...] = ("date", "ticker", "field", "value")


def load_csv(path: str | os.PathLike[str], *, layout: Layout = "auto", name: str | None = None,
             max_ffill: int | None = None) -> PricePanel:
    """Read a wide or long CSV file into a :class:`PricePanel` (named after the file stem by default).

    ``layout="auto"`` picks *long* when the header holds ``date, ticker, field, value`` and *wide*
    otherwise.  ``max_ffill``: ``None`` refuses any missing price; ``n`` fills at most ``n``
    consecutive missing days per ticker forward (module docstring).  Raises :class:`DataError` for a
    missing file, missing columns, unparseable dates, non-numeric values, unknown fields, a gap longer
    than ``max_ffill``, and everything :class:`PricePanel` refuses.
    """
    file = Path(path)
    if layout not in ("auto", "wide", "long"):
        raise DataError(f"layout must be 'auto', 'wide' or 'long', got {layout!r}")
    if max_ffill is not None:
        max_ffill = check_int(max_ffill, "max_ffill", minimum=0, error=DataError)
    if not file.is_file():
        raise DataError(f"CSV file not found: {file}")
    try:
        # Everything is read as text: tickers such as "NA" must not become NaN, and the header is
        # read as a plain row so that a duplicated ticker column is refused, not renamed "X.1".
        table = pd.read_csv(file, dtype=str, keep_default_na=False, header=None)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot parse CSV file {file}: {exc}") from exc
    header = [str(c) for c in table.iloc[0]]
    raw = table.iloc[1:].reset_index(drop=True)
    raw.columns = pd.Index(header)
    label = file.stem if name is None else name
    if layout == "auto":
        layout = "long" if set(LONG_COLUMNS) <= {c.strip().lower() for c in header} else "wide"
    frames = _from_long(raw, file) if layout == "long" else _from_wide(raw, file)
    if max_ffill is not None:
        frames = fill_missing_days(frames, max_ffill)
    return PricePanel.from_frames(frames, name=label)


def save_csv_long(panel: PricePanel, path: str | os.PathLike[str]) -> Path:
    """Write ``panel`` to ``path`` in the long layout, atomically; returns the path.

    Rows are ordered by date, then ticker (panel order), then feature (canonical order), so
    :func:`load_csv` restores the same panel exactly.
    """
    t, m, f = panel.values.shape
    frame = pd.DataFrame(
        {
            "date": np.repeat(panel.dates.strftime("%Y-%m-%d"), m * f),
            "ticker": np.tile(np.repeat(np.asarray(panel.tickers, dtype=object), f), t),
            "field": np.tile(np.asarray(panel.features, dtype=object), t * m),
            "value": panel.values.reshape(-1),
        }
    )
    return atomic_save(path, lambda tmp: frame.to_csv(tmp, index=False))


def _from_wide(raw: pd.DataFrame, file: Path) -> dict[str, pd.DataFrame]:
    if raw.shape[1] < 2:
        raise DataError(f"wide CSV {file} needs a date column and at least one ticker column")
    dates = _parse_dates(raw.iloc[:, 0], file)
    tickers = list(raw.columns[1:])
    dup = next((t for i, t in enumerate(tickers) if t in tickers[:i]), None)
    if dup is not None:
        raise DataError(f"duplicate ticker {dup!r}", ticker=dup)
    columns = [_parse_numbers(raw.iloc[:, j + 1], file, dates, ticker=t) for j, t in enumerate(tickers)]
    return {"close": pd.DataFrame(np.stack(columns, axis=1), index=dates, columns=tickers)}


def _from_long(raw: pd.DataFrame, file: Path) -> dict[str, pd.DataFrame]:
    raw = raw.rename(columns={c: c.strip().lower() for c in raw.columns})
    missing = [c for c in LONG_COLUMNS if c not in raw.columns]
    if missing:
        raise DataError(f"long CSV {file} lacks column(s) {missing}; it needs {list(LONG_COLUMNS)}")
    if raw.empty:
        raise DataError(f"long CSV {file} has no rows")
    fields = raw["field"].str.strip().str.lower()
    unknown = sorted(set(fields) - set(FEATURE_ORDER))
    if unknown:
        raise DataError(f"unknown field {unknown[0]!r} in {file}; fields must be among {FEATURE_ORDER}")
    dates = _parse_dates(raw["date"], file)
    tickers = raw["ticker"]
    values = _parse_numbers(raw["value"], file, dates, tickers=tickers)
    long = pd.DataFrame(
        {"date": dates, "ticker": tickers.to_numpy(), "field": fields.to_numpy(), "value": values}
    )
    dup = long.duplicated(["date", "ticker", "field"])
    if dup.any():
        row = long[dup].iloc[0]
        raise DataError(
            f"duplicate row for ticker {row.ticker!r}, field {row.field!r} on {row.date.date()} in {file}",
            ticker=row.ticker,
            date=row.date,
        )
    ticker_order = list(dict.fromkeys(tickers))
    frames = {}
    for field, part in long.groupby("field", sort=False):
        wide = part.pivot(index="date", columns="ticker", values="value")
        # A (date, ticker) pair absent from the file becomes NaN, which the panel refuses by name.
        frames[field] = wide.reindex(index=sorted(set(long["date"])), columns=ticker_order)
    return frames


def _parse_dates(column: pd.Series, file: Path) -> pd.DatetimeIndex:
    parsed = pd.to_datetime(column.str.strip(), errors="coerce", format="mixed")
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        row = int(bad[0])
        raise DataError(f"unparseable date {column.iloc[row]!r} in data row {row + 1} of {file}")
    return pd.DatetimeIndex(parsed)


def _parse_numbers(
    column: pd.Series,
    file: Path,
    dates: pd.DatetimeIndex,
    *,
    ticker: str | None = None,
    tickers: pd.Series | None = None,
) -> np.ndarray:
    text = column.str.strip()
    text = text.where(text != "", "nan")
    # An empty cell is a missing value (NaN, refused later by the panel with ticker and date);
    # anything else that is not a number is refused here.
    coerced = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(np.isnan(coerced) & (text.str.lower() != "nan").to_numpy())
    if bad.size:
        row = int(bad[0])
        who = ticker if tickers is None else tickers.iloc[row]
        raise DataError(
            f"non-numeric value {column.iloc[row]!r} for ticker {who!r} on {dates[row].date()} in {file}",
            ticker=who,
            date=dates[row],
        )
    # Python's float() parses exactly (pd.to_numeric can be off in the last bit), so a long CSV
    # written by save_csv_long reads back bit for bit.
    return text.astype(np.float64).to_numpy()
