"""A panel's decision days as tensors, and what a panel swap keeps (both engines).

The ``N = T − l`` decision days of a panel are ``t = l − 1 … T − 2``; all their windows are
normalized once (:func:`portfed.envs.windows.price_windows`, the environment's own observation
builder) into a float32 ``(N, F, m, l)`` tensor that a step indexes, so a step has no Python loop
over assets or days.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from portfed.agents.config import AgentConfig
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.envs.windows import price_windows


@dataclass(frozen=True)
class MarketTensors:
    """Everything a step needs about the ``N = T − l`` decision days ``t = l − 1 … T − 2`` of a panel.

    Offset ``k`` is day ``t = first_day + k``.  ``windows[k]`` is the observation of day ``t``;
    ``y_now[k] = y_t`` and ``y_next[k] = y_{t+1}``, both with the cash relative 1 prepended.
    """

    windows: torch.Tensor
    y_now: torch.Tensor
    y_next: torch.Tensor
    first_day: int

    @property
    def n_days(self) -> int:
        return self.windows.shape[0]


def market_tensors(panel: PricePanel, config: AgentConfig) -> MarketTensors:
    """Normalized windows and price relatives of ``panel`` restricted to ``config.features``."""
    panel = panel.select_features(config.features).require_length(config.window)
    window = config.window
    days = np.arange(window - 1, len(panel) - 1)
    close = panel.feature("close")
    relatives = close[1:] / close[:-1]  # relatives[j] = y_{j+1}
    with_cash = np.concatenate([np.ones((relatives.shape[0], 1)), relatives], axis=1)

    def tensor(array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(array, dtype=np.float32), device=config.device)

    return MarketTensors(
        windows=tensor(price_windows(panel.values, days, window)),
        y_now=tensor(with_cash[days - 1]),
        y_next=tensor(with_cash[days]),
        first_day=window - 1,
    )


def kept_days(old: PricePanel, new: PricePanel) -> int:
    """How many leading days ``new`` shares with ``old`` (same dates and prices): a panel swap keeps
    their portfolio-vector-memory rows; the other rows restart from the initial portfolio.

    Raises:
        DataError: other tickers (a party's universe never changes).
    """
    if new.tickers != old.tickers:
        raise DataError(f"set_panel: tickers {new.tickers} differ from the training tickers {old.tickers}")
    n = min(len(new), len(old))
    same = (new.dates[:n] == old.dates[:n]) & np.all(new.values[:n] == old.values[:n], axis=(1, 2))
    return n if same.all() else int(np.argmin(same))
