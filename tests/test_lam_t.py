"""Fed+'s constant ``λ_k^t`` (``lam_t``): the weight of the server's model in the personalization.

Paper 000 §5.2: every Fed+ variant computes ``z_k = R(w̃, w_k) = (1 − λ_k^t) w_k + λ_k^t w̃`` with λ_k^t
derived from ρ; §8.2 keeps it constant and tunes it.  With ``lam_t`` set, the three variants share R and
differ only in their aggregate 𝒜 — so where 𝒜 no longer reaches the parties they train the same models,
and where it does with the mean they are FedProx.
"""

from __future__ import annotations

import numpy as np
import pytest

from portfed.federation.algorithms import make_algorithm
from portfed.federation.local_solve import personal_target, plan_local_solve
from portfed.federation.rounds import run_rounds
from portfed.federation.testing import QuadraticParty

D, K = 4, 5
FEDPLUS = ("fedavg+", "fedgeomed+", "fedcomed+")


def _parties(seed: int) -> list[QuadraticParty]:
    rng = np.random.default_rng(seed)
    return [QuadraticParty.random(D, rng, spread=3.0, learning_rate=0.2) for _ in range(K)]


def _run(name: str, update: str, rounds: int = 6, **knobs: float):
    return run_rounds(_parties(7), make_algorithm(name, **knobs), rounds, 5, seed=0,
                      init_params=np.zeros(D), proximal_update=update)


@pytest.mark.parametrize("update", ["mix", "loss"])
def test_lam_t_zero_cuts_the_aggregate_off_so_the_variants_train_the_same_models(update: str) -> None:
    """λ_t = 0 and line-10 λ = 0: ``z_k = w_k`` and the start is ``w_k``; 𝒜 (mean, smoothed geometric or
    coordinate median) no longer reaches a party, so the three variants' party models are identical —
    and differ from their ρ-rule runs, where the aggregate does reach them."""
    runs = {name: _run(name, update, lam=0.0, lam_t=0.0, sigma=0.5) for name in FEDPLUS}
    models = [runs[name].state.party_models for name in FEDPLUS]
    np.testing.assert_array_equal(models[0], models[1])
    np.testing.assert_array_equal(models[0], models[2])
    assert not np.allclose(runs["fedavg+"].state.global_model, runs["fedcomed+"].state.global_model)
    with_rho = _run("fedcomed+", update, lam=0.0, sigma=0.5).state.party_models
    assert np.max(np.abs(with_rho - models[2])) > 1e-3


@pytest.mark.parametrize("update", ["mix", "loss"])
def test_lam_t_one_with_the_mean_and_line_10_lam_one_is_fedprox(update: str) -> None:
    """λ_t = 1 and λ = 1 with the mean: ``z_k = w̃`` and every party starts from ``w̃``, which is FedProx
    with the same σ (its party models, its aggregate)."""
    sigma = 0.5
    plus = _run("fedavg+", update, lam=1.0, lam_t=1.0, sigma=sigma, rho=0.1)
    prox = _run("fedprox", update, sigma=sigma)
    np.testing.assert_allclose(plus.state.party_models, prox.state.party_models, rtol=0, atol=1e-12)
    np.testing.assert_allclose(plus.state.global_model, prox.state.global_model, rtol=0, atol=1e-12)


def test_lam_t_replaces_the_rho_rule_for_every_variant() -> None:
    """``z_k = (1 − λ_t) w_k + λ_t r`` row by row, whatever the variant's penalty; unset, ρ's rule."""
    rng = np.random.default_rng(3)
    w, r = rng.normal(size=(K, D)), rng.normal(size=D)
    for name in FEDPLUS:
        spec = make_algorithm(name, lam_t=0.3)
        np.testing.assert_allclose(personal_target(w, r, spec.penalty, spec.lam_t, 0), 0.7 * w + 0.3 * r, atol=1e-15)
        plan = plan_local_solve(w, r, spec, round_index=2)
        np.testing.assert_allclose(plan.target, 0.7 * w + 0.3 * r, atol=1e-15)
    rho = 0.25
    default = make_algorithm("fedavg+", rho=rho)
    gamma = rho / (1 + rho)  # paper 000 §5.2.1: λ_k^t = ρ/(1 + ρ) for FedAvg+ (Ψ = ½‖·‖², prox x/(1+ρ))
    np.testing.assert_allclose(personal_target(w, r, default.penalty, None, 0), (1 - gamma) * w + gamma * r,
                               atol=1e-14)


def test_lam_t_is_checked_and_only_fed_plus_takes_it() -> None:
    with pytest.raises(ValueError, match="lam_t must lie in"):
        make_algorithm("fedavg+", lam_t=1.5)
    with pytest.raises(ValueError, match="takes no parameter"):
        make_algorithm("fedprox", lam_t=0.1)
    assert make_algorithm("fedcomed+").lam_t is None
