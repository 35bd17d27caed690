"""Chronological splits: the held-out test year and a validation slice, never shuffled.

The papers train on 2006–2018 and test on 2019 (DESIGN §2): the test period is the last
``test_days`` trading days (252 ≈ one year).  Model selection uses a validation slice cut from
the *end of the training period*, so the test period is never looked at before the final run.
Both splits are disjoint in dates: the later part starts on the day after the earlier part ends.
"""

from __future__ import annotations

from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.validation import check_int

#: Trading days in a year, the held-out period of the papers.
TRADING_DAYS_PER_YEAR = 252
# A part needs two closes to hold one price relative y_{t+1} = v_{t+1} / v_t.
_MIN_PART_DAYS = 2


def train_test_split(
    panel: PricePanel, test_days: int = TRADING_DAYS_PER_YEAR
) -> tuple[PricePanel, PricePanel]:
    """``(train, test)``: ``test`` holds the last ``test_days`` dates of ``panel``, ``train`` all earlier ones.

    Raises :class:`DataError` when ``test_days < 2`` or the panel leaves fewer than two training days.
    """
    return _split_tail(panel, test_days, "test_days", "training")


def validation_split(train: PricePanel, val_days: int) -> tuple[PricePanel, PricePanel]:
    """``(fit, validation)``: ``validation`` holds the last ``val_days`` dates of the training panel.

    Raises :class:`DataError` when ``val_days < 2`` or fewer than two fitting days would remain.
    """
    return _split_tail(train, val_days, "val_days", "fitting")


def _split_tail(panel: PricePanel, tail_days: int, arg: str, head_name: str) -> tuple[PricePanel, PricePanel]:
    tail_days = check_int(tail_days, arg, minimum=_MIN_PART_DAYS, error=DataError)
    head_days = len(panel) - tail_days
    if head_days < _MIN_PART_DAYS:
        raise DataError(
            f"panel {panel.name!r} has {len(panel)} days, too short for {arg}={tail_days}: the "
            f"{head_name} part would keep {head_days} days (needs >= {_MIN_PART_DAYS})"
        )
    return panel.iloc(slice(0, head_days)), panel.iloc(slice(head_days, None))
