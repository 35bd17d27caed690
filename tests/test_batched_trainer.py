"""The batched DPG trainer against K per-party DPGTrainers: network, steps, Adam, PVM, sampling, stragglers.

Tolerance: parameters are float32; the batched layers sum in a different order from oneDNN's
convolutions, so the two engines agree to round-off — asserted as ``atol = 1e-6`` on parameters of
size ~1 after a few steps with learning rate 1e-3 (measured differences ≈ 1e-7).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from engines import CONFIG, SEEDS, engines, random_walk, train_plan

from portfed.agents import AgentConfig, build_network
from portfed.agents.batched import BatchedDPGTrainer
from portfed.agents.batched_networks import BatchedEIIECNN
from portfed.agents.pvm import PortfolioVectorMemory
from portfed.data.errors import DataError
from portfed.data.panel import PricePanel
from portfed.envs.windows import price_windows
from portfed.federation import CohortResult, LocalObjective

ATOL = 1e-6


@pytest.mark.parametrize("ohlc", [False, True])
@pytest.mark.parametrize("block", [None, 1, 4, 7, 18])  # window 20: W = 18; blocks 4 and 7 overlap at the end
def test_batched_network_and_its_gradient_equal_each_party_network(ohlc: bool, block: int | None) -> None:
    config = AgentConfig(window=20, features=("close", "high", "low") if ohlc else ("close",))
    panel = random_walk(60, 0, ohlc=ohlc)
    nets = [build_network(config, s) for s in SEEDS]
    windows = torch.from_numpy(price_windows(panel.values, np.arange(25, 31), 20))  # (6, F, m, l)
    # Larger weights than the initial ones: 54–79 % of the first ReLUs and 54–84 % of the second are open.
    with torch.no_grad():
        for net in nets:
            for p in net.parameters():
                p.mul_(3.0).add_(0.05)
    theta = torch.stack([torch.cat([p.detach().reshape(-1) for p in net.parameters()]) for net in nets])
    theta.requires_grad_(True)
    previous = torch.softmax(torch.randn(len(SEEDS), 6, 3, generator=torch.Generator().manual_seed(0)), -1)
    direction = torch.randn(len(SEEDS), 6, 4, generator=torch.Generator().manual_seed(1))
    expected = torch.stack([net(windows, previous[k]) for k, net in enumerate(nets)])
    want = torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad((expected[k] * direction[k]).sum(),
                                                                              list(net.parameters()))])
                        for k, net in enumerate(nets)])
    batched = BatchedEIIECNN(config, block=block)
    history = batched.layout(windows).expand(len(SEEDS), -1, -1, -1)
    got = batched(theta, history, previous)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad((got * direction).sum(), theta)
    torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-6)
    assert (want != 0).float().mean() > 0.9  # a gradient for (almost) every parameter, not a vacuous match


def test_batched_network_refuses_bad_blocks_and_windows() -> None:
    config = AgentConfig(window=8)
    for block in (0, 7, 2.0, True):
        with pytest.raises(ValueError, match="block"):
            BatchedEIIECNN(config, block=block)
    with pytest.raises(ValueError, match="window 8"):
        BatchedEIIECNN(config).layout(torch.ones(2, 1, 3, 9))


def test_initial_state_is_the_reference_state() -> None:
    reference, batched = engines()
    np.testing.assert_array_equal(batched.parameters(), np.stack([r.local_train(None, 0).params for r in reference]))
    np.testing.assert_array_equal(batched.pvm_weights(2), reference[2].pvm.state_dict()["weights"])


@pytest.mark.parametrize("update", ["mix", "loss"])
def test_local_training_matches_per_party_training_with_mix_prox_and_stragglers(update: str) -> None:
    reference, batched = engines()
    rng = np.random.default_rng(0)
    d = batched.n_parameters
    targets, centers = 0.1 * rng.standard_normal((4, d)), 0.1 * rng.standard_normal((4, d))
    sigmas, coefs, steps = [100.0, 250.0, 0.0, 50.0], [0.1, 0.0, 0.2, 0.3], [5, 3, 5, 0]
    start = batched.parameters() + 0.01 * rng.standard_normal((4, d))
    for call in range(3):
        load = start if call == 0 else None
        got = train_plan(batched, load, steps, targets=targets, sigmas=sigmas, prox_centers=centers,
                         prox_coefs=coefs, proximal_update=update)
        for k, trainer in enumerate(reference):
            objective = LocalObjective(target=targets[k], sigma=sigmas[k], prox_center=centers[k],
                                       prox_coef=coefs[k], proximal_update=update)
            want = trainer.local_train(None if load is None else load[k], steps[k], objective)
            np.testing.assert_allclose(got.params[k], want.params, atol=ATOL, rtol=0)
            assert [r.step for r in got.records[k]] == [r.step for r in want.records]
            for a, b in zip(got.records[k], want.records, strict=True):
                assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-7)
                assert a.mean_log_return == pytest.approx(b.mean_log_return, rel=1e-5, abs=1e-7)
                assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-4, abs=1e-7)
                assert a.cash == pytest.approx(b.cash, rel=1e-5, abs=1e-7) and 0 < a.cash < 1
            np.testing.assert_allclose(batched.pvm_weights(k), trainer.pvm.state_dict()["weights"], atol=1e-6)
        # the round's summary, from the step statistics as arrays: the means of the records, NaN without steps
        summary, means = got.summary(), CohortResult.from_records(got.params, got.records)
        np.testing.assert_allclose(summary.train_reward, means.train_reward, rtol=1e-12, atol=0)
        np.testing.assert_allclose(summary.train_loss, means.train_loss, rtol=1e-12, atol=0)
        np.testing.assert_allclose(summary.train_cash, means.train_cash, rtol=1e-12, atol=0)
        assert np.isnan(summary.train_reward[3]) and not np.isnan(summary.train_reward[:3]).any()
    np.testing.assert_array_equal(batched.step_counts, [15, 9, 15, 0])


@pytest.mark.parametrize("ohlc", [False, True])
def test_universes_of_different_sizes_train_as_each_party_alone(ohlc: bool, backend: str) -> None:
    """Parties of 3, 1, 4 and 2 assets in one engine (padded to 4, the padded assets scored −∞:
    batched_head.py) train what each party's own network trains: the padded window rows and — with the
    kernels — the fused step's padding (head.h), else autograd's through the −∞ scores, over a local call
    with a straggler."""
    from dpg_trainer import DPGTrainer

    panels = [random_walk(50 + 9 * k, k, m=m, ohlc=ohlc) for k, m in enumerate([3, 1, 4, 2])]
    config = AgentConfig(window=20, batch_size=8, learning_rate=1e-3, weight_decay=1e-4, beta=0.05,
                         features=("close", "high", "low") if ohlc else ("close",), backend=backend)
    batched = BatchedDPGTrainer(config, panels, SEEDS)
    reference = [DPGTrainer(config, p, s) for p, s in zip(panels, SEEDS, strict=True)]
    assert batched.net.fused_step == (backend == "native") and batched.stacks.padding(np.arange(4)) is not None
    steps = [6, 6, 3, 6]
    got = train_plan(batched, None, steps)
    for k, trainer in enumerate(reference):
        want = trainer.local_train(None, steps[k])
        np.testing.assert_allclose(got.params[k], want.params, atol=ATOL, rtol=0)
        np.testing.assert_allclose(batched.pvm_weights(k), trainer.pvm.state_dict()["weights"], atol=1e-6)
        for a, b in zip(got.records[k], want.records, strict=True):
            assert a.mean_log_return == pytest.approx(b.mean_log_return, rel=1e-5, abs=1e-7)


def test_a_subset_of_parties_trains_and_the_others_keep_their_state() -> None:
    reference, batched = engines()
    before = batched.parameters()
    got = train_plan(batched, before[[3, 1]], 4, parties=[3, 1])
    for row, k in enumerate([3, 1]):
        np.testing.assert_allclose(got.params[row], reference[k].local_train(before[k], 4).params, atol=ATOL, rtol=0)
    after = batched.parameters()
    np.testing.assert_array_equal(after[[0, 2]], before[[0, 2]])
    np.testing.assert_array_equal(batched.step_counts, [0, 4, 0, 4])
    # Party 0 then trains from fresh Adam moments, as its own DPGTrainer does.
    got = train_plan(batched, None, 3, parties=[0])
    np.testing.assert_allclose(got.params[0], reference[0].local_train(None, 3).params, atol=ATOL, rtol=0)


def test_state_dict_round_trip_resumes_identically() -> None:
    _, batched = engines()
    train_plan(batched, None, 3)
    state = batched.state_dict()
    first = train_plan(batched, None, 4).params
    _, other = engines()
    other.load_state_dict(state)
    np.testing.assert_array_equal(train_plan(other, None, 4).params, first)


def test_training_changes_parameters_and_is_seeded() -> None:
    _, a = engines()
    _, b = engines()
    start = a.parameters()
    pa, pb = train_plan(a, None, 3).params, train_plan(b, None, 3).params
    np.testing.assert_array_equal(pa, pb)
    assert np.abs(pa - start).max() > 1e-4


def test_clear_errors() -> None:
    panels = [random_walk(40, 0), random_walk(40, 1)]
    with pytest.raises(ValueError, match="one seed per panel"):
        BatchedDPGTrainer(CONFIG, panels, [0])
    with pytest.raises(DataError, match="fewer than batch_size"):
        BatchedDPGTrainer(CONFIG, [random_walk(25, 0)], [0])
    _, batched = engines()
    d = batched.n_parameters
    with pytest.raises(ValueError, match="shape"):
        train_plan(batched, np.zeros((3, d)), 1)
    with pytest.raises(ValueError, match="distinct"):
        train_plan(batched, None, 1, parties=[1, 1])
    with pytest.raises(IndexError):
        train_plan(batched, None, 1, parties=[7])
    with pytest.raises(ValueError, match="target is None"):
        train_plan(batched, None, 1, sigmas=[0.5] * 4)
    with pytest.raises(ValueError, match="proximal_update"):
        train_plan(batched, None, 1, proximal_update="pull")
    with pytest.raises(ValueError, match="prox_center"):
        train_plan(batched, None, 1, prox_coefs=0.5)
    with pytest.raises(ValueError, match="steps must be >= 0"):
        train_plan(batched, None, [1, 2, -1, 1])
    with pytest.raises(ValueError, match="non-finite"):
        train_plan(batched, np.full((4, d), np.nan), 1)


def _regenerated(panel: PricePanel, seed: int, extra: int = 0) -> PricePanel:
    """``panel`` with its last 12 closes replaced by a new synthetic tail (and ``extra`` more days)."""
    rng = np.random.default_rng(seed)
    real = panel.values[:-12]
    tail = real[-1] * np.exp(np.cumsum(0.02 * rng.standard_normal((12 + extra,) + real.shape[1:]), axis=0))
    dates = pd.bdate_range(panel.dates[0], periods=len(real) + len(tail))
    return PricePanel(np.concatenate([real, tail]), dates, panel.tickers, panel.features)


def test_panel_swaps_match_the_per_party_trainer_across_regenerations() -> None:
    reference, batched = engines()
    rng = np.random.default_rng(1)
    d = batched.n_parameters
    targets = 0.1 * rng.standard_normal((4, d))

    def train_and_compare(steps: list[int]) -> None:
        got = train_plan(batched, None, steps, targets=targets, sigmas=[100.0] * 4)
        for k, trainer in enumerate(reference):
            want = trainer.local_train(None, steps[k], LocalObjective(target=targets[k], sigma=100.0))
            np.testing.assert_allclose(got.params[k], want.params, atol=ATOL, rtol=0)
            np.testing.assert_allclose(batched.pvm_weights(k), trainer.pvm.state_dict()["weights"], atol=1e-6)

    train_and_compare([6, 6, 6, 6])
    # Same-length regenerations of parties 0 and 2 (in place), then a longer panel for party 1.
    for k, seed in ((0, 10), (2, 12)):
        new = _regenerated(reference[k].panel, seed)
        pvm_before = batched.pvm_weights(k)
        batched.set_panel(k, new)
        reference[k].set_panel(new)
        kept = len(new) - 12
        np.testing.assert_array_equal(batched.pvm_weights(k)[:kept], pvm_before[:kept])
        np.testing.assert_array_equal(batched.pvm_weights(k)[kept:],
                                      np.tile(PortfolioVectorMemory.initial_weights(3), (12, 1)))
    train_and_compare([5, 5, 5, 5])
    longer = _regenerated(reference[1].panel, 11, extra=7)
    batched.set_panel(1, longer)
    reference[1].set_panel(longer)
    assert batched.stacks.n_days[1] == len(longer) - CONFIG.window
    train_and_compare([5, 2, 5, 5])
    # The same panel again changes nothing; other tickers are refused.
    state = batched.state_dict()
    batched.set_panel(1, longer)
    np.testing.assert_array_equal(batched.state_dict()["pvm"], state["pvm"])
    other = PricePanel(longer.values, longer.dates, ("X", "Y", "Z"), longer.features)
    with pytest.raises(DataError, match="tickers"):
        batched.set_panel(1, other)
    with pytest.raises(IndexError):
        batched.set_panel(4, longer)


def test_one_party_of_the_engine_trains_and_resumes_alone() -> None:
    reference, batched = engines()
    start = batched.parameters()[2] + 0.01
    got = batched.local_train(2, start, 4, LocalObjective(target=np.zeros(batched.n_parameters), sigma=100.0))
    want = reference[2].local_train(start, 4, LocalObjective(target=np.zeros(batched.n_parameters), sigma=100.0))
    np.testing.assert_allclose(got.params, want.params, atol=ATOL, rtol=0)
    assert [r.step for r in got.records] == [1, 2, 3, 4] and batched.step_count(2) == 4
    np.testing.assert_array_equal(batched.step_counts, [0, 0, 4, 0])
    saved = batched.party_state(2)
    after = batched.local_train(2, None, 3).params
    _, other = engines()
    other.load_party_state(2, saved)
    np.testing.assert_array_equal(other.local_train(2, None, 3).params, after)
    with pytest.raises(ValueError, match="shape"):
        other.load_party_state(1, saved)  # party 1's panel is shorter than party 2's
