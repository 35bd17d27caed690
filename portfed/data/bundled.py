"""Real market data that works offline: seven datasets shipped inside installed packages.

They are read straight from the installed package's files, never copied into this repo.

**``universal-portfolios``: six classic online-portfolio-selection benchmarks** (Li & Hoi's OLPS
survey): daily close prices only, each asset's price normalized to about 1 at the start of the period.

**The dates are reconstructed.**  The CSV files carry no dates, only one row per trading day.  We
give them Monday–Friday business days, ``pd.bdate_range(start, periods=n_days)``, from each
dataset's documented start.  Exchange holidays are not modelled, so the reconstructed calendar
falls one day further behind the real one at every holiday and the last reconstructed date comes
before the documented end: by three weeks (DJIA) to two months (TSE, SP500), and by about ten
months for the two NYSE sets (22 and 25 years of holidays); only MSCI ends exactly on its
documented end (see :func:`list_bundled`).  Use the
dates for ordering, splitting and annualizing, not to match real calendar events.

Tickers are the CSV column labels, kept verbatim (letters, and for TSE also punctuation and
non-printable characters beyond ``~``, because the original file ran out of letters).

**``skfolio``: ``skfolio_sp500``**, the daily adjusted closes of 20 S&P 500 constituents (AAPL … XOM)
from 1990-01-02 to 2022-12-28, 8,313 trading days, the file behind
``skfolio.datasets.load_sp500_dataset()``.  Its dates are the **real** NYSE trading days of the file
(2019 has 252), so it can be split by calendar dates, e.g. paper 000's train 2006–2018 / test 2019.
It is located with ``importlib.util.find_spec``, without importing ``skfolio`` (which would import
scikit-learn and cvxpy, ~3 s).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from portfed.data.errors import DataError
from portfed.data.panel import PricePanel


@dataclass(frozen=True)
class BundledDataset:
    """What is documented about one bundled dataset, and the package file that holds its prices.

    ``package``/``resource``: the installed package and the file inside it.  ``dated``: the file has a
    date column (real trading days, ``start`` … ``documented_end`` exactly); otherwise it holds
    prices only and the dates are reconstructed (:meth:`dates`).  ``symbols``: its tickers are the
    exchange symbols (a quote service knows them); the ``universal-portfolios`` files label their
    columns with anonymised letters (``A``, ``B``, …) instead.
    """

    name: str
    market: str
    description: str
    start: pd.Timestamp
    documented_end: pd.Timestamp
    n_days: int
    package: str = "universal"
    resource: str = ""
    dated: bool = False
    symbols: bool = False

    def dates(self) -> pd.DatetimeIndex:
        """The reconstructed calendar: ``n_days`` business days from ``start`` (see module docstring)."""
        return pd.bdate_range(self.start, periods=self.n_days)


def _spec(name: str, market: str, description: str, start: str, end: str, n_days: int) -> BundledDataset:
    """A ``universal-portfolios`` dataset: ``universal/data/<name>.csv``, no dates in the file."""
    return BundledDataset(
        name, market, description, pd.Timestamp(start), pd.Timestamp(end), n_days, resource=f"data/{name}.csv"
    )


#: The bundled datasets by name: the six of ``universal-portfolios``, then skfolio's S&P 500 set.
BUNDLED_DATASETS: dict[str, BundledDataset] = {
    s.name: s
    for s in (
        _spec("nyse_o", "NYSE", "NYSE (O): 36 NYSE stocks (Cover 1991)", "1962-07-03", "1984-12-31", 5651),
        _spec(
            "nyse_n",
            "NYSE",
            "NYSE (N): 23 NYSE stocks, the NYSE (O) sequel",
            "1985-01-01",
            "2010-06-30",
            6431,
        ),
        _spec("tse", "TSX", "TSE: 88 Toronto Stock Exchange stocks", "1994-01-04", "1998-12-31", 1259),
        _spec("sp500", "NYSE/NASDAQ", "SP500: 25 largest S&P 500 stocks", "1998-01-02", "2003-01-31", 1276),
        _spec(
            "djia",
            "NYSE/NASDAQ",
            "DJIA: 30 Dow Jones Industrial Average stocks",
            "2001-01-14",
            "2003-01-14",
            507,
        ),
        _spec("msci", "global", "MSCI: 24 MSCI World country indices", "2006-04-01", "2010-03-31", 1043),
        BundledDataset(
            "skfolio_sp500",
            "NYSE/NASDAQ",
            "S&P 500: 20 constituents, adjusted closes (skfolio)",
            pd.Timestamp("1990-01-02"),
            pd.Timestamp("2022-12-28"),
            8313,
            package="skfolio",
            resource="datasets/data/sp500_dataset.csv.gz",
            dated=True,
            symbols=True,
        ),
    )
}


def bundled_spec(name: str) -> BundledDataset:
    """The spec of a bundled dataset; an unknown name is a :class:`DataError` listing the known ones."""
    try:
        return BUNDLED_DATASETS[name]
    except KeyError:
        raise DataError(
            f"unknown bundled dataset {name!r}; known datasets are {', '.join(BUNDLED_DATASETS)}"
        ) from None


def package_file(spec: BundledDataset) -> Path:
    """The path of ``spec``'s file inside its installed package (found without importing the package)."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise DataError(
            f"bundled dataset {spec.name!r} needs the package {spec.package!r}, which is not installed"
        )
    return Path(next(iter(found.submodule_search_locations)), spec.resource)


@functools.cache
def load_bundled(name: str) -> PricePanel:
    """The bundled dataset ``name`` as a close-only :class:`PricePanel` (real or reconstructed dates).

    Panels are immutable, so each dataset is read once per process (``functools.cache``) and the
    same object returned.  Raises :class:`DataError` for an unknown name, a missing package, or when
    the file's row count (and, for a dated file, its first and last date) differs from the
    documentation (a changed package would silently shift every reconstructed date).
    """
    spec = bundled_spec(name)
    # float_precision="round_trip": exact to the last digit of the file.
    index_col = 0 if spec.dated else None
    close = pd.read_csv(package_file(spec), index_col=index_col, float_precision="round_trip", encoding="utf-8")
    if len(close) != spec.n_days:
        raise DataError(
            f"bundled dataset {name!r} has {len(close)} rows, documented {spec.n_days}: "
            f"the installed {spec.package} data differs from the documented version"
        )
    if spec.dated:
        close.index = pd.to_datetime(close.index, format="%Y-%m-%d")
        if (close.index[0], close.index[-1]) != (spec.start, spec.documented_end):
            raise DataError(
                f"bundled dataset {name!r} spans {close.index[0].date()} … {close.index[-1].date()}, "
                f"documented {spec.start.date()} … {spec.documented_end.date()}"
            )
    else:
        close.index = spec.dates()
    return PricePanel.from_close(close, name=name)


def list_bundled() -> pd.DataFrame:
    """One row per bundled dataset: name, assets, days, first and last date (real or reconstructed),
    description."""
    rows = []
    for name, spec in BUNDLED_DATASETS.items():
        panel = load_bundled(name)
        rows.append(
            {
                "name": name,
                "assets": panel.n_assets,
                "days": len(panel),
                "first_date": panel.dates[0],
                "last_date": panel.dates[-1],
                "description": spec.description,
            }
        )
    return pd.DataFrame(rows)
