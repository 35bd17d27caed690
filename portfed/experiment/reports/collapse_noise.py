"""The second collapse criterion: a drop large against the curve's own noise, and not shared by local training.

The first criterion (:mod:`portfed.experiment.reports.collapse`, the first collapse study's recorded rule) calls
a round a drop when the smoothed curve has lost half of its peak gain — whatever the size of that gain.
Its one flag in the study's 288 runs was a false positive: a flat curve whose "peak gain" was 2e-5 per
day against 4.6e-4 of round-to-round noise, so "lost half of the gain" was true of half of its rounds
(``docs/reports/reproduction_earlier.md`` §3).  This criterion, fixed before the second study, keeps that rule's
spikes, smoothing and lag and asks two more things of a drop.  Inputs, one value per round t: the raw
party-averaged training reward ``r[t]``, the mean parameter jump at aggregation ``jump[t]`` and,
when the comparison ran it, local training's raw curve ``ℓ[t]`` on the same parties.

1. **Noise** of a curve: the robust std of its round-to-round changes ``d_t = r_t − r_{t−1}``,
   ``σ = 1.4826 · median_t |d_t − median(d)| / √2``.  1.4826 · MAD is the std of a normal sample and is
   not moved by a few large steps (the drop itself); white noise of std s has differences of std
   s·√2, hence the √2.  A trend moves ``median(d)``, not σ.
2. **Drop** at round t (``c``: the trailing moving average of ``smoothing`` rounds, ``P_t = max_{s≤t} c_s``
   reached at round ``p_t``, ``G_t = P_t − c_0``): the curve has risen well above the noise,
   ``G_t ≥ min_gain · σ``; and lost at least ``drop_fraction`` of that gain and ``min_drop · σ``,
   ``P_t − c_t ≥ max(drop_fraction · G_t, min_drop · σ)``.  With σ = 0 (a noiseless curve) the
   rule is the first criterion's drop, with ``≥`` in place of its ``>``.
3. **Local control**: a drop at t (from the peak round ``p = p_t``) that local training's smoothed
   curve ``m`` also shows is not caused by federation.  It shows it when, within ``local_tolerance``
   rounds of both ends, it fell by at least ``local_share`` of the federated fall:
   ``max_{|s−p|≤τ} m_s − min_{|s−t|≤τ} m_s ≥ local_share · (P_t − c_t)``.  Such drops are kept in
   :attr:`NoiseCollapseReport.shared` and never make a collapse.  Without a local run (local training
   not among the compared algorithms) no drop is suppressed and ``local_control`` says ``"absent"``;
   local training's own verdict needs no control (it never jumps at aggregation: rule 4 cannot fire).
4. **Collapse**: the first drop not shared with local training that has a spike
   (:func:`~portfed.experiment.reports.collapse.find_spikes`, the first criterion's thresholds) within
   ``max_lag + smoothing − 1`` rounds before it; else the first criterion's blow-up (rule 6) and
   all-cash (rule 5) verdicts, which do not read the learning curve, carry over unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from portfed.experiment.reports.collapse import CollapseRule, all_cash_parties, find_spikes, moving_average

#: 1.4826 · MAD estimates a normal sample's std.
MAD_TO_STD = 1.4826


@dataclass(frozen=True)
class NoiseRule:
    """The thresholds of this module's criterion (rules 2–3); spikes, smoothing, lag and the all-cash
    thresholds come from the first criterion's :class:`~portfed.experiment.reports.collapse.CollapseRule`."""

    min_gain: float = 4.0
    min_drop: float = 4.0
    local_share: float = 0.5
    local_tolerance: int = 2

    def __post_init__(self) -> None:
        for name in ("min_gain", "min_drop"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (np.isfinite(self.local_share) and 0 < self.local_share <= 1):
            raise ValueError(f"local_share must lie in (0, 1], got {self.local_share!r}")
        tol = self.local_tolerance
        if isinstance(tol, bool) or not isinstance(tol, int) or tol < 0:
            raise ValueError(f"local_tolerance must be an integer >= 0, got {tol!r}")


@dataclass(frozen=True)
class NoiseCollapseReport:
    """``collapsed`` and ``kind`` (``"spike"``, ``"non_finite"``, ``"all_cash"`` or ``""``) as in the first
    criterion; the drop ``round`` and its ``spike_round``; the curve's noise ``sigma``; every drop
    round found (``drops``) and those local training shares (``shared``); ``local_control``:
    ``"applied"``, ``"absent"`` (no local run) or ``"self"`` (local training itself)."""

    collapsed: bool
    round: int | None
    spike_round: int | None
    sigma: float
    drops: tuple[int, ...]
    shared: tuple[int, ...]
    local_control: str
    kind: str = ""


def curve_noise(curve: np.ndarray) -> float:
    """Rule 1: ``1.4826 · MAD(Δcurve) / √2`` over the finite round-to-round changes (0 with fewer than two)."""
    diffs = np.diff(np.asarray(curve, dtype=np.float64))
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size < 2:
        return 0.0
    return float(MAD_TO_STD * np.median(np.abs(diffs - np.median(diffs))) / np.sqrt(2.0))


def noise_drops(smoothed: np.ndarray, sigma: float, drop_fraction: float, rule: NoiseRule) -> tuple[np.ndarray, np.ndarray]:
    """Rule 2 on a smoothed curve: the drop rounds and, for each, the round of its running peak."""
    c = np.asarray(smoothed, dtype=np.float64)
    if c.size == 0 or not np.isfinite(c[0]):
        return np.asarray([], dtype=int), np.asarray([], dtype=int)
    finite = np.where(np.isfinite(c), c, -np.inf)
    peak = np.fmax.accumulate(finite)
    new_peak = np.concatenate([[True], finite[1:] > peak[:-1]])  # ties keep the first round of the peak
    peak_round = np.maximum.accumulate(np.where(new_peak, np.arange(c.size), 0))
    gain = peak - c[0]
    with np.errstate(invalid="ignore"):
        dropped = ((gain > 0) & (gain >= rule.min_gain * sigma) & np.isfinite(c)
                   & (peak - c >= np.maximum(drop_fraction * gain, rule.min_drop * sigma)))
    rounds = np.flatnonzero(dropped)
    return rounds, peak_round[rounds]


def shared_with_local(local: np.ndarray, peak_round: int, t: int, fall: float, rule: NoiseRule) -> bool:
    """Rule 3: local training's smoothed curve ``local`` fell by ``≥ local_share · fall`` from around
    ``peak_round`` to around ``t`` (``local_tolerance`` rounds either side)."""
    tau, n = rule.local_tolerance, local.size
    before = local[max(0, peak_round - tau) : min(n, peak_round + tau + 1)]
    after = local[max(0, t - tau) : min(n, t + tau + 1)]
    if not (np.any(np.isfinite(before)) and np.any(np.isfinite(after))):
        return False
    return bool(np.nanmax(before) - np.nanmin(after) >= rule.local_share * fall)


def detect_noise_collapse(curve: np.ndarray, jump: np.ndarray, base: CollapseRule | None = None,
                          rule: NoiseRule | None = None, *, local: np.ndarray | None = None,
                          is_local: bool = False, mean_cash: np.ndarray | None = None,
                          failed: Sequence[int] = ()) -> NoiseCollapseReport:
    """The module docstring's criterion on one algorithm's raw ``curve`` and ``jump``; ``local``: local
    training's raw curve on the same parties (``None``: no control), ``is_local``: this is that run.

    Raises:
        ValueError: ``curve``, ``jump`` (and ``local``) are not 1-D arrays of the same length.
    """
    base = CollapseRule() if base is None else base
    rule = NoiseRule() if rule is None else rule
    curve, jump = np.asarray(curve, dtype=np.float64), np.asarray(jump, dtype=np.float64)
    if curve.ndim != 1 or curve.shape != jump.shape:
        raise ValueError(f"curve and jump must be 1-D of equal length, got shapes {curve.shape} and {jump.shape}")
    if local is not None and np.shape(local) != curve.shape:
        raise ValueError(f"the local curve must have the curve's shape {curve.shape}, got {np.shape(local)}")
    sigma = curve_noise(curve)
    smoothed = moving_average(curve, base.smoothing)
    drops, peaks = noise_drops(smoothed, sigma, base.drop_fraction, rule)
    control = "self" if is_local else ("absent" if local is None else "applied")
    local_smoothed = None if local is None or is_local else moving_average(local, base.smoothing)
    shared = tuple(int(t) for t, p in zip(drops, peaks, strict=True) if local_smoothed is not None
                   and shared_with_local(local_smoothed, int(p), int(t), smoothed[p] - smoothed[t], rule))
    spikes = find_spikes(jump, base.spike_factor, base.min_history, base.min_spike)
    reach = base.max_lag + base.smoothing - 1
    found = dict(sigma=sigma, drops=tuple(drops.tolist()), shared=shared, local_control=control)
    for t in drops.tolist():
        causes = spikes[(spikes <= t) & (spikes >= t - reach)]
        if t not in shared and causes.size:
            return NoiseCollapseReport(True, int(t), int(causes[0]), kind="spike", **found)
    if len(failed):
        return NoiseCollapseReport(True, None, None, kind="non_finite", **found)
    cash = () if mean_cash is None else all_cash_parties(mean_cash, base)
    cash_collapse = mean_cash is not None and len(cash) > 0 and len(cash) >= base.all_cash_share * len(mean_cash)
    return NoiseCollapseReport(cash_collapse, None, None, kind="all_cash" if cash_collapse else "", **found)
