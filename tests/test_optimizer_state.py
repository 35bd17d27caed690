"""What a party does with its Adam state when the server's message arrives: keep, reset or average.

The batched engine's ``reset``/``average`` are checked against K per-party ``DPGTrainer`` whose
Adam states are changed by hand as the definitions say (a fresh ``torch.optim.Adam``; the moments'
mean over the active parties), to the engines' float32 round-off: 1e-5 (test_batched_trainer's 1e-6
times 10, because a fresh Adam's first steps divide a coordinate's gradient by its own magnitude,
``m/√v ≈ ±1``, so a coordinate whose gradient is near 0 turns round-off into a step of its own —
measured 2e-6; keeping the state instead moves the models by more than 1e-4, asserted).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engines import engines, train_plan

from portfed.agents.adam import AdamState, adam_step
from portfed.experiment.config import load_config
from portfed.federation import CohortPlan, PartyCohort

ATOL = 1e-5
BETAS, EPS, LR = (0.9, 0.999), 1e-8, 1e-2


def _stepped(k: int = 3, d: int = 5, steps: int = 4) -> tuple[torch.Tensor, AdamState]:
    gen = torch.Generator().manual_seed(0)
    theta, state = torch.randn(k, d, generator=gen), AdamState.zeros_like(torch.zeros(k, d))
    for _ in range(steps):
        adam_step(theta, torch.randn(k, d, generator=gen), state, learning_rate=LR, betas=BETAS, eps=EPS)
    return theta, state


def test_a_reset_row_steps_exactly_as_a_fresh_adam() -> None:
    theta, state = _stepped()
    state.on_new_start(np.array([0, 2]), "reset")
    grad = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    fresh_theta, fresh = theta.clone(), AdamState.zeros_like(theta)
    kept_theta, kept = theta.clone(), _stepped()[1]
    adam_step(theta, grad, state, learning_rate=LR, betas=BETAS, eps=EPS)
    adam_step(fresh_theta, grad, fresh, learning_rate=LR, betas=BETAS, eps=EPS)
    adam_step(kept_theta, grad, kept, learning_rate=LR, betas=BETAS, eps=EPS)
    torch.testing.assert_close(theta[[0, 2]], fresh_theta[[0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(theta[1], kept_theta[1], rtol=0, atol=0)  # row 1 kept its moments and clock
    assert not torch.equal(theta[0], kept_theta[0])
    np.testing.assert_array_equal(state.steps, [5, 5, 5])  # local iterations still count on


def test_average_replaces_the_active_rows_moments_by_their_mean() -> None:
    _, state = _stepped()
    before = state.state_dict()
    state.on_new_start(np.array([1, 2]), "average")
    for name in ("exp_avg", "exp_avg_sq"):
        after = getattr(state, name)
        mean = before[name][[1, 2]].mean(dim=0)
        torch.testing.assert_close(after[1], mean)
        torch.testing.assert_close(after[2], mean)
        torch.testing.assert_close(after[0], before[name][0], rtol=0, atol=0)
    state.on_new_start(np.array([0, 1]), "keep")
    torch.testing.assert_close(state.exp_avg[0], before["exp_avg"][0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="unknown optimizer state handling 'zero'"):
        state.on_new_start(np.array([0]), "zero")


def test_adam_state_without_origin_loads_as_never_reset() -> None:
    _, state = _stepped()
    old = {k: v for k, v in state.state_dict().items() if k != "origin"}  # a checkpoint from before resets
    _, other = _stepped(steps=1)
    other.on_new_start(np.array([0, 2]), "reset")
    np.testing.assert_array_equal(other.origin, [1, 0, 1])
    other.load_state_dict(old)
    np.testing.assert_array_equal(other.origin, [0, 0, 0])


@pytest.mark.parametrize("how", ["reset", "average"])
def test_the_batched_engine_matches_per_party_trainers_changed_by_hand(how: str) -> None:
    reference, batched = engines()
    train_plan(batched, None, 4)
    for trainer in reference:
        trainer.local_train(None, 4)
    start = batched.parameters() + 0.01
    idle = batched.parameters()[2].copy()
    plan = CohortPlan(round_index=1, parties=np.array([0, 1, 3]), steps=np.array([3, 3, 3]), start=start[[0, 1, 3]],
                      optimizer_state=how)
    got = batched.train_steps(plan).params
    active = [reference[k] for k in (0, 1, 3)]
    if how == "average":
        for name in ("exp_avg", "exp_avg_sq"):
            mean = torch.cat([getattr(t.adam, name) for t in active]).mean(dim=0, keepdim=True)
            for trainer in active:
                getattr(trainer.adam, name).copy_(mean)
    for row, trainer in enumerate(active):
        if how == "reset":
            trainer.adam.on_new_start(np.array([0]), "reset")
        np.testing.assert_allclose(got[row], trainer.local_train(start[[0, 1, 3]][row], 3).params, atol=ATOL, rtol=0)
    np.testing.assert_array_equal(batched.parameters()[2], idle)  # the inactive party is untouched
    kept = engines()[1]
    train_plan(kept, None, 4)
    assert np.abs(kept.train_steps(CohortPlan(round_index=1, parties=np.array([0, 1, 3]), steps=np.array([3, 3, 3]),
                                              start=start[[0, 1, 3]])).params - got).max() > 1e-4


def test_a_reset_engine_resumes_bit_for_bit_from_its_state_dict() -> None:
    _, batched = engines()
    train_plan(batched, None, 3)
    plan = CohortPlan(round_index=1, parties=np.arange(4), steps=np.full(4, 2), start=batched.parameters(),
                      optimizer_state="reset")
    batched.train_steps(plan)
    state = batched.state_dict()
    np.testing.assert_array_equal(state["origin"], [3, 3, 3, 3])
    first = train_plan(batched, None, 4).params
    _, other = engines()
    other.load_state_dict(state)
    np.testing.assert_array_equal(train_plan(other, None, 4).params, first)


def test_cohorts_without_the_option_and_bad_values_are_refused() -> None:
    reference, _ = engines()
    plan = CohortPlan(round_index=0, parties=np.array([0]), steps=np.array([1]),
                      start=reference[0].local_train(None, 0).params[None], optimizer_state="reset")
    with pytest.raises(ValueError, match="per-party engine keeps every party's optimizer state"):
        PartyCohort(reference).train(plan)
    with pytest.raises(ValueError, match="optimizer_state must be one of keep, reset, average, got 'fresh'"):
        CohortPlan(round_index=0, parties=np.array([0]), steps=np.array([1]), start=None, optimizer_state="fresh")
    assert plan.subset([0], keep_start=False).optimizer_state == "keep"  # a later chunk loads nothing


def test_the_config_takes_the_option_for_every_network_and_refuses_unknown_values(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("experiment: federated\nagent: {network: lstm}\nfederation: {optimizer_state: average}\n")
    assert load_config(path).federation.optimizer_state == "average"
    path.write_text("experiment: federated\nfederation: {optimizer_state: averaged}\n")
    with pytest.raises(ValueError, match="optimizer_state"):
        load_config(path)
