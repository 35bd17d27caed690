"""The collapse detector on synthetic learning curves and parameter-change series."""

from __future__ import annotations

import numpy as np
import pytest
from curves import ROUNDS, rising, steady_jumps

from portfed.experiment.reports.collapse import (
    CollapseRule,
    detect_collapse,
    find_drops,
    find_spikes,
    moving_average,
)


def test_spike_followed_by_a_drop_is_a_collapse() -> None:
    curve, jump = rising(), steady_jumps()
    jump[25] = 0.2  # a parameter jump 20× the usual
    curve[26:] = -0.5  # and the curve falls below its start for good
    report = detect_collapse(curve, jump, CollapseRule(smoothing=3, drop_fraction=0.5, spike_factor=3.0))
    assert report.collapsed
    assert report.spike_round == 25
    assert 26 <= report.round <= 28  # the moving average needs a round or two to fall past the threshold
    assert 25 in report.spikes


def test_smooth_rising_curve_is_not_a_collapse() -> None:
    report = detect_collapse(rising(noise=0.01), steady_jumps())
    assert not report.collapsed and report.round is None
    assert report.drops == ()


def test_drop_without_a_spike_is_not_a_collapse() -> None:
    curve = rising()
    curve[26:] = -0.5
    report = detect_collapse(curve, steady_jumps())
    assert report.drops and not report.spikes
    assert not report.collapsed


def test_spike_without_a_drop_is_not_a_collapse() -> None:
    jump = steady_jumps()
    jump[20] = 0.5
    report = detect_collapse(rising(), jump)
    assert report.spikes == (20,)
    assert not report.collapsed


def test_spike_long_before_the_drop_is_not_the_cause() -> None:
    curve, jump = rising(), steady_jumps()
    jump[10] = 0.3
    curve[30:] = -0.5
    report = detect_collapse(curve, jump, CollapseRule(smoothing=1, max_lag=3))
    assert report.spikes == (10,) and report.drops[0] == 30
    assert not report.collapsed


def test_zero_jumps_never_spike() -> None:
    """Local training and Fed+ with λ = 0 never jump at aggregation: they cannot be flagged."""
    curve = rising()
    curve[26:] = -0.5
    assert find_spikes(np.zeros(ROUNDS), 3.0, 3).size == 0
    assert not detect_collapse(curve, np.zeros(ROUNDS)).collapsed


def test_building_blocks() -> None:
    np.testing.assert_allclose(moving_average(np.array([1.0, 3.0, 5.0, np.nan, 9.0]), 2), [1, 2, 4, 5, 9])
    # median of the first three is 1; 4 > 3 × 1 is a spike, 2.5 is not.
    np.testing.assert_array_equal(find_spikes(np.array([1.0, 1.0, 1.0, 4.0, 2.5]), 3.0, 3), [3])
    # peak gain 2 (0 → 2); 0.9 is 1.1 below the peak > 0.5 × 2.
    np.testing.assert_array_equal(find_drops(np.array([0.0, 2.0, 1.5, 0.9]), 0.5), [3])
    assert find_drops(np.array([0.0, -1.0, -2.0]), 0.5).size == 0  # never gained: nothing to lose


@pytest.mark.parametrize("bad", [{"smoothing": 0}, {"drop_fraction": 0.0}, {"spike_factor": 1.0}, {"max_lag": -1}])
def test_rule_validation(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        CollapseRule(**bad)


def test_shapes_must_match() -> None:
    with pytest.raises(ValueError, match="equal length"):
        detect_collapse(np.zeros(5), np.zeros(4))


def test_min_spike_is_an_absolute_floor_and_off_by_default() -> None:
    curve, jump = rising(), steady_jumps() * 1e-5  # parameters that barely move
    jump[25] = 2.5e-6  # twenty times the usual, yet tiny
    curve[26:] = -0.5
    assert detect_collapse(curve, jump, CollapseRule()).collapsed  # the recorded criterion: no floor
    floored = detect_collapse(curve, jump, CollapseRule(min_spike=1e-4))
    assert not floored.collapsed and floored.spikes == ()
    jump *= 1e3  # the same shape at a size above the floor
    assert detect_collapse(curve, jump, CollapseRule(min_spike=1e-4)).spike_round == 25


def test_min_spike_must_be_a_non_negative_number() -> None:
    with pytest.raises(ValueError, match="min_spike must be a finite number >= 0, got -1"):
        CollapseRule(min_spike=-1)
