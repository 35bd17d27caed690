"""Typed server rules (issues 10, 48): one frozen rule per server variant, held by each algorithm object."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from portfed.federation.aggregate import coordinate_median, geometric_median, smoothed_aggregate
from portfed.federation.algorithms import ALGORITHMS, Schedule, make_algorithm
from portfed.federation.algorithms.adaptive import AdagradRule, AdamRule, YogiRule
from portfed.federation.hybrid import LayerwisePenalty
from portfed.federation.prox import Penalty
from portfed.federation.rounds import run_rounds
from portfed.federation.server import (
    CoordinateMedianRule,
    FedAMPRule,
    FedMGDARule,
    GeometricMedianRule,
    HeurFedAMPRule,
    MeanRule,
    ServerContext,
    SmoothedRule,
    initial_server_output,
    server_step,
)
from portfed.federation.testing import QuadraticParty

RNG = np.random.default_rng(10)
HYBRID = LayerwisePenalty({"a": slice(0, 2)}, {"a": Penalty("l1", 0.3)}, Penalty("l2", 0.5))

EXPECTED_RULES = {
    "local": MeanRule(),
    "fedavg": MeanRule(),
    "fedprox": MeanRule(),
    "rfa": GeometricMedianRule(tol=1e-10, max_iter=1000),
    "comed": CoordinateMedianRule(),
    "fedavg+": SmoothedRule(Penalty("l2sq", 0.1), tol=1e-10, max_iter=1000),
    "fedgeomed+": SmoothedRule(Penalty("l2", 0.1), tol=1e-10, max_iter=1000),
    "fedcomed+": SmoothedRule(Penalty("l1", 0.1), tol=1e-10, max_iter=1000),
    "fedmgda+": FedMGDARule(epsilon=0.1, global_lr=Schedule(1.0)),
    "fedavg-n": FedMGDARule(epsilon=0.0, global_lr=Schedule(1.0)),
    "fedamp": FedAMPRule(alpha=Schedule(1.0), attention_scale=100.0),
    "heurfedamp": HeurFedAMPRule(attention_scale=10.0, self_weight=0.5),
    # the personalised baselines sit on FedAvg's server (pFedMe's β mixes after it: its after_round)
    **{name: MeanRule() for name in ("scaffold", "ditto", "pfedme", "perfedavg", "apfl", "fedavg-ft", "fedprox-ft")},
    "fedadam": AdamRule(eta=0.1, beta_1=0.9, beta_2=0.99, tau=1e-9),
    "fedyogi": YogiRule(eta=0.01, beta_1=0.9, beta_2=0.99, tau=1e-3),
    "fedadagrad": AdagradRule(eta=0.1, beta_1=0.0, beta_2=0.0, tau=1e-9),
}


def _spec(name: str):
    return make_algorithm(name, penalty=HYBRID) if name == "hybrid+" else make_algorithm(name)


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_every_registered_algorithm_has_its_rule(name: str) -> None:
    assert _spec(name).server == EXPECTED_RULES[name]


def test_the_rule_follows_the_knobs_not_the_name() -> None:
    assert _spec("hybrid+").server == SmoothedRule(HYBRID, tol=1e-10, max_iter=1000)
    eq34 = make_algorithm("fedcomed+", solver="eq34", rho=2.0, tol=1e-8)
    assert eq34.server == SmoothedRule(Penalty("l1", 2.0), tol=1e-8, max_iter=1000, solver="eq34")
    assert eq34.penalty == Penalty("l1", 2.0)  # ρ reaches the personalization and the aggregate alike
    assert make_algorithm("fedmgda+", epsilon=0.0).server == make_algorithm("fedavg-n").server
    assert make_algorithm("rfa", tol=1e-6, max_iter=7).server == GeometricMedianRule(tol=1e-6, max_iter=7)
    assert set(EXPECTED_RULES) | {"hybrid+"} == set(ALGORITHMS)


def test_rules_are_frozen() -> None:
    rule = make_algorithm("fedgeomed+").server
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.tol = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("name", [*sorted(EXPECTED_RULES), "hybrid+"])
def test_server_step_is_the_rule_step(name: str) -> None:
    spec = _spec(name)
    received = RNG.normal(size=(5, 4)) + 3.0
    extras = spec.initial_extras(received, received.mean(axis=0))  # the adaptive servers' zero moments
    context = ServerContext(global_model=RNG.normal(size=4), round_index=3, weights=RNG.uniform(0.5, 1.0, 5),
                            extras=extras)
    out, direct = server_step(spec.server, received, context), spec.server.step(received, context)
    np.testing.assert_array_equal(out.global_model, direct.global_model)
    assert (out.centers is None) == (direct.centers is None) == (name not in ("fedamp", "heurfedamp"))
    assert (out.iterations, out.converged) == (direct.iterations, direct.converged)
    start = initial_server_output(spec.server, received, context.weights)
    np.testing.assert_array_equal(start.global_model, spec.server.initial(received, context.weights).global_model)


def test_aggregate_rules_compute_their_aggregates() -> None:
    received, weights = RNG.normal(size=(7, 3)) * 2, RNG.uniform(0.1, 1.0, 7)
    context = ServerContext(global_model=np.zeros(3), round_index=0, weights=weights)
    np.testing.assert_allclose(server_step(MeanRule(), received, context).global_model,
                               weights @ received / weights.sum())
    np.testing.assert_array_equal(server_step(CoordinateMedianRule(), received, context).global_model,
                                  coordinate_median(received, weights=weights))
    np.testing.assert_array_equal(server_step(make_algorithm("rfa").server, received, context).global_model,
                                  geometric_median(received, weights=weights).center)
    for name, solver in (("fedgeomed+", "fast"), ("fedcomed+", "eq34")):
        spec = make_algorithm(name, rho=0.5, solver=solver)
        out = server_step(spec.server, received, context)
        expected = smoothed_aggregate(received, spec.penalty, weights=weights, solver=solver)
        np.testing.assert_array_equal(out.global_model, expected.center)
        assert (out.iterations, out.converged) == (expected.iterations, expected.converged)


def test_bad_server_knobs_are_refused_in_one_line_naming_the_algorithm() -> None:
    with pytest.raises(ValueError, match="fedgeomed[+]: unknown solver 'newton'; valid: fast, eq34"):
        make_algorithm("fedgeomed+", solver="newton")
    with pytest.raises(ValueError, match="rfa: max_iter must be a positive integer, got 0"):
        make_algorithm("rfa", max_iter=0)
    with pytest.raises(ValueError, match="fedavg[+]: tol must be a finite number >= 0, got -1.0"):
        make_algorithm("fedavg+", tol=-1)
    with pytest.raises(ValueError, match="received models have size 3, the global model 2"):
        server_step(MeanRule(), np.zeros((2, 3)), ServerContext(global_model=np.zeros(2), round_index=0))


def test_fedavg_n_is_the_mean_of_normalized_updates_in_closed_form() -> None:
    """Paper 002's FedAvg-n: ``w̃ ← w̃ + η_g Σ_k λ_k Δ_k/‖Δ_k‖``, ``Δ_k = w_k − w̃``; a zero update counts as 0."""
    w = np.array([1.0, 2.0])
    deltas = np.array([[3.0, 4.0], [0.0, -2.0], [0.0, 0.0]])  # unit: (0.6, 0.8), (0, −1), 0
    spec = make_algorithm("fedavg-n", global_lr=0.5)
    out = server_step(spec.server, w + deltas, ServerContext(global_model=w, round_index=0))
    np.testing.assert_allclose(out.global_model, w + 0.5 * np.array([0.6, -0.2]) / 3, rtol=0, atol=1e-15)
    assert out.converged and out.iterations == 0
    # Party weights give λ_0; the step is blind to an inflated update (only its direction counts).
    inflated = deltas * np.array([[1000.0], [1.0], [1.0]])
    weighted = server_step(spec.server, w + inflated, ServerContext(global_model=w, round_index=0,
                                                            weights=np.array([2.0, 1.0, 1.0])))
    np.testing.assert_allclose(weighted.global_model, w + 0.5 * np.array([0.3, 0.15]), rtol=0, atol=1e-13)
    # The default global step is 1, decayed like any Schedule knob.
    assert make_algorithm("fedavg-n").global_lr == Schedule(1.0)
    decayed = make_algorithm("fedavg-n", global_lr={"initial": 1.0, "decay": 0.5, "every": 10})
    late = server_step(decayed.server, w + deltas, ServerContext(global_model=w, round_index=10))
    np.testing.assert_allclose(late.global_model, out.global_model, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match=r"'fedavg-n' takes no parameter\(s\) \['epsilon'\]"):
        make_algorithm("fedavg-n", epsilon=0.1)


def test_fedavg_n_runs_rounds_from_the_mean() -> None:
    rng = np.random.default_rng(3)
    parties = [QuadraticParty.random(3, rng, learning_rate=0.2) for _ in range(3)]
    init = rng.normal(size=(3, 3))
    run = run_rounds(parties, make_algorithm("fedavg-n", global_lr=0.1), 1, 5, seed=0, init_params=init)
    start = init.mean(axis=0)
    units = run.state.party_models - start
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    np.testing.assert_allclose(run.state.global_model, start + 0.1 * units.mean(axis=0), atol=1e-12)
