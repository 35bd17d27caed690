"""A trained agent at the desk: tomorrow's weights, a portable model.

* :mod:`.trained` reads one party's deployed model, agent config, universe and backtest weights back
  from a run directory (what ``portfed compare`` / ``portfed run`` wrote);
* :mod:`.allocate` turns it and the latest window of prices into the target weights for the next
  trading day (``portfed allocate``), refusing missing tickers, gaps and stale prices by type;
* :mod:`.agent` is the Python API, ``portfed.load(run)``: a :class:`TrainedAgent` whose ``allocate`` and
  ``backtest`` take any prices (``portfed backtest``);
* :mod:`.orders` turns a target into share orders from a book of cash and shares (``portfed orders``);
* :mod:`.export` writes the deployed policy as TorchScript plus a JSON of what feeds it
  (``portfed export``), so a desk runs it with plain torch.
"""

from portfed.deploy.agent import TrainedAgent, load
from portfed.deploy.allocate import Allocation, allocate, price_window, read_current, write_allocation
from portfed.deploy.errors import (
    MissingTickersError,
    PriceGapError,
    PriceWindowError,
    RunDirectoryError,
    ShortHistoryError,
    StalePricesError,
)
from portfed.deploy.export import export_policy
from portfed.deploy.trained import TrainedParty, load_trained_party

__all__ = [
    "Allocation",
    "MissingTickersError",
    "PriceGapError",
    "PriceWindowError",
    "RunDirectoryError",
    "ShortHistoryError",
    "StalePricesError",
    "TrainedAgent",
    "TrainedParty",
    "allocate",
    "export_policy",
    "load",
    "load_trained_party",
    "price_window",
    "read_current",
    "write_allocation",
]
