"""The in-process round loop: sampling, stragglers, determinism, checkpoint/resume, the server's inputs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from portfed.federation import records as records_module
from portfed.federation import rounds as rounds_module
from portfed.federation.algorithms import make_algorithm
from portfed.federation.cohort import CohortPlan
from portfed.federation.local_solve import initial_point
from portfed.federation.rounds import FederationState, run_rounds
from portfed.federation.server import ServerContext
from portfed.federation.testing import QuadraticParty

D = 4


class Recorder:
    """A party that records every ``local_train`` call it receives."""

    def __init__(self, party: QuadraticParty) -> None:
        self.party = party
        self.calls: list[tuple[np.ndarray, int, dict]] = []

    def local_train(self, params, steps, objective=None):
        self.calls.append((np.array(params), steps, objective))
        return self.party.local_train(params, steps, objective)


def _parties(n: int, seed: int = 0) -> list[Recorder]:
    rng = np.random.default_rng(seed)
    return [Recorder(QuadraticParty.random(D, rng, learning_rate=0.2, spread=3.0)) for _ in range(n)]


def _rows(run) -> list[dict]:
    return [row for record in run.records for row in record.rows()]


def _assert_same_rows(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key in ra:
            np.testing.assert_array_equal(ra[key], rb[key], err_msg=key)


def test_samples_k_of_n_and_inactive_parties_keep_their_models() -> None:
    parties = _parties(6)
    snapshots: list[np.ndarray] = [np.zeros((6, D))]
    run = run_rounds(parties, make_algorithm("fedavg+"), 12, 3, k_per_round=2, seed=3, init_params=np.zeros(D),
                     callback=lambda r, state, record: snapshots.append(state.party_models.copy()))
    active_sets = [record.active for record in run.records]
    assert all(len(a) == 2 and len(set(a)) == 2 for a in active_sets)
    assert len(set(active_sets)) > 3  # sampling varies from round to round
    for t, record in enumerate(run.records):
        inactive = [k for k in range(6) if k not in record.active]
        np.testing.assert_array_equal(snapshots[t + 1][inactive], snapshots[t][inactive])
        assert not np.allclose(snapshots[t + 1][list(record.active)], snapshots[t][list(record.active)])
        for party in record.parties:
            assert party.active == (party.party in record.active)
            if not party.active:
                assert party.local_steps == 0 and np.isnan(party.train_reward) and party.round_change_mean == 0.0
    # Each party was called exactly as often as it was sampled.
    counts = np.bincount([k for a in active_sets for k in a], minlength=6)
    assert [len(p.calls) for p in parties] == counts.tolist()


def test_stragglers_run_their_own_number_of_local_steps() -> None:
    parties = _parties(4)
    steps = [1, 3, 5, 7]
    run = run_rounds(parties, make_algorithm("fedavg"), 3, steps, seed=0, init_params=np.zeros(D))
    for party, e in zip(parties, steps, strict=True):
        assert [call[1] for call in party.calls] == [e, e, e]
    assert [p.local_steps for p in run.records[0].parties] == steps


def test_records_match_an_independent_computation() -> None:
    """FedAvg: each party starts from w̃ (λ = 1), so the aggregation jump is |w̃ − w_k|; rewards are the
    means of the step records; distances are to the new global model."""
    parties = _parties(3)
    init = np.random.default_rng(1).normal(size=(3, D))
    run = run_rounds(parties, make_algorithm("fedavg"), 2, 4, seed=0, init_params=init)
    w0_tilde = init.mean(axis=0)
    first = run.records[0]
    models_1 = np.array([p.calls[0][0] for p in parties])  # what each party started from in round 0
    np.testing.assert_allclose(models_1, np.tile(w0_tilde, (3, 1)), atol=1e-15)
    for k, rec in enumerate(first.parties):
        jump = np.abs(models_1[k] - init[k])
        assert rec.aggregation_change_mean == pytest.approx(jump.mean(), abs=1e-15)
        assert rec.aggregation_change_std == pytest.approx(jump.std(), abs=1e-15)
    second = run.records[1]
    models_2 = np.array([p.calls[1][0] for p in parties])  # = w̃^1 for everyone
    for k, rec in enumerate(second.parties):
        # Replay party k's round-1 training to get its reward and new model independently.
        replay = QuadraticParty(parties[k].party.hessian, parties[k].party.center, 0.2).local_train(models_2[k], 4)
        assert rec.train_reward == pytest.approx(np.mean([r.mean_log_return for r in replay.records]), abs=1e-12)
        np.testing.assert_allclose(run.state.party_models[k], replay.params, atol=1e-15)
    np.testing.assert_allclose(run.state.global_model, run.state.party_models.mean(axis=0), atol=1e-15)
    for k, rec in enumerate(second.parties):
        assert rec.distance_to_global == pytest.approx(
            np.linalg.norm(run.state.party_models[k] - run.state.global_model), abs=1e-14)


@pytest.mark.parametrize("block", [2000, 1000, 10, 1])
def test_record_statistics_are_each_rows_own_whatever_the_blocks_and_the_storage_order(monkeypatch, block) -> None:
    """The records' passes go a block of rows at a time; each statistic equals the one of the row alone
    (numpy's pairwise sum over the row), for row-major and column-major models (the latter: models that
    started from one shared vector) and for blocks of every row, several rows, one row.  A block laid out
    as its inputs are would sum a column-major block coordinate by coordinate and differ in the last bits."""
    monkeypatch.setattr(records_module, "_BLOCK", block)
    rng = np.random.default_rng(0)
    n, d = 5, 1000
    parts = {"head": slice(0, 7), "rest": slice(7, None)}
    old_c = rng.normal(size=(n, d))
    for old in (old_c, np.asfortranarray(old_c)):
        rows = np.array([4, 0, 2])
        new = np.asfortranarray(rng.normal(size=(3, d)))
        stats = records_module.absolute_change(new, old, rows, parts)
        for i, k in enumerate(rows):
            change = np.abs(new[i] - old[k])
            assert stats.mean[i] == change.mean() and stats.std[i] == change.std()
            assert stats.part_means[i].tolist() == [change[:7].mean(), change[7:].mean()]
        point = rng.normal(size=d)
        distances = records_module.row_distances(old, point)
        assert distances.tolist() == [np.sqrt(np.sum((old[k] - point) ** 2)) for k in range(n)]


@pytest.mark.parametrize("name", ["fedavg", "fedamp"])
def test_what_a_round_hands_out_are_new_arrays_the_state_does_not_share(name: str) -> None:
    """``references`` (the global model, or FedAMP's centres), ``initial_point`` and the plan are new arrays:
    writing into them leaves the federation's state as it was; the plan keeps its own new arrays uncopied."""
    rng = np.random.default_rng(0)
    state = FederationState.initial(make_algorithm(name), rng.normal(size=(4, D)), 4, seed=0)
    saved = state.state_dict()
    for party in (None, 2, np.array([3, 1])):
        reference = state.references(party)
        assert reference.shape == state.party_models[slice(None) if party is None else party].shape
        reference += 1.0
    plan = make_algorithm(name).plan(state, np.arange(4), [1] * 4)
    assert not plan.start.flags.writeable and not np.shares_memory(plan.start, state.party_models)
    _assert_same_rows([state.state_dict()], [saved])


def test_initial_point_is_the_interpolation_and_a_new_array() -> None:
    rng = np.random.default_rng(1)
    w, r = rng.normal(size=(3, D)), rng.normal(size=D)
    for lam, expected in ((0.0, w), (1.0, np.tile(r, (3, 1))), (0.25, 0.75 * w + 0.25 * r)):
        point = initial_point(w, r, lam)
        np.testing.assert_array_equal(point, expected)
        assert point.flags.writeable and not np.shares_memory(point, w) and not np.shares_memory(point, r)


def test_a_plan_copies_arrays_someone_else_can_write_and_keeps_frozen_ones() -> None:
    start = np.zeros((2, D))
    plan = CohortPlan(round_index=0, parties=np.arange(2), steps=[1, 1], start=start)
    start += 1.0
    assert np.all(plan.start == 0.0) and not plan.start.flags.writeable
    frozen = np.ones((2, D))
    frozen.setflags(write=False)
    assert CohortPlan(round_index=0, parties=np.arange(2), steps=[1, 1], start=frozen).start is frozen
    view = frozen[:, :]  # read-only, but a view: its owner could still change
    assert CohortPlan(round_index=0, parties=np.arange(2), steps=[1, 1], start=view).start is not view


def test_without_change_records_the_run_is_the_same_and_only_those_records_are_nan() -> None:
    init = np.random.default_rng(2).normal(size=(4, D))
    runs = [run_rounds(_parties(4), make_algorithm("fedamp"), 3, 2, k_per_round=3, seed=0, init_params=init,
                       parts={"head": slice(0, 2)}, change_records=flag) for flag in (True, False)]
    _assert_same_rows([runs[0].state.state_dict()], [runs[1].state.state_dict()])
    changes = {"aggregation_change_mean", "aggregation_change_std", "round_change_mean", "distance_to_global",
               "aggregation_change_mean_head", "round_change_mean_head"}
    assert all(np.isfinite([row[key] for row in _rows(runs[0])]).sum() >= 9 for key in changes)
    for with_changes, without in zip(_rows(runs[0]), _rows(runs[1]), strict=True):
        assert all(np.isnan(without[key]) for key in changes)
        np.testing.assert_equal({k: v for k, v in without.items() if k not in changes},
                                {k: v for k, v in with_changes.items() if k not in changes})


def test_fed_plus_with_lambda_zero_has_no_aggregation_jump() -> None:
    run = run_rounds(_parties(3), make_algorithm("fedgeomed+", rho=0.5), 3, 2, seed=0,
                     init_params=np.random.default_rng(2).normal(size=(3, D)))
    assert all(p.aggregation_change_mean == 0.0 for r in run.records for p in r.parties)
    assert all(r.aggregator_converged and r.aggregator_iterations > 0 for r in run.records)


def test_same_seed_same_run_other_seed_other_sampling() -> None:
    def go(seed):
        return run_rounds(_parties(5), make_algorithm("fedcomed+"), 8, 2, k_per_round=3, seed=seed,
                          init_params=np.zeros(D))

    a, b, c = go(11), go(11), go(12)
    _assert_same_rows(_rows(a), _rows(b))
    np.testing.assert_array_equal(a.state.party_models, b.state.party_models)
    assert [r.active for r in a.records] != [r.active for r in c.records]


@pytest.mark.parametrize("name", ["fedavg+", "fedamp", "fedmgda+"])
def test_resume_from_a_state_dict_gives_identical_results(name: str) -> None:
    init = np.random.default_rng(5).normal(size=(5, D))
    spec = make_algorithm(name)
    straight = run_rounds(_parties(5), spec, 6, 3, k_per_round=3, seed=9, init_params=init)
    saved = {}

    def checkpoint(round_index, state, record):
        saved[round_index] = pickle.dumps(state.state_dict())

    first = run_rounds(_parties(5), spec, 3, 3, k_per_round=3, seed=9, init_params=init, callback=checkpoint)
    assert sorted(saved) == [0, 1, 2]
    restored = FederationState.from_state_dict(pickle.loads(saved[2]))
    assert restored.round_index == 3
    second = run_rounds(_parties(5), spec, 6, 3, k_per_round=3, seed=9, init_params=init, state=restored)
    assert [r.round for r in second.records] == [3, 4, 5]
    _assert_same_rows(_rows(first) + _rows(second), _rows(straight))
    for key, value in straight.state.state_dict().items():
        if key != "rng":
            np.testing.assert_array_equal(second.state.state_dict()[key], value, err_msg=key)
    assert second.state.state_dict()["rng"] == straight.state.state_dict()["rng"]


@pytest.mark.parametrize("name", ["fedavg+", "fedamp"])
def test_a_restarted_state_keeps_what_was_learned_and_restarts_the_rounds(name: str) -> None:
    init = np.random.default_rng(5).normal(size=(5, D))
    spec = make_algorithm(name)
    straight = run_rounds(_parties(5), spec, 6, 3, seed=9, init_params=init)
    first = run_rounds(_parties(5), spec, 3, 3, seed=9, init_params=init)
    restarted = first.state.restarted()
    assert restarted.round_index == 0 and restarted.seed == 9
    assert restarted.rng.bit_generator.state == np.random.default_rng(9).bit_generator.state
    for key in ("party_models", "global_model", "centers"):
        np.testing.assert_array_equal(getattr(restarted, key), getattr(first.state, key), err_msg=key)
    second = run_rounds(_parties(5), spec, 3, 3, seed=9, init_params=init, state=restarted)
    assert [r.round for r in second.records] == [0, 1, 2] and first.state.round_index == 3  # not changed
    # Constant schedules and every party active: 3 + 3 restarted rounds are the 6 rounds of one run.
    for key in ("party_models", "global_model", "centers"):
        if getattr(straight.state, key) is not None:
            np.testing.assert_allclose(getattr(second.state, key), getattr(straight.state, key), err_msg=key)
        else:
            assert getattr(second.state, key) is None
    assert not np.allclose(second.state.party_models, first.state.party_models)


def test_a_restarted_state_copies_the_personalised_extras() -> None:
    state = FederationState.initial(make_algorithm("scaffold"), np.ones(D), 3, seed=1)
    state.extras = {name: value + 1.0 for name, value in state.extras.items()}
    assert state.extras
    restarted = state.restarted()
    for name, value in state.extras.items():
        np.testing.assert_array_equal(restarted.extras[name], value)
        restarted.extras[name][...] = -7.0
        assert not np.any(state.extras[name] == -7.0)


def test_server_receives_a_k_by_d_float_array_and_nothing_from_the_parties(monkeypatch) -> None:
    seen = []
    original = rounds_module.server_step

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(rounds_module, "server_step", spy)
    run_rounds(_parties(6), make_algorithm("rfa"), 4, 2, k_per_round=4, seed=0, init_params=np.zeros(D))
    assert len(seen) == 4
    for (rule, received, context), kwargs in seen:
        assert kwargs == {}
        assert rule == make_algorithm("rfa").server
        assert type(received) is np.ndarray and received.dtype == np.float64 and received.shape == (4, D)
        assert type(context) is ServerContext
        assert type(context.global_model) is np.ndarray and context.global_model.shape == (D,)
        assert isinstance(context.round_index, int) and context.weights is None and not context.extras


def test_party_weights_reach_the_aggregate() -> None:
    init = np.arange(3 * D, dtype=float).reshape(3, D)
    state = FederationState.initial(make_algorithm("fedavg"), init, 3, seed=0, weights=np.array([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(state.global_model, (init[0] + init[2]) / 2)


def test_progress_bar_and_callback_arguments() -> None:
    calls = []
    run = run_rounds(_parties(2), make_algorithm("local"), 3, 1, seed=0, init_params=np.zeros(D), progress=True,
                     callback=lambda r, state, record: calls.append((r, state.round_index, record.round)))
    assert calls == [(0, 1, 0), (1, 2, 1), (2, 3, 2)]
    assert len(run.records) == 3


def test_bad_arguments_raise() -> None:
    parties = _parties(3)
    spec = make_algorithm("fedavg")
    zeros = np.zeros(D)
    with pytest.raises(ValueError, match=r"k_per_round must be an integer in \[1, 3\], got 4"):
        run_rounds(parties, spec, 1, 1, k_per_round=4, seed=0, init_params=zeros)
    with pytest.raises(ValueError, match="one int per party"):
        run_rounds(parties, spec, 1, [1, 2], seed=0, init_params=zeros)
    with pytest.raises(ValueError, match="local_steps of party 1"):
        run_rounds(parties, spec, 1, [1, 0, 2], seed=0, init_params=zeros)
    with pytest.raises(ValueError, match=r"init_params must have shape \(d,\) or \(3, d\)"):
        run_rounds(parties, spec, 1, 1, seed=0, init_params=np.zeros((2, D)))
    with pytest.raises(TypeError, match="party 0"):
        run_rounds([object()], spec, 1, 1, seed=0, init_params=zeros)
    done = run_rounds(parties, spec, 2, 1, seed=0, init_params=zeros)
    with pytest.raises(ValueError, match="rounds must be an integer >= the 2 rounds"):
        run_rounds(parties, spec, 1, 1, seed=0, init_params=zeros, state=done.state)
    with pytest.raises(ValueError, match="cannot resume"):
        run_rounds(parties, make_algorithm("rfa"), 3, 1, seed=0, init_params=zeros, state=done.state)
    with pytest.raises(ValueError, match="cannot resume"):
        run_rounds(parties, spec, 3, 1, seed=1, init_params=zeros, state=done.state)


class BrokenParty(Recorder):
    def local_train(self, params, steps, objective=None):
        result = super().local_train(params, steps, objective)
        result.params[0] = np.nan
        return result


def test_a_party_returning_nan_is_quarantined_and_named() -> None:
    parties = _parties(3)
    parties[2] = BrokenParty(parties[2].party)
    run = run_rounds(parties, make_algorithm("fedavg"), 2, 1, seed=0, init_params=np.zeros(D))
    for record in run.records:
        assert record.quarantined == ((2, "non-finite update (1 entries)"),)
        assert [p.quarantined for p in record.parties] == ["", "", "non-finite update (1 entries)"]
    assert np.all(np.isfinite(run.state.party_models)) and np.all(np.isfinite(run.state.global_model))
    np.testing.assert_array_equal(run.state.party_models[2], np.zeros(D))  # it keeps its model
