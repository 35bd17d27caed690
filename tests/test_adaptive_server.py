"""FedAdam, FedYogi, FedAdagrad (Reddi et al. 2021, Alg. 2; Flower's strategies): hand-computed rounds,
Flower's update written out independently, the defaults, the knobs, and bit-exact resume from a saved state."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from portfed.federation import FederationState, deployed_models, make_algorithm, run_rounds
from portfed.federation.algorithms.adaptive import AdagradRule, AdamRule, YogiRule
from portfed.federation.server import ServerContext, server_step
from portfed.federation.testing import QuadraticParty

D = 3


def _two_rounds(name: str, **knobs: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """Two server steps from ``w̃ = 0``: received means ``(2, −4)`` then ``(4, −1)`` (two parties each)."""
    algorithm = make_algorithm(name, **knobs)
    extras = algorithm.initial_extras(np.zeros((2, 2)), np.zeros(2))
    first = server_step(algorithm.server, np.array([[1.0, -2.0], [3.0, -6.0]]),
                        ServerContext(global_model=np.zeros(2), round_index=0, extras=extras))
    second = server_step(algorithm.server, np.array([[4.0, 0.0], [4.0, -2.0]]),
                         ServerContext(global_model=first.global_model, round_index=1, extras=first.extras))
    return first.global_model, second.global_model, dict(second.extras)


def test_fedadagrad_two_rounds_by_hand() -> None:
    """β₁ = 0, η = τ = 1: Δ₀ = (2, −4), v₀ = (4, 16), w̃₁ = (2/3, −4/5); Δ₁ = (4 − 2/3, −1 + 4/5),
    v₁ = v₀ + Δ₁², w̃₂ = w̃₁ + Δ₁/(√v₁ + 1)."""
    one, two, extras = _two_rounds("fedadagrad", beta_1=0.0, eta=1.0, tau=1.0)
    np.testing.assert_allclose(one, [2 / 3, -4 / 5], rtol=0, atol=1e-15)
    d = (4 - 2 / 3, -1 + 4 / 5)
    v = (4 + d[0] ** 2, 16 + d[1] ** 2)
    np.testing.assert_allclose(two, [2 / 3 + d[0] / (math.sqrt(v[0]) + 1), -4 / 5 + d[1] / (math.sqrt(v[1]) + 1)],
                               rtol=0, atol=1e-15)
    np.testing.assert_allclose(extras["server_v"], v, rtol=0, atol=1e-14)
    np.testing.assert_allclose(extras["server_m"], d, rtol=0, atol=1e-15)


def test_fedadam_and_fedyogi_two_rounds_by_hand() -> None:
    """β₁ = β₂ = ½, η = τ = 1.  Round 0 (both): m = (1, −2), v = ½Δ² = (2, 8), w̃₁ = m/(√v + 1).
    Round 1: Δ₁ = (4, −1) − w̃₁, m₁ = ½ m + ½ Δ₁; Adam v₁ = ½ v + ½ Δ₁², Yogi v₁ = v − ½ Δ₁² sign(v − Δ₁²)."""
    w1 = np.array([1 / (math.sqrt(2) + 1), -2 / (math.sqrt(8) + 1)])
    delta = np.array([4.0, -1.0]) - w1
    m1 = 0.5 * np.array([1.0, -2.0]) + 0.5 * delta
    v0 = np.array([2.0, 8.0])
    adam_v = 0.5 * v0 + 0.5 * delta**2
    yogi_v = v0 - 0.5 * delta**2 * np.sign(v0 - delta**2)
    assert np.sign(v0 - delta**2).tolist() == [-1.0, 1.0]  # Yogi grows v on one coordinate, shrinks it on the other
    for name, v1 in (("fedadam", adam_v), ("fedyogi", yogi_v)):
        one, two, extras = _two_rounds(name, beta_1=0.5, beta_2=0.5, eta=1.0, tau=1.0)
        np.testing.assert_allclose(one, w1, rtol=0, atol=1e-15)
        np.testing.assert_allclose(two, w1 + m1 / (np.sqrt(v1) + 1.0), rtol=0, atol=1e-15)
        np.testing.assert_allclose(extras["server_v"], v1, rtol=0, atol=1e-14)
    assert not np.allclose(adam_v, yogi_v)


def _flower(kind: str, rounds: list[np.ndarray], weights: np.ndarray, eta: float, beta_1: float, beta_2: float,
            tau: float) -> np.ndarray:
    """Flower's ``aggregate_fit`` of FedAdam / FedYogi / FedAdagrad, line by line, on lists of coordinates."""
    current = [float(x) for x in rounds[0].T @ weights / weights.sum()]
    m_t = v_t = None
    for received in rounds[1:]:
        fedavg = [float(x) for x in received.T @ weights / weights.sum()]
        delta_t = [x - y for x, y in zip(fedavg, current, strict=True)]
        m_t = [0.0] * len(delta_t) if not m_t else m_t
        m_t = [beta_1 * x + (1 - beta_1) * y for x, y in zip(m_t, delta_t, strict=True)]
        v_t = [0.0] * len(delta_t) if not v_t else v_t
        if kind == "adam":
            v_t = [beta_2 * x + (1 - beta_2) * y * y for x, y in zip(v_t, delta_t, strict=True)]
        elif kind == "yogi":
            v_t = [x - (1.0 - beta_2) * y * y * float(np.sign(x - y * y)) for x, y in zip(v_t, delta_t, strict=True)]
        else:
            v_t = [x + y * y for x, y in zip(v_t, delta_t, strict=True)]
        current = [x + eta * y / (math.sqrt(z) + tau) for x, y, z in zip(current, m_t, v_t, strict=True)]
    return np.array(current)


