"""The collapse detector validated on controls built from mechanisms, not on hand-drawn curves.

* positive control (spike): a federation of convex parties in which, in one round, every party's
  update is scaled by a huge factor (an injected ``scale`` fault) — the aggregate is thrown far away,
  the next round's local training starts there and the learning curve falls: flagged, at that round;
* negative control: the same run without the fault: not flagged;
* all-cash control: an EIIE policy whose cash score dominates the softmax holds cash all through the
  held-out year (fAPV 1, zero volatility): flagged as an all-cash collapse, with a Sharpe of 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from portfed.agents import AgentConfig, EIIEPolicy, build_network
from portfed.data import load_bundled
from portfed.envs import PortfolioEnv
from portfed.evaluation import backtest
from portfed.experiment.party import learning_curve
from portfed.experiment.reports import CollapseRule, detect_collapse
from portfed.federation import make_algorithm, run_rounds
from portfed.federation.faults import Fault
from portfed.federation.testing import QuadraticParty

ROUNDS, FAULT_ROUND = 30, 15


def _curve(faults: tuple[Fault, ...]) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parties = [QuadraticParty.random(6, rng, spread=2.0, learning_rate=0.05) for _ in range(8)]
    run = run_rounds(parties, make_algorithm("fedavg"), ROUNDS, 5, seed=0, init_params=np.zeros(6), faults=faults)
    return learning_curve(pd.DataFrame([row for record in run.records for row in record.rows()]))


def _detect(curve: pd.DataFrame) -> object:
    return detect_collapse(curve["train_reward"].to_numpy(), curve["aggregation_change_mean"].to_numpy(),
                           CollapseRule())


def test_a_far_away_aggregate_is_flagged_at_its_round_and_the_clean_run_is_not() -> None:
    clean = _detect(_curve(()))
    assert not clean.collapsed and clean.kind == ""
    faulty_curve = _curve((Fault("scale", parties=tuple(range(8)), rounds=(FAULT_ROUND,), factor=1e3),))
    report = _detect(faulty_curve)
    assert report.collapsed and report.kind == "spike"
    # The aggregate of round 15 reaches the parties in round 16: the jump and the drop are there.
    assert report.spike_round == FAULT_ROUND + 1
    assert FAULT_ROUND + 1 <= report.round <= FAULT_ROUND + 4
    reward = faulty_curve["train_reward"].to_numpy()
    assert reward[FAULT_ROUND + 1] < reward[0]  # a real fall, below where training started


def test_a_policy_stuck_in_cash_is_an_all_cash_collapse_with_sharpe_zero() -> None:
    config = AgentConfig(window=10, batch_size=8)
    panel = load_bundled("djia").select(["A", "B", "C"])
    env = PortfolioEnv(panel.iloc(slice(-120, None)), window_size=config.window, commission=config.commission)
    stuck, trading = build_network(config, 0), build_network(config, 0)
    with torch.no_grad():
        stuck.cash.bias.fill_(50.0)
    results = {name: backtest(EIIEPolicy(net, config), env) for name, net in (("stuck", stuck), ("trading", trading))}
    mean_cash = {name: float(r.actions[:, 0].mean()) for name, r in results.items()}
    assert mean_cash["stuck"] > 0.999 and mean_cash["trading"] < 0.9
    summary = results["stuck"].summary()
    assert summary["fapv"] == pytest.approx(1.0, abs=1e-9)
    assert summary["sharpe"] == 0.0  # a constant value series: Sharpe 0 by convention, never nan
    flat = np.linspace(0.0, 1.0, ROUNDS)  # a smooth learning curve, no aggregation spike
    steady = np.full(ROUNDS, 0.01)
    assert detect_collapse(flat, steady, CollapseRule(), np.array([mean_cash["stuck"]] * 3)).kind == "all_cash"
    assert not detect_collapse(flat, steady, CollapseRule(), np.array([mean_cash["trading"]] * 3)).collapsed
