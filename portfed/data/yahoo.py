"""Daily adjusted OHLCV from Yahoo Finance (via ``yfinance``), cleaned and cached on disk.

Missing-data policy (version :data:`POLICY_VERSION`; a change of policy changes every cache key):

* **Calendar**: the union of the trading days of all tickers (yfinance already aligns them so).
* **A missing day** of a ticker is a day without a close.  Up to ``max_ffill`` consecutive missing
  days are filled as *no-trade bars*: open = high = low = close = the last close, volume 0.
  Values are only ever carried forward, never backward (no look-ahead).
* **A longer gap** (including one that runs to the end) is refused: :class:`DataError` naming the
  ticker and the gap's first date.
* **Leading missing days** (a ticker listed after ``start``, or whose history starts later) are
  refused, naming the ticker and its first available date: trimming every other ticker to the
  latest start silently would change the experiment's period, so the caller chooses a later
  ``start`` or drops the ticker.
* **Volume** missing on a day that has a close is 0 (no trading).  A missing open, high or low on a
  day that has a close is left missing, and the panel refuses it naming ticker and date.
* An **unknown ticker** (yfinance returns all-NaN or no columns for it), an **empty download** or a
  **failing downloader** (no network) is a :class:`DataSourceError` that points to the bundled
  datasets (``portfed data list``) as the offline alternative.

Prices are split- and dividend-adjusted (``auto_adjust=True``).  ``end`` is inclusive here
(yfinance's own ``end`` is exclusive, so one day is added when calling it).

Cache: one long-layout CSV (see :mod:`portfed.data.csv_source`) per request under ``cache_dir``
(default ``$PORTFED_CACHE_DIR/yahoo``, else ``~/.cache/portfed/yahoo``; created ``0o700``, and refused —
as a file in it — when another user owns it or others may write it), named by a hash of the
sorted tickers, ``start``, ``end``, ``max_ffill`` and the policy version, written atomically.  A
repeated request reads the file and never calls the downloader; ``refresh=True`` downloads again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from portfed._io import cache_root, check_private, private_dir
from portfed.data.csv_source import load_csv, save_csv_long
from portfed.data.errors import DataError, DataSourceError
from portfed.data.gaps import fill_missing_days
from portfed.data.panel import FEATURE_ORDER, PricePanel
from portfed.validation import check_int, parse_date

#: Version of the missing-data policy above; part of every cache key.
POLICY_VERSION = 1
DEFAULT_MAX_FFILL = 5
#: yfinance column names → panel feature names.
_YAHOO_FIELDS: dict[str, str] = {
    "Close": "close",
    "High": "high",
    "Low": "low",
    "Open": "open",
    "Volume": "volume",
}
_OFFLINE_HINT = "offline, use a bundled dataset instead (list them with `portfed data list`)"

#: A callable with the signature of ``yfinance.download``.
Downloader = Callable[..., pd.DataFrame | None]


def default_cache_dir() -> Path:
    """``$PORTFED_CACHE_DIR/yahoo`` when that variable is set, else ``~/.cache/portfed/yahoo``."""
    return cache_root() / "yahoo"


def cache_key(tickers: Iterable[str], start: pd.Timestamp, end: pd.Timestamp, max_ffill: int) -> str:
    """Hex digest naming the cache file of one request (ticker order does not matter)."""
    request = {
        "tickers": sorted(tickers),
        "start": start.strftime("%Y-%m-%d"),
        "end": end.strftime("%Y-%m-%d"),
        "max_ffill": max_ffill,
        "policy": POLICY_VERSION,
    }
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:20]


def fetch_yahoo(
    tickers: str | Iterable[str],
    start: object,
    end: object,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    max_ffill: int = DEFAULT_MAX_FFILL,
    refresh: bool = False,
    download: Downloader | None = None,
) -> PricePanel:
    """Adjusted daily OHLCV of ``tickers`` on ``[start, end]`` as a :class:`PricePanel` named ``"yahoo"``.

    Args:
        tickers: one symbol or several; upper-cased as Yahoo does.  The panel keeps this order.
        start, end: first and last calendar day wanted (inclusive), anything ``pd.Timestamp`` reads.
        cache_dir: where cached requests live (default :func:`default_cache_dir`).
        max_ffill: the longest run of missing days forward-filled per ticker (module docstring).
        refresh: ignore a cached copy, download again and overwrite it.
        download: a callable with ``yfinance.download``'s signature (tests inject a fake);
            ``None`` uses ``yfinance.download``.

    Raises:
        DataSourceError: download failed, came back empty, or a ticker is unknown.
        DataError: bad arguments, a gap longer than ``max_ffill``, a late-listed ticker, or bad prices.
    """
    symbols = _normalize_tickers(tickers)
    first, last = _as_day(start, "start"), _as_day(end, "end")
    if last < first:
        raise DataError(f"end {last.date()} is before start {first.date()}")
    max_ffill = check_int(max_ffill, "max_ffill", minimum=0, error=DataError)
    directory = Path(cache_dir or default_cache_dir())
    cache_file = directory / f"{cache_key(symbols, first, last, max_ffill)}.csv"
    try:  # prices another user could have planted are never read (portfed._io: caches are private)
        if directory.exists():
            check_private(directory, "Yahoo cache directory")
        if cache_file.is_file():
            check_private(cache_file, "cached Yahoo prices")
    except OSError as exc:
        raise DataSourceError(str(exc)) from exc
    if cache_file.is_file() and not refresh:
        return load_csv(cache_file, layout="long", name="yahoo").select(symbols)
    with _yfinance_log_captured() as log:
        raw = _download(download, symbols, first, last)
    try:
        panel = panel_from_download(raw, symbols, max_ffill=int(max_ffill))
    except DataSourceError as exc:
        if not log:
            raise
        # yfinance logs per-ticker failures (DNS errors, "possibly delisted") instead of raising:
        # its first most severe complaint tells the user why, in the one error line.
        worst = max(log, key=lambda record: record.levelno)
        reason = " ".join(worst.getMessage().split())[:300]
        raise DataSourceError(f"{exc} (yfinance reported: {reason})", ticker=exc.ticker) from exc
    except DataError:
        _replay(log)
        raise
    _replay(log)
    try:
        private_dir(directory, "Yahoo cache directory")
    except OSError as exc:
        raise DataSourceError(str(exc)) from exc
    save_csv_long(panel, cache_file)
    return panel


def panel_from_download(raw: pd.DataFrame | None, tickers: tuple[str, ...], *, max_ffill: int) -> PricePanel:
    """Apply the missing-data policy (module docstring) to a ``yfinance.download`` result.

    ``raw`` has ``(Price, Ticker)`` MultiIndex columns (``group_by="column"``), or flat price columns
    for a single ticker downloaded with ``multi_level_index=False``.
    """
    if raw is None or raw.shape[0] == 0 or raw.shape[1] == 0 or not raw.notna().to_numpy().any():
        raise DataSourceError(
            f"Yahoo Finance returned no data for {list(tickers)} (no network, or unknown symbols); {_OFFLINE_HINT}"
        )
    fields = _field_frames(raw, tickers)
    close = fields["close"]
    unknown = [t for t in tickers if not close[t].notna().any()]
    if unknown:
        raise DataSourceError(
            f"Yahoo Finance returned no prices for ticker(s) {unknown}: unknown or delisted symbol, "
            f"or no network; {_OFFLINE_HINT}",
            ticker=unknown[0],
        )
    frames = fill_missing_days(fields, max_ffill)
    return PricePanel.from_frames(frames, name="yahoo")


def _field_frames(raw: pd.DataFrame, tickers: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    """``{feature: (dates × tickers) frame}`` from either yfinance column layout."""
    columns = raw.columns
    if isinstance(columns, pd.MultiIndex):
        if columns.nlevels != 2:
            raise DataSourceError(
                f"unexpected yfinance columns with {columns.nlevels} levels: {columns.names}"
            )
        price_level = list(columns.names).index("Price") if "Price" in columns.names else 0
        pairs = [(str(c[price_level]), str(c[1 - price_level]).upper()) for c in columns]
    elif len(tickers) == 1:
        pairs = [(str(c), tickers[0]) for c in columns]
    else:
        raise DataSourceError(
            f"yfinance returned flat columns {list(columns)} for several tickers {list(tickers)}"
        )
    frame = raw.copy()
    frame.columns = pd.MultiIndex.from_tuples(pairs, names=["Price", "Ticker"])
    dates = pd.DatetimeIndex(frame.index)
    frame.index = dates.tz_localize(None) if dates.tz is not None else dates
    frame = frame.sort_index()
    if "Close" not in frame.columns.get_level_values("Price"):
        raise DataSourceError(
            f"yfinance returned no 'Close' column (columns: {sorted(set(p for p, _ in pairs))})"
        )
    out = {}
    for yahoo_name, feature in _YAHOO_FIELDS.items():
        if yahoo_name in frame.columns.get_level_values("Price"):
            # A ticker yfinance did not return at all becomes an all-NaN column: reported as unknown.
            out[feature] = frame[yahoo_name].reindex(columns=list(tickers)).astype(np.float64)
    return {f: out[f] for f in FEATURE_ORDER if f in out}


class _RecordList(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _yfinance_log_captured() -> Iterator[list[logging.LogRecord]]:
    """Hold back the ``yfinance`` logger's warnings and errors during a download, in a list."""
    logger = logging.getLogger("yfinance")
    handler = _RecordList()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _replay(records: list[logging.LogRecord]) -> None:
    """Pass held-back yfinance records on to their logger, as if never held back."""
    for record in records:
        logging.getLogger(record.name).handle(record)