@pytest.mark.parametrize(("name", "kind"), [("fedadam", "adam"), ("fedyogi", "yogi"), ("fedadagrad", "adagrad")])
def test_the_server_follows_flowers_update_with_flowers_defaults(name: str, kind: str) -> None:
    rng = np.random.default_rng(4)
    rounds = [rng.normal(size=(4, 5)) for _ in range(6)]
    weights = rng.uniform(0.5, 2.0, 4)
    algorithm = make_algorithm(name)
    rule = algorithm.server
    start = rule.initial(rounds[0], weights)
    state = FederationState(algorithm=name, seed=0, round_index=0, global_model=start.global_model,
                            party_models=rounds[0].copy(), centers=None, rng=np.random.default_rng(0),
                            extras=algorithm.initial_extras(rounds[0], start.global_model))
    for t, received in enumerate(rounds[1:]):
        out = server_step(rule, received, ServerContext(global_model=state.global_model, round_index=t,
                                                        weights=weights, extras=state.extras))
        state.global_model = out.global_model
        state.extras.update(out.extras)
    expected = _flower(kind, rounds, weights, rule.eta, rule.beta_1, rule.beta_2, rule.tau)
    np.testing.assert_allclose(state.global_model, expected, rtol=1e-13, atol=1e-13)


def test_flowers_defaults_and_the_knobs() -> None:
    assert make_algorithm("fedadam").server == AdamRule(eta=0.1, beta_1=0.9, beta_2=0.99, tau=1e-9)
    assert make_algorithm("fedyogi").server == YogiRule(eta=0.01, beta_1=0.9, beta_2=0.99, tau=1e-3)
    assert make_algorithm("fedadagrad").server == AdagradRule(eta=0.1, beta_1=0.0, beta_2=0.0, tau=1e-9)
    assert make_algorithm("fedadam", eta=0.5, tau=1e-3).server == AdamRule(eta=0.5, beta_1=0.9, beta_2=0.99, tau=1e-3)
    with pytest.raises(ValueError, match=r"'fedadagrad' takes no parameter\(s\) \['beta_2'\]; tunable parameters: eta"):
        make_algorithm("fedadagrad", beta_2=0.5)
    with pytest.raises(ValueError, match=r"fedyogi: beta_1 must lie in \[0, 1\), got 1.0"):
        make_algorithm("fedyogi", beta_1=1.0)
    with pytest.raises(ValueError, match="fedadam: tau must be a finite number > 0, got 0.0"):
        make_algorithm("fedadam", tau=0)
    with pytest.raises(ValueError, match="fedadam: eta must be a number, got 'x'"):
        make_algorithm("fedadam", eta="x")


