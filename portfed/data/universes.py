"""Asset universes and the random per-party universes of the Fed+ portfolio experiment.

Paper 000 (footnote 2) draws each party's 9 assets from 50 S&P 500 technology stocks.  Several of
those tickers have since been renamed, merged or delisted (e.g. FB is now META), so Yahoo Finance
may no longer serve every one of them under the paper's symbol.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from portfed.data.errors import DataError
from portfed.validation import check_int

#: Named ticker universes.  ``sp500_tech50``: the 50 technology stocks of paper 000, footnote 2.
UNIVERSES: dict[str, tuple[str, ...]] = {
    "sp500_tech50": (
        "AAPL", "ADBE", "ADI", "ADP", "ADS", "AKAM", "AMD", "APH", "ATVI", "AVG",
        "CHTR", "CMCSA", "CRM", "CSCO", "CTL", "CTSH", "CTXS", "DIS", "DISH", "DXC",
        "FB", "FFIV", "FISV", "GLW", "GOOG", "IBM", "INTC", "INTU", "IPG", "IT",
        "JNPR", "KLAC", "LRCX", "MA", "MCHP", "MSFT", "MSI", "NFLX", "NTAP", "OMC",
        "PAYX", "QCOM", "SNPS", "STX", "T", "TEL", "VZ", "WDC", "WU", "XRX",
    ),
}  # fmt: skip


def universe(name: str) -> tuple[str, ...]:
    """The tickers of a named universe; an unknown name is a :class:`DataError` listing the known ones."""
    try:
        return UNIVERSES[name]
    except KeyError:
        raise DataError(f"unknown universe {name!r}; known universes are {', '.join(UNIVERSES)}") from None


def sample_universes(
    pool: Sequence[str], n_parties: int, n_assets: int, seed: int | np.random.Generator
) -> list[tuple[str, ...]]:
    """Each of ``n_parties`` parties draws ``n_assets`` distinct tickers from ``pool``, independently.

    Draws are without replacement within a party and independent across parties, so parties may
    share assets, as in paper 000 §8.2 (50 parties × 9 of 50 stocks).  A party's tickers are listed
    in pool order.  The result is a deterministic function of ``seed`` (an int or a
    :class:`numpy.random.Generator`, which is advanced).
    """
    tickers = tuple(str(t) for t in pool)
    if len(set(tickers)) != len(tickers):
        dup = next(t for i, t in enumerate(tickers) if t in tickers[:i])
        raise DataError(f"duplicate ticker {dup!r} in the pool", ticker=dup)
    n_parties = check_int(n_parties, "n_parties", minimum=1, error=DataError)
    n_assets = check_int(n_assets, "n_assets", minimum=1, error=DataError)
    if n_assets > len(tickers):
        raise DataError(f"n_assets={n_assets} exceeds the pool of {len(tickers)} tickers")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return [
        tuple(tickers[i] for i in np.sort(rng.choice(len(tickers), size=n_assets, replace=False)))
        for _ in range(n_parties)
    ]
