"""Paper 004's CNN as a per-party LocalTrainer and as one stacked cohort: shapes, Local-Solve terms, a
federated run, the stacked cohort against the per-party reference."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from portfed.federation import make_algorithm, run_rounds
from portfed.federation.cohort import CohortPlan, LocalObjective
from portfed.federation.party_cohort import PartyCohort
from portfed.supervised.build import build_data
from portfed.supervised.cnn import CNNModel, make_cnn_parties, paper_cnn
from portfed.supervised.cnn_cohort import CNNCohort, cnn_engine, stacked_logits
from portfed.supervised.config import ImageData, TrainingSection
from portfed.supervised.trainers import party_stream


@pytest.fixture(scope="module")
def digits():
    return build_data(ImageData(kind="images", source="digits", partition="iid", n_parties=3,
                               fractions=(0.6, 0.2, 0.2)))


def test_mnist_shape_and_parameter_count() -> None:
    net = paper_cnn(28, 10)
    assert net(torch.zeros(2, 784, dtype=torch.float64)).shape == (2, 10)
    expected = (25 * 32 + 32) + (25 * 32 * 64 + 64) + (3136 * 512 + 512) + (512 * 10 + 10)
    assert sum(p.numel() for p in net.parameters()) == expected
    with pytest.raises(ValueError, match="divisible by 4"):
        paper_cnn(10, 10)


def test_one_step_is_sgd_with_prox_then_mix(digits) -> None:
    party = make_cnn_parties(digits, 0.05, 4, seed=0)[0]
    model = party.model
    w0 = model.init_params(np.random.default_rng(0))
    center, target = w0 + 0.01, w0 - 0.02
    batch = party_stream(0, 0).integers(0, party.data.n_train, size=(1, 4))[0]
    reference = paper_cnn(8, 10)
    torch.nn.utils.vector_to_parameters(torch.tensor(w0), reference.parameters())
    loss = torch.nn.functional.cross_entropy(reference(torch.as_tensor(party.data.x_train[batch])),
                                             torch.as_tensor(party.data.y_train[batch]))
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in reference.parameters()]).numpy()
    result = party.local_train(w0, 1, LocalObjective(target=target, sigma=30.0, prox_center=center, prox_coef=3.0))
    kappa = 1.0 / (1.0 + 0.05 * 30.0)  # the party's own η = 0.05 (paper 003 eq. 14)
    expected = kappa * (w0 - 0.05 * (grad + 3.0 * (w0 - center))) + (1.0 - kappa) * target
    np.testing.assert_allclose(result.params, expected, rtol=1e-9, atol=1e-12)


def test_federated_cnn_run_learns(digits) -> None:
    parties = make_cnn_parties(digits, 0.1, 20, seed=1)
    model = CNNModel(64, 10)
    init = model.init_params(np.random.default_rng(1))
    before = np.mean([model.score(init, p.x_test, p.y_test)[1] for p in digits.parties])
    run = run_rounds(parties, make_algorithm("fedavg"), 4, 10, seed=0, init_params=init)
    after = np.mean([model.score(run.state.global_model, p.x_test, p.y_test)[1] for p in digits.parties])
    assert np.all(np.isfinite(run.state.global_model)) and after < before


def test_adam_steps_match_torch_and_keep_their_moments_across_rounds(digits) -> None:
    """Paper 004's optimizer: two local trainings of 2 Adam steps equal torch.optim.Adam's 4 steps on the
    same minibatches (the moments survive between the calls)."""
    party = make_cnn_parties(digits, 1e-3, 4, seed=0, optimizer="adam")[0]
    w0 = party.model.init_params(np.random.default_rng(0))
    batches = party_stream(0, 0).integers(0, party.data.n_train, size=(2, 2, 4))
    first = party.local_train(w0, 2, None)
    second = party.local_train(None, 2, None)
    reference = paper_cnn(8, 10)
    torch.nn.utils.vector_to_parameters(torch.tensor(w0), reference.parameters())
    adam = torch.optim.Adam(reference.parameters(), lr=1e-3)
    for index in batches.reshape(4, 4):
        adam.zero_grad()
        torch.nn.functional.cross_entropy(reference(torch.as_tensor(party.data.x_train[index])),
                                          torch.as_tensor(party.data.y_train[index])).backward()
        adam.step()
    expected = torch.nn.utils.parameters_to_vector(reference.parameters()).detach().numpy()
    assert not np.allclose(first.params, w0)
    np.testing.assert_allclose(second.params, expected, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="written for SGD"):
        run_rounds(make_cnn_parties(digits, 1e-3, 4, seed=0, optimizer="adam"), make_algorithm("scaffold"), 1, 1,
                   seed=0, init_params=w0)


def _two_rounds(digits, device: str, precision: str, optimizer: str = "adam") -> tuple[np.ndarray, list[float]]:
    """Two FedAvg rounds of 3 steps (Adam at η = 1e-3, or SGD at η = 0.05) of the CNN on ``device`` in
    ``precision``: the global model and the first party's next step losses."""
    rate = 1e-3 if optimizer == "adam" else 0.05
    parties = make_cnn_parties(digits, rate, 8, seed=0, optimizer=optimizer, device=device, precision=precision)
    init = parties[0].model.init_params(np.random.default_rng(3))
    run = run_rounds(parties, make_algorithm("fedavg"), 2, 3, seed=0, init_params=init)
    return run.state.global_model, [r.loss for r in parties[0].local_train(None, 2, None).records]


