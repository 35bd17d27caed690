"""Faulty and hostile parties: every fault kind changes exactly what it should, and every quarantine
path keeps the round going (closed-form checks on quadratic parties)."""

from __future__ import annotations

import numpy as np
import pytest

from portfed.federation import CohortPlan, CohortResult, PartyCohort, make_algorithm, run_rounds
from portfed.federation.faults import Fault, FaultInjector
from portfed.federation.server import initial_server_output
from portfed.federation.testing import QuadraticParty

D = 3


def _parties(n: int = 4) -> list[QuadraticParty]:
    rng = np.random.default_rng(0)
    return [QuadraticParty.random(D, rng, learning_rate=0.2, spread=3.0) for _ in range(n)]


def _honest_round(n: int = 4, steps: int = 2) -> np.ndarray:
    """Party models after one honest FedAvg round from zeros (every party trains from w̃ = 0)."""
    return np.stack([p.local_train(np.zeros(D), steps).params for p in _parties(n)])


def spec_aggregate(spec, models: np.ndarray) -> np.ndarray:
    """The server step of ``spec`` on ``models`` from scratch (round 0)."""
    return initial_server_output(spec.server, models).global_model


def _one_round(*faults: Fault, algorithm: str = "fedavg", **kwargs):
    return run_rounds(_parties(), make_algorithm(algorithm), 1, 2, seed=0, init_params=np.zeros(D),
                      faults=list(faults), **kwargs)


@pytest.mark.parametrize(("kind", "transform"), [
    ("scale", lambda w: 10.0 * w),
    ("sign_flip", lambda w: -w),
])
def test_update_faults_transform_the_update_from_the_reference(kind, transform) -> None:
    honest = _honest_round()
    run = _one_round(Fault(kind, (1,), factor=10.0))
    sent = honest.copy()
    sent[1] = transform(honest[1])  # the reference r_1 = w̃^0 = 0, so the update is the model
    np.testing.assert_allclose(run.state.global_model, sent.mean(axis=0), atol=1e-12)  # the server sees it
    np.testing.assert_allclose(run.state.party_models, honest, atol=1e-12)  # the party keeps what it trained
    assert [p.fault for p in run.records[0].parties] == ["", kind, "", ""]


def test_nan_fault_is_quarantined_and_the_round_goes_on() -> None:
    honest = _honest_round()
    run = _one_round(Fault("nan", (0,)))
    record = run.records[0]
    assert record.quarantined == ((0, f"non-finite update ({D} entries)"),)
    assert record.parties[0].fault == "nan" and record.parties[0].quarantined.startswith("non-finite")
    np.testing.assert_allclose(run.state.party_models, honest, atol=1e-12)  # party 0 keeps what it trained
    np.testing.assert_allclose(run.state.global_model, honest[1:].mean(axis=0), atol=1e-12)


def test_noise_fault_is_seeded_and_sized() -> None:
    honest = _honest_round()
    a = _one_round(Fault("noise", (2,), std=0.5))
    b = _one_round(Fault("noise", (2,), std=0.5))
    np.testing.assert_array_equal(a.state.global_model, b.state.global_model)
    noise = 4 * (a.state.global_model - honest.mean(axis=0))  # party 2's noise, seen through the mean of 4
    assert 0 < np.abs(noise).max() < 5 * 0.5
    np.testing.assert_allclose(a.state.party_models, honest, atol=1e-12)


def test_drop_fault_makes_the_party_absent() -> None:
    run = _one_round(Fault("drop", (3,)))
    record = run.records[0]
    assert record.active == (0, 1, 2)
    assert record.parties[3].fault == "drop" and not record.parties[3].active
    np.testing.assert_allclose(run.state.global_model, _honest_round()[:3].mean(axis=0), atol=1e-12)


def test_straggle_fault_runs_fewer_local_iterations() -> None:
    run = _one_round(Fault("straggle", (1,), steps=1))
    assert [p.local_steps for p in run.records[0].parties] == [2, 1, 2, 2]
    expected = _parties()[1].local_train(np.zeros(D), 1).params
    np.testing.assert_allclose(run.state.party_models[1], expected, atol=1e-12)
    assert run.records[0].parties[1].fault == "straggle"


def test_stale_fault_sends_the_model_held_before_training() -> None:
    init = np.arange(4 * D, dtype=float).reshape(4, D)
    spec = make_algorithm("fedavg+")
    clean = run_rounds(_parties(), spec, 1, 2, seed=0, init_params=init)
    run = run_rounds(_parties(), spec, 1, 2, seed=0, init_params=init, faults=[Fault("stale", (2,))])
    sent = clean.state.party_models.copy()
    sent[2] = init[2]
    np.testing.assert_allclose(run.state.global_model, spec_aggregate(spec, sent), atol=1e-12)
    np.testing.assert_array_equal(run.state.party_models, clean.state.party_models)
    assert run.records[0].parties[2].fault == "stale"


def test_faults_only_hit_their_rounds() -> None:
    run = run_rounds(_parties(), make_algorithm("fedavg"), 3, 1, seed=0, init_params=np.zeros(D),
                     faults=[Fault("nan", (1,), rounds=(1,))])
    assert [r.quarantined != () for r in run.records] == [False, True, False]