def _parties(n: int = 4) -> list[QuadraticParty]:
    rng = np.random.default_rng(2)
    return [QuadraticParty.random(D, rng, spread=2.0, learning_rate=0.1) for _ in range(n)]


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedadagrad"])
def test_rounds_resume_from_a_saved_state_with_the_same_numbers(name: str) -> None:
    """The moments are in the state (``extras``): 3 rounds, a pickled ``state_dict``, 3 more rounds equal 6
    rounds straight, bit for bit; the parties deploy ``w̃``."""
    algorithm = make_algorithm(name, eta=0.05)
    straight = run_rounds(_parties(), algorithm, 6, 4, k_per_round=3, seed=1, init_params=np.zeros(D)).state
    first = run_rounds(_parties(), algorithm, 3, 4, k_per_round=3, seed=1, init_params=np.zeros(D)).state
    saved = FederationState.from_state_dict(pickle.loads(pickle.dumps(first.state_dict())))
    assert set(saved.extras) == {"server_m", "server_v"} and np.any(saved.extras["server_v"] > 0)
    parties = _parties()
    for party, model in zip(parties, saved.party_models, strict=True):
        party.params = model.copy()
    again = run_rounds(parties, algorithm, 6, 4, k_per_round=3, seed=1, init_params=np.zeros(D), state=saved).state
    np.testing.assert_array_equal(again.global_model, straight.global_model)
    for key in ("server_m", "server_v"):
        np.testing.assert_array_equal(again.extras[key], straight.extras[key])
    np.testing.assert_array_equal(deployed_models(algorithm, straight), np.tile(straight.global_model, (4, 1)))


def test_an_adaptive_server_moves_towards_the_parties_optimum() -> None:
    parties = _parties()
    optimum = np.linalg.solve(sum(p.hessian for p in parties), sum(p.hessian @ p.center for p in parties))
    start = np.linalg.norm(optimum)
    state = run_rounds(parties, make_algorithm("fedadam", eta=0.05), 60, 2, seed=0, init_params=np.zeros(D)).state
    assert np.linalg.norm(state.global_model - optimum) < 0.2 * start


def test_the_portfolio_checkpoint_holds_the_moments(tmp_path) -> None:
    """The experiment's checkpoint file (what ``portfed run --resume`` reads) keeps ``server_m``/``server_v``:
    a state restored from it continues with the same numbers."""
    from portfed.experiment.runs import load_checkpoint, save_checkpoint

    algorithm = make_algorithm("fedyogi", eta=0.05)
    first = run_rounds(_parties(), algorithm, 3, 4, seed=2, init_params=np.zeros(D)).state
    save_checkpoint(tmp_path / "checkpoint.pt", "key", {"federation": first.state_dict()})
    restored = FederationState.from_state_dict(load_checkpoint(tmp_path / "checkpoint.pt", "key")["federation"])
    for key in ("server_m", "server_v"):
        np.testing.assert_array_equal(restored.extras[key], first.extras[key])
    parties = _parties()
    for party, model in zip(parties, restored.party_models, strict=True):
        party.params = model.copy()
    again = run_rounds(parties, algorithm, 5, 4, seed=2, init_params=np.zeros(D), state=restored).state
    straight = run_rounds(_parties(), algorithm, 5, 4, seed=2, init_params=np.zeros(D)).state
    np.testing.assert_array_equal(again.global_model, straight.global_model)
