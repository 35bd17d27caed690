"""Confidence intervals over seeds: the mean of a metric and paired differences between methods.

A seed is the unit of replication of a comparison (:mod:`portfed.experiment.studies.seeds`): each draws its own
universes, initial models, batches and generator fits, and every method of the comparison runs on that
seed's parties.  With ``n`` seeds giving values ``x_1 … x_n`` (each a mean over the seed's parties):

* **the interval of the mean** is Student's t interval ``x̄ ± t_{0.975, n−1} · s/√n`` with ``s`` the
  sample standard deviation (``ddof = 1``): exact for normal ``x_s``, and with a handful of seeds the
  honest choice over a normal interval, whose ``1.96`` would be far too narrow (``t_{0.975, 2} = 4.30``);
* **a paired difference** of methods A and B is the same interval over ``d_s = x_s^A − x_s^B``: both
  ran on seed s's parties, so the seed's common part (its market draw) cancels in ``d_s``.

A difference whose interval holds 0 is **no difference** (:func:`verdict`).  One seed gives no
interval (``NaN`` bounds) and the verdict says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The level of every interval.
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """``mean`` of ``n`` values and its two-sided ``LEVEL`` t interval ``[low, high]`` (NaN when ``n < 2``)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies in the interval (closed); ``False`` when there is no interval."""
        return bool(self.low <= value <= self.high)


def t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of ``values`` and its Student t interval (module docstring).

    Raises:
        ValueError: no value, a non-finite value, or a level outside (0, 1).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"an interval needs at least one value, got {values!r}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"an interval needs finite values, got {x.tolist()}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    mean = float(np.mean(x))
    if x.size < 2:
        return Interval(mean, float("nan"), float("nan"), 1)
    half = float(stats.t.ppf(0.5 + level / 2.0, x.size - 1) * np.std(x, ddof=1) / np.sqrt(x.size))
    return Interval(mean, mean - half, mean + half, int(x.size))


def paired_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """The t interval of ``a_s − b_s`` over paired values (the same seeds, in the same order).

    Raises:
        ValueError: lengths differ, or as :func:`t_interval`.
    """
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a_.shape != b_.shape:
        raise ValueError(f"paired values need the same seeds: {a_.size} against {b_.size}")
    return t_interval(a_ - b_, level)


def verdict(difference: Interval, higher: str = "higher", lower: str = "lower") -> str:
    """``higher`` / ``lower`` when the difference's interval lies above / below 0, else ``no difference``;
    ``one seed: no interval`` without an interval."""
    if difference.n < 2:
        return "one seed: no interval"
    if difference.low > 0:
        return higher
    if difference.high < 0:
        return lower
    return "no difference"
