"""A Party: the federation's LocalTrainer over a private EIIE agent, data and augmenter."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from portfed.agents import AgentConfig
from portfed.data import load_market, train_test_split
from portfed.experiment.party import Party
from portfed.federation import LocalObjective, LocalTrainer
from portfed.generators import Augmenter, make_generator

CONFIG = AgentConfig(window=5, batch_size=8, learning_rate=1e-3)


@pytest.fixture(scope="module")
def train():
    market = load_market("djia", tickers=["A", "B", "C"])
    return train_test_split(market, 40)[0]


def _party(train, every: int | None = 5, seed: int = 3) -> Party:
    augmenter = None if every is None else Augmenter(make_generator("gbm"), synthetic_days=20,
                                                     regenerate_every=every, seed=seed).fit(train)
    return Party(0, train, CONFIG, seed, augmenter)


def test_is_a_local_trainer_that_returns_a_parameter_vector(train) -> None:
    party = _party(train)
    trainer: LocalTrainer = party  # the protocol, checked statically
    w0 = np.zeros(party.n_parameters)
    result = trainer.local_train(w0, 3)
    assert result.params.shape == (party.n_parameters,) and result.params.dtype == np.float64
    assert len(result.records) == 3 and not np.array_equal(result.params, w0)


def test_regeneration_schedule_does_not_depend_on_round_grouping(train) -> None:
    """12 iterations with regeneration every 5: one call, or calls of 3 crossing the boundaries mid-call."""
    one, chunked = _party(train), _party(train)
    w0 = np.full(one.n_parameters, 0.01)
    whole = one.local_train(w0, 12)
    params, records = w0, []
    for _ in range(4):
        part = chunked.local_train(params, 3)
        params, records = part.params, records + part.records
    np.testing.assert_array_equal(whole.params, params)
    assert [r.mean_log_return for r in whole.records] == [r.mean_log_return for r in records]
    assert one.state_dict()["augmenter"]["n_regenerations"] == 3  # blocks 0, 1, 2
    assert one.local_iterations == 12


def test_fed_plus_mix_and_prox_reach_the_trainer(train) -> None:
    a, b = _party(train, None), _party(train, None)
    w0 = np.full(a.n_parameters, 0.01)
    plain = a.local_train(w0, 2).params
    mixed = b.local_train(w0, 2, LocalObjective(target=np.zeros_like(w0), sigma=1.0 / CONFIG.learning_rate)).params
    assert np.linalg.norm(mixed) < np.linalg.norm(plain)


def test_state_round_trip_resumes_bit_for_bit_across_a_regeneration(train) -> None:
    """Saved exactly at a regeneration boundary (iteration 10), the restored party regenerates as the
    uninterrupted one does (PVM rows of the new synthetic block reset)."""
    reference = _party(train)
    w0 = np.full(reference.n_parameters, 0.02)
    params = reference.local_train(w0, 10).params
    saved = reference.state_dict()
    expected = reference.local_train(params, 7)
    restored = _party(train)
    restored.load_state_dict(saved)
    got = restored.local_train(params, 7)
    np.testing.assert_array_equal(expected.params, got.params)
    assert [r.loss for r in expected.records] == [r.loss for r in got.records]


def test_a_deep_copy_of_a_fresh_party_trains_like_a_freshly_built_one(train) -> None:
    template = _party(train)
    copied, fresh = copy.deepcopy(template), _party(train)
    w0 = np.full(template.n_parameters, 0.01)
    np.testing.assert_array_equal(copied.local_train(w0, 8).params, fresh.local_train(w0, 8).params)
    assert template.local_iterations == 0  # the template itself never trained


def test_evaluation_uses_the_given_parameters_and_leaves_the_network_alone(train) -> None:
    party = _party(train, None)
    trained = party.local_train(np.full(party.n_parameters, 0.01), 5).params
    other = np.zeros_like(trained)
    assert party.evaluate_log_return(trained, 20) != party.evaluate_log_return(other, 20)
    np.testing.assert_array_equal(party.local_train(None, 0).params, trained)
    policy = party.policy(other, "x")
    assert policy.name == "x"
    np.testing.assert_array_equal(party.local_train(None, 0).params, trained)
    with pytest.raises(ValueError, match="days"):
        party.evaluate_log_return(trained, 0)


def test_mismatched_checkpoint_is_refused(train) -> None:
    with pytest.raises(ValueError, match="augmenter"):
        _party(train, None).load_state_dict(_party(train).state_dict())
