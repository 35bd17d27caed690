"""Training-collapse detector (paper 000 §1, Fig. 1a/1b): a learning-curve drop caused by a parameter jump.

Paper 000 observes that with FedAvg, RFA, coordinate median and FedProx "large spikes in the
parameter change" at aggregation "coincide precisely with training collapse" of the party-averaged
learning curve.  The rule here makes that observation testable.  Inputs, one value per round t:

* ``curve[t]``: the party-averaged training reward (mean log return of the local batches);
* ``jump[t]``: the party-averaged mean ``|Δ parameters|`` across the aggregation step (Fig. 1a).

Rule (all thresholds in :class:`CollapseRule`):

1. Smooth the curve with a trailing moving average of ``smoothing`` rounds: ``c_t``.
2. **Drop** at round t: with the running peak ``P_t = max_{s≤t} c_s`` and the start level ``c_0``,
   the peak gain ``G_t = P_t − c_0`` is positive and the curve has lost more than
   ``drop_fraction`` of it: ``P_t − c_t > drop_fraction · G_t``.
3. **Spike** at round s: at least ``min_history`` earlier rounds, their median ``M_s`` is positive
   and ``jump[s] > spike_factor · M_s`` (the running median ignores the spike's own size), and the
   jump reaches the absolute floor ``jump[s] ≥ min_spike``.  The floor (default 0: no floor, the
   criterion the collapse study recorded) keeps a run whose parameters barely move — a "spike"
   from 1e-7 to 1e-6 — from counting as a jump.
4. **Collapse**: the first drop round t preceded by a spike s with ``t − max_lag − (smoothing − 1) ≤ s ≤ t``
   (the moving average delays a drop by up to ``smoothing − 1`` rounds).  A drop without a spike
   (e.g. a hard market stretch in the batches) and a spike without a drop are not collapses.

Algorithms whose parties never jump (local training, Fed+ with λ = 0: ``jump ≡ 0``) cannot be
flagged by this rule: it is about collapse *caused by aggregation*.

5. **All-cash collapse**: a policy that has learned to stay in cash trades nothing on the held-out
   year (fAPV exactly 1, zero volatility).  The run has collapsed when at least ``all_cash_share`` of
   the parties' deployed policies hold a mean cash weight ``≥ all_cash_weight`` over the held-out
   year (:func:`all_cash_parties`), whatever their learning curves did.
6. **Blow-up**: a deployed policy that cannot trade at all — its portfolio is non-finite because its
   parameters blew up (``failed`` parties of the backtest) — makes the run a collapse (kind
   ``"non_finite"``) unless rule 4 already dated it.

The rule was fixed before any sweep and is validated on controls built from mechanisms
(``tests/test_collapse.py``): a run whose aggregate is thrown far away in one round (every party
scales its update by a huge factor — an injected fault) is flagged, the same run without it is not,
and a deployed policy whose cash score dominates is flagged as all-cash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CollapseRule:
    """Thresholds of the rule in the module docstring."""

    smoothing: int = 3
    drop_fraction: float = 0.5
    spike_factor: float = 3.0
    min_history: int = 3
    max_lag: int = 3
    all_cash_weight: float = 0.99
    all_cash_share: float = 0.5
    min_spike: float = 0.0

    def __post_init__(self) -> None:
        for name, minimum in (("smoothing", 1), ("min_history", 1), ("max_lag", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if not (np.isfinite(self.drop_fraction) and self.drop_fraction > 0):
            raise ValueError(f"drop_fraction must be a finite number > 0, got {self.drop_fraction!r}")
        if not (np.isfinite(self.spike_factor) and self.spike_factor > 1):
            raise ValueError(f"spike_factor must be a finite number > 1, got {self.spike_factor!r}")
        if not (np.isfinite(self.min_spike) and self.min_spike >= 0):
            raise ValueError(f"min_spike must be a finite number >= 0, got {self.min_spike!r}")
        for name in ("all_cash_weight", "all_cash_share"):
            value = getattr(self, name)
            if not (np.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"{name} must lie in (0, 1], got {value!r}")


@dataclass(frozen=True)
class CollapseReport:
    """``collapsed``; the drop ``round`` and the ``spike_round`` that explains it (``None`` if none);
    every spike and drop round found (for plots); ``all_cash``: the parties whose deployed policy
    stays in cash (rule 5), ``failed``: the parties whose policy could not trade (rule 6), and what
    made the run a collapse (``kind``: ``"spike"``, ``"non_finite"``, ``"all_cash"`` or ``""``)."""

    collapsed: bool
    round: int | None
    spike_round: int | None
    spikes: tuple[int, ...]
    drops: tuple[int, ...]
    all_cash: tuple[int, ...] = ()
    kind: str = ""
    failed: tuple[int, ...] = ()


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start); NaNs are skipped."""
    x = np.asarray(values, dtype=np.float64)
    out = np.empty_like(x)
    for t in range(x.size):
        chunk = x[max(0, t - window + 1) : t + 1]
        out[t] = np.nanmean(chunk) if np.any(np.isfinite(chunk)) else np.nan
    return out


