"""Impossible price jumps: a one-day move by more than a factor :data:`DEFAULT_MAX_DAILY_RATIO`.

A tick of ``1e30`` among prices near 100 is finite and positive, so :class:`~portfed.data.PricePanel`
accepts it, yet it turns Table 1 into values of ``4e172`` and ``inf``.  :func:`check_jumps` refuses a
panel where some price ``p_{t,i,f}`` — ``f`` one of :data:`~portfed.data.panel.PRICE_FEATURES`; volumes
may move by any factor — moves by more than a factor ``r`` in one day, ``p_t / p_{t−1} > r`` or
``< 1/r``, naming the ticker, the feature, the two days and the prices.  The default ``r = 10`` is far
above any move of the bundled datasets (the largest: ×1.94 and ×0.33) and of split-adjusted prices;
an unadjusted split or a genuine ×10 day is allowed with the data option ``max_daily_ratio`` (a
larger bound, or ``null`` for no check; :func:`portfed.data.load_market`).
"""

from __future__ import annotations

import numpy as np

from portfed.data.errors import DataError
from portfed.data.panel import PRICE_FEATURES, PricePanel
from portfed.validation import check_number

#: The default bound of a one-day price ratio (module docstring).
DEFAULT_MAX_DAILY_RATIO = 10.0


def check_jumps(panel: PricePanel, max_ratio: float | None = DEFAULT_MAX_DAILY_RATIO) -> PricePanel:
    """``panel`` if no price moves by more than a factor ``max_ratio`` in one day (``None``: no check).

    Raises:
        DataError: the first such jump (earliest day, then ticker), naming ticker, feature, days and prices;
            or a ``max_ratio`` that is not a number > 1.
    """
    if max_ratio is None:
        return panel
    max_ratio = check_number(max_ratio, "max_daily_ratio", minimum=1.0, strict_min=True, error=DataError)
    prices = [f for f in panel.features if f in PRICE_FEATURES]  # volumes may move by any factor
    values = panel.values[:, :, [panel.features.index(f) for f in prices]]
    if len(values) < 2:
        return panel
    ratio = values[1:] / values[:-1]
    bad = np.argwhere((ratio > max_ratio) | (ratio < 1.0 / max_ratio))
    if not len(bad):
        return panel
    t, i, f = (int(x) for x in bad[0])
    ticker, before, after = panel.tickers[i], panel.dates[t], panel.dates[t + 1]
    raise DataError(f"price of {ticker!r} ({prices[f]}) jumps ×{ratio[t, i, f]:.3g} from "
                    f"{values[t, i, f]:.6g} on {before.date()} to {values[t + 1, i, f]:.6g} on {after.date()}, beyond "
                    f"the one-day bound ×{max_ratio:g}: a bad tick? Fix the data, or allow it with the data "
                    "option max_daily_ratio (a larger bound, or null)", ticker=ticker, date=after)
