"""The benchmark of ``evaluation.benchmark`` and the benchmark-relative metrics of every backtest.

``evaluation.benchmark`` is either

* a **baseline** of ``evaluation.baselines`` (``ucrp``, the default, or ``ubah``, …): each party's
  benchmark is that baseline trading the party's own universe on the same days, with the same costs;
* a **price series** ``SOURCE:TICKER``: the closes of ``TICKER`` in a bundled dataset (``nyse_n:A``)
  or a CSV file (``prices/index.csv:SPX``, wide or long layout; a relative path is read from the
  config file's directory): one series, a market index say, the same for every party, which must have a
  price on every day of each party's held-out period (checked before any training).

Every strategy's value path is compared with its party's benchmark path on the same days
(:func:`portfed.evaluation.relative.relative_metrics`, with ``evaluation.risk_free``), and the
metrics join the per-party metrics (``party_metrics.csv``) with a ``benchmark`` column naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from portfed.data.errors import DataError
from portfed.evaluation.relative import RELATIVE_METRICS, relative_metrics

#: The per-party metrics column that names the benchmark.
BENCHMARK_COLUMN = "benchmark"


def _key(name: str) -> str:
    """A baseline name compared case-insensitively, ``_``, ``-`` and space alike (``best_stock`` = ``Best Stock``)."""
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


@dataclass(frozen=True)
class Benchmark:
    """A parsed ``evaluation.benchmark``: a ``baseline`` name, or a series' ``source`` and ``ticker``."""

    text: str
    baseline: str | None = None
    source: str | None = None
    ticker: str | None = None

    @property
    def is_series(self) -> bool:
        return self.source is not None


def parse_benchmark(text: str, baselines: Sequence[str]) -> Benchmark:
    """``text`` as a baseline of ``baselines`` or a ``SOURCE:TICKER`` series (module docstring).

    Raises:
        ValueError: an empty text, a series whose source is neither a bundled dataset nor a ``.csv`` path
            or that names no ticker, or a name that is none of ``baselines``.
    """
    from portfed.data.bundled import BUNDLED_DATASETS

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"evaluation.benchmark must name a baseline or SOURCE:TICKER, got {text!r}")
    source, sep, ticker = text.rpartition(":")
    if sep and not (source.lower().endswith(".csv") or source in BUNDLED_DATASETS):
        raise ValueError(f"evaluation.benchmark {text!r}: {source!r} is neither a bundled dataset "
                         f"({', '.join(BUNDLED_DATASETS)}) nor a path ending in .csv")
    if sep:
        if not ticker.strip():
            raise ValueError(f"evaluation.benchmark {text!r} names no ticker after the ':'")
        return Benchmark(text, source=source, ticker=ticker)
    if _key(text) not in {_key(b) for b in baselines}:
        raise ValueError(f"evaluation.benchmark {text!r} is none of evaluation.baselines {list(baselines)}: add it "
                         "there, or give a price series as SOURCE:TICKER (e.g. nyse_n:A or prices.csv:SPX)")
    return Benchmark(text, baseline=text)


def load_series(benchmark: Benchmark) -> pd.Series:
    """The closes of a series benchmark, by date.

    Raises:
        DataError: the source cannot be read or has no such ticker.
    """
    from portfed.data import load_market

    if not benchmark.is_series:
        raise ValueError(f"benchmark {benchmark.text!r} is a baseline, not a price series")
    panel = load_market(benchmark.source, tickers=[benchmark.ticker])
    return panel.close[benchmark.ticker].rename(benchmark.text)


def series_on(series: pd.Series, dates: pd.DatetimeIndex) -> pd.Series:
    """``series`` on exactly ``dates``.

    Raises:
        DataError: the series has no price on one of the dates (the first is named).
    """
    missing = dates.difference(series.index)
    if len(missing):
        raise DataError(f"benchmark {series.name!r} has no price on {missing[0].date()}, a held-out day "
                        f"({len(missing)} of {len(dates)} held-out days missing; it spans "
                        f"{series.index[0].date()} … {series.index[-1].date()})")
    return series.loc[dates]


