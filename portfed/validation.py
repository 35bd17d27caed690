"""The one place for argument checks: integers, numbers in a range, seeds, dates.

Every check names the offending value and raises the error type the caller asks for (``ValueError``
by default; the data layer passes :class:`portfed.data.errors.DataError`), so the message format is
the same across the package and no module hand-rolls ``isinstance(x, bool) or not isinstance(x, int)``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["MAX_SEED", "check_bool", "check_fraction", "check_int", "check_number", "check_seed", "parse_date"]


def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None,
              error: type[Exception] = ValueError) -> int:
    """``value`` as a Python ``int`` (``bool`` refused), within ``[minimum, maximum]`` where given."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise error(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise error(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise error(f"{name} must be <= {maximum}, got {value!r}")
    return value


def check_bool(value: object, name: str, *, error: type[Exception] = ValueError) -> bool:
    """``value`` as a ``bool`` (``True``/``False`` or a numpy boolean; ``0``/``1`` and strings refused)."""
    if not isinstance(value, bool | np.bool_):
        raise error(f"{name} must be True or False, got {value!r}")
    return bool(value)


#: Seeds are below 2**63: numpy's and torch's generators take them as signed 64-bit integers.
MAX_SEED = 2**63 - 1


def check_seed(value: object, name: str = "seed", *, error: type[Exception] = ValueError) -> int:
    """A non-negative integer seed, at most :data:`MAX_SEED`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise error(f"{name} must be a non-negative integer, got {value!r}")
    if value > MAX_SEED:
        raise error(f"{name} must be below 2**63, got {value!r}")
    return int(value)


def check_number(value: object, name: str, *, minimum: float | None = None, maximum: float | None = None,
                 strict_min: bool = False, error: type[Exception] = ValueError) -> float:
    """``value`` as a finite ``float`` (``bool`` refused) in ``[minimum, maximum]``
    (``(minimum, maximum]`` with ``strict_min``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise error(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise error(f"{name} must be finite, got {value!r}")
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise error(f"{name} must be {'>' if strict_min else '>='} {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise error(f"{name} must be <= {maximum}, got {value!r}")
    return value


def check_fraction(value: object, name: str, *, error: type[Exception] = ValueError) -> float:
    """A number in ``[0, 1]``."""
    return check_number(value, name, minimum=0.0, maximum=1.0, error=error)


def parse_date(value: object, name: str, *, error: type[Exception] = ValueError) -> pd.Timestamp:
    """``value`` (a string, date, datetime or Timestamp) as a ``pd.Timestamp``; ``None``/NaT refused."""
    if value is None:
        raise error(f"{name} date is required")
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise error(f"cannot read {name} {value!r} as a date: {exc}") from exc
    if pd.isna(stamp):
        raise error(f"cannot read {name} {value!r} as a date")
    return stamp
