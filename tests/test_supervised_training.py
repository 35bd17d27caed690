"""Supervised trainers on the federation layer: gradients, batched = per-party, convex checks, metrics."""

from __future__ import annotations

import numpy as np
import pytest

from portfed.federation import FederationState, deployed_models, make_algorithm, run_rounds
from portfed.federation.cohort import LocalObjective
from portfed.supervised.data import FederatedData, PartyData, split_party
from portfed.supervised.metrics import Evaluator
from portfed.supervised.models import LinearModel
from portfed.supervised.synthetic import fedprox_synthetic
from portfed.supervised.trainers import SupervisedCohort, make_parties, party_stream


@pytest.fixture(scope="module")
def synthetic() -> FederatedData:
    return fedprox_synthetic(6, 1.0, 1.0, seed=0, n_features=8, n_classes=4, max_samples=120)


@pytest.mark.parametrize("kind", ["logistic", "linear"])
def test_gradient_matches_finite_differences(kind: str) -> None:
    rng = np.random.default_rng(0)
    model = LinearModel(kind, 5, 3 if kind == "logistic" else 0)
    w = 0.3 * rng.standard_normal((2, model.n_params))
    x = rng.standard_normal((2, 7, 5))
    y = rng.integers(0, 3, (2, 7)) if kind == "logistic" else rng.standard_normal((2, 7))
    grad = model.batch(w, x, y).grad
    for j in range(model.n_params):
        step = np.zeros_like(w)
        step[:, j] = 1e-6
        numeric = (model.batch(w + step, x, y).loss - model.batch(w - step, x, y).loss) / 2e-6
        np.testing.assert_allclose(grad[:, j], numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedavg+", "fedgeomed+", "fedamp", "heurfedamp"])
def test_batched_cohort_equals_per_party_trainers(synthetic: FederatedData, name: str) -> None:
    spec = make_algorithm(name)
    init = LinearModel("logistic", 8, 4).init_params(np.random.default_rng(1))
    steps = [3, 1, 3, 2, 3, 3]  # stragglers

    def go(cohort):
        return run_rounds(cohort, spec, 4, steps, k_per_round=4, seed=5, init_params=init)

    batched = go(SupervisedCohort(synthetic, 0.05, 5, seed=9))
    single = go(make_parties(synthetic, 0.05, 5, seed=9))
    np.testing.assert_allclose(batched.state.party_models, single.state.party_models, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(batched.state.global_model, single.state.global_model, rtol=1e-10, atol=1e-12)
    for a, b in zip(batched.records, single.records, strict=True):
        assert a.active == b.active
        np.testing.assert_allclose([p.train_loss for p in a.parties], [p.train_loss for p in b.parties])


def _plain_sgd(party: PartyData, w: np.ndarray, index: np.ndarray, lr: float) -> np.ndarray:
    """Textbook minibatch SGD on softmax cross-entropy, written independently of portfed's model."""
    p, c = party.x_train.shape[1], 4
    for batch in index:
        x, y = party.x_train[batch], party.y_train[batch]
        weights, bias = w[:p * c].reshape(p, c), w[p * c:]
        logits = x @ weights + bias
        prob = np.exp(logits - logits.max(axis=1, keepdims=True))
        prob /= prob.sum(axis=1, keepdims=True)
        prob[np.arange(len(y)), y] -= 1.0
        w = w - lr * np.concatenate([(x.T @ prob).ravel(), prob.sum(axis=0)]) / len(y)
    return w


def test_fedavg_with_one_party_is_centralized_sgd(synthetic: FederatedData) -> None:
    one = FederatedData(parties=synthetic.parties[:1], task="classification", n_features=8, n_classes=4,
                        description="one party")
    init = LinearModel("logistic", 8, 4).init_params(np.random.default_rng(2))
    run = run_rounds(SupervisedCohort(one, 0.1, 4, seed=3), make_algorithm("fedavg"), 6, 5, seed=0,
                     init_params=init)
    stream = party_stream(3, 0)
    index = np.concatenate([stream.integers(0, one.parties[0].n_train, size=(5, 4)) for _ in range(6)])
    expected = _plain_sgd(one.parties[0], init, index, 0.1)
    np.testing.assert_allclose(run.state.global_model, expected, rtol=1e-10, atol=1e-12)


def test_fedavg_reaches_the_least_squares_optimum() -> None:
    rng = np.random.default_rng(0)
    truth = rng.standard_normal(4)
    parties = []
    for _ in range(3):  # noise-free: every party's minimizer is the common truth (bias 0)
        x = rng.standard_normal((40, 4))
        parties.append(split_party(x, x @ truth, (0.8, 0.1, 0.1), rng))
    data = FederatedData(parties=tuple(parties), task="regression", n_features=4, n_classes=0, description="lsq")
    run = run_rounds(SupervisedCohort(data, 0.05, 8, seed=0), make_algorithm("fedavg"), 60, 10, seed=0,
                     init_params=np.zeros(5))
    np.testing.assert_allclose(run.state.global_model, np.append(truth, 0.0), atol=1e-6)


def test_fedavg_plus_with_huge_rho_behaves_as_fedavg(synthetic: FederatedData) -> None:
    init = LinearModel("logistic", 8, 4).init_params(np.random.default_rng(4))
    fedavg = run_rounds(SupervisedCohort(synthetic, 0.05, 5, seed=1), make_algorithm("fedavg"), 5, 4, seed=2,
                        init_params=init, k_per_round=3)
    # ρ → ∞ makes θ_k = (w_k − w̃)/(1 + ρ) vanish; λ = 1 starts from w̃; σ → 0 removes the pull.
    plus = run_rounds(SupervisedCohort(synthetic, 0.05, 5, seed=1),
                      make_algorithm("fedavg+", rho=1e12, lam=1.0, sigma=1e-12), 5, 4, seed=2, init_params=init,
                      k_per_round=3)
    np.testing.assert_allclose(plus.state.global_model, fedavg.state.global_model, atol=1e-9)


def test_prox_and_mix_are_applied_each_step(synthetic: FederatedData) -> None:
    party = make_parties(synthetic, 0.1, 4, seed=0)[0]
    stream = party_stream(0, 0)  # the party's own minibatch stream, replayed
    d = party.model.n_params
    w0, center, target = np.full(d, 0.2), np.ones(d), np.full(d, -1.0)

    def grad(w: np.ndarray) -> np.ndarray:
        batch = stream.integers(0, party.data.n_train, size=(1, 4))[0]
        x, y = party.data.x_train[batch], party.data.y_train[batch]
        return party.model.batch(w[None], x[None], y[None]).grad[0]

    objective = LocalObjective(target=target, sigma=20.0, prox_center=center, prox_coef=2.0)
    result = party.local_train(w0, 1, objective)
    kappa = 1.0 / (1.0 + 0.1 * 20.0)  # the party's own η = 0.1 (paper 003 eq. 14)
    expected = kappa * (w0 - 0.1 * (grad(w0) + 2.0 * (w0 - center))) + (1.0 - kappa) * target
    np.testing.assert_allclose(result.params, expected, rtol=1e-12)
    assert len(result.records) == 1 and result.records[0].loss > 0


def test_evaluator_scores_deployed_models_and_improvement(synthetic: FederatedData) -> None:
    spec = make_algorithm("fedavg")
    cohort = SupervisedCohort(synthetic, 0.05, 5, seed=0)
    init = cohort.model.init_params(np.random.default_rng(0))
    state = FederationState.initial(spec, init, synthetic.n_parties, 0)
    evaluator = Evaluator(cohort.model, synthetic, spec, state, rounds=10, every=5)
    run_rounds(cohort, spec, 10, 5, seed=0, init_params=init, state=state, callback=evaluator)
    trace = evaluator.trace
    assert trace.rounds == [0, 5, 10] and len(trace.improved) == 10
    assert all(0.0 <= f <= 1.0 for f in trace.improved)
    summary = trace.summary()
    means = trace.mean_curve("test")
    assert summary["best"] == means.max() and summary["selected"] == means[np.argmax(trace.mean_curve("val"))]
    acc = [cohort.model.score(state.global_model, p.x_test, p.y_test)[0] for p in synthetic.parties]
    assert summary["final"] == pytest.approx(np.mean(acc))


@pytest.mark.parametrize("name", ["fedavg", "fedamp"])
def test_improvement_is_the_fraction_of_participants_whose_training_loss_did_not_rise(synthetic: FederatedData,
                                                                                      name: str) -> None:
    """Paper 002's fraction, recomputed from each round's deployed models: a party's loss under the models
    deployed after a round is scored once and reused as the next round's "before" only when it trains
    again; with 3 of the parties sampled per round, FedAvg's others get a new deployed model every round."""
    spec = make_algorithm(name)
    cohort = SupervisedCohort(synthetic, 0.5, 5, seed=0)
    init = cohort.model.init_params(np.random.default_rng(0))
    state = FederationState.initial(spec, init, synthetic.n_parties, 0)
    evaluator = Evaluator(cohort.model, synthetic, spec, state, rounds=6)
    deployed, active = [deployed_models(spec, state)], []

    def callback(round_index, run_state, record) -> None:
        deployed.append(deployed_models(spec, run_state))
        active.append(record.active)
        evaluator(round_index, run_state, record)

    run_rounds(cohort, spec, 6, 2, k_per_round=3, seed=0, init_params=init, state=state, callback=callback)

    def loss(params: np.ndarray, k: int) -> float:
        party = synthetic.parties[k]
        return cohort.model.score(params, party.x_train, party.y_train)[1]

    expected = [np.mean([loss(deployed[t + 1][k], k) <= loss(deployed[t][k], k) for k in active[t]])
                for t in range(6)]
    assert evaluator.trace.improved == expected
    assert 0.0 < np.mean(expected) < 1.0  # both outcomes occur, so a stale "before" would show