def check_covers(benchmark: Benchmark, periods: Iterable[pd.DatetimeIndex]) -> None:
    """Raise :class:`DataError` unless a series benchmark has a price on every day of every period (a
    baseline benchmark trades the parties' own days: nothing to check)."""
    if benchmark.is_series:
        series = load_series(benchmark)
        for dates in periods:
            series_on(series, dates)


def benchmark_label(benchmark: Benchmark, strategies: Iterable[str]) -> str:
    """The name tables give the benchmark: the baseline's strategy name among ``strategies`` (``UCRP``), or
    the series' text.

    Raises:
        ValueError: a baseline benchmark that none of ``strategies`` is.
    """
    if benchmark.is_series:
        return benchmark.text
    for name in strategies:
        if _key(name) == _key(benchmark.text):
            return name
    raise ValueError(f"the benchmark baseline {benchmark.text!r} was not backtested: strategies are {list(strategies)}")


def with_relative_metrics(party_metrics: pd.DataFrame, values: pd.DataFrame, benchmark: Benchmark,
                          risk_free: float, periods_per_year: float = 252) -> pd.DataFrame:
    """``party_metrics`` (one row per strategy and party) with :data:`BENCHMARK_COLUMN` and the
    :data:`~portfed.evaluation.relative.RELATIVE_METRICS` of each row's value path ``values["<strategy>/party_<k>"]``
    against its party's benchmark path on the same days (NaN for a failed backtest)."""
    label = benchmark_label(benchmark, dict.fromkeys(party_metrics["strategy"]))
    series = load_series(benchmark) if benchmark.is_series else None
    rows = []
    for strategy, party in zip(party_metrics["strategy"], party_metrics["party"], strict=True):
        path = values[f"{strategy}/party_{party}"].dropna()
        if path.empty:
            rows.append(dict.fromkeys(RELATIVE_METRICS, float("nan")))
            continue
        rows.append(_against(path, values.get(f"{label}/party_{party}"), series, periods_per_year, risk_free))
    relative = pd.DataFrame(rows, columns=list(RELATIVE_METRICS), index=party_metrics.index)
    out = party_metrics.drop(columns=[BENCHMARK_COLUMN, *RELATIVE_METRICS], errors="ignore")
    return pd.concat([out.assign(**{BENCHMARK_COLUMN: label}), relative], axis=1)


def held_out_days(values: pd.DataFrame) -> int:
    """The fewest returns any column of a value frame has (its non-NaN values less one); 0 for none."""
    counts = [int(values[c].notna().sum()) - 1 for c in values.columns]
    return max(0, min(counts)) if counts else 0


def value_columns(frames: Mapping[str, pd.DataFrame] | Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The value frames of the algorithms and the baselines side by side (dates × ``<strategy>/party_<k>``)."""
    listed = list(frames.values()) if isinstance(frames, Mapping) else list(frames)
    return pd.concat(listed, axis=1) if listed else pd.DataFrame()



def relative_frame(paths: Mapping[str, pd.Series], benchmark: Benchmark, risk_free: float,
                   periods_per_year: float = 252) -> tuple[str, pd.DataFrame]:
    """The benchmark's label and, per strategy of ``paths`` (value paths by strategy name, one market: a
    single-party run), the :data:`~portfed.evaluation.relative.RELATIVE_METRICS` against the benchmark on
    the same days (rows in ``paths`` order)."""
    label = benchmark_label(benchmark, paths)
    series = load_series(benchmark) if benchmark.is_series else None
    rows = {}
    for name, path in paths.items():
        rows[name] = _against(path, paths.get(label), series, periods_per_year, risk_free)
    return label, pd.DataFrame.from_dict(rows, orient="index", columns=list(RELATIVE_METRICS))


def _against(path: pd.Series, baseline: pd.Series | None, series: pd.Series | None, periods_per_year: float,
             risk_free: float) -> dict[str, float]:
    """``path``'s metrics against the benchmark on its days: the price ``series`` when given, else the
    ``baseline``'s value path on the same universe."""
    if series is not None:
        reference = series_on(series, pd.DatetimeIndex(path.index))
    elif baseline is not None:
        reference = baseline.loc[path.index]
    else:
        raise ValueError("a baseline benchmark needs the baseline's value path")
    return relative_metrics(path.to_numpy(), reference.to_numpy(), periods_per_year, risk_free)