def find_spikes(jump: np.ndarray, spike_factor: float, min_history: int, min_spike: float = 0.0) -> np.ndarray:
    """Rounds s with ``jump[s] > spike_factor · median(jump[:s])``, a positive median of >= ``min_history``
    rounds, and ``jump[s] >= min_spike``."""
    x = np.asarray(jump, dtype=np.float64)
    spikes = []
    for s in range(min_history, x.size):
        history = x[:s][np.isfinite(x[:s])]
        if history.size < min_history or not np.isfinite(x[s]):
            continue
        median = float(np.median(history))
        if median > 0 and x[s] > spike_factor * median and x[s] >= min_spike:
            spikes.append(s)
    return np.asarray(spikes, dtype=int)


def find_drops(curve: np.ndarray, drop_fraction: float) -> np.ndarray:
    """Rounds t where ``curve`` lies more than ``drop_fraction`` of its peak gain below its running peak."""
    c = np.asarray(curve, dtype=np.float64)
    if c.size == 0 or not np.isfinite(c[0]):
        return np.asarray([], dtype=int)
    peak = np.fmax.accumulate(np.where(np.isfinite(c), c, -np.inf))
    gain = peak - c[0]
    with np.errstate(invalid="ignore"):
        dropped = (gain > 0) & np.isfinite(c) & (peak - c > drop_fraction * gain)
    return np.flatnonzero(dropped)


def all_cash_parties(mean_cash: np.ndarray, rule: CollapseRule) -> tuple[int, ...]:
    """The parties (indices into ``mean_cash``) whose mean held-out cash weight is ``≥ rule.all_cash_weight``."""
    return tuple(np.flatnonzero(np.asarray(mean_cash, dtype=np.float64) >= rule.all_cash_weight).tolist())


def detect_collapse(curve: np.ndarray, jump: np.ndarray, rule: CollapseRule | None = None,
                    mean_cash: np.ndarray | None = None, failed: Sequence[int] = ()) -> CollapseReport:
    """Apply the rule of the module docstring to one algorithm's per-round ``curve`` and ``jump`` and,
    when given, its parties' mean held-out cash weights ``mean_cash`` (rule 5) and the parties whose
    backtest failed on a non-finite policy (rule 6).

    Raises:
        ValueError: ``curve`` and ``jump`` are not 1-D arrays of the same length.
    """
    rule = CollapseRule() if rule is None else rule
    curve = np.asarray(curve, dtype=np.float64)
    jump = np.asarray(jump, dtype=np.float64)
    if curve.ndim != 1 or curve.shape != jump.shape:
        raise ValueError(f"curve and jump must be 1-D of equal length, got shapes {curve.shape} and {jump.shape}")
    smoothed = moving_average(curve, rule.smoothing)
    spikes = find_spikes(jump, rule.spike_factor, rule.min_history, rule.min_spike)
    drops = find_drops(smoothed, rule.drop_fraction)
    cash = () if mean_cash is None else all_cash_parties(mean_cash, rule)
    failed = tuple(int(k) for k in failed)
    cash_collapse = mean_cash is not None and len(cash) > 0 and len(cash) >= rule.all_cash_share * len(mean_cash)
    reach = rule.max_lag + rule.smoothing - 1
    found = (tuple(spikes.tolist()), tuple(drops.tolist()))
    for t in drops.tolist():
        causes = spikes[(spikes <= t) & (spikes >= t - reach)]
        if causes.size:
            return CollapseReport(True, int(t), int(causes[0]), *found, all_cash=cash, kind="spike", failed=failed)
    if failed:
        return CollapseReport(True, None, None, *found, all_cash=cash, kind="non_finite", failed=failed)
    return CollapseReport(cash_collapse, None, None, *found, all_cash=cash, kind="all_cash" if cash_collapse else "")