def test_a_round_with_no_usable_message_keeps_the_previous_models() -> None:
    clean = run_rounds(_parties(), make_algorithm("fedavg"), 1, 1, seed=0, init_params=np.zeros(D))
    run = run_rounds(_parties(), make_algorithm("fedavg"), 2, 1, seed=0, init_params=np.zeros(D),
                     faults=[Fault("nan", (0, 1, 2, 3), rounds=(1,))])
    two_clean = run_rounds(_parties(), make_algorithm("fedavg"), 2, 1, seed=0, init_params=np.zeros(D))
    np.testing.assert_array_equal(run.state.global_model, clean.state.global_model)  # the server keeps w̃
    np.testing.assert_array_equal(run.state.party_models, two_clean.state.party_models)  # parties trained
    assert run.records[1].aggregator_iterations == 0 and len(run.records[1].quarantined) == 4


def test_all_parties_dropped_is_an_empty_round() -> None:
    run = run_rounds(_parties(), make_algorithm("fedamp"), 2, 1, seed=0, init_params=np.zeros(D),
                     faults=[Fault("drop", (0, 1, 2, 3), rounds=(0,))])
    assert run.records[0].active == () and run.records[1].active == (0, 1, 2, 3)


def test_norm_screen_quarantines_a_scaling_attack_that_the_mean_would_follow() -> None:
    attack = Fault("scale", (0,), factor=1e6)
    unscreened = _one_round(attack)
    screened = _one_round(attack, screen_factor=10.0)
    assert np.linalg.norm(unscreened.state.global_model) > 1e4
    assert screened.records[0].quarantined[0][0] == 0 and "update norm" in screened.records[0].quarantined[0][1]
    np.testing.assert_allclose(screened.state.global_model, _honest_round()[1:].mean(axis=0), atol=1e-12)


class WrongSize:
    learning_rate = 0.2

    def local_train(self, params, steps, objective=None):
        class Result:
            params = np.zeros(D + 1)
            records = [type("Step", (), {"mean_log_return": 0.0, "loss": 0.0})()] * steps

        return Result()


def test_a_message_of_the_wrong_size_is_quarantined() -> None:
    parties = [*_parties(3), WrongSize()]
    run = run_rounds(parties, make_algorithm("rfa"), 1, 1, seed=0, init_params=np.zeros(D))
    assert run.records[0].quarantined == ((3, f"parameters of shape ({D + 1},), expected ({D},)"),)


def test_a_cohort_result_of_the_wrong_shape_is_a_bug_not_a_fault() -> None:
    plan = CohortPlan(round_index=0, parties=np.array([0, 1]), steps=[1, 1], start=np.zeros((2, D)))
    result = CohortResult(params=np.zeros((1, D)), train_reward=np.zeros(1), train_loss=np.zeros(1))
    with pytest.raises(ValueError, match=r"shape \(1, 3\), expected \(2, 3\)"):
        result.checked(plan, D)
    for name in ("train_reward", "train_loss", "train_cash"):  # the per-party statistics too; train_cash may be None
        fields = {"params": np.zeros((2, D)), "train_reward": np.zeros(2), "train_loss": np.zeros(2), name: np.zeros(3)}
        with pytest.raises(ValueError, match=rf"{name} of shape \(3,\), expected \(2,\)"):
            CohortResult(**fields).checked(plan, D)
    assert CohortResult(params=np.zeros((2, D)), train_reward=np.zeros(2), train_loss=np.zeros(2)).checked(
        plan, D).train_cash is None
    assert PartyCohort(_parties(2)).train(plan).params.shape == (2, D)


def test_bad_fault_configurations_raise() -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'melt'"):
        Fault("melt", (0,))
    with pytest.raises(ValueError, match="needs at least one party"):
        Fault("nan", ())
    with pytest.raises(ValueError, match=r"names parties \[7\]"):
        FaultInjector([Fault("nan", (7,))], 4, 0)
    with pytest.raises(ValueError, match="both hit parties"):
        FaultInjector([Fault("nan", (1,)), Fault("drop", (1, 2), rounds=(3,))], 4, 0)
    with pytest.raises(ValueError, match="screen_factor must be > 1.0"):
        _one_round(screen_factor=0.5)


def test_quarantines_are_summarized_in_one_warning_per_party(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.WARNING, logger="portfed.federation.rounds"):
        run_rounds(_parties(), make_algorithm("fedavg"), 3, 1, seed=0, init_params=np.zeros(D),
                   faults=[Fault("nan", (1,))])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"fedavg: party 1's message was quarantined in 3 round(s) (0…2), e.g. non-finite update "
                        f"({D} entries)"]


def test_usable_messages_of_weight_zero_keep_the_server_models() -> None:
    """Party 0 carries all the weight and sends NaN: the others' messages have weight 0, so no step."""
    run = run_rounds(_parties(), make_algorithm("fedavg"), 1, 2, seed=0, init_params=np.zeros(D),
                     party_weights=[1.0, 0.0, 0.0, 0.0], faults=[Fault("nan", (0,))])
    np.testing.assert_array_equal(run.state.global_model, np.zeros(D))
    np.testing.assert_allclose(run.state.party_models, _honest_round(), atol=1e-12)
