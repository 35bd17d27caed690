"""Typed errors of ``portfed allocate`` / ``portfed export``: each names the offending value."""

from __future__ import annotations

from collections.abc import Sequence

from portfed.data.errors import DataError


class RunDirectoryError(ValueError):
    """A run directory that does not hold what was asked: no config, not a federated run, no such
    algorithm (``algorithm``) or party (``party``)."""

    def __init__(self, message: str, *, algorithm: str | None = None, party: int | None = None) -> None:
        super().__init__(message)
        self.algorithm = algorithm
        self.party = party


class PriceWindowError(DataError):
    """The prices cannot feed the model: the base of the errors below."""


class MissingTickersError(PriceWindowError):
    """Prices without some of the party's tickers (``missing``, in the universe's order)."""

    def __init__(self, message: str, missing: Sequence[str]) -> None:
        super().__init__(message, ticker=missing[0] if missing else None)
        self.missing = tuple(missing)


class ShortHistoryError(PriceWindowError):
    """Fewer days up to the as-of date than the model's window."""


class PriceGapError(PriceWindowError):
    """Two consecutive days of the window further apart than allowed (``date``: the day after the gap)."""


class StalePricesError(PriceWindowError):
    """The window's last day (``date``) is older than the as-of date by more than allowed."""


class TargetWeightsError(ValueError):
    """Target weights a desk must not trade: not finite, negative, or not summing to 1 (the deployed model
    blew up, or was tampered with); nothing is written."""
