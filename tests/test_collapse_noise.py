"""The second collapse criterion (noise-aware, local training as the control) on recorded and built curves.

The first study's only flag is rebuilt from its recorded run: ``configs/aggregation_spikes.yaml``
(RFA, 2 of 10 parties per round, seed 1) rerun with
``portfed compare configs/aggregation_spikes.yaml -a local,rfa`` on this code — the first criterion
flags RFA at round 20 again, spikes at rounds 5 and 20, exactly as ``docs/reports/reproduction_earlier.md`` §3
records, and the held-out return is the recorded 33 % — and its party-averaged curves (4 significant
digits) are below.  Their std is the recorded 4.6e-4, their 3-round moving average peaks 2e-5 above
round 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from curves import ROUNDS, rising, steady_jumps

from portfed.experiment.config import parse_config
from portfed.experiment.party import learning_curve
from portfed.experiment.reports import CollapseRule, detect_collapse
from portfed.experiment.reports.collapse_noise import (
    NoiseRule,
    curve_noise,
    detect_noise_collapse,
    noise_drops,
)
from portfed.federation import make_algorithm, run_rounds
from portfed.federation.faults import Fault
from portfed.federation.testing import QuadraticParty

SPIKES_RFA = np.array([
    0.0006627, 0.0006144, 0.000129, -0.0008185, -0.0002986, -0.0002127, 3.079e-05, 0.0001512, -0.0001174,
    0.0002519, -2.167e-05, 0.0001489, 0.0008293, 0.0006047, 0.000604, 0.0001045, 0.000614, 0.0004471, 5.424e-05,
    0.0004159, 0.0008952, -0.0006673, 0.0003501, 0.00106, -0.0001608, -0.0005951, -6.739e-05, 5.607e-05,
    0.0007184, 0.0007819])
SPIKES_RFA_JUMP = np.array([
    0.0, 0.004111, 0.007087, 0.01014, 0.001817, 0.01812, 0.01005, 0.00597, 0.009293, 0.01582, 0.01459, 0.00424,
    0.01797, 0.007561, 0.00168, 0.006143, 0.0161, 0.002714, 0.003407, 0.006499, 0.02267, 0.006399, 0.009145,
    0.004656, 0.006263, 0.004497, 0.005467, 0.006161, 0.00482, 0.007663])
SPIKES_LOCAL = np.array([
    0.0006627, 0.0005918, 8.593e-05, -0.0008254, -0.0003268, -0.0002859, -4.057e-05, 8.992e-05, -0.0002535,
    -5.816e-06, -0.0001176, -6.692e-06, 0.0007671, 0.0004807, 0.0004675, -1.903e-05, 0.0005657, 0.0003087,
    -1.031e-05, 0.0005927, 0.0005349, -0.0006875, 0.000242, 0.0008206, -0.0002288, -0.000456, 0.0001594,
    3.789e-05, 0.0005277, 0.001038])



def test_the_recorded_false_positive_is_flagged_by_the_first_criterion_only() -> None:
    assert np.std(SPIKES_RFA) == pytest.approx(4.6e-4, abs=0.1e-4)  # the recorded round-to-round noise
    first = detect_collapse(SPIKES_RFA, SPIKES_RFA_JUMP, CollapseRule())
    assert first.collapsed and first.round == 20 and first.spikes == (5, 20)  # as recorded
    for local in (None, SPIKES_LOCAL):
        second = detect_noise_collapse(SPIKES_RFA, SPIKES_RFA_JUMP, local=local)
        assert not second.collapsed and second.kind == ""
        assert second.drops == ()  # the curve never rose above its noise: nothing to lose
        assert second.sigma > 10 * 2e-5  # the peak gain is a small fraction of one noise unit


def test_a_smooth_rising_run_is_not_flagged() -> None:
    report = detect_noise_collapse(rising(noise=0.01), steady_jumps())
    assert not report.collapsed and report.drops == ()


def test_a_spike_followed_by_a_large_drop_is_flagged() -> None:
    curve, jump = rising(noise=0.01), steady_jumps()
    jump[25] = 0.2
    curve[26:] -= 1.5  # falls below its start for good
    report = detect_noise_collapse(curve, jump)
    assert report.collapsed and report.kind == "spike" and report.spike_round == 25
    assert 26 <= report.round <= 28 and report.local_control == "absent"


def _quadratic_curves(faults: tuple[Fault, ...], algorithm: str) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parties = [QuadraticParty.random(6, rng, spread=2.0, learning_rate=0.05) for _ in range(8)]
    run = run_rounds(parties, make_algorithm(algorithm), 30, 5, seed=0, init_params=np.zeros(6), faults=faults)
    return learning_curve(pd.DataFrame([row for record in run.records for row in record.rows()]))


def test_the_far_away_aggregate_control_is_flagged_with_local_training_as_the_control() -> None:
    """tests/test_collapse_controls.py's positive control: every party's update scaled by 1e3 in round 15."""
    fault = (Fault("scale", parties=tuple(range(8)), rounds=(15,), factor=1e3),)
    faulty, clean = _quadratic_curves(fault, "fedavg"), _quadratic_curves((), "fedavg")
    local = _quadratic_curves(fault, "local")["train_reward"].to_numpy()
    report = detect_noise_collapse(faulty["train_reward"].to_numpy(), faulty["aggregation_change_mean"].to_numpy(),
                                   local=local)
    assert report.collapsed and report.kind == "spike" and report.local_control == "applied"
    assert report.spike_round == 16 and 16 <= report.round <= 19 and report.shared == ()
    assert not detect_noise_collapse(clean["train_reward"].to_numpy(), clean["aggregation_change_mean"].to_numpy(),
                                     local=local).collapsed


def test_a_drop_that_local_training_shares_is_not_a_collapse() -> None:
    curve, jump = rising(noise=0.01), steady_jumps()
    jump[25] = 0.2
    curve[26:] -= 1.5
    shared_local = rising(noise=0.01, seed=5)
    shared_local[27:] -= 1.2  # the same fall one round later: within the tolerance of 2 rounds
    report = detect_noise_collapse(curve, jump, local=shared_local)
    assert not report.collapsed and report.drops and set(report.drops) == set(report.shared)
    late_local = rising(noise=0.01, seed=5)
    late_local[33:] -= 1.2  # a fall 7 rounds later is not the same drop
    assert detect_noise_collapse(curve, jump, local=late_local).collapsed
    small_local = rising(noise=0.01, seed=5)
    small_local[26:] -= 0.3  # a dip of a fifth of the federated fall is not sharing it
    assert detect_noise_collapse(curve, jump, local=small_local).collapsed


def test_local_training_itself_is_its_own_control() -> None:
    curve = rising(noise=0.01)
    curve[26:] -= 1.5
    report = detect_noise_collapse(curve, np.zeros(ROUNDS), local=curve, is_local=True)
    assert report.local_control == "self" and report.shared == () and not report.collapsed


def test_blow_up_and_all_cash_carry_over_from_the_first_criterion() -> None:
    flat, steady = np.linspace(0.0, 1.0, ROUNDS), np.full(ROUNDS, 0.01)
    assert detect_noise_collapse(flat, steady, failed=[1]).kind == "non_finite"
    assert detect_noise_collapse(flat, steady, mean_cash=np.array([1.0, 1.0, 0.2])).kind == "all_cash"
    assert not detect_noise_collapse(flat, steady, mean_cash=np.array([0.2, 0.2, 0.2])).collapsed


def test_noise_is_the_robust_std_of_white_noise_and_ignores_one_large_step() -> None:
    noise = 0.01 * np.random.default_rng(3).standard_normal(2000)
    assert curve_noise(noise) == pytest.approx(0.01, rel=0.1)
    stepped = noise.copy()
    stepped[1000:] -= 5.0  # a collapse-sized step moves one difference, not the MAD
    assert curve_noise(stepped) == pytest.approx(curve_noise(noise), rel=0.02)
    assert curve_noise(np.arange(50.0)) == 0.0  # a straight line has no noise


def test_drops_need_a_gain_and_a_fall_of_several_noise_units() -> None:
    curve = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    drops, peaks = noise_drops(curve, 0.1, 0.5, NoiseRule(min_gain=4, min_drop=4))
    assert drops.tolist() == [3, 4] and peaks.tolist() == [2, 2]  # fell 1 and 2 from the peak 2 at round 2
    assert noise_drops(curve, 0.3, 0.5, NoiseRule(min_gain=4, min_drop=4))[0].tolist() == [4]  # 1 < 4σ = 1.2
    assert noise_drops(curve, 0.6, 0.5, NoiseRule(min_gain=4, min_drop=4))[0].size == 0  # gain 2 < 4σ = 2.4


@pytest.mark.parametrize(("bad", "message"), [
    ({"min_gain": -1.0}, "min_gain must be a finite number >= 0, got -1.0"),
    ({"min_drop": float("nan")}, "min_drop must be a finite number >= 0"),
    ({"local_share": 0.0}, r"local_share must lie in \(0, 1\], got 0.0"),
    ({"local_tolerance": 1.5}, "local_tolerance must be an integer >= 0, got 1.5"),
])
def test_rule_validation(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoiseRule(**bad)


def test_shapes_must_match() -> None:
    with pytest.raises(ValueError, match="equal length"):
        detect_noise_collapse(np.zeros(5), np.zeros(4))
    with pytest.raises(ValueError, match="local curve"):
        detect_noise_collapse(np.zeros(5), np.zeros(5), local=np.zeros(4))


def test_the_config_section_feeds_both_rules_and_leaves_the_first_at_its_recorded_defaults() -> None:
    from portfed.experiment.reports import collapse_rule, noise_rule

    config = parse_config({"experiment": "federated", "collapse": {"noise": {"min_gain": 6, "local_tolerance": 1}}})
    assert collapse_rule(config) == CollapseRule()
    assert noise_rule(config) == NoiseRule(min_gain=6.0, local_tolerance=1)


def test_without_local_training_among_the_algorithms_the_control_is_absent() -> None:
    from portfed.experiment.reports import assess_noise_collapse

    curve, jump = rising(noise=0.01), steady_jumps()
    jump[25] = 0.2
    curve[26:] -= 1.5
    shared_local = curve + 0.001
    frame = pd.DataFrame({"train_reward": curve, "aggregation_change_mean": jump})
    local_frame = pd.DataFrame({"train_reward": shared_local, "aggregation_change_mean": np.zeros(ROUNDS)})
    metrics = pd.DataFrame({"strategy": ["fedavg", "local"], "party": [0, 0], "mean_cash": [0.1, 0.1],
                            "failed": ["", ""]})
    config = parse_config({"experiment": "federated"})
    alone = assess_noise_collapse({"fedavg": frame}, metrics, config)["fedavg"]
    assert alone.collapsed and alone.local_control == "absent"
    both = assess_noise_collapse({"fedavg": frame, "local": local_frame}, metrics, config)
    assert not both["fedavg"].collapsed and both["fedavg"].local_control == "applied"
    assert both["local"].local_control == "self" and not both["local"].collapsed
