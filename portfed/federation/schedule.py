"""Per-round values of an algorithm's knobs, and the checks every family applies to a knob's value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Schedule:
    """A per-round value ``initial · decay^{⌊t / every⌋}`` (constant when ``decay = 1``), round ``t`` 0-based."""

    initial: float
    decay: float = 1.0
    every: int = 1

    def __post_init__(self) -> None:
        if not np.isfinite(self.initial):
            raise ValueError(f"schedule initial value must be finite, got {self.initial!r}")
        if not np.isfinite(self.decay) or not 0 < self.decay <= 1:
            raise ValueError(f"schedule decay must lie in (0, 1], got {self.decay!r}")
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"schedule 'every' must be a positive integer, got {self.every!r}")
        object.__setattr__(self, "initial", float(self.initial))
        object.__setattr__(self, "decay", float(self.decay))

    def at(self, round_index: int) -> float:
        if round_index < 0:
            raise ValueError(f"round_index must be >= 0, got {round_index!r}")
        return self.initial * self.decay ** (round_index // self.every)

    @classmethod
    def coerce(cls, value: float | Schedule | Mapping[str, float], name: str) -> Schedule:
        """A number (constant), a :class:`Schedule`, or a mapping with keys ``initial, decay, every``."""
        if isinstance(value, Schedule):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"initial", "decay", "every"})
            if unknown:
                raise ValueError(f"{name}: unknown schedule keys {unknown}; valid: initial, decay, every")
            return cls(**value)
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
            raise ValueError(f"{name} must be a number, a Schedule or a mapping, got {value!r}")
        return cls(float(value))


def number(value: object, name: str) -> float:
    """``value`` as a float; ``ValueError`` naming ``name`` for anything but a real number."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def in_range(value: object, name: str, low: float, high: float = np.inf) -> float:
    """``value`` as a finite float in ``[low, high]``, else ``ValueError`` naming ``name``."""
    result = number(value, name)
    if not np.isfinite(result) or not low <= result <= high:
        raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value!r}")
    return result
