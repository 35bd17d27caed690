"""FedAvg+ on portfolios, top to bottom: N parties federate their EIIE agents (paper 000 Alg. 1).

A single-file reading path through portfed's public building blocks, in the spirit of CleanRL:
no runner, no config, no checkpoints.  Each party owns

* its universe (``n_assets`` stocks of the bundled NYSE(N) set) and its training prices — the
  last ``TEST_DAYS`` trading days are held out and never touched here;
* a ``DPGTrainer`` (``examples/dpg_trainer.py``, the plain per-party trainer): the EIIE-CNN, its Adam
  state, its portfolio vector memory
  and its online stochastic batch sampler (Jiang, Xu & Liang 2017).

One FedAvg+ round ``t`` (paper 003 Alg. 1 with the FedAvg+ row of its Table 1: Ψ = ρ/2‖·‖², λ = 0):

1. personalization  ``θ_k = prox_ρ(w_k − w̃) = (w_k − w̃)/(1 + ρ)``          (paper 003 eq. 11)
2. target           ``z_k = w̃ + θ_k``
3. local solve      ``E`` Adam steps from ``w_k``, each followed by
                    ``w ← κ w + (1 − κ) z_k``, ``κ = 1/(1 + ησ)``               (paper 003 eq. 14)
4. server           ``w̃ ← smoothed aggregate of the w_k`` — for Ψ = ρ/2‖·‖² the plain mean
                    (paper 000 eq. 34 with the l2² penalty).

Run it:  ``python examples/fedavg_plus.py`` (about a minute on 2 cores).  The same run through the
library's round loop is ``run_rounds(trainers, make_algorithm("fedavg+"), …)``;
``tests/test_example_fedavg_plus.py`` checks that both give the same models.
"""

from __future__ import annotations

import numpy as np
from dpg_trainer import DPGTrainer

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.data import load_bundled, sample_universes, train_test_split
from portfed.federation import LocalObjective, Penalty, smoothed_aggregate

TEST_DAYS = 252  # the held-out year: not used for training


def make_parties(n_parties: int, n_assets: int, config: AgentConfig, seed: int) -> list[DPGTrainer]:
    """Party k: ``n_assets`` tickers drawn from NYSE(N) and a DPGTrainer on their training prices."""
    market = load_bundled("nyse_n")
    train, _held_out = train_test_split(market, TEST_DAYS)
    universes = sample_universes(market.tickers, n_parties, n_assets, np.random.default_rng(seed))
    return [DPGTrainer(config, train.select(list(tickers)), seed=seed + 1 + k) for k, tickers in enumerate(universes)]


def fedavg_plus(
    trainers: list[DPGTrainer], init: np.ndarray, rounds: int, local_steps: int, *, rho: float, sigma: float
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """``rounds`` FedAvg+ rounds with every party active; returns the party models ``(N, d)``, the
    global model ``(d,)`` and the parties' mean training reward per round."""
    penalty = Penalty("l2sq", rho)
    models = np.tile(np.asarray(init, dtype=np.float64), (len(trainers), 1))  # w_k^0 = w^0
    global_model = smoothed_aggregate(models, penalty).center  # w̃^0 = 𝒜(W^0)
    rewards = []
    for _ in range(rounds):
        round_rewards = []
        for k, trainer in enumerate(trainers):
            theta = penalty.prox(models[k] - global_model)  # step 1
            target = global_model + theta  # step 2
            # the party mixes θ ← κθ + (1 − κ)z after each Adam step, κ = 1/(1 + ησ) with its own η (eq. 14)
            objective = LocalObjective(target=target, sigma=sigma)
            result = trainer.local_train(models[k].copy(), local_steps, objective)  # step 3 (λ = 0: start at w_k)
            models[k] = result.params
            round_rewards.append(np.mean([r.mean_log_return for r in result.records]))
        global_model = smoothed_aggregate(models, penalty).center  # step 4
        rewards.append(float(np.mean(round_rewards)))
    return models, global_model, rewards


def main(n_parties: int = 4, n_assets: int = 5, rounds: int = 20, local_steps: int = 10, seed: int = 0,
         verbose: bool = True) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Build the parties and run FedAvg+ with the portfolio experiment's knobs (ρ = 0.1, σ = 0.01)."""
    config = AgentConfig(window=30, batch_size=30, learning_rate=1e-3, commission=0.0025)
    trainers = make_parties(n_parties, n_assets, config, seed)
    init = flat_parameters(build_network(config, seed))  # one common w^0
    models, global_model, rewards = fedavg_plus(trainers, init, rounds, local_steps, rho=0.1, sigma=0.01)
    if verbose:
        for t in range(0, rounds, max(1, rounds // 5)):
            print(f"round {t:3d}: mean training log return {rewards[t]: .5f}")
        spread = np.linalg.norm(models - global_model, axis=1)
        print(f"final ‖w_k − w̃‖: {np.array2string(spread, precision=4)}")
    return models, global_model, rewards


if __name__ == "__main__":
    main()