def _download(
    download: Downloader | None, tickers: tuple[str, ...], start: pd.Timestamp, end: pd.Timestamp
) -> pd.DataFrame | None:
    if download is None:
        import yfinance  # deferred: importing yfinance costs a second and is needed only here

        download = yfinance.download
    try:
        return download(
            list(tickers),
            start=start.strftime("%Y-%m-%d"),
            end=(end + pd.Timedelta(days=1)).strftime("%Y-%m-%d"),  # yfinance's end is exclusive
            auto_adjust=True,
            actions=False,
            progress=False,
            threads=False,
            group_by="column",
        )
    except Exception as exc:  # any downloader failure (network, HTTP, parsing) is a source failure
        raise DataSourceError(
            f"Yahoo Finance download of {list(tickers)} failed ({exc!r}); {_OFFLINE_HINT}"
        ) from exc


def _normalize_tickers(tickers: str | Iterable[str]) -> tuple[str, ...]:
    symbols = (tickers,) if isinstance(tickers, str) else tuple(tickers)
    symbols = tuple(str(t).strip().upper() for t in symbols)
    if not symbols:
        raise DataError("empty universe: no tickers requested")
    for i, t in enumerate(symbols):
        if not t:
            raise DataError(f"empty ticker symbol at position {i}")
        if t in symbols[:i]:
            raise DataError(f"duplicate ticker {t!r} requested", ticker=t)
    return symbols


def _as_day(value: object, what: str) -> pd.Timestamp:
    if value is None:
        raise DataError(f"{what} date is required for Yahoo Finance")
    return parse_date(value, f"{what} date", error=DataError).normalize()
