"""The batched round engine: a native cohort gives the same rounds as the per-party adapter, exactly with
the same trainers, and to float32 round-off with the batched DPG trainer against per-party DPGTrainers
for every compared algorithm.

Tolerance for the DPG comparison: ``atol = 3e-6`` on float32 parameters of size ~1 after 3 rounds of
up to 4 Adam steps with learning rate 1e-3.  The engine's CNN step computes the head, the reward and
their gradient in double in its C kernel (``head.h``), the reference in float32 autograd, whose head
gradient is about 1.7e-8 off the float64 one (``tests/test_native.py`` measures both); Adam's first
steps divide a gradient by its own size, so for the few parameters whose gradient is near Adam's ε
that round-off moves the parameter by up to ~2e-6 (measured 1.8e-6; 1e-7 where both engines ran the
same float32 head).  FedMGDA+'s normalized server step amplifies it further (measured 1.1e-5; 3e-5).
A wrong term of the gradient moves the parameters by the learning rate's order, 1e-4 and more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest
from dpg_trainer import DPGTrainer

from portfed.agents import AgentConfig, build_network, flat_parameters
from portfed.agents.batched import BatchedDPGTrainer
from portfed.data.panel import PricePanel
from portfed.federation import CohortPlan, CohortResult, make_algorithm, run_rounds
from portfed.federation.testing import QuadraticParty

# Window 20: the batched network's conv outputs (W = 18) fall into two overlapping blocks of P = 14.
CONFIG = AgentConfig(window=20, batch_size=8, learning_rate=1e-3, weight_decay=1e-4, beta=0.05)
SEEDS = [3, 5, 7, 11]
STEPS = [4, 3, 4, 2]  # stragglers
COMPARED = ["local", "fedavg", "fedprox", "rfa", "comed", "fedavg+", "fedgeomed+", "fedcomed+", "fedamp",
            "heurfedamp", "fedmgda+"]


def _panel(T: int, seed: int) -> PricePanel:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(0.02 * rng.standard_normal((T, 3)), axis=0))
    return PricePanel(close[:, :, None], pd.bdate_range("2020-01-01", periods=T), ("A", "B", "C"), ("close",))


class StackedQuadratic:
    """N quadratic parties behind one native ``train(plan)`` (a test double: it loops over its parties)."""

    def __init__(self, parties: Sequence[QuadraticParty]) -> None:
        self.parties = list(parties)
        self.calls: list[np.ndarray] = []

    @property
    def n_parties(self) -> int:
        return len(self.parties)

    def train(self, plan: CohortPlan) -> CohortResult:
        self.calls.append(plan.parties)
        results = [self.parties[k].local_train(plan.start[row], int(plan.steps[row]), plan.objective(row))
                   for row, k in enumerate(plan.parties.tolist())]
        return CohortResult.from_records(np.stack([r.params for r in results]), [r.records for r in results])


def _quadratics(n: int) -> list[QuadraticParty]:
    rng = np.random.default_rng(0)
    return [QuadraticParty.random(5, rng, learning_rate=0.2, spread=3.0) for _ in range(n)]


def _rows(run) -> list[dict]:
    return [row for record in run.records for row in record.rows()]


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedcomed+", "fedamp", "fedmgda+"])
def test_same_rounds_as_run_rounds_with_the_same_trainers(name: str) -> None:
    spec = make_algorithm(name)
    kwargs = {"k_per_round": 3, "seed": 2, "init_params": np.zeros(5)}
    reference = run_rounds(_quadratics(5), spec, 4, [3, 2, 3, 1, 2], **kwargs)
    stacked = StackedQuadratic(_quadratics(5))
    batched = run_rounds(stacked, spec, 4, [3, 2, 3, 1, 2], **kwargs)
    np.testing.assert_array_equal(batched.state.party_models, reference.state.party_models)
    np.testing.assert_array_equal(batched.state.global_model, reference.state.global_model)
    assert [r.active for r in batched.records] == [r.active for r in reference.records]
    assert [tuple(c) for c in stacked.calls] == [r.active for r in reference.records]  # one call per round
    for a, b in zip(_rows(batched), _rows(reference), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_resume_continues_identically() -> None:
    spec = make_algorithm("fedavg+")
    kwargs = {"k_per_round": 2, "seed": 1, "init_params": np.zeros(5)}
    straight = run_rounds(StackedQuadratic(_quadratics(4)), spec, 4, 2, **kwargs)
    stacked = StackedQuadratic(_quadratics(4))
    half = run_rounds(stacked, spec, 2, 2, **kwargs)
    resumed = run_rounds(stacked, spec, 4, 2, state=half.state, **kwargs)
    np.testing.assert_array_equal(resumed.state.party_models, straight.state.party_models)


@pytest.mark.parametrize("name", COMPARED)
def test_batched_dpg_engine_matches_per_party_engine(name: str) -> None:
    panels = [_panel(50 + 9 * k, k) for k in range(len(SEEDS))]
    init = flat_parameters(build_network(CONFIG, 0))
    spec = make_algorithm(name)
    kwargs = {"k_per_round": 3, "seed": 1, "init_params": init}
    reference = run_rounds([DPGTrainer(CONFIG, p, s) for p, s in zip(panels, SEEDS, strict=True)], spec, 3, STEPS,
                           **kwargs)
    batched = run_rounds(BatchedDPGTrainer(CONFIG, panels, SEEDS), spec, 3, STEPS, **kwargs)
    atol = 3e-5 if name == "fedmgda+" else 3e-6
    assert np.abs(reference.state.party_models - init).max() > 1e-3  # the parties did train
    np.testing.assert_allclose(batched.state.party_models, reference.state.party_models, atol=atol, rtol=0)
    np.testing.assert_allclose(batched.state.global_model, reference.state.global_model, atol=atol, rtol=0)
    for a, b in zip(_rows(batched), _rows(reference), strict=True):
        assert (a["party"], a["active"], a["local_steps"]) == (b["party"], b["active"], b["local_steps"])
        np.testing.assert_allclose(a["train_loss"], b["train_loss"], rtol=1e-4, atol=1e-6)


def test_rejects_an_object_that_is_no_cohort() -> None:
    with pytest.raises(TypeError, match="neither a cohort"):
        run_rounds(_quadratics(2)[0], make_algorithm("fedavg"), 1, 1, seed=0, init_params=np.zeros(5))