def test_float32_is_the_float64_run_to_float32_round_off(digits) -> None:
    """``training.precision: float32`` runs the same arithmetic as float64, rounded: the global models of
    a short run agree to float32 round-off, not bit for bit."""
    w64, losses64 = _two_rounds(digits, "cpu", "float64")
    w32, losses32 = _two_rounds(digits, "cpu", "float32")
    assert not np.array_equal(w64, w32)
    np.testing.assert_allclose(w32, w64, rtol=0, atol=1e-5)
    np.testing.assert_allclose(losses32, losses64, rtol=1e-5)
    party = make_cnn_parties(digits, 1e-3, 8, seed=0, optimizer="adam", precision="float32")[0]
    assert party.model.net[1].weight.dtype == party.adam.exp_avg.dtype == torch.float32


def test_device_and_precision_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown precision 'float16'"):
        CNNModel(64, 10, precision="float16")
    base = {"rounds": 1, "local_steps": 1, "batch_size": 1, "learning_rate": 0.1}
    with pytest.raises(ValueError, match="device 'cuda' is for model 'cnn'"):
        TrainingSection(**base, device="cuda")
    with pytest.raises(ValueError, match="precision 'float32' is for model 'cnn'"):
        TrainingSection(**base, precision="float32")
    with pytest.raises(ValueError, match="device"):
        TrainingSection(**base, model="cnn", device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA device"):
            CNNModel(64, 10, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_run_is_deterministic_and_equals_the_cpu_run_to_round_off(digits) -> None:
    """On CUDA (deterministic cuDNN, no TF32) a seed gives the same numbers twice; with SGD the numbers are
    the CPU's to round-off.  (Not with Adam: its step ``η m̂/(√v̂ + ε)`` is about ``±η`` for any gradient
    far above ε, so where a gradient is round-off-sized the two devices' round-off picks the sign — the
    H200 moved 0.4 % of the weights by up to 1e-4 after six steps.)"""
    first, losses = _two_rounds(digits, "cuda", "float32")
    again, losses_again = _two_rounds(digits, "cuda", "float32")
    np.testing.assert_array_equal(first, again)
    assert losses == losses_again
    for precision, tolerance in (("float32", 1e-5), ("float64", 1e-10)):
        gpu, _ = _two_rounds(digits, "cuda", precision, "sgd")
        cpu, _ = _two_rounds(digits, "cpu", precision, "sgd")
        np.testing.assert_allclose(gpu, cpu, rtol=0, atol=tolerance)


def _bench(*args: str) -> str:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_supervised_cnn.py"
    result = subprocess.run([sys.executable, str(script), "--precisions", "float32", *args],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.extended  # CI's second stage (make test-extended): the benchmark script end to end (~25 s), kept out of make test's 10 minutes
def test_the_cnn_benchmark_counts_the_configs_steps_and_runs_on_the_cpu() -> None:
    """``benchmarks/bench_supervised_cnn.py``: 25 runs of 90 rounds × 20 parties × 10 steps, the two
    fine-tuned arms' 3 runs with 10 steps more (by hand: 19 × 18,000 + 6 × 36,000), one timed step per
    engine."""
    out = _bench("--steps", "1")
    assert "558,000 party-steps" in out and "cpu float32 cohort" in out and "cpu float32 party" in out


@pytest.mark.slow
def test_the_cnn_benchmark_profiles_the_four_parts_of_a_round() -> None:
    """``--round-parts``: a profiled FedAMP round whose four parts each took time over the config's
    2,250 rounds (a renamed function would read 0 s)."""
    out = _bench("--steps", "1", "--engines", "party", "--round-parts", "1")
    parts = re.findall(r"FedAMP round, (.+?): ([0-9.]+) s per round; over the config's 2,250 rounds", out)
    assert [name for name, _ in parts] == ["training (1 local step)", "planning", "server step and records",
                                           "evaluation"]
    assert all(float(seconds) > 0 for _, seconds in parts), parts


@pytest.mark.parametrize(("name", "knobs", "optimizer"), [
    ("fedavg", {}, "adam"), ("fedprox", {}, "adam"), ("fedavg+", {}, "adam"), ("fedamp", {}, "adam"),
    ("fedavg-ft", {"finetune_steps": 2}, "adam"), ("fedavg+", {}, "sgd"), ("scaffold", {}, "sgd"), ("apfl", {}, "sgd"),
])
def test_the_stacked_cohort_is_the_per_party_run(digits, name, knobs, optimizer) -> None:
    """:class:`CNNCohort` (every party in one grouped pass) computes the run of the per-party reference:
    the same minibatches, Adam moments and step counts per party, FedProx's and FedAMP's proximal terms in
    the loss, Fed+'s mix, fine-tuning and the personalised baselines' local rules, with parties that take
    3, 1 and 2 steps.  On the CPU in float64 the grouped convolutions sum in the single ones' order, so the
    tolerance is round-off; a wrong term moves the models by more than 1e-6."""
    rate = 1e-3 if optimizer == "adam" else 0.05
    reference = make_cnn_parties(digits, rate, 8, seed=0, optimizer=optimizer)
    cohort = CNNCohort(digits, rate, 8, 0, optimizer)
    init = cohort.model.init_params(np.random.default_rng(3))
    runs = [run_rounds(engine, make_algorithm(name, **knobs), 2, [3, 1, 2], seed=0, init_params=init)
            for engine in (reference, cohort)]
    assert np.max(np.abs(runs[0].state.party_models - init)) > 1e-3
    np.testing.assert_allclose(runs[1].state.party_models, runs[0].state.party_models, rtol=0, atol=1e-12)
    np.testing.assert_allclose(runs[1].state.global_model, runs[0].state.global_model, rtol=0, atol=1e-12)
    for key, value in runs[0].state.extras.items():
        np.testing.assert_allclose(runs[1].state.extras[key], value, rtol=0, atol=1e-12)
    rows = [[row for record in run.records for row in record.rows()] for run in runs]
    assert [r["train_reward"] for r in rows[1]] == pytest.approx([r["train_reward"] for r in rows[0]], abs=1e-12)
    assert [r["train_loss"] for r in rows[1]] == pytest.approx([r["train_loss"] for r in rows[0]], abs=1e-9)
    for column in ("aggregation_change_mean", "aggregation_change_std", "round_change_mean", "distance_to_global"):
        # the jump is measured from the plan's start: training must not have written into it
        assert [r[column] for r in rows[1]] == pytest.approx([r[column] for r in rows[0]], abs=1e-12, nan_ok=True)


def test_the_stacked_cohort_refuses_what_the_party_refuses(digits) -> None:
    cohort = CNNCohort(digits, 1e-3, 4, 0, "adam")
    init = cohort.model.init_params(np.random.default_rng(0))
    with pytest.raises(ValueError, match="written for SGD"):
        run_rounds(cohort, make_algorithm("scaffold"), 1, 1, seed=0, init_params=init)
    with pytest.raises(ValueError, match="optimizer_state 'reset'"):
        cohort.train(CohortPlan(round_index=0, parties=np.arange(3), steps=np.ones(3, dtype=np.int64),
                                start=np.tile(init, (3, 1)), optimizer_state="reset"))
    with pytest.raises(ValueError, match="unknown optimizer 'sgdm'"):
        CNNCohort(digits, 1e-3, 4, 0, "sgdm")


def test_the_engine_is_stacked_on_a_gpu_and_per_party_on_the_cpu(digits) -> None:
    cohort, model = cnn_engine(digits, 1e-3, 4, 0, "adam", "cpu")
    assert isinstance(cohort, PartyCohort) and model.n_params == cohort.parties[0].model.n_params
    if torch.cuda.is_available():
        cohort, model = cnn_engine(digits, 1e-3, 4, 0, "adam", "cuda")
        assert isinstance(cohort, CNNCohort) and model is cohort.model


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_stacked_cohort_on_cuda_is_the_per_party_run_to_round_off(digits) -> None:
    """On CUDA the stacked cohort (what ``portfed supervised run --device cuda`` trains with) computes the
    per-party run with SGD to round-off, and a seed gives the same numbers twice with Adam."""
    init = CNNModel(64, 10).init_params(np.random.default_rng(3))
    for precision, tolerance in (("float64", 1e-10), ("float32", 1e-5)):
        engines = (make_cnn_parties(digits, 0.05, 8, seed=0, device="cuda", precision=precision),
                   CNNCohort(digits, 0.05, 8, 0, "sgd", "cuda", precision))
        runs = [run_rounds(engine, make_algorithm("fedavg+"), 2, [3, 1, 2], seed=0, init_params=init)
                for engine in engines]
        np.testing.assert_allclose(runs[1].state.party_models, runs[0].state.party_models, rtol=0, atol=tolerance)
    twice = [run_rounds(CNNCohort(digits, 1e-3, 8, 0, "adam", "cuda", "float32"), make_algorithm("fedamp"), 2, 3,
                        seed=0, init_params=init).state.party_models for _ in range(2)]
    np.testing.assert_array_equal(twice[0], twice[1])


def test_stacked_logits_are_each_partys_own_network_on_mnist_sized_images() -> None:
    """:func:`stacked_logits` on 28 × 28 images: party k's logits are ``paper_cnn`` with party k's parameters
    on party k's images (a mixed-up layout, channel order or padding would move them by O(1))."""
    model = CNNModel(784, 10)
    params = np.stack([model.init_params(np.random.default_rng(seed)) for seed in (1, 2)])
    images = np.random.default_rng(0).random((2, 3, 784))
    logits = stacked_logits(model, torch.as_tensor(params), torch.as_tensor(images)).numpy()
    for k in range(2):
        net = paper_cnn(28, 10)
        torch.nn.utils.vector_to_parameters(torch.as_tensor(params[k]), net.parameters())
        np.testing.assert_allclose(logits[k], net(torch.as_tensor(images[k])).detach().numpy(), rtol=0, atol=1e-12)
