"""One entry point to every market-data source: bundled datasets, CSV files and Yahoo Finance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from portfed.data.bundled import BUNDLED_DATASETS, load_bundled
from portfed.data.csv_source import load_csv
from portfed.data.errors import DataError
from portfed.data.jumps import DEFAULT_MAX_DAILY_RATIO, check_jumps
from portfed.data.panel import PricePanel
from portfed.data.yahoo import fetch_yahoo


def load_market(
    source: str,
    *,
    tickers: Sequence[str] | None = None,
    start: object = None,
    end: object = None,
    **kw: Any,
) -> PricePanel:
    """Load a :class:`PricePanel` from ``source``, optionally restricted to ``tickers`` and ``[start, end]``.

    ``source`` is one of:

    * a bundled dataset name (``"nyse_n"``, see :data:`~portfed.data.bundled.BUNDLED_DATASETS`);
    * a path ending in ``.csv`` (``kw`` goes to :func:`~portfed.data.csv_source.load_csv`, e.g. ``layout``);
    * ``"yahoo"``: needs ``tickers``, ``start`` and ``end`` (``kw`` goes to
      :func:`~portfed.data.yahoo.fetch_yahoo`, e.g. ``max_ffill``, ``cache_dir``).

    Every source takes the option ``max_daily_ratio`` (default :data:`~portfed.data.jumps.DEFAULT_MAX_DAILY_RATIO`;
    ``None``: no check): the loaded prices are refused when one moves by more than that factor in a
    day (:func:`~portfed.data.jumps.check_jumps`).

    The ticker subset keeps the order given; the date range is inclusive.  Raises :class:`DataError`
    for any other source, for options the source does not take, for tickers or dates not found, and
    for an impossible jump.
    """
    max_ratio = kw.pop("max_daily_ratio", DEFAULT_MAX_DAILY_RATIO)
    return check_jumps(_load(source, tickers, start, end, **kw), max_ratio)


def _load(source: str, tickers: Sequence[str] | None, start: object, end: object, **kw: Any) -> PricePanel:
    if not isinstance(source, str) or not source:
        raise DataError(f"source must be a non-empty string, got {source!r}")
    if source == "yahoo":
        if tickers is None or start is None or end is None:
            raise DataError("source 'yahoo' needs tickers, start and end")
        return fetch_yahoo(tickers, start, end, **kw)
    if source in BUNDLED_DATASETS:
        if kw:
            raise DataError(f"bundled dataset {source!r} takes no options, got {sorted(kw)}")
        panel = load_bundled(source)
    elif source.lower().endswith(".csv"):
        panel = load_csv(source, **kw)
    else:
        raise DataError(
            f"unknown data source {source!r}: expected a bundled dataset ({', '.join(BUNDLED_DATASETS)}), "
            "a path ending in .csv, or 'yahoo'"
        )
    if tickers is not None:
        panel = panel.select(list(tickers))
    if start is not None or end is not None:
        panel = panel.between(start, end)
    return panel
